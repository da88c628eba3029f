"""The live classroom on the Lessons page (issue 23): a teacher starts a class, students join with its code and
follow the teacher's lesson and step, and each answers the predict-then-reveal question on their own screen.

The class lives in a store (``gptviz.live``: in this process, or in Redis with ``GPTVIZ_REDIS_URL``), one per
process, held in a ``st.cache_resource`` and only ever used through its own locked methods. The address carries
who is who: ``?class=CODE`` (everyone in the class), ``&teach=<token>`` (the teacher: only that token advances the
class or reveals an answer, checked by the store), ``&me=<id>`` (a student's id, issued and signed by the class:
a reload keeps it and the answers; a ``me=`` the class did not issue is refused with a notice and the tab gets a
new id, so one tab is one student). Every parameter is checked (shape and length) before the store is asked.

One class per session: Start ends the class this session taught before; the teacher's Leave ends an empty class,
and one with students ends ``LEFT_CLASS_SECONDS`` (10 minutes) after its last activity.

Follow mode: a fragment polls the class's version (one small read) every ``POLL_SECONDS`` and reruns the app only
when it changed; the run before the picker moves a following student to the class's lesson and step. A student
who moves on their own explores freely, with "Back to the class" to return.

The page's order (app_pages/lessons.py): ``read_address`` before ``page_setup``; ``follow`` before the picker;
``panel`` after it (draws the class bar and hands the class's question to the step, ``place.live``);
``keep_address_bar`` last. State: ``st.session_state[f"{key}.live"]``.
"""
from __future__ import annotations

import html
import re
from types import SimpleNamespace
from typing import Any, Optional
from urllib.parse import parse_qsl, urlencode

import streamlit as st

from ...live import (
    LEFT_CLASS_SECONDS,
    NICKNAME_MAX,
    ClassState,
    ClassStoreFull,
    ClassStoreUnavailable,
    good_nickname,
    good_student,
    good_token,
    normalise_code,
)
from ...live.store import MAX_SETTINGS_CHARS
from ...present.markdown_text import plain_md
from ...present.url_params import PAGE_PARAMS
from .. import state as shared
from . import section
from .lessons import PAGE_KEY, PRESENT_STYLE, Place
from .live_question import POLL_SECONDS, LiveQuestion, class_store, join_link, qr_svg, store_failed

CODE_HELP = "a class code is 6 letters and digits, such as ABC234 (never 0, O, 1 or I)"


def _live(key: str) -> dict[str, Any]:
    return st.session_state.setdefault(f"{key}.live", {})


# ------------------------------------------------------------------ the address: ?class=, &teach=, &me=
def read_address(*, key: str = PAGE_KEY) -> None:
    """Read ``?class=``, ``&teach=`` and ``&me=`` (when they changed since the last run), each checked strictly;
    a bad one gets a message naming what to change. Call before page_setup."""
    live = _live(key)
    try:
        url = st.query_params.to_dict()
    except Exception:  # noqa: BLE001 - no address bar outside a browser
        url = {}
    raw = tuple(str(url[k])[:200] if k in url else None for k in ("class", "teach", "me"))
    if raw == live.get("raw"):
        return
    live["raw"] = raw
    cls, teach, me = raw
    if cls is None:
        return  # the page opened without a class: a class of this session (if any) goes on
    code = normalise_code(cls)
    if code is None:
        _forget(live, problem=f"The address's class code “{plain_md(cls[:20])}” is not valid: {CODE_HELP}. Change "
                              "`class=` in the address to the code on the projector, or type it below.")
        return
    notes = []
    if teach is not None and not good_token(teach):
        notes.append("The address's `teach=` is not a teacher's key (it is 20 to 64 letters, digits, - or _), so "
                     "you are in the class as a student. The teacher opens the link Start gave them.")
    if me is not None and not good_student(me):
        notes.append("The address's `me=` is not a student id (8 to 32 letters, digits, - or _): a new one was "
                     "made, so an earlier answer of yours is not shown.")
    same = live.get("code") == code
    if not same:
        _keep_mine(live)
    live.update(code=code, token=teach if good_token(teach) else None,
                problem=" ".join(p for p in (live.get("problem", ""), *notes) if p),  # shown once, by panel
                sid=live.get("sid") if same else None,  # follow checks a claimed me= with the class
                claimed=me if good_student(me) and not (same and me == live.get("sid")) else None,
                following=True if not same else live.get("following", True), checked=False)
    if not same:
        live.update(synced=False, forced=None, seen=None, joined=False, show=bool(live["token"]))


