"""Part 2, pages: each page's script time after a view change and after a text change, in AppTest."""
from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from gptviz.interp import neuron_jobs
from gptviz.paths import ROOT
from tools.bench.models import LONG_TEXT, big_model_t, expected_model, fresh_words, shown_model
from tools.bench.report import BenchFailure, failed, row, spread

IDLE_WAIT_S = 600  # the longest a page's background work may run on after its rows


def app_pages() -> list[str]:
    """The page files the app serves, from its navigation list (gptviz.ui.nav, which imports Streamlit)."""
    from gptviz.ui.nav import available

    return [p[0] for p in available()]


def check_page(at, exp: dict, when: str) -> None:
    """After every run: no exception, no error, no warning, and the sidebar shows the expected model."""
    if at.exception:
        e = at.exception[0]
        where = (e.stack_trace or [""])[-1].strip().split("\n")[0]
        raise BenchFailure(f"{when}: exception: {e.message[:160]} ({where})")
    if at.error:
        raise BenchFailure(f"{when}: st.error: {str(at.error[0].value)[:160]}")
    if at.warning:
        raise BenchFailure(f"{when}: st.warning: {str(at.warning[0].value)[:160]}")
    shown = [s for c in at.sidebar.caption for s in [shown_model(str(c.value))] if s]
    if not shown:
        raise BenchFailure(f"{when}: the sidebar shows no 'vocab_size = …, set by the tokenizer · … parameters'")
    v, p = shown[0]
    cfg = exp["cfg"]
    if (v, p) != (cfg.vocab_size, cfg.num_params()):
        raise BenchFailure(f"{when}: the page shows vocab_size {v:,} and {p:,} parameters, not the "
                           f"{cfg.vocab_size:,} and {cfg.num_params():,} of {exp['label']} (a fallback?)")


# The query each page gets besides the row's model. Lesson 1 pins the char-bpe tokenizer (its subject is char BPE),
# so on the gpt2-small row its trace was a char-bpe model (not GPT-2 small) reading the text as ~225 char-bpe tokens,
# not the row's T; lesson 2's first step reads the sidebar's model, tokenizer and text (it pins only layer and head).
PAGE_QUERY = {"lessons": {"lesson": "02_one_attention_head", "lstep": "1"}}


def page_query(page: str, exp: dict) -> dict:
    """The address a row opens ``page`` at: the row's model and text, and the page's own choices."""
    return {**exp["query"], **PAGE_QUERY.get(Path(page).stem, {})}


class TraceCounter:
    """Counts the traces the app really computes (cache misses): the (B, T) of each in ``calls``, and in
    ``params`` the parameter count of its configured model (None for a loaded one, whose config is not sent)."""

    def __init__(self):
        from gptviz.ui import resources

        self.resources = resources
        self.orig = getattr(resources, "_compute_trace", None)
        self.calls: list[tuple[int, int]] = []
        self.params: list[int | None] = []
        if self.orig is not None:
            def counting(cfg_json, model_key, x, *a, **k):
                self.calls.append((len(x), len(x[0]) if x else 0))
                self.params.append(_params(cfg_json) if model_key is None else None)
                return self.orig(cfg_json, model_key, x, *a, **k)

            resources._compute_trace = counting

    @property
    def known(self) -> bool:
        return self.orig is not None

    def close(self) -> None:
        if self.orig is not None:
            self.resources._compute_trace = self.orig


def _params(cfg_json: str) -> int | None:
    import json

    from gptviz.config import ModelConfig

    try:
        return ModelConfig.from_dict(json.loads(cfg_json)).num_params()
    except (ValueError, TypeError):
        return None


def _traces_text(Ts: list[int], params: list[int | None]) -> str:
    return ", ".join(f"T={T} of {p:,} params" if p is not None else f"T={T} (a loaded model)"
                     for T, p in sorted(set(zip(Ts, params)), key=lambda tp: (tp[0], tp[1] or 0)))


def _view_change(at, i: int) -> None:
    """A view setting changed (numbers in cells on or off): the sidebar's view fold is opened first, untimed, as a user
    opens it (its widgets exist only while it is open)."""
    from gptviz.ui.page import VIEW_FOLD

    if not any(c.key == "w.show_values" for c in at.checkbox):
        at.session_state[VIEW_FOLD] = True
        at.run()
    at.checkbox(key="w.show_values").set_value(i % 2 == 0)


def type_text(at, text: str) -> None:
    """A student's new text: the sidebar's, and on the Generation page its prompt too (a widget of the page's own,
    which starts as the text's first line and then keeps what was typed in it, so a sidebar change alone leaves the
    prompt, and the page's work, as they were)."""
    at.text_area(key="w.text").input(text)
    for box in at.text_input:
        if box.key == "gen.prompt":
            box.input(text.splitlines()[0] if text.strip() else text)


def _text_change(at, shape: str, exp: dict) -> None:
    w = fresh_words()
    if "text_for" in exp:  # a text of exactly the row's T tokens
        type_text(at, exp["text_for"](w))
    else:
        type_text(at, f"the {w} sat on the mat." if shape == "default" or exp.get("sentences") else f"{w} {LONG_TEXT}")


