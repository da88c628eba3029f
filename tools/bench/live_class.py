"""Part 7, live: a live class of simulated students on two replicas behind HAProxy, sharing one Redis.

``deploy.cluster`` starts Redis, 2 ``streamlit run app.py`` replicas and HAProxy on free loopback ports; a class of
the lesson "From text to token ids" is created in Redis and a teacher and 60 students open it through the
balancer (``tools.load.live_classroom``: each tab a websocket session following the page's timed fragments,
1 s). Then:

1. **answer → teacher's histogram** — every student answers step 1's question; the time from a student's
   answer being sent to the teacher's count ("N of 60 students answered", redrawn by its own fragment) first
   including it. Goal p95 ≤ 1 s.
2. **idle followers** — nobody does anything for 60 s (``--quick``: 20 s): the CPU seconds per minute used by
   the two replicas and by Redis while 60 followers poll the class. No goal: the figure is the cost.
3. **teacher's Next → every student** — the teacher presses the lesson's Next 5 times (steps 2 to 6; step 4 asks
   again, so more answers); the time from each Next being sent to each student's page first showing the new
   step. Goal p95 ≤ 2 s.

Every row names the class (students, replicas, the page and lesson, the poll interval), the model the pages
showed (asserted: the app's default, worked out from its config), and the CPU of the cluster, of this client and
of everything else on the machine (other people's work), with the load average. A run with an error, a tab
without the class, an answer never counted or the wrong model is a FAIL row with the reason. It takes about
2.5 minutes (1.5 with ``--quick``) and runs only when named: ``python -m tools.bench --only live``.

Importing this module starts nothing and imports neither Streamlit nor ``tools.load``.
"""
from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

from tools.bench.report import failed, row

LESSON = "01_text_to_token_ids"
QUESTION_STEPS = (0, 3)  # the lesson's steps (0-based) that ask a question (tests/test_bench_live.py checks)
STUDENTS, REPLICAS, NEXTS = 60, 2, 5
IDLE_S, QUICK_IDLE_S = 60.0, 20.0
GOAL_HISTOGRAM_P95_S, GOAL_NEXT_P95_S = 1.0, 2.0
POLL_S = 1.0  # the page's follow fragment and the teacher's count (gptviz/ui/sections/live_question.POLL_SECONDS)


def _s(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f}"


def spread_label(sp: dict) -> str:
    return f"p50 {_s(sp['p50'])} · p95 {_s(sp['p95'])} · max {_s(sp['max'])} s (n={sp['n']})"


class CpuWatch:
    """CPU seconds of the cluster's processes (replicas, Redis, HAProxy), this client and the whole machine."""

    def __init__(self, cluster):
        self.pids = {"replicas": [p.popen.pid for p in cluster.replicas], "redis": [cluster.redis.popen.pid],
                     "haproxy": [cluster.balancer.popen.pid]}

    def sample(self) -> dict:
        from tools.load.machine import client_cpu_seconds, machine_busy_seconds, process_cpu_seconds

        out = {k: sum(process_cpu_seconds(p) for p in pids) for k, pids in self.pids.items()}
        return out | {"client": client_cpu_seconds(), "machine": machine_busy_seconds(), "t": time.perf_counter()}

    @staticmethod
    def between(a: dict, b: dict) -> dict:
        d = {k: b[k] - a[k] for k in a}
        d["others"] = max(0.0, d["machine"] - d["replicas"] - d["redis"] - d["haproxy"] - d["client"])
        return d


def cpu_label(d: dict) -> str:
    import os

    return (f"CPU s: replicas {d['replicas']:.1f}, Redis {d['redis']:.2f}, HAProxy {d['haproxy']:.2f}, client "
            f"{d['client']:.1f}, others {d['others']:.1f} in {d['t']:.0f} s ({os.cpu_count()} cores, load "
            f"{d.get('load0', 0):.1f}→{d.get('load1', 0):.1f})")


