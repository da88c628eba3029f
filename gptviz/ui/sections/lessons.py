"""The Lessons page's sections: the lesson picker, the step's title with the arrow keys, the step on the live model.

Each lesson is a TOML file in lessons/ (see gptviz.present.lessons). A step pins its own settings without touching
the sidebar or the address bar, draws a registered section (or any hook) and may ask the class a question whose
answer is computed from the live trace. Presenter mode (``?present=1``) collapses the sidebar, makes the text and
the charts larger and fits a step on one 1280×720 screen: the title on top, Previous / the counter / Next at the
bottom, the step in two panels between them (a formula folded under its chart, the revealed answer under the
question). The page's state lives in ``st.session_state`` under its ``key`` ("lessons"): ``.present``,
``.pick``, ``.pos`` (lesson id -> step index), ``.revealed``, ``.answer`` and ``.url``.
"""
from __future__ import annotations

import html
import inspect
import re
from contextlib import nullcontext
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Callable

import streamlit as st

from ...present import lessons
from ...present.descriptions import step_info
from ...present.markdown_text import plain_md
from ...present.page_context import pinned, resolve
from .. import resources
from .. import state as shared
from ..page import show_notices
from . import FAILED, get, load_all, section

PAGE_KEY = "lessons"  # the Lessons page's prefix in st.session_state and of its widget keys
PRESENT_STYLE = {"font_scale": 1.5, "max_height": 370}
# Presenter mode's screen is 1280×720: one row on top (the step's title, the lesson, the toggle), one at the bottom
# (Previous, the counter, Next) and between them the step in two panels of this height. What does not fit in a
# panel (a long text, a formula opened under the chart) scrolls inside it: the page itself never scrolls.
PRESENT_PANEL_PX = 510
# In a step with a question, the text's box gives way to the question's in the left panel (its CSS classes,
# st-key-…, in static/lessons.css): the choices and Reveal are never scrolled out of the panel.
PRESENT_TEXT_BOX, PRESENT_QUESTION_BOX = "lesson_present_text", "lesson_present_question"
STATIC = Path(__file__).resolve().parents[1] / "static"
PRESENT_MARKER = "/* presenter mode */"


def _style_block(css: str) -> str:
    """CSS rules as one <style> block for st.markdown: comments and blank lines dropped."""
    rules = re.sub(r"/\*.*?\*/", "", css, flags=re.S)
    return "\n<style>\n" + "\n".join(line for line in rules.splitlines() if line.strip()) + "\n</style>\n"


_ALWAYS_CSS, _PRESENT_CSS = (STATIC / "lessons.css").read_text(encoding="utf-8").split(PRESENT_MARKER)
LESSON_CSS = _style_block(_ALWAYS_CSS)  # the step counter
PRESENT_CSS = _style_block(_PRESENT_CSS)  # presenter mode: larger text, less padding
SCROLL_TOP_JS = (STATIC / "scroll_top.js").read_text(encoding="utf-8").strip()
REVEAL_KEY_JS = (STATIC / "reveal_key.js").read_text(encoding="utf-8").strip()


@dataclass
class Place:
    """Where the class is: the lesson shown, its step (0-based) and whether presenter mode is on."""

    lesson: lessons.Lesson  # in the class's language (the English lesson's views, settings and questions)
    i: int
    present: bool
    words: lessons.Words = field(default_factory=lessons.words)  # the page's and the questions' words
    live: Callable | None = None  # a live class's question (live_class.LiveQuestion): drawn in place of _question

    @property
    def n(self) -> int:
        return len(self.lesson.steps)

    @property
    def step(self) -> lessons.Step:
        return self.lesson.steps[self.i]


