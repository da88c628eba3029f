"""The server's memory, read from /proc: its process (found by pid, or by the local port it listens on) and its
children, sampled in a background thread while the class runs.

Two figures: the peak of the sampled resident memory of the whole process tree (VmRSS summed), and the kernel's
own high-water mark of the server process (VmHWM, which also counts what happened before the run). MiB = 2^20 B.
"""
from __future__ import annotations

import os
import threading
from pathlib import Path

PROC = Path("/proc")


def _status_kib(pid: int, field: str) -> int:
    """One ``kB`` field of /proc/<pid>/status (0 when the process is gone)."""
    try:
        for line in (PROC / str(pid) / "status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def children(pid: int) -> list[int]:
    """Every descendant of ``pid``."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for task in (PROC / str(p) / "task").glob("*"):
            try:
                kids = [int(k) for k in (task / "children").read_text().split()]
            except (OSError, ValueError):
                continue
            out += kids
            todo += kids
    return sorted(set(out))


def tree_rss_bytes(pid: int) -> int:
    """Resident memory of ``pid`` and its descendants, now."""
    return sum(_status_kib(p, "VmRSS") for p in [pid, *children(pid)]) * 1024


def high_water_bytes(pid: int) -> int:
    """The kernel's peak resident memory of ``pid`` since it started (VmHWM)."""
    return _status_kib(pid, "VmHWM") * 1024


def pid_listening_on(port: int) -> int | None:
    """The pid of the process listening on this local TCP port (read from /proc/net/tcp and the fds), or None."""
    inodes = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = (PROC / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                inodes.add(cols[9])
    if not inodes:
        return None
    wanted = {f"socket:[{i}]" for i in inodes}
    for proc in PROC.iterdir():
        if not proc.name.isdigit():
            continue
        try:
            for fd in (proc / "fd").iterdir():
                if os.readlink(fd) in wanted:
                    return int(proc.name)
        except OSError:
            continue
    return None


class MemorySampler:
    """Samples the server tree's resident memory every ``every`` seconds until ``stop()``."""

    def __init__(self, pid: int, every: float = 0.25):
        self.pid, self.every = pid, every
        self.peak_rss_bytes = tree_rss_bytes(pid)
        self.start_rss_bytes = self.peak_rss_bytes
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="load-memory", daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            self.peak_rss_bytes = max(self.peak_rss_bytes, tree_rss_bytes(self.pid))
            self.samples += 1

    def start(self) -> MemorySampler:
        self._thread.start()
        return self

    def stop(self) -> dict:
        self._stop.set()
        self._thread.join(5)
        end = tree_rss_bytes(self.pid)
        return {"server_pid": self.pid, "rss_start_mib": self.start_rss_bytes / 2**20,
                "rss_end_mib": end / 2**20, "rss_peak_mib": max(self.peak_rss_bytes, end) / 2**20,
                "vmhwm_mib": high_water_bytes(self.pid) / 2**20, "memory_samples": self.samples}
