"""Oracle tests of rotary scaling (issue 38): ``linear``, ``dynamic`` (NTK), ``llama3``, ``yarn`` and ``longrope``, read
from a
Llama ``config.json`` (``gptviz.model.hf_rope``) and computed by ``gptviz.model.rope_scaling``.

The oracles: transformers' own rotary tables for the same config.json (``ROPE_INIT_FUNCTIONS``, and a fresh
``LlamaRotaryEmbedding``, whose cos and sin carry ``attention_scaling``); each type's formula written out here one
pair at a time in plain Python (``written_out``); a transformers Llama with random weights saved to a folder with a
tokenizer trained here (logits, and every attention pattern with eager attention); and transformers' reading of a
config.json in either form, ``rope_parameters`` (transformers 5) or ``rope_theta`` with ``rope_scaling`` (older)."""
import json
import math

import pytest
import torch
from hf_models import TEXT, build
from lazy_import import lazy

import gptviz
from gptviz import ModelConfig, build_model, trace
from gptviz.model.checkpoint import load_checkpoint, save_checkpoint
from gptviz.model.hook_names import act_name
from gptviz.model.layers import rope_angles
from gptviz.model.pretrained import model_config
from gptviz.model.rope_scaling import inverse_frequencies, plain_frequencies, rope_cos_sin
from gptviz.present import figures

transformers = lazy("transformers", skip=True)
tokenizers = pytest.importorskip("tokenizers")

# A Llama config.json: heads 16 wide (8 pairs), base 500, so that each scaling below has pairs in each of its regimes
BASE = {"model_type": "llama", "vocab_size": 16, "hidden_size": 32, "intermediate_size": 8, "num_hidden_layers": 1,
        "num_attention_heads": 2, "num_key_value_heads": 1, "max_position_embeddings": 32}
CASES = {  # name: (rope_parameters, max_position_embeddings)
    "linear": ({"rope_type": "linear", "factor": 4.0}, 32),
    "dynamic": ({"rope_type": "dynamic", "factor": 2.0}, 32),
    "llama3": ({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 32}, 64),
    "yarn": ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16}, 64),
    "yarn, own betas, not truncated": ({"rope_type": "yarn", "factor": 3.0, "original_max_position_embeddings": 256,
                                        "beta_fast": 8, "beta_slow": 2, "truncate": False}, 64),
    "yarn, attention_factor": ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16,
                                "attention_factor": 1.25}, 64),
    "yarn, mscale and mscale_all_dim": ({"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 16,
                                         "mscale": 1.0, "mscale_all_dim": 0.5}, 64),
    # the edges mutation testing found untested: a low-frequency factor other than 1 (L / lo, not L * lo), a yarn
    # ramp that runs past the last pair (clipped to d - 1), one of no width (beta_fast = beta_slow), and an attention
    # factor of exactly 2
    "llama3, low_freq_factor 2": ({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 2.0,
                                   "high_freq_factor": 8.0, "original_max_position_embeddings": 32}, 64),
    "yarn, ramp past the last pair": ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 256,
                                       "beta_fast": 32, "beta_slow": 0.0001, "truncate": False}, 64),
    "yarn, ramp of no width": ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 256,
                                "beta_fast": 4, "beta_slow": 4, "truncate": False}, 64),
    "yarn, attention_factor 2": ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16,
                                  "attention_factor": 2.0}, 64),
    # longrope (Phi-3's, which transformers runs on a Llama too): factor max / original = 4 where none is given
    "longrope": ({"rope_type": "longrope", "short_factor": [1.0, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 6.0],
                  "long_factor": [1.0, 2.0, 3.0, 5.0, 8.0, 13.0, 21.0, 34.0], "original_max_position_embeddings": 16},
                 64),
    "longrope, factor and attention_factor": ({"rope_type": "longrope", "short_factor": [1.5] * 8,
                                               "long_factor": [1.0 + i for i in range(8)], "factor": 2.0,
                                               "attention_factor": 1.1, "original_max_position_embeddings": 16}, 64),
    # mutation testing's next edges (hf_rope.py at a56fe59): longrope's own factor read (no attention factor given, so
    # the factor sets it), a factor and an attention factor below 1, and yarn's mscales below 1 and at small factors
    "longrope, own factor": ({"rope_type": "longrope", "short_factor": [1.5] * 8,
                              "long_factor": [1.0 + i for i in range(8)], "factor": 2.0,
                              "original_max_position_embeddings": 16}, 64),
    "longrope, factor below 1": ({"rope_type": "longrope", "short_factor": [1.5] * 8,
                                  "long_factor": [1.0 + i for i in range(8)], "factor": 0.5,
                                  "original_max_position_embeddings": 16}, 64),
    "longrope, attention_factor below 1": ({"rope_type": "longrope", "short_factor": [1.5] * 8,
                                            "long_factor": [1.0 + i for i in range(8)], "attention_factor": 0.5,
                                            "original_max_position_embeddings": 16}, 64),
    "yarn, mscale below mscale_all_dim": ({"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 16,
                                           "mscale": 0.5, "mscale_all_dim": 1.0}, 64),
    "yarn, mscales at factor 1.5": ({"rope_type": "yarn", "factor": 1.5, "original_max_position_embeddings": 16,
                                     "mscale": 1.0, "mscale_all_dim": 0.5}, 64),
    "yarn, mscales at factor 0.5": ({"rope_type": "yarn", "factor": 0.5, "original_max_position_embeddings": 16,
                                     "mscale": 1.0, "mscale_all_dim": 0.5}, 64),
}


