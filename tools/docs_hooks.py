"""MkDocs hooks (``mkdocs.yml``'s ``hooks``): the benchmark page's runs are rendered from the bench's own JSON when the
site is built, so no figure on that page is copied by hand."""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # mkdocs imports this file by path: make `tools` importable
    sys.path.insert(0, str(ROOT))

from tools.bench.markdown import load, render  # noqa: E402

MARKER = "<!-- bench-runs -->"
RUNS = ROOT / "docs" / "bench"


def bench_runs_markdown(folder: Path = RUNS) -> str:
    """Every run in ``folder`` (``*.json``, newest name first), each a section."""
    files = sorted(folder.glob("*.json"), reverse=True)
    if not files:
        raise ValueError(f"no bench run in {folder}: run `python -m tools.bench --json {folder}/NAME.json`")
    return "\n".join(render(load(f), f"Run {f.stem}") for f in files)


def on_page_markdown(markdown: str, page, config, files) -> str:  # MkDocs' hook signature
    if MARKER in markdown:
        return markdown.replace(MARKER, bench_runs_markdown())
    return markdown
