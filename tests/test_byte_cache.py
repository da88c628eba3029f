"""The byte-bounded cache (gptviz.run.byte_cache): sizes and evictions worked out by hand."""
import threading

import numpy as np
import torch

from gptviz.run.byte_cache import ByteLRU, nbytes


def test_sizes_are_the_arrays_and_tensors_bytes():
    assert nbytes(np.zeros((10, 10), dtype=np.float32)) == 400
    assert nbytes(torch.zeros(5, dtype=torch.float64)) == 40
    assert nbytes(torch.nn.Linear(3, 2)) == (3 * 2 + 2) * 4
    a = np.zeros(8, dtype=np.int64)
    assert nbytes({"x": a, "y": [a, torch.zeros(2)]}) == 64 + 8  # the same array counted once


def test_the_least_recently_used_goes_first_and_the_budget_holds():
    cache = ByteLRU(100, "t", size_of=len)
    assert cache.put("A", "a" * 40) and cache.put("B", "b" * 40)
    cache.get("A")  # A is used: B is now the least recently used
    cache.put("C", "c" * 40)  # 120 > 100: one must go, and it is B
    assert cache.keys() == ["A", "C"] and cache.total == 80
    assert cache.get("B") is None


def test_an_entry_over_the_whole_budget_is_returned_but_not_kept():
    cache = ByteLRU(100, "t", size_of=len)
    cache.put("A", "a" * 60)
    assert cache.get_or_compute("big", lambda: "x" * 101) == "x" * 101
    assert cache.keys() == ["A"] and cache.total == 60  # nothing evicted for it either


def test_many_threads_asking_for_one_key_compute_it_once():
    cache = ByteLRU(10_000, "t", size_of=len)
    calls, gate = [], threading.Event()

    def compute():
        calls.append(1)
        gate.wait(2)
        return "v" * 10

    out = []
    threads = [threading.Thread(target=lambda: out.append(cache.get_or_compute("k", compute))) for _ in range(8)]
    for t in threads:
        t.start()
    gate.set()
    for t in threads:
        t.join(5)
    assert calls == [1] and out == ["v" * 10] * 8


def test_a_failed_computation_is_not_kept_and_the_next_caller_tries_again():
    cache = ByteLRU(100, "t", size_of=len)

    def boom():
        raise RuntimeError("no")

    try:
        cache.get_or_compute("k", boom)
    except RuntimeError:
        pass
    assert cache.get_or_compute("k", lambda: "ok") == "ok"
