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


def hand_sampled(model, prompt, n, temperature, seed, force=None):
    """(tokens, probabilities): n tokens drawn by a loop written here from softmax(logits / T) with one seeded
    torch.Generator, drawing at EVERY step (the forced step too, its draw thrown away: the contract of
    ``gptviz.run.branching``'s common random numbers), and each token's probability the model's own (temperature 1)."""
    g = torch.Generator().manual_seed(seed)
    ctx, toks, probs = list(prompt), [], []
    B = model.config.block_size
    for step in range(n):
        with torch.no_grad():
            logits = model(torch.tensor([ctx[-B:]]))[0][0, -1]
        drawn = int(torch.multinomial(F.softmax(logits.float() / temperature, dim=-1), 1, generator=g))
        t = force[1] if force is not None and step == force[0] else drawn
        toks.append(t)
        probs.append(float(F.softmax(logits.double(), dim=-1)[t]))
        ctx.append(t)
    return toks, probs


def test_a_forced_step_in_a_sampled_run_still_draws_so_the_stream_after_it_is_the_hand_loops():
    """At temperature 0.7 the forced continuation is the hand loop's (which draws at the forced step and throws the
    draw away), so after the fork the two continuations differ because of the forced token, not the dice."""
    model = _model()
    prompt, n, at, fid, T, seed = [5, 6], 9, 3, 1, 0.7, 0
    orig, orig_p = hand_sampled(model, prompt, n, T, seed)
    want, want_p = hand_sampled(model, prompt, n, T, seed, force=(at, fid))
    # the test can tell: a loop that skips the forced step's draw gives other tokens after the fork
    g, ctx, skipped = torch.Generator().manual_seed(seed), list(prompt), []
    for step in range(n):
        with torch.no_grad():
            logits = model(torch.tensor([ctx[-model.config.block_size:]]))[0][0, -1]
        t = fid if step == at else int(torch.multinomial(F.softmax(logits.float() / T, dim=-1), 1, generator=g))
        skipped.append(t)
        ctx.append(t)
    assert skipped[:at + 1] == want[:at + 1] and skipped[at + 1:] != want[at + 1:]

    b = branch(model, prompt, at, fid, n, temperature=T, greedy=False, seed=seed)
    assert b.original.tokens == orig and b.forced.tokens == want
    assert b.forced.probs == pytest.approx(want_p, abs=1e-6) and b.original.probs == pytest.approx(orig_p, abs=1e-6)
    assert b.parted_at == next(i for i in range(n) if orig[i] != want[i])
    alone = continuation(model, prompt, n, temperature=T, greedy=False, seed=seed, force=(at, fid))
    assert alone.tokens == want


def test_shown_probabilities_are_the_models_own_not_the_tempered_nucleus():
    """Sampled at temperature 0.5 with top-p 0.6 (and greedy at the same settings), every token's probability and
    every step's alternatives are softmax of the model's raw logits from a plain forward pass over the tokens the
    continuation took, not the tempered, cut distribution the tokens were drawn from."""
    model = _model()
    prompt, n, at = [3, 1, 4, 1, 5], 10, 2  # the context slides past block_size 12
    B = model.config.block_size
    for greedy in (False, True):
        orig = continuation(model, prompt, n, temperature=0.5, top_p=0.6, greedy=greedy, seed=3)
        with torch.no_grad():  # the least likely token at the fork: outside the nucleus, drawn with probability 0
            p0 = F.softmax(model(torch.tensor([(prompt + orig.tokens[:at])[-B:]]))[0][0, -1].double(), dim=-1)
        fid = int(p0.argmin())
        b = branch(model, prompt, at, fid, n, temperature=0.5, top_p=0.6, greedy=greedy, seed=3, original=orig)
        for path in (b.original, b.forced):
            for step, tok in enumerate(path.tokens):
                ctx = (prompt + path.tokens[:step])[-B:]
                with torch.no_grad():
                    p = F.softmax(model(torch.tensor([ctx]))[0][0, -1].double(), dim=-1)
                assert path.probs[step] == pytest.approx(float(p[tok]), abs=1e-6), (greedy, step)
                top_p_, top_i = torch.topk(p, 10)
                assert [i for i, _ in path.top[step]] == top_i.tolist()
                assert [q for _, q in path.top[step]] == pytest.approx(top_p_.tolist(), abs=1e-6)
        assert b.forced.tokens[at] == fid and b.forced.probs[at] > 0
        assert b.forced.probs[at] == pytest.approx(float(p0[fid]), abs=1e-6)
