"""Issue 33 on the Lessons page (AppTest): one class per session, and student ids the class issued.

- Starting a class ends the class this session taught before; the teacher's "Leave the class on this screen" ends
  a class no student joined and gives one with students ``LEFT_CLASS_SECONDS`` without activity.
- A ``me=`` the class did not issue (made up, another class's, one character changed) is refused with a notice
  naming what happened, the tab gets an id the class issued, and the forged id is never a student; a reload with
  the issued id keeps the student and their answer.

The classes are counted by asking the store for each code a session started (the store is the process's one
``class_store``, shared with the other page tests), never by the page's own state."""
from test_live_class import ANSWER, LID, clean, open_page, store

from gptviz.live import LEFT_CLASS_SECONDS

NOTICE = "was not issued by this class: you joined as a new student"
LEAVE = "lessons.live.leave"
START = "lessons.live.start"


def start(at):
    at = clean(at.button(key=START).click().run())
    return at, at.session_state["lessons.live"]["code"], at.session_state["lessons.live"]["token"]


def alive(codes) -> list[str]:
    return [c for c in codes if store().get(c) is not None]


def test_start_then_leave_with_no_student_ends_the_class():
    teacher, code, _ = start(open_page(lesson=LID))
    assert alive([code]) == [code]
    teacher = clean(teacher.button(key=LEAVE).click().run())
    assert alive([code]) == [], "an empty class must end when its teacher leaves"
    assert START in [b.key for b in teacher.button] and "class" not in teacher.query_params


def test_a_class_with_a_student_outlives_its_teachers_leave_but_only_for_the_short_time():
    teacher, code, _ = start(open_page(lesson=LID))
    assert store().get(code).idle > LEFT_CLASS_SECONDS
    open_page(**{"class": code})  # a student joins by the link
    assert store().students(code) == 1
    teacher = clean(teacher.button(key=LEAVE).click().run())
    state = store().get(code)
    assert state is not None and state.idle == LEFT_CLASS_SECONDS == 600, "the class gets 10 minutes"
    assert store().students(code) == 1


def test_starting_again_ends_the_sessions_previous_class_so_one_class_is_left():
    teacher, first, _ = start(open_page(lesson=LID))
    open_page(**{"class": first})  # a student, so Leave keeps the class (for its short time)
    teacher = clean(teacher.button(key=LEAVE).click().run())
    assert alive([first]) == [first]
    teacher, second, _ = start(teacher)
    assert alive([first, second]) == [second], "starting again must end the class this session taught"
    # the teacher's session opens the address of a class that is not there, then starts again: its own class
    # ends, and another teacher's class goes on
    someone_elses, _ = store().create(LID)
    missing = next(c for c in ("ZZZZZZ", "YYYYYY", "XXXXXX") if store().get(c) is None)
    teacher.query_params["class"] = missing
    teacher.query_params.pop("teach", None)
    teacher = clean(teacher.run())
    assert f"No class **{missing}**" in " ".join(w.value for w in teacher.warning)
    teacher, third, _ = start(teacher)
    assert alive([first, second, third, someone_elses]) == [third, someone_elses]


def test_a_made_up_me_gets_a_notice_and_an_issued_id_and_never_counts_as_a_student():
    teacher, code, _ = start(open_page(lesson=LID))
    other, _ = store().create(LID)
    real = store().new_student(code)
    forged_ids = ["forged-student-0000", real[:-1] + ("A" if real[-1] != "A" else "B"), store().new_student(other)]
    for n, forged in enumerate(forged_ids, start=1):
        at = open_page(**{"class": code, "me": forged})
        said = " ".join(w.value for w in at.warning)
        assert NOTICE in said and "`me=`" in said, said
        me = at.query_params["me"]
        assert me != forged and store().issued(code, me) and not store().issued(code, forged)
        assert store().students(code) == n, "one new student per tab, none for the forged id"
        assert store().my_answer(code, forged, 0) is None
    # a student with an issued id answers; a reload keeps them; the same tab then forging keeps them too
    at = clean(open_page(**{"class": code}).radio(key=ANSWER.format(code=code, i=0)).set_value(1).run())
    me = at.query_params["me"]
    assert store().students(code) == 4 and store().answers(code, 0) == {1: 1}
    reloaded = open_page(**{"class": code, "me": me})
    assert not reloaded.warning and reloaded.radio(key=ANSWER.format(code=code, i=0)).value == 1
    at.query_params["me"] = "forged-student-0001"
    at = clean(at.run())
    said = " ".join(w.value for w in at.warning)
    assert "was not issued by this class: you are still the student this tab was" in said, said
    assert at.query_params["me"] == me and store().students(code) == 4
    assert store().answers(code, 0) == {1: 1} and store().get(other) is not None
