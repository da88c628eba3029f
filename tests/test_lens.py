"""Logit lens and direct logit attribution (gptviz.interp.lens) against independent computations."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from gptviz import GPT, ModelConfig, from_hf_gpt2, trace
from gptviz.interp.lens import REST_LABEL, components, decompose, describe_top, head_grid, lens_summary, logit_lens

TOL = 1e-4


def perturbed(cfg: ModelConfig, seed: int = 0) -> GPT:
    """A model whose biases and norm weights are far from their 0 / 1 start, so β and γ matter."""
    m = GPT(cfg)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in m.parameters():
            if p.dim() == 1:  # biases and norm weights
                p.add_(torch.randn(p.shape, generator=g) * 0.5)
            else:
                p.mul_(1 + 5 * torch.rand(p.shape, generator=g))
    return m


def batch(cfg, B=2, T=7, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, cfg.vocab_size, (B, T), generator=g)
    y = torch.randint(0, cfg.vocab_size, (B, T), generator=g)
    y[0, -1] = -100  # a position with nothing to predict
    return x, y


def logit_of(tr, ids):
    return tr.logits.gather(-1, ids.clamp(min=0)[..., None])[..., 0]


DLA_CONFIGS = {
    f"{norm}-{pos}-{'tied' if tied else 'untied'}": ModelConfig(
        vocab_size=23, block_size=8, n_layer=2, n_head=3, n_embd=12, norm=norm, pos_encoding=pos, tie_weights=tied)
    for norm in ("layernorm", "rmsnorm") for pos in ("learned", "sinusoidal", "rope") for tied in (True, False)
}
DLA_CONFIGS["no-bias-nopos"] = ModelConfig(vocab_size=23, block_size=8, n_layer=2, n_head=2, n_embd=8,
                                           pos_encoding="none", bias=False)
DLA_CONFIGS["attn-only"] = ModelConfig(vocab_size=23, block_size=8, n_layer=2, n_head=2, n_embd=8, attn_only=True)
DLA_CONFIGS["wide-heads-head-bias"] = ModelConfig(vocab_size=23, block_size=8, n_layer=1, n_head=2, n_embd=8,
                                                  d_head=6, head_bias=True, tie_weights=False, attn_proj_bias=False)


@pytest.mark.parametrize("name", list(DLA_CONFIGS))
def test_contributions_add_up_to_the_logit(name):
    cfg = DLA_CONFIGS[name]
    m = perturbed(cfg)
    x, y = batch(cfg)
    tr = trace(m, x, y)
    labels, c, bias = decompose(tr, m, "target")
    comps = components(cfg)
    assert labels == [k.label for k in comps]
    assert c.shape == (len(comps), *x.shape) and bias.shape == x.shape
    assert ("position embedding" in labels) == (cfg.pos_encoding in ("learned", "sinusoidal"))
    assert any(k.kind == "mlp" for k in comps) != cfg.attn_only
    valid = y != -100
    err = (c.sum(0) + bias - logit_of(tr, y))[valid].abs().max()
    assert err < TOL, float(err)
    # nothing to predict: NaN, not a made-up 0
    assert torch.isnan(c[:, ~valid]).all() and torch.isnan(bias[~valid]).all()
    # one token for every position, and an explicit (B, T) array of ids
    for tokens in (5, torch.randint(0, cfg.vocab_size, x.shape, generator=torch.Generator().manual_seed(3))):
        _, c2, b2 = decompose(tr, m, tokens)
        ids = torch.full_like(x, tokens) if isinstance(tokens, int) else tokens
        assert (c2.sum(0) + b2 - logit_of(tr, ids)).abs().max() < TOL
    # the app's cached numpy trace gives the same numbers
    _, cn, bn = decompose(tr.numpy(), m, "target")
    assert isinstance(cn, np.ndarray)
    np.testing.assert_allclose(cn, c.numpy(), rtol=0, atol=1e-6)
    np.testing.assert_allclose(bn, bias.numpy(), rtol=0, atol=1e-6)


@pytest.mark.parametrize("name", ["layernorm-learned-tied", "rmsnorm-rope-untied", "attn-only"])
def test_heads_of_a_layer_add_up_to_its_recorded_attention_output(name):
    """Independent of how decompose splits c_proj: the heads plus the bias equal the recorded hook_attn_out,
    sent through the same frozen final norm by hand."""
    cfg = DLA_CONFIGS[name]
    m = perturbed(cfg)
    x, y = batch(cfg)
    tr = trace(m, x, y)
    labels, c, _ = decompose(tr, m, "target")
    grid = head_grid(c, cfg)  # (L, H, B, T)
    ln = m.transformer.ln_f
    u = m.lm_head.weight[y.clamp(min=0)]
    valid = y != -100
    for l in range(cfg.n_layer):
        a = tr[f"blocks.{l}.hook_attn_out"]
        if cfg.norm == "layernorm":
            a = a - a.mean(-1, keepdim=True)
        by_hand = ((a / tr["ln_final.hook_scale"]) * ln.weight * u).sum(-1)
        ours = grid[l].sum(0)
        if f"L{l} attn bias" in labels:
            ours = ours + c[labels.index(f"L{l} attn bias")]
        assert (ours - by_hand)[valid].abs().max() < TOL


def test_hugging_face_gpt2_with_random_weights():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    hf = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=2, n_head=2, n_embd=16, vocab_size=50,
                                                              n_positions=16)).eval()
    with torch.no_grad():
        for p in hf.parameters():
            if p.dim() == 1:  # biases and LayerNorm weights
                p.add_(torch.randn_like(p) * 0.5)
    m = from_hf_gpt2(hf)
    x = torch.randint(0, 50, (2, 12))
    y = torch.randint(0, 50, (2, 12))
    tr = trace(m, x, y)
    assert (tr.logits - hf(x).logits).abs().max() < 1e-4
    _, c, bias = decompose(tr, m, "target")
    assert (c.sum(0) + bias - logit_of(tr, y)).abs().max() < TOL
    _, lens = logit_lens(tr, m)
    assert torch.equal(lens[-1], tr.logits)


@pytest.mark.parametrize("name", ["layernorm-learned-tied", "rmsnorm-sinusoidal-untied", "attn-only"])
def test_logit_lens_last_point_is_the_logits_and_early_points_match_plain_torch(name):
    cfg = DLA_CONFIGS[name]
    m = perturbed(cfg)
    x, y = batch(cfg)
    tr = trace(m, x, y)
    labels, lens = logit_lens(tr, m)
    assert len(labels) == cfg.n_layer + 1 and lens.shape == (cfg.n_layer + 1, *x.shape, cfg.vocab_size)
    assert torch.equal(lens[-1], tr.logits)  # the same operations on the same input: bit for bit
    # numpy trace (what the app caches): numpy out, same values
    _, lens_np = logit_lens(tr.numpy(), m)
    assert isinstance(lens_np, np.ndarray) and np.array_equal(lens_np[-1], tr.numpy().logits)
    # an early point, written out with plain torch ops
    ln = m.transformer.ln_f
    for l in range(cfg.n_layer):
        r = tr[f"blocks.{l}.hook_resid_pre"]
        if cfg.norm == "layernorm":
            n = F.layer_norm(r, (cfg.n_embd,), ln.weight, ln.bias, cfg.ln_eps)
        else:
            n = (r / torch.sqrt(r.pow(2).mean(-1, keepdim=True) + cfg.ln_eps) * ln.weight
                 + (0 if ln.bias is None else ln.bias))
        W_U = m.transformer.wte.weight if cfg.tie_weights else m.lm_head.weight
        assert (lens[l] - n @ W_U.T).abs().max() < 1e-4
    # one row only (a matmul over fewer rows may round differently in the last bit)
    _, one = logit_lens(tr, m, rows=1)
    assert one.shape[1] == 1 and (one[:, 0] - lens[:, 1]).abs().max() < 1e-6


def test_lens_summary_matches_the_full_lens():
    cfg = DLA_CONFIGS["layernorm-learned-tied"]
    m = perturbed(cfg)
    x, y = batch(cfg)
    tr = trace(m, x, y).numpy()
    _, lens = logit_lens(tr, m)
    s = lens_summary(tr, m, b=0, k=3)
    probs = torch.softmax(torch.from_numpy(lens[:, 0]), -1).numpy()  # (P, T, V)
    yy = y[0].numpy()
    valid = yy != -100
    np.testing.assert_allclose(s.target_prob[:, valid], probs[:, valid, yy[valid]], atol=1e-6)
    assert np.isnan(s.target_prob[:, ~valid]).all()
    assert (s.top_ids[..., 0] == probs.argmax(-1)).all()
    np.testing.assert_allclose(s.top_probs[..., 0], probs.max(-1), atol=1e-6)
    # the last point is softmax of the trace's own logits
    np.testing.assert_allclose(s.target_prob[-1, valid], tr["hook_probs"][0, valid, yy[valid]], atol=1e-6)


def test_post_norm_lens_works_and_attribution_says_why_not():
    cfg = ModelConfig(vocab_size=23, block_size=8, n_layer=2, n_head=2, n_embd=8, norm_placement="post")
    m = perturbed(cfg)
    x, y = batch(cfg)
    tr = trace(m, x, y)
    labels, lens = logit_lens(tr, m)
    assert torch.equal(lens[-1], tr.logits)
    # no final norm: each point goes straight through lm_head
    assert torch.allclose(lens[1], tr["blocks.1.hook_resid_pre"] @ m.lm_head.weight.T, atol=1e-5)
    with pytest.raises(ValueError, match="direct logit attribution needs a pre-norm model"):
        decompose(tr, m, "target")


def test_an_edited_residual_stream_becomes_a_rest_component():
    cfg = DLA_CONFIGS["layernorm-learned-tied"]
    m = perturbed(cfg)
    x, y = batch(cfg)

    def bump(r):
        r[:, 2] += 3.0
        return r

    tr = trace(m, x, y, edits={"blocks.1.hook_resid_pre": bump})
    labels, c, bias = decompose(tr, m, "target")
    assert labels[-1] == REST_LABEL
    valid = y != -100
    assert (c.sum(0) + bias - logit_of(tr, y))[valid].abs().max() < TOL
    assert c[-1, :, 2].abs().min() > 0 and c[-1, :, 3].abs().max() < 1e-5  # only the edited position
    # an unedited trace has no such component
    assert REST_LABEL not in decompose(trace(m, x, y), m, "target")[0]


def test_bad_inputs_say_what_to_change():
    cfg = DLA_CONFIGS["layernorm-learned-tied"]
    m = perturbed(cfg)
    x, y = batch(cfg)
    tr = trace(m, x)
    with pytest.raises(ValueError, match="no targets"):
        decompose(tr, m, "target")
    with pytest.raises(ValueError, match="outside the vocabulary"):
        decompose(tr, m, cfg.vocab_size)
    with pytest.raises(ValueError, match="shape"):
        decompose(tr, m, torch.zeros(1, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="model"):
        logit_lens(tr)
    with pytest.raises(ValueError, match="different model"):
        logit_lens(tr, GPT(cfg.replace(n_layer=1)))


def test_sentence_names_the_top_contributors():
    s = describe_top(["a", "b", "c", "d"], np.array([0.5, -2.0, 1.5, 0.0]), "x", n=2)
    assert s.index("**c**") < s.index("**a**") < s.index("**b**")
    assert "(+1.5)" in s and "(-2)" in s


def test_encoder_decoder_decoder_adds_its_cross_attention():
    seq2seq = pytest.importorskip("gptviz.model.build")
    cfg = ModelConfig(vocab_size=23, block_size=8, n_layer=2, n_head=2, n_embd=8, n_enc_layer=0, enc_len=5,
                      head_bias=True, tie_weights=False)
    m = seq2seq.build_model(cfg)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())) * 0.3)
    x, y = batch(cfg)
    tr = trace(m, x, y)
    labels, c, bias = decompose(tr, m, "target")
    assert "L0 cross-attn" in labels and REST_LABEL not in labels
    assert (c.sum(0) + bias - logit_of(tr, y))[y != -100].abs().max() < TOL
    assert torch.equal(logit_lens(tr, m)[1][-1], tr.logits)


@pytest.mark.parametrize("max_rows", [1, 7, 64])
def test_lens_summary_is_the_same_decoded_in_any_chunks(max_rows):
    """lens_summary decodes (point, position) rows in products of at most max_rows rows (at least one point):
    the chunking must not change any number."""
    cfg = DLA_CONFIGS["layernorm-learned-tied"]
    m = perturbed(cfg)
    x, y = batch(cfg)
    tr = trace(m, x, y).numpy()
    ref = lens_summary(tr, m, b=1, k=4, max_rows=10_000)
    s = lens_summary(tr, m, b=1, k=4, max_rows=max_rows)
    np.testing.assert_allclose(s.target_prob, ref.target_prob, atol=1e-6)
    np.testing.assert_allclose(s.top_probs, ref.top_probs, atol=1e-6)
    assert (s.top_ids[..., 0] == ref.top_ids[..., 0]).all()
    assert s.target_prob.shape == (cfg.n_layer + 1, x.shape[1])
