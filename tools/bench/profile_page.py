"""Where a page's server time goes: ``python -m tools.bench.profile_page [--page attention] [--runs 12]``.

Opens one page in Streamlit's AppTest (on the app's opening model unless ``--preset`` names another), warms it
up, then times reruns after two kinds of change, each in turn:

- **text change**: a new, never-seen text of the same length (a trace-cache miss, what a student's edit costs);
- **view change**: the sidebar's head switched (the trace comes from the cache).

Each rerun's time is split, by timers wrapped around the functions that do the work (each part's *own* time:
a part called inside another is taken out of the outer one), into: the trace (``resources.traced``), the
head-detector probe and scores, the step matrices, building figures (``gptviz.present.figures``), finishing them
(``finished``: fixed margins, one copy), Plotly's ``to_dict`` and ``to_json`` inside ``st.plotly_chart``,
Streamlit's element id (a hash of the chart's JSON) and the rest of ``st.plotly_chart``, Streamlit's delta queue,
the page set-up (sidebar, settings), and the rest of the script. "AppTest" is the time outside the script thread
(the test harness: not paid by a real server). Medians over ``--runs`` reruns. ``--cprofile FILE`` also profiles
the script thread (in separate reruns, as cProfile slows Python code down) and prints the functions with the most
own time.
"""
from __future__ import annotations

import argparse
import cProfile
import functools
import io
import os
import pstats
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = {"attention": "app_pages/attention.py", "home": "app_pages/home.py", "logits": "app_pages/logits_and_loss.py",
         "step": "app_pages/step_through.py", "mlp": "app_pages/mlp_and_residual.py"}
WORDS = ["cat", "dog", "rat", "bat", "cow", "hen", "pig", "owl", "fox", "elk", "yak", "emu", "ant", "bee", "ape"]
ORDER = ["trace (resources.traced)", "probe (cached)", "head detector", "matrices", "figures: build",
         "figures: finish", "plotly: to_dict", "plotly: to_json", "streamlit: element id", "streamlit: plotly_chart",
         "streamlit: enqueue", "page setup", "rest of the script", "AppTest (harness)"]


class Splits:
    """Own time per part: timers wrapped around functions; a timed call inside another is not counted twice."""

    def __init__(self):
        self.run: dict[str, float] = defaultdict(float)
        self._stack: list[list] = []
        self._undo: list[tuple] = []
        self.profiler: cProfile.Profile | None = None

    def wrap(self, owner, attr: str, part: str) -> None:
        fn = getattr(owner, attr)

        @functools.wraps(fn)
        def timed(*a, **k):
            t0 = time.perf_counter()
            self._stack.append([part, 0.0])
            try:
                return fn(*a, **k)
            finally:
                dt = time.perf_counter() - t0
                _, inner = self._stack.pop()
                self.run[part] += dt - inner
                if self._stack:
                    self._stack[-1][1] += dt

        setattr(owner, attr, timed)
        self._undo.append((owner, attr, fn))

    def install(self) -> None:
        import plotly.io
        import plotly.tools
        import streamlit
        from streamlit.delta_generator import DeltaGenerator
        from streamlit.elements import plotly_chart as st_plotly
        from streamlit.runtime.scriptrunner.script_runner import ScriptRunner

        import gptviz.ui
        from gptviz.interp import head_detector
        from gptviz.present import figures, matrices
        from gptviz.ui import resources, widgets

        self.wrap(resources, "traced", "trace (resources.traced)")
        self.wrap(resources, "probe_scores", "probe (cached)")
        for name in ("detect", "best_labels"):
            self.wrap(head_detector, name, "head detector")
        for name in ("heatmap", "tiled_heatmap", "head_grid", "side_by_side", "token_grid", "bar_chart",
                     "line_chart"):
            self.wrap(figures, name, "figures: build")
        for name in ("finished", "fixed_margins", "styled"):
            self.wrap(figures, name, "figures: finish")
        for owner, name in ((matrices, "step_matrix"), (widgets, "step_matrix"), (widgets, "_masked_cells")):
            self.wrap(owner, name, "matrices")
        self.wrap(plotly.tools, "return_figure_from_figure_or_data", "plotly: to_dict")
        self.wrap(plotly.io, "to_json", "plotly: to_json")
        self.wrap(st_plotly, "compute_and_register_element_id", "streamlit: element id")
        self.wrap(DeltaGenerator, "plotly_chart", "streamlit: plotly_chart")
        self.wrap(streamlit, "plotly_chart", "streamlit: plotly_chart")
        self.wrap(DeltaGenerator, "_enqueue", "streamlit: enqueue")
        self.wrap(gptviz.ui, "page_setup", "page setup")
        run_script = ScriptRunner._run_script
        splits = self

        def whole(runner, *a, **k):  # the script thread: its whole time, and the profiler when asked
            t0 = time.perf_counter()
            if splits.profiler is not None:
                splits.profiler.enable()
            try:
                return run_script(runner, *a, **k)
            finally:
                if splits.profiler is not None:
                    splits.profiler.disable()
                splits.run["script"] += time.perf_counter() - t0

        ScriptRunner._run_script = whole
        self._undo.append((ScriptRunner, "_run_script", run_script))

    def uninstall(self) -> None:
        for owner, attr, fn in reversed(self._undo):
            setattr(owner, attr, fn)
        self._undo.clear()


