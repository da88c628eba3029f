"""Real browser: the Lessons page in presenter mode (?present=1) at a projector's 1280×720, moved on with the
arrow keys; screenshots of every step of lesson 2 in tests/screenshots/."""
import re
import tomllib

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.browser

from kit import (  # noqa: F401 - the fixtures, imported
    EVERY_CHART_DRAWN_JS,
    ROOT,
    SHOTS,
    browser,
    server,
    wait_for_script,
    wait_until_still,
)

PROJECTOR = {"width": 1280, "height": 720}
LESSON = "02_one_attention_head"

# How tall the step is against the screen: the main block's content (its scroll height) and the page's own, and
# the viewport's height; and how far either is scrolled.
# Also where each chart and the revealed answer are: on the screen, and inside the panel that holds them (not
# scrolled out of it).
SIZE_JS = """() => { const m = document.querySelector('[data-testid="stMain"]'), d = document.scrollingElement;
    const seen = el => { let r = el.getBoundingClientRect(), ok = r.top >= 0 && r.bottom <= window.innerHeight;
        for (let p = el.parentElement; p; p = p.parentElement) { const s = getComputedStyle(p);
            if (/(auto|scroll)/.test(s.overflowY) && p.scrollHeight > p.clientHeight) {
                const b = p.getBoundingClientRect(); ok = ok && r.top >= b.top - 1 && r.bottom <= b.bottom + 1; } }
        return ok; };
    const answer = [...document.querySelectorAll('[data-testid="stAlert"]')]
        .filter(a => a.innerText.includes('Answer:'));
    return {content: Math.max(m ? m.scrollHeight : 0, d.scrollHeight), screen: window.innerHeight,
            scrolled: Math.max(m ? m.scrollTop : 0, d.scrollTop),
            charts_seen: [...document.querySelectorAll('.js-plotly-plot')].map(seen),
            answer_seen: answer.map(seen)}; }"""
TO_TOP_JS = """() => { for (const el of [document.scrollingElement, document.querySelector('[data-testid="stMain"]')])
    if (el) el.scrollTop = 0; }"""
AT_TOP_JS = """() => [document.scrollingElement, document.querySelector('[data-testid="stMain"]')]
    .every(el => !el || el.scrollTop === 0)"""


def settle(page, timeout=120_000):
    """Wait until the step is drawn to its end (the footer says which step it is), the script is over, its charts
    are drawn and the layout has stopped moving."""
    page.wait_for_selector("[data-testid='lesson-counter']", timeout=timeout)
    step = re.search(r"Step \d+ of \d+", counter(page)).group(0)
    page.get_by_text(f"{step} · ← and → move between steps").wait_for(timeout=timeout)
    wait_for_script(page, timeout)
    page.wait_for_function(EVERY_CHART_DRAWN_JS, timeout=timeout, polling=50)
    wait_until_still(page, timeout)


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


