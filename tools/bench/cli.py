"""The bench's command line: pick the parts, run each (a part that raises fails loudly), print the table."""
from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time
from pathlib import Path
from typing import Callable

import torch

from tools.bench.browser import bench_browser
from tools.bench.circuits import bench_circuits, bench_circuits_browser
from tools.bench.classroom import bench_class
from tools.bench.engine import bench_trace
from tools.bench.live_class import bench_live
from tools.bench.long_texts import bench_long
from tools.bench.memory import bench_memory
from tools.bench.pages import bench_pages
from tools.bench.replicas_class import bench_replicas
from tools.bench.report import exit_status, failed, table
from tools.bench.run_record import LoadSampler, record
from tools.bench.training import bench_training

# the default; "class" (5-15 minutes) runs only when named in --only
PARTS = "trace,pages,circuits,memory,training,browser"
ALL_PARTS = PARTS + ",class,long,live,families"  # "long": every page at T = 512 (tools/bench/long_texts.py), ~15 min
# "families" (issue 38): every page at T = 256 for a Qwen3-0.6B-shaped folder, and every page on the shipped mixture
# of experts (shakespeare-moe), about 25 minutes
# "live": a live class of 60 on 2 replicas + Redis + HAProxy (tools/bench/live_class.py), about 2.5 minutes


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m tools.bench",
                                description="gptviz's benchmark (see the doc of tools/bench/__init__.py).")
    p.add_argument("--quick", action="store_true", help="fewer repeats (a smoke check)")
    p.add_argument("--only", default=PARTS,
                   help=f"comma-separated parts to run, of {ALL_PARTS} (default: {PARTS}; the class part, "
                        "simulated students against a server started here, takes 5-15 minutes and runs only when "
                        "asked for: --only class; so does long, every page at T = 512 for GPT-2 small and a "
                        "SmolLM2-135M shape, p95 of 20, about 15 minutes: --only long)")
    p.add_argument("--pages", help="comma-separated page files (by name: lessons,home) for the pages part "
                                   "(default: every page); e.g. --only pages --pages lessons --quick")
    p.add_argument("--browser-only", action="store_true", help="only the browser rows")
    p.add_argument("--no-browser", action="store_true", help="everything but the browser rows")
    p.add_argument("--json", help="also write the rows as JSON here")
    return p.parse_args(argv)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    a = parse_args(argv)
    torch.set_num_threads(int(os.environ.get("GPTVIZ_THREADS", "2")))
    from gptviz.perf import tune_allocator

    tune_allocator()  # as the app does (gptviz.ui imports it): measure what users get
    parts = {"browser"} if a.browser_only else set(a.only.split(","))
    if a.no_browser:
        parts.discard("browser")
    pages = [p.strip() for p in a.pages.split(",") if p.strip()] if a.pages else None
    rows: list[dict] = []
    steps: list[tuple[str, Callable[[], list[dict]]]] = [
        ("trace", lambda: bench_trace(a.quick)),
        ("pages", lambda: bench_pages(a.quick, "default", pages) + bench_pages(a.quick, "gpt2-small", pages)),
        # the Circuits page's graph (issue 34), in AppTest and in Chromium, about 3 minutes
        ("circuits", lambda: bench_circuits(a.quick) + bench_circuits_browser(a.quick)),
        ("memory", bench_memory),
        ("training", lambda: bench_training(a.quick)),
        ("browser", lambda: bench_browser(a.quick)),
        ("class", lambda: bench_class(a.quick) + bench_replicas(a.quick)),
        ("live", lambda: bench_live(a.quick)),  # a live class on 2 replicas + Redis + HAProxy (~2.5 min)
        ("long", lambda: bench_long(a.quick)),
        # 20 text changes a page for the Qwen3 shape (p95 of 20, as issue 38 asks; 21 pages, ~20 minutes)
        ("families", lambda: bench_long(a.quick, reps=2 if a.quick else 20, models=("qwen3",))
         + bench_pages(a.quick, "shakespeare-moe", pages)
         + bench_pages(a.quick, "shakespeare-moe · full lines", pages)),
    ]
    started, t_run = datetime.datetime.now(datetime.timezone.utc), time.perf_counter()
    with LoadSampler() as load:
        _run_parts(steps, parts, rows)
    print(table(rows))
    status = exit_status(rows)
    if a.json:  # the rows and what the run was: the documentation's benchmark page is generated from this file
        run = record([name for name, _ in steps if name in parts], argv, started, time.perf_counter() - t_run,
                     load.samples, status)
        Path(a.json).write_text(json.dumps({"run": run, "rows": rows}, indent=1))
    return status


def _run_parts(steps: list[tuple[str, Callable[[], list[dict]]]], parts: set[str], rows: list[dict]) -> None:
    for name, fn in steps:
        if name in parts:
            t = time.perf_counter()
            try:
                rows += fn()
            except Exception as exc:  # noqa: BLE001 - the part fails loudly, the other parts still run
                rows.append(failed(f"{name} (the whole part)", "—", f"{type(exc).__name__}: {exc}"[:300]))
            print(f"[bench] {name} done in {time.perf_counter() - t:.0f} s", file=sys.stderr, flush=True)
