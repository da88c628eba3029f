"""Gemma 2, Gemma 3 (its text model) and OLMo 2: how their ``config.json`` maps onto a ``ModelConfig``, the tensors
they need with their shapes, and their renaming into gptviz's names; registered in ``hf_families.FAMILIES``.

- ``gemma2`` (``Gemma2ForCausalLM``): Gemma 1's ``1 + w`` RMSNorms and √hidden_size embedding, with a norm before
  AND after each sublayer (``sublayer_norms="both"``: ``ln1``, ``ln1_post``, ``ln2``, ``ln2_post``), scores divided
  by √query_pre_attn_scalar (``attn_scale_dim``), attention scores and logits soft-capped (``attn_softcap``,
  ``final_softcap``), and a sliding window on every other layer (``layer_types``, else layers 0, 2, 4 …).
- ``gemma3_text`` (``Gemma3ForCausalLM``): as Gemma 2 (no caps by default; its attention never caps, whatever
  ``attn_logit_softcapping`` says, as in transformers) with QK-norm on each head (Gemma's
  ``1 + w`` gains, folded in at load), five sliding layers in six (``sliding_window_pattern``) and their own rotary
  base (``rope_local_base``: ``rope_parameters.sliding_attention.rope_theta`` or the older ``rope_local_base_freq``),
  while the full-attention layers keep ``rope_theta`` and any scaling (``rope_parameters.full_attention`` or the older
  top-level ``rope_theta`` and ``rope_scaling``). A ``gemma3`` folder (the image-and-text model) is refused.
- ``olmo2`` (``Olmo2ForCausalLM``): Llama's blocks with the norms after the sublayers only (``sublayer_norms="after"``:
  ``x + ln1_post(attn(x))``), QK-norm over the whole query and key projections (``qk_norm_full``), plain RMSNorm.
"""
from __future__ import annotations

from typing import Any, Optional

import torch

from ..config import ModelConfig
from .hf_config_fields import _bad, _flag, _float, _int, _object, _show, _text
from .hf_family_base import MAX_CONTEXT, Family, _activation, _build, _context
from .hf_rope import NAMES as _ROPE_NAMES
from .hf_rope import reach, read_rope

NAMES = {"block_size": "max_position_embeddings", "n_layer": "num_hidden_layers", "n_head": "num_attention_heads",
         "n_kv_head": "num_key_value_heads", "n_embd": "hidden_size", "d_mlp": "intermediate_size",
         "d_head": "head_dim", "rope_base": "rope_theta", "ln_eps": "rms_norm_eps", "init_std": "initializer_range",
         "sliding_layers": "layer_types", "attn_scale_dim": "query_pre_attn_scalar",
         "attn_softcap": "attn_logit_softcapping", "final_softcap": "final_logit_softcapping", **_ROPE_NAMES}
GEMMA3_NAMES = {**NAMES, "rope_base": "rope_parameters.full_attention.rope_theta (or rope_theta)",
                "rope_local_base": "rope_parameters.sliding_attention.rope_theta (or rope_local_base_freq)",
                "sliding_layers": "layer_types (or sliding_window_pattern)"}
OLMO2_NAMES = {**NAMES, "d_head": "hidden_size / num_attention_heads"}
_TYPES = {"full_attention": False, "sliding_attention": True}
# model types gptviz knows and does not open, with what to do instead (gptviz.model.pretrained says it)
REFUSED = {"gemma3": "config.json's model_type='gemma3' is Gemma 3's image-and-text model "
                     "(Gemma3ForConditionalGeneration), which gptviz does not open: it opens Gemma 3's text model, "
                     "a folder whose config.json says model_type 'gemma3_text' (Gemma3ForCausalLM, as the 270m and 1b "
                     "models are saved)"}


def _cap(d: dict, key: str, default: Optional[float]) -> Optional[float]:
    """A soft-capping value: above 0, or None (null) for no cap; ``default`` where config.json has no such key."""
    return _float(d, key, default=None, above=0.0) if key in d else default


