"""Gemma 3 (its text model): a ``gemma3_text`` model folder opens, as Gemma 2 with QK-norm on each head (Gemma's
``1 + w`` gains) and sliding (local) layers that turn with a rotary base of their own (``rope_local_base``) while the
full-attention (global) layers keep ``rope_theta`` and its scaling; a ``gemma3`` (image-and-text) folder is refused.

Each check is against a computation that does not go through the code under test: Gemma 3 folders built here with
random weights against ``transformers``' own ``Gemma3ForCausalLM`` on the same folder (eager attention,
``output_attentions=True``), its q_norm and k_norm modules' outputs caught by torch forward hooks, its own config class
for the defaults and for which layers slide, rotary tables made here from the formula; the messages a user reads,
written out whole."""
import json

import pytest
import torch
from hf_models import build, compare, long_ids, two_rows
from lazy_import import lazy

import gptviz
from gptviz import ModelConfig, describe, trace
from gptviz.model.hook_names import act_name
from gptviz.model.layers import apply_rope
from gptviz.model.pretrained import model_config

transformers = lazy("transformers")  # pinned in requirements-dev.txt: missing, the tests fail, not skip
tokenizers = pytest.importorskip("tokenizers")


# --------------------------------------------------------------------------- transformers' Gemma3ForCausalLM
@pytest.mark.parametrize("extra", [{}, {"attn_logit_softcapping": 2.0, "final_logit_softcapping": 3.0,
                                        "rms_norm_eps": 0.3, "attention_bias": True}],
                         ids=["default", "capped-big-eps-biases"])
def test_a_gemma3_folder_matches_transformers(tmp_path, extra):
    """Local layers 0 and 2 (window 8, base 10), global layers 1 and 3 (base 300, linear scaling by 4): logits within
    1e-4 and every layer's pattern within 1e-5, one row and two rows with left padding, on 40 tokens."""
    hf = build("gemma3_text", tmp_path, **extra)
    model, tok = gptviz.from_pretrained(tmp_path)
    c = model.config
    assert (c.qk_norm, c.qk_norm_full, c.sublayer_norms, c.attn_scale_dim, c.sliding_window, c.sliding_layers,
            c.rope_local_base, c.rope_base, c.rope_type, c.rope_factor) == \
        (True, False, "both", 20.0, 8, (0, 2), 10.0, 300.0, "linear", 4.0)
    # transformers' Gemma3Attention keeps attn_logit_softcapping and never applies it: gptviz ignores it too
    assert (c.attn_softcap, c.final_softcap) == ((None, 3.0) if extra else (None, None))
    idx = torch.tensor([long_ids(tok, 40)])
    with torch.no_grad():
        att = hf(idx, output_attentions=True).attentions
    assert (att[2][0, :, 30, :23] == 0).all() and (att[3][0, :, 30, :23] > 0).all()  # layer 2 slides, 3 does not
    compare(hf, model, idx)
    compare(hf, model, *two_rows(tok))


def caught(hf, idx, mask=None) -> dict:
    """transformers' q_norm and k_norm modules' inputs and outputs on ``idx``, caught by torch forward hooks."""
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


def test_the_qk_norm_steps_are_transformers_own_q_norm_and_k_norm_outputs(tmp_path):
    """``hook_q_normed``/``hook_k_normed`` against transformers' ``q_norm``/``k_norm`` outputs (Gemma3RMSNorm, gain
    1 + w), within 1e-5; ``hook_q``/``hook_k`` against their inputs. transformers' are (B, heads, T, head_dim)."""
    hf = build("gemma3_text", tmp_path)
    model, tok = gptviz.from_pretrained(tmp_path)
    for idx, mask in [(torch.tensor([long_ids(tok, 40)]), None), two_rows(tok)]:
        got = caught(hf, idx, mask)
        tr = trace(model, idx, attention_mask=mask)
        real = torch.ones_like(idx, dtype=torch.bool) if mask is None else mask.bool()
        for l in range(4):
            for which in ("q", "k"):
                inp, out = (t.transpose(1, 2) for t in got[(which, l)])  # (B, T, heads, head_dim)
                assert (tr[act_name(f"{which}_normed", l)] - out)[real].abs().max().item() < 1e-5, (which, l)
                assert (tr[act_name(which, l)] - inp)[real].abs().max().item() < 1e-5, (which, l)
                assert (out - inp).abs().max().item() > 0.1  # the norm did something


