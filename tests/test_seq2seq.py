"""The encoder-decoder model (issue 12, part 2): the teaching material's decoder layer with cross-attention,
checked against hand-written torch code; its trace, edits and gradients; the reversal checkpoint; the
material's own training loop."""
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from gptviz import GPT, ModelConfig, describe, load_checkpoint, preset, trace
from gptviz.model.build import build_model
from gptviz.model.checkpoint import checkpoint_bytes, save_checkpoint
from gptviz.model.encoder_decoder import Seq2Seq
from gptviz.training.reversal import alignment, material_recipe, train_reverse
from gptviz.training.tasks import ReverseTask

ROOT = Path(__file__).resolve().parents[1]
REVERSE = ROOT / "checkpoints" / "reverse.safetensors"

# An encoder-decoder with a real encoder, pre-norm, learned positions, a tied head: every other branch.
REAL_ENCODER = ModelConfig(vocab_size=13, block_size=6, n_layer=2, n_head=2, n_embd=8, n_enc_layer=2, enc_len=5,
                           activation="gelu_tanh")


def material_model(seed: int = 0, scale: float = 0.2) -> Seq2Seq:
    """The preset's model with its weights pushed well away from their small initial values, so that every
    part of the computation matters to the comparisons."""
    m = Seq2Seq(preset("decoder-cross-attention"))
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(torch.randn(p.shape, generator=g) * scale)
    return m


def ids(V, B, T, seed=0):
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))


# --------------------------------------------------------------------------- the preset and its parameters
def test_preset_parameter_table_is_the_materials_printout():
    cfg = preset("decoder-cross-attention")
    assert (cfg.vocab_size, cfg.n_embd, cfg.n_head, cfg.d_head, cfg.d_mlp, cfg.n_layer) == (12, 32, 8, 4, 128, 1)
    assert (cfg.norm_placement, cfg.activation, cfg.pos_encoding, cfg.n_enc_layer, cfg.enc_len) == \
        ("post", "relu", "none", 0, 8)
    m = build_model(cfg)
    assert isinstance(m, Seq2Seq)
    rows = m.parameter_table()
    h = "transformer.h.0."
    expected = {"transformer.wte.weight": (12, 32)}
    for part in ("attn", "cross_attn"):  # separate q, k, v, o projections, no biases
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            expected[f"{h}{part}.{proj}.weight"] = (32, 32)
    expected.update({f"{h}mlp.c_fc.weight": (128, 32), f"{h}mlp.c_fc.bias": (128,),
                     f"{h}mlp.c_proj.weight": (32, 128), f"{h}mlp.c_proj.bias": (32,)})
    for ln in ("ln_1", "ln_cross", "ln_2"):
        expected[f"{h}{ln}.weight"] = (32,)
        expected[f"{h}{ln}.bias"] = (32,)
    expected.update({"lm_head.weight": (12, 32), "lm_head.bias": (12,)})
    assert {r["name"]: r["shape"] for r in rows} == expected
    assert len(rows) == len(expected) == 21
    by_hand = (12 * 32 + 4 * (32 * 32) + 4 * (32 * 32) + (32 * 128 + 128) + (128 * 32 + 32) + 3 * (32 + 32)
               + (32 * 12 + 12))
    assert by_hand == 17_516
    assert sum(r["count"] for r in rows) == m.num_params() == cfg.num_params() == by_hand
    # the table reads in the printout's order: embedding, self-attention, cross-attention, feed-forward, norms, output
    names = [r["name"] for r in rows]
    assert names[0] == "transformer.wte.weight" and names[1] == h + "attn.q_proj.weight"
    assert names[5] == h + "cross_attn.q_proj.weight" and names[9] == h + "mlp.c_fc.weight"
    assert names[13] == h + "ln_1.weight" and names[-2:] == ["lm_head.weight", "lm_head.bias"]


