"""gptviz.interp.neuron_jobs (the background computation shared by every session) and gptviz.interp.neuron_store
(the ``*.neurons.npz`` files), checked without the real computation where it does not matter: ``compute`` replaced
by a stand-in that records what it was given and reports progress as told, slots replaced by a stand-in that says
"2 ahead" once. The files are read back with plain ``numpy.load`` and the fingerprint recomputed with ``hashlib``
as its docstring describes (names, shapes and raw bytes of every parameter, in order)."""
import hashlib
import threading
import time
import weakref
from collections import OrderedDict
from contextlib import contextmanager

import numpy as np
import pytest
import torch

from gptviz import GPT, ModelConfig
from gptviz.interp import neuron_jobs, neuron_store, neurons
from gptviz.run.slots import BIG_LOAD


def made_stats(meta=None, top_pos=None):
    """A small hand-made summary: 2 layers, 3 neurons, k 2, 4 bins, over 2 windows of 5 tokens."""
    rng = np.random.default_rng(0)
    return neurons.NeuronStats(
        windows=rng.integers(0, 300, size=(2, 5)).astype(np.int32),
        top_pos=np.array(top_pos if top_pos is not None else rng.integers(0, 10, size=(2, 3, 2)), dtype=np.int32),
        top_val=rng.normal(size=(2, 3, 2)).astype(np.float32),
        hist=rng.integers(0, 9, size=(2, 3, 4)).astype(np.int32),
        hist_lo=rng.normal(size=(2, 3)), hist_hi=rng.normal(size=(2, 3)) + 5, meta=dict(meta or {"model": "m"}))


# -------------------------------------------------------------------------------------------------- the jobs
@pytest.fixture
def fresh(monkeypatch):
    """An empty job table and stop flag of this test's own (the app's are left alone)."""
    monkeypatch.setattr(neuron_jobs, "_JOBS", OrderedDict())
    monkeypatch.setattr(neuron_jobs, "_STOP", threading.Event())
    return neuron_jobs


class FakeCompute:
    """Stands in for ``neurons.compute``: records its call and the job's state then, reports ``fractions``, and
    returns a summary, raises ``error``, or waits for ``go`` first."""

    def __init__(self, fractions=(), error=None, go=None):
        self.fractions, self.error, self.go = fractions, error, go
        self.calls, self.states = [], []
        self.job = None

    def __call__(self, model, tok, n_tokens, progress=None):
        self.calls.append((model, tok, n_tokens))
        if self.job is not None:
            self.states.append(self.job.state)
        if self.go is not None:
            while not self.go.wait(0.01):
                progress(0.5)  # a stopping server raises here
        for f in self.fractions:
            progress(f)
        if self.error is not None:
            raise self.error
        return made_stats()


def load():
    """A model's stand-in, given when a job may run."""
    return "m"


def test_a_new_job_is_queued_with_nothing_yet():
    job = neuron_jobs.NeuronJob(lambda: "model", "tok", "64")
    assert (job.n_tokens, job.state, job.progress, job.ahead, job.result, job.error) == (64, "queued", 0.0, 0, None,
                                                                                        "")
    assert not job.finished and job.wait(0.01) is False
    assert job._thread.daemon and job._thread.name == "gptviz-neurons"


def test_a_job_passes_its_model_and_tokens_and_keeps_a_read_only_result(fresh, monkeypatch):
    fake = FakeCompute(fractions=[0.25, 0.1, 0.6])
    monkeypatch.setattr(neuron_jobs, "compute", fake)
    job = neuron_jobs.NeuronJob(lambda: "model", "tok", 321)
    fake.job = job
    assert job.start() is job
    assert job.wait(10) is True and job.finished
    assert fake.calls == [("model", "tok", 321)] and fake.states == ["running"]
    assert (job.state, job.progress, job.error) == ("done", 1.0, "")
    for name in ("windows", "top_pos", "top_val", "hist", "hist_lo", "hist_hi"):
        arr = getattr(job.result, name)
        assert not arr.flags.writeable, name
        with pytest.raises(ValueError):
            arr.flat[0] = 1


def test_progress_only_grows_and_stops_at_one(fresh):
    job = neuron_jobs.NeuronJob(None, None, 1)
    job._tell(0.3)
    job._tell(0.2)
    assert job.progress == 0.3
    job._tell(1.0)
    assert job.progress == 1.0
    job.progress = 0.0
    job._tell(1.7)
    assert job.progress == 1.0


