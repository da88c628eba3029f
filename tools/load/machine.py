"""Whose CPU the run used, from /proc: the server's process tree, this client, and everything else on the machine.

The machine's busy CPU time (``/proc/stat``, all cores, idle, iowait and steal left out) minus the server's and the
client's is what other processes (other people's tests, say) took while the class ran: a latency measured on a
busy machine says so in its own report. On a virtual machine the host can also take the cores away: that is the
steal time (``/proc/stat``'s eighth figure), reported on its own. While the host is that busy, everything runs
slower and each process is also charged more CPU for the same work (a 20-student run on Attention, 2026-11-28: 80 ms
a run with 14 s of steal in 45 s, 59-62 ms with the same code an hour before).
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


def _cpu_line() -> list[int]:
    try:
        return [int(v) for v in (PROC / "stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return []


def machine_busy_seconds() -> float:
    """CPU time all cores spent busy since boot: user, nice, system, irq and softirq (not idle, not waiting for
    I/O, not taken by the host; guest time is in user)."""
    values = _cpu_line()
    return (sum(values[:3]) + sum(values[5:7])) / TICK if len(values) >= 7 else 0.0


def steal_seconds() -> float:
    """CPU time the host took from this virtual machine's cores since boot (0 where the kernel does not say)."""
    values = _cpu_line()
    return values[7] / TICK if len(values) >= 8 else 0.0


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
        self.client0, self.machine0, self.steal0 = client_cpu_seconds(), machine_busy_seconds(), steal_seconds()
        return self

    def stop(self, wall_s: float) -> dict:
        server = (process_cpu_seconds(self.server_pid) - self.server0) if self.server_pid else None
        client = client_cpu_seconds() - self.client0
        machine = machine_busy_seconds() - self.machine0
        return {"cores": os.cpu_count(), "wall_s": wall_s, "client_cpu_s": client, "server_cpu_s": server,
                "machine_busy_cpu_s": machine,
                "other_processes_cpu_s": None if server is None else max(0.0, machine - server - client),
                "steal_cpu_s": steal_seconds() - self.steal0,
                "load_average_start": self.load_start, "load_average_end": os.getloadavg()[0]}
