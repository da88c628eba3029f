"""A simulated student following a live class, and the teacher leading it, each one browser tab (``LiveSession``).

A **student** opens the class's join link ``?class=CODE`` (or ``&me=<id>`` when given an id the class issued) and
keeps the id the page then writes into its address (``me=``, issued by the class), checks once that an upload
reaches its session (through a balancer that only works with sticky sessions), then does what the page's timed
fragment makes the browser do: every ``interval`` seconds (the fragment's own ``run_every``) it asks for the
fragment's run and reads the step the page shows. On a step it has not answered yet it picks a choice and sends
it (once per step). The **teacher** opens ``?class=CODE&teach=<token>``, polls the same way and reads the
histogram; ``want_next()`` makes it press Next at its next turn.

When the connection drops (a replica died) the tab does what the browser does: retries the health check until
the balancer answers, opens a new websocket and reruns the page from its address. The log keeps, for each drop,
the time to a new websocket, the time to the first full view after it, which replica it was on before and after,
and what that view showed (the step, the student's own answer, any error).

Runs are one at a time per tab: a fragment's run waits for the run before it (the browser's timer does not; the
difference is at most one run's time).
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from urllib.parse import parse_qs

from websockets.exceptions import ConnectionClosed

from tools.load import live_page, reading
from tools.load.live_page import LIVE_UI, LiveUi
from tools.load.live_session import LiveSession
from tools.load.protocol import Run

FINAL_FRAGMENT = "FINISHED_FRAGMENT_RUN_SUCCESSFULLY"


@dataclass
class LiveLog:
    """What one tab did and saw (times are ``time.perf_counter()``)."""

    who: str
    student_id: str = ""  # the address's me= ("" for the teacher), as the page wrote it
    first_view_s: float | None = None
    steps_seen: list[tuple[int, float]] = field(default_factory=list)  # (step, when first seen)
    answers: list[dict] = field(default_factory=list)  # {"step", "choice", "sent", "done", "ok"}
    histograms: list[tuple[float, int, int]] = field(default_factory=list)  # teacher: (when, step, total)
    nexts: list[dict] = field(default_factory=list)  # teacher: {"from", "sent", "done", "ok"}
    drops: list[dict] = field(default_factory=list)
    uploads: list[tuple[int, str]] = field(default_factory=list)
    replicas: list[str] = field(default_factory=list)  # the sticky cookie's replica at each connection
    errors: list[str] = field(default_factory=list)
    models: set[str] = field(default_factory=set)  # the sidebar's model captions the full views showed
    runs: int = 0


class Tab:
    """One student's or the teacher's tab (``teacher_token`` set: the teacher)."""

    def __init__(self, url: str, code: str, who: str, *, student_id: str = "", teacher_token: str = "",
                 choices: int = 4, ui: LiveUi = LIVE_UI, interval: float = 1.0, upload_check: bool = True,
                 answer_steps: set[int] | None = None):
        self.url, self.code, self.ui, self.choices = url, code, ui, choices
        self.student_id, self.token = student_id, teacher_token
        self.default_interval, self.upload_check = interval, upload_check
        self.answer_steps = answer_steps  # the steps a student answers (None: every step)
        self.log = LiveLog(who, student_id)
        self.step: int | None = None  # the class's step the page shows (None: the page shows no class)
        self.in_class = False  # the last full view's class bar named this class
        self.answered: set[int] = set()
        self.s = LiveSession(url)
        self.s.query_string = f"class={code}" + (f"&teach={teacher_token}" if teacher_token else
                                                 f"&me={student_id}" if student_id else "")
        self._next = asyncio.Event()
        self._due: dict[str, float] = {}  # fragment id -> when its next timed run is due
        self.widget_fragment: dict[str, str] = {}  # widget id -> the fragment that drew it ("" : the page)
        from tools.load.widgets import WidgetBook

        self.book = WidgetBook()

    @property
    def teacher(self) -> bool:
        return bool(self.token)

    def want_next(self) -> None:
        self._next.set()

    # ----------------------------------------------------------------------------------------- reading a run
    def _take(self, run: Run, what: str, fragment_id: str = "") -> None:
        self.log.runs += 1
        errs, _ = reading.errors(run.elements, run.compile_errors)
        self.log.errors += [f"{what}: {e}" for e in errs]
        if run.finished_at is None:
            if not self.s.closed_reason:
                self.log.errors.append(f"{what}: no script_finished within the time limit")
            return
        whole = run.status != FINAL_FRAGMENT
        self.book.learn(run.elements, whole_page=whole)
        drawn = {getattr(el, el.WhichOneof("type")).id for _, el in run.elements
                 if el.WhichOneof("type") in ("radio", "button", "selectbox", "button_group")}
        self.widget_fragment.update({w: ("" if whole else fragment_id) for w in drawn})
        if whole:
            me = parse_qs(self.s.query_string).get("me", [""])[0]
            if me and not self.teacher:  # the id the class issued this tab (a reconnection opens with it)
                self.student_id = self.log.student_id = me
            self.in_class = live_page.class_shown(run.elements, self.ui) == self.code
            self.log.models.add(reading.model_shown(run.elements) or "(no model caption)")
        step = live_page.step_shown(run.elements, self.ui) if self.in_class else None
        if step is not None and step != self.step:
            self.step = step
            self.log.steps_seen.append((step, run.finished_at))
        if self.teacher:
            n = live_page.answered_shown(run.elements, self.ui)
            if n is not None and self.step is not None:
                self.log.histograms.append((run.finished_at, self.step, n))

    async def _full_view(self, what: str) -> Run:
        run = await self.s.rerun(page_name=self.ui.page, timeout=60)
        self._take(run, what)
        return run

    # ----------------------------------------------------------------------------------------- acting
    async def _press(self, label: str, what: str) -> tuple[float, Run | None]:
        """Press the button with this label (in its fragment if a fragment drew it): (when sent, the run)."""
        try:
            b = self.book.find("button", label=label)
        except KeyError as exc:
            self.log.errors.append(f"{what}: {exc}"[:300])
            return time.perf_counter(), None
        self.book.press(b.id)
        fid = self.widget_fragment.get(b.id, "")
        sent = time.perf_counter()
        run = await self.s.rerun(self.book.states(), fragment_id=fid, timeout=60)
        self._take(run, what, fid)
        return sent, run

    async def _answer(self) -> None:
        step = self.step
        self.answered.add(step)  # one try per step
        try:
            w = self.book.find(None, label=self.ui.answer_label)
        except KeyError:
            return  # no question on this step
        choice = (sum(map(ord, self.student_id)) + 7 * step) % min(self.choices, len(w.options) or self.choices)
        self.book.set(w.id, w.options[choice] if w.options else choice)
        fid = self.widget_fragment.get(w.id, "")
        sent = time.perf_counter()
        if self.ui.send_label:
            sent, run = await self._press(self.ui.send_label, f"answer at step {step}")
        else:
            run = await self.s.rerun(self.book.states(), fragment_id=fid, timeout=60)
            self._take(run, f"answer at step {step}", fid)
        done = run.finished_at if run is not None else None
        shown = None if run is None else live_page.my_answer_shown(run.elements, self.ui)
        self.log.answers.append({"step": step, "choice": choice, "sent": sent, "done": done,
                                 "ok": done is not None and shown == choice + 1})  # the page confirms it, 1-based

    async def _press_next(self) -> None:
        self._next.clear()
        before = self.step
        sent, run = await self._press(self.ui.next_label, "the teacher's Next")
        done = run.finished_at if run is not None else None
        self.log.nexts.append({"from": before, "sent": sent, "done": done, "ok": done is not None})

    async def _recover(self) -> None:
        """The connection dropped: reconnect through the balancer and draw the page again from the address."""
        was = self.s.replica
        dropped = self.s.closed_at or time.perf_counter()
        drop = {"at": dropped, "replica_before": was, "reason": self.s.closed_reason[:120]}
        self.log.drops.append(drop)
        await self.s.reconnect()
        drop["reconnect_s"] = time.perf_counter() - dropped
        drop["replica_after"] = self.s.replica
        self.log.replicas.append(self.s.replica)
        run = await self._full_view("the view after reconnecting")
        drop["view_s"] = None if run.finished_at is None else run.finished_at - dropped
        drop["step_shown"] = live_page.step_shown(run.elements, self.ui)
        drop["my_answer_shown"] = live_page.my_answer_shown(run.elements, self.ui)
        drop["errors"] = reading.errors(run.elements, run.compile_errors)[0][:3]
        if self.upload_check and self.s.session_id:  # the new replica holds the session now: an upload reaches it
            drop["upload"] = (await self.s.upload())[0]

    async def _fragments(self, stop: asyncio.Event) -> None:
        """Wait for the next timed fragment that is due (each on its own ``run_every``, as the browser's timers)
        and run it; return early when the class stops or the teacher is to press Next."""
        now = time.perf_counter()
        for fid, every in self.s.auto_reruns.items():
            self._due.setdefault(fid, now + every)
        self._due = {f: t for f, t in self._due.items() if f in self.s.auto_reruns}
        fid, due = min(self._due.items(), key=lambda x: x[1], default=("", now + self.default_interval))
        waits = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(self._next.wait())]
        await asyncio.wait(waits, timeout=max(0.0, due - now), return_when=asyncio.FIRST_COMPLETED)
        for w in waits:
            w.cancel()
        if stop.is_set() or self._next.is_set() or not self.s.is_open or not fid:
            return
        self._due[fid] = time.perf_counter() + self.s.auto_reruns.get(fid, self.default_interval)
        run = await self.s.rerun(self.book.states(), fragment_id=fid, is_auto_rerun=True, timeout=60)
        self._take(run, "a fragment's run", fid)

    async def _turn(self, stop: asyncio.Event) -> None:
        """One thing the tab does next: reconnect, press Next, answer, or wait for and run a timed fragment."""
        if not self.s.is_open:
            await self._recover()
        elif self.teacher and self._next.is_set():
            await self._press_next()
        elif (not self.teacher and self.step is not None and self.step not in self.answered
              and (self.answer_steps is None or self.step in self.answer_steps)):
            await self._answer()
        else:
            await self._fragments(stop)

    # ----------------------------------------------------------------------------------------- the session
    async def attend(self, stop: asyncio.Event, *, open_at: float = 0.0) -> LiveLog:
        await asyncio.sleep(max(0.0, open_at - time.perf_counter()))
        t0 = time.perf_counter()
        try:
            await self.s.connect()
            self.log.replicas.append(self.s.replica)
            run = await self._full_view("the first view")
            if run.finished_at is not None:
                self.log.first_view_s = run.finished_at - t0
            if self.upload_check and self.s.session_id:
                self.log.uploads.append(await self.s.upload())
            while not stop.is_set():
                try:
                    await self._turn(stop)
                except ConnectionClosed as exc:  # a send on a connection that just dropped: the next turn recovers
                    self.s.closed_reason = self.s.closed_reason or f"connection closed: {exc}"
        except Exception as exc:  # noqa: BLE001 - one tab's failure is reported, the class carries on
            self.log.errors.append(f"client: {type(exc).__name__}: {exc}"[:300])
        finally:
            self.log.errors += [f"protocol: {e}" for e in self.s.protocol_errors]
            await self.s.close()
        return self.log
