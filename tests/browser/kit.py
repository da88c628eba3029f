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
            time.sleep(0.5)
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
        yield b
        b.close()


def wait_for_charts(page, timeout=90_000):
    """Until a chart has drawn and Streamlit's script has finished."""
    page.wait_for_selector(".js-plotly-plot .main-svg", timeout=timeout)
    # let the script finish: Streamlit shows a "running" status widget while it works
    page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=timeout)
    page.wait_for_timeout(500)
