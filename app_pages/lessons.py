"""Lessons: a guided path through the app, one step per screen, drawn from the live model.

Each lesson is a TOML file in lessons/ (see gptviz.present.lessons). A step pins its own settings without touching
the sidebar or the address bar, draws a registered section (or any hook) and may ask the class a question
whose answer is computed from the live trace. Presenter mode (``?present=1``) collapses the sidebar and
makes the text and the charts larger; the arrow keys move between steps.
"""
import inspect

import streamlit as st

from gptviz.present import lessons as L
from gptviz.present.page_context import pinned, resolve
from gptviz.ui import page_setup, resources, show_notices
from gptviz.ui.sections import FAILED, get, load_all

K = "lessons."  # this page's keys in st.session_state
PRESENT_STYLE = {"font_scale": 1.5, "max_height": 440}
# A new step starts at the top of the screen (Streamlit keeps the scroll position between reruns).
SCROLL_TOP = """<script>(() => {{ /* {step} */
  const doc = window.document;
  for (const el of [doc.scrollingElement, ...doc.querySelectorAll('[data-testid="stMain"]')]) if (el) el.scrollTop = 0;
}})();</script>"""
PRESENT_CSS = """
<style>
.block-container { padding-top: 1.2rem; padding-bottom: 1rem; max-width: 100%; }
[data-testid="stMarkdownContainer"] p, [data-testid="stMarkdownContainer"] li { font-size: 1.3rem; line-height: 1.4; }
[data-testid="stMarkdownContainer"] h2 { font-size: 2.2rem; padding: 0; }
[data-testid="stMarkdownContainer"] h3 { font-size: 1.8rem; }
[data-testid="stMetricValue"] { font-size: 2.6rem; }
[data-testid="stCaptionContainer"] p { font-size: 1.1rem; }
.stRadio label p, .stButton button p { font-size: 1.3rem; }
</style>
"""
LESSON_CSS = """
<style>
.lesson-counter { font-size: 1.1rem; color: #555; padding-top: 0.45rem; }
</style>
"""

# ------------------------------------------------------------------ the address bar: presenter mode, lesson, step
# Read before page_setup, which rewrites the address bar with the shared settings only.
url = st.query_params.to_dict()
last = st.session_state.get(K + "url")
if last is None or url.get("present") not in (None, last.get("present")):
    if "present" in url or last is None:
        st.session_state[K + "present"] = url.get("present", "0").lower() in ("1", "true", "yes", "on")
if last is None or url.get("lesson") not in (None, last.get("lesson")):
    if url.get("lesson"):
        st.session_state[K + "want"] = (url["lesson"], url.get("lstep"))

present = bool(st.session_state.get(K + "present", False))
st.set_page_config(initial_sidebar_state="collapsed" if present else "auto")
live = page_setup("Lessons", ":material/school:")
st.markdown(LESSON_CSS + (PRESENT_CSS if present else ""), unsafe_allow_html=True)

# ------------------------------------------------------------------ the lessons
views = load_all()
lessons, problems = L.load_folder(L.LESSONS_DIR, views)
by_id = {les.id: les for les in lessons}
if problems:
    st.warning("Some lesson files could not be loaded; the others work:\n\n"
               + "\n".join(f"- `{p}`" for p in problems), icon="📄")
if FAILED:
    st.caption("Sections that could not be loaded: " + "; ".join(f"{m}: {e}" for m, e in FAILED.items()))
if not lessons:
    st.info(f"No lessons found in `{L.LESSONS_DIR}`: add a .toml file there (see the README).")
    st.stop()

pos = st.session_state.setdefault(K + "pos", {})  # lesson id -> step index
revealed = st.session_state.setdefault(K + "revealed", set())  # (lesson id, step index)
want = st.session_state.pop(K + "want", None)
if want and want[0] in by_id:
    st.session_state[K + "pick"] = want[0]
    try:
        pos[want[0]] = int(want[1]) - 1 if want[1] else pos.get(want[0], 0)
    except ValueError:
        pass
if st.session_state.get(K + "pick") not in by_id:
    st.session_state[K + "pick"] = lessons[0].id


def go(lid: str, delta: int, n: int) -> None:
    pos[lid] = max(0, min(pos.get(lid, 0) + delta, n - 1))


def reveal(lid: str, i: int) -> None:
    revealed.add((lid, i))


def ask_again(lid: str, i: int) -> None:
    revealed.discard((lid, i))
    st.session_state.pop(f"{K}answer.{lid}.{i}", None)


top = st.columns([3, 4, 2.4], vertical_alignment="center")
lid = top[0].selectbox("Lesson", [les.id for les in lessons], key=K + "pick", label_visibility="collapsed",
                       format_func=lambda x: f"{lessons.index(by_id[x]) + 1}. {by_id[x].title}")
lesson = by_id[lid]
n = len(lesson.steps)
i = pos[lid] = max(0, min(int(pos.get(lid, 0)), n - 1))
step = lesson.steps[i]
top[1].markdown(f"<div class='lesson-counter' data-testid='lesson-counter'>Step {i + 1} of {n} · "
                f"{lesson.title}</div>", unsafe_allow_html=True)