@pytest.mark.parametrize("kw", [
    dict(),
    dict(n_enc_layer=1, enc_len=6),
    dict(n_enc_layer=2, norm_placement="pre", pos_encoding="learned", tie_weights=True, head_bias=False),
    dict(n_enc_layer=1, pos_encoding="sinusoidal", qkv_bias=True, attn_proj_bias=True, bias=False),
    dict(n_enc_layer=1, pos_encoding="rope", attn_only=True, norm="rmsnorm", norm_placement="pre"),
    dict(n_enc_layer=0, n_layer=3, d_head=5, n_head=3, tie_weights=True),
], ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()) or "preset")
def test_num_params_from_the_config_matches_the_built_model(kw):
    cfg = preset("decoder-cross-attention", **kw)
    m = build_model(cfg)
    assert sum(r["count"] for r in m.parameter_table()) == m.num_params() == cfg.num_params()
    cfg.check_limits(batch=2)
    assert cfg.trace_bytes(2, 8) > 0
    # every variant runs, traces with gradients, and its trace's logits are the forward pass's
    src = dict(enc_input=ids(12, 2, cfg.enc_len, seed=1)) if cfg.n_enc_layer > 0 else {}
    idx = ids(12, 2, 7)
    tr = trace(m, idx, targets=idx, grads=True, **src)
    assert torch.equal(tr.logits, m(idx, **src)[0]) and math.isfinite(tr.loss)
    assert all(torch.isfinite(g).all() for g in tr.param_grads.values())
    assert ("blocks.0.attn.hook_rot_q" in tr) == (cfg.pos_encoding == "rope")
    assert not any("cross_attn.hook_rot" in n for n in tr)


def test_new_fields_in_a_decoder_only_gpt():
    base = ModelConfig(vocab_size=20, block_size=8, n_layer=2, n_head=2, n_embd=8)
    assert (base.n_enc_layer, base.enc_len, base.attn_proj_bias, base.head_bias) == (-1, 8, True, False)
    for kw in (dict(head_bias=True), dict(attn_proj_bias=False), dict(bias=False, attn_proj_bias=True)):
        c = base.replace(**kw)
        m = GPT(c)
        assert m.num_params() == c.num_params() == sum(r["count"] for r in m.parameter_table())
        assert (m.lm_head.bias is not None) == c.head_bias
        assert (m.transformer.h[0].attn.c_proj.bias is not None) == c.attn_proj_bias
        logits = trace(m, ids(20, 2, 8)).logits
        assert torch.equal(logits, m(ids(20, 2, 8))[0])
    assert base.replace(bias=False).attn_proj_bias is False  # follows bias unless given, like qkv_bias
    assert isinstance(build_model(base), GPT)
    assert base.trace_bytes(2, 8) < base.replace(n_enc_layer=0).trace_bytes(2, 8) < \
        base.replace(n_enc_layer=1).trace_bytes(2, 8)


@pytest.mark.parametrize("kw, fragment", [
    (dict(n_enc_layer=-2), "n_enc_layer=-2 must be -1 (decoder only), 0 (a fixed random encoder output) or more"),
    (dict(n_enc_layer=1.5), "n_enc_layer=1.5 must be a whole number"),
    (dict(enc_len=0), "enc_len=0 must be at least 1"),
    (dict(attn_proj_bias="no"), "attn_proj_bias='no' must be True, False or None"),
    (dict(head_bias=1), "head_bias=1 must be True or False"),
])
def test_bad_new_fields_are_value_errors(kw, fragment):
    with pytest.raises(ValueError) as err:
        ModelConfig(**kw)
    assert fragment in str(err.value)


def test_each_model_class_refuses_the_other_kind_of_config():
    with pytest.raises(ValueError, match="build_model"):
        GPT(preset("decoder-cross-attention"))
    with pytest.raises(ValueError, match="decoder-only"):
        Seq2Seq(ModelConfig())