def _forget(live: dict, problem: str = "") -> None:
    _keep_mine(live)
    for k in ("code", "token", "sid", "claimed", "state", "forced", "seen", "joined", "synced", "teacher",
              "checked"):
        live.pop(k, None)
    live["problem"] = problem


def _keep_mine(live: dict) -> None:
    """The screen leaves a class this session teaches: keep its code and key, so starting another ends it."""
    if live.get("teacher") and live.get("code") and live.get("token"):
        live["mine"] = (live["code"], live["token"])


def _say(live: dict, text: str) -> None:  # a notice, shown once by panel
    live["problem"] = " ".join(dict.fromkeys([live.get("problem", ""), text])).strip()


def _student_id(store, code: str, live: dict) -> Optional[str]:
    """This tab's id in class ``code``: the address's ``me=`` when the class issued it (a reload), else the id
    this tab already had in the class, else a new one the class issues. A ``me=`` it did not issue: a notice."""
    claimed, sid = live.pop("claimed", None), live.get("sid")
    if claimed and store.issued(code, claimed):
        return claimed
    if sid and not store.issued(code, sid):
        sid = None  # a class that ended, and a new one with the same code
    if claimed:
        _say(live, "The address's `me=` was not issued by this class: "
                   + ("you are still the student this tab was" if sid else "you joined as a new student")
                   + ", and answers given under that id are not shown. To come back as yourself, keep the address "
                     "this page gives you: a reload keeps your answers.")
    return sid or store.new_student(code)


def keep_address_bar(*, key: str = PAGE_KEY) -> None:
    """Write the class (and the teacher's key or the student's id) into the address bar, so a reload keeps them."""
    live = _live(key)
    want = {"class": live.get("code"), "teach": live.get("token") if live.get("teacher") else None,
            "me": live.get("sid") if live.get("code") and not live.get("teacher") else None}
    shared.set_address(want)
    live["raw"] = (want["class"], want["teach"], want["me"])


def teacher_settings() -> str:
    """The teacher's shared settings (model, text, …) as the address bar holds them, a query string."""
    try:
        url = st.query_params.to_dict()
    except Exception:  # noqa: BLE001 - no address bar outside a browser
        return ""
    query = urlencode(sorted((k, v) for k, v in url.items() if k not in PAGE_PARAMS))
    return query if len(query) <= MAX_SETTINGS_CHARS else ""


def adopt(settings: str, code: str, sid: str) -> bool:
    """A student's session takes the class's settings (the teacher's model and text), as if they had opened the
    teacher's link: the address gets them and the session's settings are read again from it (checked there
    like any link). True when they changed, and the caller reruns."""
    wanted = dict(parse_qsl(settings, keep_blank_values=True))
    try:
        url = st.query_params.to_dict()
        if {k: v for k, v in url.items() if k not in PAGE_PARAMS} == wanted:
            return False
        st.query_params.from_dict({**{k: v for k, v in url.items() if k in PAGE_PARAMS}, **wanted,
                                   "class": code, "me": sid})
    except Exception:  # noqa: BLE001 - no address bar outside a browser
        return False
    for k in [k for k in st.session_state if k == shared.KEY or str(k).startswith(shared.WIDGET)]:
        del st.session_state[k]
    return True


