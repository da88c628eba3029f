"""Qwen3 (issue 38): a ``qwen3`` model folder opens, with QK-norm (an RMSNorm over each head's queries and keys, before
rotary positions) as two steps of its own, ``hook_q_normed`` and ``hook_k_normed``.

Each check is against a computation that does not go through the code under test: Qwen3 folders built here with
random weights (random norm gains too) against ``transformers``' own ``Qwen3ForCausalLM`` on the same folder (eager
attention, ``output_attentions=True``), its QK-norm modules' own outputs caught by torch forward hooks, its own config
class for which layers slide; the messages a user reads, written out whole; the hook names, spelt out by hand; a
slim trace's scores against the full trace's; a switched-off head's gradients against exact zero."""
import json

import numpy as np
import pytest
import torch
from hf_models import build, compare, long_ids, two_rows
from lazy_import import lazy

import gptviz
from gptviz import GPT, CharBPETokenizer, ModelConfig, describe, trace
from gptviz.model.checkpoint import load_checkpoint, save_checkpoint
from gptviz.model.hook_names import act_name, act_names, attention_steps, parse_act_name
from gptviz.model.pretrained import model_config
from gptviz.run import edits

transformers = lazy("transformers")  # pinned in requirements-dev.txt: missing, the tests fail, not skip
tokenizers = pytest.importorskip("tokenizers")


# --------------------------------------------------------------------------- transformers' Qwen3ForCausalLM
@pytest.mark.parametrize("tie, bias, eps", [(True, False, 1e-6), (False, False, 1e-6), (True, True, 0.3),
                                             (False, True, 1e-6)])
def test_a_qwen3_folder_matches_transformers(tmp_path, tie, bias, eps):
    """Tied and untied embeddings, ``attention_bias`` on q, k, v and o (random biases), a large ``rms_norm_eps``
    (where an ignored eps would show): logits and every layer's pattern, one row and two rows with left padding."""
    hf = build("qwen3", tmp_path, tie_word_embeddings=tie, attention_bias=bias, rms_norm_eps=eps)
    assert (hf.model.layers[0].self_attn.o_proj.bias is not None) == bias  # Qwen3's o_proj follows attention_bias
    model, tok = gptviz.from_pretrained(tmp_path)
    c = model.config
    assert (c.qk_norm, c.n_head, c.n_kv_head, c.d_head, c.n_embd, c.norm, c.gated_mlp) == \
        (True, 4, 2, 12, 32, "rmsnorm", True)
    assert (c.tie_weights, c.qkv_bias, c.attn_proj_bias, c.ln_eps, c.sliding_window) == (tie, bias, bias, eps, None)
    assert tuple(dict(model.named_parameters())["transformer.h.1.attn.k_norm.weight"].shape) == (12,)
    assert torch.equal(model.transformer.h[1].attn.q_norm.weight, hf.model.layers[1].self_attn.q_norm.weight)
    compare(hf, model, torch.tensor([long_ids(tok, 40)]))
    compare(hf, model, *two_rows(tok))


def caught(hf, idx, mask=None) -> dict:
    """transformers' QK-norm modules' inputs and outputs on ``idx``, caught by torch forward hooks."""
    got, handles = {}, []
    for l, layer in enumerate(hf.model.layers):
        for which in ("q", "k"):
            def hook(module, args, out, key=(which, l)):
                got[key] = (args[0].detach().clone(), out.detach().clone())
            handles.append(getattr(layer.self_attn, f"{which}_norm").register_forward_hook(hook))
    try:
        with torch.no_grad():
            hf(idx, attention_mask=mask)
    finally:
        for h in handles:
            h.remove()
    return got


@pytest.mark.parametrize("eps", [1e-6, 0.3])
def test_the_qk_norm_steps_are_transformers_own_q_norm_and_k_norm_outputs(tmp_path, eps):
    """``hook_q_normed``/``hook_k_normed`` against the outputs of transformers' ``q_norm``/``k_norm`` modules (within
    1e-5), and ``hook_q``/``hook_k`` against their inputs: the queries and keys split into heads, not yet normalised."""
    hf = build("qwen3", tmp_path, rms_norm_eps=eps)
    model, tok = gptviz.from_pretrained(tmp_path)
    for idx, mask in [(torch.tensor([long_ids(tok, 40)]), None), two_rows(tok)]:
        got = caught(hf, idx, mask)
        tr = trace(model, idx, attention_mask=mask)
        real = torch.ones_like(idx, dtype=torch.bool) if mask is None else mask.bool()
        for l in range(2):
            for which in ("q", "k"):
                inp, out = got[(which, l)]  # (B, T, heads, head_dim)
                assert tr[act_name(f"{which}_normed", l)].shape == out.shape == (*idx.shape, 4 if which == "q" else 2,
                                                                                  12)
                assert (tr[act_name(f"{which}_normed", l)] - out)[real].abs().max().item() < 1e-5, (which, l)
                assert (tr[act_name(which, l)] - inp)[real].abs().max().item() < 1e-5, (which, l)
                # the norm changed something: a gain of 1 or a step left out would not pass the comparison above
                assert (out - inp).abs().max().item() > 0.1