# --------------------------------------------------------------------------- the computation, by hand
def hand_forward(m, idx, enc_out=None, enc_input=None, enc_mask=None):
    """The model's logits written with torch.nn.functional on its weights, no gptviz code: F.linear,
    F.layer_norm, F.scaled_dot_product_attention (causal for self-attention, unmasked for cross-attention)."""
    c, w = m.config, m.state_dict()
    nh, hs, C = c.n_head, c.d_head, c.n_embd
    assert c.norm == "layernorm"

    def lin(x, p):
        return F.linear(x, w[p + ".weight"], w.get(p + ".bias"))

    def ln(x, p):
        return F.layer_norm(x, (C,), w[p + ".weight"], w.get(p + ".bias"), c.ln_eps)

    def mha(xq, xkv, p, causal, key_pad=None):
        B, T, S = xq.shape[0], xq.shape[1], xkv.shape[1]
        q = lin(xq, p + ".q_proj").view(B, T, nh, hs).transpose(1, 2)
        k = lin(xkv, p + ".k_proj").view(B, S, nh, hs).transpose(1, 2)
        v = lin(xkv, p + ".v_proj").view(B, S, nh, hs).transpose(1, 2)
        mask = None if key_pad is None else key_pad.bool()[:, None, None, :]
        z = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
        return lin(z.transpose(1, 2).reshape(B, T, nh * hs), p + ".o_proj")

    def ff(x, p):
        h = lin(x, p + ".c_fc")
        h = F.relu(h) if c.activation == "relu" else F.gelu(h, approximate="tanh")
        return lin(h, p + ".c_proj")

    pre = c.norm_placement == "pre"
    if c.n_enc_layer > 0:
        e = w["transformer.wte.weight"][enc_input] + w["encoder.wpe.weight"][: enc_input.shape[1]]
        for l in range(c.n_enc_layer):
            p = f"encoder.h.{l}"
            if pre:
                h = ln(e, p + ".ln_1")
                e = e + mha(h, h, p + ".attn", False, enc_mask)
                e = e + ff(ln(e, p + ".ln_2"), p + ".mlp")
            else:
                e = ln(e + mha(e, e, p + ".attn", False, enc_mask), p + ".ln_1")
                e = ln(e + ff(e, p + ".mlp"), p + ".ln_2")
        enc_out = ln(e, "encoder.ln_f") if pre else e
    x = w["transformer.wte.weight"][idx]
    if c.pos_encoding == "learned":
        x = x + w["transformer.wpe.weight"][: idx.shape[1]]
    for l in range(c.n_layer):
        p = f"transformer.h.{l}"
        if pre:
            h = ln(x, p + ".ln_1")
            x = x + mha(h, h, p + ".attn", True)
            x = x + mha(ln(x, p + ".ln_cross"), enc_out, p + ".cross_attn", False, enc_mask)
            x = x + ff(ln(x, p + ".ln_2"), p + ".mlp")
        else:  # the material's layer: LayerNorm(x + sublayer(x)) after each of the three sublayers
            x = ln(x + mha(x, x, p + ".attn", True), p + ".ln_1")
            x = ln(x + mha(x, enc_out, p + ".cross_attn", False, enc_mask), p + ".ln_cross")
            x = ln(x + ff(x, p + ".mlp"), p + ".ln_2")
    if pre:
        x = ln(x, "transformer.ln_f")
    return lin(x, "lm_head")


def test_the_materials_post_norm_decoder_layer_by_hand():
    m = material_model()
    idx = ids(12, 3, 8)
    enc = torch.randn(3, 8, 32, generator=torch.Generator().manual_seed(5))
    logits, _ = m(idx, enc_out=enc)
    torch.testing.assert_close(logits, hand_forward(m, idx, enc_out=enc), atol=2e-5, rtol=1e-5)
    # without enc_out the model reads its fixed seeded random encoder output
    torch.testing.assert_close(m(idx)[0], hand_forward(m, idx, enc_out=m.fixed_enc_out(3)), atol=2e-5, rtol=1e-5)
    # and the norms sit after each residual sum (post-norm), as the recorded steps show
    tr = trace(m, idx, enc_out=enc)
    w = m.state_dict()

    def ln(x, p):
        return F.layer_norm(x, (32,), w[f"transformer.h.0.{p}.weight"], w[f"transformer.h.0.{p}.bias"], 1e-5)
    b = "blocks.0."
    torch.testing.assert_close(tr[b + "hook_resid_mid"], ln(tr[b + "hook_resid_pre"] + tr[b + "hook_attn_out"], "ln_1"))
    torch.testing.assert_close(tr[b + "hook_resid_cross"],
                               ln(tr[b + "hook_resid_mid"] + tr[b + "hook_cross_out"], "ln_cross"))
    torch.testing.assert_close(tr[b + "hook_resid_post"],
                               ln(tr[b + "hook_resid_cross"] + tr[b + "hook_mlp_out"], "ln_2"))
    assert torch.equal(tr.logits, F.linear(tr[b + "hook_resid_post"], w["lm_head.weight"], w["lm_head.bias"]))