def test_a_stopping_server_stops_a_job_at_its_next_report(fresh):
    job = neuron_jobs.NeuronJob(None, None, 1)
    fresh._STOP.set()
    with pytest.raises(neuron_jobs.Stopped, match="^the server is stopping$"):
        job._tell(0.5)
    assert job.progress == 0.0


@pytest.mark.parametrize("error, shown", [(ValueError("This model has no MLP."), "This model has no MLP."),
                                          (RuntimeError("out of memory"), "RuntimeError: out of memory")])
def test_a_failed_job_says_why_and_keeps_the_progress_it_made(fresh, monkeypatch, error, shown):
    """A ValueError is a sentence for the user, shown as is; anything else is shown with its type."""
    monkeypatch.setattr(neuron_jobs, "compute", FakeCompute(fractions=[0.4], error=error))
    job = neuron_jobs.NeuronJob(lambda: "m", "t", 8).start()
    assert job.wait(10)
    assert (job.state, job.error, job.progress, job.result) == ("failed", shown, 0.4, None)


def test_a_job_holding_slots_waits_its_turn_then_runs(fresh, monkeypatch):
    """Slots that tell the job "2 runs ahead" once before letting it in: the job waits (state and place seen from
    inside the slot's wait), then runs inside the slot, which it leaves when done."""
    fake = FakeCompute(fractions=[0.5])
    monkeypatch.setattr(neuron_jobs, "compute", fake)
    seen = []

    class Slots:
        @contextmanager
        def hold(self, on_wait=None):
            on_wait(2)
            seen.append((job.state, job.ahead))
            seen.append("in")
            yield True
            seen.append("out")

    job = neuron_jobs.NeuronJob(lambda: "m", "t", 8, Slots())
    fake.job = job
    job.start().wait(10)
    assert seen == [("waiting", 2), "in", "out"] and fake.states == ["running"] and job.state == "done"


def test_one_job_per_key_and_a_big_model_queues_for_the_big_load_slot(fresh, monkeypatch):
    """A model of exactly BIG_MODEL_PARAMS (20,000,000) parameters runs at once; one more waits for BIG_LOAD.
    The same key gives the same job (the tokens asked the second time are ignored)."""
    monkeypatch.setattr(neuron_jobs, "compute", FakeCompute())
    assert neuron_jobs.BIG_MODEL_PARAMS == 20_000_000 and neuron_jobs.APP_TOKENS == 4096
    small = neuron_jobs.job_for("small", load, "t", 10, params=20_000_000)
    big = neuron_jobs.job_for("big", load, "t", params=20_000_001)
    assert small._slots is None and big._slots is BIG_LOAD
    assert (small.n_tokens, big.n_tokens) == (10, 4096)
    assert neuron_jobs.job_for("small", load, "t", 99, params=1) is small
    assert neuron_jobs.existing("small") is small and neuron_jobs.existing("nobody") is None
    assert small.wait(10) and big.wait(10)


def test_the_table_forgets_the_least_recently_asked_finished_job_first(fresh, monkeypatch):
    """MAX_JOBS = 8: a ninth job pushes out the finished job asked for least recently (asking again moves a job to
    the back); a running job is never dropped (and with MAX_UNFINISHED = 8 no ninth one starts)."""
    monkeypatch.setattr(neuron_jobs, "compute", FakeCompute())
    assert neuron_jobs.MAX_JOBS == 8
    jobs = [neuron_jobs.job_for(i, load, "t", 1, params=1) for i in range(8)]
    assert all(j.wait(10) for j in jobs)
    neuron_jobs.job_for(0, load, "t", params=1)  # 0 asked again: 1 is now the oldest
    neuron_jobs.job_for(8, load, "t", params=1).wait(10)
    assert list(neuron_jobs._JOBS) == [2, 3, 4, 5, 6, 7, 0, 8]
    neuron_jobs.job_for(9, load, "t", params=1).wait(10)
    assert list(neuron_jobs._JOBS) == [3, 4, 5, 6, 7, 0, 8, 9]
    go = threading.Event()
    monkeypatch.setattr(neuron_jobs, "compute", FakeCompute(go=go))
    try:
        fresh._JOBS.clear()
        running = [neuron_jobs.job_for(("r", i), load, "t", params=1) for i in range(8)]
        assert len(neuron_jobs._JOBS) == 8 and not any(j.finished for j in running)
        done_late = neuron_jobs.job_for(("r", 0), load, "t", params=1)
        assert done_late is running[0]
    finally:
        go.set()
    assert all(j.wait(10) for j in running)