@pytest.fixture(scope="module")
def lesson_two(server, browser):
    """Every step of lesson 2 at 1280×720, walked once by keyboard alone: → to move on, 1 to answer its question
    with the first choice, R to reveal. What each step showed, its size against the screen, and screenshots in
    tests/screenshots/."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    page = browser.new_page(viewport=PROJECTOR)
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{server}/Lessons?present=1&lesson={LESSON}&lstep=1")
    settle(page)
    n = int(re.search(r"of (\d+)", counter(page)).group(1))
    steps = []
    for k in range(1, n + 1):
        shown = dict(k=k, n=n, counter=counter(page), title=title(page), size=page.evaluate(SIZE_JS),
                     exceptions=page.locator("[data-testid='stException']").count())
        page.screenshot(path=str(SHOTS / f"lesson2_step{k:02d}.png"))
        if page.get_by_role("button", name="Reveal").count():
            choice = page.locator("[data-testid='stMain']").get_by_role("radiogroup").locator("label").first
            picked = re.sub(r"^1 · ", "", choice.inner_text().strip())  # the choices are numbered for their keys
            blur(page)
            page.keyboard.press("1")  # the first answer, by its number
            page.get_by_role("button", name="Reveal", disabled=False).wait_for(timeout=60_000)  # enabled: picked
            settle(page)
            assert choice.locator("input").is_checked()
            blur(page)
            page.keyboard.press("r")  # Reveal (a key Streamlit keeps for rerun: the lesson takes it first)
            page.get_by_text("Answer:").wait_for(timeout=60_000)
            settle(page)
            page.evaluate(TO_TOP_JS)
            page.wait_for_function(AT_TOP_JS, timeout=10_000, polling=50)
            wait_until_still(page)
            alert = [t for t in page.locator("[data-testid='stAlert']").all_inner_texts() if "Answer:" in t]
            verdict = page.locator("[data-testid='stMain']").get_by_text(re.compile(r"^(Right!|Not quite)")).first
            shown["revealed"] = dict(picked=picked, alert=alert, verdict=verdict.inner_text(),
                                     size=page.evaluate(SIZE_JS),
                                     exceptions=page.locator("[data-testid='stException']").count())
            page.screenshot(path=str(SHOTS / f"lesson2_step{k:02d}_revealed.png"))
        steps.append(shown)
        if k < n:
            blur(page)
            press_and_wait(page, "ArrowRight", counter(page))
    yield steps, errors
    page.close()


def test_lesson_two_every_step_on_a_projector(lesson_two):
    """Each step in turn with →, from its top, with no exception; every step has its own title."""
    steps, errors = lesson_two
    n = steps[0]["n"]
    assert n == len(steps) >= 10
    for s in steps:
        assert s["counter"].startswith(f"Step {s['k']} of {n}"), s["counter"]
        assert s["exceptions"] == 0 and s.get("revealed", {}).get("exceptions", 0) == 0, s["k"]
        assert s["size"]["scrolled"] < 5, (s["k"], s["size"])  # a new step starts at its top
    assert len({s["title"] for s in steps}) == n
    assert [s["k"] for s in steps if "revealed" in s] == [6], "lesson 2 asks one question, on step 6"
    assert not errors, errors


def _most_attended_by_hand():
    """The answer to lesson 2's question, worked out here: the lesson file's layer, head and query position (read
    with tomllib), the model the page opens on (a shipped checkpoint, which reads its own example sentence), its
    attention weights caught by a torch forward hook in a plain forward pass, and the row's argmax.
    Returns (the answer as the choices write it, "position: 'token'"; the weight on it)."""
    from gptviz.model.checkpoint import load_checkpoint
    from gptviz.present import page_context

    spec = tomllib.loads((ROOT / "lessons" / f"{LESSON}.toml").read_text(encoding="utf-8"))
    layer, head = spec["settings"]["layer"], spec["settings"]["head"]
    (question,) = [s["question"] for s in spec["steps"] if "question" in s]
    assert question["kind"] == "most_attended"
    preset = page_context.default_preset()
    assert preset.startswith(page_context.CKPT_PREFIX), preset
    ck = load_checkpoint(ROOT / "checkpoints" / f"{preset[len(page_context.CKPT_PREFIX):]}.safetensors")
    model, tok = ck.model.eval(), ck.tokenizer
    ids = tok.encode(ck.meta["example"])
    caught = []
    hook = model.transformer.h[layer].attn.hook_pattern.register_forward_hook(
        lambda _m, _i, out: caught.append(out.detach().double().numpy()))
    try:
        with torch.no_grad():
            model(torch.tensor([ids]))
    finally:
        hook.remove()
    q = question.get("query", -1) % len(ids)
    row = caught[0][0, head, q, : q + 1]
    assert np.isclose(row.sum(), 1.0)
    ans = int(np.argmax(row))
    return f"{ans}: '{tok.token_str(ids[ans])}'", ans, tok.token_str(ids[ans]), float(row[ans])


def test_the_revealed_answer_is_the_live_models_own(lesson_two):
    """The answer the page reveals (and its verdict on the class's pick) is the argmax worked out by hand."""
    steps, _ = lesson_two
    (revealed,) = [s["revealed"] for s in steps if "revealed" in s]
    answer, pos, token, weight = _most_attended_by_hand()
    (alert,) = revealed["alert"]
    lines = [x.strip() for x in alert.splitlines() if x.strip()]
    assert f"Answer: {answer}" in lines, lines
    assert f"puts {weight:.2f} on position {pos} ('{token}')" in alert, alert
    verdict = "Right!" if revealed["picked"] == answer else f"Not quite: the answer is {answer}."
    assert revealed["verdict"].startswith(verdict), (revealed["picked"], revealed["verdict"])


def test_every_step_fits_a_projector_screen(lesson_two):
    """One step per screen, as presenter mode promises: the main block's content is no taller than the 720-pixel
    viewport, for every step and for the revealed answer."""
    steps, _ = lesson_two
    sizes = [(s["k"], s["size"]) for s in steps] + [(f"{s['k']} revealed", s["revealed"]["size"])
                                                    for s in steps if "revealed" in s]
    assert all(size["screen"] == PROJECTOR["height"] for _, size in sizes)
    over = {k: size["content"] - size["screen"] for k, size in sizes if size["content"] > size["screen"]}
    assert not over, f"steps taller than the screen (by pixels): {over}"
    # and what the step is about is on it: every chart whole on the screen (not cut by the screen or its panel)
    assert sum(len(size["charts_seen"]) for _, size in sizes) >= len(steps)
    cut = {k: size["charts_seen"] for k, size in sizes if not all(size["charts_seen"])}
    assert not cut, f"charts cut off: {cut}"


def test_the_revealed_answer_is_on_the_screen(lesson_two):
    """After Reveal, in presenter mode, the answer is in view without scrolling."""
    steps, _ = lesson_two
    (revealed,) = [s["revealed"] for s in steps if "revealed" in s]
    assert revealed["size"]["answer_seen"] == [True], revealed["size"]
