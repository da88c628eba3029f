"""The benchmark: ``python -m tools.bench``.

Every row names the model it measured (its parameter count, the positions T it read, the tokenizer), and
every figure is set against a baseline measured in the same run, because these machines are noisy:

1. **trace** — ``trace()`` with targets (as the app traces) ÷ a plain forward with targets, same model and
   tokens, interleaved repeats.
2. **pages** — a page's script time after one change, in AppTest, in two separate rows per page:
   a *view change* (a sidebar display option: the trace comes from the cache) and a *text change* (a new text:
   a new trace). Each row says how many reruns were cache hits and misses. After **every** run the bench
   checks that there was no exception, no ``st.error`` and no ``st.warning``, and that the sidebar shows the
   model the row names (``vocab_size = V … · P parameters``). A page that fails or falls back to another model
   makes its row FAIL with the reason, and no time is reported for it. GPT-2-small rows use the preset
   ``gpt2-small`` with the GPT-2 tokenizer (124,439,808 parameters) on a text longer than the app's token cap,
   so they read exactly ``BIG_MODEL_T`` positions. Spread: ``p95`` when there are at least 20 samples, else
   ``max of N``.
3. **memory** — one GPT-2-small trace with targets at the app's token cap, in a fresh process: the weights'
   own size (``num_params × 4`` bytes) and the process's resident memory are reported separately from the
   peak the trace adds (and the peak a plain forward adds). MiB = 2^20 bytes.
4. **training** — steps per second of the training loop alone (timed from the first step to the last,
   without the evaluations, snapshots and copies around it), and of the whole ``train()`` call, both ÷ plain
   forward passes per second.
5. **browser** — in headless Chromium, against ``streamlit run app.py`` started here: the time from a text
   edit (typed into the sidebar text area, committed with Ctrl+Enter) to the page fully redrawn (the
   script's ``script_finished`` message has arrived, nothing is stale, the status widget is gone, every
   visible Plotly chart has drawn its SVG, and the page has not changed for a quiet second; the time is that
   of the last change). Median of at least 7 edits per page, for Home, Attention, Logits and Step-through,
   each ÷ the same figure for a one-chart Streamlit app measured in the same run (in turns with the pages).
   Page addresses are read from the app's sidebar navigation.

``--quick`` runs fewer repeats (a smoke check). ``--only trace,pages,memory,training,browser`` picks parts;
``--browser-only`` and ``--no-browser`` are shorthands. Exit status: 0 when every row met its goal, 1 when a
goal was missed, 2 when a row FAILED (an error, a fallback, the wrong model): its reason is printed.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Callable, Optional

import torch

ROOT = Path(__file__).resolve().parents[1]
LEGACY_PAGES = ["app.py", "app_pages/tokens_and_batch.py", "app_pages/embeddings.py", "app_pages/attention.py",
                "app_pages/mlp_and_residual.py", "app_pages/logits_and_loss.py", "app_pages/step_through.py",
                "app_pages/backward.py", "app_pages/training.py", "app_pages/generation.py",
                "app_pages/model_and_weights.py"]
GPT2_SMALL_PARAMS = 124_439_808
GOALS = {"trace_gpt2": 1.15, "page_default_ms": 300, "page_gpt2_ms": 2000, "browser_ratio": 3.0,
         "trace_memory_mib": 1024}
CAPTION = re.compile(r"vocab_size = ([\d,]+), set by the tokenizer · ([\d,]+) parameters")
CHROMIUM = os.environ.get("GPTVIZ_CHROMIUM") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]
BROWSER_PAGES = {"Home": "home", "Attention": "attention", "Logits": "logits", "Step-through": "step through"}
LEGACY_URLS = {"Home": "", "Attention": "Attention", "Logits": "Logits_and_loss", "Step-through": "Step_through"}

# Different texts of the same length, so that every text change is a new trace of the same size.
WORDS = ["cat", "dog", "rat", "bat", "cow", "hen", "pig", "owl", "fox", "elk", "yak", "emu", "ant", "bee", "ape"]
# More than BIG_MODEL_T GPT-2 tokens; the word that changes comes first, so that it survives the cut.
LONG_TEXT = ("once upon a time, in a small village at the edge of a great forest, there lived an old clockmaker "
             "who repaired every clock in the valley. Children would gather at his window to watch the tiny gears "
             "turn, and he would tell them stories about the stars, the rivers and the mountains far away, and "
             "about the sea beyond them.")


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


def _median_ratio(fa, fb, reps: int) -> tuple[float, float, float]:
    """Interleave a and b ``reps`` times; return (median a, median b, median of a/b)."""
    ta, tb, r = [], [], []
    for _ in range(reps):
        t0 = time.perf_counter(); fa(); t1 = time.perf_counter(); fb(); t2 = time.perf_counter()  # noqa: E702
        ta.append(t1 - t0); tb.append(t2 - t1); r.append((t1 - t0) / (t2 - t1))  # noqa: E702
    return statistics.median(ta), statistics.median(tb), statistics.median(r)


def _big_model_t() -> int:
    try:
        from gptviz.present.page_context import BIG_MODEL_T
    except ImportError:
        from gptviz.ui.page import BIG_MODEL_T
    return BIG_MODEL_T


def _targets(idx: torch.Tensor) -> torch.Tensor:
    """The next token at each position, and -100 (ignored) at the last: what the app passes as targets."""
    y = torch.full_like(idx, -100)
    y[:, :-1] = idx[:, 1:]
    return y


# --------------------------------------------------------------------------- 1. trace ÷ forward
def bench_trace(quick: bool) -> list[dict]:
    from gptviz.config import preset
    from gptviz.model.gpt import GPT
    from gptviz.run.trace import trace

    rows = []
    cap = _big_model_t()
    cases = [("default", preset("default", vocab_size=76), 32), ("explainer", preset("explainer", vocab_size=76), 8),
             ("gpt2-small", preset("gpt2-small"), cap), ("gpt2-small", preset("gpt2-small"), 256)]
    for name, cfg, T in cases:
        model = GPT(cfg)
        idx = torch.randint(0, cfg.vocab_size, (1, T), generator=torch.Generator().manual_seed(0))
        y = _targets(idx)
        big = cfg.n_layer > 4
        reps = (3 if quick else 9) if big else (20 if quick else 200)

        def fwd():
            with torch.no_grad():
                model(idx, y)

        def tr():
            trace(model, idx, y)

        fwd(), tr()  # warm up
        t_tr, t_fwd, ratio = _median_ratio(tr, fwd, reps)
        gpt2 = name == "gpt2-small"
        rows.append(row(f"trace ÷ forward (with targets){' · the app cap' if gpt2 and T == cap else ''}",
                        f"{name} · {cfg.num_params():,} params · T={T} · random ids, V={cfg.vocab_size:,}",
                        f"median of {reps}: {t_tr * 1e3:.1f} ms ÷ {t_fwd * 1e3:.1f} ms", ratio,
                        f"≤ {GOALS['trace_gpt2']}" if gpt2 else "", ratio <= GOALS["trace_gpt2"] if gpt2 else None))
    return rows


# --------------------------------------------------------------------------- 2. page reruns (AppTest)
def app_pages() -> list[str]:
    """The page files the app serves, from its navigation list (falls back to the old pages/ layout)."""
    try:
        from gptviz.ui.nav import available
    except ImportError:
        return [p for p in LEGACY_PAGES if (ROOT / p).is_file()]
    return [p[0] for p in available()]


def expected_model(shape: str) -> dict:
    """The model a row names, worked out here from the config (not from the page)."""
    from gptviz.config import preset
    from gptviz.text.tokenizers import get_tokenizer

    if shape == "default":
        tok = get_tokenizer("char-bpe", num_merges=20, lowercase=True)  # the sidebar's default tokenizer
        cfg = preset("default", vocab_size=tok.vocab_size)
        return {"cfg": cfg, "tokenizer": "char-bpe", "query": {"preset": "default"},
                "label": f"default · {cfg.num_params():,} params", "goal_ms": GOALS["page_default_ms"]}
    cfg = preset("gpt2-small", vocab_size=50257)
    if cfg.num_params() != GPT2_SMALL_PARAMS:
        raise BenchFailure(f"preset gpt2-small has {cfg.num_params():,} parameters, not GPT-2 small's "
                           f"{GPT2_SMALL_PARAMS:,}")
    return {"cfg": cfg, "tokenizer": "gpt2", "query": {"preset": "gpt2-small", "tokenizer": "gpt2", "text": LONG_TEXT},
            "label": f"gpt2-small · {cfg.num_params():,} params", "goal_ms": GOALS["page_gpt2_ms"]}


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
    shown = [m.groups() for c in at.sidebar.caption for m in [CAPTION.search(str(c.value))] if m]
    if not shown:
        raise BenchFailure(f"{when}: the sidebar shows no 'vocab_size = …, set by the tokenizer · … parameters'")
    v, p = (int(s.replace(",", "")) for s in shown[0])
    cfg = exp["cfg"]
    if (v, p) != (cfg.vocab_size, cfg.num_params()):
        raise BenchFailure(f"{when}: the page shows vocab_size {v:,} and {p:,} parameters, not the "
                           f"{cfg.vocab_size:,} and {cfg.num_params():,} of {exp['label']} (a fallback?)")


class TraceCounter:
    """Counts the traces the app really computes (cache misses), and the T of each."""

    def __init__(self):
        from gptviz.ui import resources

        self.resources = resources
        self.orig = getattr(resources, "_compute_trace", None)
        self.calls: list[tuple[int, int]] = []
        if self.orig is not None:
            def counting(cfg_json, model_key, x, *a, **k):
                self.calls.append((len(x), len(x[0]) if x else 0))
                return self.orig(cfg_json, model_key, x, *a, **k)

            resources._compute_trace = counting

    @property
    def known(self) -> bool:
        return self.orig is not None

    def close(self) -> None:
        if self.orig is not None:
            self.resources._compute_trace = self.orig


def _view_change(at, i: int) -> None:
    at.checkbox(key="w.show_values").set_value(i % 2 == 0)


_TEXTS_USED = [0]


def fresh_words() -> str:
    """Three words never used before in this run, always 11 characters: a text change is a new text (so a new
    trace, never one cached by an earlier page or repeat) of the same length."""
    k = _TEXTS_USED[0]
    _TEXTS_USED[0] += 1
    n = len(WORDS)
    return f"{WORDS[k % n]} {WORDS[(k // n) % n]} {WORDS[(k // n // n) % n]}"


def _text_change(at, shape: str) -> None:
    w = fresh_words()
    at.text_area(key="w.text").input(f"{w} {LONG_TEXT}" if shape != "default" else f"the {w} sat on the mat.")


def bench_pages(quick: bool, shape: str) -> list[dict]:
    from streamlit import config
    from streamlit.testing.v1 import AppTest

    config.set_option("client.showErrorDetails", "full")  # a failed row names the real exception
    reps = 4 if quick else 20
    cap = _big_model_t()
    rows = []
    try:
        exp = expected_model(shape)
    except BenchFailure as exc:
        return [failed(f"rerun · {shape} · every page", shape, str(exc))]
    empty = Path(tempfile.mkdtemp()) / "empty.py"
    empty.write_text("import streamlit as st\nst.write('hi')\n")
    at0 = AppTest.from_file(str(empty), default_timeout=120).run()
    base = []
    for _ in range(reps * 2):
        t = time.perf_counter(); at0.run(); base.append(time.perf_counter() - t)  # noqa: E702
    base_ms = statistics.median(base) * 1e3
    counter = TraceCounter()
    try:
        for page in app_pages():
            stem = Path(page).stem
            figure = f"rerun · {shape} · {stem}"
            label = f"{exp['label']} · T=? · {exp['tokenizer']}"
            first_call = len(counter.calls)
            try:
                at = AppTest.from_file(str(ROOT / page), default_timeout=300)
                for k, v in exp["query"].items():
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
                            _text_change(at, shape)
                        n0 = len(counter.calls)
                        t = time.perf_counter()
                        at.run()
                        dt = time.perf_counter() - t
                        check_page(at, exp, f"{kind} {i + 1}")  # a failed or fallen-back run never counts
                        misses += len(counter.calls) > n0
                        times.append(dt)
                    result[kind] = (times, misses)
                Ts = sorted({T for _, T in counter.calls[first_call:]})
                if shape != "default" and Ts and max(Ts) != cap:  # (a page may also trace a short probe)
                    raise BenchFailure(f"the longest trace had T={max(Ts)}, not the app's cap T={cap}")
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
    finally:
        counter.close()
    rows.append(row(f"rerun · empty script (baseline, {shape} run)", "—", f"p50 {base_ms:.1f} ms of {len(base)}", 1.0))
    return rows


# --------------------------------------------------------------------------- 3. memory
_MEM_SCRIPT = r"""
import sys, torch
sys.path.insert(0, {root!r})
from gptviz import GPT, preset, trace
from gptviz.perf import tune_allocator
tune_allocator()
cfg = preset("gpt2-small")
model = GPT(cfg)
idx = torch.randint(0, cfg.vocab_size, (1, {T}), generator=torch.Generator().manual_seed(0))
y = torch.full_like(idx, -100); y[:, :-1] = idx[:, 1:]
def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024  # bytes
open("/proc/self/clear_refs", "w").write("5")  # restart the peak (VmHWM) from here
before = status("VmRSS")
if {mode!r} == "trace":
    t = trace(model, idx, y)
