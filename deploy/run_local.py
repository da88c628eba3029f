"""One command for a live class on several processes of this machine: Redis, N replicas and HAProxy on loopback.

    python deploy/run_local.py                 # 2 replicas behind http://127.0.0.1:8541, Redis on 6391
    python deploy/run_local.py --replicas 3 --port 8541 --first-app-port 8542 --redis-port 6391 --stats-port 8549

Open the printed address (students and teacher alike: HAProxy pins each browser to one replica with a cookie).
Ctrl-C (or SIGTERM) stops everything it started. ``--appendonly`` keeps Redis's data in an append-only file in
the run's folder (the class survives a Redis restart; off by default: a class lasts a lesson).
"""
from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python deploy/run_local.py` from anywhere

from deploy.cluster import Cluster, ClusterError, Ports


def parse_args(argv=None) -> argparse.Namespace:
    d = Ports()
    p = argparse.ArgumentParser(prog="python deploy/run_local.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--replicas", type=int, default=d.replicas, help=f"app processes (default {d.replicas})")
    p.add_argument("--port", type=int, default=d.balancer, help=f"HAProxy, where browsers connect ({d.balancer})")
    p.add_argument("--first-app-port", type=int, default=d.first_app,
                   help=f"the first replica's port; the next ones count up ({d.first_app})")
    p.add_argument("--stats-port", type=int, default=d.stats, help=f"HAProxy's status page ({d.stats})")
    p.add_argument("--redis-port", type=int, default=d.redis, help=f"Redis ({d.redis})")
    p.add_argument("--appendonly", action="store_true", help="Redis keeps an append-only file (restart safety)")
    a = p.parse_args(argv)
    if not 1 <= a.replicas <= 16:
        p.error("--replicas must be between 1 and 16")
    return a


def main(argv=None) -> int:
    a = parse_args(argv)
    ports = Ports(balancer=a.port, first_app=a.first_app_port, stats=a.stats_port, redis=a.redis_port,
                  replicas=a.replicas)
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    cluster = Cluster(ports, appendonly=a.appendonly)
    try:
        print(f"starting Redis :{ports.redis}, {ports.replicas} replicas {ports.apps}, HAProxy :{ports.balancer} …",
              flush=True)
        cluster.start()
        print(f"gptviz: {ports.url}   (HAProxy status: http://127.0.0.1:{ports.stats}/stats; "
              f"logs: {cluster.run_dir}) — Ctrl-C stops everything", flush=True)
        last = {}
        while True:  # report replicas going down and up, and a process that died
            states = cluster.server_states()
            if states != last:
                print(time.strftime("%H:%M:%S"), " ".join(f"{k} {v}" for k, v in sorted(states.items())), flush=True)
                last = states
            if cluster.redis.popen.poll() is not None or cluster.balancer.popen.poll() is not None:
                print("Redis or HAProxy exited: stopping", file=sys.stderr)
                return 1
            time.sleep(1)
    except ClusterError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("stopping …", flush=True)
        return 0
    finally:
        cluster.stop()


if __name__ == "__main__":
    sys.exit(main())