EVERY_REGIME = ("llama3", "yarn", "yarn, own betas, not truncated", "yarn, attention_factor",
                "yarn, mscale and mscale_all_dim")  # cases designed to have pairs kept, divided and blended


def config_json(name: str, theta: float = 500.0) -> dict:
    rope, max_pos = CASES[name]
    return {**BASE, "max_position_embeddings": max_pos, "rope_parameters": {"rope_theta": theta, **rope}}


def older_form(d: dict, key: str = "rope_type") -> dict:
    """``d`` as transformers 4 saved it: ``rope_theta`` at the top, the scaling in ``rope_scaling`` (``key``:
    "type" in the oldest configs)."""
    old = {k: v for k, v in d.items() if k != "rope_parameters"}
    params = dict(d["rope_parameters"])
    old["rope_theta"] = params.pop("rope_theta")
    params[key] = params.pop("rope_type")
    return {**old, "rope_scaling": params}


def opened(tmp_path, d: dict) -> ModelConfig:
    (tmp_path / "config.json").write_text(json.dumps(d))
    return model_config(tmp_path)[0]


def hf_config(d: dict):
    """transformers' LlamaConfig for config.json ``d``, read as ``from_pretrained`` reads a file."""
    return transformers.LlamaConfig.from_dict(json.loads(json.dumps(d)))


