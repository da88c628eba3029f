"""The benchmark: ``python -m gptviz.bench``.

Every figure is measured against a baseline in the same run and reported as a ratio, because these
machines are noisy and an absolute time alone says little:

1. trace time ÷ plain forward time (same model, same tokens, interleaved repeats);
2. page rerun script time after a widget change, p50 and p95 (AppTest), ÷ the rerun time of an
   empty Streamlit script (AppTest's own overhead);
3. peak memory of a GPT-2-small trace at T = 256 ÷ that of a plain forward (separate processes);
4. training steps per second ÷ plain forward passes per second.

``--quick`` runs fewer repeats (for a smoke check); ``--only trace,pages,memory,training`` picks parts.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
PAGES = ["app.py", "pages/1_Tokens_and_batch.py", "pages/2_Embeddings.py", "pages/3_Attention.py",
         "pages/4_MLP_and_residual.py", "pages/5_Logits_and_loss.py", "pages/6_Step_through.py",
         "pages/7_Backward.py", "pages/8_Training.py", "pages/9_Generation.py", "pages/10_Model_and_weights.py"]
GOALS = {"trace_gpt2": 1.15, "page_default_ms": 300, "page_gpt2_ms": 2000}


def _median_ratio(fa, fb, reps: int) -> tuple[float, float, float]:
    """Interleave a and b ``reps`` times; return (median a, median b, median of a/b)."""
    ta, tb, r = [], [], []
    for _ in range(reps):
        t0 = time.perf_counter(); fa(); t1 = time.perf_counter(); fb(); t2 = time.perf_counter()  # noqa: E702
        ta.append(t1 - t0); tb.append(t2 - t1); r.append((t1 - t0) / (t2 - t1))  # noqa: E702
    return statistics.median(ta), statistics.median(tb), statistics.median(r)


def bench_trace(quick: bool) -> list[dict]:
    from .config import preset
    from .model import GPT
    from .trace import trace

    rows = []
    cases = [("default", preset("default", vocab_size=76), 24), ("explainer", preset("explainer", vocab_size=76), 8),
             ("gpt2-small", preset("gpt2-small"), 64), ("gpt2-small", preset("gpt2-small"), 256)]
    for name, cfg, T in cases:
        model = GPT(cfg)
        idx = torch.randint(0, cfg.vocab_size, (1, T), generator=torch.Generator().manual_seed(0))
        big = cfg.n_layer > 4
        reps = (3 if quick else 7) if big else (20 if quick else 200)

        def fwd():
            with torch.no_grad():
                model(idx)

        def tr():
            trace(model, idx)

        fwd(), tr()  # warm up
        t_tr, t_fwd, ratio = _median_ratio(tr, fwd, reps)
        rows.append({"figure": f"trace ÷ forward · {name} T={T}", "value": f"{t_tr * 1e3:.1f} ms ÷ {t_fwd * 1e3:.1f} ms",
                     "ratio": ratio, "goal": f"≤ {GOALS['trace_gpt2']}" if name == "gpt2-small" else "",
                     "ok": ratio <= GOALS["trace_gpt2"] if name == "gpt2-small" else None})
    return rows


def _drive(at, page: str, step: int) -> None:
    """A change a user would make, different every time: even steps change a view setting (cached
    trace), odd steps change the text (a new trace is computed)."""
    if step % 2 == 0:
        at.checkbox(key="w.show_values").set_value(step % 4 == 0)
    else:
        at.text_area(key="w.text").input(f"the cat sat on the mat {step}.")


def bench_pages(quick: bool, shape: str) -> list[dict]:
    from streamlit.testing.v1 import AppTest

    reps = 4 if quick else 15
    empty = Path(tempfile.mkdtemp()) / "empty.py"
    empty.write_text("import streamlit as st\nst.write('hi')\n")
    at0 = AppTest.from_file(str(empty), default_timeout=120).run()
    base = []
    for _ in range(reps):
        t = time.perf_counter(); at0.run(); base.append(time.perf_counter() - t)  # noqa: E702
    base_ms = statistics.median(base) * 1e3
    rows = []
    query = {} if shape == "default" else {"preset": "gpt2-small", "tokenizer": "gpt2"}
    goal = GOALS["page_default_ms"] if shape == "default" else GOALS["page_gpt2_ms"]
    for page in PAGES:
        at = AppTest.from_file(str(ROOT / page), default_timeout=300)
        for k, v in query.items():
            at.query_params[k] = v
        at.run()
        if at.exception:
            rows.append({"figure": f"rerun · {shape} · {page}", "value": "exception: " + at.exception[0].message[:80],
                         "ratio": float("nan"), "goal": f"≤ {goal} ms", "ok": False})
            continue
        at.run()  # warm: caches filled as a user's first view fills them
        times = []
        for i in range(reps):
            _drive(at, page, i)
            t = time.perf_counter()
            at.run()
            times.append(time.perf_counter() - t)
        times.sort()
        p50 = statistics.median(times) * 1e3
        p95 = times[min(len(times) - 1, int(round(0.95 * (len(times) - 1))))] * 1e3
        rows.append({"figure": f"rerun · {shape} · {Path(page).stem}", "value": f"p50 {p50:.0f} ms · p95 {p95:.0f} ms",
                     "ratio": p50 / base_ms, "goal": f"≤ {goal} ms", "ok": p95 <= goal})
    rows.append({"figure": "rerun · empty script (baseline)", "value": f"p50 {base_ms:.1f} ms", "ratio": 1.0, "goal": "",
                 "ok": None})
    return rows


_MEM_SCRIPT = r"""
import sys, torch
sys.path.insert(0, {root!r})
from gptviz import GPT, preset, trace
from gptviz.perf import tune_allocator
tune_allocator()
cfg = preset("gpt2-small")
model = GPT(cfg)
idx = torch.randint(0, cfg.vocab_size, (1, 256), generator=torch.Generator().manual_seed(0))
def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])  # KiB
open("/proc/self/clear_refs", "w").write("5")  # restart the peak (VmHWM) from here
before = status("VmRSS")
if {mode!r} == "trace":
    t = trace(model, idx)