# ------------------------------------------------------------------ keys: ← →, and a new step starts at the top
def arrow_keys(prev_box, next_box, *, key: str, shown: str, on_move: Callable[[int], None], first: bool,
               last: bool, words: lessons.Words | None = None) -> None:
    """The one place for keys: ← and → press the Previous and Next buttons (drawn in ``prev_box`` and
    ``next_box``; ``on_move(-1 or +1)`` when pressed), and when ``shown`` (what is on the screen) differs from
    the last rerun's, a script scrolls back to the top (Streamlit keeps the scroll position between reruns)."""
    w = words or lessons.words()
    prev_box.button(w("previous"), key=f"{key}.prev", on_click=on_move, args=(-1,), disabled=first,
                    shortcut="ArrowLeft", width="stretch")
    next_box.button(w("next"), key=f"{key}.next", on_click=on_move, args=(1,), disabled=last,
                    shortcut="ArrowRight", width="stretch")
    if st.session_state.get(f"{key}.shown") != shown:
        st.session_state[f"{key}.shown"] = shown
        st.html(f"<script>/* {shown} */\n{SCROLL_TOP_JS}</script>", unsafe_allow_javascript=True)


# ------------------------------------------------------------------ the address bar: presenter mode, lesson, step
def presenter_mode(*, key: str = PAGE_KEY) -> bool:
    """Presenter mode, the lesson and the step from the address bar (``?present=1&lesson=…&lstep=…``), and the
    page config that goes with it. Call before page_setup, which rewrites the address bar with the shared
    settings only."""
    url = st.query_params.to_dict()
    last = st.session_state.get(f"{key}.url")
    if last is None or url.get("present") not in (None, last.get("present")):
        if "present" in url or last is None:
            st.session_state[f"{key}.present"] = url.get("present", "0").lower() in ("1", "true", "yes", "on")
    if last is None or url.get("lesson") not in (None, last.get("lesson")):
        if url.get("lesson"):
            st.session_state[f"{key}.want"] = (url["lesson"], url.get("lstep"))
    present = bool(st.session_state.get(f"{key}.present", False))
    st.set_page_config(initial_sidebar_state="collapsed" if present else "auto")
    return present


def use_stylesheet(present: bool) -> None:
    """The lesson CSS, and presenter mode's when it is on."""
    st.markdown(LESSON_CSS + (PRESENT_CSS if present else ""), unsafe_allow_html=True)


def keep_address_bar(place: Place, *, key: str = PAGE_KEY) -> None:
    """Write presenter mode, the lesson and the step (1-based) into the address bar, so a link reopens them."""
    state = {"present": "1" if place.present else None, "lesson": place.lesson.id, "lstep": str(place.i + 1)}
    shared.set_address(state)
    st.session_state[f"{key}.url"] = state


# ------------------------------------------------------------------ callbacks
def _move(key: str, lid: str, n: int, delta: int) -> None:
    pos = st.session_state[f"{key}.pos"]
    pos[lid] = max(0, min(pos.get(lid, 0) + delta, n - 1))


def _reveal(key: str, lid: str, i: int) -> None:
    st.session_state[f"{key}.revealed"].add((lid, i))


def _ask_again(key: str, lid: str, i: int) -> None:
    st.session_state[f"{key}.revealed"].discard((lid, i))
    st.session_state.pop(f"{key}.answer.{lid}.{i}", None)


