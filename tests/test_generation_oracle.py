"""The loss taken apart (gptviz.run.loss), sampling (gptviz.run.generation) and branching (gptviz.run.branching)
against oracles written here: ``F.cross_entropy`` and a per-row float64 sum, temperature / top-k / top-p worked out
with plain sorting and cumulative sums, a sampling loop that draws from that distribution with its own seeded
generator, and plain ``model(idx)`` forward passes for the logits; every refusal at its boundary, word for word."""
import math
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from gptviz import GPT, ModelConfig
from gptviz.run import branching
from gptviz.run.branching import MAX_NEW, Path, branch, continuation, parting_point
from gptviz.run.generation import (
    check_sampling,
    distribution,
    generate,
    next_token_logits,
    top_k_mask,
    top_p_mask,
)
from gptviz.run.loss import loss_breakdown, mean_over, uniform_loss

CFG = ModelConfig(vocab_size=23, block_size=6, n_layer=1, n_head=2, n_embd=8, seed=7, init_std=0.5)
SMALL = ModelConfig(vocab_size=7, block_size=6, n_layer=1, n_head=1, n_embd=4, seed=2)


@pytest.fixture(scope="module")
def model():
    return GPT(CFG).eval()


def last_logits(m, ctx):
    """The logits after ``ctx`` by a plain forward pass over its last block_size tokens."""
    with torch.no_grad():
        return m(torch.tensor([list(ctx)[-m.config.block_size:]]))[0][0, -1]


# ------------------------------------------------------------------------------------------------------------ the loss
def test_the_breakdown_of_two_rows_with_ignored_targets_against_cross_entropy():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 4, 7, generator=g) * 3
    targets = torch.tensor([[1, 6, 0, 3], [-100, 2, -100, 5]])
    out = loss_breakdown(logits, targets)
    ce = F.cross_entropy(logits.view(-1, 7), targets.view(-1), ignore_index=-100)
    assert out["loss"].item() == pytest.approx(ce.item(), rel=1e-6)
    per = F.cross_entropy(logits.view(-1, 7), targets.view(-1), ignore_index=-100, reduction="none").view(2, 4)
    assert torch.allclose(out["loss_per_token"], per, atol=1e-6)
    valid = targets != -100
    assert torch.equal(out["valid"], valid) and out["n_valid"] == 6
    lp = torch.log_softmax(logits.double(), -1)
    want_lp = [[float(lp[b, t, targets[b, t]]) if valid[b, t] else 0.0 for t in range(4)] for b in range(2)]
    assert np.allclose(out["log_probs"].numpy(), np.array(want_lp), atol=1e-6)
    assert np.allclose(out["target_probs"].numpy(), np.exp(np.array(want_lp)), atol=1e-6)
    assert out["target_probs"][1, 0] == 1 and out["loss_per_token"][1, 2] == 0
    assert torch.allclose(out["probs"], torch.softmax(logits, -1))
    assert out["uniform_loss"] == math.log(7) == uniform_loss(7)


def test_another_ignore_index_and_the_edges_of_the_vocabulary():
    logits = torch.zeros(1, 3, 5)
    out = loss_breakdown(logits, torch.tensor([[4, -1, 0]]), ignore_index=-1)
    assert out["n_valid"] == 2 and out["valid"].tolist() == [[True, False, True]]
    assert out["loss"].item() == pytest.approx(math.log(5))  # uniform logits: ln V at each scored position
    with pytest.raises(ValueError) as e:
        loss_breakdown(logits, torch.tensor([[4, 5, 0]]))
    assert str(e.value) == "target id 5 is outside the vocabulary (vocab_size=5)"
    with pytest.raises(ValueError) as e:
        loss_breakdown(logits, torch.tensor([[0, 1, -2]]))
    assert str(e.value) == "target id -2 is outside the vocabulary (vocab_size=5)"
    with pytest.raises(ValueError) as e:
        loss_breakdown(logits, torch.tensor([[0, 1]]))
    assert str(e.value) == "targets shape (1, 2) does not match logits (1, 3)"


