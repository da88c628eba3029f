"""The steps a slim trace works out when read (gptviz.run.on_demand), from a stand-in trace (a dict of tensors made
here, and its gradients) against oracles written here: scores as q · kᵀ summed by einsum, the scale and the −∞ mask
by hand, the repeated keys of grouped-query attention by indexing, the MLP's activation and gate, and every gradient
by torch.autograd through the forward operation it undoes, with an upstream gradient drawn at random."""
import math

import numpy as np
import pytest
import torch

from gptviz import GPT, ModelConfig, trace
from gptviz.run import on_demand
from gptviz.run.on_demand import (
    OnDemand,
    as_trace_value,
    edited_layers,
    extra_note,
    extra_step,
    forward_value,
    grad_kept_layers,
    grad_value,
    slim_step,
)

B, T, NH, HS = 2, 4, 4, 3  # batch, positions, query heads, head size
G = torch.Generator().manual_seed(0)


def rnd(*shape):
    return torch.randn(*shape, generator=G, dtype=torch.float64)


class Stand:
    """A trace stand-in: ``name in tr``, ``tr[name]`` and ``tr.grad(name)``, nothing else."""

    def __init__(self, acts, grads=None, is_numpy=False):
        self.acts, self.grads, self.is_numpy = acts, grads or {}, is_numpy

    def __contains__(self, name):
        return name in self.acts

    def __getitem__(self, name):
        return self.acts[name]

    def grad(self, name):
        return self.grads.get(name)


def causal(B=1):
    """(B, 1, T, T) bool: True where a query may not look (a later key)."""
    return torch.triu(torch.ones(T, T, dtype=torch.bool), 1).expand(B, 1, T, T)


# ----------------------------------------------------------------------------------------------------------- names
def test_which_names_are_score_steps_and_which_are_extra_steps():
    assert slim_step("blocks.12.attn.hook_scores_raw") == (12, "scores_raw")
    assert slim_step("blocks.0.attn.hook_scores_scaled") == (0, "scores_scaled")
    assert slim_step("blocks.3.attn.hook_attn_scores") == (3, "attn_scores")
    for name in ("blocks.0.attn.hook_pattern", "xblocks.0.attn.hook_scores_raw", "blocks.0.attn.hook_scores_rawx",
                 "blocks.0.cross_attn.hook_scores_raw", "hook_probs"):
        assert slim_step(name) is None, name
    assert extra_step("hook_probs") == (-1, "probs")
    assert extra_step("blocks.10.attn.hook_k_rep") == (10, "k_rep")
    assert extra_step("blocks.1.attn.hook_v_rep") == (1, "v_rep")
    assert extra_step("blocks.2.mlp.hook_post") == (2, "post")
    for name in ("hook_probsx", "blocks.0.mlp.hook_pre", "blocks.0.attn.hook_post", "blocks.0.mlp.hook_k_rep",
                 "xhook_probs", "blocks.0.attn.hook_scores_raw"):
        assert extra_step(name) is None, name


def test_the_layers_an_edit_keeps_whole():
    eds = {"blocks.1.attn.hook_z": 0, "blocks.3.attn.hook_pattern": 0, "blocks.0.attn.hook_q": 0,
           "blocks.5.attn.hook_scores_raw": 0, "blocks.6.attn.hook_attn_scores": 0,
           "blocks.7.attn.hook_scores_scaled": 0, "hook_embed": 0, "blocks.2.mlp.hook_post": 0}
    assert grad_kept_layers(eds) == {1, 3, 5, 6, 7}
    assert edited_layers(eds) == {5, 6, 7}
    assert grad_kept_layers(None) == set() == edited_layers(None)


def test_a_note_its_numpy_copy_and_freezing_it():
    m = causal()
    note = OnDemand("attn_scores", 3, HS, m, {"x": 1})
    assert repr(note) == "OnDemand('attn_scores', layer 3)"
    assert OnDemand("scores_raw", 0, HS).how == {} and OnDemand("scores_raw", 0, HS).masked is None
    n = note.numpy()
    assert (n.step, n.layer, n.d_head, n.how) == ("attn_scores", 3, HS, {"x": 1})
    assert isinstance(n.masked, np.ndarray) and np.array_equal(n.masked, m.numpy())
    assert n.masked.flags.writeable
    n.freeze()
    assert not n.masked.flags.writeable
    plain = OnDemand("scores_raw", 1, HS).numpy()
    assert plain.masked is None and plain.step == "scores_raw" and plain.layer == 1
    plain.freeze()  # nothing to freeze: no error
    note.freeze()  # a torch mask is left as it is
    assert isinstance(note.masked, torch.Tensor)