else:
    with torch.no_grad():
        out = model(idx, y)
print(before, status("VmHWM"), model.num_params())
"""


def bench_memory() -> list[dict]:
    """Peak resident memory one GPT-2-small trace (with targets, at the app's token cap) adds, in a fresh process."""
    T = _big_model_t()
    res = {}
    for mode in ("forward", "trace"):
        out = subprocess.run([sys.executable, "-c", _MEM_SCRIPT.format(root=str(ROOT), mode=mode, T=T)],
                             capture_output=True, text=True, check=True).stdout.split()
        res[mode] = tuple(int(v) for v in out[:3])  # bytes before, bytes peak, parameters
    before, peak, n_params = res["trace"]
    weights = n_params * 4
    tr = peak - before
    fw = res["forward"][1] - res["forward"][0]
    return [row("peak memory a trace adds (with targets)", f"gpt2-small · {n_params:,} params · T={T} · random ids",
                f"trace +{mib(tr):.0f} MiB, a forward +{mib(fw):.0f} MiB · weights alone {mib(weights):.0f} MiB "
                f"({n_params:,} × 4 B) · whole process before the trace {mib(before):.0f} MiB",
                tr / max(fw, 2**20), f"trace ≤ {GOALS['trace_memory_mib']} MiB", mib(tr) <= GOALS["trace_memory_mib"])]


# --------------------------------------------------------------------------- 4. training
def bench_training(quick: bool) -> list[dict]:
    from gptviz.config import preset
    from gptviz.model.gpt import GPT
    from gptviz.training.tasks import make_task
    from gptviz.training.loop import DEFAULTS, TrainConfig, model_config_for, train

    rows = []
    steps = 30 if quick else 150
    for label, task_name in (("text", "text"), ("sort", "sort")):
        task = make_task(task_name)
        if task_name == "text":
            cfg = preset("default", vocab_size=task.vocab_size)
            bs = 32
        else:
            d = DEFAULTS["sort"]
            cfg = model_config_for(task, d["n_layer"], d["n_head"], d["n_embd"])
            bs = d["batch_size"]
        model = GPT(cfg)
        tc = TrainConfig(steps=steps, batch_size=bs, eval_every=steps, snapshot_every=steps)
        stamps: list[float] = []

        def stamp() -> bool:  # train() asks this before every step: the loop's own clock
            stamps.append(time.perf_counter())
            return False

        t = time.perf_counter()
        train(model, task, tc, should_stop=stamp)
        whole = steps / (time.perf_counter() - t)
        loop = (len(stamps) - 1) / (stamps[-1] - stamps[0])  # steps 1 … N-1, nothing but the loop between
        b = task.batch(bs, torch.Generator().manual_seed(0))
        t = time.perf_counter()
        with torch.no_grad():
            for _ in range(steps):
                model(b.x)
        fps = steps / (time.perf_counter() - t)
        T = b.x.shape[1]
        rows.append(row(f"training steps/s · {label} task · the loop alone", f"{cfg.num_params():,} params · "
                        f"B={bs} T={T}", f"{loop:.0f} steps/s vs {fps:.0f} forwards/s", loop / fps))
        rows.append(row(f"training steps/s · {label} task · whole train() call",
                        f"{cfg.num_params():,} params · B={bs} T={T}",
                        f"{whole:.0f} steps/s (with copy, 2 evaluations, snapshots) vs {fps:.0f} forwards/s",
                        whole / fps))
    return rows


# --------------------------------------------------------------------------- 5. browser
BASELINE_APP = '''import plotly.graph_objects as go
import streamlit as st

text = st.sidebar.text_area("Text", "the cat sat on the mat.")
z = [[(ord(c) * (j + 1)) % 17 for c in text[:32]] for j in range(8)]
st.plotly_chart(go.Figure(go.Heatmap(z=z)), key="chart")
'''

# Installed in every page before Streamlit loads: timestamps (page clock) of every message on Streamlit's
# stream, of the Ctrl+Enter that commits an edit, and of the last change anywhere in the DOM.
INIT_JS = """
window.__ws = []; window.__mut = performance.now(); window.__t0 = null;
const __W = window.WebSocket;
window.WebSocket = function (u, p) {
  const ws = p === undefined ? new __W(u) : new __W(u, p);
  if (String(u).includes('_stcore/stream')) ws.addEventListener('message', () => window.__ws.push(performance.now()));
  return ws;
};
window.WebSocket.prototype = __W.prototype;
Object.assign(window.WebSocket, __W);
document.addEventListener('keydown', e => {
  if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) window.__t0 = performance.now();
}, true);
new MutationObserver(() => { window.__mut = performance.now(); })
  .observe(document, {subtree: true, childList: true, attributes: true, characterData: true});
"""

STATE_JS = """() => {
  const plots = [...document.querySelectorAll('.js-plotly-plot')];
  const visible = plots.filter(p => p.offsetParent !== null);
  const texts = sel => [...document.querySelectorAll(sel)].map(e => e.innerText.slice(0, 200));
  const sb = document.querySelector('[data-testid="stSidebar"]');
  return {now: performance.now(), mut: window.__mut, t0: window.__t0, ws: window.__ws.length,
          charts: plots.length, visible: visible.length,
          undrawn: visible.filter(p => !p.querySelector('.main-svg')).length,
          stale: document.querySelectorAll('[data-stale="true"]').length,
          status: !!document.querySelector('[data-testid="stStatusWidget"]'),
          exceptions: texts('[data-testid="stException"]'), errors: texts('[data-testid="stAlertContentError"]'),
          warnings: texts('[data-testid="stAlertContentWarning"]'), sidebar: sb ? sb.innerText : ''};
}"""
QUIET_MS = 1000


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_server(script: Path, cwd: Path) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", str(script), "--server.headless", "true", "--server.port", str(port),
         "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false", "--client.showErrorDetails", "full"],
        cwd=cwd, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            if urllib.request.urlopen(url + "/_stcore/health", timeout=2).status == 200:
                return proc, url
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.5)
    _stop(proc)
    log.seek(0)
    raise BenchFailure(f"streamlit run {script.name} did not start: {log.read().decode(errors='replace')[-500:]}")


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