def test_local_layers_turn_with_their_own_base_and_global_layers_with_the_scaled_one(tmp_path):
    """The rotated queries by hand: layer 0 (sliding) turns pair i at position t by t · 10^(-2i/12); layer 1 (full)
    by t · 300^(-2i/12) / 4 (linear scaling), from the recorded normalised queries."""
    build("gemma3_text", tmp_path)
    model, tok = gptviz.from_pretrained(tmp_path)
    tr = trace(model, torch.tensor([long_ids(tok, 40)]))
    pos = torch.arange(40, dtype=torch.float64)[:, None]
    for layer, base, factor in ((0, 10.0, 1.0), (1, 300.0, 4.0), (2, 10.0, 1.0), (3, 300.0, 4.0)):
        ang = pos * base ** (-torch.arange(0, 12, 2, dtype=torch.float64) / 12) / factor  # (T, 6)
        want = apply_rope(tr[act_name("q_normed", layer)].double(), ang.cos(), ang.sin())
        assert (tr[act_name("rot_q", layer)] - want).abs().max().item() < 1e-5, layer


# --------------------------------------------------------------------------- config.json
GEMMA3 = {"model_type": "gemma3_text", "vocab_size": 16, "hidden_size": 8, "intermediate_size": 8,
          "num_hidden_layers": 7, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 4,
          "max_position_embeddings": 64}


def opened(tmp_path, d: dict) -> ModelConfig:
    (tmp_path / "config.json").write_text(json.dumps(d))
    cfg, family = model_config(tmp_path)
    assert family == d["model_type"]
    return cfg


