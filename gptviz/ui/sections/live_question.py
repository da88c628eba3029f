"""The step's question in a live class (see live_class.py): the teacher's live count of answers and Reveal, a
student's answer sent to the class, and after the reveal the class's answers beside the truth from the live model.
Also the process's one class store (``class_store``) and the join link with its QR code."""
from __future__ import annotations

import html
import os
from dataclasses import dataclass
from typing import Any, Optional
from urllib.parse import urlsplit

import streamlit as st

from ...live import ClassState, ClassStore, ClassStoreUnavailable, open_store
from ...present import figures, lessons
from ...present.markdown_text import plain_md
from ..widgets import plot
from .lessons import Place, _answer, choice_label

POLL_SECONDS = 1.0  # how often a follower checks the class's version
# How often the teacher's count and histogram are redrawn: one session, so it can be often (an answer shows on the
# projector within this plus one run; the bench's target is p95 ≤ 1 s)
TALLY_SECONDS = 0.6


@st.cache_resource(show_spinner=False)
def class_store() -> ClassStore:
    """The process's one store (GPTVIZ_REDIS_URL: Redis, else memory). Used only through its own methods."""
    return open_store()


def store_failed(e: Exception) -> None:
    st.error(f"The live class is out of reach: {e}. The lesson itself still works; try again in a moment.",
             icon=":material/cloud_off:")


def join_link(code: str) -> str:
    """The link a student opens: this server's Lessons page with ``?class=CODE`` (``GPTVIZ_PUBLIC_URL`` when the
    teacher's own address is not what students reach, e.g. localhost behind a proxy)."""
    base = os.environ.get("GPTVIZ_PUBLIC_URL", "").strip().rstrip("/")
    if not base:
        try:
            parts = urlsplit(str(st.context.url or ""))
            base = f"{parts.scheme}://{parts.netloc}{parts.path.rsplit('/', 1)[0]}" if parts.netloc else ""
        except Exception:  # noqa: BLE001 - no browser (a test): a relative link
            base = ""
    return f"{base}/Lessons?class={code}"


def qr_svg(text: str) -> str:
    """``text`` as a QR code, an SVG <img> (segno, pure Python), or "" when segno is missing."""
    try:
        import segno
    except ImportError:
        return ""
    uri = segno.make(text, error="m").svg_data_uri(scale=6, border=2)
    return f"<img src='{uri}' alt='QR code of the join link' style='width:100%;max-width:230px'/>"


# ------------------------------------------------------------------ the class's question, on the step
@dataclass
class LiveQuestion:
    """The step's question in a live class (``place.live``): the teacher's live count and Reveal, or a student's
    answer sent to the class; the step calls it in place of its own question."""

    key: str
    state: ClassState
    teacher: bool
    token: Optional[str]
    sid: Optional[str]
    view: Any  # what plot() reads: style and settings (palette)

    @property
    def revealed(self) -> bool:
        return self.state.revealed

    def __call__(self, key: str, place: Place, question: lessons.Question, is_revealed: bool) -> None:
        try:
            (self._teacher if self.teacher else self._student)(place, question)
        except ClassStoreUnavailable as e:
            store_failed(e)

    def _teacher(self, place: Place, question: lessons.Question) -> None:
        w, code, i = place.words, self.state.code, place.i
        st.markdown(f"**{question.prompt}**")
        if not self.revealed:
            tally(code, i, tuple(question.choices), None, self.view, f"{self.key}.live.tally.{code}.{i}", True)
            st.button(w("reveal"), key=f"{self.key}.live.reveal.{i}", type="primary", on_click=_teacher_reveal,
                      args=(code, self.token, True), help="Show everyone the class's answers beside the truth.")
            return
        if place.present:
            _answer(question, w)
        tally(code, i, tuple(question.choices), question.correct, self.view, f"{self.key}.live.tally.{code}.{i}",
              False)
        st.session_state[f"{self.key}.answer"] = {"lesson": place.lesson.id, "step": i, "prompt": question.prompt,
                                                  "kind": place.step.question["kind"], "answer": question.answer,
                                                  "value": question.value}
        st.button(w("ask_again"), key=f"{self.key}.live.again.{i}", on_click=_teacher_reveal,
                  args=(code, self.token, False), help="Hide the answer: the class may answer again.")

    def _student(self, place: Place, question: lessons.Question) -> None:
        w, code, i, n = place.words, self.state.code, place.i, len(question.choices)
        store = class_store()
        mine = store.my_answer(code, self.sid, i)
        rkey = f"{self.key}.live.answer.{code}.{place.lesson.id}.{i}"
        if mine is not None and st.session_state.get(rkey) != mine:
            st.session_state[rkey] = mine  # the store's answer (a reload, or the radio out of step) is the truth
        st.markdown(f"**{question.prompt}**")
        st.radio("Your answer", list(range(n)), index=None, key=rkey, horizontal=True, disabled=self.revealed,
                  format_func=lambda j: choice_label(question, j), label_visibility="collapsed",
                  on_change=_student_answer, args=(code, self.sid, i, rkey))
        refused = st.session_state.pop(f"{rkey}.refused", False)
        if not self.revealed:
            if refused:
                st.warning("Your answer did not count: the teacher has revealed the answer or moved on.")
            elif mine is None:
                st.caption("Pick an answer: it goes to the teacher. You can change it until the teacher reveals.")
            else:
                st.success(f"Your answer is in: **{mine + 1}**. You can change it until the teacher reveals.",
                           icon=":material/how_to_vote:")
            return
        if mine is None:
            st.caption("You did not answer this one.")
        else:
            verdict = w("right") if mine == question.correct else w("not_quite", answer=plain_md(question.answer))
            st.markdown(verdict + " " + w("from_live"))
        if place.present:
            _answer(question, w)
        tally(code, i, tuple(question.choices), question.correct, self.view, f"{self.key}.live.tally.{code}.{i}",
              False)


