"""The readers of a Hugging Face ``config.json``'s values that ``gptviz.model.hf_families`` uses: each checks a value's
type and range before a ``ModelConfig`` is made, so a wrong value is a ValueError that names the config.json key
(never a TypeError, a ZeroDivisionError … from deeper down). A null value is read as an absent one. A size above the
parameter limit can't fit whatever the other sizes are. Also what every family shares: the activations gptviz has,
the context a loaded model is built for (``MAX_CONTEXT``), and ``_build``, a ModelConfig whose refusal names the
config.json keys (kept here so a family in a file of its own, as ``hf_phi3``, imports them without a circle).
"""
from __future__ import annotations

import math
import re
from typing import Optional, overload

from ..config import MAX_PARAMS, ModelConfig

MAX_CONTEXT = 8192  # positions a loaded model is built for (its tables); a longer text is refused, not truncated
_ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu_fast": "gelu_tanh",
                "gelu": "gelu", "relu": "relu", "silu": "silu", "swish": "silu", "tanh": "tanh"}

_REQUIRED = object()


def _show(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "…"


def _bad(key: str, value, rule: str) -> ValueError:
    return ValueError(f"config.json's {key}={_show(value)} {rule}")


def _pick(d: dict, keys: tuple[str, ...]) -> tuple[str, object]:
    """(the key, its value) of the first of ``keys`` with a value (not null); (the first key, None) if none has."""
    for k in keys:
        if d.get(k) is not None:
            return k, d[k]
    return keys[0], None


@overload
def _int(d: dict, *keys: str, low: int = ..., high: Optional[int] = ..., within: str = "") -> int: ...
@overload
def _int(d: dict, *keys: str, default: int, low: int = ..., high: Optional[int] = ..., within: str = "") -> int: ...
@overload
def _int(d: dict, *keys: str, default: Optional[int], low: int = ..., high: Optional[int] = ...,
         within: str = "") -> Optional[int]: ...
def _int(d: dict, *keys: str, default=_REQUIRED, low: int = 1, high: Optional[int] = MAX_PARAMS,
         within: str = "") -> Optional[int]:
    """A whole number (not true/false, not 2.0) from the first of ``keys`` that has one, in ``[low, high]``;
    ``default`` when none has (a KeyError, which the loader reports as missing, if there is no default)."""
    key, value = _pick(d, keys)
    if value is None:
        if default is _REQUIRED:
            raise KeyError(within + key)
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(within + key, value, "must be a whole number")
    if value < low:
        raise _bad(within + key, value, f"must be at least {low}")
    if high is not None and value > high:
        raise _bad(within + key, value, f"must be at most {high:,}")
    return value


def _float(d: dict, *keys: str, default, above: float, at_most: float = math.inf, within: str = "") -> float:
    """A finite number (a whole one too, not true/false) above ``above`` and at most ``at_most``."""
    key, value = _pick(d, keys)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _bad(within + key, value, "must be a finite number")
    if not above < value <= at_most:
        rule = f"must be above {above:g}" + (f" and at most {at_most:g}" if math.isfinite(at_most) else "")
        raise _bad(within + key, value, rule)
    return float(value)


def _flag(d: dict, key: str, default: bool) -> bool:
    value = d.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise _bad(key, value, "must be true or false")
    return value


def _text(d: dict, key: str, default: Optional[str] = None, within: str = "") -> Optional[str]:
    value = d.get(key)
    if value is None:
        return default
    if not isinstance(value, str):
        raise _bad(within + key, value, "must be a string")
    return value


def _object(d: dict, key: str) -> dict:
    value = d.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _bad(key, value, "must be a JSON object")
    return value


def _activation(d: dict, key: str = "hidden_act", default: str = "gelu") -> str:
    """The activation ``key`` names (``default``, the family's own as transformers has it, where it names none)."""
    act = _text(d, key, default)
    if act not in _ACTIVATIONS:
        raise ValueError(f"{key}={_show(act)} has no gptviz equivalent (gptviz has {', '.join(sorted(_ACTIVATIONS))})")
    return _ACTIVATIONS[act]


def _context(d: dict, *keys: str) -> int:
    """The positions the model is built for: its context (``keys``), at most MAX_CONTEXT. A sliding window is not a
    context: it is a mask (``_mistral_window``, ``_qwen2_window``), and a family without one in transformers
    (GPT-2, Llama, Gemma, GPT-NeoX) ignores a ``sliding_window`` its config.json carries, as transformers does."""
    return min(_int(d, *keys, default=2048, high=None), MAX_CONTEXT)


def _build(names: dict[str, str], **fields) -> ModelConfig:
    """``ModelConfig(**fields)``; where it refuses (n_head not divisible by n_kv_head, an odd d_head for rotary …)
    the message also says which config.json keys those gptviz fields come from (``names``)."""
    try:
        return ModelConfig(**fields)
    except ValueError as exc:
        raise ValueError(in_config_terms(str(exc), names)) from None


def in_config_terms(message: str, names: dict[str, str]) -> str:
    """``message`` about gptviz's config fields, with what each field it names is in config.json (``names``)."""
    said = [f"{ours} is {theirs}" for ours, theirs in names.items()
            if ours != theirs and re.search(rf"(?<![\w.']){ours}\b", message)]
    return f"{message} (in config.json: {'; '.join(said)})" if said else message


def heads(d: dict) -> tuple[int, int, int, Optional[int]]:
    """``(hidden_size, num_attention_heads, num_key_value_heads, head_dim or None)`` of a Llama-like config, refused
    when the key/value heads do not divide the query heads, or when there would be heads of width 0."""
    C, nh = _int(d, "hidden_size"), _int(d, "num_attention_heads")
    nkv = _int(d, "num_key_value_heads", default=nh)
    if nh % nkv:
        raise ValueError(f"config.json's num_attention_heads={nh} must be divisible by num_key_value_heads={nkv}: "
                         "each key/value head serves the same number of query heads")
    d_head = _int(d, "head_dim", default=None)
    if d_head is None and nh > C:
        raise ValueError(f"config.json's num_attention_heads={nh} is more than its hidden_size={C}, and it has no "
                         "head_dim: each head would be hidden_size / num_attention_heads = 0 wide")
    return C, nh, nkv, d_head