def test_a_real_encoder_pre_norm_by_hand_with_source_padding():
    m = Seq2Seq(REAL_ENCODER)
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.3)
    idx, src = ids(13, 3, 6, seed=1), ids(13, 3, 5, seed=2)
    torch.testing.assert_close(m(idx, enc_input=src)[0], hand_forward(m, idx, enc_input=src), atol=2e-5, rtol=1e-5)
    pad = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 0, 0, 0, 0]])
    got = m(idx, enc_input=src, enc_mask=pad)[0]
    torch.testing.assert_close(got, hand_forward(m, idx, enc_input=src, enc_mask=pad), atol=2e-5, rtol=1e-5)
    # what sits under padding does not matter
    src2 = src.clone()
    src2[1, 3:] = (src2[1, 3:] + 1) % 13
    src2[2, 1:] = (src2[2, 1:] + 5) % 13
    torch.testing.assert_close(m(idx, enc_input=src2, enc_mask=pad)[0], got)
    pat = trace(m, idx, enc_input=src, enc_mask=pad)["blocks.1.cross_attn.hook_pattern"]
    assert torch.all(pat[1, :, :, 3:] == 0) and torch.all(pat[2, :, :, 1:] == 0)
    torch.testing.assert_close(pat.sum(-1), torch.ones(3, 2, 6))


def test_cross_attention_equals_an_independent_computation():
    m = material_model(seed=1)
    idx = ids(12, 2, 8, seed=4)
    tr = trace(m, idx)
    w = m.state_dict()
    B, T, S, nh, hs = 2, 8, 8, 8, 4
    x, enc = tr["blocks.0.hook_resid_mid"], tr["hook_enc_out"]  # post-norm: cross-attention reads x_mid itself
    assert torch.equal(enc, m.fixed_enc_out(2))
    p = "transformer.h.0.cross_attn."
    q = (x @ w[p + "q_proj.weight"].T).view(B, T, nh, hs).transpose(1, 2)
    k = (enc @ w[p + "k_proj.weight"].T).view(B, S, nh, hs).transpose(1, 2)
    v = (enc @ w[p + "v_proj.weight"].T).view(B, S, nh, hs).transpose(1, 2)
    pattern = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(hs), dim=-1)  # no causal mask
    torch.testing.assert_close(tr["blocks.0.cross_attn.hook_pattern"], pattern)
    sdpa = F.scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(tr["blocks.0.cross_attn.hook_z"], sdpa.transpose(1, 2))
    out = sdpa.transpose(1, 2).reshape(B, T, nh * hs) @ w[p + "o_proj.weight"].T
    torch.testing.assert_close(tr["blocks.0.hook_cross_out"], out)
    # every output position can see every encoder position, the last included: nothing is masked
    assert not torch.isinf(tr["blocks.0.cross_attn.hook_attn_scores"]).any()
    assert bool((tr["blocks.0.cross_attn.hook_pattern"][:, :, 0, -1] > 0).all())
    # and self-attention keeps its causal mask
    assert bool((tr["blocks.0.attn.hook_pattern"][:, :, 0, 1:] == 0).all())


def test_fixed_encoder_output_is_seeded_and_the_same_row_for_any_batch():
    m = Seq2Seq(preset("decoder-cross-attention"))
    a, b = m.fixed_enc_out(10), m.fixed_enc_out(3)
    assert a.shape == (10, 8, 32) and torch.equal(a[:3], b)
    assert torch.equal(a, Seq2Seq(preset("decoder-cross-attention")).fixed_enc_out(10))
    assert not torch.equal(a, Seq2Seq(preset("decoder-cross-attention", seed=1)).fixed_enc_out(10))
    assert 0.9 < float(a.std()) < 1.1


def test_causality_on_the_decoder_side_only():
    m = Seq2Seq(REAL_ENCODER)
    idx, src = ids(13, 1, 6, seed=1), ids(13, 1, 5, seed=2)
    base = m(idx, enc_input=src)[0]
    idx2 = idx.clone()
    idx2[0, 3] = (idx2[0, 3] + 1) % 13
    diff = (m(idx2, enc_input=src)[0] - base).abs().amax(-1)[0]
    assert bool((diff[:3] == 0).all()) and bool((diff[3:] > 0).all())
    src2 = src.clone()
    src2[0, 4] = (src2[0, 4] + 1) % 13  # the last source token reaches every output position
    assert bool(((m(idx, enc_input=src2)[0] - base).abs().amax(-1) > 0).all())


