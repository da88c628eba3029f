"""A bench run's JSON (``python -m tools.bench --json F``) as Markdown: what the run was, then every row.

The documentation's benchmark page is made of these (``tools/docs_hooks.py`` renders every file in ``docs/bench/``
when the site is built), so no figure on it is copied by hand. ``python -m tools.bench.markdown F`` prints one."""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

MARKS = {True: "met", False: "missed", None: ""}


def cell(text: object) -> str:
    """One table cell: pipes and line breaks would end the cell or the row, so they are escaped or joined."""
    return " ".join(str(text).split()).replace("|", "\\|")


def status_line(run: dict, rows: list[dict]) -> str:
    goals = [r for r in rows if r.get("ok") is not None]
    missed = [r for r in goals if r["ok"] is False and not r.get("why")]
    failed = [r for r in rows if r.get("why")]
    words = {0: "every goal met", 1: "a goal missed", 2: "a row failed"}.get(run.get("exit_status"), "unknown")
    return (f"**Exit status {run.get('exit_status')}: {words}.** {len(rows)} rows, {len(goals)} with a goal: "
            f"{len(goals) - len(missed) - len(failed)} met, {len(missed)} missed, {len(failed)} failed.")


def header(run: dict) -> list[str]:
    m = run.get("machine", {})
    load = run.get("load_average")
    load_text = (f"{load['min']:.1f} to {load['max']:.1f} ({load['samples']} samples, every 15 s; the bench's own work "
                 "included)" if load else "not recorded")
    dirty = " (with uncommitted changes to the app)" if run.get("dirty") else ""
    return [
        f"- **When:** {run.get('date', '?')} (UTC), {run.get('seconds', '?')} s in all",
        f"- **Commit:** `{run.get('commit', '?')}`{dirty}",
        f"- **Command:** `{run.get('command', '?')}` (parts: {', '.join(run.get('parts', []))})",
        f"- **Machine:** {m.get('cores', '?')} cores ({cell(m.get('cpu', '?'))}), {m.get('memory_gib', '?')} GiB, "
        f"no GPU; {cell(m.get('system', '?'))}; Python {m.get('python', '?')}, torch {m.get('torch', '?')} "
        f"on {m.get('torch_threads', '?')} threads",
        f"- **Load average through the run:** {load_text}",
    ]


def rows_table(rows: list[dict]) -> list[str]:
    lines = ["| figure | model measured | measured | ratio | goal | |", "| --- | --- | --- | ---: | --- | --- |"]
    for r in rows:
        ratio = r.get("ratio")
        ratio_text = "" if ratio is None or (isinstance(ratio, float) and math.isnan(ratio)) else f"{ratio:.2f}"
        mark = "**failed**: " + cell(r["why"]) if r.get("why") else MARKS[r.get("ok")]
        if mark == "missed":
            mark = "**missed**"
        lines.append(f"| {cell(r['figure'])} | {cell(r['model'])} | {cell(r['value'])} | {ratio_text} | "
                     f"{cell(r.get('goal', ''))} | {mark} |")
    return lines


def render(data: dict, title: str) -> str:
    """The Markdown for one run: a heading, what the run was, its status, and every row in the bench's order."""
    run, rows = data["run"], data["rows"]
    return "\n".join([f"## {title}", "", *header(run), "", status_line(run, rows), "", *rows_table(rows), ""])


def load(path: Path) -> dict:
    data = json.loads(Path(path).read_text())
    if not isinstance(data, dict) or "run" not in data or "rows" not in data:
        raise ValueError(f"{path} is not a bench run written by `python -m tools.bench --json` (no run and rows)")
    return data


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m tools.bench.markdown RUN.json", file=sys.stderr)
        return 2
    path = Path(args[0])
    print(render(load(path), path.stem))
    return 0


if __name__ == "__main__":
    sys.exit(main())
