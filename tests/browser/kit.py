"""What every real-browser test needs: Debian's Chromium driven by Playwright, one `streamlit run app.py` per
test module (the fixtures ``server`` and ``browser``: a test module imports them), and small helpers.

On a developer's machine without a browser these tests are skipped. In CI (the CI variable set) they fail
instead: a skipped test still exits 0, and CI must not pass without having drawn a single page.
(Not a conftest.py: a second conftest module would shadow tests/conftest.py for ``from conftest import``.)
"""
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "tests" / "screenshots"
CHROMIUM = os.environ.get("GPTVIZ_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--no-first-run"]


def unavailable() -> str:
    """Why the browser tests cannot run here, or ""."""
    try:
        import playwright.sync_api  # noqa: F401 - only whether it imports
    except ImportError:
        return "the playwright package is not installed (pip install -r requirements-dev.txt)"
    if not os.path.exists(CHROMIUM):
        return f"Debian's chromium is not installed at {CHROMIUM} (apt-get install -y chromium)"
    return ""


def require_browser() -> None:
    """Skip (or, in CI, fail) the test when there is no browser to drive."""
    why = unavailable()
    if why:
        if os.environ.get("CI"):
            pytest.fail(f"CI is set, but {why}: the browser tests cannot run", pytrace=False)
        pytest.skip(why)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server():
    require_browser()
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port), "--server.headless", "true",
         "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=os.environ.copy(),
    )
    os.environ["GPTVIZ_SERVER_PID"] = str(proc.pid)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 90
    while time.time() < deadline:
        try:
            if urllib.request.urlopen(url + "/_stcore/health", timeout=2).status == 200:
                break
        except OSError:
            time.sleep(0.1)  # the health check's poll interval: the loop waits for the server to answer
    else:
        proc.kill()
        pytest.fail("streamlit did not start: " + proc.stdout.read().decode(errors="replace")[-2000:])
    yield url
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture(scope="module")
def browser():
    require_browser()
    from playwright import sync_api

    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield SharedCache(b)
        b.close()


class SharedCache:
    """The browser, whose ``new_page`` opens pages in one shared context, so that a module's pages share the HTTP
    cache (Streamlit's and plotly.js's bundles are fetched and compiled once, not once a page)."""

    def __init__(self, browser):
        self._browser = browser
        self._context = None

    def new_page(self, viewport=None, **kw):
        if kw:
            return self._browser.new_page(viewport=viewport, **kw)
        if self._context is None:
            self._context = self._browser.new_context()
        page = self._context.new_page()
        if viewport:
            page.set_viewport_size(viewport)
        return page

    def __getattr__(self, name):
        return getattr(self._browser, name)


# The script's run is over and drawn: no "running" status widget, no element left stale from the last run, no
# skeleton (the placeholder of an element still loading: Streamlit 1.67 marks it data-testid="stSkeleton"; a lesson
# step measured with its chart and buttons still skeletons was 40 px too tall once, under load), and something in the
# main block.
SCRIPT_DONE_JS = """() => !document.querySelector('[data-testid="stStatusWidget"]')
    && !document.querySelector(
        '[data-stale="true"], .stSkeleton, [data-testid="stSkeleton"], [data-testid="stAppSkeleton"]')
    && !!document.querySelector('[data-testid="stMain"] [data-testid="stElementContainer"]')"""
EVERY_CHART_DRAWN_JS = ("() => [...document.querySelectorAll('.js-plotly-plot')]"
                        ".every(g => g.querySelector('.main-svg'))")

# The layout's signature: the main block's height and scroll position, the page's scroll position, and every
# chart's box and whether it has drawn. "Still" once it has been the same for ``n`` polls in a row.
STILL_JS = """(n) => {
    const m = document.querySelector('[data-testid="stMain"]');
    const sig = JSON.stringify([m ? [m.scrollHeight, m.scrollTop] : null, document.scrollingElement.scrollTop,
        [...document.querySelectorAll('.js-plotly-plot')].map(g => { const r = g.getBoundingClientRect();
            return [r.top, r.left, r.width, r.height, !!g.querySelector('.main-svg')]; })]);
    const w = window.__gptvizStill || (window.__gptvizStill = {sig: null, n: 0});
    if (w.sig === sig) { w.n += 1; } else { w.sig = sig; w.n = 0; }
    return w.n >= n;
}"""


def wait_for_script(page, timeout=90_000):
    """Until Streamlit's script run is over and drawn (``SCRIPT_DONE_JS``). A moment between two states (no
    status widget yet, nothing stale yet) is not taken for the end: it must hold on three polls in a row."""
    page.evaluate("() => { window.__gptvizDone = 0; }")
    page.wait_for_function(f"() => (window.__gptvizDone = ({SCRIPT_DONE_JS})() ? window.__gptvizDone + 1 : 0) >= 3",
                           timeout=timeout, polling=100)


def wait_until_still(page, timeout=30_000, polls=3, every_ms=50):
    """Until the layout stops moving (a chart resizing to its column, a scroll, a late element): the same
    signature ``polls`` times ``every_ms`` apart."""
    page.evaluate("() => { window.__gptvizStill = null; }")
    page.wait_for_function(STILL_JS, arg=polls, polling=every_ms, timeout=timeout)


def wait_for_charts(page, timeout=90_000):
    """Until a chart has drawn, Streamlit's script has finished, every chart has drawn and the layout is still."""
    page.wait_for_selector(".js-plotly-plot .main-svg", timeout=timeout)
    wait_for_script(page, timeout)
    page.wait_for_function(EVERY_CHART_DRAWN_JS, timeout=timeout, polling=50)
    wait_until_still(page, timeout)


NAV_JS = """() => {
  const nav = document.querySelector('[data-testid="stSidebarNav"]');
  return {text: nav ? nav.innerText : '',
          links: [...document.querySelectorAll('[data-testid="stSidebarNavLink"]')].map(a => a.innerText.trim())};
}"""
NAV_SECTIONS = ("Start", "The forward pass", "Explain a prediction", "Learning", "Models")


def check_page_title_and_navigation(page, address: str, title: str, timeout=60_000) -> None:
    """The tab's title is the page's (``title · gptviz``), and the sidebar's navigation is the grouped one: every
    section, and no bare "app" entry (what an address that Streamlit's old ``pages/`` folder gave must still open)."""
    page.wait_for_function(f"() => document.title.startsWith({title!r} + ' · gptviz')", timeout=timeout)
    page.wait_for_selector('[data-testid="stSidebarNavLink"]', timeout=30_000)
    nav = page.evaluate(NAV_JS)
    links = [line.split("\n")[-1] for line in nav["links"]]
    assert "app" not in links, (address, nav)
    for section in NAV_SECTIONS:
        assert section in nav["text"], (address, section, nav)
