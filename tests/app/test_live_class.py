"""The live class on the Lessons page, driven with AppTest: a teacher's session starts a class, student sessions
join (by the link, by typing the code) and answer, the teacher's count and histogram follow, the reveal shows
the class's answers beside the truth (worked out here from the tokenizer, not by the page), a student follows the
teacher's Next and may explore and come back, a reload keeps a student's answer, and forged or malformed
addresses are refused with a message naming what to change."""
import json
import re

from apphelp import ROOT
from streamlit.testing.v1 import AppTest

from gptviz import encode_batch, get_tokenizer, preset

PAGE = str(ROOT / "app_pages" / "lessons.py")
TIMEOUT = 180
LID = "01_text_to_token_ids"  # its first step asks how many tokens the text has
ANSWER = f"lessons.live.answer.{{code}}.{LID}.{{i}}"
TEACHERS_TEXT = "a live class counts the tokens of this sentence."  # not the default: students must get it


def open_page(**query) -> AppTest:
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT)
    query.setdefault("preset", "default")
    for k, v in query.items():
        at.query_params[k] = str(v)
    return clean(at.run())


def clean(at: AppTest) -> AppTest:
    assert not at.exception, [e.message for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    return at


def store():
    from gptviz.ui.sections.live_question import class_store
    return class_store()


def tally(at: AppTest) -> str:
    return next(re.sub("<[^>]+>", "", m.value) for m in at.markdown if "data-testid='live-tally'" in m.value)


def histogram(at: AppTest) -> tuple[list[str], list[int], list[str]]:
    """The class's answers chart: its bar labels, counts and colours."""
    spec = next(json.loads(c.proto.spec) for c in at.get("plotly_chart")
                if "class's answers" in json.dumps(json.loads(c.proto.spec)["layout"].get("title", "")))
    bar = spec["data"][0]
    return spec["layout"]["yaxis"]["ticktext"], bar["x"], bar["marker"]["color"]


def token_count_by_hand() -> int:
    """The truth of lesson 1's first question: the teacher's text's tokens under the lesson's tokenizer."""
    tok = get_tokenizer("char-bpe", num_merges=20, lowercase=True)
    b = encode_batch(tok, TEACHERS_TEXT, preset("default", vocab_size=tok.vocab_size).block_size)
    return int(b.attention_mask[0].sum())


def heading(at: AppTest) -> str:
    return next(m.value[3:] for m in at.markdown if m.value.startswith("## "))


def test_a_class_answers_live_and_the_reveal_shows_its_answers_beside_the_truth():
    teacher = open_page(lesson=LID, lstep="1", text=TEACHERS_TEXT)
    teacher = clean(teacher.button(key="lessons.live.start").click().run())
    live = teacher.session_state["lessons.live"]
    code, token = live["code"], live["token"]
    assert re.fullmatch(r"[A-HJ-NP-Z2-9]{6}", code) and len(token) >= 32
    projector = " ".join(m.value for m in teacher.markdown)
    assert f"live-big-code' data-testid='live-big-code'>{code}<" in projector
    assert f"/Lessons?class={code}" in projector and "data:image/svg+xml" in projector  # link and QR code
    assert token not in projector, "the teacher's key must never be shown on the projector"
    assert teacher.query_params["teach"] == token and teacher.query_params["class"] == code

    # three students: two by the link (one typing the code in lower case), one through the join box
    one, two, four = (store().new_student(code) for _ in range(3))  # ids the class issued (as a join link gets)
    s1 = open_page(**{"class": code.lower(), "me": one})
    s2 = open_page(**{"class": code, "me": two})
    s3 = open_page(lesson="03_initial_loss")
    s3.text_input(key="lessons.live.code_in").set_value(f" {code[:3].lower()}-{code[3:]} ")
    s3.text_input(key="lessons.live.nick_in").set_value("Zoë <b>")
    s3 = clean(s3.button[[b.key for b in s3.button].index("FormSubmitter:lessons.live.join-Join the class")]
               .click().run())
    assert "nickname" in " ".join(w.value for w in s3.warning), "a nickname with < > is refused with a message"
    s3.text_input(key="lessons.live.nick_in").set_value("Zoë")
    s3 = clean(s3.button[[b.key for b in s3.button].index("FormSubmitter:lessons.live.join-Join the class")]
               .click().run())
    assert s3.session_state["lessons.pick"] == LID, "the student was taken to the class's lesson"
    teacher = clean(teacher.run())
    assert "Joined: Zoë and 2 without a nickname" in [c.value for c in teacher.caption]
    assert store().join(code, four, "a_b*c") is False  # * is no nickname character
    assert store().join(code, four, "_x_")
    teacher = clean(teacher.run())  # Markdown's own characters shown as themselves
    assert r"Joined: Zoë, \_x\_ and 2 without a nickname" in [c.value for c in teacher.caption]
    for at in (s1, s2, s3):  # who joined without the teacher's text in their address got it from the class
        assert at.session_state["gptviz.settings"]["text"] == TEACHERS_TEXT
    assert s1.query_params["me"] == one and "teach" not in s1.query_params
    key = ANSWER.format(code=code, i=0)
    for at in (s1, s2, s3):
        assert not [b for b in at.button if b.key == "lessons.live.reveal.0"], "a student has no Reveal"
    chosen = {"s1": 1, "s2": 1, "s3": 0}
    s1 = clean(s1.radio(key=key).set_value(1).run())
    s2 = clean(s2.radio(key=key).set_value(1).run())
    s3 = clean(s3.radio(key=key).set_value(0).run())
    s1 = clean(s1.radio(key=key).set_value(3).run())  # s1 changes their mind: counted once, the last answer
    chosen["s1"] = 3

    teacher = clean(teacher.run())  # the fragment's next poll
    assert tally(teacher) == "3 of 4 students answered"
    labels, counts, colours = histogram(teacher)
    assert counts == [list(chosen.values()).count(j) for j in range(len(labels))]
    assert len(set(colours)) == 1, "before the reveal the chart must not give the truth away"
    assert not [s for s in teacher.success if s.value.startswith("**Answer")]

    teacher = clean(teacher.button(key="lessons.live.reveal.0").click().run())
    n = token_count_by_hand()
    assert any(s.value.startswith(f"**Answer: {n}**") for s in teacher.success), [s.value for s in teacher.success]
    labels, counts, colours = histogram(teacher)
    truth = [lab.split(" · ", 1)[1] for lab in labels].index(str(n))
    assert labels[truth].startswith("✓ ") and sum(lab.startswith("✓") for lab in labels) == 1
    assert counts == [list(chosen.values()).count(j) for j in range(len(labels))]
    assert [c != colours[(truth + 1) % len(colours)] for c in colours] == [j == truth for j in range(len(labels))]
    assert tally(teacher).startswith("3 of 4 students answered · " + f"{list(chosen.values()).count(truth)} right")

    s2 = clean(s2.run())  # the follower's poll saw the new version
    assert s2.radio(key=key).disabled
    verdict = " ".join(m.value for m in s2.markdown)
    assert ("**Right!**" if truth == 1 else f"Not quite: the answer is **{n}**") in verdict
    assert histogram(s2)[1] == counts
    assert not store().answer(code, two, 0, 2), "no answer counts after the reveal"


def test_students_follow_the_teacher_explore_and_come_back_and_a_reload_keeps_an_answer():
    teacher = clean(open_page(lesson=LID).button(key="lessons.live.start").click().run())
    code = teacher.session_state["lessons.live"]["code"]
    s1 = open_page(**{"class": code})  # the join link: the class issues this tab's id
    me = s1.query_params["me"]
    assert store().issued(code, me)
    s1 = clean(s1.radio(key=ANSWER.format(code=code, i=0)).set_value(2).run())
    reloaded = open_page(**{"class": code, "me": me})  # a new session, the same address
    assert reloaded.query_params["me"] == me and not reloaded.warning
    assert reloaded.radio(key=ANSWER.format(code=code, i=0)).value == 2

    teacher = clean(teacher.button(key="lessons.next").click().run())
    assert store().get(code).step == 1
    s1 = clean(s1.run())
    assert heading(s1) == heading(teacher) and s1.session_state["lessons.pos"][LID] == 1
    s1 = clean(s1.button(key="lessons.next").click().run())  # the student moves on their own: exploring
    assert "lessons.live.back" in [b.key for b in s1.button]
    teacher = clean(teacher.button(key="lessons.next").click().run())
    s1 = clean(s1.run())
    assert s1.session_state["lessons.pos"][LID] == 2 and store().get(code).step == 2
    s1 = clean(s1.button(key="lessons.next").click().run())
    assert s1.session_state["lessons.pos"][LID] == 3, "an exploring student is not pulled back"
    s1 = clean(s1.button(key="lessons.live.back").click().run())
    assert s1.session_state["lessons.pos"][LID] == 2 and heading(s1) == heading(teacher)
    assert "lessons.live.explore" in [b.key for b in s1.button]


def test_a_forged_teacher_key_can_neither_advance_nor_reveal():
    teacher = clean(open_page(lesson=LID).button(key="lessons.live.start").click().run())
    code, token = teacher.session_state["lessons.live"]["code"], teacher.session_state["lessons.live"]["token"]
    before = store().get(code)
    forged = token[:-2] + ("AA" if token[-2:] != "AA" else "BB")
    mallory = open_page(**{"class": code, "teach": forged, "me": store().new_student(code)})
    assert "not this class's" in " ".join(w.value for w in mallory.warning)
    assert not [b for b in mallory.button if b.key == "lessons.live.reveal.0"]
    mallory = clean(mallory.button(key="lessons.next").click().run())
    mallory = clean(mallory.button(key="lessons.next").click().run())
    assert "teach" not in mallory.query_params
    after = store().get(code)
    assert (after.step, after.revealed, after.version) == (before.step, before.revealed, before.version)


def test_bad_addresses_get_a_message_naming_what_to_change_and_touch_no_class():
    at = open_page(**{"class": "ABC10I"})
    assert "class=" in " ".join(w.value for w in at.warning) and "lessons.live.start" in [b.key for b in at.button]
    at = open_page(**{"class": "<script>x</script>"})
    assert "<script>" not in " ".join(w.value for w in at.warning)
    at = open_page(**{"class": "ZZZZZZ", "me": "student-zz-1"})
    assert "No class **ZZZZZZ**" in " ".join(w.value for w in at.warning)
    code = store().create(LID)[0]
    at = open_page(**{"class": code, "teach": "x", "me": "bad id!"})
    said = " ".join(w.value for w in at.warning)
    assert "`teach=`" in said and "`me=`" in said
    assert at.query_params["me"] != "bad id!" and store().students(code) == 1


def shown(at: AppTest) -> str:
    """Everything a screen says in text: markdown, success/warning boxes and captions."""
    return " | ".join(str(e.value) for kind in (at.markdown, at.success, at.warning, at.info, at.caption)
                      for e in kind)


def class_charts(at: AppTest) -> list:
    return [c for c in at.get("plotly_chart")
            if "class's answers" in json.dumps(json.loads(c.proto.spec)["layout"].get("title", ""))]


def test_a_students_screen_shows_no_verdict_and_no_class_answers_before_the_reveal_and_both_after():
    """Three students, two with the SAME answer (the truth) and one with another. Before the reveal a student's
    screen has their own pick and nothing else: no right/wrong, no "Answer:", no count and no chart of the class's
    answers; the teacher's count says how many STUDENTS answered (2 when two answered alike, then 3). After the
    reveal each student sees their verdict and the class's chart. The truth is counted here from the tokenizer and
    found among the choices the student's radio offers; the counts are written out by hand."""
    teacher = clean(open_page(lesson=LID, lstep="1", text=TEACHERS_TEXT).button(key="lessons.live.start").click()
                    .run())
    code = teacher.session_state["lessons.live"]["code"]
    key = ANSWER.format(code=code, i=0)
    s1, s2, s3 = (open_page(**{"class": code, "me": store().new_student(code)}) for _ in (1, 2, 3))
    options = [o.split(" · ", 1)[1] for o in s1.radio(key=key).options]
    n = token_count_by_hand()
    truth = options.index(str(n))
    other = (truth + 1) % len(options)

    def before_the_reveal(at: AppTest, pick: int) -> None:
        said = shown(at)
        assert f"Your answer is in: **{pick + 1}**" in said and not at.radio(key=key).disabled
        assert "**Right!**" not in said and "Not quite" not in said, "no verdict before the reveal"
        assert "**Answer:" not in said, "no answer before the reveal"
        assert "data-testid='live-tally'" not in said and "students answered" not in said, "no count before it"
        assert not class_charts(at), "no chart of the class's answers before the reveal"

    s1 = clean(s1.radio(key=key).set_value(truth).run())
    before_the_reveal(s1, truth)
    s2 = clean(s2.radio(key=key).set_value(truth).run())
    before_the_reveal(s2, truth)
    teacher = clean(teacher.run())
    assert tally(teacher) == "2 of 3 students answered", "two students with the same answer are two answers"
    assert histogram(teacher)[1] == [2 if j == truth else 0 for j in range(len(options))]
    s3 = clean(s3.radio(key=key).set_value(other).run())
    before_the_reveal(s3, other)
    s1 = clean(s1.run())  # the others have answered meanwhile: still nothing of theirs on this screen
    before_the_reveal(s1, truth)
    teacher = clean(teacher.run())
    assert tally(teacher) == "3 of 3 students answered"
    hand = [{truth: 2, other: 1}.get(j, 0) for j in range(len(options))]
    assert histogram(teacher)[1] == hand

    teacher = clean(teacher.button(key="lessons.live.reveal.0").click().run())
    for at, pick in ((s1, truth), (s3, other)):
        at = clean(at.run())
        said = shown(at)
        assert at.radio(key=key).disabled
        assert ("**Right!**" if pick == truth else f"Not quite: the answer is **{n}**") in said
        assert ("Not quite" not in said) if pick == truth else ("**Right!**" not in said)
        assert f"**Answer: {n}**" in said
        assert tally(at) == "3 of 3 students answered · 2 right (67%)"
        assert len(class_charts(at)) == 1 and histogram(at)[1] == hand


def test_a_reload_joins_again_without_a_nickname_and_keeps_the_one_the_student_gave():
    """A student joins through the box with a nickname; a reload (a new session with the same ``me=``) joins
    again with an empty one, and so does an empty nickname typed in the class bar: the teacher still lists the
    nickname. The oracle is the list of who joined with what, written out here."""
    teacher = clean(open_page(lesson=LID).button(key="lessons.live.start").click().run())
    code = teacher.session_state["lessons.live"]["code"]
    ann = open_page(lesson=LID)
    ann.text_input(key="lessons.live.code_in").set_value(code)
    ann.text_input(key="lessons.live.nick_in").set_value("Ann")
    ann = clean(ann.button[[b.key for b in ann.button].index("FormSubmitter:lessons.live.join-Join the class")]
                .click().run())
    sid = ann.session_state["lessons.live"]["sid"]
    assert f"Class **{code}** as **Ann**" in shown(ann)
    open_page(**{"class": code, "me": store().new_student(code)})
    teacher = clean(teacher.run())
    assert "Joined: Ann and 1 without a nickname" in [c.value for c in teacher.caption]

    reloaded = open_page(**{"class": code, "me": sid})  # the same student, a reload: no nickname in the address
    assert reloaded.query_params["me"] == sid and store().students(code) == 2
    reloaded.text_input(key="lessons.live.nick").set_value("  ")  # an empty nickname typed in the class bar
    reloaded = clean(reloaded.run())
    teacher = clean(teacher.run())
    assert "Joined: Ann and 1 without a nickname" in [c.value for c in teacher.caption]
    assert store().nicknames(code) == ["Ann"] and store().students(code) == 2
