"""A browser tab behind a load balancer: cookies, XSRF, the page's timed fragments, uploads, and reconnecting.

``LiveSession`` is a ``protocol.Session`` that also does what the browser does around the websocket:

- before the websocket, an HTTP GET of ``/_stcore/health`` (as the page load does), keeping the cookies it sets:
  HAProxy's sticky cookie (which replica this tab is pinned to) and Streamlit's ``_streamlit_xsrf``; the websocket
  then carries them, and the XSRF token and the previous session's id go in its subprotocol list as the frontend
  sends them (``streamlit, <xsrf>, <session id>``: the same process gives the old session back);
- it keeps the page's timed fragments (``auto_rerun``: a fragment id and its interval; ``st.fragment(run_every=)``)
  and forgets them when a full run starts (the frontend does the same: each run registers its own);
- ``upload(data)`` PUTs a small file to ``/_stcore/upload_file/<session id>/<file id>`` with the cookies, as a
  file uploader would: only the process holding the session accepts it (the point of sticky sessions);
- ``reconnect()`` after the connection dropped: health check until it answers (HAProxy sends a dead replica's
  tab to a live one and rewrites the cookie), then a new websocket naming the old session id.

The HTTP calls are blocking (``urllib``) and run in a thread, so many sessions share one event loop.
"""
from __future__ import annotations

import asyncio
import time
import urllib.error
import urllib.request
import uuid

from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

from tools.load.protocol import MAX_MESSAGE_BYTES, Session

HEALTH_PATH = "/_stcore/health"
UPLOAD_PATH = "/_stcore/upload_file"
XSRF_COOKIE = "_streamlit_xsrf"


class LiveSession(Session):
    """A ``Session`` with the browser's cookies, timed fragments, uploads and reconnection."""

    def __init__(self, url: str, **kw):
        super().__init__(url, **kw)
        self.http_base = url.rstrip("/")
        self.cookies: dict[str, str] = {}
        self.session_id = ""  # the server's id of this tab's session (new_session.initialize)
        self.auto_reruns: dict[str, float] = {}  # fragment id -> interval (s)
        self.connects = 0
        self.closed_at: float | None = None  # when the connection was seen to close

    # ----------------------------------------------------------------------------------------- HTTP
    def _http(self, method: str, path: str, body: bytes | None = None, headers: dict | None = None,
              timeout: float = 5.0) -> tuple[int, bytes]:
        """(status, body) of one request with this tab's cookies; keeps the cookies the answer sets."""
        req = urllib.request.Request(self.http_base + path, data=body, method=method, headers=dict(headers or {}))
        if self.cookies:
            req.add_header("Cookie", "; ".join(f"{k}={v}" for k, v in self.cookies.items()))
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                status, data, set_cookies = r.status, r.read(), r.headers.get_all("Set-Cookie") or []
        except urllib.error.HTTPError as e:
            status, data, set_cookies = e.code, e.read(), e.headers.get_all("Set-Cookie") or []
        for c in set_cookies:
            name, _, value = c.split(";", 1)[0].partition("=")
            self.cookies[name.strip()] = value.strip()
        return status, data

    async def health(self, timeout: float = 5.0) -> bool:
        try:
            status, _ = await asyncio.to_thread(self._http, "GET", HEALTH_PATH, None, None, timeout)
        except OSError:
            return False
        return status == 200

    async def upload(self, data: bytes = b"a small upload", name: str = "notes.txt") -> tuple[int, str]:
        """PUT one file to this tab's session, as ``st.file_uploader`` does: (HTTP status, the answer's text)."""
        boundary = uuid.uuid4().hex
        body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\n"
                f"Content-Type: text/plain\r\n\r\n").encode() + data + f"\r\n--{boundary}--\r\n".encode()
        headers = {"Content-Type": f"multipart/form-data; boundary={boundary}",
                   "X-Xsrftoken": self.cookies.get(XSRF_COOKIE, "")}
        try:
            status, text = await asyncio.to_thread(self._http, "PUT", f"{UPLOAD_PATH}/{self.session_id}/"
                                                   f"{uuid.uuid4().hex}", body, headers)
        except OSError as exc:
            return 0, f"{type(exc).__name__}: {exc}"
        return status, text.decode(errors="replace")[:200]

    # ----------------------------------------------------------------------------------------- websocket
    async def connect(self) -> None:
        from websockets.asyncio.client import connect

        if not await self.health():
            raise ConnectionError(f"{self.http_base}{HEALTH_PATH} did not answer 200")
        protocols = ["streamlit", self.cookies.get(XSRF_COOKIE, "")] + ([self.session_id] if self.session_id else [])
        headers = {"Cookie": "; ".join(f"{k}={v}" for k, v in self.cookies.items())} if self.cookies else None
        self.closed_reason = ""
        self._ws = await connect(self.ws_url, subprotocols=protocols, origin=self.origin,
                                 additional_headers=headers, open_timeout=self.connect_timeout, ping_interval=None,
                                 max_size=MAX_MESSAGE_BYTES, max_queue=None, proxy=None)
        self.closed_at = None
        self._reader = asyncio.create_task(self._read_forever())
        self._reader.add_done_callback(lambda _: setattr(self, "closed_at", time.perf_counter()))
        self.connects += 1

    async def reconnect(self, *, retry_every: float = 0.25, give_up_after: float = 30.0) -> float:
        """After the connection dropped: retry until a new websocket is open (the seconds it took); raises
        ConnectionError after ``give_up_after`` seconds."""
        t0 = time.perf_counter()
        await self.close()
        last = ""
        while time.perf_counter() - t0 < give_up_after:
            try:
                await self.connect()
                return time.perf_counter() - t0
            except (OSError, ConnectionError, asyncio.TimeoutError) as exc:
                last = f"{type(exc).__name__}: {exc}"
            except Exception as exc:  # noqa: BLE001 - the websockets library's handshake errors: try again
                last = f"{type(exc).__name__}: {exc}"
            await asyncio.sleep(retry_every)
        raise ConnectionError(f"no connection within {give_up_after:g} s ({last})")

    @property
    def is_open(self) -> bool:
        return self._ws is not None and not self.closed_reason

    @property
    def replica(self) -> str:
        """The replica the balancer's cookie pins this tab to ("" without a balancer)."""
        return self.cookies.get("GPTVIZ_SRV", "")

    def handle(self, raw: ForwardMsg) -> None:
        super().handle(raw)
        kind = raw.WhichOneof("type")
        if kind == "new_session":
            if raw.new_session.initialize.session_id:
                self.session_id = raw.new_session.initialize.session_id
            if not raw.metadata.run.fragment_ids:  # a full run: its fragments register again
                self.auto_reruns.clear()
        elif kind == "auto_rerun":
            self.auto_reruns[raw.auto_rerun.fragment_id] = raw.auto_rerun.interval
        elif kind == "stop_auto_rerun":
            for fid in raw.stop_auto_rerun.fragment_ids:
                self.auto_reruns.pop(fid, None)
