"""Small helpers the real-browser tests share (the fixtures are in this folder's conftest.py)."""
from pathlib import Path

SHOTS = Path(__file__).resolve().parents[1] / "screenshots"
ROOT = SHOTS.parents[1]


def wait_for_charts(page, timeout=90_000):
    """Until a chart has drawn and Streamlit's script has finished."""
    page.wait_for_selector(".js-plotly-plot .main-svg", timeout=timeout)
    # let the script finish: Streamlit shows a "running" status widget while it works
    page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=timeout)
    page.wait_for_timeout(500)
