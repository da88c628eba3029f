"""User text from the address bar, and a lesson file's title, reach the pages as text: no link in the Generation
page's Markdown, no tag in the Lessons page's HTML."""
import html
import re

import pytest
from apphelp import ROOT, charts, page
from markdown_it import MarkdownIt
from streamlit.testing.v1 import AppTest

from gptviz.present import lessons as L

PHISH = "[Session expired, log in](http://evil.example)"  # the header shows its last 40 characters
SHORT = "[Log in again](http://evil.example)"  # all of it in the header


def _links(markdown: str) -> list[str]:
    """The links a CommonMark renderer makes of ``markdown``, and any bare address GFM would turn into one."""
    out = re.findall(r"<a\b[^>]*>", MarkdownIt("commonmark").render(markdown))
    return out + re.findall(r"(?<!\\)(?:https?:(?!\\)//|www\.)", markdown)


def _markdown(at: AppTest) -> list[str]:
    return [str(m.value) for kind in ("markdown", "subheader", "header", "title", "caption")
            for m in at.get(kind)]


@pytest.mark.parametrize("text", [PHISH, SHORT])
def test_address_bar_text_is_no_link_on_the_generation_page(text):
    at = page("generation", text=text)
    assert not at.exception, [e.message for e in at.exception]
    shown = [m for m in _markdown(at) if "evil" in m]
    assert shown and any(m.startswith("What comes after") for m in shown), "the prompt is shown in the header"
    for m in shown:
        assert _links(m) == [], m
    at = [b for b in at.button if b.label == "Generate"][0].click().run()
    assert not at.exception, [e.message for e in at.exception]
    line = [m for m in _markdown(at) if m.startswith("**Text:**")]
    assert line and "evil" in line[0] and _links(line[0]) == []
    for c in charts(at):
        assert "<a " not in str(c.get("layout", {}).get("title", ""))


LESSON = '''title = "{title}"

[[steps]]
title = "One step"
view = "hook_embed"
'''


def test_a_lesson_title_is_text_in_the_lesson_counter(tmp_path, monkeypatch):
    title = "<script>alert(1)</script><img src=x onerror=alert(2)>"
    (tmp_path / "01_hostile.toml").write_text(LESSON.format(title=title), encoding="utf-8")
    monkeypatch.setattr(L, "LESSONS_DIR", tmp_path)
    at = AppTest.from_file(str(ROOT / "app_pages" / "lessons.py"), default_timeout=180)
    at.query_params["preset"] = "default"
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    counter = [str(m.value) for m in at.markdown if "data-testid='lesson-counter'" in str(m.value)]
    assert len(counter) == 1
    assert "<script" not in counter[0] and "<img" not in counter[0]
    assert html.escape(title) in counter[0]


LINK_TEXT = "hi [Log in again](https://evil.example/login)"


def test_address_bar_text_is_no_link_in_a_lessons_question_its_choices_or_its_answer():
    """Lesson 1's first question quotes the text ("How many tokens does the tokenizer make of “…”?"); in a live
    class every student takes the teacher's text. The question, the radio's choices and the revealed answer are
    rendered by an independent CommonMark renderer: no link anywhere (nor a bare address GFM would link), and the
    text reads as the model reads it."""
    at = AppTest.from_file(str(ROOT / "app_pages" / "lessons.py"), default_timeout=180)
    for k, v in {"preset": "default", "lesson": "01_text_to_token_ids", "lstep": "1", "text": LINK_TEXT}.items():
        at.query_params[k] = v
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    question = [m for m in _markdown(at) if "evil" in m]
    assert question and question[0].startswith("**How many tokens"), _markdown(at)
    for m in question:
        assert _links(m) == [], m
        # the address reads as typed (the lesson's tokenizer lowercases and has no "[" or "]": it quotes what the
        # model reads, "hi log in again(https://evil.exam…")
        assert "again(https://evil.exam" in html.unescape(re.sub(r"<[^>]+>", "", MarkdownIt("commonmark").render(m)))
    radio = at.radio(key="lessons.answer.01_text_to_token_ids.0")
    for label in radio.options:
        assert _links(str(label)) == [], label
    at = radio.set_value(0).run()
    at = at.button(key="lessons.reveal.01_text_to_token_ids.0").click().run()
    assert not at.exception, [e.message for e in at.exception]
    revealed = [m for m in _markdown(at) + [str(s.value) for s in at.success] if "evil" in m or "Answer" in m]
    assert any("Answer" in m for m in revealed)
    for m in revealed:
        assert _links(m) == [], m


@pytest.mark.parametrize("j", [0, 9])
def test_a_choice_from_the_text_is_drawn_as_text_in_the_radio(j):
    """A choice can be a token of the user's text (or of a loaded vocabulary); radio labels are Markdown."""
    from gptviz.present.lessons.questions import Question
    from gptviz.ui.sections.lessons import choice_label

    choices = [f"{i}: '[x](https://evil.example)'" for i in range(10)]
    q = Question("?", choices, 0, 0, "", {})
    label = choice_label(q, j)
    assert _links(label) == [], label
    text = html.unescape(re.sub(r"<[^>]+>", "", MarkdownIt("commonmark").render(label))).strip()
    assert text == (f"{j + 1} · " if j < 9 else "") + choices[j]  # the number that picks it, then the choice
