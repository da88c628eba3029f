"""How long a server's health check (``/_stcore/health``) takes while the server works, and the heaviest work to give
it: the figures ``deploy/haproxy.cfg``'s check timeouts and thresholds are chosen from (issue 36).

- ``HealthProbe``: a thread that asks ``GET /_stcore/health`` every ``interval`` seconds, each with its own
  ``timeout``, and keeps each answer's latency (None: no 200 within the timeout). A thread of its own, so its clock is
  not the event loop of whatever drives the server.
- ``busy_processes(n, seconds)``: ``n`` CPU-bound Python processes, each ending by itself after ``seconds`` and
  killed at the block's end: the loaded machine.
- ``heavy_backward(url, seconds)``: one tab that opens the Backward page on GPT-2 small (124,439,808 parameters,
  random weights, the GPT-2 tokenizer) with a line of exactly 512 tokens, then gives it a new 512-token line after
  each run until ``seconds`` have passed. The first run builds the 124M-parameter model; every run traces 512
  positions and backpropagates (each a trace-cache miss: a new text). The model is checked on the sidebar's caption.
- ``heavy_training(url, seconds)``: one tab that presses Start training on the Training page and stays for
  ``seconds``.

``python -m tools.load.health [--seconds 20] [--json F]`` measures the health check in five states, each on a server
of its own started on a free loopback port: idle, the machine loaded (two busy processes), the Backward work above,
the Backward work on the loaded machine, and a training run on the loaded machine.
Everything runs on 127.0.0.1, is bounded in time, and stops what it started.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

GPT2_PARAMS = 124_439_808
T_HEAVY = 512
BACKWARD_PAGE, TRAINING_PAGE = "Backward", "Training"
TEXT_LABEL = "Text (each line is one row of the batch)"  # gptviz/ui/page.py's sidebar
TRAIN_BUTTON = "▶ Start training"


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


@dataclass
class HealthProbe:
    """``GET url/_stcore/health`` every ``interval`` s in a thread (``start``/``stop``, or ``with``)."""

    url: str
    interval: float = 0.1
    timeout: float = 30.0
    samples: list[tuple[float, float | None]] = field(default_factory=list)  # (sent at, latency s or None)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> HealthProbe:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> HealthProbe:
        self._thread = threading.Thread(target=self._loop, name="health-probe", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.timeout + 5)

    def _loop(self) -> None:
        health = self.url.rstrip("/") + "/_stcore/health"
        while not self._stop.is_set():
            t = time.perf_counter()
            try:
                with urllib.request.urlopen(health, timeout=self.timeout) as r:
                    ok = r.status == 200 and r.read().strip() == b"ok"
            except OSError:
                ok = False
            latency = time.perf_counter() - t
            self.samples.append((t, latency if ok else None))
            self._stop.wait(max(0.0, self.interval - latency))

    def summary(self, since: float = 0.0) -> dict:
        """Latencies of the checks sent after ``since``: count, failures, p50, p95, p99, max (seconds)."""
        got = [lat for t, lat in self.samples if t >= since]
        ok = [x for x in got if x is not None]
        return {"checks": len(got), "failed": len(got) - len(ok), "p50": _pct(ok, 0.5), "p95": _pct(ok, 0.95),
                "p99": _pct(ok, 0.99), "max": max(ok) if ok else float("nan")}


@contextlib.contextmanager
def busy_processes(n: int = 2, seconds: float = 120.0):
    """``n`` CPU-bound Python processes (``while time.time() < end: pass``) that end by themselves after
    ``seconds``; killed when the block ends. Yields their Popen objects."""
    code = f"import time\nend = time.time() + {float(seconds)!r}\nwhile time.time() < end:\n    pass\n"
    procs = [subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.DEVNULL) for _ in range(n)]
    try:
        yield procs
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait(10)


def load_average() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def heavy_texts():
    """A function giving, for each word, a new line of exactly ``T_HEAVY`` GPT-2 tokens that starts with it."""
    from gptviz.text.tokenizers import get_tokenizer
    from tools.bench.long_texts import STORY, cut_to

    tok, story = get_tokenizer("gpt2"), STORY * 8
    return lambda word: cut_to(tok, f"{word} {story}", T_HEAVY)


def _gpt2_small_shown(out: dict) -> dict:
    """``out`` if every model the Backward page named is GPT-2 small; else RuntimeError (a fallback model)."""
    params = {m[1] for m in out["models"] if m}
    if params != {GPT2_PARAMS}:
        raise RuntimeError(f"the Backward page showed models of {params or 'no'} parameters, not GPT-2 small's "
                           f"{GPT2_PARAMS:,}")
    return out


async def heavy_backward(url: str, seconds: float, *, first_timeout: float = 300.0, wait_for_end: bool = True) -> dict:
    """Run the Backward page on GPT-2 small at T = 512 again and again (a new text each time) for ``seconds``.
    Returns the runs' times and any errors; raises RuntimeError if the page did not show GPT-2 small.

    ``wait_for_end=False``: one run only, left once ``seconds`` have passed and its sidebar has named the model
    (the server goes on computing it): the replica is busy for the time asked, and no longer than the caller needs."""
    if not wait_for_end:
        return await _heavy_backward_for(url, seconds, first_timeout)
    from urllib.parse import urlencode

    from tools.load import reading
    from tools.load.protocol import Session
    from tools.load.widgets import WidgetBook

    text_for = heavy_texts()
    out: dict = {"runs": [], "errors": [], "models": set()}
    s = Session(url)
    await s.connect()
    try:
        s.query_string = urlencode({"preset": "gpt2-small", "tokenizer": "gpt2", "text": text_for("start")})
        book = WidgetBook()
        end = time.perf_counter() + seconds
        k = 0
        while True:
            run = await s.rerun(book.states() if k else None, page_name=None if k else BACKWARD_PAGE,
                                timeout=first_timeout)
            errs, _ = reading.errors(run.elements, run.compile_errors)
            out["errors"] += errs
            if run.finished_at is None:
                out["errors"].append(f"run {k}: no end within {first_timeout} s ({s.closed_reason})")
                break
            out["runs"].append(run.seconds)
            out["models"].add(reading.parse_model(reading.model_shown(run.elements)))
            book.learn(run.elements)
            if time.perf_counter() >= end:
                break
            k += 1
            book.set(book.find(None, label=TEXT_LABEL).id, text_for(f"w{k}"))
    finally:
        await s.close()
    return _gpt2_small_shown(out)


async def _heavy_backward_for(url: str, seconds: float, timeout: float) -> dict:
    from urllib.parse import urlencode

    from tools.load import reading
    from tools.load.protocol import Session

    out: dict = {"runs": [], "errors": [], "models": set()}
    s = Session(url)
    await s.connect()
    try:
        s.query_string = urlencode({"preset": "gpt2-small", "tokenizer": "gpt2", "text": heavy_texts()("start")})
        t0 = time.perf_counter()
        task = asyncio.ensure_future(s.rerun(page_name=BACKWARD_PAGE, timeout=timeout))
        left = False
        while not task.done():
            run = s._run  # the run being drawn: its elements so far
            caption = reading.model_shown(run.elements) if run is not None else None
            if caption and time.perf_counter() - t0 >= seconds:
                out["models"].add(reading.parse_model(caption))
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                left = True
                break
            await asyncio.sleep(0.2)
        out["busy_s"] = time.perf_counter() - t0
        if not left:
            run = await task
            out["models"].add(reading.parse_model(reading.model_shown(run.elements)))
            if run.finished_at is None:
                out["errors"].append(f"no model shown within {timeout} s ({s.closed_reason})")
            out["errors"] += reading.errors(run.elements, run.compile_errors)[0]
    finally:
        await s.close()
    return _gpt2_small_shown(out)


async def heavy_training(url: str, seconds: float) -> dict:
    """Press Start training on the Training page (its default task and model) and keep the tab open for ``seconds``
    (or until the run ends): the server trains meanwhile."""
    from tools.load import reading
    from tools.load.protocol import Session
    from tools.load.widgets import WidgetBook

    async with Session(url) as s:
        book = WidgetBook()
        run = await s.rerun(page_name=TRAINING_PAGE, timeout=300)
        book.learn(run.elements)
        book.press(book.find("button", label=TRAIN_BUTTON).id)
        run = await s.rerun(book.states(), timeout=seconds)
        errs, _ = reading.errors(run.elements, run.compile_errors)
        return {"ended": run.finished_at is not None, "errors": errs}


def measure(seconds: float, url: str | None = None) -> list[dict]:
    """The health check's latency in five states (see the module's doc). Each state gets a server of its own,
    started here (so the heavy states build GPT-2 small afresh, as on a server that just started), unless ``url``
    names one already running."""
    from tools.bench.server import start_server, stop_server

    root = Path(__file__).resolve().parents[2]
    rows = []
    states = [("idle", 0, None), ("machine loaded (2 busy processes)", 2, None),
              ("Backward, GPT-2 small, T=512", 0, "backward"),
              ("Backward, GPT-2 small, T=512, machine loaded", 2, "backward"),
              ("a training run, machine loaded", 2, "training")]
    for label, busy, work in states:
        proc, here = (None, url) if url else start_server(root / "app.py", root)
        try:
            load0 = load_average()
            with busy_processes(busy, seconds + 600) if busy else contextlib.nullcontext(), \
                    HealthProbe(here) as probe:
                t0 = time.perf_counter()
                extra = ""
                if work == "backward":
                    got = asyncio.run(heavy_backward(here, seconds))
                    extra = (f"{len(got['runs'])} runs: {', '.join(f'{x:.1f}' for x in got['runs'])} s, "
                             f"errors {len(got['errors'])}")
                elif work == "training":
                    got = asyncio.run(heavy_training(here, seconds))
                    extra = f"training {'ended' if got['ended'] else 'still running'}, errors {len(got['errors'])}"
                else:
                    time.sleep(seconds)
                wall = time.perf_counter() - t0
        finally:
            if proc is not None:
                stop_server(proc)
        rows.append({"state": label, **probe.summary(t0), "seconds": round(wall, 1), "work": extra,
                     "load": f"{load0} → {load_average()}"})
        print(f"[health] {rows[-1]}", file=sys.stderr, flush=True)
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.load.health", description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=20.0, help="how long each state lasts (at least)")
    p.add_argument("--url", help="a server already running (else each state starts one here on a free port)")
    p.add_argument("--json", help="also write the rows as JSON here")
    a = p.parse_args(argv)
    rows = measure(a.seconds, a.url)
    print(f"{'state':48} {'checks':>6} {'failed':>6} {'p50 ms':>7} {'p95 ms':>7} {'p99 ms':>7} {'max ms':>7}  load")
    for r in rows:
        print(f"{r['state']:48} {r['checks']:6d} {r['failed']:6d} {r['p50'] * 1e3:7.0f} {r['p95'] * 1e3:7.0f} "
              f"{r['p99'] * 1e3:7.0f} {r['max'] * 1e3:7.0f}  {r['load']}  {r['work']}")
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
