"""A shared link opened on a freshly started server: the first visit ever is to a page's own address.

Streamlit starts in its old pages/ mode while no session has run app.py, and then runs the page file alone
with the plain list of files (and "app") as navigation. The page must still come up inside the app's own
grouped navigation. This module's server is its own (the fixture is per module), and this is its first visit.
"""
import pytest

pytestmark = pytest.mark.browser

from kit import SHOTS, browser, server, wait_for_charts  # noqa: E402,F401 - the fixtures, imported

NAV_JS = """() => {
  const nav = document.querySelector('[data-testid="stSidebarNav"]');
  return {text: nav ? nav.innerText : '',
          links: [...document.querySelectorAll('[data-testid="stSidebarNavLink"]')].map(a => a.innerText.trim())};
}"""


def test_first_visit_to_a_page_address_shows_the_grouped_navigation(server, browser):
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    try:
        page.goto(f"{server}/Attention?preset=default", wait_until="domcontentloaded")
        wait_for_charts(page)
        page.wait_for_selector('[data-testid="stSidebarNavLink"]', timeout=30_000)
        nav = page.evaluate(NAV_JS)
        SHOTS.mkdir(exist_ok=True)
        page.screenshot(path=str(SHOTS / "fresh_server_attention.png"))
        links = [l.split("\n")[-1] for l in nav["links"]]
        assert "app" not in links, nav
        for section in ("Start", "The forward pass", "Explain a prediction", "Learning", "Models"):
            assert section in nav["text"], (section, nav)
        assert "Attention" in links and "Home" in links, links
        title = page.locator("h1").first.inner_text()
        assert title.startswith("Attention"), title
    finally:
        page.close()
