"""The mixture-of-experts fields of ``ModelConfig`` checked, and what they add to its sizes. Kept apart from
``gptviz.config`` so that file stays one readable dataclass; ``ModelConfig.__post_init__`` calls ``check_moe``.

A mixture of experts replaces a layer's MLP with ``n_expert`` MLPs (the experts, each ``d_expert`` wide) and a
router, a linear map from the stream to one logit per expert. Each token goes to the ``n_expert_active`` experts
with the highest router probabilities (softmax of the logits), and the layer's output is their outputs weighted by
those probabilities (renormalised to sum to 1 when ``expert_renorm``; Mixtral, GPT-OSS), plus, with
``d_shared_expert``, a shared expert every token goes through, scaled by a sigmoid gate (Qwen2-MoE).
"""
from __future__ import annotations

import math
from typing import Any

GLU_OSS = "gpt_oss_glu"  # GPT-OSS's clamped gated unit: (clamp(u, ±limit) + 1) · g·σ(α·g), g = min(gate, limit)


def check_moe(cfg: Any) -> None:
    """The expert fields' types, ranges and rules on ``cfg`` (a ModelConfig being constructed); None filled in
    (``d_expert``: d_mlp). A broken rule is a ValueError naming the field and what to change."""
    bad = lambda name, rule: ValueError(f"{name}={getattr(cfg, name)!r} {rule}")
    whole = lambda v: not isinstance(v, bool) and isinstance(v, int)
    for name in ("n_expert", "n_expert_active", "d_shared_expert"):
        if not whole(getattr(cfg, name)) or getattr(cfg, name) < 0:
            raise bad(name, "must be a whole number of at least 0")
    if cfg.d_expert is None:
        object.__setattr__(cfg, "d_expert", cfg.d_mlp)
    if not whole(cfg.d_expert) or cfg.d_expert < 1:
        raise bad("d_expert", "must be a whole number of at least 1, or None (as wide as d_mlp)")
    for name in ("expert_renorm", "router_bias", "expert_bias", "attn_sinks"):
        if not isinstance(getattr(cfg, name), bool):
            raise bad(name, "must be True or False")
    for name in ("router_aux_coef", "swiglu_limit", "swiglu_alpha"):
        v = getattr(cfg, name)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise bad(name, "must be a finite number of at least 0")
        object.__setattr__(cfg, name, float(v))
    if cfg.swiglu_limit <= 0:
        raise bad("swiglu_limit", "must be above 0")
    if cfg.activation == GLU_OSS and not (cfg.gated_mlp or cfg.n_expert):
        raise bad("activation", "is a gated unit: it needs gated_mlp=True or experts (n_expert > 0)")
    layers = cfg.moe_layers
    if cfg.n_expert == 0:
        for name in ("d_shared_expert", "moe_layers"):
            if getattr(cfg, name):
                raise bad(name, "needs experts: set n_expert (0 means a plain MLP in every layer)")
        return
    if cfg.attn_only or cfg.n_enc_layer >= 0:
        raise bad("n_expert", "needs a decoder-only model whose blocks have an MLP (attn_only=False, n_enc_layer=-1)")
    if not 1 <= cfg.n_expert_active <= cfg.n_expert:
        raise bad("n_expert_active", f"must be from 1 to n_expert={cfg.n_expert}: the experts each token goes to")
    if layers is not None:
        if not isinstance(layers, (list, tuple)) or not all(whole(i) for i in layers):
            raise bad("moe_layers", "must be a list of layer indices, or None (every layer)")
        layers = tuple(layers)
        object.__setattr__(cfg, "moe_layers", layers)
        if any(not 0 <= i < cfg.n_layer for i in layers):
            raise bad("moe_layers", f"must be layers of this model (0 to {cfg.n_layer - 1})")
        if any(a >= b for a, b in zip(layers, layers[1:])):
            raise bad("moe_layers", "must be sorted, each layer once")


def is_moe_layer(cfg: Any, layer: int) -> bool:
    """Whether ``layer``'s MLP is a mixture of experts."""
    return cfg.n_expert > 0 and (cfg.moe_layers is None or layer in cfg.moe_layers)


def n_moe_layers(cfg: Any) -> int:
    return 0 if cfg.n_expert == 0 else cfg.n_layer if cfg.moe_layers is None else len(cfg.moe_layers)


def mlp_params(cfg: Any, d_mlp: int, bias: bool) -> int:
    """One MLP's parameters, C -> d_mlp (twice when gated) -> C."""
    C = cfg.n_embd
    gated = cfg.gated_mlp or cfg.activation == GLU_OSS
    return (C * d_mlp + (d_mlp if bias else 0)) * (2 if gated else 1) + d_mlp * C + (C if bias else 0)


def moe_layer_params(cfg: Any) -> int:
    """One mixture-of-experts layer's parameters: the router, the experts, the shared expert and its gate."""
    C, E = cfg.n_embd, cfg.n_expert
    total = C * E + (E if cfg.router_bias else 0) + E * mlp_params(cfg, cfg.d_expert, cfg.expert_bias)
    if cfg.d_shared_expert:  # a gated MLP without biases, whatever the experts are (Qwen2-MoE's), and its gate
        total += 3 * C * cfg.d_shared_expert + C
    return total


def moe_trace_floats(cfg: Any, batch: int, seq_len: int) -> int:
    """The floats one mixture-of-experts layer's steps hold: router logits, probabilities and weights (B, T, E),
    each expert's output (B, T, E, C), and the shared expert's gate and output."""
    BT, E, C = batch * seq_len, cfg.n_expert, cfg.n_embd
    return BT * (3 * E + E * C + (C + 1 if cfg.d_shared_expert else 0))
