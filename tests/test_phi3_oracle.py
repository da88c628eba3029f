"""Phi-3: a ``phi3`` model folder opens with ``gptviz.from_pretrained``, its fused ``qkv_proj`` and ``gate_up_proj``
split into gptviz's steps, partial rotary, a sliding window (a mask, not a cap on the text) and longrope scaling.

The oracles: Phi-3 folders built here with random weights against transformers' own ``Phi3ForCausalLM`` on the same
folder (eager attention, ``output_attentions=True``), its fused projections' outputs caught by torch forward hooks,
its ``Phi3Config`` for defaults and refusals, and the messages a user reads, written out whole."""
import json
import math

import pytest
import torch
from hf_models import build, compare, long_ids
from lazy_import import lazy

import gptviz
from gptviz import ModelConfig, trace
from gptviz.model.hook_names import act_name
from gptviz.model.pretrained import model_config

transformers = lazy("transformers")
tokenizers = pytest.importorskip("tokenizers")

# heads 16 wide; partial_rotary_factor 0.5 turns 8 of them: 4 pairs, so 4 factors a list
LONGROPE = {"rope_type": "longrope", "rope_theta": 500.0, "short_factor": [1.0, 1.5, 2.0, 3.0],
            "long_factor": [2.0, 4.0, 8.0, 16.0], "partial_rotary_factor": 0.5}


def two_rows(tok, n: int = 40) -> tuple[torch.Tensor, torch.Tensor]:
    """Two rows, the second left-padded by 5."""
    ids = long_ids(tok, n)
    two = torch.tensor([ids, ids[::-1]])
    mask = torch.ones_like(two)
    mask[1, :5] = 0
    return two, mask


@pytest.mark.parametrize("extra", [
    {},
    {"tie_word_embeddings": True, "rope_parameters": {"rope_type": "default", "rope_theta": 300.0,
                                                      "partial_rotary_factor": 0.5}},
    {"sliding_window": 8, "rms_norm_eps": 0.3, "hidden_act": "gelu_pytorch_tanh"},
], ids=["plain", "tied, partial rotary", "window 8"])
def test_a_phi3_folder_matches_transformers(tmp_path, extra):
    """Logits within 1e-4 and every layer's pattern within 1e-5 of transformers', one row of 48 tokens and two rows
    (the second left-padded); a window of 8, shorter than the text, on every layer (transformers' own patterns are
    checked to window, so the oracle is not plain causal)."""
    hf = build("phi3", tmp_path, **extra)
    model, tok = gptviz.from_pretrained(tmp_path)
    c = model.config
    assert (c.n_head, c.n_kv_head, c.d_head, c.d_mlp, c.gated_mlp, c.bias) == (4, 2, 16, 48, True, False)
    assert (c.tie_weights, c.sliding_window, c.sliding_layers) == (extra.get("tie_word_embeddings", False),
                                                                  extra.get("sliding_window"), None)
    assert c.d_rot == (8 if "rope_parameters" in extra else 16)
    idx = torch.tensor([long_ids(tok)])
    if "sliding_window" in extra:
        with torch.no_grad():
            att = hf(idx, output_attentions=True).attentions
        assert all((a[0, :, 30, :23] == 0).all() and (a[0, :, 30, 23:31] > 0).all() for a in att)
    compare(hf, model, idx)
    compare(hf, model, *two_rows(tok, 48))


def caught(hf, idx, mask=None) -> dict:
    """transformers' fused projections' outputs on ``idx`` (``qkv_proj`` and ``gate_up_proj``), by forward hooks."""
    got, handles = {}, []
    for l, layer in enumerate(hf.model.layers):
        for name, module in (("qkv", layer.self_attn.qkv_proj), ("gate_up", layer.mlp.gate_up_proj)):
            def hook(module, args, out, key=(name, l)):
                got[key] = out.detach().clone()
            handles.append(module.register_forward_hook(hook))
    try:
        with torch.no_grad():
            hf(idx, attention_mask=mask)
    finally:
        for h in handles:
            h.remove()
    return got


def test_the_fused_projections_split_as_transformers_splits_them(tmp_path):
    """``hook_qkv`` is transformers' ``qkv_proj`` output; ``hook_q``, ``hook_k``, ``hook_v`` its queries, keys and
    values (the first 4 × 16 columns, the next 2 × 16, the last 2 × 16, in heads); ``hook_pre`` (the gate, through
    the activation) the first half of ``gate_up_proj``'s output, ``hook_pre_linear`` the second."""
    hf = build("phi3", tmp_path)
    model, tok = gptviz.from_pretrained(tmp_path)
    idx, mask = two_rows(tok)
    got = caught(hf, idx, mask)
    tr = trace(model, idx, attention_mask=mask)
    real = mask.bool()  # a padded position's vectors are transformers' own business
    for l in range(2):
        qkv, gate_up = got[("qkv", l)], got[("gate_up", l)]
        assert qkv.shape == (2, 40, 128) and gate_up.shape == (2, 40, 96)
        assert (tr[act_name("qkv", l)] - qkv)[real].abs().max().item() < 1e-5
        for name, lo, hi, heads in (("q", 0, 64, 4), ("k", 64, 96, 2), ("v", 96, 128, 2)):
            theirs = qkv[..., lo:hi].reshape(2, 40, heads, 16)
            assert (tr[act_name(name, l)] - theirs)[real].abs().max().item() < 1e-5, name
        assert (tr[act_name("pre", l)] - gate_up[..., :48])[real].abs().max().item() < 1e-5
        assert (tr[act_name("pre_linear", l)] - gate_up[..., 48:])[real].abs().max().item() < 1e-5
        assert (gate_up[..., :48] - gate_up[..., 48:]).abs().max().item() > 0.1  # the halves differ


