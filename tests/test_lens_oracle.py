"""gptviz.interp.lens against oracles written out here on tiny models: the final norm and the unembedding by hand
(mean, variance, eps, the weight and bias, the unembedding matrix), softmax and top-k by numpy, each component's
vector from the trace's own hooks sent through the final norm frozen at its recorded scale, the lens's window
arithmetic by plain loops; plus the edge cases (batch rows other than 0, numpy traces, no targets, -100, chunks of
rows, limits exactly at and one past the edge) and the messages a user reads."""
import types

import numpy as np
import pytest
import torch
from perturbed_models import perturbed

from gptviz import GPT, ModelConfig, trace
from gptviz.interp import lens as lens_mod
from gptviz.interp.lens import (
    REST_LABEL,
    Component,
    components,
    decompose,
    describe_top,
    lens_summary,
    lens_window,
    lens_window_starts,
    logit_lens,
    resid_points,
    top_contributors,
)

LN = ModelConfig(vocab_size=13, block_size=8, n_layer=2, n_head=2, n_embd=8, tie_weights=False, head_bias=True)
RMS = ModelConfig(vocab_size=13, block_size=8, n_layer=2, n_head=2, n_embd=8, norm="rmsnorm", bias=False,
                  pos_encoding="sinusoidal")
POST = ModelConfig(vocab_size=13, block_size=8, n_layer=2, n_head=2, n_embd=8, norm_placement="post")



def ids(cfg, B=3, T=6, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, cfg.vocab_size, (B, T), generator=g), torch.randint(0, cfg.vocab_size, (B, T), generator=g)


@torch.no_grad()
def final_norm_by_hand(m, r):
    """The final norm of residual vectors r (..., C) in float64 with r's own statistics: LayerNorm centres, both
    divide by sqrt(mean square + eps), then the weight and (if any) the bias; post-norm models have none."""
    cfg = m.config
    if cfg.norm_placement == "post":
        return r.double()
    ln = m.transformer.ln_f
    r = r.double()
    if cfg.norm == "layernorm":
        r = r - r.mean(-1, keepdim=True)
    r = r / torch.sqrt(r.pow(2).mean(-1, keepdim=True) + cfg.ln_eps) * ln.weight.double()
    return r if ln.bias is None else r + ln.bias.double()


@torch.no_grad()
def unembed_by_hand(m, r):
    """lm_head by hand: the unembedding matrix (wte's when tied) and lm_head's bias, if any."""
    W = m.lm_head.weight.double()
    out = final_norm_by_hand(m, r) @ W.T
    return out if m.lm_head.bias is None else out + m.lm_head.bias.double()


@torch.no_grad()
def lens_by_hand(tr, m):
    """(n_layer + 1, B, T, V): each layer's input, then the last layer's output, decoded by hand."""
    L = m.config.n_layer
    pts = [torch.as_tensor(tr[f"blocks.{l}.hook_resid_pre"]) for l in range(L)]
    pts.append(torch.as_tensor(tr[f"blocks.{L - 1}.hook_resid_post"]))
    return torch.stack([unembed_by_hand(m, p) for p in pts])


# --------------------------------------------------------------------------- logit lens
def test_resid_points_are_every_layers_input_and_then_the_last_layers_output():
    """Three layers: four points, labelled and named as written out here."""
    cfg = LN.replace(n_layer=3)
    assert resid_points(cfg) == [
        ("embeddings", "blocks.0.hook_resid_pre"), ("after layer 0", "blocks.1.hook_resid_pre"),
        ("after layer 1", "blocks.2.hook_resid_pre"), ("after layer 2", "blocks.2.hook_resid_post")]


@pytest.mark.parametrize("rows,picked", [(None, [0, 1, 2]), (2, [2]), (np.int64(1), [1]), ([2, 0], [2, 0]),
                                         ((2, 0), [2, 0]), (np.array([1, 2]), [1, 2]), (slice(1, 3), [1, 2])])