def hf_tables(hf_cfg, T: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(cos, sin), each (T, d_rot/2), of a fresh ``LlamaRotaryEmbedding`` (fresh: a dynamic one keeps the
    frequencies of the longest text it has seen) on positions 0 … T-1; it repeats each table for the two halves."""
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    cos, sin = LlamaRotaryEmbedding(hf_cfg)(torch.zeros(1, T, 4), torch.arange(T)[None])
    half = cos.shape[-1] // 2
    assert torch.equal(cos[0, :, :half], cos[0, :, half:]) and torch.equal(sin[0, :, :half], sin[0, :, half:])
    return cos[0, :, :half], sin[0, :, :half]


def written_out(p: dict, d: int, base: float, max_pos: int, seq_len: int) -> tuple[list[float], float]:
    """(ω_i for each pair, the attention factor) of config.json's scaling ``p``, one pair at a time, as the papers and
    transformers' docstrings state them: linear (Chen et al. 2023), dynamic NTK (bloc97, emozilla), Llama 3.1's
    smoothing, YaRN (Peng et al. 2023, with transformers' ``truncate`` and DeepSeek's mscale ratio)."""
    plain = [base ** (-2 * i / d) for i in range(d // 2)]
    s, kind = p.get("factor"), p["rope_type"]
    if kind == "longrope":  # each pair divided by its own factor, the long list for a text over L; Phi-3's scale
        L = p["original_max_position_embeddings"]
        f = p["long_factor"] if seq_len > L else p["short_factor"]
        s = s or max_pos / L
        att = p.get("attention_factor") or (math.sqrt(1 + math.log(s) / math.log(L)) if s > 1 else 1.0)
        return [w / fi for w, fi in zip(plain, f)], att
    if kind == "linear":
        return [w / s for w in plain], 1.0
    if kind == "dynamic":
        if seq_len <= max_pos:
            return plain, 1.0
        b = base * (s * seq_len / max_pos - (s - 1)) ** (d / (d - 2))
        return [b ** (-2 * i / d) for i in range(d // 2)], 1.0
    L = p["original_max_position_embeddings"]
    if kind == "llama3":
        lo, hi, out = p["low_freq_factor"], p["high_freq_factor"], []
        for w in plain:
            wavelength = 2 * math.pi / w
            if wavelength < L / hi:
                out.append(w)
            elif wavelength > L / lo:
                out.append(w / s)
            else:
                g = (L / wavelength - lo) / (hi - lo)
                out.append((1 - g) * w / s + g * w)
        return out, 1.0
    pair_turning = lambda turns: d * math.log(L / (2 * math.pi * turns)) / (2 * math.log(base))
    lo, hi = pair_turning(p.get("beta_fast") or 32), pair_turning(p.get("beta_slow") or 1)
    if p.get("truncate", True):
        lo, hi = math.floor(lo), math.ceil(hi)
    lo, hi = max(lo, 0), min(hi, d - 1)
    if lo == hi:  # the papers' ramp would divide by zero here; transformers widens it by 0.001
        hi += 0.001
    ramp = [min(max((i - lo) / (hi - lo), 0.0), 1.0) for i in range(d // 2)]
    mscale = lambda m: 0.1 * m * math.log(s) + 1.0 if s > 1 else 1.0
    if p.get("attention_factor"):
        att = p["attention_factor"]
    elif p.get("mscale") and p.get("mscale_all_dim"):
        att = mscale(p["mscale"]) / mscale(p["mscale_all_dim"])
    else:
        att = mscale(1.0)
    return [(1 - r) * w + r * w / s for r, w in zip(ramp, plain)], att


# --------------------------------------------------------------------------- the tables
EPS32 = torch.finfo(torch.float32).eps


@pytest.mark.parametrize("name", list(CASES))
def test_cos_and_sin_equal_transformers_rotary_embedding(tmp_path, name):
    """gptviz's tables (the model's, as a forward pass takes them) for every position the model is built for (for
    dynamic NTK at lengths up to twice max_position_embeddings, below, at and above it: gptviz builds a dynamic model
    for factor × max_position_embeddings) against a fresh transformers rotary embedding's, and against the exact
    tables (the formulas written out, in float64).

    Against the exact tables: within the one rounding of the float64 angle to float32 (ε₃₂ / 2 · θ, plus an ε for
    float32's cos and sin), times the attention factor. Against transformers': within 1e-6 + 4 ε₃₂ · θ for the angle
    θ = t · ω_i.
    transformers works its angles out in float32 (ω_i, then t · ω_i), so its cos and sin carry a rounding of a few
    float32 ε of the angle itself: up to 2.6e-6 off the exact tables here (at θ ≈ 40), while gptviz's angles are
    worked out in float64 and rounded once (at most 9.9e-7 off)."""
    d = config_json(name)
    cfg = opened(tmp_path, d)
    model = build_model(cfg)
    M, L = d["max_position_embeddings"], cfg.rope_original_max_pos
    lengths = (M // 2, M, M + 1, 3 * M // 2, 2 * M) if cfg.rope_type == "dynamic" else \
        (L // 2, L, L + 1, cfg.block_size) if cfg.rope_type == "longrope" else (cfg.block_size,)
    if cfg.rope_type == "dynamic":
        assert cfg.block_size == 2 * M
    for T in lengths:
        cos, sin = hf_tables(hf_config(d), T)
        ours_cos, ours_sin = model.rope_tables(T)
        omega, att = written_out(d["rope_parameters"], cfg.d_rot, 500.0, M, T)
        theta = torch.arange(T, dtype=torch.float64)[:, None] * torch.tensor(omega, dtype=torch.float64)[None, :]
        for ours, theirs, exact in ((ours_cos, cos, att * theta.cos()), (ours_sin, sin, att * theta.sin())):
            # one rounding of the float64 angle to float32 (half an ε of θ), then float32's cos or sin and the factor
            assert ((ours.double() - exact).abs() <= att * (EPS32 / 2 * theta + EPS32)).all(), T
            assert ((ours - theirs).abs().double() <= 1e-6 + 4 * EPS32 * theta).all(), T


@pytest.mark.parametrize("name", list(CASES))
def test_frequencies_equal_transformers_init_functions_and_the_written_out_formulas(tmp_path, name):
    """ω_i against ``ROPE_INIT_FUNCTIONS[type]`` (float32: within 1e-6 relative) and against the formula written out
    here (float64: within 1e-12); the attention factor against both. Each scaling's pairs are in each of its regimes
    (kept, divided by the factor, blended), so a wrong boundary shows."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    d = config_json(name)
    cfg = opened(tmp_path, d)
    p, M = d["rope_parameters"], d["max_position_embeddings"]
    plain = plain_frequencies(cfg.d_rot, 500.0)
    L = cfg.rope_original_max_pos
    for T in ((M, M + 1, 2 * M) if cfg.rope_type == "dynamic" else (L, L + 1, M) if cfg.rope_type == "longrope"
              else (M,)):
        ours = inverse_frequencies(cfg, seq_len=T)
        theirs, att = ROPE_INIT_FUNCTIONS[cfg.rope_type](hf_config(d), "cpu", seq_len=T)
        assert torch.allclose(ours, theirs.double(), rtol=1e-6, atol=0), (T, ours, theirs)
        assert cfg.rope_attention_factor == pytest.approx(att, rel=1e-12)
        formula, formula_att = written_out(p, cfg.d_rot, 500.0, M, T)
        assert torch.allclose(ours, torch.tensor(formula, dtype=torch.float64), rtol=1e-12, atol=0)
        assert cfg.rope_attention_factor == pytest.approx(formula_att, rel=1e-12)
    if name in EVERY_REGIME:
        ratio = (inverse_frequencies(cfg) / plain).tolist()
        s = cfg.rope_factor
        assert any(r == pytest.approx(1) for r in ratio) and any(r == pytest.approx(1 / s) for r in ratio)
        assert any(1 / s + 1e-6 < r < 1 - 1e-6 for r in ratio), ratio  # a blended pair


def test_plain_rotary_positions_are_the_same_to_the_bit():
    """The default type is ``rope_angles``'s tables, as before scaling existed; dynamic NTK up to its original
    context is too, and linear scaling by a factor of 1."""
    cfg = ModelConfig(vocab_size=16, block_size=24, n_layer=1, n_head=2, n_embd=32, pos_encoding="rope",
                      rope_base=500.0)
    ang = rope_angles(24, 16, 500.0)
    model = build_model(cfg)
    assert torch.equal(model.rope_cos, ang.cos()) and torch.equal(model.rope_sin, ang.sin())
    assert all(torch.equal(a, b) for a, b in zip(rope_cos_sin(cfg, 24), (ang.cos(), ang.sin())))
    dynamic = build_model(cfg.replace(rope_type="dynamic", rope_factor=2.0, rope_original_max_pos=24))
    assert all(torch.equal(a, b) for a, b in zip(dynamic.rope_tables(24), (ang.cos(), ang.sin())))
    assert all(torch.equal(a, b) for a, b in zip(rope_cos_sin(cfg.replace(rope_type="linear"), 24),
                                                 (ang.cos(), ang.sin())))


def test_a_dynamic_model_works_each_text_out_from_its_own_length():
    """As a freshly loaded transformers model does: a text over the original context gets the base of its own
    length, whatever ran before (transformers' rotary embedding keeps the longest length it has seen, so the same
    text can be read differently after a longer one: gptviz never does)."""
    cfg = ModelConfig(vocab_size=16, block_size=64, n_layer=1, n_head=2, n_embd=32, pos_encoding="rope",
                      rope_type="dynamic", rope_factor=2.0, rope_original_max_pos=32)
    model = build_model(cfg)
    idx = torch.randint(0, 16, (1, 64), generator=torch.Generator().manual_seed(0))
    first = trace(model, idx[:, :40])["hook_logits"]
    trace(model, idx)
    assert torch.equal(trace(model, idx[:, :40])["hook_logits"], first)
    assert not torch.allclose(model.rope_tables(40)[0], model.rope_cos[:40])  # scaled: not the built table
    assert torch.equal(model.rope_tables(32)[0], model.rope_cos[:32])


# --------------------------------------------------------------------------- a Llama with random weights
PARITY = {  # base 500 for llama3: with 4 pairs a head, one is blended (wavelength between 8 and 32 positions)
    "llama3": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 32, "rope_theta": 500.0},
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16},
    "linear": {"rope_type": "linear", "factor": 2.0},
    "dynamic": {"rope_type": "dynamic", "factor": 2.0},
}
LONG_TEXT = " ".join(TEXT.split()[i * 7 % len(TEXT.split())] for i in range(160))  # known words, new order