else:
    with torch.no_grad():
        out = model(idx)
print(before, status("VmHWM"))
"""


def bench_memory() -> list[dict]:
    """Peak resident memory of one GPT-2-small trace at T=256, over the model's own, in a fresh process."""
    res = {}
    for mode in ("forward", "trace"):
        out = subprocess.run([sys.executable, "-c", _MEM_SCRIPT.format(root=str(ROOT), mode=mode)],
                             capture_output=True, text=True, check=True).stdout.split()
        res[mode] = (int(out[0]) / 1024, int(out[1]) / 1024)  # MiB
    model_mb = res["trace"][0]
    tr_mb = res["trace"][1] - res["trace"][0]
    fw_mb = res["forward"][1] - res["forward"][0]
    return [{"figure": "peak memory · GPT-2 small trace T=256",
             "value": f"+{tr_mb:.0f} MB over the model's {model_mb:.0f} MB; a forward pass +{fw_mb:.0f} MB",
             "ratio": tr_mb / max(fw_mb, 1.0), "goal": "≤ 1 GB", "ok": tr_mb < 1024}]


def bench_training(quick: bool) -> list[dict]:
    from .config import preset
    from .model import GPT
    from .tasks import make_task
    from .training import DEFAULTS, TrainConfig, model_config_for, train

    rows = []
    steps = 30 if quick else 150
    for label, task_name in (("default model · text", "text"), ("sort task", "sort")):
        task = make_task(task_name)
        if task_name == "text":
            cfg = preset("default", vocab_size=task.vocab_size)
        else:
            d = DEFAULTS["sort"]
            cfg = model_config_for(task, d["n_layer"], d["n_head"], d["n_embd"])
        model = GPT(cfg)
        bs = 32 if task_name == "text" else DEFAULTS["sort"]["batch_size"]
        tc = TrainConfig(steps=steps, batch_size=bs, eval_every=steps, snapshot_every=steps)
        t = time.perf_counter()
        train(model, task, tc)
        sps = steps / (time.perf_counter() - t)
        b = task.batch(bs, torch.Generator().manual_seed(0))
        t = time.perf_counter()
        with torch.no_grad():
            for _ in range(steps):
                model(b.x)
        fps = steps / (time.perf_counter() - t)
        rows.append({"figure": f"training steps/s · {label}", "value": f"{sps:.0f} steps/s vs {fps:.0f} forwards/s",
                     "ratio": sps / fps, "goal": "", "ok": None})
    return rows


def table(rows: list[dict]) -> str:
    w = max(len(r["figure"]) for r in rows)
    v = max(len(r["value"]) for r in rows)
    lines = [f"{'figure':<{w}}  {'measured':<{v}}  {'ratio':>6}  goal", "-" * (w + v + 30)]
    for r in rows:
        mark = "" if r["ok"] is None else ("  ✓" if r["ok"] else "  ✗ MISSED")
        ratio = "" if r["ratio"] != r["ratio"] else f"{r['ratio']:.2f}"
        lines.append(f"{r['figure']:<{w}}  {r['value']:<{v}}  {ratio:>6}  {r['goal']}{mark}")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m gptviz.bench", description="gptviz's benchmark (see the module doc).")
    p.add_argument("--quick", action="store_true", help="fewer repeats")
    p.add_argument("--only", default="trace,pages,memory,training")
    p.add_argument("--json", help="also write the rows as JSON here")
    a = p.parse_args(argv)
    torch.set_num_threads(int(os.environ.get("GPTVIZ_THREADS", "2")))
    from .perf import tune_allocator

    tune_allocator()  # as the app does (gptviz.ui imports it): measure what users get
    parts = set(a.only.split(","))
    rows: list[dict] = []
    if "trace" in parts:
        rows += bench_trace(a.quick)
    if "pages" in parts:
        rows += bench_pages(a.quick, "default") + bench_pages(a.quick, "gpt2-small")
    if "memory" in parts:
        rows += bench_memory()
    if "training" in parts:
        rows += bench_training(a.quick)
    print(table(rows))
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0 if all(r["ok"] is not False for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
