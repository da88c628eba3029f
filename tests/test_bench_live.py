"""The bench's live part (tools/bench/live_class.py) makes its rows right (goal met, goal missed, FAIL with the
reason) from hand-made dicts shaped as ``tools.load.live_classroom`` returns them; its lesson's question steps
are the lesson's; and the live page's readers (tools/load/live_page.py) read the texts the live class's page
draws (built here as Streamlit elements by hand, in the page's own words)."""
from streamlit.proto.Element_pb2 import Element

from tools.bench import live_class as lc
from tools.bench.report import exit_status, table
from tools.load import live_page

CAPTION = "vocab_size = 340, set by the tokenizer · 853,248 parameters"


def result(hist_p95=0.6, next_p95=1.2, shown=(CAPTION,), errors=None, students=60) -> dict:
    sp = lambda p95: {"n": 120, "p50": p95 / 2, "p95": p95, "max": p95 * 1.5}
    return {"students": students, "opened": True, "errors": errors or {}, "models_shown": list(shown),
            "answer_to_histogram_s": sp(hist_p95), "next_to_step_s": sp(next_p95), "nexts": 5, "next_missed": 0,
            "answers_never_counted": 0, "redis_answers_step0": students}


def windows() -> dict:
    w = {"replicas": 30.0, "redis": 0.6, "haproxy": 0.3, "client": 12.0, "machine": 60.0, "others": 17.1,
         "t": 60.0, "load0": 3.0, "load1": 4.0}
    return {"class": dict(w, t=120.0), "idle": w}


def test_a_class_that_meets_both_goals_names_everything_it_measured():
    rows = lc.rows_from(result(), windows(), CAPTION, quick=False)
    assert [r["ok"] for r in rows] == [True, True, None] and not any(r["why"] for r in rows)
    assert all(r["model"] == "853,248 params · vocab 340" for r in rows)
    assert all("60 students" in r["figure"] and "2 replicas" in r["figure"] and "Lessons" in r["figure"]
               for r in rows)
    assert "p95 0.60" in rows[0]["value"] and "p95 1.20" in rows[1]["value"]
    assert "replicas 30.0 CPU s/min" in rows[2]["value"] and "Redis 0.60 CPU s/min" in rows[2]["value"]
    assert "others 17.1" in rows[0]["value"] and "load 3.0→4.0" in rows[0]["value"]
    assert exit_status(rows) == 0


def test_slow_figures_miss_their_goals():
    rows = lc.rows_from(result(hist_p95=1.3, next_p95=2.5), windows(), CAPTION, quick=True)
    assert [r["ok"] for r in rows] == [False, False, None]
    assert "--quick" in rows[2]["figure"] and exit_status(rows) == 1 and "MISSED" in table(rows)


def test_the_wrong_model_an_error_or_a_lost_answer_fails_with_the_reason():
    other = "vocab_size = 65, set by the tokenizer · 10,000 parameters"
    for r, says in ((result(shown=(other,)), "not the app's default"), (result(errors={"boom": 1}), "boom"),
                    (dict(result(), redis_answers_step0=59), "Redis holds 59")):
        rows = lc.rows_from(r, windows(), CAPTION, quick=False)
        assert len(rows) == 1 and rows[0]["why"] and says in rows[0]["why"] and exit_status(rows) == 2


def test_the_benchs_question_steps_are_the_lessons():
    from gptviz.present import lessons

    (found, _) = lessons.load_folder(lessons.LESSONS_DIR)
    lesson = next(x for x in found if x.id == lc.LESSON)
    assert tuple(i for i, s in enumerate(lesson.steps) if s.question) == lc.QUESTION_STEPS
    assert len(lesson.steps) > lc.NEXTS  # every Next moves the class


def _markdown(body: str):
    el = Element()
    el.markdown.body = body
    return ((0,), el)


def _alert(body: str):
    el = Element()
    el.alert.body = body
    return ((0,), el)


def test_the_live_page_readers_read_the_pages_own_words():
    student = [_markdown("Class **ABC234** as **Ana**"),
               _markdown("<div class='lesson-counter' data-testid='lesson-counter'>Step 4 of 6 · From text</div>"),
               _alert("Your answer is in: **3**. You can change it until the teacher reveals.")]
    assert live_page.class_shown(student) == "ABC234"
    assert live_page.step_shown(student) == 3 and live_page.my_answer_shown(student) == 3
    teacher = [_markdown("<div class='live-code-line'>Live class <b data-testid='live-code'>XYZ789</b> · join at"),
               _markdown("<div data-testid='live-tally' class='live-tally'>17 of 60 students answered</div>")]
    assert live_page.class_shown(teacher) == "XYZ789" and live_page.answered_shown(teacher) == 17
    assert live_page.class_shown([_markdown("Step 1 of 6")]) is None and live_page.step_shown([]) is None
