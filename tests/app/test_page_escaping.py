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
