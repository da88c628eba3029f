"""The Circuits page's rows (issue 34): the Shakespeare GPT with its shipped cross-layer transcoder, in AppTest.

- text change: a new 64-token line (a fresh word at its end, so the graph is a cache miss), timed from the rerun's
  start to the drawn page; the goal is p95 ≤ 3 s;
- view change: the node threshold moved (the graph is a cache hit: only pruning and the figure), goal p95 ≤ 1 s.

Every run is checked: no exception, error or warning, the sidebar names the Shakespeare GPT's vocabulary and
parameters, and each text change really computed one graph of 64 tokens with the cross-layer transcoder (the
section's ``attribute`` is wrapped to count the calls), each view change none.
"""
from __future__ import annotations

from tools.bench.models import fresh_words
from tools.bench.report import BenchFailure, failed, row, spread

GOAL_TEXT_MS = 3000
GOAL_VIEW_MS = 1000
PROMPT_T = 64
LINE = ("To be, or not to be, that is the question: Whether 'tis nobler in the mind to suffer the slings and "
        "arrows of outrageous fortune, or to take arms against a sea of {w}")


def bench_circuits(quick: bool) -> list[dict]:
    import time

    from streamlit import config
    from streamlit.testing.v1 import AppTest

    from gptviz.interp.transcoder import load_transcoder, transcoder_path
    from gptviz.model.checkpoint import load_checkpoint
    from gptviz.paths import CHECKPOINTS, ROOT
    from gptviz.ui.sections import circuits
    from tools.bench.pages import check_page

    config.set_option("client.showErrorDetails", "full")
    reps = 4 if quick else 20
    cfg = load_checkpoint(CHECKPOINTS / "shakespeare.safetensors").model.config
    clt = transcoder_path("shakespeare", True)
    label = f"shakespeare · {cfg.num_params():,} params · T={PROMPT_T} · cross-layer transcoder"
    figure = "circuits · shakespeare"
    if not clt.is_file():
        return [failed(figure, label, f"{clt.name} is missing")]
    tc = load_transcoder(clt)
    exp = {"cfg": cfg, "label": "the Shakespeare GPT"}
    calls: list[tuple[int, int]] = []  # (T, n_features of the transcoder) of each graph computed
    orig = circuits.attribute

    def counting(model, tc_, ids, *a, **k):
        calls.append((len(ids), tc_.n_features if tc_.cross_layer else -1))
        return orig(model, tc_, ids, *a, **k)

    circuits.attribute = counting
    try:
        at = AppTest.from_file(str(ROOT / "app_pages" / "circuits.py"), default_timeout=300)
        at.query_params["preset"] = "checkpoint: shakespeare"
        at.run()
        check_page(at, exp, "first run")
        if not at.get("plotly_chart"):
            raise BenchFailure("the first run drew no graph")
        text_times, view_times = [], []
        for i in range(reps):
            at.text_area(key="w.text").input(LINE.format(w=fresh_words()))
            n0 = len(calls)
            t = time.perf_counter()
            at.run()
            text_times.append(time.perf_counter() - t)
            check_page(at, exp, f"text change {i + 1}")
            if calls[n0:] != [(PROMPT_T, tc.n_features)]:
                raise BenchFailure(f"text change {i + 1} computed the graphs {calls[n0:]}, not one of "
                                   f"{PROMPT_T} tokens with the cross-layer transcoder")
            at.slider(key="circ.nodes").set_value(0.75 if i % 2 == 0 else 0.8)
            n0 = len(calls)
            t = time.perf_counter()
            at.run()
            view_times.append(time.perf_counter() - t)
            check_page(at, exp, f"view change {i + 1}")
            if calls[n0:]:
                raise BenchFailure(f"view change {i + 1} computed a graph again")
    except BenchFailure as exc:
        return [failed(figure, label, str(exc))]
    except Exception as exc:  # noqa: BLE001 - the row fails, the bench goes on
        return [failed(figure, label, f"{type(exc).__name__}: {exc}"[:200])]
    finally:
        circuits.attribute = orig
    out = []
    for kind, times, goal in (("text change (a new graph)", text_times, GOAL_TEXT_MS),
                              ("view change (node threshold)", view_times, GOAL_VIEW_MS)):
        text, _, up = spread(times)
        cache = f"cache: {'miss' if kind.startswith('text') else 'hit'} each time"
        out.append(row(f"{figure} · {kind}", label, f"{text} · {cache}", goal=f"≤ {goal} ms", ok=up <= goal))
    return out
