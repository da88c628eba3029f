"""Part 6's last rows: the largest class at p95 ≤ 1 s on two replicas of ``streamlit run app.py`` behind HAProxy on
this machine (``deploy.cluster``, as ``deploy/run_local.py --replicas 2`` starts them; Redis runs beside them, unused
by this page), goal 200 students (issue 37).

Both replicas are warmed first (one student opens the Attention page on each, straight to its port). Then classes of
60, 90, 120, 150, 200 and 250 students open the page through the balancer and type a new sentence every 5 s
(``classroom.SENTENCE_CHARS``), 30 s each (``--quick``: 15 s), until p95 goes over 1 s or a run fails. The server CPU in
each row is both replicas' together (their own sampling, ``live_class.CpuWatch``); the peak RSS is the first replica's.

Importing this module starts nothing and imports neither Streamlit nor ``tools.load``.
"""
from __future__ import annotations

import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

from tools.bench.classroom import (
    PAGE,
    PAUSE_S,
    QUICK_SECONDS,
    SENTENCE_CHARS,
    STEADY,
    SWEEP_SECONDS,
    sweep_rows,
    sweep_should_stop,
)
from tools.bench.report import failed

REPLICAS = 2
REPLICA_SWEEP = (60, 90, 120, 150, 200, 250)
GOAL_REPLICAS = 200


def with_replicas_cpu(r: dict, window: dict) -> dict:
    """The run's figures with its server CPU replaced by both replicas' (``window``: ``CpuWatch.between``); Redis,
    HAProxy and everything else count as the other processes."""
    cpu = dict(r.get("cpu") or {})
    cpu["server_cpu_s"] = window["replicas"]
    cpu["other_processes_cpu_s"] = window["redis"] + window["haproxy"] + window["others"]
    return {**r, "cpu": cpu}


def bench_replicas(quick: bool, log: Callable[[str], None] | None = None) -> list[dict]:
    """Start the cluster, warm both replicas, sweep the class sizes, stop everything: the rows."""
    from deploy.cluster import HOST, Cluster, Ports
    from tools.bench.live_class import CpuWatch
    from tools.load import run_class
    from tools.load.student import sentence

    say = log or (lambda m: print(f"[bench class] {m}", file=sys.stderr, flush=True))
    seconds = QUICK_SECONDS["sweep"] if quick else SWEEP_SECONDS
    note = f"--quick: {seconds:g} s, not {SWEEP_SECONDS:g} s" if quick else ""
    offset = [random.SystemRandom().randrange(26**4 - 300_000)]  # new texts in every run

    def sentences(i: int, n: int) -> str:
        return sentence(offset[0] + i * 1000 + n, *SENTENCE_CHARS)

    where = f"{REPLICAS} replicas behind HAProxy"
    results: list[dict] = []
    try:
        ports = Ports.free(REPLICAS)
        with tempfile.TemporaryDirectory(prefix="gptviz-replicas-") as logs, \
                Cluster(ports, run_dir=Path(logs)) as cluster:
            pid = cluster.replicas[0].popen.pid
            for port in ports.apps:  # the teacher's visit, on each replica
                run_class(f"http://{HOST}:{port}", students=1, seconds=0.0, page=PAGE, text_for=sentences)
            watch = CpuWatch(cluster)
            for n in REPLICA_SWEEP:
                say(f"{where}: {n} students, {seconds:g} s …")
                offset[0] += 1000 * n
                before = watch.sample()
                r = run_class(ports.url, students=n, seconds=seconds, every=STEADY["every"], page=PAGE,
                              server_pid=pid, text_for=sentences)
                results.append(with_replicas_cpu(r, CpuWatch.between(before, watch.sample())))
                say(f"… {'OK' if r['ok'] else r['failures']}")
                time.sleep(PAUSE_S)
                if sweep_should_stop(r):
                    break
    except Exception as exc:  # noqa: BLE001 - the runs so far are kept; the failure is a row of its own
        return (sweep_rows(results, note=note, goal_students=GOAL_REPLICAS, where=where) if results else []) + [
            failed(f"class: {where}", "—", f"{type(exc).__name__}: {exc}"[:300])]
    return sweep_rows(results, note=note, goal_students=GOAL_REPLICAS, where=where)
