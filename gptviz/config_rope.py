"""The rotary scaling fields of ``ModelConfig`` checked: their types, ranges and rules, and the defaults a None asks
for (``rope_original_max_pos``: block_size; ``rope_attention_factor``: the type's own); longrope's factor lists too.
Kept apart from ``gptviz.config`` so that file stays one readable dataclass; ``ModelConfig.__post_init__`` calls
``check_rope_scaling``.
"""
from __future__ import annotations

import math
from typing import Any

ROPE_TYPES = ("default", "linear", "dynamic", "llama3", "yarn", "longrope")  # Hugging Face's names (its rope_type)


def rope_attention_default(rope_type: str, factor: float, original: int = 1) -> float:
    """What cos and sin are multiplied by when a config names no ``rope_attention_factor``, for a factor above 1:
    yarn's 0.1 · ln(factor) + 1 (transformers' ``get_mscale``), longrope's √(1 + ln(factor) / ln(original)) with
    ``original`` the context trained for (``_compute_longrope_parameters``); 1 for every other case."""
    if factor <= 1:
        return 1.0
    if rope_type == "yarn":
        return 0.1 * math.log(factor) + 1.0
    if rope_type == "longrope" and original > 1:
        return math.sqrt(1 + math.log(factor) / math.log(original))
    return 1.0


def _check_factor_lists(cfg: Any) -> None:
    """longrope's ``rope_short_factor`` and ``rope_long_factor``: None, or one finite number above 0 for each pair
    turned (kept as a tuple, so the config stays hashable); both needed by ``rope_type="longrope"``."""
    for name in ("rope_short_factor", "rope_long_factor"):
        value = getattr(cfg, name)
        if value is None:
            if cfg.rope_type == "longrope":
                raise ValueError(f"{name}=None: rope_type='longrope' needs rope_short_factor and rope_long_factor, "
                                 "one number for each pair of dimensions turned")
            continue
        if not isinstance(value, (list, tuple)) or not all(
                not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v) and v > 0 for v in value):
            raise ValueError(f"{name}={value!r} must be a list of finite numbers above 0, or None")
        if cfg.pos_encoding == "rope" and len(value) != cfg.d_rot // 2:
            raise ValueError(f"{name} has {len(value)} numbers: it must have one for each of the d_rot / 2 = "
                             f"{cfg.d_rot // 2} pairs of dimensions turned")
        object.__setattr__(cfg, name, tuple(float(v) for v in value))


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
        object.__setattr__(cfg, "rope_attention_factor", rope_attention_default(cfg.rope_type, cfg.rope_factor,
                                                                                cfg.rope_original_max_pos))
    _check_factor_lists(cfg)
    if cfg.rope_type == "llama3" and cfg.rope_high_freq_factor <= cfg.rope_low_freq_factor:
        raise bad("rope_high_freq_factor", f"must be above rope_low_freq_factor={cfg.rope_low_freq_factor:g}: "
                  "llama3 blends the frequencies between the two wavelengths they set")
    if cfg.rope_type == "yarn" and cfg.rope_beta_fast < cfg.rope_beta_slow:
        raise bad("rope_beta_fast", f"must be at least rope_beta_slow={cfg.rope_beta_slow:g}: yarn keeps the "
                  "dimensions turning over beta_fast times and scales those turning under beta_slow times")
    if cfg.rope_type == "dynamic" and cfg.pos_encoding == "rope" and cfg.d_rot < 4:
        raise ValueError(f"rope_type='dynamic' needs at least 4 rotated dimensions, not d_rot={cfg.d_rot}: it "
                         "raises the base to the power d_rot / (d_rot - 2)")
