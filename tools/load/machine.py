"""Whose CPU the run used, from /proc: the server's process tree, this client, and everything else on the machine.

The machine's busy CPU time (``/proc/stat``, all cores, idle and iowait left out) minus the server's and the
client's is what other processes (other people's tests, say) took while the class ran: a latency measured on a
busy machine says so in its own report.
"""
from __future__ import annotations

import os
import resource

from tools.load.memory import PROC, children

TICK = os.sysconf("SC_CLK_TCK")


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` and its live descendants (0 for a process that is gone)."""
    total = 0
    for p in [pid, *children(pid)]:
        try:
            fields = (PROC / str(p) / "stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
        except (OSError, ValueError, IndexError):
            continue
    return total / TICK


def machine_busy_seconds() -> float:
    """CPU time all cores spent busy since boot (not idle, not waiting for I/O)."""
    try:
        values = [int(v) for v in (PROC / "stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return 0.0
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    return (sum(values[:8]) - idle) / TICK  # user nice system idle iowait irq softirq steal (guest is in user)


def client_cpu_seconds() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


class CpuMeter:
    """CPU time used between ``start`` and ``stop``: by the server, by this client, and by the rest."""

    def __init__(self, server_pid: int | None):
        self.server_pid = server_pid

    def start(self) -> CpuMeter:
        self.load_start = os.getloadavg()[0]
        self.server0 = process_cpu_seconds(self.server_pid) if self.server_pid else 0.0
        self.client0, self.machine0 = client_cpu_seconds(), machine_busy_seconds()
        return self

    def stop(self, wall_s: float) -> dict:
        server = (process_cpu_seconds(self.server_pid) - self.server0) if self.server_pid else None
        client = client_cpu_seconds() - self.client0
        machine = machine_busy_seconds() - self.machine0
        return {"cores": os.cpu_count(), "wall_s": wall_s, "client_cpu_s": client, "server_cpu_s": server,
                "machine_busy_cpu_s": machine,
                "other_processes_cpu_s": None if server is None else max(0.0, machine - server - client),
                "load_average_start": self.load_start, "load_average_end": os.getloadavg()[0]}