def test_an_extra_steps_note_carries_what_it_needs_from_the_config():
    cfg = ModelConfig(vocab_size=11, block_size=8, n_layer=2, n_head=6, n_kv_head=2, n_embd=12, activation="silu",
                      gated_mlp=True)
    k = extra_note("blocks.1.attn.hook_k_rep", "k_rep", 1, cfg)
    assert (k.step, k.layer, k.d_head, k.masked, k.how) == ("k_rep", 1, 2, None, {"repeat": 3})
    assert extra_note("blocks.0.attn.hook_v_rep", "v_rep", 0, cfg).how == {"repeat": 3}
    post = extra_note("blocks.1.mlp.hook_post", "post", 1, cfg)
    assert post.how == {"activation": "silu", "gated": True} and post.layer == 1
    assert extra_note("blocks.1.mlp.hook_post", "post", 1, cfg.replace(gated_mlp=False)).how["gated"] is False
    assert extra_note("hook_probs", "probs", -1, cfg).how == {}


# ----------------------------------------------------------------------------------------------------- forward values
def _scores_by_hand(q, k):
    """q (B, T, nh, hs), k (B, S, nh, hs): Σ_d q[b, t, h, d] · k[b, s, h, d], as (B, nh, T, S)."""
    return torch.einsum("bthd,bshd->bhts", q, k)


def test_raw_scores_come_from_the_last_recorded_queries_and_keys():
    q, k, rq, rk = rnd(B, T, NH, HS), rnd(B, T, NH, HS), rnd(B, T, NH, HS), rnd(B, T, NH, HS)
    kr = rnd(B, T, NH, HS)
    note = OnDemand("scores_raw", 2, HS)
    a = "blocks.2.attn."
    plain = Stand({a + "hook_q": q, a + "hook_k": k})
    assert torch.allclose(forward_value(plain, note), _scores_by_hand(q, k))
    rotated = Stand({a + "hook_q": q, a + "hook_k": k, a + "hook_rot_q": rq, a + "hook_rot_k": rk})
    assert torch.allclose(forward_value(rotated, note), _scores_by_hand(rq, rk))
    repeated = Stand({a + "hook_q": q, a + "hook_k": k, a + "hook_rot_q": rq, a + "hook_rot_k": rk,
                      a + "hook_k_rep": kr})
    assert torch.allclose(forward_value(repeated, note), _scores_by_hand(rq, kr))
    with pytest.raises(KeyError) as e:
        forward_value(Stand({a + "hook_k": k}), note)
    assert e.value.args[0] == "layer 2's q was not recorded"
    with pytest.raises(KeyError) as e:  # the keys: neither repeated, rotated nor plain ones
        forward_value(Stand({a + "hook_q": q}), note)
    assert e.value.args[0] == "layer 2's k was not recorded"