def test_a_saved_config_and_an_older_hand_written_one_open_to_the_same_model(tmp_path):
    """transformers 5's save (rope_parameters keyed by layer type, layer_types) and an older config.json written
    here (rope_theta and rope_scaling for the global layers, rope_local_base_freq for the local ones,
    sliding_window_pattern 2) give the same ModelConfig, written out field by field."""
    build("gemma3_text", tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert set(saved["rope_parameters"]) == {"full_attention", "sliding_attention"} and "rope_theta" not in saved
    new = model_config(tmp_path)[0]
    old = {"model_type": "gemma3_text", "vocab_size": 300, "hidden_size": 32, "intermediate_size": 48,
           "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 12,
           "max_position_embeddings": 64, "query_pre_attn_scalar": 20, "sliding_window": 8,
           "sliding_window_pattern": 2, "rope_theta": 300.0, "rope_local_base_freq": 10.0,
           "rope_scaling": {"rope_type": "linear", "factor": 4.0}, "hidden_activation": "gelu_pytorch_tanh",
           "final_logit_softcapping": None, "attn_logit_softcapping": None}
    assert opened(tmp_path, old) == new == ModelConfig(
        vocab_size=300, block_size=64, n_layer=4, n_head=4, n_kv_head=2, n_embd=32, d_head=12, d_mlp=48,
        norm="rmsnorm", pos_encoding="rope", rope_base=300.0, rope_type="linear", rope_factor=4.0,
        activation="gelu_tanh", gated_mlp=True, bias=False, tie_weights=False, ln_eps=1e-6, sliding_window=8,
        sliding_layers=(0, 2), qk_norm=True, sublayer_norms="both", attn_scale_dim=20.0, rope_local_base=10.0)
    # transformers reads the older form the same way
    t = transformers.Gemma3TextConfig(**{k: v for k, v in old.items() if k != "model_type"})
    assert t.rope_parameters == {"sliding_attention": {"rope_type": "default", "rope_theta": 10.0},
                                 "full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 300.0}}


def test_the_keys_a_gemma3_config_leaves_out_take_transformers_defaults(tmp_path):
    """Bases 1e6 (global) and 1e4 (local), five sliding layers in six, no caps, query_pre_attn_scalar 256."""
    t = transformers.Gemma3TextConfig(num_hidden_layers=7)
    cfg = opened(tmp_path, GEMMA3)
    assert (cfg.rope_base, cfg.rope_local_base) == (t.rope_parameters["full_attention"]["rope_theta"],
                                                    t.rope_parameters["sliding_attention"]["rope_theta"]) == (1e6, 1e4)
    assert cfg.sliding_layers == tuple(i for i, k in enumerate(t.layer_types) if k == "sliding_attention") == \
        (0, 1, 2, 3, 4, 6)
    assert (cfg.attn_softcap, cfg.final_softcap, cfg.attn_scale_dim, cfg.sliding_window) == \
        (t.attn_logit_softcapping, t.final_logit_softcapping, t.query_pre_attn_scalar, t.sliding_window)


def test_a_gemma3_with_no_sliding_layer_has_one_rotary_table(tmp_path):
    cfg = opened(tmp_path, {**GEMMA3, "layer_types": ["full_attention"] * 7})
    assert (cfg.sliding_window, cfg.rope_local_base, cfg.rope_base) == (None, None, 1e6)


def test_the_image_and_text_gemma3_is_refused_naming_the_text_model(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gemma3", "text_config": GEMMA3}))
    with pytest.raises(ValueError) as exc:
        model_config(tmp_path)
    assert str(exc.value) == "config.json's model_type='gemma3' is Gemma 3's image-and-text model " \
        "(Gemma3ForConditionalGeneration), which gptviz does not open: it opens Gemma 3's text model, a folder whose " \
        "config.json says model_type 'gemma3_text' (Gemma3ForCausalLM, as the 270m and 1b models are saved)"


@pytest.mark.parametrize("change, message", [
    ({"rope_parameters": {"sliding_attention": {"rope_type": "linear", "factor": 2.0}}},
     "config.json's rope_parameters.sliding_attention.rope_type='linear': gptviz turns Gemma 3's sliding layers with "
     "plain rotary positions only (rope_type 'default'), as every Gemma 3 is saved"),
    ({"rope_parameters": {"full_attention": {"rope_type": "linear"}}},
     "config.json's rope_parameters.full_attention.rope_type='linear' needs rope_parameters.full_attention.factor, "
     "which it does not have"),
    ({"rope_parameters": {"sliding_attention": {"rope_theta": 1}}},
     "config.json's rope_parameters.sliding_attention.rope_theta=1 must be above 1"),
    ({"rope_local_base_freq": "10000"}, "config.json's rope_local_base_freq='10000' must be a finite number"),
    ({"rope_parameters": {"full_attention": [1]}}, "config.json's full_attention=[1] must be a JSON object"),
    ({"sliding_window_pattern": 0}, "config.json's sliding_window_pattern=0 must be at least 1"),
    ({"use_bidirectional_attention": True},
     "use_bidirectional_attention=true is not supported: gptviz computes causal attention"),
])
def test_a_bad_gemma3_config_is_refused_with_the_message_a_user_reads(tmp_path, change, message):
    (tmp_path / "config.json").write_text(json.dumps({**GEMMA3, **change}))
    with pytest.raises(ValueError) as exc:
        model_config(tmp_path)
    assert str(exc.value) == message


def test_the_local_base_needs_a_window_and_is_described_on_the_architecture():
    from gptviz.present.figures.pictures import architecture_parts

    cfg = ModelConfig(vocab_size=20, block_size=8, n_layer=2, n_head=2, n_embd=8, pos_encoding="rope",
                      sliding_window=3, sliding_layers=(0,), rope_local_base=50)
    assert cfg.rope_local_base == 50.0 and cfg.table_bytes() == 2 * cfg.replace(rope_local_base=None).table_bytes()
    with pytest.raises(ValueError) as exc:
        cfg.replace(sliding_window=None, sliding_layers=None)
    assert str(exc.value) == "rope_local_base=50.0 needs rotary positions (pos_encoding='rope') and a " \
                             "sliding_window: it is the base of the layers with the window"
    with pytest.raises(ValueError) as exc:
        cfg.replace(rope_local_base=1)
    assert str(exc.value) == "rope_local_base=1 must be above 1, or None"
    lines = [line for part in architecture_parts(cfg, 1, 4) for line in part["lines"]]
    assert "RoPE base 50 on the sliding layers, 10000 on the others" in lines
    assert describe(act_name("rot_q", 0), cfg).title == "L0 Q rotated (RoPE)"