def test_nothing_to_score_gives_a_nan_loss_as_cross_entropy_does():
    out = loss_breakdown(torch.randn(1, 2, 4), torch.tensor([[-100, -100]]))
    assert out["n_valid"] == 0 and math.isnan(out["loss"].item())
    assert out["target_probs"].tolist() == [[1.0, 1.0]]


def test_the_mean_over_the_scored_positions_only():
    lpt = np.array([[1.0, 2.0, 4.0], [8.0, 16.0, 32.0]], dtype=np.float32)
    y = np.array([[3, -100, 1], [-100, -100, 0]])
    assert mean_over(lpt, y) == pytest.approx((1 + 4 + 32) / 3)
    assert mean_over(lpt, y, ignore_index=3) == pytest.approx((2 + 4 + 8 + 16 + 32) / 5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nan without numpy's "Mean of empty slice" warning
        assert math.isnan(mean_over(lpt, np.full((2, 3), -100)))
        assert math.isnan(mean_over([0.5], [7], ignore_index=7))


def test_the_mean_is_taken_in_float64():
    """2²⁴ + 1 + 1 in float32 rounds back to 2²⁴ at each addition; in float64 the mean is exact."""
    lpt = np.array([2.0**24, 1.0, 1.0], dtype=np.float32)
    assert mean_over(lpt, np.array([0, 0, 0])) == (2.0**24 + 2) / 3


# ---------------------------------------------------------------------------------------------------- the settings
@pytest.mark.parametrize("kw,message", [
    (dict(temperature=-0.001), "temperature=-0.001 must be 0 or more"),
    (dict(temperature=float("nan")), "temperature=nan must be 0 or more"),
    (dict(top_k=0), "top_k=0 must be at least 1 (or None for no limit)"),
    (dict(top_p=0.0), "top_p=0.0 must be above 0 and at most 1"),
    (dict(top_p=1.0001), "top_p=1.0001 must be above 0 and at most 1"),
])
def test_bad_settings_are_refused_with_the_setting_named(kw, message):
    args = dict(temperature=1.0, top_k=None, top_p=None) | kw
    with pytest.raises(ValueError) as e:
        check_sampling(**args)
    assert str(e.value) == message


def test_the_edges_of_the_settings_are_accepted():
    for t, k, p in ((0.0, 1, 1.0), (1e-9, None, 1e-9), (5.0, 1000, None)):
        check_sampling(t, k, p)


def test_top_k_keeps_the_k_largest_of_each_row_ties_going_to_the_lower_id():
    p = torch.tensor([[0.25, 0.25, 0.25, 0.25], [0.1, 0.2, 0.3, 0.4]])
    assert top_k_mask(p, 2).tolist() == [[True, True, False, False], [False, False, True, True]]
    assert top_k_mask(p, 1).tolist() == [[True, False, False, False], [False, False, False, True]]
    assert top_k_mask(p, 3).tolist() == [[True, True, True, False], [False, True, True, True]]
    assert top_k_mask(p, 4).all() and top_k_mask(p, None).all() and top_k_mask(p, 4).dtype == torch.bool


def test_ties_go_to_the_lower_id_in_a_vocabulary_of_hundreds():
    """128 equally likely tokens (and a row of them beside a larger one): the k kept, and the nucleus, are the lowest
    ids, as a stable sort gives them (an unstable one orders ties otherwise at this size)."""
    V = 128
    even = torch.full((2, V), 1.0 / V)
    even[1, 100] = 2.0 / V  # row 1: one token twice as likely, the rest tied
    k = top_k_mask(even, 5)
    assert k[0].nonzero().flatten().tolist() == [0, 1, 2, 3, 4]
    assert k[1].nonzero().flatten().tolist() == [0, 1, 2, 3, 100]
    p = top_p_mask(even, 5.5 / V)  # mass before the 6th token is 5/V < 5.5/V, before the 7th 6/V
    assert p[0].nonzero().flatten().tolist() == [0, 1, 2, 3, 4, 5]
    assert p[1].nonzero().flatten().tolist() == [0, 1, 2, 3, 100]  # 2/V + 3/V = 5/V before the 5th kept


def test_top_p_keeps_a_token_while_the_mass_before_it_is_under_p():
    p = torch.tensor([[0.5, 0.25, 0.125, 0.125], [0.125, 0.125, 0.25, 0.5]])  # exact in binary
    assert top_p_mask(p, 0.5).tolist() == [[True, False, False, False], [False, False, False, True]]
    assert top_p_mask(p, 0.5001).tolist() == [[True, True, False, False], [False, False, True, True]]
    assert top_p_mask(p, 0.75).tolist() == [[True, True, False, False], [False, False, True, True]]
    assert top_p_mask(p, 0.76).tolist() == [[True, True, True, False], [True, False, True, True]]  # tie: lower id
    # a token of probability 0 is never in the nucleus, not even when the mass before it is short of p
    short = torch.tensor([0.3, 0.0, 0.2, 0.0])
    assert top_p_mask(short, 0.9).tolist() == [True, False, True, False]
    assert top_p_mask(short, 1.0).tolist() == [True, False, True, False]
    assert top_p_mask(short, None).tolist() == [True, False, True, False]


def test_top_p_of_one_keeps_even_a_token_below_the_rounding_of_the_mass_before_it():
    """In float32 0.75 + 0.25 is already 1, so a third token of probability 1e-10 has 1.0 before it: a nucleus cut
    at p = 1 would drop it, but p = 1 means no cut at all."""
    p = torch.tensor([0.75, 0.25, 1e-10])
    assert top_p_mask(p, 1.0).tolist() == [True, True, True]
    assert top_p_mask(p, 0.99).tolist() == [True, True, False]


def hand_distribution(logits, T, k, p):
    """Temperature, then top-k, then top-p, by hand in float64: sort once, cut, renormalise."""
    z = np.asarray(logits, dtype=np.float64)
    raw = np.exp(z - z.max()) / np.exp(z - z.max()).sum()
    if T == 0:
        tempered = np.zeros_like(z)
        tempered[int(np.argmax(z))] = 1.0
    else:
        e = np.exp((z - z.max()) / T)
        tempered = e / e.sum()
    order = sorted(range(len(z)), key=lambda i: (-tempered[i], i))
    keep_k = np.zeros(len(z), bool)
    keep_k[order[:k] if k else order] = True
    after_k = np.where(keep_k, tempered, 0.0)
    after_k /= after_k.sum()
    keep_p, mass = np.zeros(len(z), bool), 0.0
    for i in sorted(range(len(z)), key=lambda i: (-after_k[i], i)):
        if after_k[i] > 0 and (p is None or mass < p):
            keep_p[i] = True
        mass += after_k[i]
    final = np.where(keep_p, after_k, 0.0)
    return raw, tempered, after_k, final / final.sum(), keep_k & keep_p


@pytest.mark.parametrize("T,k,p", [(0.7, 4, 0.8), (1.6, None, 0.5), (1.0, 2, None), (0.0, 3, 0.9), (2.0, 6, 1.0)])
def test_each_stage_of_the_distribution_against_the_hand_one(T, k, p):
    logits = torch.tensor([1.2, -0.3, 2.5, 0.4, 2.1, -1.7, 0.9])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no implicit-dimension (or any other) warning on the way
        d = distribution(logits.double(), T, k, p)  # float64 logits are taken as float32, as the model's are
    assert d.final.dtype == torch.float32
    want = hand_distribution(logits.float().numpy(), T, k, p)
    for got, w in zip((d.raw, d.tempered, d.after_top_k, d.final), want[:4]):
        assert np.allclose(got.numpy(), w, atol=1e-6)
    assert d.kept.tolist() == want[4].tolist()


def test_the_distribution_by_default_is_the_models_own_and_bad_settings_are_refused():
    logits = torch.tensor([0.5, -1.0, 2.0, 0.0])
    d = distribution(logits)
    want = np.exp(logits.numpy() - 2.0) / np.exp(logits.numpy() - 2.0).sum()
    for got in (d.raw, d.tempered, d.after_top_k, d.final):
        assert np.allclose(got.numpy(), want, atol=1e-6)
    assert d.kept.all()
    for kw, message in ((dict(top_k=0), "top_k=0 must be at least 1 (or None for no limit)"),
                        (dict(top_p=1.5), "top_p=1.5 must be above 0 and at most 1"),
                        (dict(temperature=-1.0), "temperature=-1.0 must be 0 or more")):
        with pytest.raises(ValueError) as e:
            distribution(logits, **kw)
        assert str(e.value) == message


# ------------------------------------------------------------------------------------------------------- generation
def test_next_token_logits_reads_only_the_last_block(model):
    ids = (3, 1, 4, 1, 5, 9, 2, 6)  # 8 tokens, block_size 6
    assert torch.allclose(next_token_logits(model, ids), last_logits(model, ids[-6:]), atol=1e-6)
    assert torch.allclose(next_token_logits(model, [7]), last_logits(model, [7]), atol=1e-6)
    with pytest.raises(ValueError) as e:
        next_token_logits(model, [])
    assert str(e.value) == "the prompt needs at least one token"


def test_sampled_generation_is_a_hand_loop_drawing_from_the_hand_distribution(model):
    """The oracle draws with torch.multinomial from the hand-computed final distribution, with its own generator
    seeded alike, over a context that slides past block_size."""
    prompt, n, T, k, p, seed = [2, 8, 1], 9, 1.4, 5, 0.85, 12
    steps = generate(model, prompt, n, temperature=T, top_k=k, top_p=p, seed=seed)
    g, ctx, want = torch.Generator().manual_seed(seed), list(prompt), []
    for _ in range(n):
        final = hand_distribution(last_logits(model, ctx).numpy(), T, k, p)[3]
        tok = int(torch.multinomial(torch.tensor(final, dtype=torch.float32), 1, generator=g))
        want.append(tok)
        ctx.append(tok)
    assert [s.token for s in steps] == want
    assert all(s.dist.kept.sum() <= k and s.dist.kept[s.token] for s in steps)
    ctx, kept = list(prompt), []  # and each step's distribution is the hand one: tempered, top-k, top-p nucleus
    for s in steps:
        hand = hand_distribution(last_logits(model, ctx).numpy(), T, k, p)
        assert np.allclose(s.dist.final.numpy(), hand[3], atol=1e-6)
        kept.append(int(s.dist.kept.sum()))
        assert kept[-1] == int((hand[3] > 0).sum())
        ctx.append(s.token)
    assert min(kept) < k  # the nucleus cut some step below the top 5


def test_generation_by_default_samples_at_temperature_one_from_seed_zero(model):
    prompt, n = [6, 2], 7
    got = [s.token for s in generate(model, prompt, n)]
    assert got == hand_sampled(model, prompt, n, 1.0, None, None, 0)
    assert got != hand_sampled(model, prompt, n, 2.0, None, None, 0)
    assert got != hand_sampled(model, prompt, n, 1.0, None, None, 1)



def test_greedy_generation_takes_the_models_most_likely_token_whatever_the_settings(model):
    prompt, ctx, want = [5], [5], []
    for _ in range(8):
        want.append(int(last_logits(model, ctx).argmax()))
        ctx.append(want[-1])
    got = generate(model, prompt, 8, temperature=3.0, top_k=20, greedy=True, seed=1)
    assert [s.token for s in got] == want


def test_generation_refuses_an_empty_prompt_and_bad_settings_before_any_step(model):
    assert generate(model, [1], 0) == []
    with pytest.raises(ValueError) as e:
        generate(model, [], 3)
    assert str(e.value) == "generation needs a prompt of at least one token"
    with pytest.raises(ValueError, match="top_k=0"):
        generate(model, [1], 0, top_k=0)
    with pytest.raises(ValueError, match="top_p=1.5"):
        generate(model, [1], 0, top_p=1.5)


# -------------------------------------------------------------------------------------------------------- branching
def test_a_continuation_keeps_the_top_ten_or_the_whole_vocabulary_if_smaller(model):
    small = GPT(SMALL).eval()
    path = continuation(small, [1, 2], 3)
    for step in range(len(path.tokens)):
        p = torch.softmax(last_logits(small, [1, 2] + path.tokens[:step]).double(), -1)
        assert [i for i, _ in path.top[step]] == torch.argsort(p, descending=True).tolist()  # all 7
    big = continuation(model, [1, 2], 2)
    p = torch.softmax(last_logits(model, [1, 2]).double(), -1)
    assert [i for i, _ in big.top[0]] == torch.argsort(p, descending=True)[:10].tolist()
    assert branching.TOP == 10


def test_a_continuation_by_default_is_greedy_and_sampled_it_draws_at_temperature_one_from_seed_zero(model):
    prompt, n, ctx, greedy = [3, 14], 6, [3, 14], []
    for _ in range(n):
        greedy.append(int(last_logits(model, ctx).argmax()))
        ctx.append(greedy[-1])
    assert continuation(model, prompt, n).tokens == greedy
    sampled = continuation(model, prompt, n, greedy=False).tokens
    assert sampled == hand_sampled(model, prompt, n, 1.0, None, None, 0) != greedy
    assert sampled != hand_sampled(model, prompt, n, 2.0, None, None, 0)
    assert sampled != hand_sampled(model, prompt, n, 1.0, None, None, 1)


def test_a_continuation_refuses_bad_sampling_settings_by_name_before_anything_else(model):
    """Before the forced step is even looked at (here it is out of range too): the setting is what the message names."""
    for kw, name in (({"top_k": 0}, "top_k=0"), ({"top_p": 1.5}, "top_p=1.5"), ({"temperature": -1.0}, "temperature")):
        with pytest.raises(ValueError, match=name):
            continuation(model, [1], 2, **kw)
        with pytest.raises(ValueError, match=name):
            continuation(model, [1], 2, force=(5, 0), **kw)


def test_the_joint_probability_from_a_step_on():
    path = Path([4, 5, 6, 7], [0.5, 0.25, 0.8, 0.1])
    assert path.joint() == pytest.approx(0.5 * 0.25 * 0.8 * 0.1)
    assert path.joint(2) == pytest.approx(0.8 * 0.1) and path.joint(4) == 1.0
    assert path.top == []


def hand_sampled(m, prompt, n, T, k, p, seed, force=None):
    """n tokens drawn by a loop written here from the hand distribution (temperature, top-k, top-p) with one seeded
    generator that draws at every step, the forced step too (its draw thrown away)."""
    g, ctx, out = torch.Generator().manual_seed(seed), list(prompt), []
    for step in range(n):
        final = hand_distribution(last_logits(m, ctx).numpy(), T, k, p)[3]
        tok = int(torch.multinomial(torch.tensor(final, dtype=torch.float32), 1, generator=g))
        tok = force[1] if force is not None and step == force[0] else tok
        out.append(tok)
        ctx.append(tok)
    return out


def test_a_sampled_branch_with_top_k_and_top_p_against_the_hand_loop(model):
    """Both continuations use every sampling setting: the original and the forced one are the hand loop's, drawn at
    temperature 1.3 from the top 6 tokens' 0.9 nucleus."""
    prompt, n, T, k, p, seed, at, fid = [4, 11], 8, 1.3, 6, 0.9, 21, 2, 17
    b = branch(model, prompt, at, fid, n, temperature=T, top_k=k, top_p=p, greedy=False, seed=seed)
    assert b.original.tokens == hand_sampled(model, prompt, n, T, k, p, seed)
    assert b.forced.tokens == hand_sampled(model, prompt, n, T, k, p, seed, force=(at, fid))
    assert b.original.tokens != hand_sampled(model, prompt, n, T, None, None, seed)  # the cuts matter here
    assert b.original.tokens != hand_sampled(model, prompt, n, T, k, None, seed)
    assert b.original.tokens != hand_sampled(model, prompt, n, T, None, p, seed)


def test_a_sampled_branch_without_settings_draws_at_temperature_one_with_seed_zero(model):
    prompt, n = [9], 6
    b = branch(model, prompt, 1, 3, n, greedy=False)
    assert b.original.tokens == hand_sampled(model, prompt, n, 1.0, None, None, 0)
    assert b.forced.tokens == hand_sampled(model, prompt, n, 1.0, None, None, 0, force=(1, 3))
    assert b.original.tokens != hand_sampled(model, prompt, n, 2.0, None, None, 0)
    assert b.original.tokens != hand_sampled(model, prompt, n, 1.0, None, None, 1)


def test_the_edges_of_a_branch_request(model):
    """n_new from 1 to MAX_NEW, forced_at from 0 to n_new − 1, forced_id and prompt ids from 0 to V − 1: the
    edges are accepted, one past them refused by name."""
    V = CFG.vocab_size
    assert len(continuation(model, [0, V - 1], 1).tokens) == 1
    b = branch(model, [V - 1], 1, V - 1, 2)
    assert b.forced.tokens[1] == V - 1 and b.forced_at == 1 and b.forced_id == V - 1 and b.prompt == [V - 1]
    b = branch(model, [3], 0, 0, 2)
    assert b.forced.tokens[0] == 0
    refusals = [
        (dict(prompt_ids=[1], forced_at=0, forced_id=1, n_new=MAX_NEW + 1), f"n_new={MAX_NEW + 1} must be between 1 "
         f"and {MAX_NEW}"),
        (dict(prompt_ids=[1], forced_at=3, forced_id=1, n_new=3), "forced_at=3 must be a step of the continuation "
         "(0 to 2)"),
        (dict(prompt_ids=[1], forced_at=-1, forced_id=1, n_new=3), "forced_at=-1 must be a step of the continuation "
         "(0 to 2)"),
        (dict(prompt_ids=[1], forced_at=0, forced_id=V, n_new=3), f"forced_id={V} is not a token of this model (0 to "
         f"{V - 1})"),
        (dict(prompt_ids=[1], forced_at=0, forced_id=-1, n_new=3), f"forced_id=-1 is not a token of this model (0 to "
         f"{V - 1})"),
        (dict(prompt_ids=[1, V], forced_at=0, forced_id=1, n_new=3), "the prompt has token ids outside this model's "
         f"vocabulary (0 to {V - 1})"),
        (dict(prompt_ids=[-1, 2], forced_at=0, forced_id=1, n_new=3), "the prompt has token ids outside this model's "
         f"vocabulary (0 to {V - 1})"),
        (dict(prompt_ids=[], forced_at=0, forced_id=1, n_new=3), "generation needs a prompt of at least one token"),
        (dict(prompt_ids=[1], forced_at=0, forced_id=1, n_new=2, top_p=2.0), "top_p=2.0 must be above 0 and at most 1"),
    ]
    for kw, message in refusals:
        with pytest.raises(ValueError) as e:
            branch(model, **kw)
        assert str(e.value) == message, kw


def test_the_longest_continuation_allowed(monkeypatch, model):
    """MAX_NEW itself is accepted (made 3 here, so the test is quick) and MAX_NEW + 1 is not."""
    monkeypatch.setattr(branching, "MAX_NEW", 3)
    assert len(continuation(model, [1], 3).tokens) == 3
    with pytest.raises(ValueError, match="n_new=4 must be between 1 and 3"):
        continuation(model, [1], 4)


def test_a_given_original_is_used_as_it_is_and_the_parting_step_is_found(model):
    fake = Path([0, 0, 0], [1.0, 1.0, 1.0], [])
    b = branch(model, [4, 2], 1, 5, 3, original=fake)
    assert b.original is fake
    assert b.forced.tokens[1] == 5 and b.parted_at == parting_point(fake.tokens, b.forced.tokens)
    assert parting_point([3, 4], [9, 4]) == 0 and parting_point([1, 2], [1, 2, 3]) is None
    assert parting_point([], [1]) is None and parting_point([1, 2, 3], [1, 2, 4]) == 2
