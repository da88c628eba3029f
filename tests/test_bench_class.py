"""The bench's class part (tools/bench/classroom.py) makes its rows right: goal met, goal missed, and FAIL with
the reason, from hand-made dicts shaped as ``tools.load.run_class`` returns them (no server, no students)."""
from tools.bench import classroom as c
from tools.bench.report import exit_status, table

CAPTION = "vocab_size = 340, set by the tokenizer · 853,248 parameters"


def result(students=60, seconds=60.0, p95=0.5, rss=900.0, failures=(), view_max=1.0, n=600, trainers=0,
           shown=(CAPTION,)) -> dict:
    """A run_class-shaped result with the figures the rows read."""
    return {
        "students": students, "trainers": trainers, "seconds": seconds, "every": 5.0, "page": "Attention",
        "ramp": 0.0, "seed": 1,
        "model": {"expected": CAPTION, "shown": list(shown), "after_training": [], "ok": list(shown) == [CAPTION]},
        "first_view_s": {"n": students, "p50": view_max / 2, "p95": view_max * 0.9, "max": view_max},
        "students_with_a_view": students,
        "change_s": {"n": n, "p50": p95 and p95 / 2, "p95": p95, "max": p95 and p95 * 2},
        "changes_sent": n, "changes_finished": n, "training_s": [12.0] * trainers,
        "training_status": ["FINISHED_SUCCESSFULLY"] * trainers, "failures": list(failures), "ok": not failures,
        "server_memory": {"rss_peak_mib": rss}, "wall_s": seconds + 5,
        "cpu": {"cores": 2, "server_cpu_s": 40.0, "other_processes_cpu_s": 3.5, "load_average_start": 0.5,
                "load_average_end": 1.5},
    }


def test_a_steady_class_meets_its_goal_and_the_row_names_everything_it_measured():
    r = c.steady_row(result())
    assert r["ok"] is True and not r["why"]
    assert "60 students" in r["figure"] and "60 s" in r["figure"] and "every 5 s" in r["figure"]
    assert "Attention" in r["figure"] and "warm server" in r["figure"]
    assert r["model"] == "853,248 params · vocab 340"
    assert "p95 0.50" in r["value"] and "others 3.50" in r["value"] and "server 40.00" in r["value"]
    assert exit_status([r]) == 0 and "✓" in table([r])


def test_a_slow_p95_or_too_much_memory_misses_the_goal():
    for r in (c.steady_row(result(p95=1.4)), c.steady_row(result(rss=2100.0))):
        assert r["ok"] is False and not r["why"]
        assert exit_status([r]) == 1 and "MISSED" in table([r])


def test_errors_a_student_without_a_view_or_the_wrong_model_fail_the_row_with_the_reason():
    why = "3 error(s) from the server or the protocol"
    r = c.steady_row(result(failures=[why]))
    assert r["ok"] is False and why in r["why"] and r["value"].startswith("FAILED")
    wrong = result(shown=["vocab_size = 50,257, set by the tokenizer · 124,439,808 parameters"],
                   failures=["the page showed another model"])
    assert "another model" in c.steady_row(wrong)["why"] and "124,439,808" in c.steady_row(wrong)["model"]
    assert exit_status([c.steady_row(result()), c.steady_row(wrong)]) == 2
    assert "no change finished" in c.steady_row(result(p95=None, n=0))["why"]


def test_opening_at_once_checks_the_slowest_first_view():
    assert c.opening_row(result(students=30, seconds=0.0, view_max=2.9, n=0))["ok"] is True
    slow = c.opening_row(result(students=30, seconds=0.0, view_max=3.2, n=0))
    assert slow["ok"] is False and "max 3.20" in slow["value"] and "first view only" in slow["figure"]


def test_trainers_have_a_two_second_goal_and_show_their_training_runs():
    r = c.trainers_row(result(students=30, trainers=5, p95=1.8))
    assert r["ok"] is True and "(5 train)" in r["figure"] and "12.00" in r["value"]
    assert c.trainers_row(result(students=30, trainers=5, p95=2.2))["ok"] is False


def test_the_sweep_reports_the_largest_class_that_met_p95_and_stops_after_the_first_miss():
    runs = [result(students=90, seconds=30.0, p95=0.4), result(students=120, seconds=30.0, p95=0.8),
            result(students=150, seconds=30.0, p95=1.3)]
    assert [c.sweep_should_stop(r) for r in runs] == [False, False, True]
    rows = c.sweep_rows(runs, note="--quick: 15 s, not 30 s")
    assert len(rows) == 4 and all(r["ok"] is None for r in rows[:3])
    assert rows[-1]["ok"] is True and rows[-1]["value"].startswith("120 students met")
    assert "--quick" in rows[0]["figure"] and exit_status(rows) == 0 and "≥ 120 students" in rows[-1]["goal"]
    short = c.sweep_rows(runs[:1] + [result(students=120, seconds=30.0, p95=1.1)])  # 90 met, 120 did not
    assert short[-1]["ok"] is False and short[-1]["value"].startswith("90 students met")
    none_met = c.sweep_rows([result(students=30, seconds=30.0, p95=1.2)])
    assert none_met[-1]["ok"] is False and "no class met it" in none_met[-1]["value"]
    failing = c.sweep_rows([result(students=30, seconds=30.0, failures=["1 of 30 students never got a first view"])])
    assert failing[0]["why"] and failing[-1]["ok"] is False and exit_status(failing) == 2