def test_qk_norm_s_normalised_queries_and_keys_come_before_the_plain_ones_and_after_the_rotated():
    """A model with QK-norm (Qwen3, OLMo 2) records ``q_normed`` and ``k_normed``; without rotary positions those are
    what attend() multiplied (and repeated, for grouped-query attention)."""
    q, k, nq, nk, rq, rk = (rnd(B, T, NH, HS) for _ in range(6))
    note = OnDemand("scores_raw", 1, HS)
    a = "blocks.1.attn."
    normed = Stand({a + "hook_q": q, a + "hook_k": k, a + "hook_q_normed": nq, a + "hook_k_normed": nk})
    assert torch.allclose(forward_value(normed, note), _scores_by_hand(nq, nk))
    normed.acts.update({a + "hook_rot_q": rq, a + "hook_rot_k": rk})
    assert torch.allclose(forward_value(normed, note), _scores_by_hand(rq, rk))
    k2, nk2 = rnd(B, T, 2, HS), rnd(B, T, 2, HS)
    gqa = Stand({a + "hook_k": k2, a + "hook_k_normed": nk2})
    assert torch.equal(forward_value(gqa, OnDemand("k_rep", 1, HS, None, {"repeat": 2})),
                       torch.stack([nk2[:, :, h // 2] for h in range(4)], dim=2))


def test_scaled_and_masked_scores_and_the_numpy_kind():
    raw = rnd(B, NH, T, T)
    a = "blocks.1.attn."
    scaled = forward_value(Stand({a + "hook_scores_raw": raw}), OnDemand("scores_scaled", 1, 9))
    assert torch.allclose(scaled, raw / 3.0)
    m = torch.zeros(B, 1, T, T, dtype=torch.bool)
    m[1, 0, 0, 2:] = True  # row 1's first query may not see keys 2 and 3 (padding, say)
    m[0] = causal()[0]
    masked = forward_value(Stand({a + "hook_scores_scaled": raw.numpy()}), OnDemand("attn_scores", 1, HS, m.numpy()))
    want = raw.clone()
    for b in range(B):
        for t in range(T):
            for s in range(T):
                if m[b, 0, t, s]:
                    want[b, :, t, s] = -math.inf
    assert torch.equal(masked, want)


def test_probabilities_repeated_keys_and_values_and_the_mlp_activation():
    logits = rnd(B, T, 5)
    probs = forward_value(Stand({"hook_logits": logits.numpy()}), OnDemand("probs", -1, HS))
    assert torch.allclose(probs, torch.exp(logits) / torch.exp(logits).sum(-1, keepdim=True))
    k, rk, v = rnd(B, T, 2, HS), rnd(B, T, 2, HS), rnd(B, T, 2, HS)
    a = "blocks.0.attn."
    tr = Stand({a + "hook_k": k, a + "hook_v": v})
    want_k = torch.stack([k[:, :, h // 3] for h in range(6)], dim=2)  # query head h reads key head h // 3
    assert torch.equal(forward_value(tr, OnDemand("k_rep", 0, HS, None, {"repeat": 3})), want_k)
    assert torch.equal(forward_value(tr, OnDemand("v_rep", 0, HS, None, {"repeat": 3})),
                       torch.stack([v[:, :, h // 3] for h in range(6)], dim=2))
    tr.acts[a + "hook_rot_k"] = rk
    assert torch.equal(forward_value(tr, OnDemand("k_rep", 0, HS, None, {"repeat": 2})),
                       torch.stack([rk[:, :, h // 2] for h in range(4)], dim=2))
    pre, lin = rnd(B, T, 7), rnd(B, T, 7)
    m = "blocks.0.mlp."
    tr = Stand({m + "hook_pre": pre, m + "hook_pre_linear": lin})
    relu = forward_value(tr, OnDemand("post", 0, HS, None, {"activation": "relu", "gated": False}))
    assert torch.equal(relu, pre.clamp(min=0))
    silu = forward_value(tr, OnDemand("post", 0, HS, None, {"activation": "silu", "gated": True}))
    assert torch.allclose(silu, pre / (1 + torch.exp(-pre)) * lin)


# -------------------------------------------------------------------------------------------------------- gradients
def test_the_patterns_gradient_is_autograds_through_z_equals_pattern_times_values():
    pattern = torch.softmax(rnd(B, NH, T, T), -1).requires_grad_(True)
    v = rnd(B, T, NH, HS)
    z = (pattern @ v.transpose(1, 2)).transpose(1, 2)  # (B, T, nh, hs), as attend() lays z out
    gz = rnd(B, T, NH, HS)
    (want,) = torch.autograd.grad(z, pattern, gz)
    a = "blocks.0.attn."
    note = OnDemand("pattern", 0, HS)
    assert torch.allclose(grad_value(Stand({a + "hook_v": v}, {a + "hook_z": gz}), note), want)
    other = rnd(B, T, NH, HS)  # the repeated values (grouped-query attention) come first
    (want_rep,) = torch.autograd.grad((pattern @ other.transpose(1, 2)).transpose(1, 2), pattern, gz)
    got = grad_value(Stand({a + "hook_v": v, a + "hook_v_rep": other}, {a + "hook_z": gz.numpy()}), note)
    assert torch.allclose(got, want_rep)
    assert grad_value(Stand({a + "hook_v": v}), note) is None


def test_the_score_steps_gradients_are_autograds_through_softmax_mask_and_scale():
    m = causal(B)
    raw = rnd(B, NH, T, T).requires_grad_(True)
    scaled = raw / math.sqrt(HS)
    attn = scaled.masked_fill(m, -math.inf)
    pattern = torch.softmax(attn, -1)
    gp = rnd(B, NH, T, T)
    g_attn, g_scaled, g_raw = torch.autograd.grad(pattern, (attn, scaled, raw), gp)
    a = "blocks.1.attn."
    acts = {a + "hook_pattern": pattern.detach()}
    tr = Stand(acts, {a + "hook_pattern": gp})
    got_attn = grad_value(tr, OnDemand("attn_scores", 1, HS, m))
    assert torch.allclose(got_attn, g_attn)
    tr.grads[a + "hook_attn_scores"] = got_attn
    got_scaled = grad_value(tr, OnDemand("scores_scaled", 1, HS, m))
    assert torch.allclose(got_scaled, g_scaled) and (got_scaled[m.expand(B, NH, T, T)] == 0).all()
    tr.grads[a + "hook_scores_scaled"] = got_scaled
    assert torch.allclose(grad_value(tr, OnDemand("scores_raw", 1, HS, m)), g_raw)
    bare = Stand(acts)
    for step in ("attn_scores", "scores_scaled", "scores_raw"):
        assert grad_value(bare, OnDemand(step, 1, HS, m)) is None
    with pytest.raises(KeyError) as e:
        grad_value(tr, OnDemand("probs", -1, HS))
    assert e.value.args[0] == "∂loss/∂probs is not worked out"


def test_a_worked_out_value_takes_the_traces_kind():
    t = torch.ones(2, 3)
    assert as_trace_value(Stand({}), t) is t
    out = as_trace_value(Stand({}, is_numpy=True), t)
    assert isinstance(out, np.ndarray) and np.array_equal(out, np.ones((2, 3))) and not out.flags.writeable


# ------------------------------------------------------------------------------------- a slim trace of a real model
def test_a_padded_grouped_query_slim_trace_against_its_full_trace():
    """Every worked-out step and gradient of a slim trace (padded second row, grouped-query attention, a gated MLP)
    is the full trace's, bit for bit, read both as torch and as numpy."""
    cfg = ModelConfig(vocab_size=17, block_size=6, n_layer=2, n_head=4, n_kv_head=2, n_embd=16, norm="rmsnorm",
                      pos_encoding="rope", activation="silu", gated_mlp=True, bias=False, seed=1)
    m = GPT(cfg).eval()
    idx = torch.tensor([[3, 1, 4, 1, 5, 9], [2, 6, 5, 3, 0, 0]])
    mask = torch.tensor([[1] * 6, [1, 1, 1, 1, 0, 0]])
    y = torch.tensor([[1, 4, 1, 5, 9, 2], [6, 5, 3, -100, -100, -100]])
    for grads in (False, True):
        full = trace(m, idx, y, attention_mask=mask, grads=grads)
        slim = trace(m, idx, y, attention_mask=mask, grads=grads, slim=True)
        assert isinstance(slim._acts["blocks.1.attn.hook_scores_raw"], OnDemand)
        for s in (slim, slim.numpy()):
            for name in full:
                got = s[name]
                got = torch.from_numpy(np.asarray(got)) if isinstance(got, np.ndarray) else got
                assert torch.equal(got, full[name]), (grads, name)
                if grads and full.grad(name) is not None:
                    g = s.grad(name)
                    g = torch.from_numpy(np.asarray(g)) if isinstance(g, np.ndarray) else g
                    assert torch.allclose(g, full.grad(name), atol=1e-6, rtol=1e-5), name
    assert on_demand.STEPS == ("scores_raw", "scores_scaled", "attn_scores")


def test_a_worked_out_gradient_that_comes_out_none_stays_none_on_either_kind_of_trace():
    """The pattern's gradient is worked out from z's. Where z's is None (off the loss path), the pattern's, and the
    scores' after it, are None too: on a numpy trace as on a torch one, asked once or again (mutation testing at
    a56fe59: ``Trace._worked_out__mutmut_13`` sent the None on to the numpy conversion, which raised)."""
    cfg = ModelConfig(vocab_size=17, block_size=6, n_layer=2, n_head=2, n_embd=8, seed=3)
    m = GPT(cfg).eval()
    idx = torch.tensor([[3, 1, 4, 1, 5, 9]])
    a = "blocks.0.attn."
    for kind in ("torch", "numpy"):
        def fresh(kind=kind):
            tr = trace(m, idx, idx, grads=True, slim=True)
            return tr.numpy() if kind == "numpy" else tr

        tr = fresh()
        assert isinstance(tr.grads[a + "hook_pattern"], OnDemand) and tr.is_numpy == (kind == "numpy")
        assert tr.grad(a + "hook_z") is not None and tr.grad(a + "hook_pattern") is not None
        off = fresh()
        off.grads[a + "hook_z"] = None  # as if z were off the loss path
        for step in ("pattern", "attn_scores", "scores_scaled", "scores_raw", "pattern"):
            assert off.grad(a + f"hook_{step}") is None, (kind, step)
