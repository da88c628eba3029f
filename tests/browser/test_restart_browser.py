"""A server restart, as a class lives it: the server stops mid-lesson and comes back on the same address; a
student who reloads the page is back on the same view (page, layer, head and the text they typed), read from the
address bar alone: the new server process has no session state of the old one.

This module starts and stops its own ``streamlit run app.py`` (not the shared fixture), on one local port.
"""
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import pytest

pytestmark = pytest.mark.browser

from kit import ROOT, SHOTS, browser, require_browser, wait_for_charts  # noqa: F401 - the fixtures, imported

TYPED = "the class reads this line again"


def _start(port: int) -> subprocess.Popen:
    """``streamlit run app.py`` on 127.0.0.1:``port``, once its health check answers (90 s at most)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port), "--server.headless", "true",
         "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 90
    while time.time() < deadline:
        try:
            if urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2).status == 200:
                return proc
        except OSError:
            time.sleep(0.1)  # the health check's poll interval
        if proc.poll() is not None:
            break
    _stop(proc)
    pytest.fail(f"streamlit did not start on port {port}")


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


def _view(page) -> dict:
    """What the student sees: the page's heading, the sidebar's text, and every chart's title."""
    return {"h1": page.locator("h1").first.inner_text(),
            "text": page.locator("[data-testid='stSidebar'] textarea").first.input_value(),
            "titles": page.evaluate("() => [...document.querySelectorAll('.js-plotly-plot .gtitle')]"
                                    ".map(t => t.textContent)"),
            "exceptions": page.locator("[data-testid='stException']").count()}


def test_a_reloaded_page_returns_to_its_view_after_a_server_restart(browser):
    require_browser()
    from kit import _free_port

    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    proc = _start(port)
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    try:
        page.goto(f"{url}/Attention?layer=2&head=3&text=hello%20world")
        wait_for_charts(page)
        # the student types a new text: the app writes it into the address bar
        area = page.locator("[data-testid='stSidebar'] textarea").first
        area.fill(TYPED)
        area.press("Control+Enter")
        page.wait_for_function("(t) => new URLSearchParams(location.search).get('text') === t", arg=TYPED,
                               timeout=60_000)
        wait_for_charts(page)
        before, address = _view(page), page.url
        assert before["exceptions"] == 0 and before["text"] == TYPED
        assert "layer 2" in before["h1"], before
        assert any("head 3" in t for t in before["titles"]), before
        query = urllib.parse.parse_qs(urllib.parse.urlparse(address).query)
        assert query["layer"] == ["2"] and query["head"] == ["3"] and query["text"] == [TYPED], address

        _stop(proc)  # the server goes away mid-lesson
        with pytest.raises(OSError):
            urllib.request.urlopen(f"{url}/_stcore/health", timeout=2)
        proc = _start(port)  # a new process on the same address: no session of the old one survives
        page.reload()
        wait_for_charts(page)
        # a new process works out the head detector's probe first: its grid may come a moment after the pattern
        page.wait_for_function("(n) => document.querySelectorAll('.js-plotly-plot .gtitle').length >= n",
                               arg=len(before["titles"]), timeout=90_000, polling=100)
        wait_for_charts(page)
        after = _view(page)
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / "after_restart.png"))
        assert page.url == address
        assert after == before, (before, after)
    finally:
        page.close()
        _stop(proc)