# ------------------------------------------------------------------ before the picker: where the class is
def follow(*, key: str = PAGE_KEY) -> None:
    """Before the picker: check the class and who this is; move a following student (and a teacher's fresh
    session) to the class's lesson and step; a student who moved on their own now explores."""
    live = _live(key)
    live.pop("state", None)
    code = live.get("code")
    if not code:
        return
    try:
        store = class_store()
        state = store.get(code)
        if state is None:
            _forget(live, problem=f"No class **{code}** is running on this server: it has ended (a class ends "
                                  "after a while without activity), or the code is mistyped. Check the code on the "
                                  "projector and type it again below.")
            return
        if not live.get("checked"):
            live["teacher"] = bool(live.get("token")) and store.is_teacher(code, live["token"])
            if live.get("token") and not live["teacher"]:
                _say(live, "This address's teacher key is not this class's, so you are in the class as a student: "
                           "only the teacher who started it moves the class or reveals answers.")
                live["token"] = None
            if not live["teacher"]:
                live["sid"] = _student_id(store, code, live)
                if not live["sid"] or not store.join(code, live["sid"], live.get("nick", "")):
                    _forget(live, problem=f"Class **{code}** is full (or has just ended): ask the teacher, or try "
                                          "again later.")
                    return
            live["checked"] = True
            if not live["teacher"] and adopt(state.settings, code, live["sid"]):
                st.rerun()  # the teacher's model and text, read from the address as a shared link is
    except ClassStoreUnavailable as e:
        live["down"] = str(e)
        return
    live.pop("down", None)
    live["state"], live["seen"] = state, state.version
    pick, pos = st.session_state.get(f"{key}.pick"), st.session_state.get(f"{key}.pos", {})
    if live["teacher"]:
        if not live.get("synced"):  # a fresh session (a reload): open where the class is
            st.session_state[f"{key}.want"] = (state.lesson_id, str(state.step + 1))
            live["synced"] = True
        elif pick != state.lesson_id:  # the class is on its own lesson: the picker stays on it
            st.session_state[f"{key}.pick"] = state.lesson_id
        return
    if live.get("following") and live.get("forced") and (pick, pos.get(pick)) != live["forced"]:
        live["following"] = False  # the student moved on their own: they explore until "Back to the class"
    if live.get("following"):
        st.session_state[f"{key}.want"] = (state.lesson_id, str(state.step + 1))


# ------------------------------------------------------------------ the class bar: start, join, code, follow
@section("live_class.panel")
def panel(ctx, *, key: str = PAGE_KEY, place: Place) -> None:
    """The class bar above the step: outside a class, Start (for the lesson shown) and Join (a code, a nickname);
    the teacher's code, link and QR code and how many joined; a student's follow state. Hands the class's
    question to the step (``place.live``) and, for the teacher, moves the class to the step shown."""
    live = _live(key)
    problem = live.pop("problem", "")
    if problem:
        st.warning(problem, icon=":material/groups:")
    if live.get("down"):
        store_failed(RuntimeError(live["down"]))
        return
    state: Optional[ClassState] = live.get("state")
    if state is None:
        _start_or_join(key, place, str(ctx.s.get("lang", "en")), bool(problem))
        return
    view = SimpleNamespace(style=dict(PRESENT_STYLE) if place.present else {}, s=ctx.s)
    st.markdown(BAR_CSS, unsafe_allow_html=True)
    try:
        if live["teacher"]:
            if place.lesson.id == state.lesson_id and place.i != state.step:
                class_store().advance(state.code, live["token"], place.i)
                state = live["state"] = class_store().get(state.code) or state
                live["seen"] = state.version
            _teacher_bar(key, live, state, place.present)
            if place.lesson.id == state.lesson_id:
                place.live = LiveQuestion(key, state, True, live["token"], None, view)
            return
        _student_bar(key, live, state)
        if live.get("following"):
            live["forced"] = (place.lesson.id, place.i)
            place.live = LiveQuestion(key, state, False, None, live["sid"], view)
    except ClassStoreUnavailable as e:
        store_failed(e)


BAR_CSS = """<style>
.live-big-code { font-size: 5.5rem; font-weight: 700; letter-spacing: 0.5rem; line-height: 1.1;
                 font-family: ui-monospace, monospace; }
.live-big-link { font-size: 1.5rem; word-break: break-all; }
.live-tally { font-size: 1.15rem; font-weight: 600; }
.st-key-live_class_bar [data-testid="stMarkdownContainer"] p { font-size: 1.05rem; margin: 0; }
</style>"""


