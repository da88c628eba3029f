"""A classroom: 30 sessions at once on one server, one cached model, each with its own text and edits."""
import json
import time
from concurrent.futures import ThreadPoolExecutor

import torch
from apphelp import metric, page

from gptviz import GPT, encode_batch, get_tokenizer, preset, trace
from gptviz.run import edits as edit_specs

N = 30


def _session(i: int, tries: int = 10):
    """Student ``i``'s session: the Logits page, then their own text and edits. AppTest swaps process-wide
    globals around every run (see below), so on parallel threads its own bookkeeping can very rarely lose a
    widget's id (a KeyError raised inside AppTest's run, seen in about 1 of 3 runs when the engine tests ran
    first, on code from before this change too): that student starts again in a new session. Five tries were
    once not enough (a fresh clone's run at 869c2e1, where a small model's run became one torch thread and so
    overlaps the other sessions' runs for longer), hence ten, each a second apart at most."""
    for k in range(tries):
        try:
            at = page("logits")
            s = at.session_state["gptviz.settings"]
            s["text"] = f"student {i} says: the cat sat on the mat {i % 7} times."
            s["edits"] = {"set": [], "heads_off": [[i % 2, (i // 2) % 2]] if i % 3 else []}
            return at.run(), s
        except KeyError:
            if k == tries - 1:
                raise
            time.sleep(0.1 * (k + 1))  # out of step with the sessions it collided with


def _shown(at) -> str:
    """What a session's page holds, for a failure message: each element's type and the start of its text."""
    out = []
    for el in at.main:
        text = getattr(el, "value", None) or getattr(el, "label", None) or ""
        out.append(f"{el.type}:{str(text)[:40]}")
    return "; ".join(out[:20])


def student(i: int):
    at, s = _session(i)
    labels = [m.label for m in at.metric]
    for k in range(5):
        if "mean of −log p" in labels or at.exception:
            break
        # AppTest swaps process-wide globals (a mock Runtime, the pages manager, config options) around
        # every run, so runs on parallel threads can now and then cut each other's output short (seen once in
        # a CI check of 866 tests, after one more run had not helped, and on 2026-11-27 four runs of one session in
        # a row). That is the test harness, not the app (a real server has one Runtime, and tools.load drives 90
        # real sessions without it): run that session again, and after two more tries start it afresh.
        try:
            if k == 2:
                at, s = _session(i)
            else:
                at.run()
        except KeyError:  # the same harness race, inside a run again (CI at 0b37fef, a fresh clone's run after it)
            at, s = _session(i)
        labels = [m.label for m in at.metric]
    assert not at.exception, [e.message for e in at.exception]
    assert "mean of −log p" in labels, (i, labels, [str(e.value)[:200] for e in at.error], _shown(at))
    return i, s["text"], s["edits"], metric(at, "mean of −log p")


def expected_loss(text: str, spec: dict) -> float:
    tok = get_tokenizer("char-bpe", num_merges=20)
    cfg = preset("default", vocab_size=tok.vocab_size)
    b = encode_batch(tok, text, cfg.block_size)
    edits = edit_specs.from_spec(spec, cfg.n_layer, cfg.n_head) if not edit_specs.is_empty(spec) else None
    return trace(GPT(cfg), b.x, b.y, b.attention_mask, edits=edits).loss


def test_thirty_students_each_see_their_own_results_and_the_model_is_untouched():
    with ThreadPoolExecutor(max_workers=N) as pool:
        results = list(pool.map(student, range(N)))
    losses = set()
    for i, text, spec, shown in results:
        assert shown == round(expected_loss(text, spec), 5), i
        losses.add(shown)
    assert len(losses) > N // 2  # different texts and edits really gave different answers
    # the one cached model every session used still has its seeded weights
    from gptviz.ui import resources

    tok = get_tokenizer("char-bpe", num_merges=20)
    cfg = preset("default", vocab_size=tok.vocab_size)
    cached = resources.model_for(json.dumps(cfg.to_dict(), sort_keys=True))
    fresh = GPT(cfg)
    assert all(torch.equal(a, b) for a, b in zip(cached.state_dict().values(), fresh.state_dict().values()))
    assert all(p.grad is None for p in cached.parameters())