def test_the_logit_lens_of_chosen_batch_rows_is_those_rows_decoded_by_hand(rows, picked):
    """rows as None, an int, a numpy int, a list, a tuple, a numpy array or a slice: the lens of exactly those batch
    rows, in that order, against the final norm and unembedding by hand (LayerNorm with a bias, untied, lm_head's
    bias); the numpy trace gives a numpy array of the same values."""
    m = perturbed(LN)
    x, y = ids(LN)
    tr = trace(m, x, y)
    want = lens_by_hand(tr, m)[:, picked]
    labels, got = logit_lens(tr, m, rows=rows)
    assert labels == ["embeddings", "after layer 0", "after layer 1"]
    assert isinstance(got, torch.Tensor) and got.shape == (3, len(picked), 6, LN.vocab_size)
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
    _, got_np = logit_lens(tr.numpy(), m, rows=rows)
    assert isinstance(got_np, np.ndarray)
    np.testing.assert_allclose(got_np, want.numpy(), rtol=1e-5, atol=1e-5)


def test_the_post_norm_lens_decodes_every_point_without_a_final_norm():
    """A post-norm model: every point straight through lm_head (no norm), the embeddings point included."""
    m = perturbed(POST)
    x, y = ids(POST)
    tr = trace(m, x, y)
    _, got = logit_lens(tr, m)
    torch.testing.assert_close(got.double(), lens_by_hand(tr, m), rtol=1e-5, atol=1e-5)


def test_the_lens_needs_the_model_that_made_the_trace():
    """No model, or one with another config: the exact sentences the user reads."""
    m = perturbed(LN)
    tr = trace(m, ids(LN)[0])
    with pytest.raises(ValueError, match=r"^this needs the model's weights: call it as f\(trace, model\) with the "
                                         r"model that made the trace$"):
        logit_lens(tr)
    with pytest.raises(ValueError, match=r"^the trace was made by a different model than the one given \(their "
                                         r"configs differ\)$"):
        lens_summary(tr, GPT(LN.replace(vocab_size=14)))


# --------------------------------------------------------------------------- lens summary
def summary_by_hand(tr, m, b, k, start=0, stop=None, targets=None):
    """p(target) and the top k of row b at positions start:stop from the hand-decoded lens: softmax in float64,
    the top k by numpy's argsort of −p (most likely first)."""
    logits = lens_by_hand(tr, m)[:, b, start:stop]
    p = torch.softmax(logits, -1).numpy()
    order = np.argsort(-p, axis=-1, kind="stable")[..., :k]
    tp = None
    if targets is not None:
        t = targets[b, start:stop].numpy()
        tp = np.full(p.shape[:2], np.nan)
        for j, tok in enumerate(t):
            if tok >= 0:
                tp[:, j] = p[:, j, tok]
    return tp, order, np.take_along_axis(p, order, -1)