# --------------------------------------------------------------------------- longrope
@pytest.fixture(scope="module")
def longrope_folder(tmp_path_factory):
    """A Phi-3 with longrope (original context 16 of 64, partial rotary 0.5, a window of 24), built once."""
    folder = tmp_path_factory.mktemp("phi3-longrope")
    hf = build("phi3", folder, original_max_position_embeddings=16, sliding_window=24,
               rope_parameters=dict(LONGROPE))
    return hf, folder


@pytest.mark.parametrize("T", [12, 16, 17, 48])
def test_longrope_matches_transformers_inside_and_beyond_the_original_context(longrope_folder, T):
    """Texts of 12 and 16 tokens (within the original 16: the short factors), 17 and 48 (beyond: the long factors,
    for every position, as transformers' ``dynamic_rope_update`` picks them for the forward pass), one row and two
    rows left-padded: logits and every pattern. The wrong list is far off, so the comparison is about the list."""
    hf, folder = longrope_folder
    model, tok = gptviz.from_pretrained(folder)
    c = model.config
    assert (c.rope_type, c.rope_original_max_pos, c.rope_factor, c.d_rot) == ("longrope", 16, 4.0, 8)
    assert c.rope_short_factor == (1.0, 1.5, 2.0, 3.0) and c.rope_long_factor == (2.0, 4.0, 8.0, 16.0)
    idx = torch.tensor([long_ids(tok, T)])
    compare(hf, model, idx)
    compare(hf, model, *two_rows(tok, T))
    wrong_cfg = c.replace(rope_short_factor=c.rope_long_factor, rope_long_factor=c.rope_short_factor)
    wrong = gptviz.build_model(wrong_cfg)
    wrong.load_state_dict(model.state_dict())
    with torch.no_grad():
        theirs = hf(idx).logits
    assert (trace(wrong, idx)["hook_logits"] - theirs).abs().max().item() > 1e-3