# --------------------------------------------------------------------------- the trace
def expected_names(c: ModelConfig, targets: bool) -> list[str]:
    """Written independently of the model: the hook names in computation order."""
    norm = lambda p: [f"{p}.hook_scale", f"{p}.hook_normalized", f"{p}.hook_out"]
    attn = lambda p: [p + f"hook_{n}" for n in ("q", "k", "v", "scores_raw", "scores_scaled", "attn_scores",
                                                "pattern", "z")]
    pre = c.norm_placement == "pre"
    names = []
    if c.n_enc_layer > 0:
        names += ["hook_enc_embed", "hook_enc_pos_embed"]
        for l in range(c.n_enc_layer):
            b = f"enc_blocks.{l}."
            names.append(b + "hook_resid_pre")
            if pre:
                names += norm(b + "ln1") + attn(b + "attn.") + [b + "hook_attn_out", b + "hook_resid_mid"]
                names += norm(b + "ln2") + [b + "mlp.hook_pre", b + "mlp.hook_post", b + "hook_mlp_out",
                                            b + "hook_resid_post"]
            else:
                names += attn(b + "attn.") + [b + "hook_attn_out"] + norm(b + "ln1") + [b + "hook_resid_mid"]
                names += ([b + "mlp.hook_pre", b + "mlp.hook_post", b + "hook_mlp_out"] + norm(b + "ln2")
                          + [b + "hook_resid_post"])
        if pre:
            names += norm("enc_ln_final")
    names += ["hook_enc_out", "hook_embed"] + (["hook_pos_embed"] if c.pos_encoding == "learned" else [])
    for l in range(c.n_layer):
        b = f"blocks.{l}."
        names.append(b + "hook_resid_pre")
        if pre:
            names += norm(b + "ln1") + attn(b + "attn.") + [b + "hook_attn_out", b + "hook_resid_mid"]
            names += norm(b + "ln_cross") + attn(b + "cross_attn.") + [b + "hook_cross_out", b + "hook_resid_cross"]
            names += norm(b + "ln2") + [b + "mlp.hook_pre", b + "mlp.hook_post", b + "hook_mlp_out",
                                        b + "hook_resid_post"]
        else:
            names += attn(b + "attn.") + [b + "hook_attn_out"] + norm(b + "ln1") + [b + "hook_resid_mid"]
            names += attn(b + "cross_attn.") + [b + "hook_cross_out"] + norm(b + "ln_cross") + [b + "hook_resid_cross"]
            names += ([b + "mlp.hook_pre", b + "mlp.hook_post", b + "hook_mlp_out"] + norm(b + "ln2")
                      + [b + "hook_resid_post"])
    if pre:
        names += norm("ln_final")
    names.append("hook_logits")
    if targets:
        names += ["hook_probs", "hook_loss_per_token", "hook_loss"]
    return names


def expected_shape(name: str, c: ModelConfig, B: int, T: int, S: int) -> tuple:
    leaf = name.rsplit(".", 1)[-1]
    enc = name.startswith(("enc_", "hook_enc_"))
    P = S if enc else T
    if ".cross_attn." in name:
        return {"hook_q": (B, T, c.n_head, c.d_head), "hook_z": (B, T, c.n_head, c.d_head),
                "hook_k": (B, S, c.n_head, c.d_head),
                "hook_v": (B, S, c.n_head, c.d_head)}.get(leaf, (B, c.n_head, T, S))
    if leaf in ("hook_q", "hook_k", "hook_v", "hook_z"):
        return (B, P, c.n_head, c.d_head)
    if leaf in ("hook_scores_raw", "hook_scores_scaled", "hook_attn_scores", "hook_pattern"):
        return (B, c.n_head, P, P)
    if leaf in ("hook_pre", "hook_post"):
        return (B, P, c.d_mlp)
    if leaf == "hook_scale":
        return (B, P, 1)
    if leaf in ("hook_logits", "hook_probs"):
        return (B, T, c.vocab_size)
    if leaf == "hook_loss_per_token":
        return (B, T)
    if leaf == "hook_loss":
        return ()
    return (B, P, c.n_embd)


