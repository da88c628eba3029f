"""OLMo 2: an ``olmo2`` model folder opens, with its norms after the sublayers only (``x + ln1_post(attn(x))``: no norm
before attention or the MLP) and QK-norm over the whole query and key projections (``qk_norm_full``: one RMSNorm over
all of a position's n_head · d_head queries, one over its n_kv_head · d_head keys, before the split into heads;
recorded as ``hook_q_normed``/``hook_k_normed`` split into heads).

Each check is against a computation that does not go through the code under test: OLMo 2 folders built here with
random weights against ``transformers``' own ``Olmo2ForCausalLM`` on the same folder (eager attention,
``output_attentions=True``), its q_norm, k_norm and post-norm modules' outputs caught by torch forward hooks, its own
config class for the defaults; the whole-projection norm by hand; the messages a user reads, written out whole."""
import json

import pytest
import torch
from hf_models import build, compare, long_ids, two_rows
from lazy_import import lazy

import gptviz
from gptviz import GPT, ModelConfig, describe, trace
from gptviz.model.hook_names import act_name, act_names
from gptviz.model.pretrained import model_config

transformers = lazy("transformers")  # pinned in requirements-dev.txt: missing, the tests fail, not skip
tokenizers = pytest.importorskip("tokenizers")


@pytest.mark.parametrize("extra", [{}, {"tie_word_embeddings": True, "attention_bias": True, "rms_norm_eps": 0.3,
                                        "num_key_value_heads": 4}], ids=["default", "tied-biases-big-eps"])
def test_an_olmo2_folder_matches_transformers(tmp_path, extra):
    hf = build("olmo2", tmp_path, **extra)
    model, tok = gptviz.from_pretrained(tmp_path)
    c = model.config
    assert (c.sublayer_norms, c.qk_norm, c.qk_norm_full, c.norm, c.d_head, c.activation, c.attn_scale_dim) == \
        ("after", True, True, "rmsnorm", 8, "silu", None)
    assert (c.tie_weights, c.qkv_bias, c.attn_proj_bias) == ((True, True, True) if extra else (False, False, False))
    compare(hf, model, torch.tensor([long_ids(tok, 40)]))
    compare(hf, model, *two_rows(tok))


def caught(hf, idx, mask=None) -> dict:
    got, handles = {}, []
    for l, layer in enumerate(hf.model.layers):
        mods = {"q_norm": layer.self_attn.q_norm, "k_norm": layer.self_attn.k_norm,
                "post_attention_layernorm": layer.post_attention_layernorm,
                "post_feedforward_layernorm": layer.post_feedforward_layernorm}
        for name, mod in mods.items():
            def hook(module, args, out, key=(name, l)):
                got[key] = (args[0].detach().clone(), out.detach().clone())
            handles.append(mod.register_forward_hook(hook))
    try:
        with torch.no_grad():
            hf(idx, attention_mask=mask)
    finally:
        for h in handles:
            h.remove()
    return got


def test_the_qk_norm_and_post_norm_steps_are_transformers_own(tmp_path):
    """transformers' q_norm/k_norm outputs are (B, T, n_head · d_head) and (B, T, n_kv_head · d_head): gptviz's
    ``hook_q_normed``/``hook_k_normed``, split into heads, are the same numbers (within 1e-5), and ``hook_q``/``hook_k``
    the norms' inputs; ``ln1_post``/``ln2_post`` are post_attention_layernorm and post_feedforward_layernorm, whose
    inputs are the sublayers' raw outputs (no norm before: attention reads the stream itself)."""
    hf = build("olmo2", tmp_path)
    model, tok = gptviz.from_pretrained(tmp_path)
    for idx, mask in [(torch.tensor([long_ids(tok, 40)]), None), two_rows(tok)]:
        got = caught(hf, idx, mask)
        tr = trace(model, idx, attention_mask=mask)
        real = torch.ones_like(idx, dtype=torch.bool) if mask is None else mask.bool()
        B, T = idx.shape
        for l in range(2):
            for which, heads in (("q", 4), ("k", 2)):
                inp, out = got[(f"{which}_norm", l)]
                assert out.shape == (B, T, heads * 8) and tr[act_name(f"{which}_normed", l)].shape == (B, T, heads, 8)
                ours = tr[act_name(f"{which}_normed", l)].reshape(B, T, heads * 8)
                assert (ours - out)[real].abs().max().item() < 1e-5, (which, l)
                assert (tr[act_name(which, l)].reshape(B, T, heads * 8) - inp)[real].abs().max().item() < 1e-5
            for part, theirs in (("ln1_post", "post_attention_layernorm"), ("ln2_post", "post_feedforward_layernorm")):
                assert (tr[act_name("out", l, part)] - got[(theirs, l)][1])[real].abs().max().item() < 1e-5, part
            assert torch.equal(tr[act_name("attn_out", l)], tr[act_name("out", l, "ln1_post")])


