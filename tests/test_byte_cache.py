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


def test_a_value_that_grew_is_counted_again_when_next_used():
    """A value may grow after it is stored (a slim trace keeps what it worked out): its next use counts it anew, and
    the least recently used others give way; a value grown past the whole budget alone stays (it is in use)."""
    cache = ByteLRU(100, "t", size_of=len)
    cache.put("a", [0] * 30)
    cache.put("b", [0] * 30)
    grown = cache.get("b")
    grown.extend([0] * 50)  # b is now 80
    assert cache.total == 60  # not seen yet
    assert cache.get("b") is grown and cache.total == 80 and cache.keys() == ["b"]  # a (30) gave way
    grown.extend([0] * 40)
    assert cache.get_or_compute("b", lambda: None) is grown and cache.total == 120 and cache.keys() == ["b"]


def test_a_slim_traces_worked_out_steps_are_counted():
    """On a slim trace, reading a worked-out step (here the (B, T, vocab) probabilities) keeps it in the trace's
    memo; the cache counts those bytes the next time the trace is used."""
    import torch

    from gptviz import GPT, ModelConfig, trace

    cfg = ModelConfig(vocab_size=500, block_size=64, n_layer=1, n_head=2, n_embd=16)
    idx = torch.randint(0, 500, (1, 64), generator=torch.Generator().manual_seed(0))
    y = torch.roll(idx, -1, 1)
    tr = trace(GPT(cfg), idx, targets=y, slim=True).numpy().freeze()
    cache = ByteLRU(10**9, "t")
    cache.put("k", tr)
    before = cache.total
    probs = tr["hook_probs"]
    assert cache.get("k") is tr and cache.total == before + probs.nbytes == nbytes(tr)


def test_a_value_is_measured_again_only_when_its_size_version_changed():
    """Measuring a trace walks its ~1,000 arrays, so a hit measures a value again only when its ``size_version``
    changed since it was last measured (or when it has none, as above)."""
    class Box(list):
        size_version = 0

    calls = []

    def size_of(v):
        calls.append(1)
        return len(v)

    cache = ByteLRU(100, "t", size_of=size_of)
    box = Box([0] * 10)
    cache.put("k", box)
    box.extend([0] * 5)  # grew, but said nothing
    for _ in range(3):
        assert cache.get("k") is box and cache.total == 10
    assert len(calls) == 1
    box.size_version = 7
    assert cache.get("k") is box and cache.total == 15 and len(calls) == 2
    assert cache.get_or_compute("k", lambda: None) is box and len(calls) == 2
    box.extend([0] * 90)
    box.size_version = 8  # 105 bytes: over the budget, but in use, so it stays alone
    cache.put("other", Box([0] * 1))
    assert cache.get("k") is box and cache.total == 105 and cache.keys() == ["k"] and len(calls) == 4


def test_a_slim_traces_size_follows_its_memo_past_the_memos_cap():
    """The memo keeps the last four worked-out steps: a fifth replaces the oldest, the memo's length stays 4, and
    the cache still counts exactly the bytes the trace holds (``nbytes``, the walk) after every step read."""
    import torch

    from gptviz import GPT, ModelConfig, trace

    cfg = ModelConfig(vocab_size=300, block_size=32, n_layer=2, n_head=2, n_embd=16)
    idx = torch.randint(0, 300, (2, 32), generator=torch.Generator().manual_seed(1))
    tr = trace(GPT(cfg), idx, targets=torch.roll(idx, -1, 1), slim=True).numpy().freeze()
    from gptviz.run.on_demand import OnDemand

    lazy = [n for n in tr if isinstance(tr._acts[n], OnDemand)]
    assert len(lazy) >= 6
    cache = ByteLRU(10**9, "t")
    cache.put("k", tr)
    for name in lazy[:6] + lazy[:2]:
        tr[name]
        assert cache.get("k") is tr and cache.total == nbytes(tr), name
    assert len(tr._memo) == tr._MEMO


def test_an_entry_evicted_or_replaced_leaves_no_version_behind():
    """A server runs for days and every key holds a text's token ids: the versions kept for measuring are those of
    the entries held, never of one evicted (by a put or by a value that grew) or replaced."""
    class Box(list):
        size_version = 0

    cache = ByteLRU(100, "t", size_of=len)
    boxes = {k: Box([0] * 30) for k in "abcde"}
    for k, v in boxes.items():
        cache.put(k, v)  # a and b are evicted on the way
        assert set(cache._versions) == set(cache.keys())
    cache.put("e", Box([0] * 10))  # replaced
    grown = cache.get("d")
    grown.extend([0] * 60)
    grown.size_version = 1
    assert cache.get("d") is grown and cache.keys() == ["e", "d"]  # c gave way to d's growth
    assert set(cache._versions) == {"e", "d"}
    assert cache.put("e", Box([0] * 200)) is False  # replaced by a value over the whole budget: not kept
    assert cache.keys() == ["d"] and set(cache._versions) == {"d"}


def test_a_slim_trace_is_measured_once_after_each_step_it_works_out():
    """The point of ``size_version``: hits on a trace measure it only on the first hit after it worked a step out."""
    import torch

    from gptviz import GPT, ModelConfig, trace

    cfg = ModelConfig(vocab_size=300, block_size=32, n_layer=1, n_head=2, n_embd=16)
    idx = torch.randint(0, 300, (1, 32), generator=torch.Generator().manual_seed(2))
    tr = trace(GPT(cfg), idx, targets=torch.roll(idx, -1, 1), slim=True).numpy().freeze()
    calls = []

    def size_of(v):
        calls.append(1)
        return nbytes(v)

    cache = ByteLRU(10**9, "t", size_of=size_of)
    cache.put("k", tr)
    cache.get("k"), cache.get("k")
    assert len(calls) == 1
    tr["hook_probs"]
    cache.get("k"), cache.get("k"), cache.get_or_compute("k", lambda: None)
    assert len(calls) == 2 and cache.total == nbytes(tr)
