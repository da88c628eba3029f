"""What every Hugging Face family reader shares (``gptviz.model.hf_families`` and ``gptviz.model.hf_gemma_olmo``):
the ``Family`` record, and (from ``gptviz.model.hf_config_fields``) the context cap, the activation names and
``_build``, which makes a ``ModelConfig`` and says a refusal in config.json's words. Kept apart so that the family
modules import it and not each other.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

import torch

from ..config import ModelConfig
from .hf_config_fields import MAX_CONTEXT as MAX_CONTEXT  # re-exported: the family modules read these from here
from .hf_config_fields import _activation as _activation
from .hf_config_fields import _build as _build
from .hf_config_fields import _context as _context
from .hf_config_fields import in_config_terms as in_config_terms


@dataclass
class Family:
    """How one ``model_type`` maps onto gptviz: its config, the tensors it needs, and the rename."""

    config: Callable[[dict], ModelConfig]
    shapes: Callable[[ModelConfig], dict[str, tuple]]  # the Hugging Face tensor names and shapes it needs
    convert: Callable[[Callable[[str], torch.Tensor], ModelConfig], dict]  # (tensor by its HF name) -> gptviz dict
    note: Optional[Callable[[ModelConfig], str]] = None  # what a reader must know of how gptviz holds this family
    names: dict[str, str] = field(default_factory=dict)  # gptviz's config field -> the config.json key it comes from
