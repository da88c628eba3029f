"""``run_class``: a class of simulated students against one running server, and the figures it measured.

All students run as asyncio tasks in this one process (one core drives many sessions). While they run, the
server's memory is sampled from /proc, and the CPU time of the server, of this client and of every other
process is measured (``machine``): the latencies are known to be the server's, on a machine this busy.
"""
from __future__ import annotations

import asyncio
import random
import time
from urllib.parse import urlsplit

from tools.load.machine import CpuMeter
from tools.load.memory import MemorySampler, pid_listening_on
from tools.load.report import summarise
from tools.load.student import Plan, Student

EXPECT_APP_DEFAULT = "app default"  # run_class's expected_model: work the app's default model out


async def _attend_all(url: str, plan: Plan, students: int, trainers: int, ramp: float, seed: int) -> list:
    start = time.perf_counter()
    gap = ramp / students if students else 0.0
    roster = [Student(url, i, plan, trainer=i < trainers, open_at=start + i * gap, seed=seed * 1000 + i)
              for i in range(students)]
    return await asyncio.gather(*(s.attend() for s in roster))


def run_class(url: str, students: int = 5, seconds: float = 20.0, every: float = 5.0, trainers: int = 0,
              page: str = "Attention", *, ramp: float = 0.0, same_texts: bool = False, server_pid: int | None = None,
              expected_model: str | None = EXPECT_APP_DEFAULT, seed: int | None = None, **plan_fields) -> dict:
    """Run ``students`` simulated students against the server at ``url``, each making changes for ``seconds``
    after its first view, and return the figures (see ``report.summarise``). ``trainers`` of them first start a
    training run. ``ramp``: spread the openings over this many seconds (0: all at once). ``server_pid``: the
    server process to watch (default: the one listening on the url's port, for a local url). ``expected_model``:
    the model caption every page must show (default: the app's default model; None: do not check). Other keyword
    arguments set ``Plan`` fields (labels, time limits)."""
    if expected_model == EXPECT_APP_DEFAULT:
        from tools.load.reading import expected_model as app_default

        expected_model = app_default()["caption"]
    seed = random.SystemRandom().randrange(2**31) if seed is None else seed
    parts = urlsplit(url)
    local = parts.hostname in ("127.0.0.1", "localhost", "::1")
    pid = server_pid or (pid_listening_on(parts.port or 80) if local else None)
    sampler = MemorySampler(pid).start() if pid else None
    cpu, t0 = CpuMeter(pid).start(), time.perf_counter()
    plan = Plan(page=page, every=every, seconds=seconds, same_texts=same_texts,
                text_offset=random.Random(seed).randrange(26**4), **plan_fields)
    logs = asyncio.run(_attend_all(url, plan, students, min(trainers, students), ramp, seed))
    wall = time.perf_counter() - t0
    cpu_used = cpu.stop(wall)
    memory = sampler.stop() if sampler else {"server_pid": None, "note": "no server process found to watch"}
    settings = {"url": url, "students": students, "trainers": min(trainers, students), "seconds": seconds,
                "every": every, "page": page, "ramp": ramp, "same_texts": same_texts, "seed": seed}
    return summarise(logs, settings=settings, expected_model=expected_model, memory=memory, cpu=cpu_used)
