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
    runs = [result(students=30, seconds=30.0, p95=0.4), result(students=45, seconds=30.0, p95=0.8),
            result(students=60, seconds=30.0, p95=1.3)]
    assert [c.sweep_should_stop(r) for r in runs] == [False, False, True]
    rows = c.sweep_rows(runs, note="--quick: 15 s, not 30 s")
    assert len(rows) == 4 and all(r["ok"] is None for r in rows[:3])
    assert rows[-1]["ok"] is True and rows[-1]["value"].startswith("45 students met")
    assert "--quick" in rows[0]["figure"] and exit_status(rows) == 0
    none_met = c.sweep_rows([result(students=30, seconds=30.0, p95=1.2)])
    assert none_met[-1]["ok"] is False and "no class met it" in none_met[-1]["value"]
    failing = c.sweep_rows([result(students=30, seconds=30.0, failures=["1 of 30 students never got a first view"])])
    assert failing[0]["why"] and failing[-1]["ok"] is False and exit_status(failing) == 2