class Tab:
    """One browser page on one app, with Streamlit's stream messages decoded on the Python side."""

    def __init__(self, browser, url: str, expect: Optional[tuple[int, int]] = None):
        from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

        self.ctx = browser.new_context(viewport={"width": 1400, "height": 900})
        self.page = self.ctx.new_page()
        self.page.add_init_script(INIT_JS)
        self.expect = expect  # (vocab_size, parameters) the sidebar must show, or None
        self.frames: list[str] = []
        self.errors: list[str] = []
        self.page.on("pageerror", lambda e: self.errors.append(str(e)[:200]))

        def on_ws(ws):
            if "_stcore/stream" in ws.url:
                def received(payload):
                    m = ForwardMsg()
                    m.ParseFromString(payload if isinstance(payload, bytes) else payload.encode())
                    self.frames.append(m.WhichOneof("type") or "")

                ws.on("framereceived", received)

        self.page.on("websocket", on_ws)
        self.page.goto(url, wait_until="domcontentloaded")
        self.settle(0, "opening the page")

    def close(self) -> None:
        self.ctx.close()

    def settle(self, since: int, when: str, timeout_s: float = 180) -> tuple[float, float, int]:
        """Wait for the run started after frame ``since`` to finish and the page to be fully redrawn. Returns
        (edit → redrawn ms, edit → script_finished ms, charts), from the page's own clock."""
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            self.page.wait_for_timeout(50)
            fin = [j for j in range(since, len(self.frames)) if self.frames[j] == "script_finished"]
            if not fin:
                continue
            s = self.page.evaluate(STATE_JS)
            self._check(s, when)
            ready = s["visible"] >= 1 and s["undrawn"] == 0 and s["stale"] == 0 and not s["status"]
            if ready and s["now"] - s["mut"] >= QUIET_MS and s["ws"] == len(self.frames):
                t_fin = self.page.evaluate(f"window.__ws[{fin[-1]}]")
                if s["t0"] is None:  # opening the page: no edit to time from
                    return float("nan"), float("nan"), s["charts"]
                return max(t_fin, s["mut"]) - s["t0"], t_fin - s["t0"], s["charts"]
        raise BenchFailure(f"{when}: the page was not fully redrawn within {timeout_s:.0f} s")

    def _check(self, s: dict, when: str) -> None:
        for kind in ("exceptions", "errors", "warnings"):
            if s[kind]:
                raise BenchFailure(f"{when}: the page shows {kind[:-1]}: {s[kind][0]!r}")
        if self.errors:
            raise BenchFailure(f"{when}: JavaScript error: {self.errors[0]}")
        if self.expect is not None:
            m = CAPTION.search(s["sidebar"])
            got = tuple(int(g.replace(",", "")) for g in m.groups()) if m else None
            if got != self.expect:
                raise BenchFailure(f"{when}: the sidebar shows {got and f'vocab_size {got[0]:,}, {got[1]:,} params'}"
                                   f", not vocab_size {self.expect[0]:,}, {self.expect[1]:,} params")

    def edit(self, text: str, when: str) -> tuple[float, float, int]:
        self.page.evaluate("window.__t0 = null")
        area = self.page.locator("[data-testid='stSidebar'] textarea").first
        area.fill(text)
        since = len(self.frames)
        area.press("Control+Enter")
        t = self.settle(since, when)
        if t[0] != t[0]:
            raise BenchFailure(f"{when}: the Ctrl+Enter that commits the edit was not seen by the page")
        if area.input_value() != text:
            raise BenchFailure(f"{when}: the text area does not hold the text typed")
        return t

    def nav_links(self) -> dict[str, str]:
        """{link label: href} of the sidebar navigation (the label is the link's last line: an icon may come first)."""
        return self.page.evaluate("""() => Object.fromEntries([...document.querySelectorAll(
            '[data-testid="stSidebarNav"] a, [data-testid="stSidebarNavLink"]')].map(a => [
              a.innerText.trim().split('\\n').filter(l => l.trim()).pop() || '', a.href]))""")


