"""Take the shots: one ``streamlit run app.py`` on a free local port, one headless Chromium, each shot in a fresh
browser context at 1280×720; the server is stopped whatever happens."""
from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

from tools.bench.server import start_server, stop_server
from tools.screenshots.drawn import NotDrawn, wait_until_drawn
from tools.screenshots.shots import ROOT, Shot

CHROMIUM = os.environ.get("GPTVIZ_CHROMIUM") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]
VIEWPORT = {"width": 1280, "height": 720}
TIMEOUT_MS = 180_000


def _has_cjk_font() -> bool:
    """Whether Chromium can draw Chinese characters (fontconfig knows a font for them), not boxes."""
    if not shutil.which("fc-list"):
        return False
    out = subprocess.run(["fc-list", ":lang=zh", "family"], capture_output=True, text=True).stdout
    return bool(out.strip())


NEEDS = {"cjk_font": (_has_cjk_font, "no Chinese font is installed (apt-get install -y fonts-noto-cjk): the "
                                     "characters would be drawn as boxes")}


def missing(shot: Shot) -> str:
    """What this machine lacks for ``shot``'s picture to be honest, or ""."""
    for need in shot.needs:
        check, why = NEEDS[need]
        if not check():
            return why
    return ""


def take(browser, url: str, shot: Shot, out: Path) -> list[str]:
    """Open ``shot`` in a fresh context, wait until it is drawn, act, and save ``out/<name>.png``. Returns the
    page's JavaScript errors (the picture is still taken); raises on a page that did not draw."""
    errors: list[str] = []
    context = browser.new_context(viewport=VIEWPORT, device_scale_factor=1)
    try:
        page = context.new_page()
        page.on("pageerror", lambda e: errors.append(str(e)[:300]))
        page.goto(f"{url}/{shot.address}", wait_until="domcontentloaded", timeout=TIMEOUT_MS)
        wait_until_drawn(page, chart=shot.chart, timeout_ms=TIMEOUT_MS)
        if shot.act is not None:
            shot.act(page, browser, url)
            wait_until_drawn(page, chart=shot.chart, timeout_ms=TIMEOUT_MS)
        page.mouse.move(VIEWPORT["width"] - 1, VIEWPORT["height"] - 1)  # no hover label left on a chart
        page.wait_for_timeout(300)
        out.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(out / f"{shot.name}.png"), full_page=False, animations="disabled")
    finally:
        for other in list(browser.contexts):  # this shot's context and any its action opened
            other.close()
    return errors


def take_all(shots: list[Shot], out: Path, log=print) -> int:
    """Take every shot in ``shots``; 0 when every picture was saved, 1 otherwise (each failure is logged)."""
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import sync_playwright

    if not os.path.exists(CHROMIUM):
        log(f"chromium is not installed at {CHROMIUM} (apt-get install -y chromium)")
        return 1
    failed = []
    t_start = time.perf_counter()
    proc, url = start_server(Path("app.py"), ROOT)  # `python -m streamlit run app.py` from the repository's root
    log(f"streamlit run app.py at {url} (started in {time.perf_counter() - t_start:.1f} s)")
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                for shot in shots:
                    why = missing(shot)
                    if why:
                        failed.append(shot.name)
                        log(f"  {shot.name}: NOT TAKEN: {why}")
                        continue
                    t0 = time.perf_counter()
                    try:
                        errors = take(browser, url, shot, out)
                    except (NotDrawn, PlaywrightError, RuntimeError) as exc:
                        failed.append(shot.name)
                        log(f"  {shot.name}: FAILED after {time.perf_counter() - t0:.1f} s: "
                            f"{str(exc).splitlines()[0][:300]}")
                        continue
                    note = f" (JavaScript errors on the page: {errors[0]})" if errors else ""
                    log(f"  {shot.name}.png  {time.perf_counter() - t0:5.1f} s  {shot.about}{note}")
            finally:
                browser.close()
    finally:
        stop_server(proc)
    log(f"{len(shots) - len(failed)} of {len(shots)} pictures saved in {out} in {time.perf_counter() - t_start:.0f} s"
        + (f"; not taken: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0