@pytest.mark.parametrize("kind", list(PARITY))
def test_a_scaled_llama_folder_matches_transformers(tmp_path, kind):
    """A transformers Llama (max_position_embeddings 64, heads 8 wide) with every weight random and the scaling,
    saved with a tokenizer trained here: on a text longer than original_max_position_embeddings (dynamic: longer
    than max_position_embeddings, which it stretches by its factor), gptviz's logits are within 1e-4 of
    transformers' and every layer's attention pattern within 1e-5. The same folder's config.json rewritten in the
    older form (rope_theta and rope_scaling) opens as the same model."""
    hf = build("llama", tmp_path, rope_parameters=dict(PARITY[kind]))
    assert hf.config.rope_parameters["rope_type"] == kind
    model, tok = gptviz.from_pretrained(tmp_path)
    assert (model.config.rope_type, model.config.rope_factor) == (kind, PARITY[kind]["factor"])
    T = 120 if kind == "dynamic" else 60
    assert model.config.block_size == (128 if kind == "dynamic" else 64)
    ids = tok.encode(LONG_TEXT)[:T]
    assert len(ids) == T and T > PARITY[kind].get("original_max_position_embeddings", 64 if kind == "dynamic" else 0)
    idx = torch.tensor([ids])
    with torch.no_grad():
        out = hf(idx, output_attentions=True)
    tr = trace(model, idx)
    assert (tr["hook_logits"] - out.logits).abs().max().item() < 1e-4
    assert len(out.attentions) == model.config.n_layer
    for layer, pattern in enumerate(out.attentions):
        assert (tr[act_name("pattern", layer)] - pattern).abs().max().item() < 1e-5, layer
    plain = build_model(model.config.replace(rope_type="default"))  # the same weights, plain rotary positions:
    plain.load_state_dict(model.state_dict())  # far off, so the comparison above is about the scaling
    assert (trace(plain, idx)["hook_logits"] - out.logits).abs().max().item() > 1e-3
    d = json.loads((tmp_path / "config.json").read_text())
    assert "rope_parameters" in d and "rope_scaling" not in d  # transformers 5 saved the newer form
    (tmp_path / "config.json").write_text(json.dumps(older_form(d, key="type" if kind == "linear" else "rope_type")))
    old, _ = gptviz.from_pretrained(tmp_path)
    assert old.config == model.config
    assert torch.equal(trace(old, idx)["hook_logits"], tr["hook_logits"])