def test_forget_drops_only_a_finished_job(fresh, monkeypatch):
    go = threading.Event()
    monkeypatch.setattr(neuron_jobs, "compute", FakeCompute(go=go))
    job = neuron_jobs.job_for("k", load, "t", params=1)
    neuron_jobs.forget("k")
    assert neuron_jobs.existing("k") is job  # still running: kept
    go.set()
    assert job.wait(10)
    neuron_jobs.forget("k")
    assert neuron_jobs.existing("k") is None
    neuron_jobs.forget("k")  # forgetting twice is harmless
    assert neuron_jobs.job_for("k", load, "t", params=1) is not job  # asked again: a new computation


def test_waiting_until_idle_waits_for_every_running_job_and_no_longer_than_asked(fresh, monkeypatch):
    """Two jobs held until told to go on: ``wait_idle`` gives up after its timeout while they run, and
    returns True once both have ended; an empty table is idle at once."""
    assert neuron_jobs.wait_idle(0.0) is True
    go = threading.Event()
    monkeypatch.setattr(neuron_jobs, "compute", FakeCompute(go=go))
    first = neuron_jobs.job_for("first", load, "t", params=1)
    second = neuron_jobs.job_for("second", load, "t", params=1)
    started = time.monotonic()
    assert neuron_jobs.wait_idle(0.05) is False
    assert 0.05 <= time.monotonic() - started < 0.6  # no longer than asked (and its share of scheduling)
    assert not first.finished and not second.finished
    threading.Timer(0.2, go.set).start()
    assert neuron_jobs.wait_idle(10) is True
    assert (first.state, second.state) == ("done", "done")
    assert neuron_jobs.wait_idle(0.0) is True


def test_at_exit_the_running_jobs_stop_after_their_current_pass_and_are_waited_for(fresh, monkeypatch):
    """A job that reports progress until told to stop: ``_stop_all`` sets the stop flag and joins its thread, so
    when it returns the job has ended, failed with Stopped."""
    monkeypatch.setattr(neuron_jobs, "compute", FakeCompute(go=threading.Event()))  # never told to go on
    job = neuron_jobs.job_for("k", load, "t", params=1)
    neuron_jobs._stop_all(timeout=10)
    assert fresh._STOP.is_set()
    assert not job._thread.is_alive()
    assert (job.state, job.error) == ("failed", "Stopped: the server is stopping")
    neuron_jobs._stop_all(timeout=10)  # a finished job: nothing to wait for


def test_the_real_computation_runs_in_the_background(fresh):
    """Not faked: a tiny model's job equals neurons.compute run here."""
    from gptviz.text import corpus

    torch.manual_seed(0)
    tok = corpus.tokenizer()
    model = GPT(ModelConfig(vocab_size=tok.vocab_size, block_size=16, n_layer=1, n_head=2, n_embd=8))
    job = neuron_jobs.job_for("real", weakref.ref(model), tok, 64, params=model.config.num_params())
    assert job.wait(60) and job.state == "done", job.error
    want = neurons.compute(model, tok, 64)
    for a in neuron_store.ARRAYS:
        np.testing.assert_array_equal(getattr(job.result, a), getattr(want, a))


# ------------------------------------------------------------------------------------------------- the files
def test_a_shipped_summary_is_named_by_a_plain_name_only(monkeypatch):
    ok = ["shakespeare", "a", "A-b_9", "x" * 64, "9lives"]
    for name in ok:
        assert neuron_store.path_for(name) == neuron_store.CHECKPOINTS / f"{name}.neurons.npz"
    for name in ["", "x" * 65, "-a", "_a", "../etc", "a/b", "a.b", "a b", "shakespeare\n", None, 3]:
        with pytest.raises(ValueError) as err:
            neuron_store.path_for(name)
        assert str(err.value) == "a shipped checkpoint is named by a plain name such as 'shakespeare'"


