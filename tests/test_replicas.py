"""The live class on two replicas (deploy/): Redis, two `streamlit run app.py` and HAProxy with sticky sessions,
all on 127.0.0.1 (deploy.cluster), and a class of 60 simulated students plus the teacher, each one websocket
session through the balancer (tools.load.live_classroom). Mid-class one replica is killed (SIGKILL): its students
and the teacher (if it was there) reconnect through HAProxy to the other one, and find the class where it was.

What is checked, each against what the simulated tabs themselves did (the choices they sent, the replica the
balancer's cookie named), never against the store's own counts alone:
- every student joined and answered step 0; Redis holds exactly the 60 answers they sent, the teacher's page
  counts 60;
- every upload through the balancer reached the process holding its session (the sticky cookie works; without
  it about half are refused with "Invalid session_id");
- after the kill: every tab that was on the dead replica reconnected to the other within 10 s, its first view
  shows step 1 of the lesson and, for a student, the answer that student sent; Redis still holds the step and
  all 60 answers; an upload to the new replica is accepted; no page showed an error;
- the teacher's Next (the lesson's own Next button, on whichever replica the teacher is now) moves every one of
  the 60 students to step 2, and Redis says step 1 (0-based).

A second test (issue 36) keeps replica 1 busy with the heaviest work a page does while two CPU-bound processes
load the machine, and checks that HAProxy cuts no one (a busy replica is not a dead one).

Bounded: the class has 75 s (the busy class 300 s); the kill test takes 13-30 s on this busy 2-core machine, the busy
one about 65 s; the cluster listens on free loopback ports and is stopped in a finally (every process it started,
by pid). Skipped when redis-server or haproxy is not installed.
"""
import asyncio
import shutil
import time
from collections import Counter
from pathlib import Path

import pytest

from deploy.cluster import Cluster, Ports, haproxy_binary

LESSON = "01_text_to_token_ids"  # step 0 asks a question; step 1 does not
STUDENTS = 60
CLASS_SECONDS = 75.0

pytestmark = pytest.mark.skipif(
    not shutil.which("redis-server") or not Path(haproxy_binary()).exists(),
    reason="redis-server and haproxy are needed (apt-get install -y redis-server haproxy)")


def run_class(cluster: Cluster, code: str, token: str, notes: dict) -> dict:
    from tools.load.live_classroom import live_class

    async def scenario(live) -> None:
        notes["answered"] = await live.wait_answers(0, timeout=25)
        notes["teacher_counted_60"] = await live.wait_for(
            lambda: any(n == STUDENTS for _, s, n in live.teacher.log.histograms if s == 0), 10)
        notes["on_app1"] = [t.log.who for t in [live.teacher, *live.students] if t.log.replicas[:1] == ["app1"]]
        notes["killed_at"] = time.perf_counter()
        cluster.kill_replica(0)
        notes["pid_gone"] = cluster.replicas[0].popen.poll() is not None
        moved = lambda: all(t.log.drops and t.log.drops[-1].get("view_s") is not None
                            for t in [live.teacher, *live.students] if t.log.who in notes["on_app1"])
        notes["all_moved"] = await live.wait_for(moved, 20)
        notes["states_after_kill"] = cluster.server_states()
        notes["teacher_counted_after"] = await live.wait_for(
            lambda: any(when > notes["killed_at"] and s == 0 and n == STUDENTS
                        for when, s, n in live.teacher.log.histograms), 10)
        notes["next_reached_all"] = await live.next_step(timeout=20)
        notes["students_logs"] = {t.log.who: t.log for t in live.students}

    return asyncio.run(asyncio.wait_for(live_class(cluster.ports.url, code, token, STUDENTS, scenario, ramp=4.0),
                                        CLASS_SECONDS))