def test_the_whole_projection_norm_by_hand_is_not_each_head_s():
    """From the recorded queries: one root mean square over all 4 heads × 6 dimensions of a position, not one per head
    (a per-head norm, Qwen3's, would give each head unit RMS; this gives the position unit RMS)."""
    cfg = ModelConfig(vocab_size=20, block_size=8, n_layer=1, n_head=4, n_kv_head=2, n_embd=16, d_head=6,
                      norm="rmsnorm", pos_encoding="rope", gated_mlp=True, bias=False, qk_norm=True, qk_norm_full=True,
                      sublayer_norms="after", ln_eps=0.1)
    model = GPT(cfg)
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.copy_(1.0 + 0.3 * torch.randn(p.shape, generator=g))
    tr = trace(model, torch.randint(0, 20, (2, 6), generator=g))
    attn = model.transformer.h[0].attn
    assert tuple(attn.q_norm.weight.shape) == (24,) and tuple(attn.k_norm.weight.shape) == (12,)
    for which, gain in (("q", attn.q_norm.weight), ("k", attn.k_norm.weight)):
        x = tr[act_name(which, 0)].double().flatten(2)  # (B, T, heads · d_head)
        want = x / torch.sqrt((x ** 2).mean(-1, keepdim=True) + 0.1) * gain.double()
        assert (tr[act_name(f"{which}_normed", 0)].flatten(2) - want).abs().max().item() < 1e-6
    assert cfg.num_params() == model.num_params() == cfg.replace(qk_norm_full=False).num_params() - 2 * 6 + 24 + 12
    assert [n for n in act_names(cfg) if ".ln" in n] == [act_name(s, 0, p) for p in ("ln1_post", "ln2_post")
                                                         for s in ("scale", "normalized", "out")]
    q = describe(act_name("q_normed", 0), cfg)
    assert q.title == "L0 Q normalised over all heads (QK-norm)" and r"\tfrac{1}{24}" in q.formula
    assert q.code.splitlines()[-1] == "q = self.hook_q_normed(self.q_norm(q.reshape(B, T, nh * hs)).view(B, T, nh, " \
                                      "hs), rec)  # (B, T, nh, hs)"
    assert describe(act_name("qkv", 0), cfg).formula == r"[Q\;K\;V] = x\,W_{QKV}"  # no norm before attention


OLMO2 = {"model_type": "olmo2", "vocab_size": 16, "hidden_size": 8, "intermediate_size": 8, "num_hidden_layers": 2,
         "num_attention_heads": 2, "max_position_embeddings": 64}


def opened(tmp_path, d: dict) -> ModelConfig:
    (tmp_path / "config.json").write_text(json.dumps(d))
    return model_config(tmp_path)[0]