def hand_fingerprint(model):
    """sha256 over (name, str(shape), raw bytes) of every state_dict entry in order; the first 16 hex digits."""
    h = hashlib.sha256()
    for name, t in model.state_dict().items():
        raw = t.detach().contiguous().view(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        h.update(name.encode() + str(tuple(t.shape)).encode() + raw)
    return h.hexdigest()[:16]


def test_the_fingerprint_names_every_parameter_its_shape_and_its_bytes():
    torch.manual_seed(0)
    model = GPT(ModelConfig(vocab_size=20, block_size=8, n_layer=1, n_head=2, n_embd=8))
    fp = neuron_store.fingerprint(model)
    assert fp == hand_fingerprint(model) and len(fp) == 16
    with torch.no_grad():
        model.transformer.h[0].mlp.c_proj.weight[3, 1] += 1e-3
    assert neuron_store.fingerprint(model) == hand_fingerprint(model) != fp
    empty = torch.nn.Module()
    empty.register_buffer("nothing", torch.zeros(0, 3))
    empty.register_buffer("halves", torch.arange(4, dtype=torch.float16).reshape(2, 2).t())  # not contiguous
    assert neuron_store.fingerprint(empty) == hand_fingerprint(empty)


def test_saving_and_loading_gives_back_every_array_read_only(tmp_path):
    stats = made_stats(meta={"model": "m", "fingerprint": "abc", "n": 3})
    path = tmp_path / "m.neurons.npz"
    size = neuron_store.save(stats, str(path))
    assert size == path.stat().st_size > 0 and [p.name for p in tmp_path.iterdir()] == ["m.neurons.npz"]
    with np.load(path, allow_pickle=False) as f:
        assert sorted(f.files) == sorted(neuron_store.ARRAYS + ("meta",))
        assert f["hist"].dtype == np.uint16 and f["windows"].dtype == np.uint16  # small counts and ids: 2 bytes
        assert str(f["meta"]) == '{"model": "m", "fingerprint": "abc", "n": 3}'
    got = neuron_store.load(str(path))
    assert got.meta == stats.meta
    dtypes = {"windows": np.int32, "top_pos": np.int32, "top_val": np.float32, "hist": np.int64,
              "hist_lo": np.float64, "hist_hi": np.float64}
    for a, dt in dtypes.items():
        arr = getattr(got, a)
        np.testing.assert_array_equal(arr, getattr(stats, a))
        assert arr.dtype == dt and not arr.flags.writeable, a


@pytest.mark.parametrize("top, dtype", [(65535, np.uint16), (65536, np.int32)])
def test_counts_and_ids_past_two_bytes_are_kept_as_int32(tmp_path, top, dtype):
    stats = made_stats()
    stats.hist[1, 2, 3] = top
    stats.windows[1, 4] = top
    neuron_store.save(stats, tmp_path / "x.npz")
    with np.load(tmp_path / "x.npz") as f:
        assert f["hist"].dtype == dtype and f["windows"].dtype == dtype
        assert f["hist"][1, 2, 3] == top and f["windows"][1, 4] == top
    got = neuron_store.load(tmp_path / "x.npz")
    assert got.hist[1, 2, 3] == top and got.windows[1, 4] == top


def test_a_file_over_the_size_limit_is_refused_before_it_is_read(tmp_path, monkeypatch):
    path = tmp_path / "m.neurons.npz"
    size = neuron_store.save(made_stats(), path)
    assert neuron_store.MAX_FILE_BYTES == 16_000_000
    monkeypatch.setattr(neuron_store, "MAX_FILE_BYTES", size)
    neuron_store.load(path)  # exactly the limit: read
    monkeypatch.setattr(neuron_store, "MAX_FILE_BYTES", size - 1)
    with pytest.raises(ValueError) as err:
        neuron_store.load(path)
    assert str(err.value) == "m.neurons.npz is too big to be a neuron summary"


def write_npz(path, **arrays):
    with open(path, "wb") as f:
        np.savez(f, **arrays)


def arrays_of(stats):
    return {a: getattr(stats, a) for a in neuron_store.ARRAYS}


def test_a_file_that_is_not_a_summary_says_so(tmp_path):
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"not a zip at all")
    with pytest.raises(ValueError, match=r"^junk.npz is not a neuron summary \("):
        neuron_store.load(junk)
    arrays = arrays_of(made_stats())
    write_npz(tmp_path / "nometa.npz", **arrays)
    with pytest.raises(ValueError, match=r"^nometa.npz is not a neuron summary \("):
        neuron_store.load(tmp_path / "nometa.npz")
    del arrays["hist_hi"]
    write_npz(tmp_path / "short.npz", meta=np.array("{}"), **arrays)
    with pytest.raises(ValueError, match=r"^short.npz is not a neuron summary \("):
        neuron_store.load(tmp_path / "short.npz")
    write_npz(tmp_path / "badjson.npz", meta=np.array("{nope"), **arrays_of(made_stats()))
    with pytest.raises(ValueError, match=r"^badjson.npz is not a neuron summary \("):
        neuron_store.load(tmp_path / "badjson.npz")
    pickled = tmp_path / "pickled.npz"
    write_npz(pickled, meta=np.array([{"a": 1}], dtype=object), **arrays_of(made_stats()))
    with pytest.raises(ValueError, match=r"^pickled.npz is not a neuron summary \("):
        neuron_store.load(pickled)