def _text_change(at, i: int) -> None:
    n = len(WORDS)
    w = f"{WORDS[i % n]} {WORDS[(i // n) % n]}"
    at.text_area(key="w.text").input(f"the {w} sat on the mat.")


def _view_change(at, i: int, n_head: int) -> None:
    at.selectbox(key="w.head").set_value((i + 1) % n_head)


def _check(at, when: str) -> None:
    if at.exception:
        raise SystemExit(f"{when}: {at.exception[0].message[:300]}")


def measure(at, change, runs: int, splits: Splits, offset: int) -> list[dict]:
    """One dict of parts (ms) per rerun, with "wall" (the whole at.run) and "script" (the script thread)."""
    out = []
    for i in range(runs):
        change(at, offset + i)
        splits.run = defaultdict(float)
        t0 = time.perf_counter()
        at.run()
        wall = time.perf_counter() - t0
        _check(at, f"rerun {i}")
        r = {k: v * 1e3 for k, v in splits.run.items()}
        r["wall"] = wall * 1e3
        named = sum(v for k, v in r.items() if k not in ("wall", "script"))
        r["rest of the script"] = r.get("script", 0.0) - named
        r["AppTest (harness)"] = r["wall"] - r.get("script", 0.0)
        out.append(r)
    return out


def table(title: str, rows: list[dict]) -> str:
    def med(k):
        return statistics.median(r.get(k, 0.0) for r in rows)

    wall, script = med("wall"), med("script")
    lines = [f"{title}: {len(rows)} reruns · median wall {wall:.1f} ms · script thread {script:.1f} ms "
             f"(min {min(r['script'] for r in rows):.1f}, max {max(r['script'] for r in rows):.1f})",
             f"  {'part':<28} {'median ms':>9} {'share':>6}"]
    for k in ORDER:
        m = med(k)
        lines.append(f"  {k:<28} {m:9.1f} {100 * m / wall if wall else 0:5.0f}%")
    return "\n".join(lines)


def open_page(page: str, preset: str | None, timeout: float):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / PAGES.get(page, page)), default_timeout=timeout)
    if preset:
        at.query_params["preset"] = preset
    at.run()
    _check(at, "first run")
    return at


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.bench.profile_page", description=__doc__.split("\n")[0])
    p.add_argument("--page", default="attention", help=f"one of {', '.join(PAGES)} or a page file")
    p.add_argument("--preset", default=None, help="a preset link value (default: the app's opening model)")
    p.add_argument("--runs", type=int, default=12, help="reruns per kind of change")
    p.add_argument("--warm", type=int, default=4, help="reruns of each kind before timing")
    p.add_argument("--cprofile", default=None, help="also cProfile the script thread (own reruns) into FILE")
    p.add_argument("--top", type=int, default=30, help="functions to print from the cProfile")
    a = p.parse_args(argv)
    import torch

    torch.set_num_threads(int(os.environ.get("GPTVIZ_THREADS", "2")))
    from gptviz.perf import tune_allocator

    tune_allocator()
    at = open_page(a.page, a.preset, 300)
    n_head = len(at.selectbox(key="w.head").options) - 1
    caption = [c.value for c in at.sidebar.caption if "parameters" in c.value]
    print(f"page {a.page} · {caption[0] if caption else '?'} · {n_head} heads · load {os.getloadavg()[0]:.2f}")
    splits = Splits()
    splits.install()
    try:
        kinds = {"text change (trace-cache miss)": _text_change,
                 "view change (head switch, cache hit)": lambda at, i: _view_change(at, i, n_head)}
        offset = 0
        for change in kinds.values():
            measure(at, change, a.warm, splits, offset)
            offset += a.warm
        for title, change in kinds.items():
            rows = measure(at, change, a.runs, splits, offset)
            offset += a.runs
            print(table(title, rows))
        print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
        if a.cprofile:
            for title, change in kinds.items():
                splits.profiler = cProfile.Profile()
                measure(at, change, a.runs, splits, offset)
                offset += a.runs
                out = f"{a.cprofile}.{title.split()[0]}"
                splits.profiler.dump_stats(out)
                buf = io.StringIO()
                pstats.Stats(splits.profiler, stream=buf).sort_stats("tottime").print_stats(a.top)
                print(f"--- cProfile, {title}, {a.runs} reruns (own time first; saved in {out}) ---")
                print("\n".join(buf.getvalue().splitlines()[4:]))
                splits.profiler = None
    finally:
        splits.uninstall()
    return 0


if __name__ == "__main__":
    sys.exit(main())