def test_a_saved_config_and_an_older_hand_written_one_open_to_the_same_model(tmp_path):
    build("olmo2", tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["rope_parameters"] == {"rope_type": "default", "rope_theta": 500.0} and "rope_theta" not in saved
    new = model_config(tmp_path)[0]
    old = {"model_type": "olmo2", "vocab_size": 300, "hidden_size": 32, "intermediate_size": 48,
           "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64,
           "rope_theta": 500.0, "rope_scaling": None, "hidden_act": "silu", "rms_norm_eps": 1e-5}
    assert opened(tmp_path, old) == new == ModelConfig(
        vocab_size=300, block_size=64, n_layer=2, n_head=4, n_kv_head=2, n_embd=32, d_mlp=48, norm="rmsnorm",
        pos_encoding="rope", rope_base=500.0, activation="silu", gated_mlp=True, bias=False, tie_weights=False,
        ln_eps=1e-5, qk_norm=True, qk_norm_full=True, sublayer_norms="after")


def test_the_keys_an_olmo2_config_leaves_out_take_transformers_defaults(tmp_path):
    t = transformers.Olmo2Config()
    cfg = opened(tmp_path, OLMO2)
    assert (cfg.ln_eps, cfg.tie_weights, cfg.rope_base, cfg.qkv_bias, cfg.n_kv_head) == \
        (t.rms_norm_eps, t.tie_word_embeddings, t.rope_parameters["rope_theta"], t.attention_bias, 2)


@pytest.mark.parametrize("change, message", [
    ({"hidden_size": 9}, "config.json's hidden_size=9 must be divisible by num_attention_heads=2: OLMo 2's heads are "
                         "hidden_size / num_attention_heads wide"),
    ({"num_key_value_heads": 3}, "config.json's num_attention_heads=2 must be divisible by num_key_value_heads=3: "
                                 "each key/value head serves the same number of query heads"),
    ({"rms_norm_eps": 0}, "config.json's rms_norm_eps=0 must be above 0"),
    ({"hidden_act": "mish"}, "hidden_act='mish' has no gptviz equivalent (gptviz has gelu, gelu_fast, gelu_new, "
                             "gelu_pytorch_tanh, relu, silu, swish, tanh)"),
])
def test_a_bad_olmo2_config_is_refused_with_the_message_a_user_reads(tmp_path, change, message):
    (tmp_path / "config.json").write_text(json.dumps({**OLMO2, **change}))
    with pytest.raises(ValueError) as exc:
        model_config(tmp_path)
    assert str(exc.value) == message


def test_a_per_head_qk_norm_weight_in_an_olmo2_folder_is_refused_by_its_shape(tmp_path):
    from safetensors.torch import load_file, save_file

    build("olmo2", tmp_path)
    sd = dict(load_file(str(tmp_path / "model.safetensors")))
    sd["model.layers.1.self_attn.k_norm.weight"] = torch.ones(8)  # Qwen3's shape: one head's
    save_file(sd, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(ValueError) as exc:
        gptviz.from_pretrained(tmp_path)
    assert str(exc.value) == "model.layers.1.self_attn.k_norm.weight has shape (8,), but config.json asks for (16,)"


@pytest.mark.parametrize("change, message", [
    ({"qk_norm": False}, "qk_norm_full=True needs qk_norm=True: it says how wide QK-norm's norm is"),
    ({"qk_norm_full": 1}, "qk_norm_full=1 must be True or False"),
    ({"parallel_attn": True}, "sublayer_norms='after' needs a decoder-only model with norm_placement='pre' and no "
                              "parallel_attn: the norms after a sublayer sit inside its residual branch"),
])
def test_the_config_refuses_bad_olmo2_fields_naming_what_to_change(change, message):
    cfg = ModelConfig(vocab_size=20, n_head=2, n_embd=8, norm="rmsnorm", pos_encoding="rope", qk_norm=True,
                      qk_norm_full=True, sublayer_norms="after")
    with pytest.raises(ValueError) as exc:
        cfg.replace(**change)
    assert str(exc.value) == message


def test_the_mlp_and_attention_pages_say_the_sublayers_read_the_raw_stream():
    pytest.importorskip("streamlit")
    from gptviz.ui.sections.attention import attention_steps
    from gptviz.ui.sections.mlp import mlp_steps

    cfg = ModelConfig(vocab_size=20, n_head=2, n_embd=8, norm="rmsnorm", pos_encoding="rope", qk_norm=True,
                      qk_norm_full=True, sublayer_norms="after")
    assert attention_steps(cfg, 0)[0] == ("1 · The input (norm after the sublayer: attention reads the raw stream)",
                                          act_name("resid_pre", 0))
    assert mlp_steps(cfg, 0)[0] == ("1 · The input (norm after the sublayer: the MLP reads the raw stream)",
                                    act_name("resid_mid", 0))
    assert act_name("scale", 0, "ln2_post") in [n for _, n in mlp_steps(cfg, 0)]
    assert [t for t, _ in attention_steps(cfg, 0) if "QK-norm" in t] == [
        "3a · QK-norm: all the queries normalised together (shown per head)",
        "3a · QK-norm: all the keys normalised together (shown per head)"]


def test_a_checkpoint_of_a_model_with_norms_after_only_keeps_them(tmp_path):
    from gptviz import CharBPETokenizer
    from gptviz.model.checkpoint import load_checkpoint, save_checkpoint

    cfg = ModelConfig(vocab_size=20, block_size=8, n_layer=2, n_head=4, n_kv_head=2, n_embd=16, norm="rmsnorm",
                      pos_encoding="rope", gated_mlp=True, bias=False, qk_norm=True, qk_norm_full=True,
                      sublayer_norms="after")
    model = GPT(cfg)
    assert model.transformer.h[0].ln_1 is None and "transformer.h.0.ln_1_post.weight" in model.state_dict()
    save_checkpoint(tmp_path / "o.safetensors", model, CharBPETokenizer(0).train(["abcabc"]))
    ck = load_checkpoint(tmp_path / "o.safetensors")
    idx = torch.randint(0, 20, (1, 6), generator=torch.Generator().manual_seed(0))
    assert ck.config == cfg and torch.equal(trace(ck.model, idx)["hook_logits"], trace(model, idx)["hook_logits"])
