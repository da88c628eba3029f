"""Phi-3 (``model_type`` "phi3", transformers' ``Phi3ForCausalLM``; Phi-3, Phi-3.5 and Phi-4-mini ship as it) onto
gptviz, as ``gptviz.model.hf_families`` maps the other families: its config.json read into a ``ModelConfig``, the
tensors it needs with their shapes, and their renaming into gptviz's GPT-2 names.

Phi-3 is Llama's block (RMSNorm, rotary, grouped-query attention, SwiGLU, no biases) with two fused projections:
``qkv_proj`` (all the queries' rows, then the keys', then the values': gptviz's ``c_attn`` as it is) and
``gate_up_proj`` (the first half the gate, which goes through the activation, the second half the other
projection: ``Phi3MLP`` chunks it in two, ``up * act(gate)``). Its own choices, as transformers 5 reads them:

- ``partial_rotary_factor`` (Phi-4-mini's 0.75): the first fraction of each head is turned (gptviz's ``rotary_pct``);
- ``sliding_window``: a mask on every layer when config.json gives one (``Phi3Model`` builds one sliding-window
  causal mask for all layers), none where it says null (``Phi3Config``'s default); never a cap on the text length;
- rotary scaling: plain, or ``longrope`` (the 128k models), whose ``original_max_position_embeddings`` is always the
  top-level key (``Phi3Config``'s own field, 4096 where config.json names none), which wins over the scaling
  object's; the older names "su" and "yarn" are read as longrope (``Phi3Config.convert_rope_params_to_dict``), and
  any other type is refused, as ``Phi3Config.validate_rope`` refuses it;
- ``resid_pdrop``, ``embd_pdrop`` and ``attention_dropout`` are dropout, off at evaluation; ``attention_bias`` and
  ``mlp_bias`` are not read (Phi-3's projections have no biases whatever they say, as in transformers).
"""
from __future__ import annotations

from typing import Any

from ..config import ModelConfig
from .hf_config_fields import _activation, _build, _context, _flag, _float, _int, heads
from .hf_rope import NAMES as _ROPE_NAMES
from .hf_rope import read_rope

PHI3_NAMES = {"block_size": "max_position_embeddings", "n_layer": "num_hidden_layers",
              "n_head": "num_attention_heads", "n_kv_head": "num_key_value_heads", "n_embd": "hidden_size",
              "d_mlp": "intermediate_size", "d_head": "head_dim (or hidden_size / num_attention_heads)",
              "rope_base": "rope_theta", "rotary_pct": "partial_rotary_factor", "ln_eps": "rms_norm_eps",
              "init_std": "initializer_range", "rope_original_max_pos": "original_max_position_embeddings",
              **_ROPE_NAMES}
_DEFAULTS = {"max_position_embeddings": 4096, "original_max_position_embeddings": 4096}  # Phi3Config's


def phi3_config(d: dict) -> ModelConfig:
    """A Phi-3 config.json as a ModelConfig; the keys it leaves out take ``Phi3Config``'s defaults."""
    d = {**d, **{k: v for k, v in _DEFAULTS.items() if d.get(k) is None}}
    rope: dict[str, Any] = read_rope(d, types=("longrope",), aliases={"su": "longrope", "yarn": "longrope"})
    C, nh, nkv, d_head = heads(d)
    window = _int(d, "sliding_window", default=None, high=None)
    return _build(
        PHI3_NAMES, vocab_size=_int(d, "vocab_size"), block_size=_context(d, "max_position_embeddings"),
        sliding_window=window, n_layer=_int(d, "num_hidden_layers"), n_head=nh, n_kv_head=nkv, n_embd=C,
        d_head=d_head or C // nh, d_mlp=_int(d, "intermediate_size"), norm="rmsnorm", pos_encoding="rope", **rope,
        activation=_activation(d, default="silu"), gated_mlp=True, bias=False, qkv_bias=False,
        attn_proj_bias=False, tie_weights=_flag(d, "tie_word_embeddings", False),
        ln_eps=_float(d, "rms_norm_eps", default=1e-5, above=0.0),
        init_std=_float(d, "initializer_range", default=0.02, above=0.0))


def phi3_shapes(c: ModelConfig) -> dict[str, tuple]:
    C, V = c.n_embd, c.vocab_size
    s = {"model.embed_tokens.weight": (V, C), "model.norm.weight": (C,)}
    for i in range(c.n_layer):
        p = f"model.layers.{i}."
        s.update({p + "input_layernorm.weight": (C,), p + "post_attention_layernorm.weight": (C,),
                  p + "self_attn.qkv_proj.weight": (c.d_attn + 2 * c.d_kv, C),
                  p + "self_attn.o_proj.weight": (C, c.d_attn),
                  p + "mlp.gate_up_proj.weight": (2 * c.d_mlp, C), p + "mlp.down_proj.weight": (C, c.d_mlp)})
    if not c.tie_weights:
        s["lm_head.weight"] = (V, C)
    return s


def phi3_convert(get, c: ModelConfig) -> dict:
    """Phi-3 names -> gptviz's: ``qkv_proj`` is ``c_attn`` as it is (queries, keys, values: gptviz's order), and
    ``gate_up_proj`` is split in two, the first half (the gate, through the activation) ``c_gate``, the second
    ``c_fc``."""
    out = {"transformer.wte.weight": get("model.embed_tokens.weight"),
           "transformer.ln_f.weight": get("model.norm.weight")}
    for i in range(c.n_layer):
        p, q = f"model.layers.{i}.", f"transformer.h.{i}."
        out[q + "ln_1.weight"] = get(p + "input_layernorm.weight")
        out[q + "ln_2.weight"] = get(p + "post_attention_layernorm.weight")
        out[q + "attn.c_attn.weight"] = get(p + "self_attn.qkv_proj.weight")
        out[q + "attn.c_proj.weight"] = get(p + "self_attn.o_proj.weight")
        gate, up = get(p + "mlp.gate_up_proj.weight").chunk(2, dim=0)
        out[q + "mlp.c_gate.weight"], out[q + "mlp.c_fc.weight"] = gate, up
        out[q + "mlp.c_proj.weight"] = get(p + "mlp.down_proj.weight")
    out["lm_head.weight"] = out["transformer.wte.weight"] if c.tie_weights else get("lm_head.weight")
    return out


def phi3_note(c: ModelConfig) -> str:
    """What a reader must know of how gptviz holds a Phi-3 model."""
    note = ("Phi-3 stores q, k and v as one fused projection (qkv_proj), here c_attn as it is, and the MLP's gate "
            "and up projections as one (gate_up_proj), here split in two: c_gate (the first half, through the "
            "activation) and c_fc.")
    if c.rope_type == "longrope":
        note += (f" Its rotary positions are longrope: a text of up to {c.rope_original_max_pos} positions uses the "
                 "short factors, a longer one the long factors, for every position.")
    return note