def _norm(s: str) -> str:
    return re.sub(r"[^a-z0-9]+", " ", s.lower()).strip()


def page_urls(links: dict[str, str], url: str) -> tuple[dict[str, str], str]:
    """The address of each measured page, read from the navigation's link texts."""
    out, note = {}, "addresses from the sidebar navigation"
    for name, start in BROWSER_PAGES.items():
        hits = [href for text, href in links.items() if _norm(text).startswith(start)]
        if hits:
            out[name] = hits[0]
    if len(out) < len(BROWSER_PAGES):
        note = f"sidebar navigation gave {sorted(out)} only; the rest from the old pages/ addresses"
        for name in BROWSER_PAGES:
            out.setdefault(name, f"{url}/{LEGACY_URLS[name]}")
    return out, note


def _edit_texts(n: int) -> list[str]:
    """``n`` texts of the same length, none used before in this run (so none has a cached trace)."""
    return [f"the {fresh_words()} sat on the mat." for _ in range(n)]


def bench_browser(quick: bool) -> list[dict]:
    figure = "browser · text edit → page fully redrawn"
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return [failed(figure, "—", "the playwright package is not installed (pip install -r requirements-dev.txt)")]
    if not os.path.exists(CHROMIUM):
        return [failed(figure, "—", f"chromium is not installed at {CHROMIUM} (apt-get install -y chromium)")]
    from gptviz.text.tokenizers import get_tokenizer

    n = 7 if quick else 11
    exp = expected_model("default")
    tok = get_tokenizer("char-bpe", num_merges=20, lowercase=True)
    cfg = exp["cfg"]
    model = f"{exp['label']} · char-bpe"
    tmp = Path(tempfile.mkdtemp())
    (tmp / "baseline.py").write_text(BASELINE_APP)
    procs, rows = [], []
    try:
        app, url = _start_server(ROOT / "app.py", ROOT)
        procs.append(app)
        base_proc, base_url = _start_server(tmp / "baseline.py", tmp)
        procs.append(base_proc)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                base = Tab(browser, base_url)
                base_t = []

                def baseline_round() -> None:
                    base.edit(_edit_texts(1)[0], "baseline warm-up")
                    for i, text in enumerate(_edit_texts(n)):
                        base_t.append(base.edit(text, f"baseline edit {i + 1}")[0])

                baseline_round()
                probe = Tab(browser, f"{url}/?preset=default")
                urls, note = page_urls(probe.nav_links(), url)
                probe.close()
                measured = {}
                for name, href in urls.items():
                    label = f"{figure} · {name}"
                    try:
                        sep = "&" if "?" in href else "?"
                        tab = Tab(browser, f"{href}{sep}preset=default", expect=(cfg.vocab_size, cfg.num_params()))
                        tab.edit(_edit_texts(1)[0], f"{name} warm-up edit")
                        times, fins, counts = [], [], set()
                        texts = _edit_texts(n)
                        for i, text in enumerate(texts):
                            t, fin, charts = tab.edit(text, f"{name} edit {i + 1}")
                            times.append(t), fins.append(fin), counts.add(charts)
                        tab.close()
                        measured[name] = (times, fins, counts, sorted({len(tok.encode(t)) for t in texts}))
                    except BenchFailure as exc:
                        rows.append(failed(label, model, str(exc)))
                    baseline_round()  # the baseline in turns with the pages: the same noise
                base.close()
            finally:
                browser.close()
        b_med = statistics.median(base_t)
        for name, (times, fins, counts, Ts) in measured.items():
            med = statistics.median(times)
            charts = "/".join(map(str, sorted(counts)))
            rows.append(row(f"{figure} · {name}", f"{exp['label']} · T={'/'.join(map(str, Ts))} · char-bpe",
                            f"median {med / 1e3:.2f} s of {len(times)} (script done {statistics.median(fins) / 1e3:.2f} s)"
                            f" · {charts} charts", med / b_med, f"≤ {GOALS['browser_ratio']:g}× baseline",
                            med / b_med <= GOALS["browser_ratio"]))
        rows.append(row(f"{figure} · one-chart app (baseline)", "1 Plotly heatmap",
                        f"median {b_med / 1e3:.3f} s of {len(base_t)}, in turns with the pages · {note}", 1.0))
    except BenchFailure as exc:
        rows.append(failed(figure, model, str(exc)))
    finally:
        for proc in procs:
            _stop(proc)
    return rows


