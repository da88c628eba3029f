"""When a page counts as fully drawn, for a screenshot: Streamlit's run is over (no running indicator, nothing
stale, no skeleton, no spinner), every Plotly chart has drawn its SVG, every image and font has loaded, and the
layout has stopped moving. The same ideas as the browser tests' waits (tests/browser/kit.py), written for a tool."""
from __future__ import annotations

# The script's run is over and drawn: no "running" status widget, no element left stale from the last run, no
# skeleton (an element still loading), no spinner, and something in the main block.
SCRIPT_DONE_JS = """() => !document.querySelector('[data-testid="stStatusWidget"]')
    && !document.querySelector('[data-stale="true"], .stSkeleton, [data-testid="stSkeleton"], '
        + '[data-testid="stAppSkeleton"], [data-testid="stSpinner"]')
    && !!document.querySelector('[data-testid="stMain"] [data-testid="stElementContainer"]')"""

# Everything the screenshot shows has arrived: every chart's SVG, every image, every font.
LOADED_JS = """() => [...document.querySelectorAll('.js-plotly-plot')].every(g => g.querySelector('.main-svg'))
    && [...document.images].every(i => i.complete)
    && document.fonts.status === 'loaded'"""

# The layout's signature: the main block's height and scroll position, and every chart's box. "Still" once it has
# been the same for ``n`` polls in a row.
STILL_JS = """(n) => {
    const m = document.querySelector('[data-testid="stMain"]');
    const sig = JSON.stringify([m ? [m.scrollHeight, m.scrollTop] : null, document.scrollingElement.scrollTop,
        [...document.querySelectorAll('.js-plotly-plot')].map(g => { const r = g.getBoundingClientRect();
            return [r.top, r.left, r.width, r.height, !!g.querySelector('.main-svg')]; })]);
    const w = window.__shotStill || (window.__shotStill = {sig: null, n: 0});
    if (w.sig === sig) { w.n += 1; } else { w.sig = sig; w.n = 0; }
    return w.n >= n;
}"""

# What the page shows that a documentation picture must not: an exception, or an error box.
PROBLEMS_JS = """() => [...document.querySelectorAll(
    '[data-testid="stException"], [data-testid="stAlertContentError"]')].map(e => e.innerText.slice(0, 300))"""


class NotDrawn(Exception):
    """The page did not get fully drawn, or drew an error."""


def wait_for_script(page, timeout_ms: int = 180_000) -> None:
    """Until Streamlit's run is over and drawn; a moment between two states (no status widget yet, nothing stale
    yet) is not taken for the end: it must hold on three polls in a row."""
    page.evaluate("() => { window.__shotDone = 0; }")
    page.wait_for_function(f"() => (window.__shotDone = ({SCRIPT_DONE_JS})() ? window.__shotDone + 1 : 0) >= 3",
                           timeout=timeout_ms, polling=100)


def wait_until_drawn(page, *, chart: bool = True, timeout_ms: int = 180_000) -> None:
    """Until the page is fully drawn (see the module's docstring). ``chart``: the page shows a Plotly chart, so
    wait for one first (a run can look finished before its first chart has mounted). Raises NotDrawn on an error."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout  # here: --list needs no playwright

    if chart:
        try:
            page.wait_for_selector(".js-plotly-plot .main-svg", timeout=timeout_ms)
        except PlaywrightTimeout:
            raise NotDrawn(f"no Plotly chart drew within {timeout_ms / 1000:.0f} s (a view that opens on none: "
                           "declare it with chart=False in tools/screenshots/shots.py)") from None
    wait_for_script(page, timeout_ms)
    page.wait_for_function(LOADED_JS, timeout=timeout_ms, polling=100)
    page.evaluate("() => { window.__shotStill = null; }")
    page.wait_for_function(STILL_JS, arg=5, polling=100, timeout=timeout_ms)
    wait_for_script(page, timeout_ms)  # a chart's resize may have started one more run: over too
    problems = page.evaluate(PROBLEMS_JS)
    if problems:
        raise NotDrawn(f"the page shows an error: {problems[0]!r}")
