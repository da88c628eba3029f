"""What every Hugging Face family reader shares (``gptviz.model.hf_families`` and ``gptviz.model.hf_gemma_olmo``):
the ``Family`` record, the context cap, the activation names, and ``_build``, which makes a ``ModelConfig`` and says a
refusal in config.json's words. Kept apart so that the family modules import it and not each other.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch

from ..config import ModelConfig
from .hf_config_fields import _int, _show, _text

MAX_CONTEXT = 8192  # positions a loaded model is built for (its tables); a longer text is refused, not truncated
_ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu_fast": "gelu_tanh",
                "gelu": "gelu", "relu": "relu", "silu": "silu", "swish": "silu", "tanh": "tanh"}


@dataclass
class Family:
    """How one ``model_type`` maps onto gptviz: its config, the tensors it needs, and the rename."""

    config: Callable[[dict], ModelConfig]
    shapes: Callable[[ModelConfig], dict[str, tuple]]  # the Hugging Face tensor names and shapes it needs
    convert: Callable[[Callable[[str], torch.Tensor], ModelConfig], dict]  # (tensor by its HF name) -> gptviz dict
    note: Optional[Callable[[ModelConfig], str]] = None  # what a reader must know of how gptviz holds this family
    names: dict[str, str] = field(default_factory=dict)  # gptviz's config field -> the config.json key it comes from


# --------------------------------------------------------------------------- reading config.json
# Every value a family reads is checked, for its type and its range, before a ModelConfig is made: a wrong value is a
# ValueError that names the config.json key. The readers (_int, _float, _flag, _text, _object) are in
# gptviz.model.hf_config_fields.


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
