"""Rotary position tables with the scalings current models ship with: ``linear``, ``dynamic`` (NTK), ``llama3``,
``yarn`` and ``longrope`` (Phi-3), as Hugging Face's ``rope_type`` names them (``ModelConfig.rope_type`` and the
``rope_*`` fields).

Every scaling changes only the inverse frequencies ω_i of the d/2 pairs a head turns (d = ``d_rot``, b = the base):
plain rotary positions turn pair i by t · ω_i at position t, with ω_i = b^(−2i/d). yarn, longrope (and any type
given a ``rope_attention_factor``) also multiplies cos and sin by that factor, so every score q·k is multiplied by its
square. The formulas are derived from the papers and written out below; ``tests/test_rope_scaling_oracle.py``
checks the tables against transformers' own (``ROPE_INIT_FUNCTIONS`` and a model's rotary embedding).
"""
from __future__ import annotations

import math
from typing import Optional

import torch

from ..config import ModelConfig
from .layers import rope_angles


def plain_frequencies(d: int, base: float) -> torch.Tensor:
    """ω_i = base^(−2i/d) for i < d/2, float64: plain rotary positions' inverse frequencies (radians a position)."""
    return torch.pow(base, -torch.arange(0, d, 2, dtype=torch.float64) / d)


def _yarn_ramp(cfg: ModelConfig) -> torch.Tensor:
    """yarn's blend, per pair: 0 for the pairs kept as they are (extrapolated), 1 for those divided by the factor
    (interpolated), a straight line between. Pair i turns L · ω_i / 2π times over the original context L; the pair
    that turns r times is i(r) = d · ln(L / (2π r)) / (2 ln b). The ramp runs from i(beta_fast) to i(beta_slow)
    (rounded out to whole pairs when ``rope_truncate``), clipped to [0, d − 1]."""
    d, b, L = cfg.d_rot, cfg.rope_base, cfg.rope_original_max_pos
    pair = lambda turns: d * math.log(L / (2 * math.pi * turns)) / (2 * math.log(b))
    low, high = pair(cfg.rope_beta_fast), pair(cfg.rope_beta_slow)
    if cfg.rope_truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, d - 1)
    if low == high:
        high += 0.001  # a ramp of no width would divide by 0: a step instead
    i = torch.arange(d // 2, dtype=torch.float64)
    return ((i - low) / (high - low)).clamp(0.0, 1.0)


def inverse_frequencies(cfg: ModelConfig, seq_len: Optional[int] = None) -> torch.Tensor:
    """ω_i for each of the ``d_rot / 2`` pairs, float64, as ``cfg.rope_type`` scales them; ``seq_len`` is the
    length of the text (only ``dynamic`` reads it). With s = ``rope_factor`` and L = ``rope_original_max_pos``:

    - default: ω_i = b^(−2i/d)
    - linear: ω_i / s (the same as positions t / s)
    - dynamic: for a text of n > L positions the base becomes b' = b · (s · n / L − (s − 1))^(d / (d − 2)), then
      ω_i = b'^(−2i/d); up to L positions, plain
    - llama3: the wavelength λ_i = 2π / ω_i against L / low_freq_factor and L / high_freq_factor: longer than the
      first, ω_i / s; shorter than the second, ω_i; between, (1 − g) · ω_i / s + g · ω_i with
      g = (L / λ_i − low_freq_factor) / (high_freq_factor − low_freq_factor)
    - yarn: (1 − r_i) · ω_i + r_i · ω_i / s, with r_i the ramp of ``_yarn_ramp``
    - longrope: ω_i / f_i, with f_i the i-th of ``rope_short_factor`` for a text of at most L positions (and for the
      tables a model builds, ``seq_len`` None), of ``rope_long_factor`` for a longer one: transformers picks the list
      for each forward pass from its length (``dynamic_rope_update``)
    """
    w = plain_frequencies(cfg.d_rot, cfg.rope_base)
    kind, s, L = cfg.rope_type, cfg.rope_factor, cfg.rope_original_max_pos
    if kind == "linear":
        return w / s
    if kind == "dynamic":
        if seq_len is None or seq_len <= L:
            return w
        d = cfg.d_rot
        return plain_frequencies(d, cfg.rope_base * (s * seq_len / L - (s - 1)) ** (d / (d - 2)))
    if kind == "llama3":
        lo, hi = cfg.rope_low_freq_factor, cfg.rope_high_freq_factor
        wavelength = 2 * math.pi / w
        g = (L / wavelength - lo) / (hi - lo)
        blended = (1 - g) * w / s + g * w
        return torch.where(wavelength > L / lo, w / s, torch.where(wavelength < L / hi, w, blended))
    if kind == "yarn":
        r = _yarn_ramp(cfg)
        return (1 - r) * w + r * w / s
    if kind == "longrope":
        long = seq_len is not None and seq_len > L
        factors = cfg.rope_long_factor if long else cfg.rope_short_factor
        return w / torch.tensor(factors, dtype=torch.float64)
    return w


def own_tables(cfg: ModelConfig, seq_len: int) -> bool:
    """Whether a text of ``seq_len`` positions needs tables of its own (dynamic NTK, or longrope's long factors,
    beyond its original context) rather than the first ``seq_len`` rows of the tables the model built."""
    per_length = cfg.rope_type in ("dynamic", "longrope")
    return cfg.pos_encoding == "rope" and per_length and seq_len > cfg.rope_original_max_pos


def rotary_angles(cfg: ModelConfig, n_pos: int, seq_len: Optional[int] = None) -> torch.Tensor:
    """θ[t, i] = t · ω_i, (n_pos, d_rot / 2) float32, worked out in float64 as ``rope_angles`` (which plain rotary
    positions use, to the bit). ``seq_len``: the text's length, which dynamic NTK's frequencies depend on (None:
    the tables a model builds, which a text longer than ``rope_original_max_pos`` does not use)."""
    if cfg.rope_type == "default":
        return rope_angles(n_pos, cfg.d_rot, cfg.rope_base)
    ang = (torch.arange(n_pos, dtype=torch.float64)[:, None] * inverse_frequencies(cfg, seq_len)[None, :]).float()
    if not bool(torch.isfinite(ang).all()):  # a factor so far from 1 that a frequency overflows
        raise ValueError(f"rope_factor={cfg.rope_factor:g} makes rotary angles too large for float32 "
                         f"(rope_type={cfg.rope_type!r}): no model can be built with it")
    return ang


def rope_cos_sin(cfg: ModelConfig, n_pos: int, seq_len: Optional[int] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(cos, sin) of ``rotary_angles``, each (n_pos, d_rot / 2) float32; for a scaled type, both multiplied by
    ``rope_attention_factor`` (as transformers multiplies its tables by ``attention_scaling``)."""
    ang = rotary_angles(cfg, n_pos, seq_len)  # (n_pos, d_rot/2)
    cos, sin = ang.cos(), ang.sin()
    if cfg.rope_type != "default" and cfg.rope_attention_factor != 1.0:
        cos, sin = cos * cfg.rope_attention_factor, sin * cfg.rope_attention_factor
    return cos, sin