@pytest.mark.parametrize("cfg", [preset("decoder-cross-attention"), REAL_ENCODER,
                                 REAL_ENCODER.replace(norm_placement="post", n_enc_layer=1)],
                         ids=["preset", "real-encoder-pre", "real-encoder-post"])
def test_trace_names_shapes_axes_and_descriptions(cfg):
    m = build_model(cfg)
    B, T = 2, cfg.block_size - 1
    S = cfg.enc_len if cfg.n_enc_layer == 0 else cfg.enc_len - 1
    src = dict(enc_input=ids(cfg.vocab_size, B, S, seed=7)) if cfg.n_enc_layer > 0 else {}
    idx, y = ids(cfg.vocab_size, B, T), ids(cfg.vocab_size, B, T, seed=1)
    tr = trace(m, idx, targets=y, **src)
    assert list(tr) == expected_names(cfg, targets=True)
    assert list(trace(m, idx, **src)) == expected_names(cfg, targets=False)
    assert set(m.hook_names()) - ({"hook_pos_embed", "hook_enc_pos_embed"} if cfg.pos_encoding != "learned"
                                  else set()) \
        - ({"hook_enc_embed", "hook_enc_pos_embed"} if cfg.n_enc_layer == 0 else set()) == set(trace(m, idx, **src))
    for name in tr:
        assert tr.shape(name) == expected_shape(name, cfg, B, T, S), name
        info = describe(name, cfg)
        assert info.axes == tr.info(name).axes and len(info.axes) == len(tr.shape(name)), name
        assert info.formula and info.explanation.endswith(".") and info.code, name
        assert info.stack == ("encoder" if name.startswith(("enc_", "hook_enc_")) else "decoder"), name
    for part in ("scores_raw", "scores_scaled", "attn_scores", "pattern"):
        info = describe(f"blocks.0.cross_attn.hook_{part}", cfg)
        assert info.axes == ("batch", "head", "query_pos", "enc_pos") and info.stage == "cross_attention"
    assert describe("blocks.0.cross_attn.hook_k", cfg).axes == ("batch", "enc_pos", "head", "d_head")
    assert describe("blocks.0.cross_attn.hook_pattern", cfg).probability
    assert describe("blocks.0.cross_attn.hook_attn_scores", cfg).masked
    assert describe("hook_enc_out", cfg).axes == ("batch", "enc_pos", "d_model")
    assert "No causal mask" in describe("blocks.0.cross_attn.hook_attn_scores", cfg).explanation
    assert "x_{\\mathrm{cross}}" in describe("blocks.0.mlp.hook_pre", cfg).formula
    if cfg.n_enc_layer > 0:
        e = describe("enc_blocks.0.attn.hook_pattern", cfg)
        assert e.layer == 0 and e.title.startswith("enc L0") and e.axes == ("batch", "head", "query_pos", "key_pos")
        assert "no causal mask" in describe("enc_blocks.0.attn.hook_attn_scores", cfg).explanation
        assert describe("enc_blocks.0.hook_resid_pre", cfg).axes == ("batch", "enc_pos", "d_model")
    assert torch.equal(tr.logits, m(idx, **src)[0])  # recording changes nothing
    n = tr.numpy()
    assert n.source.keys() == tr.source.keys() and n["blocks.0.cross_attn.hook_pattern"].shape == tr.shape(
        "blocks.0.cross_attn.hook_pattern")


def test_decoder_only_steps_do_not_know_the_new_names():
    with pytest.raises(ValueError):
        describe("blocks.0.cross_attn.hook_pattern", ModelConfig())
    with pytest.raises(ValueError):
        describe("hook_enc_out", ModelConfig())
    # and GPT's own descriptions follow the new bias fields
    assert "b_U" in describe("hook_logits", ModelConfig(head_bias=True)).formula
    assert "b_O" not in describe("blocks.0.hook_attn_out", ModelConfig(attn_proj_bias=False)).formula


