"""What the live class's page shows, read from a run's elements: the class's step, the student's own answer, the
teacher's histogram, and the widgets a student answers with and the teacher moves on with.

``LiveUi`` holds the page's words (labels and the patterns its texts follow); ``LIVE_UI`` is the Lessons page's.
Everything is read from what the page drew (markdown, captions, alerts, widget labels, a chart's data), never
from the store: the store is checked on its own by whoever calls this.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass

from tools.load import reading


@dataclass(frozen=True)
class LiveUi:
    """The live class's page (gptviz/ui/sections/live_class.py, live_question.py), as a student and a teacher
    see it."""

    page: str = "Lessons"  # the page's address
    step: re.Pattern = re.compile(r"Step (\d+) of \d+")  # the lesson's counter: group 1 is the step, 1-based
    answer_label: str = "Your answer"  # the radio a student answers with (picking it sends the answer)
    send_label: str = ""  # a button that sends the answer ("": picking sends it)
    mine: re.Pattern = re.compile(r"Your answer is in: \*\*(\d+)\*\*")  # the student's own answer, shown back
    next_label: str = "Next ▶"  # the lesson's Next: the teacher's moves the class
    answered: re.Pattern = re.compile(r"(\d+) of (\d+) students answered")  # the teacher's count above the chart
    # the class bar: a student's "Class **CODE**", the teacher's "Live class <b …>CODE</b>"
    in_class: re.Pattern = re.compile(r"(?:^Class \*\*|^<div class='live-code-line'>Live class <b[^>]*>)([A-Z0-9]{6})")


LIVE_UI = LiveUi()


def _first(pattern: re.Pattern, elements) -> re.Match | None:
    for text in reading.texts(elements):
        m = pattern.search(text)
        if m:
            return m
    return None


def step_shown(elements, ui: LiveUi = LIVE_UI) -> int | None:
    """The class's step (0-based) the run drew, or None when it drew none."""
    m = _first(ui.step, elements)
    return None if m is None else int(m.group(1)) - 1


def class_shown(elements, ui: LiveUi = LIVE_UI) -> str | None:
    """The code of the class the page's class bar names, or None when it shows no class."""
    m = _first(ui.in_class, elements)
    return None if m is None else m.group(1)


def my_answer_shown(elements, ui: LiveUi = LIVE_UI) -> int | None:
    """The student's own answer as the page shows it back (1-based, as on the screen), or None."""
    m = _first(ui.mine, elements)
    return None if m is None else int(m.group(1))


def answered_shown(elements, ui: LiveUi = LIVE_UI) -> int | None:
    """How many students answered, as the teacher's count above the histogram says, or None."""
    m = _first(ui.answered, elements)
    return None if m is None else int(m.group(1))


def histogram_shown(elements) -> list[int] | None:
    """The bar heights of the histogram the run drew (one per choice), or None when it drew none."""
    for _, el in elements:
        if el.WhichOneof("type") == "plotly_chart":
            try:
                data = json.loads(el.plotly_chart.spec).get("data") or []
            except (ValueError, AttributeError):
                continue
            bars = [t for t in data if t.get("type") == "bar"]
            values = (bars[0].get("x") if bars and bars[0].get("orientation") == "h" else
                      bars[0].get("y")) if bars else None
            if isinstance(values, list):
                return [int(v) for v in values]
    return None