def test_a_class_of_60_survives_a_replica_killed_mid_class(tmp_path):
    from gptviz.live.redis_store import RedisStore

    t0 = time.perf_counter()
    notes: dict = {}
    with Cluster(Ports.free(replicas=2), start_timeout=60, run_dir=tmp_path) as cluster:  # logs in tmp_path
        store = RedisStore(cluster.ports.redis_url)
        code, token = store.create(LESSON)
        r = run_class(cluster, code, token, notes)
        assert r["opened"], f"not every tab showed the class within a minute: {r['not_opened']} {r['errors']}"
        state, stored = store.get(code), store.answers(code, 0)
        logs = notes["students_logs"]
        mine_in_redis = {who: store.my_answer(code, log.student_id, 0) for who, log in logs.items()}
    wall = time.perf_counter() - t0

    assert notes["answered"] and notes["teacher_counted_60"], notes
    # the answers the students sent (their own logs) are exactly what Redis holds, each one as sent
    sent = {who: [a for a in log.answers if a["step"] == 0 and a["ok"]] for who, log in logs.items()}
    assert all(len(v) == 1 for v in sent.values()), {k: len(v) for k, v in sent.items() if len(v) != 1}
    assert stored == dict(Counter(v[0]["choice"] for v in sent.values()))
    assert mine_in_redis == {who: v[0]["choice"] for who, v in sent.items()}
    # sticky sessions: every upload (before and after the switch) reached its session's process
    assert r["uploads"] == STUDENTS and not r["uploads_refused"], r["uploads_refused"][:3]
    # the kill and the switch
    assert notes["pid_gone"] and notes["states_after_kill"].get("app1") != "UP", notes["states_after_kill"]
    assert notes["all_moved"], "some tabs on the killed replica never showed the class again"
    dropped = {d["who"]: d for d in r["drops"]}
    assert set(dropped) == set(notes["on_app1"]) and len(dropped) >= 5, (sorted(dropped), notes["on_app1"])
    for who, d in dropped.items():
        assert d["replica_before"] == "app1" and d["replica_after"] == "app2", d
        assert d["view_s"] < 10 and d["step_shown"] == 0 and not d["errors"], d
        if who != "teacher":
            assert d["my_answer_shown"] == sent[who][0]["choice"] + 1, d  # shown 1-based
            assert d.get("upload") == 204, d
    assert notes["teacher_counted_after"], "the teacher's count did not come back to 60 after the switch"
    # the teacher's Next after the switch reaches all 60 students, and Redis has the step
    assert notes["next_reached_all"], {w: s for w, s in r["steps_seen"].items() if s[-1:] != [1]}
    assert state.step == 1 and r["nexts"] == 1 and r["next_missed"] == 0
    assert not r["errors"], r["errors"]
    print(f"\n{len(dropped)} tabs on the killed replica: websocket back after p50 {r['reconnect_s']['p50']:.2f} s "
          f"/ max {r['reconnect_s']['max']:.2f} s, first full view after p50 {r['view_after_drop_s']['p50']:.2f} s / "
          f"max {r['view_after_drop_s']['max']:.2f} s (from the connection's drop); Next→all students "
          f"p95 {r['next_to_step_s']['p95']:.2f} s; answer→teacher's count p95 "
          f"{r['answer_to_histogram_s']['p95']:.2f} s; test {wall:.0f} s")



# ---------------------------------------------------------------------------------------------- a busy replica
BUSY_STUDENTS = 30
BUSY_SECONDS = 10.0  # the busy replica works at least this long (the "busy … for 10 s"); then Next
BUSY_CLASS_SECONDS = 300.0