def _teacher_reveal(code: str, token: str, revealed: bool) -> None:
    try:
        class_store().reveal(code, token, revealed)
    except ClassStoreUnavailable:
        pass  # the next run says the store is out of reach


def _student_answer(code: str, sid: str, step: int, rkey: str) -> None:
    pick = st.session_state.get(rkey)
    try:
        ok = pick is not None and class_store().answer(code, sid, step, int(pick))
    except ClassStoreUnavailable:
        ok = False
    if not ok:
        st.session_state[f"{rkey}.refused"] = True


def tally(code: str, step: int, choices: tuple, correct: Optional[int], view: Any, key: str, live: bool) -> None:
    """How many answered and the histogram of their choices (``correct``: the truth's bar marked, after the
    reveal). ``live``: redrawn every TALLY_SECONDS by itself (a fragment), the rest of the page untouched."""
    if live:
        _tally_fragment(code, step, choices, view, key)
    else:
        _tally(code, step, choices, correct, view, key)


def _tally(code: str, step: int, choices: tuple, correct: Optional[int], view: Any, key: str) -> None:
    store = class_store()
    counts, joined = store.answers(code, step), store.students(code)
    answered = sum(counts.values())
    labels = [f"{'✓ ' if j == correct else ''}{j + 1} · {c}" for j, c in enumerate(choices)]
    values = [counts.get(j, 0) for j in range(len(choices))]
    head = f"{answered} of {joined} students answered"
    if correct is not None:
        right = counts.get(correct, 0)
        head += f" · {right} right ({right / answered:.0%})" if answered else ""
    st.markdown(f"<div data-testid='live-tally' class='live-tally'>{html.escape(head)}</div>",
                unsafe_allow_html=True)
    title = "The class's answers" + (" (✓ the truth)" if correct is not None else "")
    fig = figures.bar_chart(labels, values, title=title, x_title="students", highlight=correct)
    fig.update_traces(textangle=0)  # a count reads upright, never turned to fit its bar
    fig.update_xaxes(rangemode="tozero", dtick=max(1, -(-max(values, default=0) // 5)), tickformat="d")
    fig.layout.height = min(fig.layout.height or 260, 260)
    plot(view, fig, key=key)


@st.fragment(run_every=TALLY_SECONDS)
def _tally_fragment(code: str, step: int, choices: tuple, view: Any, key: str) -> None:
    try:
        _tally(code, step, choices, None, view, key)
    except ClassStoreUnavailable as e:
        store_failed(e)


