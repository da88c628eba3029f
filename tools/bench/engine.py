"""Part 1, trace: ``trace()`` with targets ÷ a plain forward with targets, same model and tokens, interleaved."""
from __future__ import annotations

import statistics
import time

import torch

from tools.bench.models import big_model_t, next_token_targets
from tools.bench.report import GOALS, row


def median_ratio(fa, fb, reps: int) -> tuple[float, float, float]:
    """Interleave a and b ``reps`` times; return (median a, median b, median of a/b)."""
    ta, tb, r = [], [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        fa()
        t1 = time.perf_counter()
        fb()
        t2 = time.perf_counter()
        ta.append(t1 - t0)
        tb.append(t2 - t1)
        r.append((t1 - t0) / (t2 - t1))
    return statistics.median(ta), statistics.median(tb), statistics.median(r)


def trace_cases() -> list[tuple]:
    """(preset name, config, T) of every trace row: the small presets, and GPT-2 small at the app's cap and at 256."""
    from gptviz.config import preset

    cap = big_model_t()
    return [("default", preset("default", vocab_size=76), 32), ("explainer", preset("explainer", vocab_size=76), 8),
            ("gpt2-small", preset("gpt2-small"), cap), ("gpt2-small", preset("gpt2-small"), 256)]


def bench_trace_case(name: str, cfg, T: int, quick: bool, reps: int | None = None) -> dict:
    """One trace row: ``reps`` interleaved repeats (by default 3 or 9 for a big model, 20 or 200 for a small one)."""
    from gptviz.model.gpt import GPT
    from gptviz.run.trace import trace

    cap = big_model_t()
    model = GPT(cfg)
    idx = torch.randint(0, cfg.vocab_size, (1, T), generator=torch.Generator().manual_seed(0))
    y = next_token_targets(idx)
    big = cfg.n_layer > 4
    if reps is None:
        reps = (3 if quick else 9) if big else (20 if quick else 200)

    def fwd():
        with torch.no_grad():
            model(idx, y)

    def tr():
        trace(model, idx, y)

    fwd(), tr()  # warm up
    t_tr, t_fwd, ratio = median_ratio(tr, fwd, reps)
    gpt2 = name == "gpt2-small"
    return row(f"trace ÷ forward (with targets){' · the app cap' if gpt2 and T == cap else ''}",
               f"{name} · {cfg.num_params():,} params · T={T} · random ids, V={cfg.vocab_size:,}",
               f"median of {reps}: {t_tr * 1e3:.1f} ms ÷ {t_fwd * 1e3:.1f} ms", ratio,
               f"≤ {GOALS['trace_gpt2']}" if gpt2 else "", ratio <= GOALS["trace_gpt2"] if gpt2 else None)


def bench_trace(quick: bool) -> list[dict]:
    return [bench_trace_case(name, cfg, T, quick) for name, cfg, T in trace_cases()]
