"""The app's traces run in a few long-lived worker threads (gptviz.perf.in_worker), never in the script run's own new
thread: results and errors come back to the caller, the caller's torch thread count goes with the work, a job that
asks for a worker from inside one runs where it is, and every page trace goes through them."""
import threading

import numpy as np
import pytest
import torch

from gptviz import perf
from gptviz.perf import in_worker, use_threads, worker_count


def _in_new_thread(fn):
    out = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            out["error"] = exc

    t = threading.Thread(target=run)
    t.start()
    t.join(timeout=60)
    if "error" in out:
        raise out["error"]
    return out["value"], t.ident


def test_a_result_and_an_error_come_back_to_the_caller():
    assert in_worker(lambda a, b=0: a * 10 + b, 4, b=2) == 42
    with pytest.raises(ValueError, match="no such step"):
        in_worker(lambda: (_ for _ in ()).throw(ValueError("no such step")))


def test_new_threads_share_the_same_few_long_lived_workers():
    """Six script runs, each a new thread (as Streamlit makes them), get their work done by at most worker_count()
    threads, which outlive them."""
    seen = set()
    for _ in range(6):
        (ident, name), _ = _in_new_thread(
            lambda: in_worker(lambda: (threading.get_ident(), threading.current_thread().name)))
        seen.add(ident)
        assert name.startswith("gptviz-trace")
    assert 1 <= len(seen) <= worker_count()
    alive = {t.ident for t in threading.enumerate()}
    assert seen <= alive


@pytest.mark.parametrize("n", [1, 2])
def test_the_callers_torch_thread_count_goes_with_the_work(n):
    before = torch.get_num_threads()
    try:
        def ask():
            use_threads(n)
            return in_worker(torch.get_num_threads)

        assert _in_new_thread(ask)[0] == n
    finally:
        torch.set_num_threads(before)


def test_a_job_asking_for_a_worker_runs_where_it_is_even_with_every_worker_busy():
    k = worker_count()
    gate = threading.Barrier(k, timeout=20)

    def outer():
        gate.wait()  # every worker holds a job now
        return threading.get_ident(), in_worker(threading.get_ident)

    results = []
    threads = [threading.Thread(target=lambda: results.append(in_worker(outer))) for _ in range(k)]
    [t.start() for t in threads]
    [t.join(timeout=30) for t in threads]
    assert len(results) == k and all(a == b for a, b in results)


def test_worker_count_is_one_a_core_and_at_least_two():
    assert worker_count(1) == 2 and worker_count(2) == 2 and worker_count(8) == 8


def test_every_page_trace_is_computed_in_a_worker(monkeypatch):
    """resources._compute_trace finds the model in the caller's thread and traces it in a worker."""
    from gptviz.config import preset
    from gptviz.present.page_context import config_json
    from gptviz.run import edits
    from gptviz.ui import resources

    where = []
    real = resources.trace_for_view
    monkeypatch.setattr(resources, "trace_for_view",
                        lambda *a, **k: where.append(threading.current_thread().name) or real(*a, **k))
    cfg = preset("default", vocab_size=40)
    tr, _ = _in_new_thread(lambda: resources._compute_trace(
        config_json(cfg), None, ((1, 2, 3, 4),), ((2, 3, 4, -100),), None, edits.spec_key(None), False))
    assert len(where) == 1 and where[0].startswith("gptviz-trace")
    logits = torch.as_tensor(tr["hook_logits"])
    with torch.no_grad():
        want, _ = resources.model_for(config_json(cfg))(torch.tensor([[1, 2, 3, 4]]))
    assert torch.allclose(logits, want, atol=1e-6)
    assert perf._pool is not None
    assert not np.asarray(tr["hook_logits"]).flags.writeable  # shared by every session: read-only


def test_the_pool_never_runs_more_threads_than_worker_count():
    """worker_count() + 3 jobs at once, each holding its thread a moment: at most worker_count() threads ran them."""
    import time

    k = worker_count()
    ran, started = [], []

    def job():
        ran.append(in_worker(lambda: time.sleep(0.2) or threading.get_ident()))

    threads = [threading.Thread(target=job) for _ in range(k + 3)]
    [t.start() or started.append(t) for t in threads]
    [t.join(timeout=30) for t in threads]
    assert len(ran) == k + 3 and len(set(ran)) <= k


def test_a_nested_job_gets_its_arguments():
    assert in_worker(lambda: in_worker(lambda a, b=0: a * 10 + b, 4, b=2)) == 42


def test_worker_count_follows_the_machines_cores(monkeypatch):
    import os

    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    assert worker_count() == 8
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    assert worker_count() == 2
