"""The house rules, read from the source: layers import only the layers below them, no import circle (imports
inside functions count), the engine imports without Streamlit, only the ui layer and the pages import it, pages
do no model math, no file passes 450 lines, every module says what it is for."""
import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 450

# Each folder (or top-level module) of gptviz, with its layer. A module may import its own layer and the ones
# below; training (5.5) may import interp (5), not the reverse.
LAYERS = {
    "gptviz.config": 1, "gptviz.config_gemma": 1, "gptviz.config_moe": 1, "gptviz.config_rope": 1,
    "gptviz.config_sizes": 1, "gptviz.paths": 1,
    "gptviz.perf": 1,
    "gptviz.text": 2,
    "gptviz.model": 3,
    "gptviz.run": 4,
    "gptviz.interp": 5,
    "gptviz.training": 5.5,
    "gptviz.present": 6, "gptviz.live": 6,
    "gptviz": 6.5,  # the public API (gptviz/__init__.py)
    "gptviz.commands": 6.5,  # the commands: gptviz/commands/ (cli, train, report, train_sae, neurons)
    # the shims kept for the recorded `python -m gptviz.X` forms (see gptviz/commands/__init__.py)
    "gptviz.train": 6.5, "gptviz.report": 6.5, "gptviz.neurons": 6.5, "gptviz.train_sae": 6.5,
    "gptviz.ui": 7,
    "app_pages": 8, "app": 8,
}


def source_files(root: Path = ROOT) -> list[Path]:
    return sorted([*(root / "gptviz").rglob("*.py"), *(root / "app_pages").glob("*.py"), *root.glob("app.py")])


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def layer_of(mod: str) -> float:
    parts = mod.split(".")
    for n in range(len(parts), 0, -1):
        key = ".".join(parts[:n])
        if key in LAYERS:
            return LAYERS[key]
    raise AssertionError(f"{mod} is in no layer: add its folder to LAYERS")


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """module -> every project module it imports, anywhere in the file (inside functions too)."""
    modules = {module_name(p, root): p for p in source_files(root)}
    packages = {m for m, p in modules.items() if p.name == "__init__.py"}
    graph = {}
    for mod, path in modules.items():
        out = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = mod.split(".") if mod in packages else mod.split(".")[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                names = [f"{target}.{a.name}" if f"{target}.{a.name}" in modules else target for a in node.names]
            for n in names:
                while n and n not in modules:
                    n = n.rpartition(".")[0]
                # a package re-exporting its children, or a child reading its own package, is not a design edge
                if n and n != mod and not mod.startswith(n + ".") and not n.startswith(mod + "."):
                    out.add(n)
        graph[mod] = out
    return graph


def wrong_way(graph: dict[str, set[str]]) -> list[str]:
    return [f"{m} (layer {layer_of(m)}) imports {t} (layer {layer_of(t)})"
            for m, targets in sorted(graph.items()) for t in sorted(targets) if layer_of(t) > layer_of(m)]


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for m in graph:
        if m not in index:
            visit(m)
    return found


def test_every_module_is_in_a_layer_and_imports_only_its_own_or_lower_layers():
    bad = wrong_way(import_graph())
    assert not bad, "\n".join(bad)


def test_no_import_circle_even_through_imports_inside_functions():
    assert not circles(import_graph())


def test_the_checks_see_an_import_inside_a_function_a_relative_circle_and_a_wrong_way_import(tmp_path):
    files = {
        "gptviz/__init__.py": '"""api"""\n',
        "gptviz/model/__init__.py": '"""m"""\nfrom .gpt import GPT\n',  # a package re-exporting a child
        "gptviz/model/gpt.py": '"""gpt"""\nclass GPT:\n    def f(self):\n        from .hf import load\n',
        "gptviz/model/hf.py": '"""hf"""\nfrom .gpt import GPT\n',
        "gptviz/run/trace.py": '"""trace"""\ndef f():\n    from ..present import words\n',
        "gptviz/present/words.py": '"""words"""\nfrom ..run import trace\n',
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    graph = import_graph(tmp_path)
    assert sorted(map(sorted, circles(graph))) == [["gptviz.model.gpt", "gptviz.model.hf"],
                                                   ["gptviz.present.words", "gptviz.run.trace"]]
    assert wrong_way(graph) == ["gptviz.run.trace (layer 4) imports gptviz.present.words (layer 6)"]
    assert "gptviz.model.gpt" not in graph["gptviz.model"]  # the re-export is not an edge


def test_no_source_file_passes_450_lines_and_each_says_what_it_is_for():
    long = {p.relative_to(ROOT).as_posix(): n for p in [*source_files(), *(ROOT / "tools").rglob("*.py")]
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, long
    silent = [p.relative_to(ROOT).as_posix() for p in source_files()
              if p.parent != ROOT / "app_pages" and p != ROOT / "app.py"
              and not ast.get_docstring(ast.parse(p.read_text(encoding="utf-8")))]
    assert not silent, silent


def test_no_pages_folder_and_no_write_to_a_private_streamlit_attribute():
    assert not (ROOT / "pages").exists(), "page files live in app_pages/, which Streamlit does not auto-discover"
    private = re.compile(r"(PagesManager|_pages_manager|uses_pages_directory)")
    hits = [p.relative_to(ROOT).as_posix() for p in source_files() if private.search(p.read_text(encoding="utf-8"))]
    assert not hits, hits


def test_engine_imports_without_streamlit():
    engine = [m for m in import_graph() if layer_of(m) < 7 and not m.endswith("__main__")]
    code = ("import sys\n" + "".join(f"import {m}\n" for m in engine)
            + "import tools.bench\nassert 'streamlit' not in sys.modules, 'streamlit was imported'")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


def test_only_the_ui_layer_and_pages_import_streamlit():
    for path in (ROOT / "gptviz").rglob("*.py"):
        rel = path.relative_to(ROOT).as_posix()
        imports = re.search(r"^\s*(import streamlit|from streamlit)", path.read_text(), re.M)
        if rel.startswith("gptviz/ui/"):
            continue
        assert not imports, f"{rel} imports streamlit"


def test_pages_do_no_model_math():
    banned = re.compile(r"\bF\.\w+\(|torch\.(softmax|matmul|exp|log)|np\.(log|exp)\(|\bmodel\.run\(|\.backward\(|"
                        r"log_softmax|@ ")
    for path in [ROOT / "app.py", *sorted((ROOT / "app_pages").glob("*.py"))]:
        code = "\n".join(line for line in path.read_text().splitlines() if "st.code(" not in line)
        assert not banned.search(code), (path.name, banned.search(code).group(0))
