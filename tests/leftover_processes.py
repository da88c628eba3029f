"""No process a test starts outlives the test run.

Every process the tests start (a Streamlit server, Chromium, redis-server, HAProxy, a training run…) inherits
``GPTVIZ_TEST_RUN``, a token unique to this pytest process (each xdist worker has its own), unless a test hands it a
new environment from scratch. At the end of the session the processes still carrying the token are waited for
(their stopping may take a moment), then killed and reported: the session's last test errors at teardown with
their command lines, so a leak fails the run instead of leaving a server behind on a teacher's machine.

A process lists the environment it was *started* with in /proc/PID/environ, so the pytest process itself and a
process started before the token was set are never counted. Linux only (elsewhere nothing is checked).
"""
from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path

TOKEN_VAR = "GPTVIZ_TEST_RUN"
GRACE_SECONDS = 20.0  # a stopped server or browser has this long to be gone


def set_token() -> bytes:
    """Give this process (and so every process it starts from now on) its own token; returns the environ entry."""
    os.environ[TOKEN_VAR] = f"{os.getpid()}-{uuid.uuid4().hex}"
    return f"{TOKEN_VAR}={os.environ[TOKEN_VAR]}".encode()


def carrying(entry: bytes) -> dict[int, str]:
    """pid -> command line of every live process (not zombies, not this one) started with ``entry``."""
    found = {}
    for p in Path("/proc").iterdir():
        if not p.name.isdigit() or int(p.name) == os.getpid():
            continue
        try:
            if entry not in (p / "environ").read_bytes().split(b"\0"):
                continue
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:  # gone, or not ours to read
            continue
        if cmd:  # a zombie has no command line: it is already dead, waiting for its parent
            found[int(p.name)] = cmd
    return found


def leftovers(entry: bytes, grace: float = GRACE_SECONDS) -> dict[int, str]:
    """The processes still carrying ``entry`` after ``grace`` seconds, killed (SIGKILL: a leaked server may ignore
    SIGTERM); empty when every process the tests started has ended."""
    deadline = time.monotonic() + grace
    left = carrying(entry)
    while left and time.monotonic() < deadline:
        time.sleep(0.25)
        left = carrying(entry)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return left
