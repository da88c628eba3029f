"""Start and stop a local gptviz cluster: Redis, N ``streamlit run app.py`` replicas and HAProxy, all on loopback.

``Cluster(ports).start()`` starts Redis, then the replicas (each with ``GPTVIZ_REDIS_URL`` pointing at that
Redis), then HAProxy with ``deploy/haproxy.cfg`` (one ``server`` line per replica), and waits until each answers
(Redis ``PING``, Streamlit's ``/_stcore/health``, every replica UP on HAProxy's status page). ``stop()`` ends
every process it started (SIGTERM, then SIGKILL), and is safe to call twice or after a failed start; the
``with Cluster(...) as c`` form calls it on the way out. Each process writes its output to a log file in
``c.run_dir``. ``kill_replica(i)`` sends SIGKILL to one replica (the failover test's crash);
``server_states()`` reads HAProxy's view of the replicas (UP / DOWN) from its CSV status page.

Used by ``deploy/run_local.py`` (the one command), ``tests/test_replicas.py`` and ``tools/bench/live_class.py``.
"""
from __future__ import annotations

import csv
import io
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HAPROXY_CFG = ROOT / "deploy" / "haproxy.cfg"
SERVER_LINE = re.compile(r"^(\s*)server app\d+ .*$", re.M)
HOST = "127.0.0.1"


class ClusterError(RuntimeError):
    """A process of the cluster did not start (the message holds the end of its log)."""


@dataclass
class Ports:
    """Where everything listens (loopback). Replicas take ``first_app``, ``first_app + 1``, …"""

    balancer: int = 8541
    first_app: int = 8542
    stats: int = 8549
    redis: int = 6391
    replicas: int = 2

    @classmethod
    def free(cls, replicas: int = 2) -> Ports:
        """Ports free on loopback now (the replicas' in a row), for a cluster that must not clash with another."""
        while True:
            socks = [socket.socket() for _ in range(4)]
            try:
                for s in socks:
                    s.bind((HOST, 0))
                lb, stats, redis, first = [s.getsockname()[1] for s in socks]
            finally:
                for s in socks:
                    s.close()
            apps = {first + i for i in range(replicas)}
            if all(port_is_free(p) for p in apps) and not apps & {lb, stats, redis}:
                return cls(balancer=lb, first_app=first, stats=stats, redis=redis, replicas=replicas)

    @property
    def apps(self) -> list[int]:
        return [self.first_app + i for i in range(self.replicas)]

    @property
    def redis_url(self) -> str:
        return f"redis://{HOST}:{self.redis}/0"

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.balancer}"


def haproxy_binary() -> str:
    return shutil.which("haproxy") or "/usr/sbin/haproxy"


def render_haproxy_config(replicas: int, template: str | None = None) -> str:
    """deploy/haproxy.cfg with one ``server appK "${GPTVIZ_APPK}" cookie appK`` line per replica."""
    text = template if template is not None else HAPROXY_CFG.read_text(encoding="utf-8")
    lines = list(SERVER_LINE.finditer(text))
    if not lines:
        raise ClusterError("deploy/haproxy.cfg has no `server app1 …` line to repeat")
    indent = lines[0].group(1)
    servers = "\n".join(f'{indent}server app{k} "${{GPTVIZ_APP{k}}}" cookie app{k}' for k in range(1, replicas + 1))
    start, end = lines[0].start(), lines[-1].end()
    return text[:start] + servers + text[end:]


def haproxy_env(ports: Ports) -> dict[str, str]:
    env = {"GPTVIZ_LB_ADDR": f"{HOST}:{ports.balancer}", "GPTVIZ_STATS_ADDR": f"{HOST}:{ports.stats}"}
    env.update({f"GPTVIZ_APP{k}": f"{HOST}:{p}" for k, p in enumerate(ports.apps, start=1)})
    return env


def port_is_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers bind: TIME_WAIT is no obstacle
        try:
            s.bind((HOST, port))
        except OSError:
            return False
        return True


