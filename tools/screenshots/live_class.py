"""The live class on a projector: a teacher starts a class from lesson 1, turns presenter mode on, three students
join by the link (each its own browser context, so its own session) and answer step 1's question; the teacher's
screen then shows the count and the histogram of answers, before Reveal. The same steps as
tests/browser/test_live_class_browser.py, up to its projector picture."""
from __future__ import annotations

import re

from tools.screenshots.drawn import wait_for_script

SCREEN = {"width": 1280, "height": 720}
PICKS = (1, 2, 1)  # the answer each student picks (its index among the question's choices)
TIMEOUT_MS = 120_000


def _answer_labels(page):
    return page.locator("[data-testid='stMain'] [role='radiogroup'] label")


def three_students_answered(teacher, browser, url: str) -> None:
    """On ``teacher``, the drawn Lessons page of a lesson with a question on step 1: start a live class, present
    it, have three students answer, and fold the join code away. The students' contexts stay open (the picture is
    taken with them in the class); the caller closes them."""
    teacher.get_by_text("Live class: start one").click(timeout=TIMEOUT_MS)
    teacher.get_by_role("button", name="Start a live class").click()
    big_code = teacher.locator("[data-testid='live-big-code']")
    big_code.wait_for(timeout=TIMEOUT_MS)
    wait_for_script(teacher)
    teacher.get_by_text("Presenter mode", exact=True).click()  # the projector
    big_code.wait_for(timeout=TIMEOUT_MS)
    code = big_code.inner_text().strip()
    if not re.fullmatch(r"[A-Z0-9]{6}", code):
        raise RuntimeError(f"the class's code is not a code: {code!r}")
    wait_for_script(teacher)
    teacher.wait_for_function("(c) => location.search.includes('class=' + c) && location.search.includes('teach=')",
                              arg=code, timeout=30_000)
    students = []
    for _ in PICKS:
        student = browser.new_context(viewport=SCREEN).new_page()
        student.goto(f"{url}/Lessons?class={code}")  # the join link: the class brings its model and text
        student.locator("[data-testid='live-follow']").wait_for(timeout=TIMEOUT_MS)
        _answer_labels(student).first.wait_for(timeout=TIMEOUT_MS)
        wait_for_script(student)
        students.append(student)
    teacher.get_by_text(f"{len(PICKS)} joined").wait_for(timeout=60_000)
    for student, pick in zip(students, PICKS):
        _answer_labels(student).nth(pick).click()
        student.get_by_text("Your answer is in").wait_for(timeout=60_000)
    # the teacher's count and histogram follow by themselves (a fragment polls the class every second)
    teacher.get_by_text(f"{len(PICKS)} of {len(PICKS)} students answered").wait_for(timeout=60_000)
    teacher.get_by_role("button", name="Join code").click()  # the join screen folds away for the lesson
    wait_for_script(teacher)
    teacher.get_by_text("The class's answers").first.wait_for(timeout=60_000)