# ------------------------------------------------------------------ sections
@section("lessons.picker")
def picker(ctx, *, key: str = PAGE_KEY) -> Place:
    """Every lesson in lessons/ (a message for each file that does not load), the lesson picker, the step
    counter and the presenter-mode toggle. Returns where the class is; stops the page if there is no lesson."""
    views = load_all()
    found, problems = lessons.load_folder(lessons.LESSONS_DIR, views)
    by_id = {les.id: les for les in found}
    if problems:
        st.warning("Some lesson files could not be loaded; the others work:\n\n"
                   + "\n".join(f"- `{p}`" for p in problems), icon="📄")
    if FAILED:
        st.caption("Sections that could not be loaded: " + "; ".join(f"{m}: {e}" for m, e in FAILED.items()))
    if not found:
        st.info(f"No lessons found in `{lessons.LESSONS_DIR}`: add a .toml file there (see the README).")
        st.stop()

    pos = st.session_state.setdefault(f"{key}.pos", {})  # lesson id -> step index
    st.session_state.setdefault(f"{key}.revealed", set())  # (lesson id, step index)
    want = st.session_state.pop(f"{key}.want", None)
    if want and want[0] in by_id:
        st.session_state[f"{key}.pick"] = want[0]
        try:
            pos[want[0]] = int(want[1]) - 1 if want[1] else pos.get(want[0], 0)
        except ValueError:
            pass
    if st.session_state.get(f"{key}.pick") not in by_id:
        st.session_state[f"{key}.pick"] = found[0].id

    present = bool(st.session_state.get(f"{key}.present", False))
    lang = str(ctx.s.get("lang", "en"))
    w = lessons.words(lang)
    shown = {les.id: lessons.translate(les, lang) for les in found}  # id -> (the lesson in lang, why not)
    # presenter mode: the step's title, the lesson and the toggle in one row (the counter moves to the bottom row)
    top = st.columns([6.2, 3, 2.4] if present else [3, 4, 2.4], vertical_alignment="center")
    pick_box, text_box = (top[1], top[0]) if present else (top[0], top[1])
    lid = pick_box.selectbox(w("lesson"), [les.id for les in found], key=f"{key}.pick", label_visibility="collapsed",
                             format_func=lambda x: f"{found.index(by_id[x]) + 1}. {shown[x][0].title}")
    lesson, missing = shown[lid]
    n = len(lesson.steps)
    i = pos[lid] = max(0, min(int(pos.get(lid, 0)), n - 1))
    if present:
        text_box.markdown(_title_html(lesson.steps[i].title), unsafe_allow_html=True)
    else:
        text_box.markdown(_counter_html(w("step_of", i=i + 1, n=n), lesson.title), unsafe_allow_html=True)
    top[2].toggle(w("presenter_mode"), key=f"{key}.present", help=w("presenter_help"))
    if missing:
        st.caption(("ⓘ " + w("no_translation", language=w.name)) if missing == "missing" else
                   f"ⓘ {w('no_translation', language=w.name)} ({html.escape(missing)})")
    return Place(lesson, i, bool(st.session_state.get(f"{key}.present", False)), w)


def _title_html(title: str) -> str:
    """Presenter mode's step title on one line of its column: 2.2rem, smaller for a title of over 30 characters
    (the column holds about 30 at 2.2rem), never under 1.4rem."""
    rem = max(1.4, min(2.2, 2.2 * 30 / max(len(title), 1)))
    return f"<h2 class='present-title' style='font-size:{rem:.2f}rem'>{html.escape(title)}</h2>"


def _counter_html(step_of: str, tail: str) -> str:
    """The step counter ("Step 3 of 11 · …", in the class's language), which the browser tests find by its test id."""
    return (f"<div class='lesson-counter' data-testid='lesson-counter'>{html.escape(step_of)} · {html.escape(tail)}"
            "</div>")


# Previous | title | Next: wide enough for the longest word of any language's Next with its key hint (Siguiente ▶ →)
NAV_COLUMNS = [1.9, 6, 1.9]


@section("lessons.heading")
def heading(ctx, *, key: str = PAGE_KEY, place: Place) -> None:
    """The step's title between the Previous and Next buttons (← and →), and the lesson's summary on its first
    step (outside presenter mode). In presenter mode the title is in the top row and the buttons in the footer."""
    if place.present:
        return
    nav = st.columns(NAV_COLUMNS, vertical_alignment="center")
    nav[1].markdown(f"## {place.step.title}")
    lid = place.lesson.id
    arrow_keys(nav[0], nav[2], key=key, shown=f"{lid}.{place.i}", on_move=partial(_move, key, lid, place.n),
               first=place.i == 0, last=place.i == place.n - 1, words=place.words)
    if place.i == 0 and place.lesson.summary and not place.present:
        st.caption(place.lesson.summary)


