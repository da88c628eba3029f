"""One browser tab, spoken over Streamlit's own websocket protocol: connect, ask for runs, read what comes back.

The client opens ``/_stcore/stream`` with the subprotocol ``streamlit`` (as the frontend does), sends
``BackMsg.rerun_script`` with a ``ClientState`` (query string, page, widget states, the hashes of the messages it
has cached) and reads ``ForwardMsg``s. A message the server sends *by reference* (``ref_hash``, because the client
said it has it) is replaced by the cached copy, keeping the reference's own metadata (its place on the page). A
reference to a message the client never had is a protocol error, recorded in ``protocol_errors``.

A run starts with ``new_session`` and ends with a ``script_finished`` whose status is final
(``FINISHED_EARLY_FOR_RERUN`` is not: a new run follows). ``rerun`` waits for that end and returns a ``Run``:
its elements in arrival order, with their delta paths, and the times it was sent and finished.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from streamlit.proto.WidgetStates_pb2 import WidgetStates

STREAM_PATH = "/_stcore/stream"
FINAL_STATUSES = {ForwardMsg.FINISHED_SUCCESSFULLY, ForwardMsg.FINISHED_WITH_COMPILE_ERROR,
                  ForwardMsg.FINISHED_FRAGMENT_RUN_SUCCESSFULLY}
STATUS_NAMES = {v: k for k, v in ForwardMsg.ScriptFinishedStatus.items()}
MAX_MESSAGE_BYTES = 512 * 2**20  # a plotly figure can be a few MB; the server's own limit is 200 MB


@dataclass
class Run:
    """What one rerun request got back (or the first run of a session, which the first request starts)."""

    sent_at: float  # time.perf_counter() when the request was sent
    finished_at: float | None = None
    status: str = ""  # the name of the final ScriptFinishedStatus
    elements: list[tuple[tuple[int, ...], object]] = field(default_factory=list)  # (delta path, Element)
    compile_errors: list[str] = field(default_factory=list)  # session_event.script_compilation_exception
    page_not_found: bool = False
    restarts: int = 0  # new_session messages seen (more than one: the run was restarted, e.g. by st.rerun())

    @property
    def seconds(self) -> float | None:
        return None if self.finished_at is None else self.finished_at - self.sent_at


@dataclass
class AppPage:
    """One page of the app's navigation, as the server listed it."""

    script_hash: str
    url_pathname: str
    name: str