def test_lens_summary_of_row_two_with_padding_targets_matches_the_hand_lens():
    """Batch row 2 of three, with a -100 target at position 1: p(target) is NaN there and the hand value
    elsewhere; the top 3 ids and probabilities are numpy's."""
    m = perturbed(LN)
    x, y = ids(LN)
    y[2, 1] = -100
    tr = trace(m, x, y)
    s = lens_summary(tr, m, b=2, k=3)
    tp, top, topp = summary_by_hand(tr, m, 2, 3, targets=y)
    assert s.labels == ["embeddings", "after layer 0", "after layer 1"] and s.start == 0
    assert np.isnan(s.target_prob[:, 1]).all() and not np.isnan(np.delete(s.target_prob, 1, axis=1)).any()
    np.testing.assert_allclose(s.target_prob, tp, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(s.top_ids, top)
    np.testing.assert_allclose(s.top_probs, topp, rtol=0, atol=1e-6)


def test_lens_summary_without_targets_has_no_target_probability_but_the_same_top_tokens():
    """A trace made without targets: p(target) is all NaN, the top tokens still those of the hand lens (row 1)."""
    m = perturbed(RMS)
    x, _ = ids(RMS)
    tr = trace(m, x).numpy()
    s = lens_summary(tr, m, b=1, k=2)
    _, top, topp = summary_by_hand(tr, m, 1, 2)
    assert s.target_prob.shape == (3, 6) and np.isnan(s.target_prob).all()
    np.testing.assert_array_equal(s.top_ids, top)
    np.testing.assert_allclose(s.top_probs, topp, rtol=0, atol=1e-6)


@pytest.mark.parametrize("k,kept", [(0, 1), (1, 1), (12, 12), (13, 13), (14, 13), (100, 13)])
def test_lens_summary_keeps_at_least_one_and_at_most_the_whole_vocabulary(k, kept):
    """k below 1 keeps 1, above the vocabulary (13) keeps all 13, in order of probability."""
    m = perturbed(LN)
    x, y = ids(LN)
    tr = trace(m, x, y)
    s = lens_summary(tr, m, b=0, k=k)
    _, top, topp = summary_by_hand(tr, m, 0, kept, targets=y)
    assert s.top_ids.shape == (3, 6, kept)
    np.testing.assert_array_equal(s.top_ids, top)
    np.testing.assert_allclose(s.top_probs, topp, rtol=0, atol=1e-6)


@pytest.mark.parametrize("max_rows", [1, 5, 6, 7, 12, 13, 1000])
def test_lens_summary_decodes_whole_points_at_a_time_within_max_rows(max_rows, monkeypatch):
    """A window of 3 positions (3:6) of row 1: every matrix product decodes whole points (a multiple of 3 rows), at
    most max_rows rows unless one point alone is more, and all 9 rows once; the numbers are the hand lens's."""
    m = perturbed(LN)
    x, y = ids(LN)
    tr = trace(m, x, y)
    sizes = []
    unembed = lens_mod._unembed

    def counting(model, rows):
        sizes.append(rows.shape[0])
        return unembed(model, rows)

    monkeypatch.setattr(lens_mod, "_unembed", counting)
    s = lens_summary(tr, m, b=1, k=4, max_rows=max_rows, start=3, stop=6)
    assert sum(sizes) == 9 and all(n % 3 == 0 for n in sizes)
    assert max(sizes) == max(3, min(9, max_rows // 3 * 3))
    tp, top, topp = summary_by_hand(tr, m, 1, 4, start=3, stop=6, targets=y)
    assert s.start == 3 and isinstance(s.start, int)
    np.testing.assert_allclose(s.target_prob, tp, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(s.top_ids, top)
    np.testing.assert_allclose(s.top_probs, topp, rtol=0, atol=1e-6)


def test_lens_summary_by_default_is_row_0_every_position_and_the_top_5():
    m = perturbed(LN)
    x, y = ids(LN)
    tr = trace(m, x, y)
    s = lens_summary(tr, m)
    tp, top, topp = summary_by_hand(tr, m, 0, 5, targets=y)
    assert s.start == 0 and s.top_ids.shape == (3, 6, 5)
    np.testing.assert_allclose(s.target_prob, tp, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(s.top_ids, top)
    np.testing.assert_allclose(s.top_probs, topp, rtol=0, atol=1e-6)


def test_lens_summary_of_an_empty_window_says_which_positions():
    m = perturbed(LN)
    tr = trace(m, ids(LN)[0])
    with pytest.raises(ValueError, match="^positions 4:4 hold no token$"):
        lens_summary(tr, m, start=4, stop=4)
    with pytest.raises(ValueError, match="^positions 6:None hold no token$"):
        lens_summary(tr, m, start=6)


def test_lens_summary_start_given_as_a_numpy_int_is_stored_as_an_int():
    m = perturbed(LN)
    tr = trace(m, ids(LN)[0])
    s = lens_summary(tr, m, start=np.int64(2))
    assert type(s.start) is int and s.start == 2 and s.top_ids.shape[1] == 4


# --------------------------------------------------------------------------- lens windows
def shape(n_layer, vocab, n_embd):
    return types.SimpleNamespace(n_layer=n_layer, vocab_size=vocab, n_embd=n_embd)


def window_by_hand(cfg, T):
    """All T if (layers + 1) × vocab × width × T multiply-adds fit GPT-2 small's 13 × 128 × 50,257 × 768, else the
    first of 128, 64, 32, 16, 8 that is shorter than T and fits, else 8 (or T if shorter)."""
    cost = (cfg.n_layer + 1) * cfg.vocab_size * cfg.n_embd
    budget = 13 * 128 * 50257 * 768
    if T * cost <= budget:
        return T
    for w in (128, 64, 32, 16, 8):
        if w < T and w * cost <= budget:
            return w
    return min(T, 8)


@pytest.mark.parametrize("cfg,T", [
    (shape(12, 50257, 768), 128), (shape(12, 50257, 768), 129),  # exactly the budget, one above
    (shape(25, 50257, 768), 64), (shape(25, 50257, 768), 65), (shape(25, 50257, 768), 200),  # half the budget
    (shape(51, 50257, 768), 33), (shape(51, 50257, 768), 500),  # a quarter
    (shape(200, 50257, 4096), 1000), (shape(200, 50257, 4096), 20),  # 16 fits, not 32
    (shape(28, 151936, 1024), 128), (shape(28, 151936, 1024), 9),  # a Qwen3-0.6B shape: 8
    (shape(2000, 50257, 4096), 1000),  # not even 8 fits
    (shape(1, 10, 8), 100_000),
])
def test_lens_window_is_the_largest_that_fits_the_budget(cfg, T):
    assert lens_window(cfg, T) == window_by_hand(cfg, T)


def test_lens_window_at_the_edges_of_each_window_size():
    """A model for which exactly 64 positions fit: 64 at T = 64 (all of it) and also above; 128 never fits."""
    cfg = shape(25, 50257, 768)  # 26/13 = twice GPT-2 small's cost per position
    assert [lens_window(cfg, T) for T in (10, 64, 65, 128, 129, 4096)] == [10, 64, 64, 64, 64, 64]
    tiny = shape(2000, 50257, 4096)  # 8 positions cost more than the budget: 8 all the same, or T if shorter
    assert [lens_window(tiny, T) for T in (1, 7, 8, 9, 5000)] == [1, 7, 8, 8, 8]
    qwen3 = shape(28, 151936, 1024)  # 29 × 151,936 × 1,024 a position: 14 positions fit (all of 9), else 8
    assert [lens_window(qwen3, T) for T in (8, 9, 14, 15, 128)] == [8, 9, 14, 8, 8]


def starts_by_hand(T, window):
    """Walk back from the end in steps of the window while the start is positive, then add 0."""
    out, s = [], T - window
    while s > 0:
        out.append(s)
        s -= window
    return sorted(set(out) | {0})


@pytest.mark.parametrize("T,window", [(10, 3), (9, 3), (7, 7), (5, 8), (8, 7), (300, 128), (129, 128), (1, 1)])
def test_lens_window_starts_cover_the_text_ending_at_the_last_position(T, window):
    got = lens_window_starts(T, window)
    assert got == starts_by_hand(T, window) and got[0] == 0
    assert set().union(*(range(a, min(a + window, T)) for a in got)) == set(range(T))


def test_lens_window_starts_written_out():
    assert lens_window_starts(10, 3) == [0, 1, 4, 7]
    assert lens_window_starts(9, 3) == [0, 3, 6]
    assert lens_window_starts(8, 8) == [0] and lens_window_starts(5, 8) == [0]


# --------------------------------------------------------------------------- components
def test_components_of_a_biased_learned_position_model_in_order():
    cfg = ModelConfig(vocab_size=13, block_size=8, n_layer=2, n_head=2, n_embd=8)
    assert components(cfg) == [
        Component("token embedding", "embed"), Component("position embedding", "pos"),
        Component("L0.H0", "head", 0, 0), Component("L0.H1", "head", 0, 1), Component("L0 attn bias", "attn_bias", 0),
        Component("L0 MLP", "mlp", 0),
        Component("L1.H0", "head", 1, 0), Component("L1.H1", "head", 1, 1), Component("L1 attn bias", "attn_bias", 1),
        Component("L1 MLP", "mlp", 1)]


def test_components_follow_the_config_choices():
    """Sinusoidal positions count, rope and none don't; attn_proj_bias overrides bias both ways; attn_only drops the
    MLPs; an encoder-decoder (n_enc_layer 0) adds each layer's cross-attention after its attention bias."""
    base = dict(vocab_size=13, block_size=8, n_layer=1, n_head=1, n_embd=8)
    labels = lambda **kw: [c.label for c in components(ModelConfig(**base, **kw))]
    assert labels(pos_encoding="sinusoidal") == ["token embedding", "position embedding", "L0.H0", "L0 attn bias",
                                                  "L0 MLP"]
    assert labels(pos_encoding="rope") == ["token embedding", "L0.H0", "L0 attn bias", "L0 MLP"]
    assert labels(pos_encoding="none", bias=False) == ["token embedding", "L0.H0", "L0 MLP"]
    assert labels(bias=False, attn_proj_bias=True) == ["token embedding", "position embedding", "L0.H0",
                                                       "L0 attn bias", "L0 MLP"]
    assert labels(attn_proj_bias=False, attn_only=True) == ["token embedding", "position embedding", "L0.H0"]
    assert labels(n_enc_layer=0, enc_len=4) == ["token embedding", "position embedding", "L0.H0", "L0 attn bias",
                                                "L0 cross-attn", "L0 MLP"]
    assert components(ModelConfig(**base, n_enc_layer=0, enc_len=4))[4] == Component("L0 cross-attn", "cross", 0)


def test_components_of_a_config_without_the_optional_fields_read_the_defaults():
    """A bare config object (no attn_proj_bias, n_enc_layer or attn_only): the attention bias follows ``bias``, there
    is no cross-attention and there are MLPs."""
    bare = lambda bias: types.SimpleNamespace(pos_encoding="rope", n_layer=1, n_head=1, bias=bias)
    assert [c.kind for c in components(bare(True))] == ["embed", "head", "attn_bias", "mlp"]
    assert [c.kind for c in components(bare(False))] == ["embed", "head", "mlp"]


# --------------------------------------------------------------------------- direct logit attribution
@torch.no_grad()
def parts_by_hand(tr, m):
    """Every component's vector in the residual stream, (B, T, C) float64 each, in components' order, read from the
    trace's hooks: hook_embed, hook_pos_embed, each head's ``hook_z[..., h, :] @ W_O_h.T``, c_proj's bias, the
    MLP's hook_mlp_out."""
    cfg = m.config
    out = {"token embedding": torch.as_tensor(tr["hook_embed"]).double()}
    if cfg.pos_encoding in ("learned", "sinusoidal"):
        out["position embedding"] = torch.as_tensor(tr["hook_pos_embed"]).double()
    hs = cfg.d_head
    for l in range(cfg.n_layer):
        attn = m.transformer.h[l].attn
        W = attn.c_proj.weight.double()
        z = torch.as_tensor(tr[f"blocks.{l}.attn.hook_z"]).double()
        for h in range(cfg.n_head):
            out[f"L{l}.H{h}"] = z[..., h, :] @ W[:, h * hs:(h + 1) * hs].T
        if attn.c_proj.bias is not None:
            out[f"L{l} attn bias"] = attn.c_proj.bias.double().expand_as(out["token embedding"])
        out[f"L{l} MLP"] = torch.as_tensor(tr[f"blocks.{l}.hook_mlp_out"]).double()
    return out


@torch.no_grad()
def frozen_logit(tr, m, vec, tok):
    """A residual vector (B, T, C) read as the logit of tok (B, T) through the final norm frozen at the recorded
    scale: (centred for LayerNorm) / scale * γ · W_U[tok]."""
    if m.config.norm == "layernorm":
        vec = vec - vec.mean(-1, keepdim=True)
    scale = torch.as_tensor(tr["ln_final.hook_scale"]).double()
    u = m.lm_head.weight.double()[tok.clamp(min=0)]
    return (vec / scale * m.transformer.ln_f.weight.double() * u).sum(-1)


@torch.no_grad()
def bias_by_hand(m, tok):
    """β · W_U[tok] plus lm_head's bias for tok (each only if the model has it)."""
    u = m.lm_head.weight.double()[tok.clamp(min=0)]
    b = torch.zeros(tok.shape, dtype=torch.float64)
    if m.transformer.ln_f.bias is not None:
        b = b + (u * m.transformer.ln_f.bias.double()).sum(-1)
    if m.lm_head.bias is not None:
        b = b + m.lm_head.bias.double()[tok.clamp(min=0)]
    return b


@pytest.mark.parametrize("cfg", [LN, RMS], ids=["layernorm-headbias", "rmsnorm-nobias"])
def test_every_component_and_the_bias_are_their_hooks_through_the_frozen_norm(cfg):
    """Each row of the split (found by its label), and the bias, against the hand reading, at every batch row and
    position with a target; -100 targets (row 1, position 0; row 2, position 5) give NaN; float32 out like the
    trace."""
    m = perturbed(cfg)
    x, y = ids(cfg)
    y[1, 0] = y[2, 5] = -100
    tr = trace(m, x, y)
    labels, c, bias = decompose(tr, m, "target")
    assert c.dtype == torch.float32 and bias.dtype == torch.float32
    valid = y != -100
    parts = parts_by_hand(tr, m)
    assert labels == list(parts)
    for i, (name, vec) in enumerate(parts.items()):
        torch.testing.assert_close(c[i][valid].double(), frozen_logit(tr, m, vec, y)[valid], rtol=1e-5, atol=1e-5,
                                   msg=lambda e, name=name: f"{name}: {e}")
    torch.testing.assert_close(bias[valid].double(), bias_by_hand(m, y)[valid], rtol=1e-5, atol=1e-5)
    assert torch.isnan(c[:, ~valid]).all() and torch.isnan(bias[~valid]).all()
    logits = tr.logits.double().gather(-1, y.clamp(min=0)[..., None])[..., 0]
    assert (c.double().sum(0) + bias.double() - logits)[valid].abs().max() < 1e-4


def test_explicit_token_ids_may_hold_minus_100_and_come_as_numpy():
    """A numpy (B, T) array of ids with -100 at (2, 3), a numpy int for every position: the same hand reading of
    those tokens, NaN only where -100; a numpy trace gives numpy arrays."""
    m = perturbed(LN)
    x, y = ids(LN)
    tr = trace(m, x, y)
    tok = np.random.default_rng(0).integers(0, LN.vocab_size, size=(3, 6))
    tok[2, 3] = -100
    labels, c, bias = decompose(tr.numpy(), m, tok)
    assert isinstance(c, np.ndarray) and isinstance(bias, np.ndarray)
    t = torch.as_tensor(tok)
    valid = (t != -100).numpy()
    parts = parts_by_hand(tr, m)
    np.testing.assert_allclose(c[labels.index("L1 MLP")][valid], frozen_logit(tr, m, parts["L1 MLP"], t)[valid],
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(bias[valid], bias_by_hand(m, t)[valid], rtol=1e-5, atol=1e-5)
    assert np.isnan(c[:, 2, 3]).all() and np.isnan(bias[2, 3]) and not np.isnan(c[:, valid]).any()
    _, c5, b5 = decompose(tr, m, np.int64(12))
    twelve = torch.full((3, 6), 12)
    torch.testing.assert_close(b5.double(), bias_by_hand(m, twelve), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(c5[0].double(), frozen_logit(tr, m, parts["token embedding"], twelve), rtol=1e-5,
                               atol=1e-5)


@pytest.mark.parametrize("tokens,message", [
    ("targets", r"^tokens must be 'target', a token id or a \(batch, pos\) array of ids, not 'targets'$"),
    (13, r"^token id 13 is outside the vocabulary \(vocab_size=13\)$"),
    (-1, r"^token id -1 is outside the vocabulary \(vocab_size=13\)$"),
    (np.full((3, 6), -101), r"^token id -101 is outside the vocabulary \(vocab_size=13\)$"),
    (np.array([[0, -7, 0, 0, 0, 0], [0] * 6, [0, 0, 0, 0, 20, 0]]),
     r"^token id -7 is outside the vocabulary \(vocab_size=13\)$"),  # the first bad one is named
    (np.zeros((3, 5), dtype=np.int64), r"^tokens has shape \(3, 5\), but the trace's batch is \(3, 6\)$"),
])
def test_bad_tokens_are_refused_with_the_exact_sentence(tokens, message):
    m = perturbed(LN)
    x, y = ids(LN)
    tr = trace(m, x, y)
    with pytest.raises(ValueError, match=message):
        decompose(tr, m, tokens)


def test_the_largest_token_id_is_accepted():
    m = perturbed(LN)
    x, y = ids(LN)
    tr = trace(m, x, y)
    _, _, bias = decompose(tr, m, 12)
    torch.testing.assert_close(bias.double(), bias_by_hand(m, torch.full((3, 6), 12)), rtol=1e-5, atol=1e-5)


def test_a_trace_without_targets_asks_for_token_ids():
    m = perturbed(LN)
    tr = trace(m, ids(LN)[0])
    with pytest.raises(ValueError, match="^this trace has no targets: pass the token ids to attribute instead of "
                                         "'target'$"):
        decompose(tr, m)


def test_the_post_norm_refusal_says_what_to_choose():
    m = perturbed(POST)
    tr = trace(m, *ids(POST))
    with pytest.raises(ValueError, match=r"^direct logit attribution needs a pre-norm model: with "
                                         r"norm_placement='post' every block renormalises the stream, so the logit is "
                                         r"not a sum of what each part wrote\. Choose norm_placement='pre'\.$"):
        decompose(tr, m, "target")


@pytest.mark.parametrize("at", [(0, 0), (2, 5), (1, 3), (np.int64(2), np.int64(0))])
def test_decompose_at_one_position_is_the_hand_reading_there(at):
    """The corners of the (3, 6) batch and a middle cell, on a numpy trace: every component's (1, 1) value is the
    hand reading of that cell."""
    m = perturbed(LN)
    x, y = ids(LN)
    tr = trace(m, x, y)
    labels, c, bias = decompose(tr.numpy(), m, "target", at=at)
    b, t = int(at[0]), int(at[1])
    assert c.shape == (len(labels), 1, 1) and bias.shape == (1, 1)
    for i, (name, vec) in enumerate(parts_by_hand(tr, m).items()):
        assert labels[i] == name
        assert c[i, 0, 0] == pytest.approx(float(frozen_logit(tr, m, vec, y)[b, t]), rel=1e-5, abs=1e-5), name
    assert bias[0, 0] == pytest.approx(float(bias_by_hand(m, y)[b, t]), rel=1e-5, abs=1e-5)


@pytest.mark.parametrize("at", [(3, 0), (0, 6), (-1, 0), (0, -1)])
def test_decompose_at_outside_the_batch_is_refused(at):
    m = perturbed(LN)
    tr = trace(m, *ids(LN))
    with pytest.raises(ValueError, match=rf"^at=\({at[0]}, {at[1]}\) is outside the trace's batch of shape \(3, 6\)$"):
        decompose(tr, m, "target", at=at)


def _bumped(m, x, y, size):
    """A trace whose residual stream after layer 0 was edited: ``size`` added at batch row 1, position 2, one
    coordinate."""
    def bump(r):
        r = r.clone()
        r[1, 2, 3] += size
        return r

    return trace(m, x, y, edits={"blocks.1.hook_resid_pre": bump})


@pytest.mark.parametrize("factor,rest", [(1.4, True), (0.6, False)])
def test_an_edit_becomes_a_rest_component_only_above_the_noise_threshold(factor, rest):
    """The threshold is 1e-4 · (1 + max |final stream|): an edit of 1.4 times that becomes a "rest" row whose value
    is the edit read through the frozen norm (at row 1, position 2 only: float noise elsewhere); 0.6 times it is left
    out as noise."""
    m = perturbed(LN)
    x, y = ids(LN)
    M = float(trace(m, x, y)[f"blocks.{LN.n_layer - 1}.hook_resid_post"].abs().max())
    size = factor * 1e-4 * (1 + M)
    tr = _bumped(m, x, y, size)
    labels, c, bias = decompose(tr, m, "target")
    assert (labels[-1] == REST_LABEL) == rest and len(labels) == len(components(LN)) + rest
    if rest:
        # the rest by hand: the final stream minus every hand-read part, through the frozen norm
        final = tr[f"blocks.{LN.n_layer - 1}.hook_resid_post"].double()
        want = frozen_logit(tr, m, final - sum(parts_by_hand(tr, m).values()), y)
        valid = y != -100
        torch.testing.assert_close(c[-1][valid].double(), want[valid], rtol=1e-4, atol=1e-9)
        # which is the edit (up to float noise): biggest at row 1, position 2. The edit is 1.4e-4 of a stream whose
        # largest value is about 17, so float32's rounding of the parts subtracted from it is a tenth of its logit:
        # a machine with AVX-512 read -1.96e-6 for -2.18e-6 (10.2 % off), where earlier machines were within 10 %.
        vec = torch.zeros(3, 6, LN.n_embd, dtype=torch.float64)
        vec[1, 2, 3] = size
        assert float(want[1, 2]) == pytest.approx(float(frozen_logit(tr, m, vec, y)[1, 2]), rel=0.25)
        assert int(want.abs().argmax()) == 1 * 6 + 2


def test_an_edit_half_of_1e_4_over_the_threshold_is_already_a_rest_component():
    """1e-4 · (1.5 + M): over the threshold 1e-4 · (1 + M) and under 1e-4 · (2 + M), so the 1 in it is 1 (with M
    about 17 here, 1.4 times the threshold is over both)."""
    m = perturbed(LN)
    x, y = ids(LN)
    M = float(trace(m, x, y)[f"blocks.{LN.n_layer - 1}.hook_resid_post"].abs().max())
    labels = decompose(_bumped(m, x, y, 1e-4 * (1.5 + M)), m, "target")[0]
    assert labels[-1] == REST_LABEL and len(labels) == len(components(LN)) + 1


@pytest.mark.parametrize("added,rest", [(1.0, False), (float(np.nextafter(np.float32(1), np.float32(2))), True)])
def test_a_difference_exactly_at_the_threshold_is_noise_and_one_float32_step_more_is_not(added, rest):
    """A model whose stream is exactly its token embedding: every output projection (attention's and the MLP's, their
    biases too) and the position embedding are zero, and only token 1's embedding is not: 9999 in coordinate 0. With
    token 1 in the text, max |final stream| is 9999, so the threshold 1e-4 · (1 + 9999) is exactly 1.0 in float64.
    Adding exactly 1.0 to the final stream at a position of token 0 makes a difference of exactly 1.0: not above the
    threshold, no rest row; adding the next float32 after 1.0 is above it."""
    m = GPT(LN)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if "c_proj" in name or name in ("transformer.wte.weight", "transformer.wpe.weight"):
                p.zero_()
        m.transformer.wte.weight[1, 0] = 9999.0
    x = torch.tensor([[1, 0, 1, 0]])

    def add(r):
        r = r.clone()
        r[0, 1, 0] += added
        return r

    tr = trace(m, x, x, edits={f"blocks.{LN.n_layer - 1}.hook_resid_post": add})
    final = tr[f"blocks.{LN.n_layer - 1}.hook_resid_post"]
    assert float(final.abs().max()) == 9999.0 and 1e-4 * (1 + 9999.0) == 1.0  # the premises
    assert torch.equal(final - tr["hook_embed"], torch.zeros_like(final).index_put_(
        (torch.tensor([0]), torch.tensor([1]), torch.tensor([0])), torch.tensor(added)))
    labels = decompose(tr, m, "target")[0]
    assert (labels[-1] == REST_LABEL) == rest and len(labels) == len(components(LN)) + rest


# --------------------------------------------------------------------------- sentences
def test_top_contributors_are_the_n_largest_each_way_biggest_first_and_zero_is_neither():
    labels = ["a", "b", "c", "d", "e", "f"]
    values = np.array([0.5, -2.0, 1.5, 0.0, -0.1, 3.0])
    assert top_contributors(labels, values, n=2) == ([("f", 3.0), ("c", 1.5)], [("b", -2.0), ("e", -0.1)])
    assert top_contributors(labels, values) == ([("f", 3.0), ("c", 1.5), ("a", 0.5)], [("b", -2.0), ("e", -0.1)])
    assert top_contributors(labels, [0, 0, 0, 0, 0, 0]) == ([], [])
    assert top_contributors(labels, [1, 2, 3, 4, 5, 6]) == ([("f", 6.0), ("e", 5.0), ("d", 4.0)], [])  # 3 by default


def test_describe_top_in_each_of_its_sentences():
    assert describe_top(["a", "b", "c"], np.array([1.5, -2.0, 0.25]), "x", n=1) == (
        "The biggest pushes towards 'x' come from **a** (+1.5); the biggest pushes against it from **b** (-2).")
    assert describe_top(["a", "b", "c"], np.array([1.5, 0.0, 0.123456]), "y") == (
        "The biggest pushes towards 'y' come from **a** (+1.5), **c** (+0.123).")
    assert describe_top(["a", "b"], np.array([-1.0, -3.0]), "z") == (
        "Every part pushes against 'z'; the most from **b** (-3), **a** (-1).")
    assert describe_top(["a"], np.array([0.0]), "w") == "No part of the model changes the logit of 'w'."
    # by default the three biggest each way
    assert describe_top(list("abcdef"), np.array([1.0, 4.0, 2.0, 3.0, -1.0, -2.0]), "v") == (
        "The biggest pushes towards 'v' come from **b** (+4), **d** (+3), **c** (+2); the biggest pushes against it "
        "from **f** (-2), **e** (-1).")
