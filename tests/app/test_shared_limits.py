"""Shared limits seen from the pages (issue 19): a training run waits for a free training slot and says where it
is in the queue; GPT-2 from the hub is built once for every session; a session's own trained model stays loaded
however many models the class registers after it. AppTest runs in this process, so the test holds the same
slots and reads the same registry as the pages."""
import threading
import time

import torch
from apphelp import ok, page

from gptviz.run.slots import TRAINING
from gptviz.ui import resources, waiting


def _start_sort(at, steps=3):
    at.selectbox(key="train.task").set_value("sort").run()
    at.number_input(key="train.steps.sort").set_value(steps)
    return [b for b in at.button if "Start training" in b.label][0].click()


def test_a_training_run_waits_for_a_free_slot_and_shows_its_place(monkeypatch):
    shown = []
    real = waiting.place_text
    monkeypatch.setattr(waiting, "place_text", lambda *a: shown.append(real(*a)) or shown[-1])
    # every slot taken by other "students" (threads of this process), for 1.5 s
    gate, holders, taken = threading.Event(), [], threading.Barrier(TRAINING.capacity + 1)

    def other_student():
        with TRAINING.hold():
            taken.wait(5)
            gate.wait(10)

    for _ in range(TRAINING.capacity):
        holders.append(threading.Thread(target=other_student))
        holders[-1].start()
    taken.wait(5)
    assert TRAINING.state() == (TRAINING.capacity, 0)
    at = _start_sort(page("training"))
    threading.Timer(1.5, gate.set).start()  # the others finish 1.5 s after this student presses Start
    t0 = time.perf_counter()
    at = ok(at.run())
    waited = time.perf_counter() - t0
    for h in holders:
        h.join(5)
    assert waited >= 1.4, waited  # it did not train while the slots were taken
    assert shown and shown[0] == (f"Waiting for a training slot: you are next. This server runs {TRAINING.capacity} "
                                  f"at a time ({TRAINING.capacity} running now); yours starts by itself, keep "
                                  "this page open.")
    assert any("Trained for 3 steps" in m.value for m in at.success)  # and then it trained
    assert TRAINING.state() == (0, 0)
    assert not [i for i in at.info if i.value.startswith("Waiting for")]  # the note is gone once it runs


def test_the_place_reads_as_a_student_would_count_it():
    text = waiting.place_text(TRAINING, "training", 2)
    assert text.startswith("Waiting for a training slot: 2 runs ahead of you. ")
    assert waiting.place_text(TRAINING, "training", 1).startswith("Waiting for a training slot: 1 run ahead of you.")


def _tiny_gpt2():
    """A GPT-2 of GPT-2's vocabulary, with random weights (the hub can't be reached here)."""
    import transformers

    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=50257, n_positions=32, n_embd=8, n_layer=1, n_head=2)
    return transformers.GPT2LMHeadModel(cfg).eval()


def test_gpt2_from_the_hub_is_built_once_for_every_session(monkeypatch):
    import transformers

    calls = []

    def from_pretrained(name, *a, **kw):
        calls.append(name)
        return _tiny_gpt2()

    monkeypatch.setattr(transformers.GPT2LMHeadModel, "from_pretrained", staticmethod(from_pretrained))
    with resources._REGISTER_LOCK:
        resources._REGISTERED.pop(resources.HUB_GPT2_KEY, None)
    keys, models = [], []
    for _ in range(2):  # two students, each clicking "Load GPT-2 small"
        at = page("weights")
        at = ok(at.button(key="wt.hf").click().run())
        key = at.session_state["gptviz.settings"]["model_key"]
        keys.append(key)
        models.append(resources.registered(key).model)
    assert calls == ["gpt2"], calls
    assert keys == [resources.HUB_GPT2_KEY] * 2 and models[0] is models[1]
    assert models[0].config.n_embd == 8 and models[0].config.vocab_size == 50257
    with resources._REGISTER_LOCK:
        resources._REGISTERED.pop(resources.HUB_GPT2_KEY, None)


def test_a_sessions_trained_model_outlives_the_registry_forgetting_it():
    at = ok(_start_sort(page("training")).run())
    key = at.session_state["gptviz.settings"]["model_key"]
    mine = resources.registered(key).model
    for i in range(resources.MAX_REGISTERED + 8):  # the rest of the class registers models after it
        resources.register_model(torch.nn.Linear(2, 2), None, f"another student's {i}", own=False)
    with resources._REGISTER_LOCK:
        assert key not in resources._REGISTERED  # the shared registry forgot it...
    at = ok(at.run())  # ...but the session still shows its own model
    assert at.session_state["gptviz.settings"]["model_key"] == key
    sidebar = [c.value for c in at.sidebar.caption] + [m.value for m in at.sidebar.markdown]
    want = f"vocab_size = {mine.config.vocab_size}, set by the tokenizer · {mine.num_params():,} parameters"
    assert want in sidebar and mine.config.vocab_size == 10, sidebar[:8]  # the sort model, not the default
    assert resources.registered(key).model is mine  # registered again, the very same object


def test_the_shared_caches_hold_the_largest_model_gptviz_opens():
    """A byte-bounded cache stores nothing bigger than its budget (ByteLRU.put): the largest model allowed
    (MAX_PARAMS float32 weights, 2.4 GB) must fit in both the models built from a shape and the registered ones,
    or a 600M-parameter shape is rebuilt (or read from disk) on every rerun. Checked with a value of that size, as
    the cache measures it."""
    from gptviz.config import MAX_PARAMS
    from gptviz.run.byte_cache import ByteLRU

    for budget in (resources.MODEL_CACHE_BYTES, resources.MAX_REGISTERED_BYTES):
        cache = ByteLRU(budget, "check", size_of=lambda v: v)
        assert cache.put("largest", 4 * MAX_PARAMS) and cache.get("largest") == 4 * MAX_PARAMS
        assert cache.put("small", 10_000_000)  # and a class's small model beside it
        assert cache.keys() == ["largest", "small"]