def _teacher_bar(key: str, live: dict, state: ClassState, present: bool) -> None:
    link = join_link(state.code)
    with st.container(border=not present, key="live_class_bar"):  # presenter mode: one slim line
        row = st.columns([5, 1.4, 2.1], vertical_alignment="center")
        row[0].markdown(f"<div class='live-code-line'>Live class <b data-testid='live-code'>{state.code}</b> · "
                        f"join at <code>{html.escape(link)}</code></div>", unsafe_allow_html=True)
        with row[1]:
            _head_count(state.code)
        st.session_state.setdefault(f"{key}.live.show", bool(live.get("show")))
        row[2].toggle("Join code", key=f"{key}.live.show",
                      help="Show the code, the link and a QR code large, for the class to join.")
        if st.session_state.get(f"{key}.live.show"):
            big = st.columns([1, 3], vertical_alignment="center")
            big[0].markdown(qr_svg(link), unsafe_allow_html=True)
            big[1].markdown(f"<div class='live-big-code' data-testid='live-big-code'>{state.code}</div>"
                            f"<div class='live-big-link'>{html.escape(link)}</div>", unsafe_allow_html=True)
            big[1].caption("Students: open the link (or the Lessons page and type the code). Your own address "
                           "holds the teacher's key: don't share it, share the join link.")
            with big[1]:
                _who(state.code)
            big[1].button("Leave the class on this screen", key=f"{key}.live.leave", on_click=_leave, args=(key,),
                          help="This screen stops teaching the class: a class no student joined ends now; one "
                               f"with students ends {LEFT_CLASS_SECONDS // 60} minutes after its last activity.")


@st.fragment(run_every=2 * POLL_SECONDS)
def _head_count(code: str) -> None:
    try:
        n = class_store().students(code)
    except ClassStoreUnavailable:
        n = "?"
    st.markdown(f"<div data-testid='live-students'><b>{n}</b> joined</div>", unsafe_allow_html=True)


@st.fragment(run_every=2 * POLL_SECONDS)
def _who(code: str) -> None:
    """The nicknames of who joined (escaped: a student typed them), while the join screen is up."""
    try:
        names, n = class_store().nicknames(code), class_store().students(code)
    except ClassStoreUnavailable:
        return
    if n:
        shown = ", ".join(plain_md(name) for name in names[:40]) + (" …" if len(names) > 40 else "")
        rest = n - len(names)
        st.caption("Joined: " + (shown or "") + (f"{' and ' if shown else ''}{rest} without a nickname"
                                                  if rest else ""))


def _student_bar(key: str, live: dict, state: ClassState) -> None:
    with st.container(border=True, key="live_class_bar"):
        row = st.columns([4, 2.4, 2], vertical_alignment="center")
        nick = live.get("nick") or ""
        who = f" as **{plain_md(nick)}**" if nick else ""
        row[0].markdown(f"Class **{state.code}**{who}")
        with row[1]:
            _follower(key, state.code)
        if live.get("following"):
            row[2].button("Explore on my own", key=f"{key}.live.explore", on_click=_set_following,
                          args=(key, False), width="stretch")
        else:
            row[2].button("Back to the class", key=f"{key}.live.back", on_click=_set_following, args=(key, True),
                          type="primary", width="stretch")
        if not nick:
            row[0].text_input("Nickname (optional)", key=f"{key}.live.nick", max_chars=NICKNAME_MAX,
                              on_change=_set_nickname, args=(key,), placeholder="a nickname (optional)",
                              label_visibility="collapsed")


@st.fragment(run_every=POLL_SECONDS)
def _follower(key: str, code: str) -> None:
    """A following student's watch: rerun the app when the class's version changed (the teacher moved or
    revealed), else only this small line."""
    live = _live(key)
    try:
        if live.get("following"):
            if class_store().version(code) != live.get("seen"):
                st.rerun()
            st.markdown("<span data-testid='live-follow'>● following the teacher</span>", unsafe_allow_html=True)
            return
        state = class_store().get(code)
    except ClassStoreUnavailable:
        st.caption("the class is out of reach")
        return
    where = f"the class is on step {state.step + 1}" if state else "the class has ended"
    st.markdown(f"<span data-testid='live-follow'>○ exploring · {where}</span>", unsafe_allow_html=True)


