"""Mutation testing, one module at a time: mutmut 3.8.1 (configured under [tool.mutmut] in pyproject.toml) on the
given module(s), with only the tests that matter for them.

    python -m tools.mutate gptviz/live/store.py --tests tests/test_live_store.py
    python -m tools.mutate gptviz/interp/contributions.py --tests tests/test_contributions.py --show
    python -m tools.mutate gptviz/interp/contributions.py      # the tests are guessed (printed first)
    python -m tools.mutate gptviz/interp/lens.py --functions decompose _unembed --tests tests/test_lens_oracle.py

What it does: mutmut copies gptviz/ and the files of `also_copy` into mutants/, rewrites the module so each of its
functions can be swapped for a mutant (a changed operator, constant, argument...), runs the chosen test files once
to learn which tests reach which function (the stats run, `-n 0`: pytest-xdist's workers would hide the calls from
it), then, for each mutant, runs only the tests that reach its function, in a child forked from a server that has
only collected the tests (a process that has run a multi-threaded torch op cannot fork safely: the child would wait
forever on OpenMP's threads), one at a time by default (--max-children). A mutant is *killed* when one of those
tests fails, *survived* when they all pass (the tests cannot tell it from the real code: look at it with --show or
`mutmut show NAME`), *timeout* when they run far longer than usual (it counts as caught), *no tests* when no chosen
test calls its function. mutmut's time limit is wall-clock: on a loaded machine a mutant whose tests merely ran slowly
is a "timeout", counted as caught. Run it on a quiet machine, and look at every timeout (`mutmut show NAME`): a real
one is a loop that never ends. A child pays for every import the collection did not make: a test file whose tests
import something heavy late imports it at its top (transformers' model classes import `torch._dynamo`, about 3 s of
CPU), so the forked children don't.

    score = (killed + timeout) / (total - no tests - skipped - not checked)

Browser tests (marker `browser`) never run; the Streamlit page tests (tests/app) run only when named in --tests.
mutants/ is wiped before each run unless --keep is given and the last run was of the same modules and tests (then
mutmut retests only the functions whose code changed; a survivor is NOT retested against tests added since: name it,
`mutmut run NAME …` inside mutants/' parent, or make a fresh run to be sure).
Needs `pip install -r requirements-dev.txt`."""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MUTANTS = ROOT / "mutants"
MARKER = MUTANTS / "tools-mutate.json"  # which modules and tests the mutants/ folder was made for
_HELD: list = []  # the run's lock file
STATUSES = ("killed", "survived", "timeout", "no tests", "suspicious", "segfault", "skipped",
            "caught by type check", "check was interrupted by user", "not checked")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m tools.mutate", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("modules", nargs="+", metavar="MODULE", help="a .py file under gptviz/, e.g. gptviz/live/store.py")
    p.add_argument("--tests", nargs="+", metavar="TEST",
                   help="test files or node ids to run (default: the tests/test_*.py whose name holds the module's "
                        "name or whose text imports it)")
    p.add_argument("--functions", nargs="+", metavar="NAME",
                   help="only these functions' mutants, as written: decompose, Contributions.compute (the counts "
                        "are of these functions only)")
    p.add_argument("--max-children", type=int, default=1,
                   help="mutants tested at once (default 1: the machine is shared)")
    p.add_argument("--keep", action="store_true",
                   help="reuse mutants/ from the last run of the same modules and tests (only what changed reruns)")
    p.add_argument("--show", action="store_true", help="print each survivor's diff")
    p.add_argument("--json", help="also write the counts and the survivors' names as JSON here")
    return p.parse_args(argv)


def module_path(arg: str) -> str:
    """The module as mutmut names its files (relative to the root, with /), or a SystemExit saying what is wrong."""
    p = Path(arg)
    p = (p if p.is_absolute() else Path.cwd() / p).resolve()
    try:
        rel = p.relative_to(ROOT / "gptviz")
    except ValueError:
        raise SystemExit(f"tools.mutate: {arg} is not under gptviz/ (only the package's code is mutated)") from None
    if p.suffix != ".py" or not p.is_file():
        raise SystemExit(f"tools.mutate: {arg} is not a Python file of gptviz/")
    return f"gptviz/{rel.as_posix()}"


def guess_tests(module: str) -> list[str]:
    """The top-level test files for ``module``: those whose file name holds the module's name (test_live_store.py
    for gptviz/live/store.py) or whose text imports it by its dotted name."""
    stem = Path(module).stem
    dotted = module[:-3].replace("/", ".")
    parent, _, name = dotted.rpartition(".")
    imports = re.compile(rf"\b{re.escape(dotted)}\b|from {re.escape(parent)} import [^\n]*\b{re.escape(name)}\b")
    found = []
    for f in sorted((ROOT / "tests").glob("test_*.py")):
        if stem in f.stem.split("_") or imports.search(f.read_text(encoding="utf-8")):
            found.append(f"tests/{f.name}")
    return found


