"""The end-of-session check (tests/leftover_processes.py): it finds a process a test started and left running, kills
it, and leaves alone what the tests did not start."""
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from leftover_processes import TOKEN_VAR, carrying, leftovers

pytestmark = pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="reads /proc (Linux)")
SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]


def _entry() -> bytes:
    return f"{TOKEN_VAR}={os.environ[TOKEN_VAR]}".encode()


def test_a_process_left_running_is_found_killed_and_named():
    """A child started the ordinary way inherits the session's token: the check names it and SIGKILLs it."""
    proc = subprocess.Popen(SLEEPER)
    try:
        time.sleep(0.2)
        found = carrying(_entry())
        assert found.get(proc.pid, "").endswith("time.sleep(120)")
        t = time.monotonic()
        left = leftovers(_entry(), grace=0.5)
        assert proc.pid in left and time.monotonic() - t < 5
        assert proc.wait(5) == -9  # killed by SIGKILL, not asked
        assert proc.pid not in carrying(_entry())
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_process_that_ends_within_the_grace_is_not_a_leftover():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.5)"])
    try:
        assert leftovers(_entry(), grace=15) == {}
    finally:
        proc.wait(10)


def test_a_process_the_tests_did_not_start_is_left_alone():
    """Another token (another pytest run on the same machine) or none at all: not this session's process."""
    env = {k: v for k, v in os.environ.items() if k != TOKEN_VAR}
    other = subprocess.Popen(SLEEPER, env={**env, TOKEN_VAR: "another-run"})
    none = subprocess.Popen(SLEEPER, env=env)
    try:
        time.sleep(0.2)
        assert not {other.pid, none.pid} & set(leftovers(_entry(), grace=0))
        assert other.poll() is None and none.poll() is None
    finally:
        for p in (other, none):
            p.kill()
            p.wait(5)
