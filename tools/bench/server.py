"""Start ``streamlit run`` on a free local port for the browser rows, and stop it."""
from __future__ import annotations

import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from tools.bench.report import BenchFailure


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(script: Path, cwd: Path) -> tuple[subprocess.Popen, str]:
    """(the server process, its address) once its health check answers; BenchFailure if it did not start."""
    port = _free_port()
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", str(script), "--server.headless", "true", "--server.port", str(port),
         "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false", "--client.showErrorDetails", "full"],
        cwd=cwd, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            if urllib.request.urlopen(url + "/_stcore/health", timeout=2).status == 200:
                return proc, url
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.5)
    stop_server(proc)
    log.seek(0)
    raise BenchFailure(f"streamlit run {script.name} did not start: {log.read().decode(errors='replace')[-500:]}")


def stop_server(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