class Session:
    """One websocket session with a Streamlit server (``async with Session(url) as s``)."""

    def __init__(self, url: str, *, tell_cached: bool = True, connect_timeout: float = 30.0):
        parts = urlsplit(url)
        scheme = "wss" if parts.scheme == "https" else "ws"
        self.ws_url = f"{scheme}://{parts.netloc}{parts.path.rstrip('/')}{STREAM_PATH}"
        self.origin = f"{parts.scheme}://{parts.netloc}"
        self.tell_cached = tell_cached
        self.connect_timeout = connect_timeout
        self.query_string = ""  # the address bar's query, as page_info_changed last set it
        self.page_script_hash = ""  # the page shown now (navigation / new_session)
        self.pages: list[AppPage] = []
        self.cache: dict[str, ForwardMsg] = {}  # cacheable messages by hash
        self.refs_resolved = 0
        self.protocol_errors: list[str] = []
        self.messages_received = 0
        self.bytes_received = 0
        self._ws = None
        self._reader: asyncio.Task | None = None
        self._run: Run | None = None  # the run a request is waiting for
        self._done: asyncio.Event | None = None
        self.closed_reason = ""

    async def __aenter__(self) -> Session:
        await self.connect()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def connect(self) -> None:
        from websockets.asyncio.client import connect

        self._ws = await connect(self.ws_url, subprotocols=["streamlit"], origin=self.origin,
                                 open_timeout=self.connect_timeout, ping_interval=None, max_size=MAX_MESSAGE_BYTES,
                                 max_queue=None, proxy=None)
        self._reader = asyncio.create_task(self._read_forever())

    async def close(self) -> None:
        if self._ws is not None:
            await self._ws.close()
        if self._reader is not None:
            self._reader.cancel()
            try:
                await self._reader
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - closing: the reader's end is not news
                pass

    # ----------------------------------------------------------------------------------------- requests
    def page(self, url_pathname: str) -> AppPage | None:
        """The navigation's page at this address (the home page's is "")."""
        return next((p for p in self.pages if p.url_pathname == url_pathname), None)

    async def rerun(self, widget_states: WidgetStates | None = None, *, page_name: str | None = None,
                    page_script_hash: str | None = None, timeout: float = 300.0, fragment_id: str = "",
                    is_auto_rerun: bool = False) -> Run:
        """Ask for a run (of ``page_name``, an address such as "Attention", or ``page_script_hash``, else the
        page shown now) with these widget states, and wait for its final ``script_finished``.
        A run that does not finish within ``timeout`` comes back with ``finished_at`` None."""
        if self._run is not None:
            raise RuntimeError("a run is already being waited for: one request at a time")
        msg = BackMsg()
        cs = msg.rerun_script
        cs.query_string = self.query_string
        if page_name is not None:
            cs.page_name = page_name
        else:
            cs.page_script_hash = page_script_hash if page_script_hash is not None else self.page_script_hash
        if widget_states is not None:
            cs.widget_states.CopyFrom(widget_states)
        cs.fragment_id, cs.is_auto_rerun = fragment_id, is_auto_rerun  # a fragment's run (st.fragment(run_every))
        if self.tell_cached:
            cs.cached_message_hashes.extend(self.cache)
        cs.context_info.timezone = "UTC"
        cs.context_info.timezone_offset = 0
        cs.context_info.locale = "en-GB"
        cs.context_info.url = f"{self.origin}/{page_name or ''}"
        run = Run(sent_at=time.perf_counter())
        self._run, self._done = run, asyncio.Event()
        try:
            await self._ws.send(msg.SerializeToString())
            try:
                await asyncio.wait_for(self._done.wait(), timeout)
            except asyncio.TimeoutError:
                pass
        finally:
            self._run, self._done = None, None
        return run

    # ----------------------------------------------------------------------------------------- replies
    async def _read_forever(self) -> None:
        from websockets.exceptions import ConnectionClosed

        try:
            async for data in self._ws:
                if isinstance(data, str):
                    self.protocol_errors.append("the server sent a text frame")
                    continue
                self.messages_received += 1
                self.bytes_received += len(data)
                msg = ForwardMsg()
                msg.ParseFromString(data)
                self.handle(msg)
        except ConnectionClosed as exc:
            self.closed_reason = f"connection closed: {exc}"
        finally:
            if not self.closed_reason:
                self.closed_reason = "connection closed"
            if self._done is not None:  # a request waiting for a run will not get it
                self._done.set()

    def resolve(self, msg: ForwardMsg) -> ForwardMsg | None:
        """The message itself, or for a reference the cached message with the reference's metadata."""
        if msg.WhichOneof("type") == "ref_hash":
            cached = self.cache.get(msg.ref_hash)
            if cached is None:
                self.protocol_errors.append(f"reference to a message never received: {msg.ref_hash}")
                return None
            full = ForwardMsg()
            full.CopyFrom(cached)
            full.metadata.CopyFrom(msg.metadata)
            self.refs_resolved += 1
            return full
        if msg.metadata.cacheable and msg.hash:
            self.cache[msg.hash] = msg
        return msg

    def handle(self, raw: ForwardMsg) -> None:
        """Update this session from one ForwardMsg (public so that a test can feed messages by hand)."""
        msg = self.resolve(raw)
        if msg is None:
            return
        kind = msg.WhichOneof("type")
        run = self._run
        if kind == "new_session":
            if msg.new_session.page_script_hash:
                self.page_script_hash = msg.new_session.page_script_hash
            if msg.new_session.app_pages:
                self.pages = [AppPage(p.page_script_hash, p.url_pathname, p.page_name)
                              for p in msg.new_session.app_pages]
            if run is not None:
                run.restarts += 1
                run.elements.clear()  # a restarted run draws the page again from the top
        elif kind == "navigation":
            self.pages = [AppPage(p.page_script_hash, p.url_pathname, p.page_name) for p in msg.navigation.app_pages]
            if msg.navigation.page_script_hash:
                self.page_script_hash = msg.navigation.page_script_hash
        elif kind == "page_info_changed":
            self.query_string = msg.page_info_changed.query_string
        elif kind == "delta" and run is not None:
            if msg.delta.WhichOneof("type") == "new_element":
                run.elements.append((tuple(msg.metadata.delta_path), msg.delta.new_element))
        elif kind == "session_event" and run is not None:
            if msg.session_event.WhichOneof("type") == "script_compilation_exception":
                e = msg.session_event.script_compilation_exception
                run.compile_errors.append(f"{e.type}: {e.message}")
        elif kind == "page_not_found" and run is not None:
            run.page_not_found = True
        elif kind == "script_finished" and run is not None:
            if msg.script_finished in FINAL_STATUSES:
                run.status = STATUS_NAMES[msg.script_finished]
                run.finished_at = time.perf_counter()
                self._done.set()