def _sliding(d: dict, n_layer: int, pattern: int) -> dict:
    """The sliding window and its layers, as transformers 5's Gemma2Config and Gemma3TextConfig have them:
    ``sliding_window`` (4096 where config.json names none), on the layers ``layer_types`` calls
    "sliding_attention", by default every layer but each ``pattern``-th (layer i slides unless (i + 1) % pattern
    is 0: Gemma 2's 2, Gemma 3's ``sliding_window_pattern``, 6 by default)."""
    types = d.get("layer_types")
    if types is None:
        layers = tuple(i for i in range(n_layer) if (i + 1) % pattern)
    else:
        if not isinstance(types, list) or len(types) != n_layer or not all(isinstance(t, str) and t in _TYPES
                                                                           for t in types):
            raise _bad("layer_types", types, f"must be a list of {n_layer} (num_hidden_layers) layer types, each "
                                             "'full_attention' or 'sliding_attention'")
        layers = tuple(i for i, t in enumerate(types) if _TYPES[t])
    window = _int(d, "sliding_window", default=None if "sliding_window" in d else 4096, high=None)
    if not layers:
        return {}
    if window is None:
        raise ValueError("config.json has sliding_attention layers but sliding_window=null: give the window's width "
                         "(sliding_window), or make every layer full_attention (layer_types)")
    return {"sliding_window": window, "sliding_layers": None if len(layers) == n_layer else layers}


def _gemma3_rope(d: dict) -> dict[str, Any]:
    """Gemma 3's two rotary settings: the full-attention layers' (read as any family's, from
    ``rope_parameters.full_attention`` with the older top-level ``rope_theta`` and ``rope_scaling`` over it; base 1e6
    by default) and the sliding layers' plain base (``rope_parameters.sliding_attention.rope_theta``, else
    ``rope_local_base_freq``, else 1e4), as Gemma3TextConfig.convert_rope_params_to_dict reads them."""
    params = _object(d, "rope_parameters")
    full = _object(params, "full_attention") if "full_attention" in params else {}
    local = _object(params, "sliding_attention") if "sliding_attention" in params else {}
    full = {**full, **_object(d, "rope_scaling")}  # an older config's scaling is the full-attention layers'
    if full.get("rope_theta") is None:
        full["rope_theta"] = _float(d, "rope_theta", default=1_000_000.0, above=1.0)
    within = "rope_parameters.sliding_attention."
    kind = _text(local, "rope_type", default="default", within=within)
    if kind != "default":
        raise ValueError(f"config.json's {within}rope_type={_show(kind)}: gptviz turns Gemma 3's sliding layers "
                         "with plain rotary positions only (rope_type 'default'), as every Gemma 3 is saved")
    base = _float(local, "rope_theta", default=None, above=1.0, within=within)
    if base is None:
        base = _float(d, "rope_local_base_freq", default=10_000.0, above=1.0)
    try:
        rope = read_rope({k: v for k, v in d.items() if k not in ("rope_scaling", "rope_theta")}
                         | {"rope_parameters": full})
    except ValueError as exc:  # said in the keys config.json has: the full-attention object, or the older scaling
        where = "rope_scaling." if d.get("rope_scaling") else "rope_parameters.full_attention."
        raise ValueError(str(exc).replace("rope_parameters.", where)) from None
    return rope | {"rope_local_base": base}


def _gemma2_config(d: dict, gemma3: bool = False) -> ModelConfig:
    """Gemma 2 (and, ``gemma3``, Gemma 3's text model): every default as transformers 5's Gemma2Config and
    Gemma3TextConfig have it. ``hidden_activation`` names the MLP's activation (transformers 5 reads no other key);
    head_dim is read, never worked out. Gemma 3's ``attn_logit_softcapping`` is ignored, as transformers 5's
    Gemma3Attention ignores it (it keeps the value and never passes it to the attention: no score is capped)."""
    if _flag(d, "use_bidirectional_attention", False):
        raise ValueError("use_bidirectional_attention=true is not supported: gptviz computes causal attention")
    if not _flag(d, "tie_word_embeddings", True):
        raise ValueError("tie_word_embeddings=false is not supported for Gemma 2 and 3: gptviz opens Gemma with its "
                         "unembedding tied to its embedding table, as every released Gemma 2 and 3 is")
    C, nh = _int(d, "hidden_size"), _int(d, "num_attention_heads")
    nkv = _int(d, "num_key_value_heads", default=nh)
    if nh % nkv:
        raise ValueError(f"config.json's num_attention_heads={nh} must be divisible by num_key_value_heads={nkv}: "
                         "each key/value head serves the same number of query heads")
    rope = _gemma3_rope(d) if gemma3 else read_rope(d)
    n_layer = _int(d, "num_hidden_layers")
    pattern = _int(d, "sliding_window_pattern", default=6) if gemma3 else 2
    bias = _flag(d, "attention_bias", False)
    window = _sliding(d, n_layer, pattern)
    if gemma3 and not window:  # no sliding layer: nothing to give the local base to
        rope.pop("rope_local_base")
    return _build(
        GEMMA3_NAMES if gemma3 else NAMES, vocab_size=_int(d, "vocab_size"),
        block_size=reach(_context(d, "max_position_embeddings"), rope, MAX_CONTEXT), **window, n_layer=n_layer,
        n_head=nh, n_kv_head=nkv, n_embd=C, d_head=_int(d, "head_dim"), d_mlp=_int(d, "intermediate_size"),
        norm="rmsnorm", pos_encoding="rope", **rope,
        activation=_activation(d, "hidden_activation", default="gelu_pytorch_tanh"), gated_mlp=True, bias=False,
        qkv_bias=bias, attn_proj_bias=bias, tie_weights=False,  # held untied, as Gemma 1: see _gemma2_convert
        ln_eps=_float(d, "rms_norm_eps", default=1e-6, above=0.0),
        init_std=_float(d, "initializer_range", default=0.02, above=0.0), qk_norm=gemma3, sublayer_norms="both",
        attn_scale_dim=_float(d, "query_pre_attn_scalar", default=256.0, above=0.0),
        attn_softcap=None if gemma3 else _cap(d, "attn_logit_softcapping", 50.0),  # Gemma 3: read, never applied
        final_softcap=_cap(d, "final_logit_softcapping", None if gemma3 else 30.0))