def _empty_script_ms(AppTest, reps: int) -> tuple[float, int]:
    """(median ms, samples) of rerunning a one-line script: the baseline every page row is divided by."""
    empty = Path(tempfile.mkdtemp()) / "empty.py"
    empty.write_text("import streamlit as st\nst.write('hi')\n")
    at0 = AppTest.from_file(str(empty), default_timeout=120).run()
    base = []
    for _ in range(reps * 2):
        t = time.perf_counter()
        at0.run()
        base.append(time.perf_counter() - t)
    return statistics.median(base) * 1e3, len(base)


def _bench_page(AppTest, page: str, shape: str, exp: dict, reps: int, base_ms: float,
                counter: TraceCounter) -> list[dict]:
    """The two rows of one page (view change, text change), or one FAILED row."""
    cap = exp.get("T") or big_model_t()
    figure = f"rerun · {shape} · {Path(page).stem}"
    label = f"{exp['label']} · T=? · {exp['tokenizer']}"
    first_call = len(counter.calls)
    rows = []
    try:
        at = AppTest.from_file(str(ROOT / page), default_timeout=300)
        for k, v in page_query(page, exp).items():
            at.query_params[k] = v
        at.run()
        check_page(at, exp, "first run")
        at.run()  # warm: caches filled as a user's first view fills them
        check_page(at, exp, "second run")
        result = {}
        for kind in ("view change", "text change"):
            times, misses = [], 0
            for i in range(reps):
                if kind == "view change":
                    _view_change(at, i)
                else:
                    _text_change(at, shape, exp)
                n0 = len(counter.calls)
                t = time.perf_counter()
                at.run()
                dt = time.perf_counter() - t
                check_page(at, exp, f"{kind} {i + 1}")  # a failed or fallen-back run never counts
                misses += len(counter.calls) > n0
                times.append(dt)
            result[kind] = (times, misses)
        seen_T, seen_params = [T for _, T in counter.calls[first_call:]], counter.params[first_call:]
        Ts = sorted(set(seen_T))
        # one trace must be the row's own: its model at its T (a page may also trace a probe, or a lesson its own text)
        own = (cap, exp["cfg"].num_params())
        if shape != "default" and not exp.get("loaded") and Ts and own not in zip(seen_T, seen_params):
            raise BenchFailure(f"no trace of {exp['label']} had T={cap} (the traces: "
                               f"{_traces_text(seen_T, seen_params)})")
        t_label = "T=" + "/".join(map(str, Ts)) if Ts else "T=— (draws no trace)"
        label = f"{exp['label']} · {t_label} · {exp['tokenizer']}"
        for kind, (times, misses) in result.items():
            text, p50, up = spread(times)
            cache = (f"cache: {reps - misses} hit, {misses} miss" if counter.known and Ts
                     else "no trace" if counter.known else "cache: unknown")
            goal_ok = up <= exp["goal_ms"] if kind == "text change" or shape == "default" else None
            rows.append(row(f"{figure} · {kind}", label, f"{text} · {cache}", p50 / base_ms,
                            f"≤ {exp['goal_ms']} ms" if goal_ok is not None else "", goal_ok))
    except BenchFailure as exc:
        rows.append(failed(figure, label, str(exc)))
    except Exception as exc:  # noqa: BLE001 - a bench row fails, the bench goes on
        rows.append(failed(figure, label, f"{type(exc).__name__}: {exc}"[:200]))
    return rows


def bench_pages(quick: bool, shape: str, only: list[str] | None = None) -> list[dict]:
    """The rows of every page the app serves (or of the pages named in ``only``, by file stem: lessons, home…)."""
    from streamlit import config
    from streamlit.testing.v1 import AppTest

    config.set_option("client.showErrorDetails", "full")  # a failed row names the real exception
    reps = 4 if quick else 20
    rows = []
    try:
        exp = expected_model(shape)
    except BenchFailure as exc:
        return [failed(f"rerun · {shape} · every page", shape, str(exc))]
    pages = app_pages()
    if only:
        unknown = sorted(set(only) - {Path(p).stem for p in pages})
        if unknown:
            return [failed(f"rerun · {shape} · {', '.join(unknown)}", shape,
                           f"no such page (the pages: {', '.join(Path(p).stem for p in pages)})")]
        pages = [p for p in pages if Path(p).stem in only]
    base_ms, n_base = _empty_script_ms(AppTest, reps)
    counter = TraceCounter()
    try:
        for page in pages:
            rows += _bench_page(AppTest, page, shape, exp, reps, base_ms, counter)
            # the Neurons page starts its model's summary in a background thread (once per model, for every
            # session): let it end, so that the next page's rows measure that page and not this summary
            if not neuron_jobs.wait_idle(IDLE_WAIT_S):
                rows.append(failed(f"rerun · {shape} · after {Path(page).stem}", shape,
                                   f"a background neuron summary was still running {IDLE_WAIT_S} s later"))
    finally:
        counter.close()
    rows.append(row(f"rerun · empty script (baseline, {shape} run)", "—", f"p50 {base_ms:.1f} ms of {n_base}", 1.0))
    return rows
