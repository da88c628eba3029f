"""Torch's threads per run (gptviz.perf, issue 37): one for a small model, every core for a big one, chosen in the
script's own thread so that one session's choice leaves another's run alone."""
import os
import threading

import pytest
import torch
from apphelp import ok, page

import gptviz.ui.page as page_module
from gptviz.perf import threads_for, use_threads


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def test_a_small_model_gets_one_thread_and_a_big_one_every_core(monkeypatch):
    monkeypatch.delenv("GPTVIZ_TORCH_THREADS", raising=False)
    assert [threads_for(n, cores=2) for n in (1, 853_248, 20_000_000)] == [1, 1, 1]
    assert [threads_for(n, cores=c) for n, c in ((20_000_001, 2), (124_439_808, 8), (596_049_920, 1))] == [2, 8, 1]


def test_a_big_model_gets_the_cores_the_machine_says_it_has(monkeypatch):
    monkeypatch.delenv("GPTVIZ_TORCH_THREADS", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    assert threads_for(124_439_808) == 4
    monkeypatch.setattr(os, "cpu_count", lambda: None)  # a platform that cannot tell: one
    assert threads_for(124_439_808) == 1
    monkeypatch.setenv("GPTVIZ_TORCH_THREADS", "1")  # the environment's count holds for a big model too
    assert threads_for(124_439_808, cores=8) == 1


@pytest.mark.parametrize("raw, want", [("3", 3), (" 1 ", 1), ("64", 64), ("0", 1), ("65", 1), ("-2", 1), ("two", 1),
                                       ("", 1), ("2.5", 1)])
def test_the_environment_sets_the_count_only_from_1_to_64(monkeypatch, raw, want):
    monkeypatch.setenv("GPTVIZ_TORCH_THREADS", raw)
    assert threads_for(853_248, cores=2) == want


def test_the_count_is_the_calling_threads_own(two_threads):
    """A session's run that sets one thread does not change the count of a run already going in another thread,
    nor the main thread's. (Without ``use_threads``'s first call, the running run took the small model's count.)"""
    seen: dict[str, int] = {}
    started, set_elsewhere = threading.Event(), threading.Event()

    def running_run():
        use_threads(2)  # as page_setup does at the start of every run
        started.set()
        set_elsewhere.wait(10)
        seen["other run"] = torch.get_num_threads()

    def small_model_run():
        use_threads(1)
        seen["small model's run"] = torch.get_num_threads()

    other = threading.Thread(target=running_run)
    other.start()
    started.wait(10)
    t = threading.Thread(target=small_model_run)
    t.start()
    t.join(10)
    set_elsewhere.set()
    other.join(10)
    assert seen == {"small model's run": 1, "other run": 2}
    assert torch.get_num_threads() == 2


def test_a_page_on_a_small_model_runs_on_one_thread(monkeypatch, two_threads):
    """Inside a page's run (Streamlit's script thread), after ``page_setup``: the count torch reports there."""
    monkeypatch.delenv("GPTVIZ_TORCH_THREADS", raising=False)
    seen: list[int] = []
    sidebar = page_module.sidebar

    def watching(s):
        seen.append(torch.get_num_threads())
        return sidebar(s)

    monkeypatch.setattr(page_module, "sidebar", watching)
    ok(page("attention", opening=True))
    monkeypatch.setenv("GPTVIZ_TORCH_THREADS", "2")
    ok(page("attention", opening=True))
    assert seen == [1, 2]