def test_a_qwen3_with_a_sliding_window_on_its_upper_layers_matches_transformers(tmp_path):
    """``use_sliding_window`` with ``max_window_layers=1``: layer 1 slides (a window of 8), layer 0 does not, as
    transformers' Qwen3Config says; a 48-token text, one row and two rows with left padding."""
    hf = build("qwen3", tmp_path, use_sliding_window=True, sliding_window=8, max_window_layers=1)
    assert hf.config.layer_types == ["full_attention", "sliding_attention"]
    model, tok = gptviz.from_pretrained(tmp_path)
    assert (model.config.block_size, model.config.sliding_window, model.config.sliding_layers) == (64, 8, (1,))
    idx = torch.tensor([long_ids(tok)])
    with torch.no_grad():
        att = hf(idx, output_attentions=True).attentions
    assert (att[0][0, :, 30, :23] > 0).all() and (att[1][0, :, 30, :23] == 0).all()  # the oracle does window
    compare(hf, model, idx)
    compare(hf, model, *two_rows(tok))


# --------------------------------------------------------------------------- config.json and the weights refused
QWEN3 = {"model_type": "qwen3", "vocab_size": 16, "hidden_size": 8, "intermediate_size": 8, "num_hidden_layers": 3,
         "num_attention_heads": 2, "num_key_value_heads": 1, "max_position_embeddings": 8, "head_dim": 4}


def opened(tmp_path, d: dict) -> ModelConfig:
    (tmp_path / "config.json").write_text(json.dumps(d))
    cfg, family = model_config(tmp_path)
    assert family == "qwen3"
    return cfg


def test_every_key_a_qwen3_config_reads_lands_in_its_own_field(tmp_path):
    """The oracle: the ModelConfig written out by hand from what each key means in transformers' Qwen3Config."""
    d = {**QWEN3, "vocab_size": 17, "hidden_size": 12, "intermediate_size": 20, "num_attention_heads": 6,
         "num_key_value_heads": 3, "head_dim": 6, "max_position_embeddings": 40, "rope_theta": 500.0,
         "hidden_act": "gelu", "attention_bias": True, "tie_word_embeddings": True, "rms_norm_eps": 1e-3,
         "initializer_range": 0.05, "use_sliding_window": True, "sliding_window": 24, "max_window_layers": 2,
         "mlp_bias": True}  # Qwen3MLP has no biases whatever mlp_bias says: ignored, as transformers ignores it
    assert opened(tmp_path, d) == ModelConfig(
        vocab_size=17, block_size=40, n_layer=3, n_head=6, n_kv_head=3, n_embd=12, d_head=6, d_mlp=20,
        norm="rmsnorm", pos_encoding="rope", rope_base=500.0, activation="gelu", gated_mlp=True, bias=False,
        qkv_bias=True, attn_proj_bias=True, tie_weights=True, ln_eps=1e-3, init_std=0.05, sliding_window=24,
        sliding_layers=(2,), qk_norm=True)


def test_the_keys_a_qwen3_config_leaves_out_take_transformers_defaults(tmp_path):
    t = transformers.Qwen3Config()
    cfg = opened(tmp_path, QWEN3)
    assert (cfg.qkv_bias, cfg.attn_proj_bias, cfg.tie_weights, cfg.ln_eps, cfg.activation, cfg.sliding_window) == \
        (t.attention_bias, t.attention_bias, t.tie_word_embeddings, t.rms_norm_eps, "silu", None)
    assert (cfg.qkv_bias, cfg.tie_weights, cfg.qk_norm, cfg.n_kv_head) == (False, False, True, 1)


