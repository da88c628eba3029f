"""One simulated student: open a page, then every few seconds edit the text or switch the layer or head, and (a
trainer) start one training run first. Everything the student saw is kept in a ``StudentLog``.

A student waits for each run to finish before the next change (as a reader does); a change due while a run is
still going is sent as soon as it finishes and counted as late. Texts are unique (so each edit misses the
server's trace cache) unless ``Plan.same_texts`` is set. A student makes changes for ``Plan.seconds`` from its
first view (a slow first view does not eat its time); a run in flight then is still waited for, up to
``Plan.run_timeout`` seconds.
"""
from __future__ import annotations

import asyncio
import random
import re
import time
from dataclasses import dataclass, field
from typing import Callable

from tools.load import reading
from tools.load.protocol import Run, Session
from tools.load.widgets import WidgetBook

TEXT_LABEL = "Text (each line is one row of the batch)"  # gptviz/ui/page.py's sidebar
LAYER_LABEL, HEAD_LABEL = "Layer", "Head"
TRAIN_PAGE, TRAIN_BUTTON = "Training", "▶ Start training"
TRAINED = re.compile(r"Trained for (\d+) steps")  # the Training page's sentence once a run has finished
LETTERS = "abcdefghijklmnopqrstuvwxyz"


def unique_text(n: int) -> str:
    """A line of the same length for every ``n``, different for each ``n`` below 26**4: ``n`` in four letters."""
    word = "".join(LETTERS[(n // 26**i) % 26] for i in range(4))
    return f"to be, or not to be: that is the {word}."


SENTENCE_WORDS = ("king", "queen", "night", "love", "death", "sword", "crown", "heart", "blood", "storm", "moon",
                  "star", "rose", "winter", "ghost", "fool", "grave", "honour", "tongue", "fortune")


def sentence(n: int, low: int = 30, high: int = 60) -> str:
    """A sentence of ``low`` to ``high`` characters (the length set by ``n``), different for each ``n`` below 26**4,
    as a student types one: "the <four letters> ..." and words of a play, ending with a full stop."""
    if not 8 <= low <= high:
        raise ValueError(f"low={low} and high={high}: need 8 <= low <= high")
    length = low + (n * 7919) % (high - low + 1)
    words = ["the", "".join(LETTERS[(n // 26**i) % 26] for i in range(4))]
    i = n
    while len(" ".join(words)) < length:
        words.append(SENTENCE_WORDS[i % len(SENTENCE_WORDS)])
        i = i // 3 + 7 * len(words)
    cut = " ".join(words)[: length - 1]
    return (cut[:-1] + "s" if cut.endswith(" ") else cut) + "."


@dataclass
class Plan:
    """What every student of a class does."""

    page: str = "Attention"  # the page's address (url_pathname) in the app's navigation
    every: float = 5.0  # seconds between a student's changes, on average (jittered ±50 %)
    seconds: float = 20.0  # how long each student makes changes, counted from its first view
    same_texts: bool = False  # edits cycle through three texts (trace-cache hits) instead of unique ones
    text_offset: int = 0  # where the unique texts start (random per class: a fresh server cache every run)
    run_timeout: float = 120.0  # the longest wait for one run
    first_view_timeout: float = 300.0
    training_timeout: float = 600.0
    training_steps: int | None = None  # a trainer's run: this many steps (None: the Training page's default)
    text_label: str = TEXT_LABEL
    layer_label: str = LAYER_LABEL
    head_label: str = HEAD_LABEL
    text_for: Callable[[int, int], str] | None = None  # (student, change) -> text; overrides the two above
    text_only: bool = False  # every change is a text edit (no layer or head switch)


@dataclass
class StudentLog:
    """What one student did and saw."""

    index: int
    trainer: bool
    first_view_s: float | None = None
    changes: list[dict] = field(default_factory=list)  # {"kind", "seconds" (None: never finished), "late"}
    training: dict | None = None  # {"seconds", "status"}
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    models: list[tuple[str, bool]] = field(default_factory=list)  # (the sidebar's model caption, checked?)
    messages: int = 0
    bytes: int = 0
    refs_resolved: int = 0


class Student:
    """One student's session and its behaviour."""

    def __init__(self, url: str, index: int, plan: Plan, *, trainer: bool, open_at: float, seed: int):
        self.url, self.plan, self.open_at = url, plan, open_at
        self.log = StudentLog(index, trainer)
        self.rng = random.Random(seed)
        self.book = WidgetBook()
        self.n_changes = 0
        self.trained = False
        self.deadline = 0.0  # time.perf_counter() after which no change is sent (set at the first view)

    def _text(self) -> str:
        i, n = self.log.index, self.n_changes
        if self.plan.text_for is not None:
            return self.plan.text_for(i, n)
        if self.plan.same_texts:
            return unique_text((i + n) % 3)
        return unique_text(self.plan.text_offset + i * 1000 + n)  # unique for up to 456 students × 1000

    def _record(self, run: Run, s: Session, what: str) -> None:
        """Keep the errors, warnings and model caption of one run; learn its widgets."""
        errs, warns = reading.errors(run.elements, run.compile_errors)
        if run.page_not_found:
            errs.append(f"page not found ({what})")
        if run.finished_at is None:
            errs.append(f"{what}: no script_finished within the time limit" +
                        (f" ({s.closed_reason})" if s.closed_reason else ""))
        self.log.errors += errs
        self.log.warnings += warns
        caption = reading.model_shown(run.elements)
        if caption is not None or run.finished_at is not None:
            self.log.models.append((caption or "(no model caption)", not self.trained))
        if run.finished_at is not None:
            self.book.learn(run.elements, whole_page=run.status != "FINISHED_FRAGMENT_RUN_SUCCESSFULLY")

    def _change(self) -> str:
        """Make one change to the widgets (not sent yet); its kind."""
        kinds = ["text", "text"]
        for kind, label in (() if self.plan.text_only else (("layer", self.plan.layer_label),
                                                             ("head", self.plan.head_label))):
            try:
                if len(self.book.find("selectbox", label=label).options) > 1:
                    kinds.append(kind)
            except KeyError:
                pass
        kind = self.rng.choice(kinds)
        if kind == "text":
            w = self.book.find(None, label=self.plan.text_label)
            self.book.set(w.id, self._text())
        else:
            w = self.book.find("selectbox", label=self.plan.layer_label if kind == "layer" else self.plan.head_label)
            now = self.book.value(w.id)
            self.book.set(w.id, self.rng.choice([o for o in w.options if o != now]))
        self.n_changes += 1
        return kind

    async def _train(self, s: Session) -> None:
        """Press Start training on the Training page and wait for the run; then open the class's page."""
        button = self.book.find("button", label=TRAIN_BUTTON)
        if self.plan.training_steps is not None:
            self.book.set(self.book.find("number_input", label="Steps").id, int(self.plan.training_steps))
        self.book.press(button.id)
        run = await s.rerun(self.book.states(), timeout=self.plan.training_timeout)
        done = [m for t in reading.texts(run.elements) for m in TRAINED.findall(t)]
        self.log.training = {"seconds": run.seconds, "status": run.status or "did not finish",
                             "steps": int(done[0]) if done else None}  # as the page says it trained
        self.trained = True  # from the end of this run on, the pages show the model it trained
        self._record(run, s, "the training run")
        page = s.page(self.plan.page)
        run = await s.rerun(self.book.states(), page_script_hash=page.script_hash if page else None,
                            page_name=None if page else self.plan.page, timeout=self.plan.run_timeout)
        self._record(run, s, f"opening {self.plan.page} after training")

    async def attend(self) -> StudentLog:
        """The whole session; returns the log (a failure to connect is an error in it, not an exception)."""
        await asyncio.sleep(max(0.0, self.open_at - time.perf_counter()))
        t_connect = time.perf_counter()
        s = Session(self.url)
        try:
            await s.connect()
            first = TRAIN_PAGE if self.log.trainer else self.plan.page
            run = await s.rerun(page_name=first, timeout=self.plan.first_view_timeout)
            if run.finished_at is not None:
                self.log.first_view_s = run.finished_at - t_connect
            self._record(run, s, "the first view")
            if run.finished_at is None:
                return self.log
            self.deadline = run.finished_at + self.plan.seconds
            if self.log.trainer:
                await self._train(s)
            await self._changes(s)
        except Exception as exc:  # noqa: BLE001 - one student's failure is reported, the class carries on
            self.log.errors.append(f"client: {type(exc).__name__}: {exc}"[:300])
        finally:
            self.log.errors += [f"protocol: {e}" for e in s.protocol_errors]
            self.log.messages, self.log.bytes, self.log.refs_resolved = (s.messages_received, s.bytes_received,
                                                                         s.refs_resolved)
            await s.close()
        return self.log

    async def _changes(self, s: Session) -> None:
        due = time.perf_counter() + self.plan.every * self.rng.uniform(0.5, 1.5)
        while due < self.deadline:
            late = time.perf_counter() > due
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            kind = self._change()
            sent = time.perf_counter()
            run = await s.rerun(self.book.states(), timeout=self.plan.run_timeout)
            self.log.changes.append({"kind": kind, "seconds": run.seconds, "late": late})
            self._record(run, s, f"change {self.n_changes} ({kind})")
            if run.finished_at is None or s.closed_reason:
                return
            due = sent + self.plan.every * self.rng.uniform(0.5, 1.5)
