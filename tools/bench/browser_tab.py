"""One headless-Chromium tab on a running Streamlit app: time a text edit until the page is fully redrawn."""
from __future__ import annotations

import time
from typing import Optional

from tools.bench.models import shown_model
from tools.bench.report import BenchFailure

# Installed in every page before Streamlit loads: timestamps (page clock) of every message on Streamlit's
# stream, of the Ctrl+Enter that commits an edit (or the arrow key that moves a slider), and of the last change
# anywhere in the DOM.
INIT_JS = """
window.__ws = []; window.__mut = performance.now(); window.__t0 = null;
const __W = window.WebSocket;
window.WebSocket = function (u, p) {
  const ws = p === undefined ? new __W(u) : new __W(u, p);
  if (String(u).includes('_stcore/stream')) ws.addEventListener('message', () => window.__ws.push(performance.now()));
  return ws;
};
window.WebSocket.prototype = __W.prototype;
Object.assign(window.WebSocket, __W);
document.addEventListener('keydown', e => {
  if ((e.key === 'Enter' && (e.ctrlKey || e.metaKey)) || e.key === 'ArrowLeft' || e.key === 'ArrowRight')
    window.__t0 = performance.now();
}, true);
new MutationObserver(() => { window.__mut = performance.now(); })
  .observe(document, {subtree: true, childList: true, attributes: true, characterData: true});
"""

STATE_JS = """() => {
  const plots = [...document.querySelectorAll('.js-plotly-plot')];
  const visible = plots.filter(p => p.offsetParent !== null);
  const texts = sel => [...document.querySelectorAll(sel)].map(e => e.innerText.slice(0, 200));
  const sb = document.querySelector('[data-testid="stSidebar"]');
  return {now: performance.now(), mut: window.__mut, t0: window.__t0, ws: window.__ws.length,
          charts: plots.length, visible: visible.length,
          undrawn: visible.filter(p => !p.querySelector('.main-svg')).length,
          stale: document.querySelectorAll('[data-stale="true"]').length,
          status: !!document.querySelector('[data-testid="stStatusWidget"]'),
          exceptions: texts('[data-testid="stException"]'), errors: texts('[data-testid="stAlertContentError"]'),
          warnings: texts('[data-testid="stAlertContentWarning"]'), sidebar: sb ? sb.innerText : ''};
}"""
QUIET_MS = 1000


class Tab:
    """One browser page on one app, with Streamlit's stream messages decoded on the Python side."""

    def __init__(self, browser, url: str, expect: Optional[tuple[int, int]] = None):
        from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

        self.ctx = browser.new_context(viewport={"width": 1400, "height": 900})
        self.page = self.ctx.new_page()
        self.page.add_init_script(INIT_JS)
        self.expect = expect  # (vocab_size, parameters) the sidebar must show, or None
        self.frames: list[str] = []
        self.errors: list[str] = []
        self.page.on("pageerror", lambda e: self.errors.append(str(e)[:200]))

        def on_ws(ws):
            if "_stcore/stream" in ws.url:
                def received(payload):
                    m = ForwardMsg()
                    m.ParseFromString(payload if isinstance(payload, bytes) else payload.encode())
                    self.frames.append(m.WhichOneof("type") or "")

                ws.on("framereceived", received)

        self.page.on("websocket", on_ws)
        self.page.goto(url, wait_until="domcontentloaded")
        self.settle(0, "opening the page")

    def close(self) -> None:
        self.ctx.close()

    def settle(self, since: int, when: str, timeout_s: float = 180) -> tuple[float, float, int]:
        """Wait for the run started after frame ``since`` to finish and the page to be fully redrawn. Returns
        (edit → redrawn ms, edit → script_finished ms, charts), from the page's own clock."""
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            self.page.wait_for_timeout(50)
            fin = [j for j in range(since, len(self.frames)) if self.frames[j] == "script_finished"]
            if not fin:
                continue
            s = self.page.evaluate(STATE_JS)
            self._check(s, when)
            ready = s["visible"] >= 1 and s["undrawn"] == 0 and s["stale"] == 0 and not s["status"]
            if ready and s["now"] - s["mut"] >= QUIET_MS and s["ws"] == len(self.frames):
                t_fin = self.page.evaluate(f"window.__ws[{fin[-1]}]")
                if s["t0"] is None:  # opening the page: no edit to time from
                    return float("nan"), float("nan"), s["charts"]
                return max(t_fin, s["mut"]) - s["t0"], t_fin - s["t0"], s["charts"]
        raise BenchFailure(f"{when}: the page was not fully redrawn within {timeout_s:.0f} s")

    def _check(self, s: dict, when: str) -> None:
        for kind in ("exceptions", "errors", "warnings"):
            if s[kind]:
                raise BenchFailure(f"{when}: the page shows {kind[:-1]}: {s[kind][0]!r}")
        if self.errors:
            raise BenchFailure(f"{when}: JavaScript error: {self.errors[0]}")
        if self.expect is not None:
            got = shown_model(s["sidebar"])
            if got != self.expect:
                raise BenchFailure(f"{when}: the sidebar shows {got and f'vocab_size {got[0]:,}, {got[1]:,} params'}"
                                   f", not vocab_size {self.expect[0]:,}, {self.expect[1]:,} params")

    def edit(self, text: str, when: str) -> tuple[float, float, int]:
        self.page.evaluate("window.__t0 = null")
        area = self.page.locator("[data-testid='stSidebar'] textarea").first
        area.fill(text)
        since = len(self.frames)
        area.press("Control+Enter")
        t = self.settle(since, when)
        if t[0] != t[0]:
            raise BenchFailure(f"{when}: the Ctrl+Enter that commits the edit was not seen by the page")
        if area.input_value() != text:
            raise BenchFailure(f"{when}: the text area does not hold the text typed")
        return t

    def nudge(self, label: str, key: str, when: str) -> tuple[float, float, int]:
        """Press ``key`` (ArrowLeft or ArrowRight) on the slider labelled ``label``: a view change, timed like an
        edit from the key press to the page fully redrawn."""
        self.page.evaluate("window.__t0 = null")
        thumb = self.page.locator(f'[data-testid="stSlider"] input[type="range"][aria-label="{label}"]').first
        thumb.focus()  # the slider's own (visually hidden) range input
        since = len(self.frames)
        self.page.keyboard.press(key)
        t = self.settle(since, when)
        if t[0] != t[0]:
            raise BenchFailure(f"{when}: the key press on the {label!r} slider was not seen by the page")
        return t

    def nav_links(self) -> dict[str, str]:
        """{link label: href} of the sidebar navigation (the label is the link's last line: an icon may come first)."""
        return self.page.evaluate("""() => Object.fromEntries([...document.querySelectorAll(
            '[data-testid="stSidebarNav"] a, [data-testid="stSidebarNavLink"]')].map(a => [
              a.innerText.trim().split('\\n').filter(l => l.trim()).pop() || '', a.href]))""")