def _olmo2_config(d: dict) -> ModelConfig:
    """OLMo 2, every default as transformers 5's Olmo2Config has it (rms_norm_eps 1e-5, an untied head, silu)."""
    rope = read_rope(d)
    C, nh = _int(d, "hidden_size"), _int(d, "num_attention_heads")
    nkv = _int(d, "num_key_value_heads", default=nh)
    if nh % nkv:
        raise ValueError(f"config.json's num_attention_heads={nh} must be divisible by num_key_value_heads={nkv}: "
                         "each key/value head serves the same number of query heads")
    if C % nh:
        raise ValueError(f"config.json's hidden_size={C} must be divisible by num_attention_heads={nh}: OLMo 2's "
                         "heads are hidden_size / num_attention_heads wide")
    bias = _flag(d, "attention_bias", False)
    return _build(
        OLMO2_NAMES, vocab_size=_int(d, "vocab_size"),
        block_size=reach(_context(d, "max_position_embeddings"), rope, MAX_CONTEXT), n_layer=_int(
            d, "num_hidden_layers"), n_head=nh, n_kv_head=nkv, n_embd=C, d_mlp=_int(d, "intermediate_size"),
        norm="rmsnorm", pos_encoding="rope", **rope, activation=_activation(d, default="silu"), gated_mlp=True,
        bias=False, qkv_bias=bias, attn_proj_bias=bias, tie_weights=_flag(d, "tie_word_embeddings", False),
        ln_eps=_float(d, "rms_norm_eps", default=1e-5, above=0.0),
        init_std=_float(d, "initializer_range", default=0.02, above=0.0), qk_norm=True, qk_norm_full=True,
        sublayer_norms="after")


# --------------------------------------------------------------------------- tensors
_NORMS = {"both": (("input_layernorm", "ln_1"), ("post_attention_layernorm", "ln_1_post"),
                   ("pre_feedforward_layernorm", "ln_2"), ("post_feedforward_layernorm", "ln_2_post")),
          "after": (("post_attention_layernorm", "ln_1_post"), ("post_feedforward_layernorm", "ln_2_post"))}