# --------------------------------------------------------------------------- report
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


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.bench", description="gptviz's benchmark (see the module doc).")
    p.add_argument("--quick", action="store_true", help="fewer repeats (a smoke check)")
    p.add_argument("--only", default="trace,pages,memory,training,browser", help="comma-separated parts to run")
    p.add_argument("--browser-only", action="store_true", help="only the browser rows")
    p.add_argument("--no-browser", action="store_true", help="everything but the browser rows")
    p.add_argument("--json", help="also write the rows as JSON here")
    a = p.parse_args(argv)
    torch.set_num_threads(int(os.environ.get("GPTVIZ_THREADS", "2")))
    from gptviz.perf import tune_allocator

    tune_allocator()  # as the app does (gptviz.ui imports it): measure what users get
    parts = {"browser"} if a.browser_only else set(a.only.split(","))
    if a.no_browser:
        parts.discard("browser")
    rows: list[dict] = []
    steps: list[tuple[str, Callable[[], list[dict]]]] = [
        ("trace", lambda: bench_trace(a.quick)),
        ("pages", lambda: bench_pages(a.quick, "default") + bench_pages(a.quick, "gpt2-small")),
        ("memory", bench_memory),
        ("training", lambda: bench_training(a.quick)),
        ("browser", lambda: bench_browser(a.quick)),
    ]
    for name, fn in steps:
        if name in parts:
            t = time.perf_counter()
            try:
                rows += fn()
            except Exception as exc:  # noqa: BLE001 - the part fails loudly, the other parts still run
                rows.append(failed(f"{name} (the whole part)", "—", f"{type(exc).__name__}: {exc}"[:300]))
            print(f"[bench] {name} done in {time.perf_counter() - t:.0f} s", file=sys.stderr, flush=True)
    print(table(rows))
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    if any(r["why"] for r in rows):
        return 2
    return 0 if all(r["ok"] is not False for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