@pytest.mark.parametrize("damage", ["top_val", "hist", "hist_lo", "hist_hi", "negative", "past_end"])
def test_a_file_whose_arrays_do_not_fit_together_is_damaged(tmp_path, damage):
    """Each array cut to another shape, or a top position outside the slice (2 windows x 5 tokens: 0..9)."""
    arrays = arrays_of(made_stats())
    if damage in ("negative", "past_end"):
        arrays["top_pos"] = arrays["top_pos"].copy()
        arrays["top_pos"][1, 2, 1] = -1 if damage == "negative" else 10
    else:
        arrays[damage] = arrays[damage][:, :2]
    write_npz(tmp_path / "d.npz", meta=np.array("{}"), **arrays)
    with pytest.raises(ValueError) as err:
        neuron_store.load(tmp_path / "d.npz")
    assert str(err.value) == "d.npz is damaged: its arrays do not fit together"


def test_top_positions_at_both_ends_of_the_slice_are_fine(tmp_path):
    stats = made_stats(top_pos=np.tile([0, 9], (2, 3, 1)))
    neuron_store.save(stats, tmp_path / "ends.npz")
    assert neuron_store.load(tmp_path / "ends.npz").top_pos[0, 0].tolist() == [0, 9]


def test_a_shipped_summary_is_used_only_for_the_weights_it_was_computed_from(tmp_path, monkeypatch):
    monkeypatch.setattr(neuron_store, "CHECKPOINTS", tmp_path)
    torch.manual_seed(0)
    model = GPT(ModelConfig(vocab_size=20, block_size=8, n_layer=1, n_head=2, n_embd=8))
    assert neuron_store.shipped("tiny", model) is None  # no file
    neuron_store.save(made_stats(meta={"fingerprint": hand_fingerprint(model)}), tmp_path / "tiny.neurons.npz")
    got = neuron_store.shipped("tiny", model)
    assert got is not None and got.meta["fingerprint"] == hand_fingerprint(model)
    np.testing.assert_array_equal(got.top_val, made_stats().top_val)
    with torch.no_grad():
        model.lm_head.weight[0, 0] += 1.0
    assert neuron_store.shipped("tiny", model) is None  # other weights now
    neuron_store.save(made_stats(meta={}), tmp_path / "tiny.neurons.npz")
    assert neuron_store.shipped("tiny", model) is None  # no fingerprint at all
    (tmp_path / "other.neurons.npz").mkdir()
    assert neuron_store.shipped("other", model) is None  # not a file


# ------------------------------------------------------------------------------------- bounded (issue 33)
class HeldSlot:
    """A slot someone else holds until ``free`` is set: a job waits in it, told "0 ahead" every poll."""

    def __init__(self):
        self.free = threading.Event()

    @contextmanager
    def hold(self, on_wait=None):
        while not self.free.wait(0.01):
            on_wait(0)  # raises for a cancelled job: it leaves the queue
        yield True


def test_past_max_unfinished_a_new_job_is_refused_with_a_sentence_and_a_finished_one_makes_room(fresh, monkeypatch):
    go = threading.Event()
    monkeypatch.setattr(neuron_jobs, "compute", FakeCompute(go=go))
    assert neuron_jobs.MAX_UNFINISHED == 8
    try:
        jobs = [neuron_jobs.job_for(i, load, "t", params=1) for i in range(8)]
        with pytest.raises(neuron_jobs.QueueFull) as refused:
            neuron_jobs.job_for("ninth", load, "t", params=1)
        assert str(refused.value) == ("this server is already computing 8 neuron summaries, as many as it runs at "
                                      "once: this model's starts when you open the page again after one of them ends")
        assert neuron_jobs.existing("ninth") is None and len(neuron_jobs._JOBS) == 8
        assert neuron_jobs.job_for(3, load, "t", params=1) is jobs[3]  # one already there is still given
    finally:
        go.set()
    assert all(j.wait(10) for j in jobs)
    assert neuron_jobs.job_for("ninth", load, "t", params=1).wait(10)  # finished ones no longer count


