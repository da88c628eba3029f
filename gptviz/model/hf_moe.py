"""The mixture-of-experts families: Mixtral, Qwen2-MoE and GPT-OSS, each Llama's blocks (``hf_families``) with a
router and experts in place of the MLP (``gptviz.model.experts``).

- ``mixtral``: every layer routes each token to ``num_experts_per_tok`` of ``num_local_experts`` SwiGLU experts
  (``intermediate_size`` wide), their probabilities renormalised to sum to 1; Mistral's sliding window.
- ``qwen2_moe``: Qwen2's attention (q, k, v biases); the layers ``decoder_sparse_step`` and ``mlp_only_layers``
  pick route to ``num_experts`` experts (``moe_intermediate_size`` wide; probabilities renormalised only with
  ``norm_topk_prob``) plus a shared expert (``shared_expert_intermediate_size``) scaled by a sigmoid gate; the
  others have a dense MLP (``intermediate_size``).
- ``olmoe``: OLMo's pre-norm blocks with QK-norm over the whole query and key projections (as OLMo 2), and a mixture
  in every layer (``num_experts`` of ``intermediate_size``, probabilities renormalised only with ``norm_topk_prob``).
- ``gpt_oss``: biases on q, k, v and o, a learned attention sink per head, sliding windows on the layers
  ``layer_types`` names, YaRN rotary positions, a router with a bias choosing by logit (the softmax of the chosen
  logits, equal to renormalised probabilities), and experts with biases and GPT-OSS's clamped gated unit, their
  gate and up projections interleaved in one tensor. Released GPT-OSS weights are MXFP4-quantised; a folder must
  hold them dequantised (float tensors), as transformers saves a model it has loaded.

Hugging Face names per expert (``experts.{e}.w1``, ``gate_proj`` …) are stacked into gptviz's (E, out, in) tensors.
"""
from __future__ import annotations

from typing import Callable, Optional

import torch

from ..config import ModelConfig
from ..config_moe import GLU_OSS
from .hf_config_fields import _bad, _flag, _float, _int
from .hf_families import (
    _LLAMA_NAMES,
    _QWEN3_NAMES,
    Family,
    _llama_config,
    _llama_convert,
    _llama_shapes,
    _mistral_window,
    _qwen2_window,
    in_config_terms,
)

_MOE_NAMES = {"n_expert": "num_local_experts (or num_experts)", "n_expert_active": "num_experts_per_tok",
              "d_expert": "intermediate_size (or moe_intermediate_size)",
              "d_shared_expert": "shared_expert_intermediate_size",
              "moe_layers": "decoder_sparse_step, mlp_only_layers"}
_MIXTRAL_NAMES = {**_LLAMA_NAMES, **_MOE_NAMES}
_QWEN2_MOE_NAMES = {**_LLAMA_NAMES, **_MOE_NAMES}
_OLMOE_NAMES = {**_LLAMA_NAMES, **_MOE_NAMES, "qk_norm_full": "q_norm, k_norm (always on)"}
_GPT_OSS_NAMES = {**_QWEN3_NAMES, **_MOE_NAMES, "sliding_layers": "layer_types"}


def _with_experts(base: ModelConfig, names: dict[str, str], **fields) -> ModelConfig:
    try:
        return base.replace(**fields)
    except ValueError as exc:
        raise ValueError(in_config_terms(str(exc), names)) from None


def _mixtral_config(d: dict) -> ModelConfig:
    base = _llama_config(d, names=_MIXTRAL_NAMES, window=_mistral_window)
    E = _int(d, "num_local_experts", default=8)
    return _with_experts(base, _MIXTRAL_NAMES, n_expert=E, n_expert_active=_int(d, "num_experts_per_tok", default=2),
                         d_expert=base.d_mlp, expert_renorm=True, router_aux_coef=0.0)


def _qwen2_moe_layers(d: dict, n_layer: int) -> tuple[int, ...]:
    """The layers whose MLP is a mixture, as ``Qwen2MoeDecoderLayer`` picks them: not in ``mlp_only_layers``, and
    (layer + 1) divisible by ``decoder_sparse_step``."""
    step = _int(d, "decoder_sparse_step", default=1, high=None)
    dense = d.get("mlp_only_layers") or []
    if not isinstance(dense, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in dense):
        raise _bad("mlp_only_layers", dense, "must be a list of layer indices")
    return tuple(i for i in range(n_layer) if i not in dense and (i + 1) % step == 0)