# --------------------------------------------------------------------------- config.json in both forms
@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("key", ["rope_type", "type"])
def test_both_forms_of_config_json_give_the_same_model(tmp_path, name, key):
    """``rope_parameters`` and ``rope_theta`` + ``rope_scaling`` (with ``rope_type``, or the oldest ``type``): the
    same ModelConfig, and transformers reads the two as the same rotary tables (the oracle that they are one
    model)."""
    new = config_json(name)
    old = older_form(new, key)
    assert opened(tmp_path, old) == opened(tmp_path, new)
    T = 2 * new["max_position_embeddings"]
    for a, b in zip(hf_tables(hf_config(old), T), hf_tables(hf_config(new), T)):
        assert torch.equal(a, b)


def test_rope_scaling_wins_over_rope_parameters_as_in_transformers(tmp_path):
    """A config.json with both objects (written by hand): transformers 5 reads ``rope_scaling`` and the top-level
    ``rope_theta``, ignoring ``rope_parameters``; so does gptviz."""
    d = {**BASE, "rope_theta": 700.0, "rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 300.0},
         "rope_scaling": {"rope_type": "linear", "factor": 4.0}}
    theirs = hf_config(d).rope_parameters
    assert (theirs["rope_type"], theirs["factor"], theirs["rope_theta"]) == ("linear", 4.0, 700.0)
    cfg = opened(tmp_path, d)
    assert (cfg.rope_type, cfg.rope_factor, cfg.rope_base) == ("linear", 4.0, 700.0)