top[2].toggle("Presenter mode", key=K + "present", help="Sidebar collapsed, larger text and charts, one step per "
              "screen for a 1280×720 projector. Kept in the address bar (?present=1). ← and → move between steps.")

nav = st.columns([1.4, 6, 1.4], vertical_alignment="center")
nav[0].button("◀ Previous", key=K + "prev", on_click=go, args=(lid, -1, n), disabled=i == 0, shortcut="ArrowLeft",
              width="stretch")
nav[1].markdown(f"## {step.title}")
nav[2].button("Next ▶", key=K + "next", on_click=go, args=(lid, 1, n), disabled=i == n - 1, shortcut="ArrowRight",
              width="stretch")
if st.session_state.get(K + "shown") != (lid, i):
    st.session_state[K + "shown"] = (lid, i)
    st.html(SCROLL_TOP.format(step=f"{lid}.{i}"), unsafe_allow_javascript=True)
if i == 0 and lesson.summary and not present:
    st.caption(lesson.summary)

# ------------------------------------------------------------------ this step, on the live model
overrides, notes = L.overrides(lesson, step)
ctx, step_notices = resolve(pinned(live.s, **overrides), resources)
ctx.style = dict(PRESENT_STYLE) if present else {}
style = ctx.style


def draw(view: str, c, key: str, options: dict, highlight=None) -> bool:
    """Draw a view (a section, or a hook through the "step" section); True if it drew the highlight."""
    fn = get("step") if L.is_hook(view) else get(view)
    kw = dict(options)
    if L.is_hook(view):
        kw["hook"] = view
    params = inspect.signature(fn).parameters
    if highlight is not None and "highlight" in params:
        kw["highlight"] = highlight
    if "prompt" in params and "prompt" not in kw:  # what the model reads: the text as it was tokenised
        kw["prompt"] = c.tok.decode(c.batch.x[c.b, : c.n_pos].tolist())
    return fn(c, key=key, **kw) is True


question, unavailable = None, ""
if step.question:
    live_q = L.Live(ctx.trace(), ctx.labels(), ctx.vocab_labels(), ctx.b, ctx.layer, ctx.head or 0, ctx.model,
                    ctx.tok, ctx.scored_y)
    try:
        question = L.ask(step.question, live_q)
    except L.QuestionUnavailable as exc:
        unavailable = str(exc)
is_revealed = question is not None and (lid, i) in revealed

left, right = st.columns([2, 3], gap="large")
with left:
    st.markdown(step.text)
    for note in notes:
        st.caption(note)
    show_notices(step_notices)
    if unavailable:
        st.info(f"This step's question can't be asked of this model and text: {unavailable}.")
    if question is not None:
        st.markdown(f"**{question.prompt}**")
        akey = f"{K}answer.{lid}.{i}"
        pick = st.radio("Your answer", list(range(len(question.choices))), index=None, key=akey,
                        format_func=lambda j: question.choices[j], label_visibility="collapsed", horizontal=True)
        if not is_revealed:
            st.button("Reveal", key=f"{K}reveal.{lid}.{i}", type="primary", on_click=reveal, args=(lid, i),
                      disabled=pick is None, help="Pick an answer first: commit, then see the truth.")
            if pick is None:
                st.caption("Pick an answer first, then reveal it.")
        else:
            if pick is not None:
                st.markdown(("**Right!**" if pick == question.correct else
                             f"Not quite: the answer is **{question.answer}**.") + " It comes from the live model: "
                            "change the text or the model and it changes with it.")
            st.session_state[K + "answer"] = {"lesson": lid, "step": i, "kind": step.question["kind"],
                                             "prompt": question.prompt, "answer": question.answer,
                                             "value": question.value}
            st.button("Ask again", key=f"{K}again.{lid}.{i}", on_click=ask_again, args=(lid, i))

with right:
    key = f"L.{lid}.{i}"
    if is_revealed:
        st.success(f"**Answer: {question.answer}**  \n{question.explanation}", icon=":material/check_circle:")
        box = st.container()  # above the step's view: the answer is the first thing the class sees
        # the answer on the step's own figure if it can show it, else on the figure that does
        if not draw(step.view, ctx, key, step.options, question.highlight) and question.view:
            actx = ctx
            if question.settings:
                actx, _ = resolve(pinned(ctx.s, **question.settings), resources)
                actx.style = style
            with box:
                draw(question.view, actx, key + ".answer", question.options, question.highlight)
                st.divider()
    else:
        draw(step.view, ctx, key, step.options)

st.caption(f"Step {i + 1} of {n} · ← and → move between steps" + ("" if present else " · presenter mode: the "
           "toggle at the top, or ?present=1 in the address"))

# ------------------------------------------------------------------ keep the address bar in step
state = {"present": "1" if present else None, "lesson": lid, "lstep": str(i + 1)}
try:
    for k, v in state.items():
        if v is None:
            if k in st.query_params:
                del st.query_params[k]
        elif st.query_params.get(k) != v:
            st.query_params[k] = v
except Exception:  # noqa: BLE001 - no address bar outside a browser
    pass
st.session_state[K + "url"] = state