def _qwen2_moe_config(d: dict) -> ModelConfig:
    base = _llama_config(d, qwen=True, names=_QWEN2_MOE_NAMES, window=_qwen2_window)
    E = _int(d, "num_experts", default=60)
    layers = _qwen2_moe_layers(d, base.n_layer)
    if not layers:
        raise ValueError("config.json's decoder_sparse_step and mlp_only_layers leave no layer with experts: it is a "
                         "dense Qwen2 model; give it model_type 'qwen2'")
    return _with_experts(base, _QWEN2_MOE_NAMES, n_expert=E, n_expert_active=_int(d, "num_experts_per_tok", default=4),
                         d_expert=_int(d, "moe_intermediate_size", default=1408),
                         d_shared_expert=_int(d, "shared_expert_intermediate_size", default=5632),
                         moe_layers=None if len(layers) == base.n_layer else layers,
                         expert_renorm=_flag(d, "norm_topk_prob", False), router_aux_coef=0.0)


def _olmoe_config(d: dict) -> ModelConfig:
    if d.get("clip_qkv") is not None:
        raise ValueError(f"config.json's clip_qkv={d['clip_qkv']!r} is not supported: gptviz does not clamp queries, "
                         "keys and values (OLMoE-1B-7B has clip_qkv null)")
    base = _llama_config(d, names=_OLMOE_NAMES, qk_norm=True)
    return _with_experts(base, _OLMOE_NAMES, qk_norm_full=True, n_expert=_int(d, "num_experts", default=64),
                         n_expert_active=_int(d, "num_experts_per_tok", default=8), d_expert=base.d_mlp,
                         expert_renorm=_flag(d, "norm_topk_prob", False), router_aux_coef=0.0)


def _gpt_oss_window(d: dict, n_layer: int) -> dict:
    """GPT-OSS's sliding window (``sliding_window``, 128 by default) on the layers ``layer_types`` calls
    "sliding_attention" (by default the even ones, as ``GptOssConfig`` makes them)."""
    window = _int(d, "sliding_window", default=128, high=None)
    types = d.get("layer_types")
    if types is None:
        types = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(n_layer)]
    if not isinstance(types, list) or len(types) != n_layer or \
            not all(t in ("sliding_attention", "full_attention") for t in types):
        raise _bad("layer_types", types, f"must be a list of {n_layer} (num_hidden_layers) layer types, each "
                                         "'full_attention' or 'sliding_attention'")
    layers = tuple(i for i, t in enumerate(types) if t == "sliding_attention")
    if not layers:
        return {}
    return {"sliding_window": window, "sliding_layers": None if len(layers) == n_layer else layers}


def _gpt_oss_config(d: dict) -> ModelConfig:
    if d.get("quantization_config") is not None:
        raise ValueError("config.json has a quantization_config (GPT-OSS is released in MXFP4): gptviz reads float "
                         "weights only; load the model in transformers (which dequantises it) and save_pretrained it")
    d = {**d, "head_dim": _int(d, "head_dim"), "attention_bias": _flag(d, "attention_bias", True)}
    base = _llama_config(d, names=_GPT_OSS_NAMES, window=_gpt_oss_window)
    return _with_experts(base, _GPT_OSS_NAMES, n_expert=_int(d, "num_local_experts", default=128),
                         n_expert_active=_int(d, "num_experts_per_tok", default=4), d_expert=base.d_mlp,
                         expert_renorm=True, router_bias=True, expert_bias=True, activation=GLU_OSS,
                         swiglu_limit=_float(d, "swiglu_limit", default=7.0, above=0.0),
                         swiglu_alpha=_float(d, "swiglu_alpha", default=1.702, above=0.0), attn_sinks=True,
                         router_aux_coef=0.0)


# --------------------------------------------------------------------------- tensors
def _dense_only(c: ModelConfig) -> ModelConfig:
    """``c`` without experts: the tensors Llama's reader knows (attention, norms, a dense MLP in every layer)."""
    return c.replace(n_expert=0, d_shared_expert=0, moe_layers=None, activation="silu", attn_sinks=False)


