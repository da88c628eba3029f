"""The rotary scaling fields of ``ModelConfig`` checked: their types, ranges and rules, and the defaults a None asks
for (``rope_original_max_pos``: block_size; ``rope_attention_factor``: the type's own). Kept apart from
``gptviz.config`` so that file stays one readable dataclass; ``ModelConfig.__post_init__`` calls ``check_rope_scaling``.
"""
from __future__ import annotations

import math
from typing import Any

ROPE_TYPES = ("default", "linear", "dynamic", "llama3", "yarn")  # Hugging Face's names (its rope_type)


def rope_attention_default(rope_type: str, factor: float) -> float:
    """What cos and sin are multiplied by when a config names no ``rope_attention_factor``: yarn's
    0.1 · ln(factor) + 1 for a factor above 1 (transformers' ``get_mscale``), and 1 for every other case."""
    return 0.1 * math.log(factor) + 1.0 if rope_type == "yarn" and factor > 1 else 1.0


def check_rope_scaling(cfg: Any) -> None:
    """The rotary scaling fields' types, ranges and rules on ``cfg`` (a ModelConfig being constructed); a None
    filled in (block_size, the type's own attention factor). A broken rule is a ValueError naming the field."""
    bad = lambda name, rule: ValueError(f"{name}={getattr(cfg, name)!r} {rule}")
    if cfg.rope_type not in ROPE_TYPES:
        raise bad("rope_type", "must be one of " + ", ".join(repr(a) for a in ROPE_TYPES))
    if cfg.rope_original_max_pos is None:
        object.__setattr__(cfg, "rope_original_max_pos", cfg.block_size)
    value = cfg.rope_original_max_pos
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1 << 32:
        raise bad("rope_original_max_pos", "must be a whole number from 1 to 2^32, or None (block_size)")
    if not isinstance(cfg.rope_truncate, bool):
        raise bad("rope_truncate", "must be True or False")
    numbers = ["rope_factor", "rope_low_freq_factor", "rope_high_freq_factor", "rope_beta_fast", "rope_beta_slow"]
    for name in numbers + ([] if cfg.rope_attention_factor is None else ["rope_attention_factor"]):
        value = getattr(cfg, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise bad(name, "must be a finite number")
        if value <= 0:
            raise bad(name, "must be above 0")
        object.__setattr__(cfg, name, float(value))
    if cfg.rope_attention_factor is None:
        object.__setattr__(cfg, "rope_attention_factor", rope_attention_default(cfg.rope_type, cfg.rope_factor))
    if cfg.rope_type == "llama3" and cfg.rope_high_freq_factor <= cfg.rope_low_freq_factor:
        raise bad("rope_high_freq_factor", f"must be above rope_low_freq_factor={cfg.rope_low_freq_factor:g}: "
                  "llama3 blends the frequencies between the two wavelengths they set")
    if cfg.rope_type == "yarn" and cfg.rope_beta_fast < cfg.rope_beta_slow:
        raise bad("rope_beta_fast", f"must be at least rope_beta_slow={cfg.rope_beta_slow:g}: yarn keeps the "
                  "dimensions turning over beta_fast times and scales those turning under beta_slow times")
    if cfg.rope_type == "dynamic" and cfg.pos_encoding == "rope" and cfg.d_rot < 4:
        raise ValueError(f"rope_type='dynamic' needs at least 4 rotated dimensions, not d_rot={cfg.d_rot}: it "
                         "raises the base to the power d_rot / (d_rot - 2)")
