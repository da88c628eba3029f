"""The byte-bounded cache (gptviz.run.byte_cache) at its edges: sizes summed by hand from dtypes and shapes (itemsize
× element count, each object once), and budgets met exactly, exceeded by one byte, shrunk and grown, with the
evictions an oldest-first queue written out here predicts."""
import threading

import numpy as np
import torch

from gptviz.run.byte_cache import ByteLRU, nbytes


class Holder:
    """An object with a ``__dict__`` (as a Trace is): its attributes' arrays count."""

    def __init__(self, **kw):
        self.__dict__.update(kw)


class WithClassArray:
    """A class (not an instance) holding an array: a type's attributes are not the value's own bytes."""

    table = np.zeros(100, dtype=np.float64)


def test_a_module_counts_its_parameters_and_its_buffers():
    """BatchNorm1d(3): weight and bias (parameters) and running_mean and running_var (buffers) of 3 float32 each,
    plus num_batches_tracked, one int64: 4 · 3 · 4 + 8 bytes."""
    assert nbytes(torch.nn.BatchNorm1d(3)) == 4 * 3 * 4 + 8


def test_an_objects_attributes_count_but_a_class_and_plain_values_count_nothing():
    a = np.ones((3, 5), dtype=np.int16)  # 30 bytes
    t = torch.ones(7, dtype=torch.float16)  # 14 bytes
    assert nbytes(Holder(a=a, t=t, note="text", n=5, cls=WithClassArray)) == 30 + 14
    assert nbytes(WithClassArray) == 0
    for plain in ("a string", 12, 3.5, None, b"bytes"):
        assert nbytes(plain) == 0


def test_a_tuple_a_cycle_and_shared_arrays_are_counted_once_each():
    a = np.zeros(10, dtype=np.float32)  # 40 bytes
    b = torch.zeros(3, 4, dtype=torch.int32)  # 48 bytes
    assert nbytes((a, a, b)) == 40 + 48
    d: dict = {"a": a}
    d["self"] = d  # a cycle: walked once, no endless recursion
    d["more"] = [b, (a, b)]
    assert nbytes(d) == 40 + 48
    assert nbytes(b[1]) == 4 * 4  # a view: its own elements, not its base's


def test_the_name_and_total_and_a_missing_keys_default():
    cache = ByteLRU(100.9, "traces", size_of=len)
    assert cache.name == "traces" and cache.budget == 100 and cache.total == 0
    assert cache.get("none") is None and cache.get("none", "fallback") == "fallback"


def test_an_entry_exactly_the_budget_is_kept_and_one_byte_more_is_not():
    cache = ByteLRU(10, "t", size_of=len)
    assert cache.put("x", "x" * 3)
    assert cache.put("full", "f" * 10)  # exactly the budget: kept, the others give way
    assert cache.keys() == ["full"] and cache.total == 10
    assert not cache.put("over", "o" * 11)
    assert cache.keys() == ["full"] and cache.total == 10 and cache.get("over") is None


def test_entries_that_fill_the_budget_exactly_all_stay():
    cache = ByteLRU(12, "t", size_of=len)
    for k in "abc":
        assert cache.put(k, k * 4)
    assert cache.keys() == ["a", "b", "c"] and cache.total == 12
    assert cache.put("d", "d")  # one byte over: the least recently used goes, and only it
    assert cache.keys() == ["b", "c", "d"] and cache.total == 9


def test_storing_a_key_again_replaces_its_size_and_makes_it_the_most_recent():
    cache = ByteLRU(20, "t", size_of=len)
    cache.put("a", "a" * 5)
    cache.put("b", "b" * 5)
    assert cache.put("a", "A" * 8)
    assert cache.keys() == ["b", "a"] and cache.total == 13 and cache.get("a") == "A" * 8
    # a replacement over the whole budget is refused, and the old value under that key is not served any more
    assert not cache.put("a", "A" * 21)
    assert cache.keys() == ["b"] and cache.total == 5 and cache.get("a") is None


def test_a_value_grown_to_exactly_the_budget_evicts_nothing_and_one_more_evicts_the_oldest():
    """The oracle: an oldest-first queue with sizes; a use re-measures the used value and, while the total is over
    the budget, drops the oldest other entry (never the one in use)."""
    cache = ByteLRU(30, "t", size_of=len)
    a, b, c = [0] * 5, [0] * 5, [0] * 5
    cache.put("a", a)
    cache.put("b", b)
    cache.put("c", c)
    c.extend([0] * 15)  # 5 + 5 + 20 = 30: the budget exactly
    assert cache.get("c") is c and cache.total == 30 and cache.keys() == ["a", "b", "c"]
    c.append(0)  # 31: a (the oldest) goes, b stays
    assert cache.get("c") is c and cache.total == 26 and cache.keys() == ["b", "c"]
    c.extend([0] * 30)  # 56: b goes; c alone, over the budget, stays
    assert cache.get_or_compute("c", lambda: None) is c and cache.total == 51 and cache.keys() == ["c"]


def test_a_value_that_shrank_frees_its_bytes_when_next_used():
    cache = ByteLRU(100, "t", size_of=len)
    v = [0] * 40
    cache.put("v", v)
    cache.put("w", [0] * 10)
    del v[10:]
    assert cache.total == 50
    assert cache.get("v") is v and cache.total == 20 and cache.keys() == ["w", "v"]


def test_clear_empties_the_cache_and_its_total():
    cache = ByteLRU(100, "t", size_of=len)
    cache.put("a", "a" * 30)
    cache.put("b", "b" * 30)
    cache.clear()
    assert cache.keys() == [] and cache.total == 0 and cache.get("a") is None
    assert cache.put("c", "c" * 100) and cache.total == 100  # the whole budget is free again


def test_get_or_compute_stores_what_it_computed_and_reuses_it():
    cache = ByteLRU(100, "t", size_of=len)
    calls = []

    def compute():
        calls.append(1)
        return "v" * 7

    assert cache.get_or_compute("k", compute) == "v" * 7
    assert cache.get_or_compute("k", compute) == "v" * 7
    assert calls == [1] and cache.keys() == ["k"] and cache.total == 7


def test_a_waiting_caller_computes_it_itself_when_the_first_caller_failed():
    """Thread 1 starts computing and fails; thread 2, which waited on it, then computes the value itself."""
    cache = ByteLRU(100, "t", size_of=len)
    started, release, results = threading.Event(), threading.Event(), []

    def failing():
        started.set()
        release.wait(5)
        raise RuntimeError("first one failed")

    def first():
        try:
            cache.get_or_compute("k", failing)
        except RuntimeError as e:
            results.append(str(e))

    t1 = threading.Thread(target=first)
    t1.start()
    started.wait(5)
    t2 = threading.Thread(target=lambda: results.append(cache.get_or_compute("k", lambda: "second")))
    t2.start()
    release.set()
    t1.join(5)
    t2.join(5)
    assert sorted(results) == ["first one failed", "second"] and cache.get("k") == "second"