def run_bench(quick: bool, say: Callable[[str], None]) -> tuple[dict, dict]:
    """Start the cluster, run the class, stop everything: (the class's figures, the CPU windows)."""
    import os

    from deploy.cluster import Cluster, Ports
    from gptviz.live.redis_store import RedisStore
    from tools.load.live_classroom import live_class

    ports = Ports.free(REPLICAS)
    idle_s = QUICK_IDLE_S if quick else IDLE_S
    windows: dict = {}
    with tempfile.TemporaryDirectory(prefix="gptviz-live-") as logs, Cluster(ports, run_dir=Path(logs)) as cluster:
        say(f"cluster up: {ports.url}, replicas {ports.apps}, Redis {ports.redis}")
        store = RedisStore(ports.redis_url)
        code, token = store.create(LESSON)
        watch = CpuWatch(cluster)

        async def scenario(live) -> None:
            t0, load0 = watch.sample(), os.getloadavg()[0]
            if not await live.wait_answers(0, timeout=30):
                raise RuntimeError("not every student could answer step 1")
            await live.wait_for(lambda: any(n == STUDENTS for _, s, n in live.teacher.log.histograms if s == 0), 10)
            say(f"{STUDENTS} answers in; idle for {idle_s:g} s …")
            await asyncio.sleep(2 * POLL_S)  # the answers' own reruns are over
            a = watch.sample()
            await asyncio.sleep(idle_s)
            windows["idle"] = CpuWatch.between(a, watch.sample()) | {"load0": os.getloadavg()[0]}
            for k in range(NEXTS):
                if not await live.next_step(timeout=20):
                    raise RuntimeError(f"Next {k + 1}: not every student showed the new step within 20 s")
                if live.teacher.step in QUESTION_STEPS and not await live.wait_answers(live.teacher.step, 20):
                    raise RuntimeError(f"not every student could answer step {live.teacher.step + 1}")
                await asyncio.sleep(2 * POLL_S)
            say("Nexts done")
            windows["class"] = CpuWatch.between(t0, watch.sample()) | {"load0": load0, "load1": os.getloadavg()[0]}
            windows["idle"]["load1"] = windows["class"]["load1"]

        r = asyncio.run(asyncio.wait_for(live_class(ports.url, code, token, STUDENTS, scenario, ramp=5.0),
                                         idle_s + 180))
        r["redis_answers_step0"] = sum(store.answers(code, 0).values())
    return r, windows


def rows_from(r: dict, windows: dict, expected_caption: str, quick: bool) -> list[dict]:
    """The part's three rows, or FAIL rows with the reason."""
    from tools.bench.classroom import CAPTION

    shown = [m for m in r.get("models_shown", []) if m != "(no model caption)"]
    m = CAPTION.search(shown[0]) if len(shown) == 1 else None
    model = f"{m.group(2)} params · vocab {m.group(1)}" if m else f"shown: {'; '.join(shown) or 'no model caption'}"
    who = (f"{r['students']} students + teacher · {REPLICAS} replicas + Redis + HAProxy · Lessons, {LESSON} · "
           f"follow poll {POLL_S:g} s")
    reasons = []
    if shown != [expected_caption]:
        reasons.append(f"the pages showed {shown or 'no model'}, not the app's default ({expected_caption})")
    if not r.get("opened"):
        reasons.append("not every tab showed the class")
    if r.get("errors"):
        reasons.append(f"errors: {list(r['errors'])[:3]}")
    if r.get("answers_never_counted") or r.get("next_missed"):
        reasons.append(f"{r.get('answers_never_counted')} answers never counted, {r.get('next_missed')} steps "
                       "never shown")
    if r.get("redis_answers_step0") != r["students"]:
        reasons.append(f"Redis holds {r.get('redis_answers_step0')} answers for step 1, not {r['students']}")
    if reasons or "class" not in windows:
        why = "; ".join(reasons) or "the class did not run to its end"
        return [failed(f"live class · {who}", model, why[:400])]
    cls, idle = windows["class"], windows["idle"]
    per_min = 60.0 / idle["t"]
    h, n = r["answer_to_histogram_s"], r["next_to_step_s"]
    note = f" · --quick: idle {QUICK_IDLE_S:g} s" if quick else ""
    return [
        row(f"live: answer → teacher's count · {who}", model, f"{spread_label(h)} · {cpu_label(cls)}",
            goal=f"p95 ≤ {GOAL_HISTOGRAM_P95_S:g} s", ok=h["p95"] is not None and h["p95"] <= GOAL_HISTOGRAM_P95_S),
        row(f"live: teacher's Next → every student's step · {who} · {r['nexts']} Nexts", model,
            f"{spread_label(n)} · {cpu_label(cls)}", goal=f"p95 ≤ {GOAL_NEXT_P95_S:g} s",
            ok=n["p95"] is not None and n["p95"] <= GOAL_NEXT_P95_S),
        row(f"live: {r['students']} idle followers' CPU · {who}{note}", model,
            f"replicas {idle['replicas'] * per_min:.1f} CPU s/min, Redis {idle['redis'] * per_min:.2f} CPU s/min, "
            f"HAProxy {idle['haproxy'] * per_min:.2f} CPU s/min (client {idle['client'] * per_min:.1f}, others "
            f"{idle['others'] * per_min:.1f}) over {idle['t']:.0f} s", goal="", ok=None),
    ]


def bench_live(quick: bool, log: Callable[[str], None] | None = None) -> list[dict]:
    """The part's rows (a FAIL row when the cluster or the class failed)."""
    from tools.load.reading import expected_model

    say = log or (lambda m: print(f"[bench live] {m}", file=sys.stderr, flush=True))
    caption = expected_model()["caption"]
    try:
        r, windows = run_bench(quick, say)
    except Exception as exc:  # noqa: BLE001 - the part's failure is a row of its own
        return [failed("live class (the whole part)", "—", f"{type(exc).__name__}: {exc}"[:400])]
    return rows_from(r, windows, caption, quick)