def test_original_max_position_embeddings_at_the_top_wins_and_defaults_to_the_context(tmp_path):
    """transformers' ``standardize_rope_params``, which each rotary init function runs again before it computes (so
    the frequencies, not ``rope_parameters`` as first read, are the oracle): a top-level
    original_max_position_embeddings (Phi-3's place) over the object's, and max_position_embeddings where neither
    says."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    d = config_json("yarn")
    for change, original in (({"original_max_position_embeddings": 8}, 8), ({}, 16)):
        cfg = opened(tmp_path, {**d, **change})
        theirs, _ = ROPE_INIT_FUNCTIONS["yarn"](hf_config({**d, **change}), "cpu")
        assert cfg.rope_original_max_pos == original
        assert torch.allclose(inverse_frequencies(cfg), theirs.double(), rtol=1e-6, atol=0)
    d["rope_parameters"].pop("original_max_position_embeddings")
    cfg = opened(tmp_path, d)
    assert cfg.rope_original_max_pos == 64
    theirs, _ = ROPE_INIT_FUNCTIONS["yarn"](hf_config(d), "cpu")
    assert torch.allclose(inverse_frequencies(cfg), theirs.double(), rtol=1e-6, atol=0)
    assert not torch.allclose(inverse_frequencies(cfg), inverse_frequencies(cfg.replace(rope_original_max_pos=8)))


# --------------------------------------------------------------------------- refusals
KINDS = "gptviz computes the rotary scalings 'linear', 'dynamic', 'llama3', 'yarn', 'longrope' (and plain rotary " \
        "positions), not this one"
NAN = float("nan")


@pytest.mark.parametrize("rope, message", [
    ({"rope_parameters": {"rope_type": "longrope", "long_factor": [1.0] * 8}},
     "config.json's rope_parameters.rope_type='longrope' needs rope_parameters.short_factor, which it does not have"),
    ({"rope_scaling": {"rope_type": "longrope", "short_factor": [1.0] * 8, "long_factor": [1.0] * 7 + [0]}},
     "config.json's rope_scaling.long_factor=[1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0] must be a list of finite numbers "
     "above 0"),
    ({"rope_scaling": {"rope_type": "longrope", "short_factor": [1.0] * 4, "long_factor": [1.0] * 8}},
     "rope_short_factor has 4 numbers: it must have one for each of the d_rot / 2 = 8 pairs of dimensions turned (in "
     "config.json: rope_short_factor is rope_parameters.short_factor (or rope_scaling's))"),
    ({"rope_scaling": {"type": "su", "factor": 2.0}}, "config.json's rope_scaling.type='su': " + KINDS),
    ({"rope_scaling": {"rope_type": "proportional"}}, "config.json's rope_scaling.rope_type='proportional': " + KINDS),
    ({"rope_scaling": {"rope_type": ""}}, "config.json's rope_scaling.rope_type='': " + KINDS),
    ({"rope_scaling": {"rope_type": "linear", "factor": 0}}, "config.json's rope_scaling.factor=0 must be above 0"),
    ({"rope_scaling": {"rope_type": "linear", "factor": -2.0}},
     "config.json's rope_scaling.factor=-2.0 must be above 0"),
    ({"rope_parameters": {"rope_type": "dynamic", "factor": NAN}},
     "config.json's rope_parameters.factor=nan must be a finite number"),
    ({"rope_parameters": {"rope_type": "yarn", "factor": "4"}},
     "config.json's rope_parameters.factor='4' must be a finite number"),
    ({"rope_parameters": {"rope_type": "llama3", "factor": float("inf")}},
     "config.json's rope_parameters.factor=inf must be a finite number"),
    ({"rope_scaling": {"rope_type": "linear"}},
     "config.json's rope_scaling.rope_type='linear' needs rope_scaling.factor, which it does not have"),
    ({"rope_parameters": {"rope_type": "llama3", "factor": 8.0, "high_freq_factor": 4.0}},
     "config.json's rope_parameters.rope_type='llama3' needs rope_parameters.low_freq_factor, which it does not have"),
    ({"rope_parameters": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0, "high_freq_factor": 4.0}},
     "config.json's rope_parameters.high_freq_factor=4.0 must be above rope_parameters.low_freq_factor=4.0: llama3 "
     "blends the frequencies between the two wavelengths they set"),
    ({"rope_parameters": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                          "original_max_position_embeddings": 0}},
     "config.json's rope_parameters.original_max_position_embeddings=0 must be at least 1"),
    ({"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "beta_fast": -1}},
     "config.json's rope_parameters.beta_fast=-1.0 must be above 0: the number of turns where yarn's blend starts "
     "or ends"),
    ({"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "beta_fast": 1, "beta_slow": 2}},
     "config.json's rope_parameters.beta_fast=1.0 must be at least rope_parameters.beta_slow=2.0"),
    ({"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "truncate": "no"}},
     "config.json's rope_parameters.truncate='no' must be true or false"),
    ({"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "attention_factor": 0}},
     "config.json's rope_parameters.attention_factor=0 must be above 0"),
    ({"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "mscale": -100.0, "mscale_all_dim": 1.0}},
     "config.json's rope_parameters.mscale=-100.0 and rope_parameters.mscale_all_dim=1.0 give an attention factor of "
     "-11.2969: it must be above 0"),
    # each message names the key inside its object (mutation testing at a56fe59 found these unread)
    ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "beta_fast": "x"}},
     "config.json's rope_scaling.beta_fast='x' must be a finite number"),
    ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "beta_slow": "x"}},
     "config.json's rope_scaling.beta_slow='x' must be a finite number"),
    ({"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "beta_fast": 2, "beta_slow": -1}},
     "config.json's rope_parameters.beta_slow=-1.0 must be above 0: the number of turns where yarn's blend starts "
     "or ends"),
    ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "mscale": "x"}},
     "config.json's rope_scaling.mscale='x' must be a finite number"),
    ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "mscale_all_dim": "x"}},
     "config.json's rope_scaling.mscale_all_dim='x' must be a finite number"),
    ({"rope_parameters": {"rope_type": "yarn", "factor": math.e, "mscale": 1.0, "mscale_all_dim": -10.0}},
     "config.json's rope_parameters.mscale=1.0 and rope_parameters.mscale_all_dim=-10.0 give an attention factor of "
     "-inf: it must be above 0"),  # yarn's mscale of mscale_all_dim is 0.1 · -10 · ln e + 1 = 0
    ({"rope_parameters": {"rope_type": "yarn", "factor": math.e, "mscale": -10.0, "mscale_all_dim": 1.0}},
     "config.json's rope_parameters.mscale=-10.0 and rope_parameters.mscale_all_dim=1.0 give an attention factor of "
     "0: it must be above 0"),
    ({"rope_scaling": {"rope_type": "longrope", "short_factor": [1.0] * 8, "long_factor": [1.0] * 8, "factor": -1}},
     "config.json's rope_scaling.factor=-1 must be above 0"),
    ({"rope_scaling": {"rope_type": "longrope", "short_factor": [1.0] * 8, "long_factor": [1.0] * 8,
                       "attention_factor": 0}}, "config.json's rope_scaling.attention_factor=0 must be above 0"),
    ({"rope_scaling": {"rope_type": "longrope", "short_factor": [1.0] * 8, "long_factor": [1.0] * 8,
                       "original_max_position_embeddings": 0}},
     "config.json's rope_scaling.original_max_position_embeddings=0 must be at least 1"),
    ({"original_max_position_embeddings": 2**32 + 1,
      "rope_scaling": {"rope_type": "yarn", "factor": 4.0}},
     "config.json's original_max_position_embeddings=4294967297 must be at most 4,294,967,296"),
    ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2**32 + 1}},
     "config.json's rope_scaling.original_max_position_embeddings=4294967297 must be at most 4,294,967,296"),
    ({"rope_parameters": {"rope_type": "dynamic", "factor": 2.0}, "hidden_size": 4},  # heads 2 wide
     "rope_type='dynamic' needs at least 4 rotated dimensions, not d_rot=2: it raises the base to the power "
     "d_rot / (d_rot - 2) (in config.json: rope_type is rope_parameters.rope_type (or rope_scaling's))"),
])
def test_a_scaling_gptviz_cannot_compute_is_refused_with_the_message_a_user_reads(tmp_path, rope, message):
    """The whole message: the key as config.json spells it (in whichever object it is), the value, the rule.
    Nothing is built: only config.json is read."""
    (tmp_path / "config.json").write_text(json.dumps({**BASE, **rope}))
    with pytest.raises(ValueError) as exc:
        model_config(tmp_path)
    assert str(exc.value) == message


@pytest.mark.parametrize("kwargs, message", [
    (dict(rope_type="su"), "rope_type='su' must be one of 'default', 'linear', 'dynamic', 'llama3', 'yarn', "
                           "'longrope'"),
    (dict(rope_type="longrope"), "rope_short_factor=None: rope_type='longrope' needs rope_short_factor and "
                                 "rope_long_factor"),
    (dict(rope_type="longrope", rope_short_factor=(1.0,) * 8, rope_long_factor=(1.0,) * 9),
     "rope_long_factor has 9 numbers: it must have one for each of the d_rot / 2 = 8 pairs"),
    (dict(rope_short_factor=[1.0, float("inf")]), "rope_short_factor=[1.0, inf] must be a list of finite numbers "
                                                  "above 0, or None"),
    (dict(rope_type="linear", rope_factor=0), "rope_factor=0 must be above 0"),
    (dict(rope_factor=-1.0), "rope_factor=-1.0 must be above 0"),
    (dict(rope_factor=NAN), "rope_factor=nan must be a finite number"),
    (dict(rope_factor=True), "rope_factor=True must be a finite number"),
    (dict(rope_beta_slow="1"), "rope_beta_slow='1' must be a finite number"),
    (dict(rope_original_max_pos=0), "rope_original_max_pos=0 must be a whole number from 1 to 2^32, or None"),
    (dict(rope_original_max_pos=2.0), "rope_original_max_pos=2.0 must be a whole number"),
    (dict(rope_attention_factor=0.0), "rope_attention_factor=0.0 must be above 0"),
    (dict(rope_truncate=1), "rope_truncate=1 must be True or False"),
    (dict(rope_type="llama3", rope_low_freq_factor=4.0), "rope_high_freq_factor=4.0 must be above "
                                                          "rope_low_freq_factor=4: llama3 blends"),
    (dict(rope_type="yarn", rope_beta_fast=1.0, rope_beta_slow=2.0), "rope_beta_fast=1.0 must be at least "
                                                                     "rope_beta_slow=2"),
    (dict(rope_type="dynamic", n_embd=4), "rope_type='dynamic' needs at least 4 rotated dimensions, not d_rot=2"),
])
def test_model_config_refuses_a_wrong_scaling_naming_the_field(kwargs, message):
    with pytest.raises(ValueError) as exc:
        ModelConfig(**{"vocab_size": 16, "n_head": 2, "n_embd": 32, "pos_encoding": "rope", **kwargs})
    assert message in str(exc.value)


def test_a_factor_whose_frequencies_overflow_is_refused_when_the_model_is_built():
    """Every number in range, yet ω_i / factor past float32's range: a ValueError, never a model of NaN."""
    cfg = ModelConfig(vocab_size=16, n_head=2, n_embd=32, pos_encoding="rope", rope_type="linear", rope_factor=1e-300)
    with pytest.raises(ValueError, match=r"rope_factor=1e-300 makes rotary angles too large for float32"):
        build_model(cfg)