def _shapes(c: ModelConfig, head: bool) -> dict[str, tuple]:
    """The tensors of a Gemma 2, Gemma 3 or OLMo 2 config (``head``: an ``lm_head.weight`` of its own)."""
    C, V, hs = c.n_embd, c.vocab_size, c.d_head
    s = {"model.embed_tokens.weight": (V, C), "model.norm.weight": (C,)}
    for i in range(c.n_layer):
        p = f"model.layers.{i}."
        a = p + "self_attn."
        s.update({p + n + ".weight": (C,) for n, _ in _NORMS[c.sublayer_norms]})
        s.update({a + "q_proj.weight": (c.d_attn, C), a + "k_proj.weight": (c.d_kv, C),
                  a + "v_proj.weight": (c.d_kv, C), a + "o_proj.weight": (C, c.d_attn),
                  p + "mlp.gate_proj.weight": (c.d_mlp, C), p + "mlp.up_proj.weight": (c.d_mlp, C),
                  p + "mlp.down_proj.weight": (C, c.d_mlp)})
        if c.qkv_bias:
            s.update({a + "q_proj.bias": (c.d_attn,), a + "k_proj.bias": (c.d_kv,), a + "v_proj.bias": (c.d_kv,),
                      a + "o_proj.bias": (C,)})
        if c.qk_norm:  # Gemma 3: a gain of head_dim for every head; OLMo 2: one over each whole projection
            s.update({a + "q_norm.weight": (c.d_attn if c.qk_norm_full else hs,),
                      a + "k_norm.weight": (c.d_kv if c.qk_norm_full else hs,)})
    if head:
        s["lm_head.weight"] = (V, C)
    return s


def _convert(get, c: ModelConfig) -> dict:
    """HF names -> gptviz's: q, k and v stacked into ``c_attn``, the norms by their place (``ln_1``, ``ln_1_post`` …),
    the gate, up and down projections into ``c_gate``, ``c_fc`` and ``c_proj``."""
    out = {"transformer.wte.weight": get("model.embed_tokens.weight"),
           "transformer.ln_f.weight": get("model.norm.weight")}
    for i in range(c.n_layer):
        p, q = f"model.layers.{i}.", f"transformer.h.{i}."
        a = p + "self_attn."
        for src, dst in _NORMS[c.sublayer_norms]:
            out[q + dst + ".weight"] = get(p + src + ".weight")
        out[q + "attn.c_attn.weight"] = torch.cat([get(a + f"{w}_proj.weight") for w in "qkv"])
        out[q + "attn.c_proj.weight"] = get(a + "o_proj.weight")
        if c.qkv_bias:
            out[q + "attn.c_attn.bias"] = torch.cat([get(a + f"{w}_proj.bias") for w in "qkv"])
            out[q + "attn.c_proj.bias"] = get(a + "o_proj.bias")
        if c.qk_norm:
            out[q + "attn.q_norm.weight"], out[q + "attn.k_norm.weight"] = get(a + "q_norm.weight"), get(
                a + "k_norm.weight")
        for src, dst in (("gate_proj", "c_gate"), ("up_proj", "c_fc"), ("down_proj", "c_proj")):
            out[q + f"mlp.{dst}.weight"] = get(p + f"mlp.{src}.weight")
    out["lm_head.weight"] = out["transformer.wte.weight"] if c.tie_weights else get("lm_head.weight")
    return out


def _gemma2_convert(get, c: ModelConfig) -> dict:
    """Gemma 2 and 3's converter, as Gemma 1's (``hf_families._gemma_convert``): every RMSNorm gain (QK-norm's too)
    stored as ``w`` and applied as ``1 + w`` (worked in float32, as transformers does) becomes the gain ``1 + w``;
    ``wte`` is the stored table × √hidden_size (a float32 scalar, as transformers makes it), what the residual stream
    receives, and ``lm_head`` the table itself: hence ``tie_weights=False``."""
    table = get("model.embed_tokens.weight")

    def read(name: str) -> torch.Tensor:
        if name == "model.embed_tokens.weight":
            return table
        t = get(name)
        return 1.0 + t if name.endswith("norm.weight") else t

    out = _convert(read, c.replace(tie_weights=True))  # tied here only so it reads no lm_head.weight
    out["transformer.wte.weight"] = table * torch.tensor(c.n_embd ** 0.5, dtype=table.dtype)
    out["lm_head.weight"] = table
    return out


def _gemma_note(c: ModelConfig) -> str:
    return (f"Gemma multiplies each token's embedding by √{c.n_embd} before the first block and unembeds with its "
            f"table unscaled: here W_E is that table times √{c.n_embd} and W_U the table itself, so they are shown "
            "untied.")


FAMILIES: dict[str, Family] = {
    "gemma2": Family(_gemma2_config, lambda c: _shapes(c, head=False), _gemma2_convert, _gemma_note,
                     names=NAMES),
    "gemma3_text": Family(lambda d: _gemma2_config(d, gemma3=True), lambda c: _shapes(c, head=False),
                          _gemma2_convert, _gemma_note, names=GEMMA3_NAMES),
    "olmo2": Family(_olmo2_config, lambda c: _shapes(c, head=not c.tie_weights), _convert, names=OLMO2_NAMES),
}