def test_bad_source_inputs_are_value_errors():
    m = Seq2Seq(REAL_ENCODER)
    idx = ids(13, 2, 4)
    with pytest.raises(ValueError, match="pass enc_input"):
        trace(m, idx)
    with pytest.raises(ValueError, match="longer than enc_len=5"):
        trace(m, idx, enc_input=ids(13, 2, 6))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        trace(m, idx, enc_input=torch.full((2, 3), 13))
    with pytest.raises(ValueError, match="enc_mask must have the shape"):
        trace(m, idx, enc_input=ids(13, 2, 3), enc_mask=torch.ones(2, 4))
    with pytest.raises(ValueError, match="not enc_out"):
        trace(m, idx, enc_out=torch.zeros(2, 3, 8))
    fixed = Seq2Seq(preset("decoder-cross-attention"))
    with pytest.raises(ValueError, match="no encoder"):
        trace(fixed, ids(12, 2, 4), enc_input=ids(12, 2, 4))
    with pytest.raises(ValueError, match="enc_out has shape"):
        trace(fixed, ids(12, 2, 4), enc_out=torch.zeros(2, 3, 31))
    with pytest.raises(ValueError, match="decoder-only"):
        trace(GPT(ModelConfig()), ids(64, 2, 4), enc_out=torch.zeros(2, 3, 32))


def test_editing_the_cross_attention_pattern_changes_only_what_lies_downstream():
    m = material_model(seed=2)
    idx = ids(12, 2, 8, seed=3)
    base = trace(m, idx)
    name = "blocks.0.cross_attn.hook_pattern"

    def look_at_first(p):  # every output position takes everything from encoder position 0
        p[:] = 0
        p[..., 0] = 1
        return p
    edited = trace(m, idx, edits={name: look_at_first})
    order = list(base)
    i = order.index(name)
    for n in order[:i]:  # everything upstream, the cross-attention scores included, is untouched
        assert torch.equal(base[n], edited[n]), n
    assert torch.all(edited[name][..., 0] == 1)
    z = edited["blocks.0.cross_attn.hook_z"]
    v = edited["blocks.0.cross_attn.hook_v"]
    torch.testing.assert_close(z, v[:, :1].expand_as(z))  # the weighted average is now encoder position 0's value
    for n in order[i + 1:]:
        assert not torch.equal(base[n], edited[n]), n
    assert (base.logits - edited.logits).abs().max() > 1e-3
    # an edit of the encoder output reaches every output position, through cross-attention only
    e2 = trace(m, idx, edits={"hook_enc_out": lambda e: e * 2})
    assert torch.equal(e2["blocks.0.hook_resid_mid"], base["blocks.0.hook_resid_mid"])
    assert bool(((e2.logits - base.logits).abs().amax(-1) > 0).all())


def test_grads_are_finite_and_equal_autograd_on_the_plain_model():
    m = material_model(seed=3)
    idx, y = ids(12, 3, 8, seed=5), ids(12, 3, 8, seed=6)
    tr = trace(m, idx, targets=y, grads=True)
    for n in tr:
        g = tr.grad(n)
        if g is not None:
            assert torch.isfinite(g).all(), n
    assert tr.grad("hook_enc_out").shape == (3, 8, 32) and tr.grad("hook_enc_out").abs().sum() > 0
    assert tr.grad("blocks.0.cross_attn.hook_pattern").abs().sum() > 0
    m.zero_grad()
    _, loss = m(idx, y)
    loss.backward()
    assert math.isclose(tr.loss, loss.item(), rel_tol=1e-6)
    for name in ("transformer.h.0.cross_attn.k_proj.weight", "transformer.h.0.cross_attn.q_proj.weight",
                 "lm_head.bias"):
        torch.testing.assert_close(tr.param_grads[name], dict(m.named_parameters())[name].grad, atol=1e-6, rtol=1e-5)
    # a real encoder's weights get their gradient through cross-attention
    r = Seq2Seq(REAL_ENCODER)
    tr = trace(r, ids(13, 2, 4), targets=ids(13, 2, 4, seed=1), grads=True, enc_input=ids(13, 2, 5, seed=2))
    assert tr.param_grads["encoder.h.0.attn.q_proj.weight"].abs().sum() > 0
    assert torch.isfinite(tr.grad("enc_blocks.0.attn.hook_pattern")).all()


# --------------------------------------------------------------------------- checkpoints
@pytest.mark.parametrize("cfg", [preset("decoder-cross-attention"), REAL_ENCODER,
                                 REAL_ENCODER.replace(tie_weights=False, head_bias=True, pos_encoding="sinusoidal")],
                         ids=["preset", "real-encoder-tied", "real-encoder-untied"])