def test_longrope_attention_factor_and_original_context_as_phi3config_reads_them(tmp_path):
    """``ROPE_INIT_FUNCTIONS["longrope"]`` on ``Phi3Config`` (frequencies within 1e-6 relative, the attention factor
    to 1e-12) for: no factor (max_position_embeddings / original: 64 / 16), a factor and an attention factor given,
    and no top-level original_max_position_embeddings (Phi3Config's 4096 wins over the object's 16, so the factor is
    64 / 4096 < 1: attention 1)."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    from gptviz.model.rope_scaling import inverse_frequencies

    base = {"model_type": "phi3", "vocab_size": 16, "hidden_size": 64, "intermediate_size": 8,
            "num_hidden_layers": 1, "num_attention_heads": 4, "max_position_embeddings": 64}
    cases = [{**base, "original_max_position_embeddings": 16, "rope_parameters": dict(LONGROPE)},
             {**base, "original_max_position_embeddings": 16,
              "rope_parameters": {**LONGROPE, "factor": 8.0, "attention_factor": 1.3}},
             {**base, "rope_parameters": {**LONGROPE, "original_max_position_embeddings": 16}}]
    for d, (original, att) in zip(cases, [(16, math.sqrt(1 + math.log(4) / math.log(16))), (16, 1.3), (4096, 1.0)]):
        (tmp_path / "config.json").write_text(json.dumps(d))
        cfg = model_config(tmp_path)[0]
        hf_cfg = transformers.Phi3Config.from_dict(json.loads(json.dumps(d)))
        assert cfg.rope_original_max_pos == original == hf_cfg.rope_parameters["original_max_position_embeddings"]
        for T in (None, original, original + 1):
            theirs, their_att = ROPE_INIT_FUNCTIONS["longrope"](hf_cfg, "cpu", seq_len=T)
            assert torch.allclose(inverse_frequencies(cfg, seq_len=T), theirs.double(), rtol=1e-6, atol=0), T
            assert cfg.rope_attention_factor == pytest.approx(their_att, rel=1e-12) == pytest.approx(att, rel=1e-12)


# --------------------------------------------------------------------------- config.json read and refused
PHI3 = {"model_type": "phi3", "vocab_size": 16, "hidden_size": 32, "intermediate_size": 8, "num_hidden_layers": 2,
        "num_attention_heads": 2}


def opened(tmp_path, d: dict) -> ModelConfig:
    (tmp_path / "config.json").write_text(json.dumps(d))
    cfg, family = model_config(tmp_path)
    assert family == "phi3"
    return cfg


def test_phi3_s_note_says_how_its_fused_projections_and_longrope_are_held(longrope_folder):
    model, _ = gptviz.from_pretrained(longrope_folder[1])
    fused = ("Phi-3 stores q, k and v as one fused projection (qkv_proj), here c_attn as it is, and the MLP's gate and "
             "up projections as one (gate_up_proj), here split in two: c_gate (the first half, through the "
             "activation) and c_fc.")
    assert model.family_note == fused + (" Its rotary positions are longrope: a text of up to 16 positions uses the "
                                         "short factors, a longer one the long factors, for every position.")
    assert gptviz.model.hf_families.FAMILIES["phi3"].note(model.config.replace(
        rope_type="default", rope_short_factor=None, rope_long_factor=None)) == fused


def test_the_keys_a_phi3_config_leaves_out_take_phi3configs_defaults(tmp_path):
    t = transformers.Phi3Config()
    cfg = opened(tmp_path, PHI3)
    assert (cfg.block_size, cfg.ln_eps, cfg.tie_weights, cfg.sliding_window, cfg.rope_base, cfg.rotary_pct) == \
        (t.max_position_embeddings, t.rms_norm_eps, t.tie_word_embeddings, t.sliding_window,
         t.rope_parameters["rope_theta"], 1.0)
    assert (cfg.n_kv_head, cfg.activation, cfg.rope_type, cfg.qkv_bias, cfg.attn_proj_bias) == \
        (2, "silu", "default", False, False)


def test_the_layer_count_the_initialiser_and_a_window_longer_than_any_text_are_read(tmp_path):
    """A Phi-3 config with three layers, its own initializer_range (used when the page draws fresh weights of the
    folder's shape) and a sliding window past 600M positions (no cap: a window longer than the text is no band)."""
    cfg = opened(tmp_path, {**PHI3, "num_hidden_layers": 3, "initializer_range": 0.05, "sliding_window": 2 ** 31})
    assert (cfg.n_layer, cfg.init_std, cfg.sliding_window) == (3, 0.05, 2 ** 31)
    assert opened(tmp_path, PHI3).init_std == transformers.Phi3Config().initializer_range


def test_su_and_yarn_are_read_as_longrope_as_phi3config_reads_them(tmp_path):
    """The oldest Phi-3 128k configs said "su" (and transformers reads "yarn" as longrope for Phi-3 too)."""
    for old in ("su", "yarn"):
        scaling = {"type": old, "short_factor": [1.0] * 8, "long_factor": [2.0] * 8,
                   "original_max_position_embeddings": 8}
        d = {**PHI3, "max_position_embeddings": 32, "original_max_position_embeddings": 8, "rope_scaling": scaling}
        assert transformers.Phi3Config.from_dict(json.loads(json.dumps(d))).rope_parameters["rope_type"] == "longrope"
        cfg = opened(tmp_path, d)
        assert (cfg.rope_type, cfg.rope_factor, cfg.rope_long_factor) == ("longrope", 4.0, (2.0,) * 8)


@pytest.mark.parametrize("change, message", [
    ({"rope_parameters": {"rope_type": "linear", "factor": 2.0}},
     "config.json's rope_parameters.rope_type='linear': gptviz computes the rotary scaling 'longrope' (and plain "
     "rotary positions), not this one"),
    ({"rope_scaling": {"type": "longrope", "short_factor": [1.0] * 8}},
     "config.json's rope_scaling.type='longrope' needs rope_scaling.long_factor, which it does not have"),
    ({"rope_parameters": {"rope_type": "longrope", "short_factor": [1.0] * 8, "long_factor": [1.0] * 6}},
     "rope_long_factor has 6 numbers: it must have one for each of the d_rot / 2 = 8 pairs of dimensions turned (in "
     "config.json: rope_long_factor is rope_parameters.long_factor (or rope_scaling's))"),
    ({"rope_parameters": {"rope_type": "longrope", "short_factor": [1.0] * 8, "long_factor": "x"}},
     "config.json's rope_parameters.long_factor='x' must be a list of finite numbers above 0"),
    ({"num_key_value_heads": 3}, "config.json's num_attention_heads=2 must be divisible by num_key_value_heads=3: "
                                 "each key/value head serves the same number of query heads"),
    ({"sliding_window": 0}, "config.json's sliding_window=0 must be at least 1"),
])
def test_a_bad_phi3_config_is_refused_with_the_message_a_user_reads(tmp_path, change, message):
    with pytest.raises(ValueError) as exc:
        opened(tmp_path, {**PHI3, **change})
    assert str(exc.value) == message