def test_qwen3_0_6b_s_shape_opens_within_the_parameter_limit(tmp_path):
    """The sizes of the released Qwen3-0.6B's config.json (docs/models.md says it opens): 596,049,920 parameters, by
    hand 151936 × 1024 (the tied embedding) + 28 × 15,730,944 (q, k, v, o, the SwiGLU MLP, two norms and the QK-norm
    gains 2 × 128) + 1024 (the final norm); the context capped at MAX_CONTEXT."""
    from gptviz.config import MAX_PARAMS
    from gptviz.model.hf_families import MAX_CONTEXT

    cfg = opened(tmp_path, {**QWEN3, "vocab_size": 151936, "hidden_size": 1024, "intermediate_size": 3072,
                            "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8,
                            "head_dim": 128, "max_position_embeddings": 40960, "rope_theta": 1000000.0,
                            "tie_word_embeddings": True, "max_window_layers": 28, "use_sliding_window": False})
    assert cfg.num_params() == 596_049_920 < MAX_PARAMS and cfg.block_size == MAX_CONTEXT
    assert cfg.num_params() - cfg.replace(qk_norm=False).num_params() == 28 * 2 * 128


@pytest.mark.parametrize("change, message", [
    ({"head_dim": None}, "config.json lacks 'head_dim', which a qwen3 model needs"),
    ({"head_dim": 0}, "config.json's head_dim=0 must be at least 1"),
    ({"head_dim": "4"}, "config.json's head_dim='4' must be a whole number"),
    ({"head_dim": 4.0}, "config.json's head_dim=4.0 must be a whole number"),
    ({"head_dim": 5}, "d_head=5 must be even when pos_encoding='rope': rotary embeddings turn pairs of dimensions "
                      "(in config.json: d_head is head_dim)"),
    ({"attention_bias": 1}, "config.json's attention_bias=1 must be true or false"),
])
def test_a_bad_head_dim_is_refused_with_the_message_a_user_reads(tmp_path, change, message):
    """head_dim is read, never worked out (Qwen3Config's default, 128, is not hidden_size / heads)."""
    d = {k: v for k, v in {**QWEN3, **change}.items() if v is not None}
    (tmp_path / "config.json").write_text(json.dumps(d))
    with pytest.raises(ValueError) as exc:
        model_config(tmp_path)
    assert str(exc.value) == message


def rewrite_weights(folder, change) -> None:
    from safetensors.torch import load_file, save_file

    sd = dict(load_file(str(folder / "model.safetensors")))
    change(sd)
    save_file(sd, str(folder / "model.safetensors"), metadata={"format": "pt"})


@pytest.mark.parametrize("change, message", [
    (lambda sd: sd.pop("model.layers.1.self_attn.q_norm.weight"),
     "the weights lack model.layers.1.self_attn.q_norm.weight, which this qwen3 config.json asks for"),
    (lambda sd: [sd.pop(f"model.layers.{l}.self_attn.{w}_norm.weight") for l in (0, 1) for w in "qk"],
     "the weights lack model.layers.0.self_attn.k_norm.weight, model.layers.0.self_attn.q_norm.weight, "
     "model.layers.1.self_attn.k_norm.weight, model.layers.1.self_attn.q_norm.weight, which this qwen3 config.json "
     "asks for"),
    (lambda sd: sd.update({"model.layers.0.self_attn.q_norm.weight": torch.ones(13)}),
     "model.layers.0.self_attn.q_norm.weight has shape (13,), but config.json asks for (12,)"),
    (lambda sd: sd.update({"model.layers.0.self_attn.k_norm.weight": torch.ones(2, 12)}),
     "model.layers.0.self_attn.k_norm.weight has shape (2, 12), but config.json asks for (12,)"),
    (lambda sd: sd.update({"model.layers.0.self_attn.k_norm.weight": torch.ones(12, dtype=torch.int32)}),
     "model.layers.0.self_attn.k_norm.weight holds I32 values: weights must be floating point"),
])
def test_a_missing_or_misshapen_qk_norm_weight_is_refused(tmp_path, change, message):
    build("qwen3", tmp_path)
    rewrite_weights(tmp_path, change)
    with pytest.raises(ValueError) as exc:
        gptviz.from_pretrained(tmp_path)
    assert str(exc.value) == message


def test_a_head_dim_the_weights_do_not_have_is_refused_before_a_tensor_is_read(tmp_path):
    build("qwen3", tmp_path)
    d = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**d, "head_dim": 16}))
    with pytest.raises(ValueError) as exc:
        gptviz.from_pretrained(tmp_path)
    assert str(exc.value) == "model.layers.0.self_attn.q_proj.weight has shape (48, 32), but config.json asks for " \
        "(64, 32)"  # the first tensor of the 16-wide heads: 4 heads × 16 rows, where the file holds 4 × 12


