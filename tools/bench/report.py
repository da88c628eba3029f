"""The bench's goals, its rows (a figure, the model measured, a value, a ratio, a goal) and the table it prints."""
from __future__ import annotations

import math
import statistics
from typing import Optional

GOALS = {"trace_gpt2": 1.15, "page_default_ms": 300, "page_gpt2_ms": 2000,
         "browser_ratio": 2.0,  # issue 37: a text edit redrawn in at most twice the one-chart app's time (was 3)
         "startup_s": 4.0,  # issue 37: from `streamlit run app.py` to Home fully drawn in Chromium
         "trace_memory_mib": 1024}


class BenchFailure(Exception):
    """A row that must not report a time: the page errored, warned, fell back or showed another model."""


def row(figure: str, model: str, value: str, ratio: float = float("nan"), goal: str = "",
        ok: Optional[bool] = None) -> dict:
    return {"figure": figure, "model": model, "value": value, "ratio": ratio, "goal": goal, "ok": ok, "why": ""}


def failed(figure: str, model: str, why: str) -> dict:
    r = row(figure, model, "FAILED (no time reported)", ok=False)
    r["why"] = why
    return r


def mib(n_bytes: float) -> float:
    return n_bytes / 2**20


def spread(times_s: list[float]) -> tuple[str, float, float]:
    """('p50 … · p95 …' or 'p50 … · max of N …', p50 ms, upper ms): p95 (nearest rank) only from 20 samples on."""
    t = sorted(x * 1e3 for x in times_s)
    p50 = statistics.median(t)
    if len(t) >= 20:
        up, label = t[math.ceil(0.95 * len(t)) - 1], f"p95 of {len(t)}"
    else:
        up, label = t[-1], f"max of {len(t)}"
    return f"p50 {p50:.0f} ms · {label} {up:.0f} ms", p50, up


def table(rows: list[dict]) -> str:
    w = max(len(r["figure"]) for r in rows)
    m = max(len(r["model"]) for r in rows)
    v = max(len(r["value"]) for r in rows)
    lines = [f"{'figure':<{w}}  {'model measured':<{m}}  {'measured':<{v}}  {'ratio':>6}  goal", "-" * (w + m + v + 34)]
    for r in rows:
        mark = "" if r["ok"] is None else ("  ✓" if r["ok"] else ("  ✗ FAILED" if r["why"] else "  ✗ MISSED"))
        ratio = "" if r["ratio"] != r["ratio"] else f"{r['ratio']:.2f}"
        lines.append(f"{r['figure']:<{w}}  {r['model']:<{m}}  {r['value']:<{v}}  {ratio:>6}  {r['goal']}{mark}")
    fails = [r for r in rows if r["why"]]
    if fails:
        lines += ["", f"{len(fails)} row(s) FAILED, and report no time:"]
        lines += [f"  ✗ {r['figure']} [{r['model']}]: {r['why']}" for r in fails]
    return "\n".join(lines)


def exit_status(rows: list[dict]) -> int:
    """2 when a row FAILED, else 1 when a goal was missed, else 0."""
    if any(r["why"] for r in rows):
        return 2
    return 0 if all(r["ok"] is not False for r in rows) else 1
