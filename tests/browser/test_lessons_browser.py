"""Real browser: the Lessons page in presenter mode (?present=1) at a projector's 1280×720, moved on with the
arrow keys; screenshots of every step of lesson 2 in tests/screenshots/."""
import re

import pytest

pytestmark = pytest.mark.browser

from kit import SHOTS, browser, server  # noqa: F401 - the fixtures, imported

PROJECTOR = {"width": 1280, "height": 720}


def settle(page, timeout=120_000):
    """Wait until the step is drawn to its end (the footer says which step it is) and its charts are drawn."""
    page.wait_for_selector("[data-testid='lesson-counter']", timeout=timeout)
    step = re.search(r"Step \d+ of \d+", counter(page)).group(0)
    page.get_by_text(f"{step} · ← and → move between steps").wait_for(timeout=timeout)
    page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=timeout)
    if page.locator(".js-plotly-plot").count():
        page.wait_for_selector(".js-plotly-plot .main-svg", timeout=timeout)
    page.wait_for_timeout(600)


def counter(page) -> str:
    return page.locator("[data-testid='lesson-counter']").first.inner_text()


def title(page) -> str:
    return page.locator("h2").first.inner_text()


def blur(page) -> None:
    """The page, not a widget, has the keyboard focus (as after a click on an empty part of the slide)."""
    page.evaluate("() => document.activeElement && document.activeElement.blur()")


def press_and_wait(page, key: str, before: str, timeout=60_000) -> None:
    page.keyboard.press(key)
    page.wait_for_function(
        "(old) => { const c = document.querySelector(\"[data-testid='lesson-counter']\"); "
        "return c && c.innerText !== old; }", arg=before, timeout=timeout)
    settle(page)


def test_right_arrow_moves_to_the_next_step_in_presenter_mode(server, browser):
    SHOTS.mkdir(parents=True, exist_ok=True)
    page = browser.new_page(viewport=PROJECTOR)
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{server}/Lessons?present=1")
    settle(page)
    assert page.locator("[data-testid='stException']").count() == 0
    first, first_title = counter(page), title(page)
    assert re.match(r"Step 1 of \d+", first), first
    # presenter mode: the sidebar is collapsed and the text is large
    sidebar = page.locator("[data-testid='stSidebar']")
    assert sidebar.count() == 0 or sidebar.get_attribute("aria-expanded") == "false" or \
        (sidebar.bounding_box() or {"width": 0})["width"] < 50
    size = page.locator("[data-testid='stMarkdownContainer'] p").first.evaluate(
        "e => parseFloat(getComputedStyle(e).fontSize)")
    assert size >= 22, size
    page.screenshot(path=str(SHOTS / "lessons_present_step1.png"))

    blur(page)
    press_and_wait(page, "ArrowRight", first)
    assert re.match(r"Step 2 of \d+", counter(page)), counter(page)
    assert title(page) != first_title
    assert "present=1" in page.url and "lstep=2" in page.url  # presenter mode stays in the address bar
    page.screenshot(path=str(SHOTS / "lessons_present_step2.png"))
    press_and_wait(page, "ArrowLeft", counter(page))
    assert counter(page) == first and title(page) == first_title
    assert page.locator("[data-testid='stException']").count() == 0
    assert not errors, errors
    page.close()


def test_lesson_two_every_step_on_a_projector(server, browser):
    """Screenshots of every step of lesson 2 (and its question before and after Reveal), at 1280×720."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    page = browser.new_page(viewport=PROJECTOR)
    page.goto(f"{server}/Lessons?present=1&lesson=02_one_attention_head&lstep=1")
    settle(page)
    n = int(re.search(r"of (\d+)", counter(page)).group(1))
    seen = []
    for k in range(1, n + 1):
        assert counter(page).startswith(f"Step {k} of {n}")
        assert page.locator("[data-testid='stException']").count() == 0
        seen.append(title(page))
        assert page.evaluate("() => Math.max(document.scrollingElement.scrollTop, "
                             "...[...document.querySelectorAll('[data-testid=\"stMain\"]')].map(e => e.scrollTop))") < 5
        page.screenshot(path=str(SHOTS / f"lesson2_step{k:02d}.png"))
        if page.get_by_role("button", name="Reveal").count():
            page.locator("[data-testid='stMain']").get_by_role("radiogroup").locator("label").first.click()
            reveal = page.get_by_role("button", name="Reveal", disabled=False)
            reveal.wait_for(timeout=60_000)  # enabled once an answer is picked
            settle(page)
            reveal.click()
            page.get_by_text("Answer:").wait_for(timeout=60_000)
            settle(page)
            page.evaluate("() => { for (const el of [document.scrollingElement, "
                          "...document.querySelectorAll('[data-testid=\"stMain\"]')]) if (el) el.scrollTop = 0; }")
            page.wait_for_timeout(300)
            page.screenshot(path=str(SHOTS / f"lesson2_step{k:02d}_revealed.png"))
        if k < n:
            blur(page)
            press_and_wait(page, "ArrowRight", counter(page))
    assert len(set(seen)) == n
    page.close()