# --------------------------------------------------------------------------- the engine's QK-norm
QK = ModelConfig(vocab_size=20, block_size=8, n_layer=2, n_head=4, n_kv_head=2, n_embd=16, d_head=6,
                 norm="rmsnorm", pos_encoding="rope", activation="silu", gated_mlp=True, bias=False, qk_norm=True,
                 ln_eps=0.2)
QK_NOROPE = ModelConfig(vocab_size=20, block_size=8, n_layer=2, n_head=4, n_kv_head=2, n_embd=16, qk_norm=True)


def random_model(cfg: ModelConfig) -> GPT:
    """A model of ``cfg`` whose norm gains (the QK-norm gains too) are random, not 1."""
    model = GPT(cfg)
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.copy_(1.0 + 0.3 * torch.randn(p.shape, generator=g))
    return model


def ids(cfg, B: int = 2, T: int = 6) -> torch.Tensor:
    return torch.randint(0, cfg.vocab_size, (B, T), generator=torch.Generator().manual_seed(3))


def test_the_hook_names_of_qk_norm_spelt_out():
    assert act_name("q_normed", 0) == "blocks.0.attn.hook_q_normed"
    assert act_name("k_normed", 3, "attn") == "blocks.3.attn.hook_k_normed"
    assert parse_act_name("blocks.1.attn.hook_k_normed") == ("k_normed", 1, "attn", False)
    for bad in (lambda: act_name("q_normed", 0, "cross_attn"), lambda: act_name("q_normed", 0, "mlp")):
        with pytest.raises(ValueError):
            bad()
    assert attention_steps(QK) == ("qkv", "q", "k", "v", "q_normed", "k_normed", "rot_q", "rot_k", "k_rep", "v_rep",
                                   "scores_raw", "scores_scaled", "attn_scores", "pattern", "z")
    assert attention_steps(QK.replace(qk_norm=False)) == tuple(s for s in attention_steps(QK) if "normed" not in s)
    tr = trace(GPT(QK), ids(QK), targets=ids(QK))
    assert act_names(QK, targets=True) == list(tr)
    assert [n for n in tr if "normed" in n] == ["blocks.0.attn.hook_q_normed", "blocks.0.attn.hook_k_normed",
                                                "blocks.1.attn.hook_q_normed", "blocks.1.attn.hook_k_normed"]
    assert not [n for n in trace(GPT(QK.replace(qk_norm=False)), ids(QK)) if "normed" in n]


def test_the_normalised_steps_are_the_rms_norm_of_each_head_before_the_rotation():
    """By hand from the recorded ``hook_q``/``hook_k`` and the gains: x / sqrt(mean(x²) + eps) * gain per head; the
    rotated steps turn the normalised vectors (not the raw ones)."""
    from gptviz.model.layers import apply_rope

    model = random_model(QK)
    tr = trace(model, ids(QK))
    for l in range(2):
        attn = model.transformer.h[l].attn
        for which, gain in (("q", attn.q_norm.weight), ("k", attn.k_norm.weight)):
            x = tr[act_name(which, l)].double()
            want = x / torch.sqrt((x ** 2).mean(-1, keepdim=True) + 0.2) * gain.double()
            assert (tr[act_name(f"{which}_normed", l)] - want).abs().max().item() < 1e-6
            rotated = apply_rope(tr[act_name(f"{which}_normed", l)], model.rope_cos[:6], model.rope_sin[:6])
            assert torch.equal(tr[act_name(f"rot_{which}", l)], rotated)


def test_the_config_refuses_qk_norm_where_it_has_no_meaning_and_keeps_it_through_json_and_a_checkpoint(tmp_path):
    with pytest.raises(ValueError, match=r"^qk_norm='yes' must be True or False$"):
        ModelConfig(qk_norm="yes")
    with pytest.raises(ValueError, match=r"^gated_mlp, n_kv_head and qk_norm are for decoder-only models"):
        ModelConfig(qk_norm=True, n_enc_layer=0)
    assert ModelConfig.from_dict(json.loads(QK.to_json())) == QK and QK.replace(n_layer=1).qk_norm is True
    assert ModelConfig.from_dict({k: v for k, v in QK.to_dict().items() if k != "qk_norm"}).qk_norm is False
    assert QK.num_params() == GPT(QK).num_params() == QK.replace(qk_norm=False).num_params() + 2 * 2 * 6
    model = random_model(QK)
    save_checkpoint(tmp_path / "qk.safetensors", model, CharBPETokenizer(0).train(["abcabc"]))
    ck = load_checkpoint(tmp_path / "qk.safetensors")
    assert ck.config == QK and torch.equal(ck.model.transformer.h[1].attn.k_norm.weight,
                                           model.transformer.h[1].attn.k_norm.weight)
    assert torch.equal(trace(ck.model, ids(QK))["hook_logits"], trace(model, ids(QK))["hook_logits"])