# --------------------------------------------------------------------------- the config: defaults, JSON, checkpoints
def test_the_derived_fields_json_and_a_checkpoint_keep_the_scaling(tmp_path):
    """rope_original_max_pos defaults to block_size and the attention factor to the type's own (yarn's
    0.1 · ln(factor) + 1), worked out again by ``replace`` unless given; a scaled config survives JSON (hashable
    again after it) and a gptviz checkpoint, whose model gives the same logits."""
    cfg = ModelConfig(vocab_size=16, block_size=24, n_layer=1, n_head=2, n_embd=32, pos_encoding="rope",
                      rope_type="yarn", rope_factor=4.0, rope_beta_fast=16.0, rope_truncate=False)
    assert (cfg.rope_original_max_pos, cfg.rope_attention_factor) == (24, 0.1 * math.log(4.0) + 1.0)
    assert cfg.replace(rope_factor=8.0).rope_attention_factor == pytest.approx(0.1 * math.log(8.0) + 1.0)
    assert cfg.replace(rope_type="linear").rope_attention_factor == 1.0
    assert cfg.replace(block_size=30).rope_original_max_pos == 30
    assert cfg.replace(block_size=30, rope_original_max_pos=12).rope_original_max_pos == 12
    again = ModelConfig.from_dict(json.loads(json.dumps(cfg.to_dict())))
    assert again == cfg and hash(again) == hash(cfg)
    model = build_model(cfg.replace(rope_original_max_pos=8, rope_attention_factor=1.5))
    save_checkpoint(tmp_path / "m.safetensors", model)
    loaded = load_checkpoint(tmp_path / "m.safetensors").model
    assert loaded.config == model.config
    idx = torch.randint(0, 16, (1, 24), generator=torch.Generator().manual_seed(0))
    assert torch.equal(trace(loaded, idx)["hook_logits"], trace(model, idx)["hook_logits"])
    assert torch.allclose(loaded.rope_cos[5], 1.5 * torch.cos(5 * inverse_frequencies(loaded.config)).float())


