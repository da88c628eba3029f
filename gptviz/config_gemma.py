"""The fields of ``ModelConfig`` that Gemma 2, Gemma 3 and OLMo 2 brought, checked: their types, ranges and the
rules between them. Kept apart from ``gptviz.config`` so that file stays one readable dataclass;
``ModelConfig.__post_init__`` calls ``check_gemma_fields``.

- ``sublayer_norms``: where a block's norms sit around each sublayer f (attention, MLP), with ``norm_placement``
  "pre" (the residual stream itself is never normalised, a final norm before the unembedding): "before" (GPT-2,
  Llama: x + f(ln(x))), "both" (Gemma 2 and 3: x + ln_post(f(ln(x))), norms ``ln1``/``ln2`` and ``ln1_post``/
  ``ln2_post``), "after" (OLMo 2: x + ln_post(f(x)), only ``ln1_post``/``ln2_post``).
- ``attn_scale_dim``: the scores are divided by √attn_scale_dim instead of √d_head (Gemma's
  ``query_pre_attn_scalar``); None: d_head.
- ``attn_softcap``: the scaled scores soft-capped, c · tanh(s / c), before the mask (Gemma 2); None: not capped.
- ``final_softcap``: the logits soft-capped the same way (Gemma 2); None: not capped.
- ``rope_local_base``: the rotary base of the layers with a sliding window (Gemma 3's local layers, never scaled),
  while the others keep ``rope_base`` and its scaling; None: one set of tables for every layer.
- ``qk_norm_full``: with ``qk_norm``, one RMSNorm over a position's whole query projection (n_head · d_head) and one
  over its whole key projection (n_kv_head · d_head), before the split into heads (OLMo 2); else each head's own.
"""
from __future__ import annotations

import math
from typing import Any

SUBLAYER_NORMS = ("before", "both", "after")


def check_gemma_fields(cfg: Any) -> None:
    """The fields above on ``cfg`` (a ModelConfig being constructed); a number given as an int kept as a float. A
    broken rule is a ValueError naming the field and what to change."""
    bad = lambda name, rule: ValueError(f"{name}={getattr(cfg, name)!r} {rule}")
    if cfg.sublayer_norms not in SUBLAYER_NORMS:
        raise bad("sublayer_norms", "must be one of " + ", ".join(repr(a) for a in SUBLAYER_NORMS))
    if cfg.sublayer_norms != "before" and (cfg.norm_placement != "pre" or cfg.parallel_attn or cfg.n_enc_layer >= 0):
        raise bad("sublayer_norms", "needs a decoder-only model with norm_placement='pre' and no parallel_attn: "
                  "the norms after a sublayer sit inside its residual branch")
    for name in ("attn_scale_dim", "attn_softcap", "final_softcap", "rope_local_base"):
        value = getattr(cfg, name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise bad(name, "must be a finite number, or None")
        if value <= (1 if name == "rope_local_base" else 0):
            raise bad(name, "must be above " + ("1" if name == "rope_local_base" else "0") + ", or None")
        object.__setattr__(cfg, name, float(value))
    if cfg.n_enc_layer >= 0 and any(getattr(cfg, n) is not None for n in ("attn_scale_dim", "attn_softcap",
                                                                          "final_softcap", "rope_local_base")):
        raise ValueError("attn_scale_dim, attn_softcap, final_softcap and rope_local_base are for decoder-only models "
                         "(n_enc_layer=-1)")
    if not isinstance(cfg.qk_norm_full, bool):
        raise bad("qk_norm_full", "must be True or False")
    if cfg.qk_norm_full and not cfg.qk_norm:
        raise bad("qk_norm_full", "needs qk_norm=True: it says how wide QK-norm's norm is")
    if cfg.rope_local_base is not None and (cfg.pos_encoding != "rope" or cfg.sliding_window is None):
        raise bad("rope_local_base", "needs rotary positions (pos_encoding='rope') and a sliding_window: it is the "
                  "base of the layers with the window")