@pytest.mark.parametrize("cfg", [QK, QK_NOROPE], ids=["rope", "learned-positions"])
def test_every_qk_norm_step_has_its_words_its_facts_and_its_source_line(cfg):
    tr = trace(GPT(cfg), ids(cfg))
    for which, heads in (("q", cfg.n_head), ("k", cfg.n_kv_head)):
        name = act_name(f"{which}_normed", 1)
        info = describe(name, cfg)
        assert info.title == f"L1 {which.upper()} normalised per " + ("head" if which == "q" else "key/value head") \
            + " (QK-norm)"
        assert info.formula.startswith(rf"\hat{{{which}}}_{{t,")
        assert ("QK-norm: each head's query" if which == "q" else "the same norm as the queries'") in info.explanation
        assert ("RoPE" in info.explanation) == (cfg.pos_encoding == "rope" and which == "q")
        assert (info.stage, info.layer, info.axes, info.kind) == ("attention", 1, ("batch", "pos", "head", "d_head"),
                                                                  "signed")
        assert info.head_group == (2 if which == "k" else 1)
        assert info.code.splitlines() == [
            "return x / (x.pow(2).mean(dim=-1, keepdim=True) + self.eps).sqrt() * self.weight  # (..., hs)",
            f"{which} = self.hook_{which}_normed(self.{which}_norm({which}), rec)  # (B, "
            + ("T, nh" if which == "q" else "S, nkv") + ", hs)"]
        assert tr[name].shape == (2, 6, heads, cfg.d_head)


@pytest.mark.parametrize("cfg", [QK, QK_NOROPE], ids=["rope", "learned-positions"])
def test_a_slim_trace_works_out_its_scores_and_repeated_keys_from_the_normalised_ones(cfg):
    model = random_model(cfg)
    full, slim = trace(model, ids(cfg)), trace(model, ids(cfg), slim=True)  # slim: scores worked out when read
    assert slim.slim and not full.slim
    for l in range(2):
        for step in ("scores_raw", "scores_scaled", "attn_scores", "k_rep", "v_rep"):
            assert torch.allclose(torch.as_tensor(slim[act_name(step, l)]), full[act_name(step, l)], atol=1e-6), step


def test_a_switched_off_head_s_normalised_queries_and_keys_get_no_gradient():
    cfg = QK.replace(n_kv_head=4)  # a key head per query head: head 1's keys are head 1's alone
    model, idx = random_model(cfg), ids(cfg)
    spec = {"heads_off": [[0, 1]]}
    tr = trace(model, idx, targets=idx, edits=edits.from_spec(spec, cfg.n_layer, cfg.n_head), grads=True)
    for which in ("q", "k"):
        g = np.asarray(tr.grad(act_name(f"{which}_normed", 0)))
        assert np.abs(g[:, :, 1]).max() == 0 and np.abs(g[:, :, 0]).max() > 0
    reading = edits.switched_off_reading(tr, act_name("pattern", 0), spec)
    assert "rotated queries, rotated keys, normalised queries, normalised keys, queries and keys is exactly 0" \
        in reading


def test_the_size_estimate_of_a_qk_norm_trace_with_gradients_is_never_under_its_real_bytes():
    cfg = QK.replace(block_size=64, n_head=8, n_kv_head=4, d_head=32, n_embd=8, d_mlp=8, vocab_size=16)
    idx = ids(cfg, B=2, T=12)
    for slim in (False, True):
        tr = trace(GPT(cfg), idx, targets=idx, grads=True, slim=slim, weight_grads="norms")
        values = [*tr._acts.values(), *(tr.grads or {}).values()]
        held = sum(v.element_size() * v.nelement() for v in values if isinstance(v, torch.Tensor))
        assert held <= cfg.trace_bytes(2, 12, grads=True, slim=slim) < 2 * held, slim


def test_the_attention_page_lists_the_qk_norm_steps_between_the_split_and_the_rotation():
    pytest.importorskip("streamlit")
    from gptviz.ui.sections.attention import attention_steps as page_steps

    names = [n for _, n in page_steps(QK, 1)]
    at = names.index(act_name("v", 1))
    assert names[at + 1:at + 5] == [act_name(s, 1) for s in ("q_normed", "k_normed", "rot_q", "rot_k")]
    assert not any("normed" in n for _, n in page_steps(QK.replace(qk_norm=False), 1))