def chosen_tests(args: list[str]) -> list[str]:
    """The --tests arguments as paths from the root (a node id keeps its ::part), or a SystemExit."""
    out = []
    for t in args:
        file = t.split("::")[0]
        p = Path(file)
        p = (p if p.is_absolute() else Path.cwd() / p).resolve()
        if not p.exists():
            raise SystemExit(f"tools.mutate: no such test file: {file}")
        try:
            rel = p.relative_to(ROOT).as_posix()
        except ValueError:
            raise SystemExit(f"tools.mutate: {file} is not in this repository") from None
        out.append(rel + t[len(file):])
    return out


def hold_lock():
    """An open file locked for this run, or a SystemExit when another run of this clone holds it: two runs would
    share (and wipe) one mutants/ folder."""
    import fcntl
    import hashlib
    import tempfile

    name = hashlib.sha256(str(ROOT).encode()).hexdigest()[:12]
    f = open(Path(tempfile.gettempdir()) / f"gptviz-mutate-{name}.lock", "a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.seek(0)
        raise SystemExit(f"tools.mutate: another run is using {MUTANTS} (pid {f.read().strip() or '?'}); "
                         "wait for it to finish") from None
    f.seek(0)
    f.truncate()
    f.write(str(os.getpid()))
    f.flush()
    return f


def prepare_folder(target: dict, keep: bool) -> None:
    """Wipe mutants/ unless --keep asks to reuse it for the very same run: mutmut decides whether a file is already
    mutated by its modification time, so a module copied plainly by an earlier run of another module would be taken
    as mutated (with the old run's verdicts) and never rewritten."""
    if keep and MARKER.is_file():
        try:
            same = json.loads(MARKER.read_text()) == target
        except ValueError:
            same = False
        if same:
            print("[mutate] reusing mutants/ (--keep): only the functions whose code changed rerun", flush=True)
            return
        print("[mutate] --keep: the last run was of other modules or tests, starting afresh", flush=True)
    if MUTANTS.exists():
        shutil.rmtree(MUTANTS)
    MUTANTS.mkdir()
    MARKER.write_text(json.dumps(target))


def mutant_patterns(functions: list[str]) -> list[str]:
    """mutmut's name patterns for the mutants of ``functions`` (``decompose`` → ``*.x_decompose__mutmut_*``,
    ``Contributions.compute`` → ``*.xǁContributionsǁcompute__mutmut_*``), or a SystemExit for a malformed name."""
    out = []
    for f in functions:
        parts = f.split(".")
        if not all(p.isidentifier() for p in parts) or len(parts) > 2:
            raise SystemExit(f"tools.mutate: --functions takes names like decompose or Contributions.compute: {f!r}")
        out.append(f"*.x_{f}__mutmut_*" if len(parts) == 1 else f"*.xǁ{parts[0]}ǁ{parts[1]}__mutmut_*")
    return out


def run_mutmut(modules: list[str], tests: list[str], max_children: int, functions: list[str] = ()) -> int:
    """mutmut's own `run`, in this process, with the config of pyproject.toml narrowed to ``modules`` and
    ``tests`` (mutmut reads its config once and keeps it: changing the object it returns is how a run is narrowed
    without a second config file). Returns mutmut's exit status (0 when it ran to the end)."""
    from mutmut.configuration import ProcessIsolation, config

    cfg = config()
    cfg.process_isolation = ProcessIsolation.FORKSERVER  # (pyproject.toml says so too: torch is not fork-safe)
    cfg.only_mutate = list(modules)
    cfg.pytest_add_cli_args_test_selection = list(tests)
    # pytest runs in this process (stats, clean run) and in forked children (the mutants): no xdist workers, whose
    # calls the stats run would not see, no cache, no browser; pyproject.toml says so too
    must = ["-p", "no:cacheprovider", "-n", "0", "-m", "not browser"]
    if cfg.pytest_add_cli_args[:len(must)] != must:
        cfg.pytest_add_cli_args = must + list(cfg.pytest_add_cli_args)
    import mutmut.__main__ as mutmut_main

    # tests/conftest.py then imports the packages the tests import late (transformers, captum, ...) in the process
    # the children are forked from, instead of each child paying for them (tests/lazy_import.py)
    os.environ["GPTVIZ_PRELOAD"] = "1"
    try:
        mutmut_main.cli.main(["run", "--max-children", str(max_children), *mutant_patterns(list(functions))],
                             prog_name="mutmut", standalone_mode=False)
    except SystemExit as exc:  # mutmut exits on a failed clean run or a failed forced-fail run
        return exc.code if isinstance(exc.code, int) else 1
    return 0


def results(module: str, functions: list[str] = ()) -> tuple[dict[str, int], list[str], dict[str, int]]:
    """The count of mutants of each status in ``module`` (of ``functions`` only, when named), the survivors' names
    and, for each function no chosen test calls, its number of mutants (from mutants/MODULE.meta)."""
    from mutmut.mutation.data import SourceFileMutationData
    from mutmut.stats import status_by_exit_code

    data = SourceFileMutationData(path=Path(module))
    data.load()
    counts = dict.fromkeys(STATUSES, 0)
    survivors, untested = [], {}
    keys = {n: c for n, c in data.exit_code_by_key.items() if not functions or function_name(n) in functions}
    for name, code in keys.items():
        status = status_by_exit_code[code]
        counts[status] = counts.get(status, 0) + 1
        if status == "survived":
            survivors.append(name)
        elif status == "no tests":
            untested[function_name(name)] = untested.get(function_name(name), 0) + 1
    counts["total"] = len(keys)
    tested = counts["total"] - counts["no tests"] - counts["skipped"] - counts["not checked"]
    counts["score"] = round((counts["killed"] + counts["timeout"]) / tested, 4) if tested else None
    return counts, sorted(survivors, key=_natural), untested


def function_name(mutant: str) -> str:
    """The function a mutant changes, as written: normalise_code, ClassStore.create (from x_normalise_code__mutmut_3,
    xǁClassStoreǁcreate__mutmut_1)."""
    key = mutant.rpartition("__mutmut_")[0].rpartition(".")[2]
    return ".".join(key.split("ǁ")[1:]) if key.startswith("xǁ") else key.removeprefix("x_")


def _natural(name: str):
    head, _, n = name.rpartition("__mutmut_")
    return head, int(n) if n.isdigit() else 0


def report(rows: dict, seconds: float) -> str:
    cols = ["killed", "survived", "timeout", "no tests", "suspicious", "total", "score"]
    width = max(len(m) for m in rows)
    lines = [f"{'module':<{width}}  " + "  ".join(f"{c:>9}" for c in cols)]
    for module, (counts, _, _) in rows.items():
        cells = [f"{counts[c]:>9}" if c != "score" else
                 (f"{counts[c]:>9.1%}" if counts[c] is not None else f"{'—':>9}") for c in cols]
        lines.append(f"{module:<{width}}  " + "  ".join(cells))
        other = {k: v for k, v in counts.items() if k not in cols and v}
        if other:
            lines.append(f"{'':<{width}}  also: " + ", ".join(f"{k} {v}" for k, v in other.items()))
    lines.append(f"score = (killed + timeout) / (total - no tests - skipped - not checked); wall time {seconds:.0f} s")
    for module, (_, survivors, untested) in rows.items():
        if untested:
            lines.append(f"\nno chosen test calls these functions of {module} (mutants): "
                         + ", ".join(f"{f} ({n})" for f, n in sorted(untested.items())))
        if survivors:
            lines.append(f"\nsurvivors in {module} ({len(survivors)}; look at one with `mutmut show NAME`):")
            lines += [f"  {s}" for s in survivors]
    return "\n".join(lines)


def main(argv=None) -> int:
    a = parse_args(argv)
    if a.max_children < 1:
        raise SystemExit("tools.mutate: --max-children must be at least 1")
    modules = sorted({module_path(m) for m in a.modules})
    if a.tests:
        tests = chosen_tests(a.tests)
    else:
        tests = sorted({t for m in modules for t in guess_tests(m)})
        if not tests:
            raise SystemExit(f"tools.mutate: no test file found for {', '.join(modules)}: name them with --tests")
    print(f"[mutate] modules: {' '.join(modules)}\n[mutate] tests: {' '.join(tests)}", flush=True)
    os.chdir(ROOT)  # mutmut works in the current folder: pyproject.toml, gptviz/ and mutants/ are found from it
    _HELD.append(hold_lock())  # kept open (locked) until this process ends
    start = time.perf_counter()
    functions = a.functions or []
    prepare_folder({"modules": modules, "tests": tests, "functions": functions}, a.keep)
    status = run_mutmut(modules, tests, a.max_children, functions)
    seconds = time.perf_counter() - start
    rows = {m: results(m, functions) for m in modules}
    print()
    print(report(rows, seconds))
    if a.show:
        from mutmut.mutation.diff_apply import get_diff_for_mutant

        for module, (_, survivors, _) in rows.items():
            for name in survivors:
                print(f"\n# {name}\n{get_diff_for_mutant(name, path=module)}")
    if a.json:
        Path(a.json).write_text(json.dumps({"seconds": round(seconds, 1), "tests": tests, "modules": {
            m: {"counts": c, "survivors": s, "no_tests": u} for m, (c, s, u) in rows.items()}}, indent=1))
    if status:
        print(f"[mutate] mutmut stopped early (exit {status}): see its output above", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