def _draw(view: str, c, key: str, options: dict, highlight=None, words: lessons.Words | None = None) -> bool:
    """Draw a view (a section, or a hook through the "step" section); True if it drew the highlight."""
    fn = get("step") if lessons.is_hook(view) else get(view)
    kw = dict(options)
    if lessons.is_hook(view):
        kw["hook"] = view
    params = inspect.signature(fn).parameters
    if highlight is not None and "highlight" in params:
        kw["highlight"] = highlight
    if "prompt" in params and "prompt" not in kw:  # what the model reads: the text as it was tokenised
        kw["prompt"] = c.tok.decode(c.batch.x[c.b, : c.n_pos].tolist())
    if "narrow" in params:  # a view that lays itself out for its width: a step's column is narrower than a page
        kw.setdefault("narrow", True)
    hook = kw.get("hook") if fn is get("step") else None  # a step of the trace: "step" draws it
    formula_below = bool(c.style) and bool(hook) and not {"formula", "code"} & set(kw)
    if formula_below:  # presenter mode: the chart and its sentence in the panel, formula and code folded under it
        kw.update(formula=False, code=False)
    drew = fn(c, key=key, **kw) is True
    if formula_below:
        tr = c.trace()
        name = str(hook).replace("{layer}", str(c.layer))
        if name in tr:
            info = step_info(tr, name)
            with st.expander((words or lessons.words())("formula_code")):
                st.latex(info.formula)
                st.code(info.code, language="python")
    return drew


def _question(key: str, place: Place, question: lessons.Question, is_revealed: bool) -> None:
    """The question, the class's answer, and Reveal (or, once revealed, whether they were right and Ask again)."""
    lid, i, w = place.lesson.id, place.i, place.words
    st.markdown(f"**{question.prompt}**")
    answer_key = f"{key}.answer.{lid}.{i}"
    n = len(question.choices)
    pick = st.radio("Your answer", list(range(n)), index=None, key=answer_key,
                    format_func=lambda j: choice_label(question, j), label_visibility="collapsed", horizontal=True)
    if not is_revealed:
        digit_keys(answer_key, min(n, 9))
        st.button(w("reveal"), key=f"{key}.reveal.{lid}.{i}", type="primary", on_click=_reveal, args=(key, lid, i),
                  disabled=pick is None, help=w("reveal_help"))
        st.html(f"<script>{REVEAL_KEY_JS}</script>", unsafe_allow_javascript=True)  # R: Streamlit keeps it
        if pick is None and not place.present:  # (in presenter mode the disabled button's tooltip says it)
            st.caption(w("pick_first"))
        return
    if place.present:
        _answer(question, w)
    if pick is not None:
        st.markdown((w("right") if pick == question.correct else w("not_quite", answer=plain_md(question.answer))) + " "
                    + w("from_live"))
    st.session_state[f"{key}.answer"] = {"lesson": lid, "step": i, "kind": place.step.question["kind"],
                                         "prompt": question.prompt, "answer": question.answer,
                                         "value": question.value}
    st.button(w("ask_again"), key=f"{key}.again.{lid}.{i}", on_click=_ask_again, args=(key, lid, i))


def _pick(answer_key: str, j: int) -> None:
    st.session_state[answer_key] = j


def digit_keys(answer_key: str, n: int) -> None:
    """Keys 1…n pick that answer: one button per choice, each with its digit as its shortcut, drawn out of sight
    (the radio above is what a mouse uses and what shows the pick)."""
    with st.container(key=DIGIT_KEYS_BOX):
        for j in range(n):
            st.button(str(j + 1), key=f"{answer_key}.digit{j}", shortcut=str(j + 1), on_click=_pick,
                      args=(answer_key, j))


DIGIT_KEYS_BOX = "lesson_digit_keys"  # its CSS class, st-key-lesson_digit_keys, hides it (static/lessons.css)


def choice_label(question: lessons.Question, j: int) -> str:
    """A choice as a radio draws it (radio labels are Markdown; a choice can be a token of the user's text): its
    number (the key that picks it, for the first nine) and the choice as plain text."""
    return f"{j + 1} · {plain_md(question.choices[j])}" if j < 9 else plain_md(question.choices[j])


def _answer(question: lessons.Question, w: lessons.Words) -> None:
    st.success(f"**{w('answer', answer=plain_md(question.answer))}**  \n{question.explanation}",
               icon=":material/check_circle:")


