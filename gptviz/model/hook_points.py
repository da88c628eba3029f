"""HookPoint, the named identity every recorded tensor passes through, and the Recorder that may watch it.

A HookPoint holds no state. The forward pass takes an optional recorder, a plain callable
``rec(name, tensor) -> tensor`` that lives only for one call. Without one, a hook point returns its
input untouched, so the plain forward and a traced forward run exactly the same operations; that is
why a trace's logits are bit-identical to ``model(idx)[0]``, and why many threads can trace one
shared model at once.
"""
from __future__ import annotations

from typing import Callable, Optional

import torch
import torch.nn as nn

Recorder = Optional[Callable[[str, torch.Tensor], torch.Tensor]]


class HookPoint(nn.Module):
    """An identity with a name. Given a recorder, it shows the tensor to it and passes on its answer."""

    def __init__(self, name: str):
        super().__init__()
        self.name = name

    def forward(self, x: torch.Tensor, rec: Recorder = None) -> torch.Tensor:
        return x if rec is None else rec(self.name, x)

    def extra_repr(self) -> str:
        return repr(self.name)