# --------------------------------------------------------------------------- the Embeddings page's figure
def test_the_frequency_chart_draws_plain_and_scaled_on_a_log_axis():
    cfg = ModelConfig(vocab_size=16, n_head=2, n_embd=32, pos_encoding="rope", rope_type="llama3", rope_factor=8.0,
                      rope_original_max_pos=16, rope_base=500.0)
    plain, scaled = plain_frequencies(cfg.d_rot, cfg.rope_base), inverse_frequencies(cfg)
    fig = figures.frequency_chart(plain.tolist(), scaled.tolist(), "llama3, factor 8", "Rotary frequencies")
    assert [t.name for t in fig.data] == ["plain", "llama3, factor 8"]
    assert list(fig.data[0].y) == plain.tolist() and list(fig.data[1].y) == scaled.tolist()
    assert list(fig.data[0].x) == list(range(8))
    assert fig.layout.yaxis.type == "log"
    assert fig.layout.xaxis.title.text == "dimension pair i" and "frequency" in fig.layout.yaxis.title.text
    assert "Rotary frequencies" in figures.in_words(fig.to_dict())


@pytest.mark.parametrize("rope, T", [
    ({"rope_type": "dynamic", "factor": 2.0}, 4096),  # no max_position_embeddings: transformers' 2048
    ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 256, "truncate": False}, 256),  # betas
    ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16, "mscale_all_dim": 1.0}, 64),
    ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16, "mscale": 2.0}, 64),
])
def test_keys_a_config_leaves_out_take_transformers_defaults(tmp_path, rope, T):
    """A config.json that leaves out max_position_embeddings, yarn's betas or one of its two mscales reads as
    transformers reads it: the same frequencies (``ROPE_INIT_FUNCTIONS``) and the same attention factor."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    d = {k: v for k, v in BASE.items() if k != "max_position_embeddings"}
    d["rope_parameters"] = {"rope_theta": 500.0, **rope}
    cfg = opened(tmp_path, d)
    theirs, att = ROPE_INIT_FUNCTIONS[cfg.rope_type](hf_config(d), "cpu", seq_len=T)
    assert torch.allclose(inverse_frequencies(cfg, seq_len=T), theirs.double(), rtol=1e-6, atol=0)
    assert cfg.rope_attention_factor == pytest.approx(att, rel=1e-12)


@pytest.mark.parametrize("kind, rope", [
    ("dynamic", {"rope_type": "dynamic", "factor": 2.0}),
    ("yarn", {"rope_type": "yarn", "factor": 4.0}),
])
def test_a_context_past_2_to_the_32_is_read_and_capped_where_gptviz_keeps_it(tmp_path, kind, rope):
    """max_position_embeddings has no cap of its own in config.json (a model built for it is capped elsewhere), and the
    context a scaling measures against is kept at 2^32 at most (ModelConfig's own bound), as a longer one is longer
    than any text gptviz reads."""
    from gptviz.model.hf_rope import read_rope

    d = {**BASE, "max_position_embeddings": 2**33, "rope_parameters": {"rope_theta": 500.0, **rope}}
    fields = read_rope(d)
    assert fields["rope_type"] == kind and fields["rope_original_max_pos"] == 2**32


@pytest.mark.parametrize("rope", [
    {"rope_type": "linear", "factor": 4.0, "beta_fast": -1, "original_max_position_embeddings": 0},
    {"rope_type": "dynamic", "factor": 2.0, "beta_fast": -1, "mscale": "x"},
])
def test_keys_of_other_scalings_are_left_unread_as_transformers_leaves_them(tmp_path, rope):
    """A linear or dynamic scaling object holding yarn's keys (here out of range) opens as without them: transformers
    only warns about keys a scaling does not use, and so reads the same frequencies."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    d = {**BASE, "rope_parameters": {"rope_theta": 500.0, **rope}}
    plain = {**BASE, "rope_parameters": {"rope_theta": 500.0, "rope_type": rope["rope_type"],
                                         "factor": rope["factor"]}}
    cfg, clean = opened(tmp_path, d), opened(tmp_path, plain)
    assert cfg == clean
    theirs, _ = ROPE_INIT_FUNCTIONS[rope["rope_type"]](hf_config(plain), "cpu", seq_len=32)
    assert torch.allclose(inverse_frequencies(cfg, seq_len=32), theirs.double(), rtol=1e-6, atol=0)
