"""Real browser: a live class of 1 teacher and 3 students (one Chromium, four contexts, so four sessions with
their own cookies) on one server. The teacher starts a class; the students open the join link; each answers on
their own screen and the teacher's count and histogram follow without a click; Reveal reaches every student by
itself; the teacher's Next moves every following student (how fast: the bench's live class rows), and a student who
explores stays where they are until "Back to the class". Screenshots of the projector and a student at 1280×720."""
import re
import time

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

pytestmark = pytest.mark.browser

from kit import SHOTS, browser, server, wait_for_script  # noqa: F401 - the fixtures, imported

SCREEN = {"width": 1280, "height": 720}
LESSON = "01_text_to_token_ids"  # step 1 asks a question (how many tokens), step 2 does not


def counter(page) -> str:
    return page.locator("[data-testid='lesson-counter']").first.inner_text()


def step_of(page) -> int:
    return int(re.search(r"Step (\d+) of", counter(page)).group(1))


def wait_step(page, k: int, timeout=60_000, since: float | None = None) -> float:
    """Wait (no click) until the page shows step ``k``; the seconds since ``since`` (default: now)."""
    t0 = time.monotonic() if since is None else since
    page.wait_for_function(
        "(k) => { const c = document.querySelector(\"[data-testid='lesson-counter']\"); "
        "return c && new RegExp('Step ' + k + ' of').test(c.innerText); }", arg=k, timeout=timeout, polling=50)
    return time.monotonic() - t0


def seen(page, name: str) -> str:
    """What the page shows of the class (for a failure's message), and a screenshot of it under ``name``."""
    page.screenshot(path=str(SHOTS / f"live_class_failed_{name}.png"))
    bits = [page.locator(f"[data-testid='{t}']").first.inner_text(timeout=5_000)
            if page.locator(f"[data-testid='{t}']").count() else f"no {t}" for t in ("lesson-counter", "live-follow")]
    return " · ".join(bits)


def click_until(page, name: str, button, reached, timeout=30_000) -> None:
    """Click ``button`` and wait until ``reached(timeout)`` holds (it waits, raising PlaywrightTimeout).

    Twice in fresh clones' full runs (the suite on three workers) a click here left the page as it was for a minute,
    and the same test passed alone: once a student's Previous (cdd523e), once their Back to the class (77a7c15). The
    page polls the class every second (a fragment). So the button is clicked once more, and only if it is still there
    and the page has not got where the click leads; a second failure raises with what the page shows."""
    for attempt in range(2):
        wait_for_script(page)
        button.click(timeout=60_000)
        try:
            reached(timeout)
            return
        except PlaywrightTimeout:
            if attempt or not button.is_visible():
                raise AssertionError(f"{name}: the page shows {seen(page, name)}") from None


def tally(page) -> str:
    return page.locator("[data-testid='live-tally']").first.inner_text()


def main_radio_labels(page):
    return page.locator("[data-testid='stMain'] [role='radiogroup'] label")


