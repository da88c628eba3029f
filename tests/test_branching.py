"""Branching generation against a greedy loop written here in plain torch (the model's logits, softmax, argmax, the
forced token put in by hand): both continuations, every token's probability, the forced token at its step and the
step where the two part. Sampled branches share their random draws with ``generate`` and with each other."""
import pytest
import torch
import torch.nn.functional as F
from conftest import CONFIGS

from gptviz import GPT
from gptviz.run.branching import branch, continuation, parting_point
from gptviz.run.generation import generate


def hand_greedy(model, prompt, n, force=None):
    """(tokens, probabilities): n greedy tokens, the probability of each from softmax of the model's own logits."""
    ctx, toks, probs = list(prompt), [], []
    B = model.config.block_size
    for step in range(n):
        with torch.no_grad():
            logits = model(torch.tensor([ctx[-B:]]))[0][0, -1]
        p = F.softmax(logits.double(), dim=-1)
        t = int(torch.argmax(p))
        if force is not None and step == force[0]:
            t = force[1]
        toks.append(t)
        probs.append(float(p[t]))
        ctx.append(t)
    return toks, probs


def _model():
    c = CONFIGS["gpt2-like"].replace(vocab_size=23, block_size=12)
    return GPT(c.replace(seed=4))


@pytest.mark.parametrize("forced_at", [0, 3, 9])
def test_greedy_branch_matches_a_hand_written_loop(forced_at):
    model = _model()
    prompt, n = [3, 1, 4, 1, 5], 10  # 15 tokens in all: the context slides past block_size 12
    orig, orig_p = hand_greedy(model, prompt, n)
    forced_id = next(t for t in (7, 8, 9) if t != orig[forced_at])
    want, want_p = hand_greedy(model, prompt, n, force=(forced_at, forced_id))
    b = branch(model, prompt, forced_at, forced_id, n)
    assert b.original.tokens == orig and b.forced.tokens == want
    assert b.original.probs == pytest.approx(orig_p, abs=1e-6)
    assert b.forced.probs == pytest.approx(want_p, abs=1e-6)
    assert b.forced.tokens[forced_at] == forced_id != b.original.tokens[forced_at]
    assert b.forced.tokens[:forced_at] == b.original.tokens[:forced_at]
    assert b.parted_at == forced_at
    hand_part = next(i for i in range(n) if orig[i] != want[i])
    assert b.parted_at == hand_part
    assert b.original.joint(forced_at) == pytest.approx(float(torch.tensor(orig_p[forced_at:]).prod()), rel=1e-6)
    # the alternatives at each step are the most likely tokens, most likely first, with their probabilities
    top = b.original.top[forced_at]
    assert top[0][0] == orig[forced_at] and top[0][1] == pytest.approx(orig_p[forced_at], abs=1e-6)
    assert [p for _, p in top] == sorted((p for _, p in top), reverse=True)


def test_forcing_the_token_the_model_chose_gives_the_same_continuation():
    model = _model()
    orig, _ = hand_greedy(model, [2, 2], 6)
    b = branch(model, [2, 2], 2, orig[2], 6)
    assert b.forced.tokens == b.original.tokens == orig and b.parted_at is None
    assert parting_point([1, 2, 3], [1, 2, 4]) == 2 and parting_point([1, 2], [1, 2]) is None


def test_sampled_branch_shares_its_draws_with_generate():
    model = _model()
    prompt = [5, 6]
    steps = generate(model, prompt, 8, temperature=1.3, greedy=False, seed=11)
    b = branch(model, prompt, 4, 0, 8, temperature=1.3, greedy=False, seed=11)
    assert b.original.tokens == [s.token for s in steps]
    assert b.forced.tokens[:4] == b.original.tokens[:4] and b.forced.tokens[4] == 0
    again = continuation(model, prompt, 8, temperature=1.3, greedy=False, seed=11, force=(4, 0))
    assert again.tokens == b.forced.tokens  # seeded: the same call, the same tokens


def test_bad_requests_are_refused_with_a_reason():
    model = _model()
    for kw, word in ((dict(forced_at=5, forced_id=1, n_new=5), "forced_at"),
                     (dict(forced_at=0, forced_id=23, n_new=5), "forced_id"),
                     (dict(forced_at=0, forced_id=1, n_new=0), "n_new")):
        with pytest.raises(ValueError, match=word):
            branch(model, [1, 2], **kw)
    with pytest.raises(ValueError, match="prompt"):
        branch(model, [], 0, 1, 3)
    with pytest.raises(ValueError, match="vocabulary"):
        branch(model, [1, 99], 0, 1, 3)
