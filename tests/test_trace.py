"""The recorded forward pass: names, shapes, identities, parity with PyTorch's own ops, edits, grads."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import CONFIGS, random_ids

from gptviz import GPT, ModelConfig, describe, trace
from gptviz.model.layers import apply_rope, rope_angles, sinusoidal_table


def expected_names(c: ModelConfig, targets: bool) -> list[str]:
    """Written independently of the model: the TransformerLens-style names, in computation order."""
    names = ["hook_embed"]
    if c.pos_encoding in ("learned", "sinusoidal"):
        names.append("hook_pos_embed")
    norm = lambda p: [f"{p}.hook_scale", f"{p}.hook_normalized", f"{p}.hook_out"]
    for l in range(c.n_layer):
        b = f"blocks.{l}."
        attn = [b + "attn.hook_qkv", b + "attn.hook_q", b + "attn.hook_k", b + "attn.hook_v"]
        if c.pos_encoding == "rope":
            attn += [b + "attn.hook_rot_q", b + "attn.hook_rot_k"]
        if c.n_kv_head != c.n_head:  # grouped-query attention: keys and values repeated to the query heads
            attn += [b + "attn.hook_k_rep", b + "attn.hook_v_rep"]
        attn += [b + f"attn.hook_{n}" for n in ("scores_raw", "scores_scaled", "attn_scores", "pattern", "z")]
        mlp = [b + "mlp.hook_pre"] + ([b + "mlp.hook_pre_linear"] if c.gated_mlp else []) + [b + "mlp.hook_post"]
        names.append(b + "hook_resid_pre")
        if c.norm_placement == "pre":
            names += norm(b + "ln1") + attn + [b + "hook_attn_out", b + "hook_resid_mid"]
            names += norm(b + "ln2") + mlp + [b + "hook_mlp_out", b + "hook_resid_post"]
        else:
            names += attn + [b + "hook_attn_out"] + norm(b + "ln1") + [b + "hook_resid_mid"]
            names += mlp + [b + "hook_mlp_out"] + norm(b + "ln2") + [b + "hook_resid_post"]
    if c.norm_placement == "pre":
        names += norm("ln_final")
    names.append("hook_logits")
    if targets:
        names += ["hook_probs", "hook_loss_per_token", "hook_loss"]
    return names


def expected_shape(name: str, c: ModelConfig, B: int, T: int) -> tuple:
    leaf = name.rsplit(".", 1)[-1]
    if leaf in ("hook_k", "hook_v", "hook_rot_k"):
        return (B, T, c.n_kv_head, c.d_head)
    if leaf in ("hook_q", "hook_rot_q", "hook_z", "hook_k_rep", "hook_v_rep"):
        return (B, T, c.n_head, c.d_head)
    if leaf in ("hook_scores_raw", "hook_scores_scaled", "hook_attn_scores", "hook_pattern"):
        return (B, c.n_head, T, T)
    if leaf == "hook_qkv":
        return (B, T, (c.n_head + 2 * c.n_kv_head) * c.d_head)
    if leaf in ("hook_pre", "hook_pre_linear", "hook_post"):
        return (B, T, c.d_mlp)
    if leaf == "hook_scale":
        return (B, T, 1)
    if leaf in ("hook_logits", "hook_probs"):
        return (B, T, c.vocab_size)
    if leaf == "hook_loss_per_token":
        return (B, T)
    if leaf == "hook_loss":
        return ()
    return (B, T, c.n_embd)


def test_names_shapes_and_order(cfg, model):
    idx = random_ids(cfg, B=2, T=5)
    tr = trace(model, idx, targets=random_ids(cfg, B=2, T=5, seed=1))
    assert list(tr) == expected_names(cfg, targets=True)
    for name in tr:
        assert tr.shape(name) == expected_shape(name, cfg, 2, 5), name
        assert len(tr.info(name).axes) == len(tr.shape(name)), name
        words = describe(name, cfg)
        assert words.axes == tr.info(name).axes and words.kind == tr.info(name).kind, name
        assert words.formula and words.explanation.endswith(".") and words.code, name
    assert list(trace(model, idx)) == expected_names(cfg, targets=False)


def test_every_hook_point_of_the_model_is_recorded(cfg, model):
    tr = trace(model, random_ids(cfg))
    assert set(model.hook_names()) - {"hook_pos_embed", } <= set(tr) | {
        n for n in model.hook_names() if "rot_" in n and cfg.pos_encoding != "rope"}


def test_recording_changes_nothing(cfg, model):
    idx = random_ids(cfg, B=3)
    plain_logits, _ = model(idx)
    tr = trace(model, idx)
    assert torch.equal(tr["hook_logits"], plain_logits.detach())  # bit-identical


def test_value_kinds():
    tr = trace(GPT(CONFIGS["gpt2-like"]), random_ids(CONFIGS["gpt2-like"]),
               targets=random_ids(CONFIGS["gpt2-like"], seed=2))
    assert tr.info("blocks.0.attn.hook_pattern").probability
    assert tr.info("hook_probs").probability
    assert tr.info("blocks.0.attn.hook_attn_scores").masked
    assert tr.info("blocks.0.hook_resid_pre").signed
    assert tr.info("blocks.0.ln1.hook_scale").kind == "nonnegative"
    assert tr.info("blocks.1.attn.hook_z").layer == 1
    assert tr.info("blocks.0.attn.hook_pattern").axes == ("batch", "head", "query_pos", "key_pos")


def test_residual_identities_pre_norm():
    c = CONFIGS["gpt2-like"]
    tr = trace(GPT(c), random_ids(c))
    for l in range(c.n_layer):
        b = f"blocks.{l}."
        assert torch.allclose(tr[b + "hook_resid_mid"], tr[b + "hook_resid_pre"] + tr[b + "hook_attn_out"])
        assert torch.allclose(tr[b + "hook_resid_post"], tr[b + "hook_resid_mid"] + tr[b + "hook_mlp_out"])
        if l:
            assert torch.equal(tr[b + "hook_resid_pre"], tr[f"blocks.{l - 1}.hook_resid_post"])
    assert torch.allclose(tr["blocks.0.hook_resid_pre"], tr["hook_embed"] + tr["hook_pos_embed"])


def test_post_norm_identities():
    c = CONFIGS["rms-post-sin-gelu"]
    tr = trace(GPT(c), random_ids(c))
    x = tr["blocks.0.hook_resid_pre"] + tr["blocks.0.hook_attn_out"]
    rms = x.pow(2).mean(-1, keepdim=True).add(c.ln_eps).sqrt()
    assert torch.allclose(tr["blocks.0.hook_resid_mid"], x / rms * GPT(c).transformer.h[0].ln_1.weight, atol=1e-6)
    assert "ln_final.hook_out" not in tr


def test_causality(cfg, model):
    idx = random_ids(cfg, B=1)
    t = cfg.block_size // 2
    idx2 = idx.clone()
    idx2[0, t] = (idx2[0, t] + 1) % cfg.vocab_size
    a, b = trace(model, idx), trace(model, idx2)
    for name in a:
        axes = a.info(name).axes
        if "pos" in axes:
            sl = [slice(None)] * len(axes)
            sl[axes.index("pos")] = slice(0, t)
            assert torch.equal(a[name][tuple(sl)], b[name][tuple(sl)]), name
        elif "query_pos" in axes:
            assert torch.equal(a[name][:, :, :t, :t], b[name][:, :, :t, :t]), name
    assert not torch.equal(a["hook_logits"][:, t:], b["hook_logits"][:, t:])


def test_pattern_rows_sum_to_one_and_masked_cells_are_zero(cfg, model):
    tr = trace(model, random_ids(cfg, B=2))
    T = cfg.block_size
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    for l in range(cfg.n_layer):
        p = tr[f"blocks.{l}.attn.hook_pattern"]
        assert torch.allclose(p.sum(-1), torch.ones(p.shape[:-1]), atol=1e-6)
        assert (p[..., future] == 0).all()
        s = tr[f"blocks.{l}.attn.hook_attn_scores"]
        assert torch.isneginf(s[..., future]).all() and torch.isfinite(s[..., ~future]).all()


def test_attention_equals_scaled_dot_product_attention(cfg, model):
    tr = trace(model, random_ids(cfg, B=2))
    rot = cfg.pos_encoding == "rope"
    for l in range(cfg.n_layer):
        a = f"blocks.{l}.attn."
        q = tr[a + ("hook_rot_q" if rot else "hook_q")].transpose(1, 2)
        k = tr[a + ("hook_rot_k" if rot else "hook_k")].transpose(1, 2)
        v = tr[a + "hook_v"].transpose(1, 2)
        gqa = cfg.n_kv_head != cfg.n_head  # keys and values of (B, nkv, S, hs): torch's own grouped-query attention
        ref = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa).transpose(1, 2)
        if gqa:
            k = k.repeat_interleave(cfg.n_head // cfg.n_kv_head, dim=1)
        assert torch.allclose(tr[a + "hook_z"], ref, atol=1e-6)
        scores = q @ k.transpose(-2, -1) / math.sqrt(cfg.d_head)
        assert torch.allclose(tr[a + "hook_scores_scaled"], scores, atol=1e-6)


def test_padding_mask_matches_sdpa_with_a_boolean_mask():
    c = CONFIGS["gpt2-like"]
    m = GPT(c)
    idx = random_ids(c, B=2, T=6)
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0]])
    tr = trace(m, idx, attention_mask=mask)
    q, k, v = (tr[f"blocks.0.attn.hook_{n}"].transpose(1, 2) for n in "qkv")
    allowed = torch.ones(6, 6, dtype=torch.bool).tril()[None, None] & mask.bool()[:, None, None, :]
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed).transpose(1, 2)
    assert torch.allclose(tr["blocks.0.attn.hook_z"], ref, atol=1e-6)
    p = tr["blocks.0.attn.hook_pattern"]
    assert (p[1, :, :, 3:] == 0).all() and torch.isneginf(tr["blocks.0.attn.hook_attn_scores"][1, :, 5, 3:]).all()
    # Padding never changes the real tokens' results.
    alone = trace(m, idx[1:, :3])
    assert torch.allclose(tr["hook_logits"][1, :3], alone["hook_logits"][0], atol=1e-6)


def test_left_padding_gives_zero_rows_not_nan_and_finite_grads():
    c = CONFIGS["gpt2-like"]
    idx = random_ids(c, B=1, T=4)
    mask = torch.tensor([[0, 0, 1, 1]])
    targets = torch.tensor([[-100, -100, 3, 4]])
    tr = trace(GPT(c), idx, targets=targets, attention_mask=mask, grads=True)
    p = tr["blocks.0.attn.hook_pattern"]
    assert (p[0, :, :2] == 0).all()
    assert torch.allclose(p[0, :, 2:].sum(-1), torch.ones(c.n_head, 2))
    assert all(torch.isfinite(g).all() for g in tr.grads.values())
    assert all(torch.isfinite(g).all() for g in tr.param_grads.values())


def test_norms_equal_torch_and_formula(cfg, model):
    tr = trace(model, random_ids(cfg))
    x = tr["blocks.0.hook_resid_pre"]
    if cfg.norm_placement == "post":
        x = x + tr["blocks.0.hook_attn_out"]
    ln = model.transformer.h[0].ln_1
    if cfg.norm == "layernorm":
        ref = F.layer_norm(x, (cfg.n_embd,), ln.weight, ln.bias, eps=cfg.ln_eps)
        assert torch.allclose(tr["blocks.0.ln1.hook_scale"],
                              torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + cfg.ln_eps))
    else:
        rms = torch.sqrt((x ** 2).mean(-1, keepdim=True) + cfg.ln_eps)
        ref = x / rms * ln.weight + (ln.bias if ln.bias is not None else 0)
        assert torch.allclose(tr["blocks.0.ln1.hook_scale"], rms)
        assert torch.allclose(ref, F.rms_norm(x, (cfg.n_embd,), ln.weight, eps=cfg.ln_eps)
                              + (ln.bias if ln.bias is not None else 0), atol=1e-6)
    assert torch.allclose(tr["blocks.0.ln1.hook_out"], ref, atol=1e-6)


def test_mlp_activation(cfg, model):
    tr = trace(model, random_ids(cfg))
    h = tr["blocks.0.mlp.hook_pre"]
    ref = {"gelu": lambda h: 0.5 * h * (1 + torch.erf(h / math.sqrt(2))),
           "gelu_tanh": lambda h: 0.5 * h * (1 + torch.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h ** 3))),
           "relu": lambda h: h.clamp(min=0), "silu": lambda h: h * torch.sigmoid(h)}[cfg.activation](h)
    if cfg.gated_mlp:  # the activated gate times the other projection
        ref = ref * tr["blocks.0.mlp.hook_pre_linear"]
    assert torch.allclose(tr["blocks.0.mlp.hook_post"], ref, atol=1e-6)


def test_sinusoidal_table_against_its_formula():
    d, n = 6, 5
    tab = sinusoidal_table(n, d)
    for t in range(n):
        for i in range(d // 2):
            assert tab[t, 2 * i].item() == pytest.approx(math.sin(t / 10000 ** (2 * i / d)), abs=1e-6)
            assert tab[t, 2 * i + 1].item() == pytest.approx(math.cos(t / 10000 ** (2 * i / d)), abs=1e-6)
    odd = sinusoidal_table(3, 5)
    assert odd[2, 4].item() == pytest.approx(math.sin(2 / 10000 ** (4 / 5)), abs=1e-6)


def test_sinusoidal_positions_enter_the_residual_stream():
    c = CONFIGS["rms-post-sin-gelu"]
    tr = trace(GPT(c), random_ids(c, B=1, T=4))
    assert torch.allclose(tr["hook_pos_embed"][0], sinusoidal_table(c.block_size, c.n_embd)[:4])


def test_rope_against_its_formula():
    T, d, base = 5, 6, 10000.0
    x = torch.randn(1, T, 2, d, generator=torch.Generator().manual_seed(0))
    ang = rope_angles(T, d, base)
    out = apply_rope(x, ang.cos(), ang.sin())
    for t in range(T):
        for i in range(d // 2):
            theta = t * base ** (-2 * i / d)
            a, b = x[0, t, :, i], x[0, t, :, i + d // 2]
            assert torch.allclose(out[0, t, :, i], a * math.cos(theta) - b * math.sin(theta), atol=1e-6)
            assert torch.allclose(out[0, t, :, i + d // 2], b * math.cos(theta) + a * math.sin(theta), atol=1e-6)
    # Rotation keeps lengths, and scores depend only on the offset between positions.
    assert torch.allclose(out.norm(dim=-1), x.norm(dim=-1), atol=1e-5)
    q = torch.randn(d, generator=torch.Generator().manual_seed(1))
    k = torch.randn(d, generator=torch.Generator().manual_seed(2))
    ang = rope_angles(8, d)
    rot = lambda v, t: apply_rope(v.expand(1, 8, 1, d), ang.cos(), ang.sin())[0, t, 0]
    assert (rot(q, 5) @ rot(k, 3)).item() == pytest.approx((rot(q, 3) @ rot(k, 1)).item(), abs=1e-5)


def test_rope_hooks_are_the_rotated_q_and_k():
    c = CONFIGS["rope-relu-wide-heads"]
    tr = trace(GPT(c), random_ids(c, B=1))
    ang = rope_angles(c.block_size, c.d_head)
    assert torch.allclose(tr["blocks.0.attn.hook_rot_q"], apply_rope(tr["blocks.0.attn.hook_q"], ang.cos(), ang.sin()))


def test_loss_in_trace_equals_cross_entropy(cfg, model):
    idx = random_ids(cfg)
    y = random_ids(cfg, seed=3)
    y[0, -3:] = -100
    tr = trace(model, idx, targets=y)
    ref = F.cross_entropy(tr["hook_logits"].reshape(-1, cfg.vocab_size), y.reshape(-1), ignore_index=-100)
    assert tr.loss == pytest.approx(ref.item(), rel=1e-6)
    assert (tr["hook_loss_per_token"][0, -3:] == 0).all()
    model.eval()
    assert model(idx, y)[1].item() == pytest.approx(ref.item(), rel=1e-6)


def test_zeroing_a_head_changes_only_what_lies_downstream():
    c = CONFIGS["gpt2-like"]
    m = GPT(c)
    idx = random_ids(c)

    def zero_head_1(p):
        p[:, 1] = 0
        return p

    base = trace(m, idx)
    ed = trace(m, idx, edits={"blocks.1.attn.hook_pattern": zero_head_1})
    names = list(base)
    cut = names.index("blocks.1.attn.hook_pattern")
    for n in names[:cut]:
        assert torch.equal(base[n], ed[n]), n  # upstream: untouched
    assert (ed["blocks.1.attn.hook_pattern"][:, 1] == 0).all()
    assert torch.equal(ed["blocks.1.attn.hook_pattern"][:, 0], base["blocks.1.attn.hook_pattern"][:, 0])
    assert (ed["blocks.1.attn.hook_z"][:, :, 1] == 0).all()
    assert torch.equal(ed["blocks.1.attn.hook_z"][:, :, 0], base["blocks.1.attn.hook_z"][:, :, 0])
    for n in ("blocks.1.hook_attn_out", "blocks.1.hook_resid_post", "hook_logits"):
        assert not torch.allclose(base[n], ed[n]), n  # downstream: recomputed
    # The weights are untouched and the next plain trace is as before.
    assert torch.equal(trace(m, idx)["hook_logits"], base["hook_logits"])


def test_edit_a_token_embedding_and_patch_the_residual_stream():
    c = CONFIGS["gpt2-like"]
    m = GPT(c)
    idx = random_ids(c, B=1)
    base = trace(m, idx)
    new = base["hook_embed"].clone()
    new[0, 2] = 0.5
    ed = trace(m, idx, edits={"hook_embed": new})
    assert torch.equal(ed["hook_embed"], new)
    assert torch.equal(ed["hook_logits"][0, :2], base["hook_logits"][0, :2])
    assert not torch.allclose(ed["hook_logits"][0, 2:], base["hook_logits"][0, 2:])
    # Patch layer 1's input with layer 0's input: layer 0 is skipped entirely.
    patched = trace(m, idx, edits={"blocks.1.hook_resid_pre": base["blocks.0.hook_resid_pre"].numpy()})
    assert torch.equal(patched["blocks.1.hook_resid_pre"], base["blocks.0.hook_resid_pre"])


def test_bad_edits_are_value_errors():
    c = CONFIGS["gpt2-like"]
    m, idx = GPT(c), random_ids(c)
    with pytest.raises(ValueError, match="no such step"):
        trace(m, idx, edits={"blocks.9.hook_resid_pre": lambda x: x})
    with pytest.raises(ValueError, match="has shape"):
        trace(m, idx, edits={"hook_embed": torch.zeros(3)})


def test_bad_inputs_are_value_errors():
    c = CONFIGS["gpt2-like"]
    m = GPT(c)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        trace(m, torch.tensor([[1, 99]]))
    with pytest.raises(ValueError, match="longer than block_size"):
        trace(m, torch.zeros(1, c.block_size + 1, dtype=torch.long))
    with pytest.raises(ValueError, match="2-D"):
        trace(m, torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match="needs targets"):
        trace(m, torch.zeros(1, 3, dtype=torch.long), grads=True)


def test_grads_match_autograd_on_the_plain_model(cfg, model):
    idx, y = random_ids(cfg), random_ids(cfg, seed=5)
    tr = trace(model, idx, targets=y, grads=True)
    model.eval()
    model.zero_grad()
    _, loss = model(idx, y)
    loss.backward()
    for name, p in model.named_parameters():
        assert torch.allclose(tr.param_grads[name], p.grad, atol=1e-6), name
    model.zero_grad(set_to_none=True)
    assert tr.grad("hook_loss").item() == 1.0
    # d loss / d logits = (softmax - onehot) / N
    V = cfg.vocab_size
    expect = (tr["hook_probs"] - F.one_hot(y, V)) / y.numel()
    assert torch.allclose(tr.grad("hook_logits"), expect, atol=1e-6)
    assert tr.grad("blocks.0.hook_resid_pre").shape == tr["blocks.0.hook_resid_pre"].shape
    assert all(not t.requires_grad for t in tr.values())


def test_trace_leaves_the_model_alone(cfg, model):
    before = {k: v.clone() for k, v in model.state_dict().items()}
    training = model.training
    idx = random_ids(cfg)
    trace(model, idx, targets=idx, grads=True, edits={"hook_embed": lambda e: e * 0})
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert all(p.grad is None for p in model.parameters())
    assert model.training == training
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())


def test_numpy_conversion_keeps_everything():
    c = CONFIGS["gpt2-like"]
    tr = trace(GPT(c), random_ids(c), targets=random_ids(c, seed=1), grads=True)
    npt = tr.numpy()
    assert list(npt) == list(tr)
    assert isinstance(npt["hook_logits"], np.ndarray) and np.array_equal(npt["hook_logits"], tr["hook_logits"].numpy())
    assert isinstance(npt.grad("hook_embed"), np.ndarray)
    assert npt.info("hook_logits") == tr.info("hook_logits")
    assert npt.loss == pytest.approx(tr.loss)
    import pickle
    assert list(pickle.loads(pickle.dumps(npt))) == list(tr)


def test_same_seed_same_weights_and_no_global_rng_use():
    c = CONFIGS["gpt2-like"]
    torch.manual_seed(123)
    state = torch.get_rng_state()
    a, b = GPT(c), GPT(c)
    assert torch.equal(torch.get_rng_state(), state)
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    d = GPT(c.replace(seed=1))
    assert not torch.equal(a.transformer.wte.weight, d.transformer.wte.weight)


def test_parameter_table_and_module_names():
    c = CONFIGS["gpt2-like"]
    m = GPT(c)
    rows = m.parameter_table()
    names = [r["name"] for r in rows]
    for expected in ("transformer.wte.weight", "transformer.wpe.weight", "transformer.h.0.ln_1.weight",
                     "transformer.h.0.attn.c_attn.weight", "transformer.h.0.attn.c_proj.weight",
                     "transformer.h.0.ln_2.weight", "transformer.h.0.mlp.c_fc.weight",
                     "transformer.h.0.mlp.c_proj.weight", "transformer.ln_f.weight"):
        assert expected in names
    assert sum(r["count"] for r in rows) == m.num_params() == c.num_params()
    assert m.lm_head.weight is m.transformer.wte.weight and m.lm_head.bias is None
    untied = GPT(CONFIGS["rms-post-sin-gelu"])
    assert untied.num_params() == CONFIGS["rms-post-sin-gelu"].num_params()
    assert "lm_head.weight" in dict(untied.named_parameters())


def plain_forward(m: GPT, idx: torch.Tensor) -> torch.Tensor:
    """The model's logits without dropout, written out with plain torch ops on its weights (no gptviz code)."""
    c, w = m.config, m.state_dict()
    B, T = idx.shape
    C, nh, hs, nkv = c.n_embd, c.n_head, c.d_head, c.n_kv_head
    r = int(hs * c.rotary_pct)  # the dimensions rotary positions turn
    t = torch.arange(T, dtype=torch.float64)[:, None]

    def norm(x, p):
        if c.norm == "layernorm":
            x = x - x.mean(-1, keepdim=True)
        x = x / torch.sqrt((x * x).mean(-1, keepdim=True) + c.ln_eps) * w[p + ".weight"]
        return x + w[p + ".bias"] if p + ".bias" in w else x

    def linear(x, p):
        x = x @ w[p + ".weight"].T
        return x + w[p + ".bias"] if p + ".bias" in w else x

    def rope(x):  # (B, T, heads, hs): in the first r dims, pair i with i + r/2, turned by t * base^(-2i/r)
        ang = (t * c.rope_base ** (-torch.arange(0, r, 2, dtype=torch.float64) / r)).float()[None, :, None, :]
        a, b, rest = x[..., : r // 2], x[..., r // 2: r], x[..., r:]
        return torch.cat([a * ang.cos() - b * ang.sin(), b * ang.cos() + a * ang.sin(), rest], -1)

    def attn(x, p):
        q, k, v = linear(x, p + ".c_attn").split([nh * hs, nkv * hs, nkv * hs], dim=-1)
        q, k, v = q.reshape(B, T, nh, hs), k.reshape(B, T, nkv, hs), v.reshape(B, T, nkv, hs)
        if c.pos_encoding == "rope":
            q, k = rope(q), rope(k)
        group = torch.arange(nh) // (nh // nkv)  # the key/value head each query head reads
        k, v = k[:, :, group], v[:, :, group]
        s = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(hs)
        s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
        z = torch.einsum("bhqk,bkhd->bqhd", s.softmax(-1), v)
        return linear(z.reshape(B, T, nh * hs), p + ".c_proj")

    def mlp(x, p):
        act = {"gelu": lambda u: 0.5 * u * (1 + torch.erf(u / math.sqrt(2))),
               "gelu_tanh": lambda u: 0.5 * u * (1 + torch.tanh(math.sqrt(2 / math.pi) * (u + 0.044715 * u ** 3))),
               "relu": lambda u: u.clamp(min=0), "silu": lambda u: u / (1 + torch.exp(-u))}[c.activation]
        if c.gated_mlp:  # act(x W_gate) * (x W_in)
            return linear(act(linear(x, p + ".c_gate")) * linear(x, p + ".c_fc"), p + ".c_proj")
        return linear(act(linear(x, p + ".c_fc")), p + ".c_proj")

    x = w["transformer.wte.weight"][idx]
    if c.pos_encoding == "learned":
        x = x + w["transformer.wpe.weight"][:T]
    elif c.pos_encoding == "sinusoidal":
        ang = t / 10000 ** (torch.arange(0, C, 2, dtype=torch.float64) / C)
        pe = torch.stack([ang.sin(), ang.cos()], -1).reshape(T, -1)[:, :C]  # sin, cos interleaved
        x = x + pe.float()
    for layer in range(c.n_layer):
        p = f"transformer.h.{layer}"
        if c.parallel_attn:  # both read the block's input
            x = x + attn(norm(x, p + ".ln_1"), p + ".attn") + mlp(norm(x, p + ".ln_2"), p + ".mlp")
        elif c.norm_placement == "pre":
            x = x + attn(norm(x, p + ".ln_1"), p + ".attn")
            x = x + mlp(norm(x, p + ".ln_2"), p + ".mlp")
        else:
            x = norm(x + attn(x, p + ".attn"), p + ".ln_1")
            x = norm(x + mlp(x, p + ".mlp"), p + ".ln_2")
    if c.norm_placement == "pre":
        x = norm(x, "transformer.ln_f")
    return x @ w["lm_head.weight"].T


def test_trace_equals_a_plain_torch_forward(cfg, model):
    idx = random_ids(cfg)
    assert torch.allclose(trace(model, idx)["hook_logits"], plain_forward(model, idx), atol=1e-5)


def test_dropout_only_in_training_and_never_in_a_trace():
    c = CONFIGS["rope-post-ln"]
    assert c.dropout > 0
    m = GPT(c)
    idx = random_ids(c)
    plain = plain_forward(m, idx)
    m.train()
    torch.manual_seed(0)
    a = m(idx)[0]
    assert not torch.allclose(a, plain, atol=1e-3)  # dropout is live in training
    assert not torch.equal(a, m(idx)[0])
    assert torch.allclose(trace(m, idx)["hook_logits"], plain, atol=1e-5)  # a trace never drops anything
    m.eval()
    assert torch.allclose(m(idx)[0], plain, atol=1e-5)


def test_parameter_gradient_norms_survive_dropping_the_gradients():
    c = CONFIGS["gpt2-like"]
    m = GPT(c)
    idx = random_ids(c)
    tr = trace(m, idx, targets=idx, grads=True).numpy()
    norms = tr.param_grad_norms()
    assert (norms["transformer.wte.weight"]
            == pytest.approx(float(np.linalg.norm(tr.param_grads["transformer.wte.weight"])), rel=1e-5))
    slim = tr.without_param_grads()
    assert slim.param_grads is None and slim.param_grad_norms() == norms
    import pickle
    assert pickle.loads(pickle.dumps(slim)).param_grad_norms() == norms


# --------------------------------------------------------------------------- weight gradients as norms only
@pytest.mark.parametrize("kw", [dict(), dict(tie_weights=False), dict(pos_encoding="rope", norm="rmsnorm"),
                                dict(norm_placement="post"), dict(bias=False, pos_encoding="sinusoidal")],
                         ids=["tied", "untied", "rope-rms", "post", "nobias-sin"])
def test_weight_grad_norms_equal_the_full_gradients_norms(kw):
    """weight_grads="norms" works out the embedding's and unembedding's gradient norms from the gradients at
    their inputs and outputs (Gram matrices, never the vocab × n_embd matrix): they must equal the norms of the
    gradients autograd builds, for every parameter, with repeated ids, padding and an edited embedding."""
    cfg = ModelConfig(vocab_size=40, block_size=16, n_layer=2, n_head=2, n_embd=16, **kw)
    m = GPT(cfg)
    g = torch.Generator().manual_seed(3)
    x = torch.randint(0, 12, (2, 10), generator=g)  # a small id range: many repeated ids
    y = torch.randint(0, 40, (2, 10), generator=g)
    y[1, 7:] = -100
    mask = torch.ones(2, 10, dtype=torch.long)
    mask[1, 7:] = 0
    for edits in (None, {"hook_embed": lambda e: e * 0.5}, {"hook_logits": torch.zeros(2, 10, 40)}):
        full = trace(m, x, targets=y, attention_mask=mask, grads=True, edits=edits)
        fast = trace(m, x, targets=y, attention_mask=mask, grads=True, edits=edits, weight_grads="norms")
        assert fast.param_grads is None
        a, b = full.param_grad_norms(), fast.param_grad_norms()
        assert list(a) == list(b) == [n for n, _ in m.named_parameters()]
        for n in a:
            assert b[n] == pytest.approx(a[n], rel=1e-5, abs=1e-9), n
        assert a["transformer.wte.weight"] > 0 or edits is not None
        for n in full:
            ga, gb = full.grad(n), fast.grad(n)
            assert (ga is None) == (gb is None)
            if ga is not None:
                torch.testing.assert_close(ga, gb, rtol=0, atol=0)
        # norms survive the numpy copy the app caches
        assert fast.numpy().param_grad_norms() == b
    with pytest.raises(ValueError, match="weight_grads"):
        trace(m, x, targets=y, grads=True, weight_grads="all")


def test_a_frozen_trace_cannot_be_written():
    cfg = ModelConfig(vocab_size=20, block_size=8, n_layer=1, n_head=2, n_embd=8)
    x = random_ids(cfg, 1, 6)
    tr = trace(GPT(cfg), x, targets=x, grads=True).numpy().freeze()
    with pytest.raises(ValueError):
        tr["hook_embed"][0, 0, 0] = 1.0
    with pytest.raises(ValueError):
        tr.grad("hook_embed")[0, 0, 0] = 1.0
    with pytest.raises(ValueError):
        tr.idx[0, 0] = 1


def test_a_slim_trace_with_targets_keeps_no_probability_table_and_works_it_out_when_read(monkeypatch):
    """Slim, ``hook_probs`` is a note worked out when read, and the loss breakdown neither keeps nor even makes a
    (B, T, V) table (GPT-2 small at 512 tokens: 103 MB) unless ``hook_probs`` is edited; the probabilities read are
    softmax of the logits (plain PyTorch), in every batch row, and the loss is unchanged."""
    import gptviz.run.trace as trace_module

    made = []
    real = trace_module.loss_breakdown
    monkeypatch.setattr(trace_module, "loss_breakdown",
                        lambda *a, **kw: made.append(kw.get("with_probs", True)) or real(*a, **kw))
    cfg = ModelConfig(vocab_size=50, block_size=24, n_layer=2, n_head=2, n_embd=16)
    torch.manual_seed(0)
    model = GPT(cfg).eval()
    idx = torch.randint(0, cfg.vocab_size, (2, 20), generator=torch.Generator().manual_seed(3))
    targets = torch.cat([idx[:, 1:], torch.full((2, 1), -100)], dim=1)
    with torch.no_grad():
        slim = trace(model, idx, targets=targets, slim=True)
        full = trace(model, idx, targets=targets)
    assert made == [False, True]  # the slim trace made no table; the full one did
    with torch.no_grad():
        trace(model, idx, targets=targets, slim=True, edits={"hook_probs": lambda t: t})
    assert made[-1] is True  # an edited hook_probs needs the table
    assert "probs" not in slim.breakdown and "probs" in full.breakdown
    want = F.softmax(full["hook_logits"].float(), dim=-1)
    torch.testing.assert_close(torch.as_tensor(slim["hook_probs"]), want, rtol=1e-5, atol=1e-7)
    assert float(slim.breakdown["loss"]) == pytest.approx(float(full.breakdown["loss"]), rel=1e-6)
