"""A live class of simulated tabs (``live_student.Tab``): a teacher and N students on one class, all in this
process's event loop, driven by a *scenario* (what the teacher does, when a replica dies), and the figures.

``run_live_class(url, code, token, students=60, scenario=…)`` opens the teacher's tab and the students' (spread
over ``ramp`` seconds), waits until every student shows the class, runs ``await scenario(live)`` with a
``LiveClass`` (``next_step()``, ``wait_answers(step)``, ``wait_for(predicate)``), stops every tab and returns
``summarise(live)``:

- ``next_to_step_s``: from the teacher's Next being sent to each student's page first showing the new step;
- ``answer_to_histogram_s``: from a student's answer being sent to the teacher's histogram first counting it
  (the k-th answer of a step is counted when the histogram's total first reaches k);
- ``drops``: each reconnection (seconds to a new websocket and to the first view, replica before and after,
  the step and own answer that view showed); ``uploads_refused``; ``errors``; first views.
"""
from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import dataclass
from typing import Awaitable, Callable

from tools.load.live_page import LIVE_UI, LiveUi
from tools.load.live_student import Tab


def spread(xs: list[float]) -> dict:
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return {"n": 0, "p50": None, "p95": None, "max": None}
    p95 = xs[min(len(xs) - 1, max(0, int(round(0.95 * len(xs) + 0.5)) - 1))]
    return {"n": len(xs), "p50": statistics.median(xs), "p95": p95, "max": xs[-1]}


@dataclass
class LiveClass:
    """The class while it runs: the teacher's tab, the students' tabs, and what a scenario can ask for."""

    code: str
    token: str
    teacher: Tab
    students: list[Tab]
    stop: asyncio.Event

    async def wait_for(self, predicate: Callable[[], bool], timeout: float) -> bool:
        deadline = time.perf_counter() + timeout
        while not predicate():
            if time.perf_counter() > deadline:
                return False
            await asyncio.sleep(0.05)
        return True

    def seeing(self, step: int) -> int:
        """How many students' pages show this step now."""
        return sum(t.step == step for t in self.students)

    async def next_step(self, timeout: float = 15.0) -> bool:
        """The teacher presses Next; wait until every student shows the new step (False: not within timeout)."""
        before = self.teacher.step
        n = len(self.teacher.log.nexts)
        self.teacher.want_next()
        if not await self.wait_for(lambda: len(self.teacher.log.nexts) > n, timeout):
            return False
        target = (before or 0) + 1
        return await self.wait_for(lambda: self.seeing(target) == len(self.students), timeout)

    async def wait_answers(self, step: int, timeout: float = 15.0) -> bool:
        """Wait until every student has sent an answer for this step."""
        return await self.wait_for(lambda: all(any(a["step"] == step and a["ok"] for a in t.log.answers)
                                               for t in self.students), timeout)


def _next_latencies(live: LiveClass) -> list[float]:
    out = []
    for nx in live.teacher.log.nexts:
        if not nx["ok"] or nx["from"] is None:
            continue
        target = nx["from"] + 1
        for t in live.students:
            seen = [when for step, when in t.log.steps_seen if step == target and when >= nx["sent"]]
            out.append(seen[0] - nx["sent"] if seen else None)
    return out


def _histogram_latencies(live: LiveClass) -> list[float]:
    out = []
    steps = {a["step"] for t in live.students for a in t.log.answers}
    for step in steps:
        sent = sorted(a["sent"] for t in live.students for a in t.log.answers if a["step"] == step and a["ok"])
        seen = [(when, total) for when, s, total in live.teacher.log.histograms if s == step]
        for k, t_sent in enumerate(sent, start=1):
            first = next((when for when, total in seen if total >= k and when >= t_sent), None)
            out.append(None if first is None else first - t_sent)
    return out


def summarise(live: LiveClass, wall_s: float) -> dict:
    tabs = [live.teacher, *live.students]
    errors: dict[str, int] = {}
    for t in tabs:
        for e in t.log.errors:
            errors[e] = errors.get(e, 0) + 1
    nexts, hists = _next_latencies(live), _histogram_latencies(live)
    drops = [d | {"who": t.log.who} for t in tabs for d in t.log.drops]
    refused = [(t.log.who, st, text) for t in live.students for st, text in t.log.uploads if not 200 <= st < 300]
    return {
        "students": len(live.students), "code": live.code, "wall_s": wall_s,
        "first_view_s": spread([t.log.first_view_s for t in live.students]),
        "students_with_a_view": sum(t.log.first_view_s is not None for t in live.students),
        "next_to_step_s": spread(nexts), "next_missed": sum(x is None for x in nexts),
        "nexts": len(live.teacher.log.nexts),
        "answer_to_histogram_s": spread(hists), "answers_never_counted": sum(x is None for x in hists),
        "answers": sum(len(t.log.answers) for t in live.students),
        "drops": drops, "reconnect_s": spread([d.get("reconnect_s") for d in drops]),
        "view_after_drop_s": spread([d.get("view_s") for d in drops]),
        "uploads": sum(len(t.log.uploads) for t in live.students), "uploads_refused": refused,
        "replicas": {r: sum(t.log.replicas[:1] == [r] for t in live.students)
                     for r in sorted({r for t in live.students for r in t.log.replicas[:1]})},
        "errors": errors, "runs": sum(t.log.runs for t in tabs),
        "models_shown": sorted(set().union(*(t.log.models for t in tabs))),
        "steps_seen": {t.log.who: [s for s, _ in t.log.steps_seen] for t in tabs},
    }


async def live_class(url: str, code: str, token: str, students: int,
                     scenario: Callable[[LiveClass], Awaitable[None]], *, ramp: float = 5.0,
                     interval: float = 1.0, ui: LiveUi = LIVE_UI, upload_check: bool = True,
                     open_timeout: float = 60.0) -> dict:
    """The whole class (see the module's doc); returns ``summarise``'s figures, with ``"opened"`` False when not
    every tab showed the class within ``open_timeout`` seconds (the scenario then does not run)."""
    stop = asyncio.Event()
    teacher = Tab(url, code, "teacher", teacher_token=token, ui=ui, interval=interval, upload_check=False)
    roster = [Tab(url, code, f"student {i}", ui=ui, interval=interval, upload_check=upload_check)
              for i in range(students)]  # each opens the join link: the class issues its id
    live = LiveClass(code, token, teacher, roster, stop)
    t0 = time.perf_counter()
    gap = ramp / max(1, students)
    tasks = [asyncio.ensure_future(teacher.attend(stop))]
    tasks += [asyncio.ensure_future(t.attend(stop, open_at=t0 + i * gap)) for i, t in enumerate(roster)]
    opened = await live.wait_for(lambda: all(t.step is not None for t in [teacher, *roster]), open_timeout)
    try:
        if opened:
            await scenario(live)
    finally:
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
    missing = [{"who": t.log.who, "in_class": t.in_class, "step": t.step, "connected": t.s.is_open,
                "first_view_s": t.log.first_view_s, "errors": t.log.errors[:2]}
               for t in [teacher, *roster] if t.step is None]
    return summarise(live, time.perf_counter() - t0) | {"opened": opened, "not_opened": missing[:5]}