def test_a_busy_replica_on_a_loaded_machine_keeps_every_student(tmp_path, monkeypatch):
    """Issue 36: replica 1 runs the heaviest work a page does (GPT-2 small, 124,439,808 parameters, built and traced
    at T = 512 with its backward pass, `tools.load.health.heavy_backward`) for at least 10 s, and is still at it when
    the teacher presses Next, while two CPU-bound processes load the 2-core machine and 30 students on both replicas
    keep their pages polling. HAProxy never
    marks either replica down (its own counters: no failed check turned into a down), no tab is dropped, the
    class's answers are exactly those sent, and the teacher's Next afterwards reaches every student."""
    from gptviz.live.redis_store import RedisStore
    from tools.load.health import GPT2_PARAMS, busy_processes, heavy_backward
    from tools.load.machine import process_cpu_seconds

    # the replicas' arithmetic budget raised (they inherit the variable): the Backward page counts its backward pass
    # and would read only 128 tokens of GPT-2 small under the default 160 GFLOP; this test wants its heaviest run
    monkeypatch.setenv("GPTVIZ_PAGE_GFLOP", "10000")
    notes: dict = {"states": set()}
    with Cluster(Ports.free(replicas=2), start_timeout=90, run_dir=tmp_path) as cluster:
        store = RedisStore(cluster.ports.redis_url)
        code, token = store.create(LESSON)
        busy_url = f"http://127.0.0.1:{cluster.ports.apps[0]}"  # straight to replica 1: the work is there

        async def scenario(live) -> None:
            notes["answered"] = await live.wait_answers(0, timeout=60)
            notes["replicas"] = Counter(t.log.replicas[:1][0] for t in live.students if t.log.replicas)

            async def watch() -> None:  # HAProxy's view of both replicas, four times a second
                while True:
                    notes["states"].update(cluster.server_states().values())
                    await asyncio.sleep(0.25)

            watcher = asyncio.ensure_future(watch())
            with busy_processes(2, BUSY_CLASS_SECONDS):  # the machine loaded while replica 1 works, and at Next
                pids = [rep.popen.pid for rep in cluster.replicas]
                cpu0, t0 = [process_cpu_seconds(pid) for pid in pids], time.perf_counter()
                try:  # left once 10 s have passed and the page has named GPT-2 small: the replica goes on working
                    notes["heavy"] = await heavy_backward(busy_url, BUSY_SECONDS, first_timeout=240,
                                                          wait_for_end=False)
                finally:
                    notes["busy_s"] = time.perf_counter() - t0
                    notes["cpu_s"] = [process_cpu_seconds(pid) - c for pid, c in zip(pids, cpu0)]
                notes["next_reached_all"] = await live.next_step(timeout=60)  # while replica 1 still works
                await asyncio.sleep(1.0)  # HAProxy checks each replica once more, mid-work
                watcher.cancel()
            notes["students_logs"] = {t.log.who: t.log for t in live.students}

        from tools.load.live_classroom import live_class
        r = asyncio.run(asyncio.wait_for(live_class(cluster.ports.url, code, token, BUSY_STUDENTS, scenario,
                                                    ramp=4.0, upload_check=False, open_timeout=90),
                                         BUSY_CLASS_SECONDS))
        rows = cluster.server_rows()
        state, stored = store.get(code), store.answers(code, 0)
        logs = notes.get("students_logs", {})
        mine_in_redis = {who: store.my_answer(code, log.student_id, 0) for who, log in logs.items()}

    assert r["opened"], f"not every tab showed the class: {r['not_opened']} {r['errors']} {r['drops'][:3]}"
    assert notes["answered"], notes
    # both replicas had students, and replica 1 really worked: at least 10 s, a GPT-2-small run done, its CPU used
    assert notes["replicas"]["app1"] >= 5 and notes["replicas"]["app2"] >= 5, notes["replicas"]
    heavy = notes["heavy"]
    assert notes["busy_s"] >= BUSY_SECONDS and not heavy["errors"], heavy
    assert {m[1] for m in heavy["models"] if m} == {GPT2_PARAMS}
    # how much CPU a replica gets depends on what else the machine runs (CI's full suite left it 3.4 CPU s in 10 s),
    # so replica 1 is compared with replica 2, which served its students and nothing else in the same window
    busy_cpu, quiet_cpu = notes["cpu_s"]
    assert busy_cpu >= quiet_cpu + 1.0, notes["cpu_s"]
    # nobody was cut: HAProxy saw both UP throughout and counted no UP→DOWN; no tab reconnected
    assert notes["states"] and all(s.startswith("UP") for s in notes["states"]), notes["states"]  # "UP 1/3" too
    assert all(row["chkdown"] in ("0", "") for row in rows.values()), {k: v["chkdown"] for k, v in rows.items()}
    assert r["drops"] == [], r["drops"][:3]
    # the class is untouched: the answers sent are the answers held, and Next reached all 30
    sent = {who: [a for a in log.answers if a["step"] == 0 and a["ok"]] for who, log in logs.items()}
    assert all(len(v) == 1 for v in sent.values())
    assert stored == dict(Counter(v[0]["choice"] for v in sent.values()))
    assert mine_in_redis == {who: v[0]["choice"] for who, v in sent.items()}
    assert notes["next_reached_all"] and state.step == 1 and r["next_missed"] == 0
    assert not r["errors"], r["errors"]
    print(f"\nbusy replica: {notes['busy_s']:.0f} s, {notes['cpu_s'][0]:.1f} CPU s in it (GPT-2 small at T=512), "
          f"{notes['cpu_s'][1]:.1f} in replica 2; "
          f"checks failed {[v['chkfail'] for v in rows.values()]}; "
          f"Next→all p95 {r['next_to_step_s']['p95']:.2f} s; students {dict(notes['replicas'])}")
