"""Whose CPU a load run used (tools.load.machine): busy time, other processes and the host's steal, read from a
/proc/stat written here."""
import os

from tools.bench import classroom
from tools.load import machine

TICK = os.sysconf("SC_CLK_TCK")


def write_stat(folder, user, nice, system, idle, iowait, irq, softirq, steal):
    (folder / "stat").write_text(f"cpu  {user} {nice} {system} {idle} {iowait} {irq} {softirq} {steal} 0 0\n"
                                 "cpu0 1 2 3 4 5 6 7 8 0 0\n")


def test_busy_time_leaves_out_idle_iowait_and_the_hosts_steal(tmp_path, monkeypatch):
    monkeypatch.setattr(machine, "PROC", tmp_path)
    write_stat(tmp_path, 1000, 20, 300, 9000, 50, 6, 7, 800)
    assert machine.machine_busy_seconds() == (1000 + 20 + 300 + 6 + 7) / TICK
    assert machine.steal_seconds() == 800 / TICK
    (tmp_path / "stat").write_text("cpu  1 2 3 4\n")  # an old kernel's short line: no steal figure
    assert machine.steal_seconds() == 0.0
    (tmp_path / "stat").unlink()
    assert machine.machine_busy_seconds() == 0.0 and machine.steal_seconds() == 0.0


def test_a_run_reports_the_steal_apart_from_the_other_processes(tmp_path, monkeypatch):
    monkeypatch.setattr(machine, "PROC", tmp_path)
    monkeypatch.setattr(machine, "client_cpu_seconds", iter([2.0, 2.0 + 30 / TICK]).__next__)
    write_stat(tmp_path, 1000, 0, 100, 5000, 0, 0, 0, 200)
    meter = machine.CpuMeter(server_pid=None).start()
    write_stat(tmp_path, 1000 + 150, 0, 100 + 50, 5000 + 40, 0, 0, 0, 200 + 1400)
    cpu = meter.stop(wall_s=10.0)
    assert cpu["machine_busy_cpu_s"] == 200 / TICK and cpu["steal_cpu_s"] == 1400 / TICK
    assert abs(cpu["client_cpu_s"] - 30 / TICK) < 1e-12
    assert cpu["other_processes_cpu_s"] is None  # no server to subtract


def test_the_class_rows_say_what_the_host_took():
    r = {"wall_s": 35.0, "cpu": {"cores": 2, "server_cpu_s": 40.0, "other_processes_cpu_s": 3.5, "steal_cpu_s": 14.0,
                                 "load_average_start": 0.5, "load_average_end": 1.5}}
    assert classroom.cpu_label(r) == ("CPU s: server 40.00, others 3.50, taken by the host (steal) 14.00 in 35 s "
                                      "(2 cores, load 0.5→1.5)")
    del r["cpu"]["steal_cpu_s"]  # a run recorded before steal was measured
    assert classroom.cpu_label(r) == "CPU s: server 40.00, others 3.50 in 35 s (2 cores, load 0.5→1.5)"