@section("lessons.step")
def step(ctx, *, key: str = PAGE_KEY, place: Place) -> None:
    """The step on the live model with its own settings pinned: its text and question on the left, its view on
    the right (with the revealed answer above it, marked on the figure)."""
    lesson, i, step = place.lesson, place.i, place.step
    overrides, notes = lessons.overrides(lesson, step)
    sctx, step_notices = resolve(pinned(ctx.s, **overrides), resources)
    sctx.style = dict(PRESENT_STYLE) if place.present else {}
    question, unavailable = None, ""
    if step.question:
        live_q = lessons.Live(sctx.trace(), sctx.labels(), sctx.vocab_labels(), sctx.b, sctx.layer, sctx.head or 0,
                              sctx.model, sctx.tok, sctx.scored_y)
        try:
            question = lessons.ask(step.question, live_q, place.words)
        except lessons.QuestionUnavailable as exc:
            unavailable = str(exc)
    is_revealed = question is not None and (place.live.revealed if place.live else
                                            (lesson.id, i) in st.session_state[f"{key}.revealed"])

    # presenter mode gives a step with a question half the width: its text, the question and the choices fit
    left, right = st.columns([1, 1] if place.present and step.question else [2, 3], gap="large")
    if place.present:  # two panels of one height: the page fits the screen, a long step scrolls in its panel
        left = left.container(height=PRESENT_PANEL_PX, border=False)
        right = right.container(height=PRESENT_PANEL_PX, border=False)
    with left:
        fold = is_revealed or (place.live is not None and question is not None)  # live: students read it at desks
        # presenter mode, a question not yet answered: the text in a box of its own that gives way (it scrolls
        # inside the panel) so that the question, every choice and Reveal stay on the screen (static/lessons.css)
        split = place.present and question is not None and not fold
        with st.container(key=PRESENT_TEXT_BOX) if split else nullcontext():
            if fold and place.present:  # the answer (or the class's live count) where the class looks: text folds
                with st.expander(place.words("step_text")):
                    st.markdown(step.text)
            else:
                st.markdown(step.text)
            for note in notes:
                st.caption(note)
            show_notices(step_notices)
            if unavailable:
                st.info(place.words("unavailable", why=unavailable))
        if question is not None:
            with st.container(key=PRESENT_QUESTION_BOX) if split else nullcontext():
                (place.live or _question)(key, place, question, is_revealed)

    with right:
        vkey = f"L.{lesson.id}.{i}"
        if is_revealed:
            if not place.present:  # (in presenter mode it is under the question, in the left panel)
                _answer(question, place.words)
            _draw_answer(step, sctx, vkey, question, one_view=place.present, words=place.words)
        else:
            _draw(step.view, sctx, vkey, step.options, words=place.words)


def _draw_answer(step: lessons.Step, sctx, vkey: str, question: lessons.Question, one_view: bool,
                 words: lessons.Words | None = None) -> None:
    """The answer marked on the step's own figure if it can show it, else on the question's figure, drawn above
    the step's (the first thing the class sees). ``one_view`` (presenter mode, one screen): only the figure that
    shows the answer, when it is clear beforehand that the step's own cannot."""
    def answer_view() -> None:
        actx = sctx
        if question.settings:
            actx, _ = resolve(pinned(sctx.s, **question.settings), resources)
            actx.style = sctx.style
        _draw(question.view, actx, vkey + ".answer", question.options, question.highlight, words)

    own_marks = not lessons.is_hook(step.view) or (question.highlight or {}).get("hook") == step.view.replace(
        "{layer}", str(sctx.layer))
    if one_view and question.view and not own_marks:
        answer_view()
        return
    box = st.container()
    if not _draw(step.view, sctx, vkey, step.options, question.highlight, words) and question.view:
        with box:
            answer_view()
            st.divider()


@section("lessons.footer")
def footer(ctx, *, key: str = PAGE_KEY, place: Place) -> None:
    """Which step this is, and how to move on and to turn presenter mode on. In presenter mode: the Previous
    and Next buttons (← and →) either side of the counter."""
    if place.present:
        row = st.columns(NAV_COLUMNS, vertical_alignment="center")
        row[1].markdown(_counter_html(place.words("step_of", i=place.i + 1, n=place.n), place.words("keys")),
                        unsafe_allow_html=True)
        lid = place.lesson.id
        arrow_keys(row[0], row[2], key=key, shown=f"{lid}.{place.i}", on_move=partial(_move, key, lid, place.n),
                   first=place.i == 0, last=place.i == place.n - 1, words=place.words)
        return
    st.caption(f"{place.words('step_of', i=place.i + 1, n=place.n)} · {place.words('keys')} · "
               f"{place.words('present_hint')}")
