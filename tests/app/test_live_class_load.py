"""Issue 33's load test ("done when"): one session looping Start/Leave 300 times leaves at most one class, and 30
students each forging 10 ids add no student and no answer. Run against both stores (a fresh ``MemoryStore``, and a
``RedisStore`` on test_live_store's throwaway ``redis-server``), each with room for only 3 classes: a leaked class
per cycle would fill it within 3 cycles, and the loop would read "already holds 3 classes".

How: one Streamlit script run (AppTest.from_function) calls the Lessons page's own functions exactly as the page
calls them, in one session: the Start and Leave buttons' callbacks (``_start``, ``_leave``) for the teacher; for
each student (a session state of its own, the page's ``key``) the join link read from the address and checked by
``read_address`` and ``follow``, an honest answer sent as the answer radio sends it, then 10 addresses with a
forged ``me=`` (made up, another class's, the student's own id with its signature changed), each read and checked
the same way. A real server and browser would only add Streamlit's transport, which ``tests/app/test_live_class*.py``
and the browser tests cover; this keeps the test to a few seconds. The page's ``class_store`` is swapped for the
fresh store of the test (monkeypatch), so counts are the test's alone."""
import pytest
import test_live_store
from streamlit.testing.v1 import AppTest

from gptviz.live import LEFT_CLASS_SECONDS

redis_url, make = test_live_store.redis_url, test_live_store.make  # the fixtures (memory and Redis)
LID = "01_text_to_token_ids"
CYCLES, STUDENTS, FORGED_EACH = 300, 30, 10


def start_and_leave(cycles: int, lesson: str) -> None:
    """The script: one teacher's session presses Start then Leave ``cycles`` times; every other class gets a
    student before the Leave (so Leave keeps it for the short time and only the next Start ends it)."""
    import streamlit as st

    from gptviz.ui.sections import live_class as lc
    codes, problems = [], []
    for i in range(cycles):
        lc._start("lessons", lesson, "en")
        live = lc._live("lessons")
        problems.append(live.pop("problem", ""))
        code = live.get("code")
        codes.append(code)
        if code and i % 2:
            lc.class_store().join(code, lc.class_store().new_student(code))
        lc._leave("lessons")
    st.session_state["result"] = {"codes": codes, "problems": [p for p in problems if p]}


def forging_students(code: str, other_code: str, students: int, forged_each: int) -> None:
    """The script: ``students`` sessions (one page key each) open the join link, answer, then put ``forged_each``
    forged ids in their address, one after another, each read and checked as the page does."""
    import secrets

    import streamlit as st

    from gptviz.ui.sections import live_class as lc
    store = lc.class_store()
    out = {"ids": [], "kept": [], "notices": 0}
    for i in range(students):
        key = f"student{i}"
        st.query_params.from_dict({"class": code})  # the join link: no me=
        lc.read_address(key=key)
        lc.follow(key=key)
        sid = lc._live(key)["sid"]
        out["ids"].append(sid)
        store.answer(code, sid, 0, i % 4)  # what the answer radio's callback sends
        forged = [secrets.token_urlsafe(24) for _ in range(forged_each - 4)]
        forged += [store.new_student(other_code), store.new_student(other_code)]
        forged += [sid[:-1] + ("A" if sid[-1] != "A" else "B"), sid[:20] + ("A" if sid[20] != "A" else "B") + sid[21:]]
        for fake in forged:
            st.query_params.from_dict({"class": code, "me": fake})
            lc.read_address(key=key)
            lc.follow(key=key)
            live = lc._live(key)
            out["notices"] += "was not issued by this class" in live.pop("problem", "")
            out["kept"].append(live.get("sid") == sid)
            store.answer(code, fake, 0, 3)  # and the forged id's own answer, sent straight on
    st.session_state["result"] = out


@pytest.fixture
def fresh(make, monkeypatch):
    """The store of the test, with room for 3 classes, as the page's one class store."""
    from gptviz.ui.sections import live_class, live_question
    s = make(max_classes=3)
    for module in (live_class, live_question):
        monkeypatch.setattr(module, "class_store", lambda: s)
    return s


def run(script, *args):
    at = AppTest.from_function(script, args=args, default_timeout=120).run()
    assert not at.exception, [e.message for e in at.exception]
    return at.session_state["result"]


def test_one_session_starting_and_leaving_300_times_leaves_at_most_one_class(fresh):
    r = run(start_and_leave, CYCLES, LID)
    assert r["problems"] == [], r["problems"][:3]  # no "already holds 3 classes"
    codes = r["codes"]
    assert len(codes) == CYCLES and all(codes)
    alive = [c for c in codes if fresh.get(c) is not None]
    assert alive == [codes[-1]], "only the last class (a student joined, so Leave kept it) may be left"
    assert fresh.get(codes[-1]).idle == LEFT_CLASS_SECONDS and fresh.students(codes[-1]) == 1
    fresh.create(LID)  # and the store still has room for another teacher
    fresh.create(LID)


def test_thirty_students_forging_ten_ids_each_add_no_student_and_no_answer(fresh):
    code, _ = fresh.create(LID)
    other, _ = fresh.create(LID)
    r = run(forging_students, code, other, STUDENTS, FORGED_EACH)
    assert len(set(r["ids"])) == STUDENTS and all(fresh.issued(code, sid) for sid in r["ids"])
    assert fresh.students(code) == STUDENTS, "only the students who joined honestly"
    assert fresh.students(other) == 0
    assert fresh.answers(code, 0) == {j: sum(1 for i in range(STUDENTS) if i % 4 == j) for j in range(4)}
    assert sum(fresh.answers(code, 0).values()) == STUDENTS
    assert len(r["kept"]) == STUDENTS * FORGED_EACH and all(r["kept"]), "one tab stays one student"
    assert r["notices"] == STUDENTS * FORGED_EACH, "every forged me= gets the notice"
