"""Links shared before the page files moved to app_pages/ still open their pages, on a freshly started server.

The addresses below are the ones Streamlit's old ``pages/`` folder gave (``pages/3_Attention.py`` ->
``/Attention``), written out here rather than read from the navigation list, so a renamed ``url_path`` fails.
This module's server is its own (the fixture is per module), so the first visit is a fresh server's first visit.
"""
import pytest

pytestmark = pytest.mark.browser

from kit import SHOTS, browser, server, wait_for_charts  # noqa: F401 - the fixtures, imported

OLD_ADDRESSES = [  # (address, the page's title)
    ("Attention?preset=default", "Attention"),  # first: a fresh server's first visit is to a page's own address
    ("", "Home"),
    ("Lessons", "Lessons"),
    ("Tokens_and_batch", "Tokens & batch"),
    ("Embeddings", "Embeddings"),
    ("MLP_and_residual", "MLP & residual stream"),
    ("Logits_and_loss", "Logits & loss"),
    ("Step_through", "Step-through"),
    ("Who_did_it", "Who did it"),
    ("Generation", "Generation"),
    ("Backward", "Backward pass"),
    ("Training", "Training"),
    ("Initialisation", "Initialisation"),
    ("Model_and_weights", "Model & weights"),
    ("Who_did_it?preset=checkpoint:%20shakespeare", "Who did it"),
]

# the addresses whose whole run is waited for and checked for an exception: a fresh server's first visit, Home, and
# a shared link to a checkpoint; for the others the title and the navigation are what an old address must give
WHOLE_RUN = {OLD_ADDRESSES[0][0], "", "Who_did_it?preset=checkpoint:%20shakespeare"}

NAV_JS = """() => {
  const nav = document.querySelector('[data-testid="stSidebarNav"]');
  return {text: nav ? nav.innerText : '',
          links: [...document.querySelectorAll('[data-testid="stSidebarNavLink"]')].map(a => a.innerText.trim())};
}"""


def test_every_old_page_address_opens_its_page_in_the_grouped_navigation(server, browser):
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        for address, title in OLD_ADDRESSES:
            page.goto(f"{server}/{address}", wait_until="domcontentloaded")
            page.wait_for_function(f"() => document.title.startsWith({title!r} + ' · gptviz')", timeout=60_000)
            page.wait_for_selector('[data-testid="stSidebarNavLink"]', timeout=30_000)
            if address in WHOLE_RUN:  # the run is over (every page's own run is checked by test_browser.py)
                page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')",
                                       timeout=90_000)
            nav = page.evaluate(NAV_JS)
            links = [line.split("\n")[-1] for line in nav["links"]]
            assert "app" not in links, (address, nav)
            for section in ("Start", "The forward pass", "Explain a prediction", "Learning", "Models"):
                assert section in nav["text"], (address, section, nav)
            assert page.locator("[data-testid='stException']").count() == 0, address
            if address.startswith("Attention"):
                wait_for_charts(page)
                SHOTS.mkdir(exist_ok=True)
                page.screenshot(path=str(SHOTS / "old_address_attention.png"))
        assert not errors, errors
    finally:
        page.close()