def _set_following(key: str, on: bool) -> None:
    live = _live(key)
    live["following"], live["forced"] = on, None


def _set_nickname(key: str) -> None:
    live, nick = _live(key), str(st.session_state.get(f"{key}.live.nick", "")).strip()
    if not good_nickname(nick):
        live["problem"] = (f"A nickname is up to {NICKNAME_MAX} letters, digits, spaces, . ' or -: change it "
                           "and press Enter.")
        return
    try:
        if class_store().join(live["code"], live["sid"], nick):
            live["nick"], live["problem"] = nick, ""
    except ClassStoreUnavailable:
        pass


def _leave(key: str) -> None:
    """The teacher's class ends if empty, else LEFT_CLASS_SECONDS after its last activity (or at the next Start)."""
    live = _live(key)
    code, token = live.get("code"), live.get("token")
    if live.get("teacher") and code and token:
        try:
            if not class_store().end(code, token, only_if_empty=True):
                class_store().expire(code, token, LEFT_CLASS_SECONDS)
        except ClassStoreUnavailable:
            pass  # it ends after its idle time
    _forget(live)


def _start_or_join(key: str, place: Place, lang: str, expanded: bool) -> None:
    """Start (the teacher) and Join (a student): above the step, or in presenter mode in the sidebar (the
    projector's screen keeps its room for the step)."""
    box = st.sidebar if place.present else st.container()
    with box, st.expander("Live class: start one for this lesson, or join with a code", icon=":material/groups:",
                          expanded=expanded):
        start, join = (st.container(), st.container()) if place.present else st.columns(2, gap="large")
        start.markdown("**Teacher**: your students follow your steps on their own screens and each answers the "
                       "questions; you see the class's answers live.")
        start.button("Start a live class", key=f"{key}.live.start", on_click=_start, type="primary",
                     args=(key, place.lesson.id, lang))
        with join.form(key=f"{key}.live.join", border=False):
            st.text_input("Class code", key=f"{key}.live.code_in", max_chars=12, placeholder="ABC234")
            st.text_input("Nickname (optional)", key=f"{key}.live.nick_in", max_chars=NICKNAME_MAX)
            st.form_submit_button("Join the class", on_click=_join, args=(key,))


def _start(key: str, lesson_id: str, lang: str) -> None:
    """Start a class; the one this session taught before (if any) ends first: one class per session."""
    live = _live(key)
    _keep_mine(live)
    try:
        if live.get("mine"):
            class_store().end(*live.pop("mine"))
        code, token = class_store().create(lesson_id, lang if re.fullmatch(r"[a-z]{2,3}(-\w{2,8})?", lang) else "en",
                                           teacher_settings())
    except (ClassStoreFull, ClassStoreUnavailable, ValueError) as e:
        live["problem"] = f"The class could not start: {plain_md(str(e))}."
        return
    _forget(live)
    live.pop("mine", None)  # the class it ended
    live.update(code=code, token=token, teacher=True, checked=True, synced=True, show=True, following=True)
    st.session_state[f"{key}.live.show"] = True


def _join(key: str) -> None:
    live = _live(key)
    typed = str(st.session_state.get(f"{key}.live.code_in", ""))
    nick = str(st.session_state.get(f"{key}.live.nick_in", "")).strip()
    code = normalise_code(typed)
    if code is None:
        live["problem"] = f"“{plain_md(typed[:20])}” is not a class code: {CODE_HELP}. Change it and join again."
        return
    if not good_nickname(nick):
        live["problem"] = f"A nickname is up to {NICKNAME_MAX} letters, digits, spaces, . ' or -: change it."
        return
    _forget(live)
    live.update(code=code, token=None, teacher=False, sid=None, nick=nick, following=True)  # follow issues the id
