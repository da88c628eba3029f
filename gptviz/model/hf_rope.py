"""A Hugging Face ``config.json``'s rotary positions, read into ``ModelConfig``'s fields: the base, the fraction
of each head turned, and the scaling (``rope_type`` ``linear``, ``dynamic``, ``llama3``, ``yarn`` or ``longrope``; the
maths is ``gptviz.model.rope_scaling``'s).

Both forms a config.json is found in are read. transformers 5 saves one object, ``rope_parameters`` (``rope_type``,
``rope_theta``, ``factor`` …); older versions saved ``rope_theta`` at the top and the scaling as ``rope_scaling``
(``type`` in the oldest, ``rope_type`` later). As transformers 5 reads them (``convert_rope_params_to_dict`` and
``standardize_rope_params``): a ``rope_scaling`` object, when there is one, is the scaling read (else
``rope_parameters``); a value it lacks (``rope_theta``, ``partial_rotary_factor``) comes from the top level; and
``original_max_position_embeddings`` from the top level wins over the object's, which defaults to
``max_position_embeddings``. Every value is checked before anything is built, and a ValueError names its key.
"""
from __future__ import annotations

import math
from typing import Any, Optional

from ..config import ROPE_TYPES
from .hf_config_fields import _bad, _float, _int, _object, _show, _text

SCALED = tuple(t for t in ROPE_TYPES if t != "default")
NAMES = {"rope_type": "rope_parameters.rope_type (or rope_scaling's)",
         "rope_factor": "rope_parameters.factor (or rope_scaling's)",
         "rope_short_factor": "rope_parameters.short_factor (or rope_scaling's)",
         "rope_long_factor": "rope_parameters.long_factor (or rope_scaling's)"}  # for a ModelConfig refusal's message


def read_rope(d: dict, pct_default: float = 1.0, types: tuple[str, ...] = SCALED,
              aliases: Optional[dict[str, str]] = None) -> dict[str, Any]:
    """``ModelConfig``'s rotary fields for config.json ``d``: ``rope_base`` and ``rotary_pct`` always, and the
    ``rope_*`` scaling fields for a scaled type. ``pct_default``: the family's fraction turned where config.json
    names none (GPT-NeoX's 0.25); ``types``: the scalings the family takes (Phi-3: longrope only), and ``aliases``
    older names it reads as one of them (Phi-3's "su" and "yarn" for longrope). A type gptviz does not compute, or a
    value out of its range, is refused."""
    params, scaling = _object(d, "rope_parameters"), _object(d, "rope_scaling")
    where = "rope_scaling" if scaling else "rope_parameters"
    p = scaling or params
    within = where + "."
    key = "rope_type" if p.get("rope_type") is not None else "type"  # "type": the oldest configs' name
    kind = _text(p, key, default="default", within=within)
    kind = (aliases or {}).get(kind, kind) if kind is not None else kind
    theta = _float(p, "rope_theta", default=None, above=1.0, within=within)
    if theta is None:
        theta = _float(d, "rope_theta", "rotary_emb_base", default=10000.0, above=1.0)
    pct = _float(p, "partial_rotary_factor", default=None, above=0.0, at_most=1.0, within=within)
    if pct is None:
        pct = _float(d, "partial_rotary_factor", "rotary_pct", default=pct_default, above=0.0, at_most=1.0)
    fields: dict[str, Any] = {"rope_base": theta, "rotary_pct": pct}
    if kind == "default":
        return fields
    if kind not in types:
        what = "the rotary scalings" if len(types) > 1 else "the rotary scaling"
        raise ValueError(f"config.json's {within + key}={_show(p.get(key))}: gptviz computes {what} "
                         f"{', '.join(repr(t) for t in types)} (and plain rotary positions), not this one")

    def number(name: str, default=None, above: float = 0.0) -> float:
        """A scaling value of ``p``: required where ``default`` is None."""
        value = _float(p, name, default=default, above=above, within=within)
        if value is None:
            raise ValueError(f"config.json's {within + key}={kind!r} needs {within + name}, which it does not have")
        return value

    max_pos = _int(d, "max_position_embeddings", default=2048, high=None)
    if kind == "longrope":
        return fields | _longrope(d, p, within + key, max_pos)
    fields.update(rope_type=kind, rope_factor=number("factor"))
    if kind == "dynamic":  # transformers measures a text against max_position_embeddings
        fields["rope_original_max_pos"] = min(max_pos, 1 << 32)  # a longer one is longer than any text here
        return fields
    if kind == "linear":
        return fields
    fields["rope_original_max_pos"] = _original(d, p, within, max_pos)
    if kind == "llama3":
        low, high = number("low_freq_factor"), number("high_freq_factor")
        if high <= low:
            raise _bad(within + "high_freq_factor", high, f"must be above {within}low_freq_factor={_show(low)}: "
                       "llama3 blends the frequencies between the two wavelengths they set")
        fields.update(rope_low_freq_factor=low, rope_high_freq_factor=high)
        return fields
    # yarn: transformers reads a beta of 0 (or null) as the paper's default, 32 and 1
    fast = _float(p, "beta_fast", default=0.0, above=-math.inf, within=within) or 32.0
    slow = _float(p, "beta_slow", default=0.0, above=-math.inf, within=within) or 1.0
    for name, value in (("beta_fast", fast), ("beta_slow", slow)):
        if value < 0:
            raise _bad(within + name, value, "must be above 0: the number of turns where yarn's blend starts or ends")
    if fast < slow:
        raise _bad(within + "beta_fast", fast, f"must be at least {within}beta_slow={_show(slow)}")
    truncate = p.get("truncate", True)
    if not isinstance(truncate, bool):
        raise _bad(within + "truncate", truncate, "must be true or false")
    fields.update(rope_beta_fast=fast, rope_beta_slow=slow, rope_truncate=truncate)
    attention = _float(p, "attention_factor", default=None, above=0.0, within=within)
    mscale = _float(p, "mscale", default=0.0, above=-math.inf, within=within)
    mscale_all = _float(p, "mscale_all_dim", default=0.0, above=-math.inf, within=within)
    if attention is None and mscale and mscale_all:  # DeepSeek's form: the ratio of two of yarn's mscales
        s = fields["rope_factor"]
        mscale_of = lambda m: 0.1 * m * math.log(s) + 1.0 if s > 1 else 1.0
        attention = mscale_of(mscale) / mscale_of(mscale_all) if mscale_of(mscale_all) else -math.inf
        if not attention > 0:
            raise ValueError(f"config.json's {within}mscale={_show(mscale)} and {within}mscale_all_dim="
                             f"{_show(mscale_all)} give an attention factor of {attention:g}: it must be above 0")
    if attention is not None:  # else ModelConfig's own: yarn's 0.1 · ln(factor) + 1
        fields["rope_attention_factor"] = attention
    return fields