def _moe_shapes(per_expert: Optional[Callable[[str, int], dict]], mlp: str, router: str,
                extra: Callable[[ModelConfig, str], dict]) -> Callable[[ModelConfig], dict]:
    def shapes(c: ModelConfig) -> dict[str, tuple]:
        s = _llama_shapes(_dense_only(c))
        for i in range(c.n_layer):
            p = f"model.layers.{i}."
            if c.is_moe_layer(i):
                for k in [k for k in s if k.startswith(p + "mlp.")]:
                    del s[k]
                s[p + mlp + router + ".weight"] = (c.n_expert, c.n_embd)
                for e in range(c.n_expert):
                    s.update(per_expert(p + mlp + f"experts.{e}.", e) if per_expert is not None else {})
                s.update(extra(c, p))
        return s
    return shapes


def _swiglu_expert(w_gate: str, w_up: str, w_down: str, c_of: Callable[[], ModelConfig]):
    """The three tensor names and shapes of one SwiGLU expert."""
    def shapes(prefix: str, e: int) -> dict:
        c = c_of()
        return {prefix + w_gate + ".weight": (c.d_expert, c.n_embd), prefix + w_up + ".weight": (c.d_expert, c.n_embd),
                prefix + w_down + ".weight": (c.n_embd, c.d_expert)}
    return shapes


def _mixtral_shapes(c: ModelConfig) -> dict[str, tuple]:
    return _moe_shapes(_swiglu_expert("w1", "w3", "w2", lambda: c), "block_sparse_moe.", "gate",
                       lambda c, p: {})(c)


def _qwen2_moe_extra(c: ModelConfig, p: str) -> dict:
    C, d = c.n_embd, c.d_shared_expert
    q = p + "mlp.shared_expert."
    return {q + "gate_proj.weight": (d, C), q + "up_proj.weight": (d, C), q + "down_proj.weight": (C, d),
            p + "mlp.shared_expert_gate.weight": (1, C)}


def _qwen2_moe_shapes(c: ModelConfig) -> dict[str, tuple]:
    return _moe_shapes(_swiglu_expert("gate_proj", "up_proj", "down_proj", lambda: c), "mlp.", "gate",
                       _qwen2_moe_extra)(c)


def _olmoe_extra(c: ModelConfig, p: str) -> dict:
    """OLMoE's QK-norm gains: one over the whole query projection, one over the whole key projection."""
    return {p + "self_attn.q_norm.weight": (c.d_attn,), p + "self_attn.k_norm.weight": (c.d_kv,)}


def _olmoe_shapes(c: ModelConfig) -> dict[str, tuple]:
    return _moe_shapes(_swiglu_expert("gate_proj", "up_proj", "down_proj", lambda: c), "mlp.", "gate",
                       _olmoe_extra)(c)


def _gpt_oss_extra(c: ModelConfig, p: str) -> dict:
    E, C, d = c.n_expert, c.n_embd, c.d_expert
    q = p + "mlp."
    return {q + "router.bias": (E,), q + "experts.gate_up_proj": (E, C, 2 * d),
            q + "experts.gate_up_proj_bias": (E, 2 * d),
            q + "experts.down_proj": (E, d, C), q + "experts.down_proj_bias": (E, C),
            p + "self_attn.sinks": (c.n_head,)}


def _gpt_oss_shapes(c: ModelConfig) -> dict[str, tuple]:
    return _moe_shapes(None, "mlp.", "router", _gpt_oss_extra)(c)


def _stack(get, names: list[str]) -> torch.Tensor:
    return torch.stack([get(n) for n in names])


def _moe_convert(mlp: str, router: str, names: tuple[str, str, str]) -> Callable:
    """A converter: Llama's for attention and norms (and any dense MLP), then each mixture's router and its experts'
    (gate, up, down) tensors stacked into ``c_gate``, ``c_fc`` and ``c_proj``."""
    w_gate, w_up, w_down = names

    def convert(get, c: ModelConfig) -> dict:
        dense = _dense_only(c)
        out = _llama_convert(_skip_moe_mlp(get, c), dense)
        for i in range(c.n_layer):
            if not c.is_moe_layer(i):
                continue
            p, q = f"model.layers.{i}.{mlp}", f"transformer.h.{i}.mlp."
            for k in [k for k in out if k.startswith(q)]:
                del out[k]
            out[q + "router.weight"] = get(p + router + ".weight")
            experts = [p + f"experts.{e}." for e in range(c.n_expert)]
            out[q + "c_gate.weight"] = _stack(get, [x + w_gate + ".weight" for x in experts])
            out[q + "c_fc.weight"] = _stack(get, [x + w_up + ".weight" for x in experts])
            out[q + "c_proj.weight"] = _stack(get, [x + w_down + ".weight" for x in experts])
            if c.d_shared_expert:
                s = p + "shared_expert."
                out[q + "shared.c_gate.weight"] = get(s + "gate_proj.weight")
                out[q + "shared.c_fc.weight"] = get(s + "up_proj.weight")
                out[q + "shared.c_proj.weight"] = get(s + "down_proj.weight")
                out[q + "shared_gate.weight"] = get(p + "shared_expert_gate.weight")
        return out
    return convert