def test_a_teacher_and_three_students(server, browser):
    SHOTS.mkdir(parents=True, exist_ok=True)
    errors = []
    teacher = browser.new_context(viewport=SCREEN).new_page()
    teacher.on("pageerror", lambda e: errors.append(str(e)))
    teacher.goto(f"{server}/Lessons?lesson={LESSON}&preset=default")
    teacher.get_by_text("Live class: start one").click(timeout=90_000)
    teacher.get_by_role("button", name="Start a live class").click()
    teacher.locator("[data-testid='live-big-code']").wait_for(timeout=60_000)
    wait_for_script(teacher)
    teacher.get_by_text("Presenter mode", exact=True).click()  # the projector
    teacher.locator("[data-testid='live-big-code']").wait_for(timeout=60_000)
    code = teacher.locator("[data-testid='live-big-code']").inner_text().strip()
    assert re.fullmatch(r"[A-HJ-NP-Z2-9]{6}", code), code
    wait_for_script(teacher)
    teacher.wait_for_function("(c) => location.search.includes('class=' + c) && location.search.includes('teach=')",
                              arg=code, timeout=10_000)
    assert teacher.locator("img[alt='QR code of the join link']").count() == 1
    teacher.screenshot(path=str(SHOTS / "live_class_projector_join.png"))

    students = []
    for _ in range(3):
        s = browser.new_context(viewport=SCREEN).new_page()
        s.on("pageerror", lambda e: errors.append(str(e)))
        s.goto(f"{server}/Lessons?class={code}")  # the join link: no model, no text; the class brings them
        s.locator("[data-testid='live-follow']").wait_for(timeout=90_000)
        main_radio_labels(s).first.wait_for(timeout=90_000)
        wait_for_script(s)
        assert "me=" in s.url and "teach=" not in s.url
        students.append(s)
    teacher.get_by_text("3 joined").wait_for(timeout=30_000)

    picks = [1, 2, 1]
    for s, j in zip(students, picks):
        main_radio_labels(s).nth(j).click()
        s.get_by_text("Your answer is in").wait_for(timeout=30_000)
    # the teacher's count and histogram, without a click (a fragment polls the class every second)
    teacher.get_by_text("3 of 3 students answered").wait_for(timeout=30_000)
    assert teacher.get_by_text("Answer:").count() == 0, "no truth before the reveal"
    teacher.get_by_role("button", name="Join code").click()  # the join screen folds away for the lesson
    wait_for_script(teacher)
    time.sleep(1.5)
    teacher.screenshot(path=str(SHOTS / "live_class_projector_answers.png"))

    click_until(teacher, "reveal", teacher.get_by_role("button", name="Reveal"),
                lambda t: teacher.get_by_text("Answer:").first.wait_for(timeout=t))
    truth = int(re.search(r"Answer: (\d+)", teacher.get_by_text("Answer:").first.inner_text()).group(1))
    for s, j in zip(students, picks):  # the reveal reaches every student by itself
        s.get_by_text("Answer:").first.wait_for(timeout=30_000)  # 10 s ran out once, the suite on three workers
        assert int(re.search(r"Answer: (\d+)", s.get_by_text("Answer:").first.inner_text()).group(1)) == truth
        mine = int(re.search(r"· (\d+)", main_radio_labels(s).nth(j).inner_text()).group(1))
        assert s.get_by_text("Right!" if mine == truth else "Not quite").count() >= 1
    right = sum(int(re.search(r"· (\d+)", main_radio_labels(students[0]).nth(j).inner_text()).group(1)) == truth
                for j in picks)
    assert re.search(rf"3 of 3 students answered · {right} right", tally(teacher)), tally(teacher)
    wait_for_script(students[0])
    students[0].screenshot(path=str(SHOTS / "live_class_student_revealed.png"))

    # the teacher's Next: every following student moves without a click
    clicked = time.monotonic()
    teacher.get_by_role("button", name=re.compile("Next")).click()
    # each reaches step 2 by itself (wait_step fails past its own timeout); how fast is the bench's to measure
    # (tools/bench/live_class.py: the teacher's Next → every student's step), not a timed test's: a 4 s limit here
    # failed once at 4.3 s with the suite on three workers
    took = [wait_step(s, 2, since=clicked) for s in students]  # each from the click (the waits overlap)
    assert len(took) == len(students)
    print(f"follow: teacher's Next -> students on step 2 after {', '.join(f'{t:.2f}' for t in took)} s")

    # a student explores (Previous), the class moves on without them, and they come back
    click_until(students[0], "previous", students[0].get_by_role("button", name=re.compile("Previous")),
                lambda t: wait_step(students[0], 1, timeout=t))
    students[0].get_by_role("button", name="Back to the class").wait_for(timeout=30_000)
    teacher.get_by_role("button", name=re.compile("Next")).click()
    for s in students[1:]:
        wait_step(s, 3)
    students[0].get_by_text("the class is on step 3").wait_for(timeout=10_000)
    assert step_of(students[0]) == 1, "an exploring student is not pulled along"
    click_until(students[0], "back", students[0].get_by_role("button", name="Back to the class"),
                lambda t: wait_step(students[0], 3, timeout=t))
    students[0].locator("[data-testid='live-follow']", has_text="following").wait_for(timeout=10_000)
    for p in [teacher, *students]:
        assert p.locator("[data-testid='stException']").count() == 0
    assert not errors, errors
    for p in [teacher, *students]:
        p.context.close()