def _original(d: dict, p: dict, within: str, max_pos: int) -> int:
    """The context trained for: config.json's top-level ``original_max_position_embeddings`` (Phi-3's place) wins
    over the scaling object's, which defaults to ``max_position_embeddings``."""
    original = _int(d, "original_max_position_embeddings", default=None, high=1 << 32)
    return original or _int(p, "original_max_position_embeddings", default=min(max_pos, 1 << 32), high=1 << 32,
                            within=within)


def _longrope(d: dict, p: dict, kind_key: str, max_pos: int) -> dict[str, Any]:
    """longrope's fields, as transformers' ``_compute_longrope_parameters`` reads them: the two factor lists (their
    length is checked by ModelConfig against the pairs turned), ``factor`` (where absent, max_position_embeddings /
    original_max_position_embeddings, from config.json's own values, not gptviz's capped context) and
    ``attention_factor`` (where absent, ModelConfig's default: √(1 + ln(factor) / ln(original)) for a factor above
    1). ``kind_key``: where config.json names the type, as "rope_scaling.type"."""
    within = kind_key.rpartition(".")[0] + "."
    lists = {}
    for name in ("short_factor", "long_factor"):
        value = p.get(name)
        if value is None:
            raise ValueError(f"config.json's {kind_key}={_show(p.get(kind_key.rpartition('.')[2]))} needs "
                             f"{within + name}, which it does not have")
        if not isinstance(value, list) or not all(
                not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v) and v > 0 for v in value):
            raise _bad(within + name, value, "must be a list of finite numbers above 0")
        lists["rope_" + name] = tuple(float(v) for v in value)
    original = _original(d, p, within, max_pos)
    factor = _float(p, "factor", default=None, above=0.0, within=within)
    fields: dict[str, Any] = {"rope_type": "longrope", "rope_original_max_pos": original, **lists,
                              "rope_factor": factor if factor is not None else max_pos / original}
    attention = _float(p, "attention_factor", default=None, above=0.0, within=within)
    if attention is not None:
        fields["rope_attention_factor"] = attention
    return fields


def reach(context: int, rope: dict[str, Any], cap: int) -> int:
    """The positions a model is built for: its ``context`` (max_position_embeddings, capped), or for dynamic NTK,
    which exists to run texts longer than that, ``factor`` times as many; at most ``cap``."""
    if rope.get("rope_type") != "dynamic" or rope["rope_factor"] <= 1:
        return context
    return int(min(context * rope["rope_factor"], cap))