def _is_moe_name(name: str, c: ModelConfig) -> bool:
    parts = name.split(".")
    return len(parts) > 3 and parts[1] == "layers" and c.is_moe_layer(int(parts[2]))


def _skip_moe_mlp(get, c: ModelConfig):
    """``get`` for Llama's converter: a mixture layer's dense MLP tensors do not exist, so they read as empty."""
    def read(name: str):
        if ".mlp." in name and _is_moe_name(name, c):
            return torch.empty(0)
        return get(name)
    return read


def _gpt_oss_convert(get, c: ModelConfig) -> dict:
    """GPT-OSS: Llama's converter for attention and norms; the sinks; the router with its bias; the experts' fused
    gate/up tensor (E, C, 2d), gate and up interleaved (even columns the gate, odd the up), split and transposed
    into (E, d, C) each, and the down projection (E, d, C) transposed into (E, C, d)."""
    out = _llama_convert(_skip_moe_mlp(get, c), _dense_only(c))
    for i in range(c.n_layer):
        p, q = f"model.layers.{i}.", f"transformer.h.{i}."
        for k in [k for k in out if k.startswith(q + "mlp.")]:
            del out[k]
        out[q + "attn.sinks"] = get(p + "self_attn.sinks")
        out[q + "mlp.router.weight"] = get(p + "mlp.router.weight")
        out[q + "mlp.router.bias"] = get(p + "mlp.router.bias")
        gate_up, gate_up_bias = get(p + "mlp.experts.gate_up_proj"), get(p + "mlp.experts.gate_up_proj_bias")
        out[q + "mlp.c_gate.weight"] = gate_up[..., 0::2].transpose(1, 2).contiguous()
        out[q + "mlp.c_fc.weight"] = gate_up[..., 1::2].transpose(1, 2).contiguous()
        out[q + "mlp.c_gate.bias"] = gate_up_bias[..., 0::2].contiguous()
        out[q + "mlp.c_fc.bias"] = gate_up_bias[..., 1::2].contiguous()
        out[q + "mlp.c_proj.weight"] = get(p + "mlp.experts.down_proj").transpose(1, 2).contiguous()
        out[q + "mlp.c_proj.bias"] = get(p + "mlp.experts.down_proj_bias")
    return out


def _experts_note(c: ModelConfig) -> str:
    every = "every layer" if c.moe_layers is None else f"layers {', '.join(map(str, c.moe_layers))}"
    shared = f", plus a shared expert {c.d_shared_expert} wide" if c.d_shared_expert else ""
    return (f"A mixture of experts on {every}: {c.n_expert} experts {c.d_expert} wide, each token routed to "
            f"{c.n_expert_active}{shared}. Each layer's experts are stacked as one (experts, out, in) tensor.")


MOE_FAMILIES: dict[str, Family] = {
    "mixtral": Family(_mixtral_config, _mixtral_shapes, _moe_convert("block_sparse_moe.", "gate", ("w1", "w3", "w2")),
                      _experts_note, names=_MIXTRAL_NAMES),
    "qwen2_moe": Family(_qwen2_moe_config, _qwen2_moe_shapes,
                        _moe_convert("mlp.", "gate", ("gate_proj", "up_proj", "down_proj")), _experts_note,
                        names=_QWEN2_MOE_NAMES),
    "olmoe": Family(_olmoe_config, _olmoe_shapes, _moe_convert("mlp.", "gate", ("gate_proj", "up_proj", "down_proj")),
                    _experts_note, names=_OLMOE_NAMES),
    "gpt_oss": Family(_gpt_oss_config, _gpt_oss_shapes, _gpt_oss_convert, _experts_note, names=_GPT_OSS_NAMES),
}
