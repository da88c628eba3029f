"""The front door and the documentation: the README stays short, opens with a picture and links only to what exists; its
engine example runs and prints what a plain forward pass computes; every picture the docs name exists; the benchmark
page is rendered from the bench's own JSON (checked here against Markdown written out by hand)."""
from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tools.bench.markdown import cell, render
from tools.docs_hooks import MARKER, bench_runs_markdown

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def heading_anchors(markdown: str) -> set[str]:
    """GitHub's and MkDocs' anchors for a file's headings: lower case, punctuation dropped, spaces to hyphens."""
    anchors = set()
    for line in markdown.splitlines():
        m = re.match(r"#+\s+(.*)", line)
        if m:
            text = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower())
            anchors.add(text.replace(" ", "-"))
    return anchors


def test_the_readme_is_at_most_200_lines_and_opens_with_a_picture_of_the_app():
    lines = README.read_text().splitlines()
    assert len(lines) <= 200, len(lines)
    first = next(line for line in lines[1:] if line.strip())
    m = LINK.fullmatch(first.strip())
    assert first.startswith("![") and m, first
    assert (ROOT / m.group(1)).is_file() and m.group(1).endswith(".png")


def test_the_readme_keeps_exactly_the_two_set_up_commands():
    blocks = re.findall(r"```bash\n(.*?)```", README.read_text(), flags=re.S)
    assert [b.strip() for b in blocks] == ["pip install -r requirements.txt && streamlit run app.py",
                                           "bash scripts/test"]


def test_every_link_in_the_readme_resolves():
    links = LINK.findall(README.read_text())
    assert len(links) >= 15
    for link in links:
        if link.startswith(("http://", "https://")):
            continue
        path, _, anchor = link.partition("#")
        target = (ROOT / path) if path else README
        assert target.exists(), link
        if anchor:
            assert anchor in heading_anchors(target.read_text()), link


def test_every_picture_the_docs_name_exists():
    named = 0
    for page in DOCS.glob("*.md"):
        for link in LINK.findall(page.read_text()):
            if link.endswith((".png", ".svg", ".jpg")):
                assert (page.parent / link).is_file(), f"{page.name}: {link}"
                named += 1
    assert named >= 20  # a picture for every page in the tour, and the four special views


def test_the_docs_use_exactly_the_pictures_tools_screenshots_makes():
    from tools.screenshots.shots import all_shots

    made = {f"{shot.name}.png" for shot in all_shots()}
    used = {Path(link).name for page in [README, *DOCS.glob("*.md")] for link in LINK.findall(page.read_text())
            if "screenshots/" in link}
    assert used == made, (sorted(used - made), sorted(made - used))


def test_the_readme_engine_example_runs_and_prints_the_loss_of_a_plain_forward_pass():
    code = re.search(r"```python\n(.*?)```", README.read_text(), flags=re.S).group(1)
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-2000:]
    shape_line, edited_line = out.stdout.strip().splitlines()[-2:]

    import torch
    import torch.nn.functional as F

    from gptviz.model.checkpoint import load_checkpoint

    ckpt = load_checkpoint(ROOT / "checkpoints" / "shakespeare.safetensors")
    ids = torch.tensor([ckpt.tokenizer.encode("To be, or not to be, that is the question")])
    with torch.no_grad():
        logits, _ = ckpt.model(ids[:, :-1])
    loss = F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten())
    T = ids.shape[1] - 1
    assert shape_line == f"(1, {ckpt.model.config.n_head}, {T}, {T}) loss {float(loss):.3f} nats/token"
    edited = float(edited_line.rsplit(" ", 1)[1])
    assert not math.isclose(edited, float(loss), abs_tol=1e-3)  # switching a head off changed the loss


RUN = {"date": "2026-11-27T13:00:00+00:00", "commit": "abc1234", "dirty": False,
       "machine": {"cpu": "Some CPU", "cores": 2, "memory_gib": 23.5, "system": "Linux-6", "python": "3.11.7",
                   "torch": "2.13.0+cpu", "torch_threads": 2},
       "parts": ["trace", "pages"], "command": "python -m tools.bench --json x.json", "seconds": 321,
       "load_average": {"min": 1.02, "max": 2.5, "samples": 22}, "exit_status": 1}
ROWS = [
    {"figure": "trace ÷ forward", "model": "default · 8,320 params", "value": "median of 200: 3.6 ms ÷ 5.4 ms",
     "ratio": 1.1649, "goal": "", "ok": None, "why": ""},
    {"figure": "rerun · a | b", "model": "gpt2-small", "value": "p50 71 ms", "ratio": float("nan"),
     "goal": "≤ 300 ms", "ok": True, "why": ""},
    {"figure": "browser", "model": "default", "value": "median 0.55 s", "ratio": 3.08, "goal": "≤ 3× baseline",
     "ok": False, "why": ""},
    {"figure": "class (the whole part)", "model": "—", "value": "FAILED (no time reported)", "ratio": float("nan"),
     "goal": "", "ok": False, "why": "OSError: no\nport"},
]