def test_checkpoint_round_trip(tmp_path, cfg):
    m = build_model(cfg)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(0)) * 0.1)
    path = tmp_path / "m.safetensors"
    save_checkpoint(path, m, None, note="x")
    for ck in (load_checkpoint(path), load_checkpoint(checkpoint_bytes(m, None, note="x"))):
        assert isinstance(ck.model, Seq2Seq) and ck.config == cfg and ck.meta == {"note": "x"}
        src = dict(enc_input=ids(cfg.vocab_size, 2, 4)) if cfg.n_enc_layer > 0 else {}
        idx = ids(cfg.vocab_size, 2, 5, seed=1)
        assert torch.equal(ck.model(idx, **src)[0], m(idx, **src)[0])


@pytest.fixture(scope="module")
def reverse():
    return load_checkpoint(REVERSE)


def test_the_shipped_reverse_checkpoint(reverse):
    m, tok, meta = reverse.model, reverse.tokenizer, reverse.meta
    assert isinstance(m, Seq2Seq) and m.config.n_enc_layer >= 1 and m.config.pos_encoding == "learned"
    assert meta["command"] == "python -m gptviz.train --task reverse --out checkpoints/reverse.safetensors --threads 1"
    task = ReverseTask()
    assert tok.vocab == task.tokenizer.vocab
    b = task.batch(200, torch.Generator().manual_seed(2024))  # 200 fresh sequences (training used other seeds)
    logits, loss = m(b.x, b.y, enc_input=b.src)
    assert task.accuracy(logits, b.y) >= 0.99
    # greedy decoding, one token at a time from the start token, writes the whole reversal
    x = torch.full((200, 1), task.start_id)
    with torch.no_grad():
        for _ in range(task.length):
            nxt = m(x, enc_input=b.src)[0][:, -1].argmax(-1, keepdim=True)
            x = torch.cat([x, nxt], 1)
    assert float((x[:, 1:] == b.src.flip(1)).all(1).float().mean()) >= 0.99
    assert tok.decode(x[0, 1:].tolist()) == tok.decode(b.src[0].tolist())[::-1]


def test_reverse_cross_attention_is_the_anti_diagonal(reverse):
    m, task = reverse.model, ReverseTask()
    a = alignment(m, task, n=200, seed=7)  # (n_layer, n_head): weight on source position L-1-t, mean over t
    assert a.shape == (m.config.n_layer, m.config.n_head)
    assert float(a.mean()) > 0.5
    b = task.batch(200, torch.Generator().manual_seed(7))
    pat = trace(m, b.x, enc_input=b.src)["blocks.0.cross_attn.hook_pattern"].mean(dim=(0, 1))  # (T, S)
    L = task.length
    assert torch.equal(pat.argmax(-1), torch.arange(L - 1, -1, -1))  # every row peaks on its mirror position


def test_reverse_task_batches():
    task = ReverseTask(n_letters=6, length=5)
    b = task.batch(4, torch.Generator().manual_seed(0))
    assert b.src.shape == b.x.shape == b.y.shape == (4, 5)
    assert torch.equal(b.y, b.src.flip(1))
    assert bool((b.x[:, 0] == task.start_id).all()) and torch.equal(b.x[:, 1:], b.y[:, :-1])
    assert task.decoder_text("abcd") == "^dcb"
    assert torch.equal(task.batch(4, torch.Generator().manual_seed(0)).src, b.src)


def test_train_reverse_is_seeded():
    a = train_reverse(steps=15, batch_size=16, seed=3)[1]
    b = train_reverse(steps=15, batch_size=16, seed=3)[1]
    assert a["loss"] == b["loss"] and a["loss"][-1] < a["loss"][0]


# --------------------------------------------------------------------------- the material's training loop
def test_material_recipe_loss_falls():
    r = material_recipe(steps=60)
    loss = r["loss"]
    assert len(loss) == 61 and all(math.isfinite(v) for v in loss)
    assert math.isclose(loss[0], math.log(12), rel_tol=0.05)  # starts near ln V
    assert loss[-1] < 0.6 * loss[0] and loss[30] < loss[0]
    assert r["enc_out"].shape == (10, 8, 32) and r["targets"].shape == (10, 8)
    assert torch.equal(r["targets"], material_recipe(steps=1)["targets"])  # seeded
    shifted = material_recipe(steps=60, shift=True)["loss"]
    assert shifted[-1] < shifted[0]