def redis_ping(port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=timeout) as s:
            s.sendall(b"PING\r\n")
            return s.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def http_ok(url: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status == 200
    except OSError:
        return False


@dataclass
class Proc:
    """One process of the cluster and its log file."""

    name: str
    popen: subprocess.Popen
    log: Path

    def tail(self, n: int = 1500) -> str:
        try:
            return self.log.read_text(errors="replace")[-n:]
        except OSError:
            return ""


@dataclass
class Cluster:
    """Redis + N replicas + HAProxy on loopback (see the module's doc)."""

    ports: Ports = field(default_factory=Ports)
    appendonly: bool = False  # Redis's own restart safety (the class survives a Redis restart); off: in memory
    app_args: list[str] = field(default_factory=list)  # extra `streamlit run` options
    script: str = "app.py"  # the app each replica runs (a path; relative to the repository)
    start_timeout: float = 90.0
    run_dir: Path | None = None
    redis: Proc | None = None
    replicas: list[Proc] = field(default_factory=list)
    balancer: Proc | None = None

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ------------------------------------------------------------------------------------------- start
    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> Proc:
        log = self.run_dir / f"{name}.log"
        with open(log, "wb") as out:  # the child keeps its own handle
            popen = subprocess.Popen(argv, cwd=ROOT, env={**os.environ, **(env or {})}, stdout=out,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        return Proc(name, popen, log)

    def _wait(self, proc: Proc, ready, what: str) -> None:
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if ready():
                return
            if proc.popen.poll() is not None:
                break
            time.sleep(0.2)
        raise ClusterError(f"{what} did not start (exit {proc.popen.poll()}); its log ends:\n{proc.tail()}")

    def start(self) -> Cluster:
        p = self.ports
        busy = [x for x in (p.balancer, p.stats, p.redis, *p.apps) if not port_is_free(x)]
        if busy:
            raise ClusterError(f"ports already in use on {HOST}: {busy}")
        self.run_dir = Path(self.run_dir or tempfile.mkdtemp(prefix="gptviz-cluster-"))
        try:
            self.start_redis()
            for i in range(p.replicas):
                self.replicas.append(self.start_replica(i))
            for i, proc in enumerate(self.replicas):
                self._wait(proc, lambda port=p.apps[i]: http_ok(f"http://{HOST}:{port}/_stcore/health"),
                           f"replica {i + 1} (port {p.apps[i]})")
            self.start_balancer()
        except BaseException:
            self.stop()
            raise
        return self

    def start_redis(self) -> None:
        argv = ["redis-server", "--port", str(self.ports.redis), "--bind", HOST, "--save", "",
                "--appendonly", "yes" if self.appendonly else "no", "--dir", str(self.run_dir)]
        self.redis = self._spawn("redis", argv)
        self._wait(self.redis, lambda: redis_ping(self.ports.redis), f"redis-server (port {self.ports.redis})")

    def start_replica(self, i: int) -> Proc:
        port = self.ports.apps[i]
        argv = [sys.executable, "-m", "streamlit", "run", self.script, "--server.port", str(port),
                "--server.address", HOST, "--server.headless", "true", "--browser.gatherUsageStats", "false",
                *self.app_args]
        return self._spawn(f"app{i + 1}", argv, {"GPTVIZ_REDIS_URL": self.ports.redis_url})

    def start_balancer(self) -> None:
        cfg = self.run_dir / "haproxy.cfg"
        cfg.write_text(render_haproxy_config(self.ports.replicas), encoding="utf-8")
        self.balancer = self._spawn("haproxy", [haproxy_binary(), "-db", "-f", str(cfg)], haproxy_env(self.ports))
        self._wait(self.balancer, lambda: self.server_states() and all(
            s.startswith("UP") for s in self.server_states().values()), f"haproxy (port {self.ports.balancer})")

    # ------------------------------------------------------------------------------------------- look, kill
    def server_rows(self) -> dict[str, dict[str, str]]:
        """HAProxy's statistics row of each replica (its CSV: ``status``, ``chkfail``, ``chkdown``, ``lastchk``…),
        by server name ({} when it does not answer)."""
        try:
            with urllib.request.urlopen(f"http://{HOST}:{self.ports.stats}/stats;csv", timeout=2) as r:
                text = r.read().decode()
        except OSError:
            return {}
        rows = csv.DictReader(io.StringIO(text.lstrip("# ")))
        return {r["svname"]: r for r in rows if r.get("pxname") == "streamlit"
                and r.get("svname", "").startswith("app")}

    def server_states(self) -> dict[str, str]:
        """HAProxy's view of each replica: {"app1": "UP", "app2": "DOWN", …} ({} when it does not answer)."""
        return {name: row["status"] for name, row in self.server_rows().items()}

    def kill_replica(self, i: int) -> int:
        """SIGKILL replica ``i`` (0-based), as a crash would; its pid."""
        proc = self.replicas[i].popen
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        return proc.pid

    def pids(self) -> dict[str, int]:
        procs = [self.redis, *self.replicas, self.balancer]
        return {p.name: p.popen.pid for p in procs if p is not None and p.popen.poll() is None}

    # ------------------------------------------------------------------------------------------- stop
    def stop(self) -> None:
        """End every process this cluster started: SIGTERM, then SIGKILL after 10 s."""
        procs = [p for p in (self.balancer, *self.replicas, self.redis) if p is not None]
        for p in procs:
            if p.popen.poll() is None:
                p.popen.terminate()
        deadline = time.monotonic() + 10
        for p in procs:
            try:
                p.popen.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.popen.kill()
                p.popen.wait(5)