def test_a_bench_run_renders_as_the_markdown_written_out_here():
    expected = """## Run x

- **When:** 2026-11-27T13:00:00+00:00 (UTC), 321 s in all
- **Commit:** `abc1234`
- **Command:** `python -m tools.bench --json x.json` (parts: trace, pages)
- **Machine:** 2 cores (Some CPU), 23.5 GiB, no GPU; Linux-6; Python 3.11.7, torch 2.13.0+cpu on 2 threads
- **Load average through the run:** 1.0 to 2.5 (22 samples, every 15 s; the bench's own work included)

**Exit status 1: a goal missed.** 4 rows, 3 with a goal: 1 met, 1 missed, 1 failed.

| figure | model measured | measured | ratio | goal | |
| --- | --- | --- | ---: | --- | --- |
| trace ÷ forward | default · 8,320 params | median of 200: 3.6 ms ÷ 5.4 ms | 1.16 |  |  |
| rerun · a \\| b | gpt2-small | p50 71 ms |  | ≤ 300 ms | met |
| browser | default | median 0.55 s | 3.08 | ≤ 3× baseline | **missed** |
| class (the whole part) | — | FAILED (no time reported) |  |  | **failed**: OSError: no port |
"""
    assert render({"run": RUN, "rows": ROWS}, "Run x") == expected


def test_a_dirty_tree_and_a_run_without_load_samples_say_so():
    text = render({"run": {**RUN, "dirty": True, "load_average": None, "exit_status": 0}, "rows": ROWS[:2]}, "r")
    assert "- **Commit:** `abc1234` (with uncommitted changes to the app)" in text
    assert "- **Load average through the run:** not recorded" in text
    assert "**Exit status 0: every goal met.** 2 rows, 1 with a goal: 1 met, 0 missed, 0 failed." in text
    assert cell("a|b\nc") == "a\\|b c"


def test_the_benchmark_page_is_made_of_every_published_run_newest_first(tmp_path):
    for name, commit in (("2026-11-26", "aaaaaaa"), ("2026-11-27", "bbbbbbb")):
        (tmp_path / f"{name}.json").write_text(json.dumps({"run": {**RUN, "commit": commit}, "rows": ROWS}))
    text = bench_runs_markdown(tmp_path)
    assert text.index("## Run 2026-11-27") < text.index("## Run 2026-11-26")
    assert text.index("`bbbbbbb`") < text.index("`aaaaaaa`")
    (tmp_path / "2026-11-28.json").write_text(json.dumps(ROWS))  # rows alone, as the bench once wrote
    with pytest.raises(ValueError, match="not a bench run written by"):
        bench_runs_markdown(tmp_path)


def test_the_published_runs_are_real_bench_runs_of_this_machine_kind():
    page = (DOCS / "benchmark.md").read_text()
    assert MARKER in page
    files = sorted((DOCS / "bench").glob("*.json"))
    assert files, "docs/bench holds no run"
    for f in files:
        data = json.loads(f.read_text())
        run = data["run"]
        assert re.fullmatch(r"[0-9a-f]{7,}", run["commit"]) and run["date"].startswith("20")
        assert run["machine"]["cores"] and run["load_average"]["samples"] >= 1
        alone = {"class": 10, "live": 10, "long": 10, "families": 10, "browser": 6}  # a part asked for alone is shorter
        least = max(alone[p] for p in run["parts"]) if set(run["parts"]) <= alone.keys() else 20
        assert len(data["rows"]) >= least and run["exit_status"] in (0, 1, 2)


def test_the_readme_lists_every_family_gptviz_opens_with_what_it_adds():
    """The families table is the registry's, row for row (gptviz.model.hf_registry: the Model & weights page shows
    the same rows), and every family in it opens (it is a key of FAMILIES)."""
    from gptviz.model.hf_registry import FAMILIES, FAMILY_TABLE

    table = README.read_text().split("## Model families", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| (.+?) \| `(\w+)` \| (.+?) \|$", table, re.M)
    assert [(t, name, adds) for name, t, adds in rows[1:]] == [(t, r.name, r.adds) for t, r in FAMILY_TABLE.items()]
    assert set(FAMILY_TABLE) == set(FAMILIES)


def test_the_readme_lists_every_page_in_the_navigation():
    from gptviz.ui.nav import PAGES

    table = README.read_text().split("## The pages", 1)[1].split("\n## ", 1)[0]
    assert re.findall(r"^\| ([^|]+?) \| ", table, re.M)[2:] == [title for _, title, *_ in PAGES]