def test_a_waiting_job_holds_no_model_and_loads_it_only_when_it_runs(fresh, monkeypatch):
    """The app passes a weak reference: while the job waits for its slot nothing keeps the model alive."""
    import gc

    fake = FakeCompute()
    monkeypatch.setattr(neuron_jobs, "compute", fake)
    slot = HeldSlot()
    loads = []

    class Model:
        pass

    model = Model()
    ref = weakref.ref(model)
    job = neuron_jobs.NeuronJob(lambda: loads.append(1) or ref(), "t", 8, slot).start()
    while job.state != "waiting":
        threading.Event().wait(0.01)
    assert loads == []  # not loaded while waiting
    model = Model()  # a new model in its place: the old one had no other reference
    gc.collect()
    slot.free.set()
    assert job.wait(10)
    assert loads == [1] and fake.calls == []
    assert (job.state, job.error) == ("failed", "the model was let go while its summary waited: open the page again")
    assert job._load is None


def test_a_session_waits_for_one_job_and_the_one_it_left_is_cancelled_unless_another_waits(fresh, monkeypatch):
    fake = FakeCompute()
    monkeypatch.setattr(neuron_jobs, "compute", fake)
    slot = HeldSlot()
    monkeypatch.setattr(neuron_jobs, "BIG_LOAD", slot)
    big = neuron_jobs.BIG_MODEL_PARAMS + 1
    a = neuron_jobs.job_for("A", load, "t", params=big, owner="s1")
    shared = neuron_jobs.job_for("S", load, "t", params=big, owner="s2")
    assert neuron_jobs.job_for("S", load, "t", params=big, owner="s3") is shared
    assert (a.owners, shared.owners) == ({"s1"}, {"s2", "s3"})
    b = neuron_jobs.job_for("B", load, "t", params=big, owner="s1")  # s1 leaves A for B: no one waits for A
    assert a.wait(10) and a.state == "cancelled" and neuron_jobs.existing("A") is None
    assert a.error == "no one waits for this summary any more"  # what a page would show
    neuron_jobs.job_for("B", load, "t", params=big, owner="s2")  # s2 leaves S, but s3 still waits for it
    assert neuron_jobs.existing("S") is shared and shared.owners == {"s3"} and not shared.finished
    assert b.owners == {"s1", "s2"}
    again = neuron_jobs.job_for("A", load, "t", params=big)
    assert again is not a  # asked again: a new job
    slot.free.set()
    assert b.wait(10) and shared.wait(10) and again.wait(10)
    assert (b.state, shared.state, again.state) == ("done", "done", "done")
    assert fake.calls == [("m", "t", 4096)] * 3  # B, S and the new A; the cancelled A never loaded or ran


def test_asking_for_the_job_it_waits_for_again_keeps_it(fresh, monkeypatch):
    monkeypatch.setattr(neuron_jobs, "compute", FakeCompute())
    slot = HeldSlot()
    monkeypatch.setattr(neuron_jobs, "BIG_LOAD", slot)
    big = neuron_jobs.BIG_MODEL_PARAMS + 1
    a = neuron_jobs.job_for("A", load, "t", params=big, owner="s1")
    assert neuron_jobs.job_for("A", load, "t", params=big, owner="s1") is a and not a.finished
    slot.free.set()
    assert a.wait(10) and a.state == "done"
    assert neuron_jobs.job_for("A", load, "t", params=big, owner="s9") is a and a.owners == {"s1"}  # done: kept as is


def test_a_job_cancelled_before_its_slot_came_leaves_without_loading(fresh, monkeypatch):
    """Cancelled while its slot was being granted (the slot lets it in without a wait): it checks once inside the
    slot, loads nothing, and says why."""
    fake = FakeCompute()
    monkeypatch.setattr(neuron_jobs, "compute", fake)
    loads = []

    class OpenSlot:
        @contextmanager
        def hold(self, on_wait=None):
            yield False

    job = neuron_jobs.NeuronJob(lambda: loads.append(1) or "m", "t", 8, OpenSlot())
    job.cancel()
    assert job.start().wait(10)
    assert (job.state, job.error, loads, fake.calls) == ("cancelled", "no one waits for this summary any more", [], [])