def test_cpu_per_change_is_the_servers_cpu_over_its_runs_and_a_ratio_to_the_one_chart_app():
    app = result(students=20, seconds=30.0, n=100)  # 40 CPU s over 20 first views + 100 changes: 333.3 ms a run
    floor = result(students=20, seconds=30.0, n=80)
    floor["cpu"] = dict(floor["cpu"], server_cpu_s=2.0)  # 2 CPU s over 100 runs: 20 ms a run
    assert abs(c.cpu_per_run_ms(app) - 40_000 / 120) < 1e-9 and abs(c.cpu_per_run_ms(floor) - 20.0) < 1e-9
    r = c.cpu_row(app, floor)
    assert r["ok"] is False and not r["why"] and "16.667×" in r["value"] and "side by side" in r["value"]
    assert "gptviz 333.3 ms a run (20 first views + 100 changes)" in r["value"]
    assert "one-chart app 20.0 ms" in r["value"]
    assert r["goal"] == "≤ 0.3× the one-chart app" and "20 students" in r["figure"]
    cheap = result(students=20, seconds=30.0, n=100)
    cheap["cpu"] = dict(cheap["cpu"], server_cpu_s=0.6)  # 5 ms a run: 0.25×
    assert c.cpu_row(cheap, floor)["ok"] is True
    broken = c.cpu_row(app, result(students=20, failures=["2 of 20 students never got a first view"]))
    assert broken["why"] and "one-chart app: 2 of 20" in broken["why"] and exit_status([broken]) == 2
    empty = result(students=20, n=0)
    empty["students_with_a_view"] = 0
    assert c.cpu_per_run_ms(empty) is None and c.cpu_row(empty, floor)["why"]


def test_the_cpu_classes_run_on_both_servers_at_once_with_the_same_sentences():
    """Side by side, not one after the other: each class waits at a barrier only the other's can open."""
    import threading

    import pytest

    barrier = threading.Barrier(2, timeout=10)
    seen = []

    def fake_run_class(url, server_pid, text_for, text_only, students, seconds, every, **kw):
        seen.append((url, server_pid, text_for, text_only, students, seconds, kw))
        barrier.wait()  # broken (BrokenBarrierError after 10 s) if the other class is not running now
        return {"url": url}

    def sentences(i, n):
        return f"s{i}-{n}"

    from types import SimpleNamespace

    servers = {"gptviz": (SimpleNamespace(pid=11), "http://a", {"page": "attention"}),
               "one-chart app": (SimpleNamespace(pid=12), "http://b", {"page": ""})}
    results: dict = {}
    c.side_by_side(servers, results, sentences, fake_run_class)
    assert results == {"gptviz": {"url": "http://a"}, "one-chart app": {"url": "http://b"}}
    assert sorted((u, p, k["page"]) for u, p, _, _, _, _, k in seen) == [("http://a", 11, "attention"),
                                                                         ("http://b", 12, "")]
    assert all(t is sentences and only and n == c.CPU_CLASS["students"] and secs == c.CPU_CLASS["seconds"]
               for _, _, t, only, n, secs, _ in seen)

    def failing(url, **kw):
        raise RuntimeError(f"no server at {url}")

    with pytest.raises(RuntimeError, match="no server at"):
        c.side_by_side(servers, {}, sentences, failing)


def test_joining_a_server_that_just_started_checks_every_first_view():
    ok = c.joining_row(result(students=60, seconds=0.0, view_max=2.8, n=0), 10.0)
    assert ok["ok"] is True and "started 10 s before" in ok["figure"] and "cold server" in ok["figure"]
    assert c.joining_row(result(students=60, seconds=0.0, view_max=3.4, n=0), 10.0)["ok"] is False


def test_students_type_new_sentences_of_30_to_60_characters():
    from tools.load.student import sentence

    texts = [sentence(n) for n in range(3000)]
    assert len(set(texts)) == 3000 and {len(t) for t in texts} == set(range(30, 61))
    assert all(t.endswith(".") and "  " not in t for t in texts)
    assert {len(sentence(n, 40, 41)) for n in range(50)} == {40, 41}


def test_two_replicas_report_both_replicas_cpu_and_their_own_goal():
    from tools.bench import replicas_class as rc

    window = {"replicas": 31.5, "redis": 0.25, "haproxy": 1.5, "others": 2.0, "client": 4.0, "machine": 39.25}
    r = rc.with_replicas_cpu(result(students=200, seconds=30.0, p95=0.9), window)
    assert r["cpu"]["server_cpu_s"] == 31.5 and r["cpu"]["other_processes_cpu_s"] == 3.75
    rows = c.sweep_rows([r], goal_students=rc.GOAL_REPLICAS, where="2 replicas behind HAProxy")
    assert rows[-1]["ok"] is True and rows[-1]["goal"] == "≥ 200 students"
    assert "2 replicas behind HAProxy" in rows[0]["figure"] and "server 31.50" in rows[0]["value"]
    assert c.sweep_rows([result(students=150, seconds=30.0, p95=0.9)], goal_students=200)[-1]["ok"] is False
