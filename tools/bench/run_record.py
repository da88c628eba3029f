"""What a bench run was, written beside its rows in ``--json``: when, at which commit, on what machine, with what else
running (the load average sampled through the run), how long it took and its exit status. The documentation's
benchmark page is generated from such a file (``tools/bench/markdown.py``), so its figures are never copied by hand."""
from __future__ import annotations

import datetime as _dt
import os
import platform
import subprocess
import threading
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[2]


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo ('' where there is none)."""
    for line in _read("/proc/cpuinfo").splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def memory_gib() -> Optional[float]:
    """The machine's memory (MemTotal), in GiB."""
    for line in _read("/proc/meminfo").splitlines():
        if line.startswith("MemTotal:"):
            return round(int(line.split()[1]) / 2**20, 1)
    return None


def load_average() -> Optional[float]:
    """The 1-minute load average, None where the system does not say."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def git_commit() -> dict:
    """The commit measured and whether the working tree had changes beside it."""
    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""
    return {"commit": git("rev-parse", "--short", "HEAD"), "dirty": bool(git("status", "--porcelain", "--",
                                                                               "gptviz", "app.py", "app_pages"))}


def machine() -> dict:
    import torch

    return {"cpu": cpu_model(), "cores": os.cpu_count(), "memory_gib": memory_gib(), "system": platform.platform(),
            "python": platform.python_version(), "torch": torch.__version__, "torch_threads": torch.get_num_threads()}


class LoadSampler:
    """Samples the load average every ``every`` seconds in a daemon thread, from start to stop."""

    def __init__(self, every: float = 15.0):
        self.every = every
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="bench-load-sampler")

    def _run(self) -> None:
        while True:
            value = load_average()
            if value is not None:
                self.samples.append(value)
            if self._stop.wait(self.every):
                return

    def __enter__(self) -> "LoadSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def record(parts: list[str], argv: list[str], started: _dt.datetime, seconds: float, load: list[float],
           status: int) -> dict:
    """The run's record: everything the benchmark page says about the run besides its rows."""
    return {"date": started.isoformat(timespec="seconds"), **git_commit(), "machine": machine(), "parts": parts,
            "command": " ".join(["python -m tools.bench", *argv]), "seconds": round(seconds),
            "load_average": {"min": min(load), "max": max(load), "samples": len(load)} if load else None,
            "exit_status": status}
