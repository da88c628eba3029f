"""Links shared before the page files moved to app_pages/ still open their pages, on a freshly started server.

The addresses below are the ones Streamlit's old ``pages/`` folder gave (``pages/3_Attention.py`` ->
``/Attention``), written out here rather than read from the navigation list, so a renamed ``url_path`` fails.
This module's server is its own (the fixture is per module), so the first visit is a fresh server's first visit.
"""
import pytest

pytestmark = pytest.mark.browser

from kit import SHOTS, browser, check_page_title_and_navigation, server, wait_for_charts  # noqa: F401

# Each page's own address (``/Attention``, ``/`` ...) is opened by tests/browser/test_browser.py's
# test_every_page_draws_its_charts, which checks its title and the grouped navigation too (its PAGES and TITLES are
# written out as well). Here: the addresses that test does not open, on a server whose first visit is one of them.
OLD_ADDRESSES = [  # (address, the page's title)
    ("Attention?preset=default", "Attention"),  # first: a fresh server's first visit is to a page's own address
    ("Lessons", "Lessons"),
    ("Who_did_it?preset=checkpoint:%20shakespeare", "Who did it"),
]

# the addresses whose whole run is waited for and checked for an exception: a fresh server's first visit and a
# shared link to a checkpoint; for the bare Lessons address the title and the navigation are what it must give
WHOLE_RUN = {OLD_ADDRESSES[0][0], "Who_did_it?preset=checkpoint:%20shakespeare"}


def test_every_old_page_address_opens_its_page_in_the_grouped_navigation(server, browser):
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        for address, title in OLD_ADDRESSES:
            page.goto(f"{server}/{address}", wait_until="domcontentloaded")
            check_page_title_and_navigation(page, address, title)
            if address in WHOLE_RUN:  # the run is over (every page's own run is checked by test_browser.py)
                page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')",
                                       timeout=90_000)
            assert page.locator("[data-testid='stException']").count() == 0, address
            if address.startswith("Attention"):
                wait_for_charts(page)
                SHOTS.mkdir(exist_ok=True)
                page.screenshot(path=str(SHOTS / "old_address_attention.png"))
        assert not errors, errors
    finally:
        page.close()
