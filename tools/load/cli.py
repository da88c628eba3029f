"""The load test's command line: start a server (or use --url), run the class, print the table, write --json."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m tools.load",
                                description="Simulated students against gptviz over Streamlit's websocket protocol "
                                            "(see the doc of tools/load/__init__.py).")
    p.add_argument("--students", type=int, default=5, help="simulated students (sessions)")
    p.add_argument("--seconds", type=float, default=20.0,
                   help="how long each student makes changes, counted from its first view")
    p.add_argument("--every", type=float, default=5.0, help="seconds between a student's changes (jittered ±50%%)")
    p.add_argument("--trainers", type=int, default=0, help="students who first start a training run")
    p.add_argument("--page", default="Attention", help="the page's address in the app's navigation")
    p.add_argument("--url", help="an already running server (default: start `streamlit run app.py` here)")
    p.add_argument("--ramp", type=float, default=0.0,
                   help="spread the students' openings over this many seconds (default 0: all at once)")
    p.add_argument("--same-texts", action="store_true",
                   help="edits reuse three texts (trace-cache hits) instead of a new text each time")
    p.add_argument("--server-pid", type=int, help="with --url: the server process to watch (default: found by port)")
    p.add_argument("--seed", type=int, help="the students' random choices (default: random)")
    p.add_argument("--json", help="also write the figures as JSON here")
    return p.parse_args(argv)


def main(argv=None) -> int:
    a = parse_args(argv)
    from tools.bench.report import BenchFailure
    from tools.bench.server import start_server, stop_server
    from tools.load.classroom import run_class
    from tools.load.report import exit_status, table

    try:
        proc, url = (None, a.url) if a.url else start_server(ROOT / "app.py", ROOT)
    except BenchFailure as exc:
        print(f"[load] FAIL: {exc}", file=sys.stderr)
        return 2
    try:
        print(f"[load] {a.students} students × {a.seconds:g} s against {url}", file=sys.stderr, flush=True)
        result = run_class(url, students=a.students, seconds=a.seconds, every=a.every, trainers=a.trainers,
                           page=a.page, ramp=a.ramp, same_texts=a.same_texts,
                           server_pid=a.server_pid or (proc.pid if proc else None), seed=a.seed)
    finally:
        if proc is not None:
            stop_server(proc)
    print(table(result))
    if a.json:
        Path(a.json).write_text(json.dumps(result, indent=1))
    return exit_status(result)
