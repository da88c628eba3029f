"""Freshly initialised models of a shape at a chosen scale, for the initialisation study.

A fresh model's weights depend on its config alone (the shape, the seed, ``init_std``, the activation), never on the
text, so one built to be read (forward passes, traces) is kept and served again: the study's 13 scales cost 13 model
builds once per shape, not once per text. Models are kept up to KEPT_PARAMS parameters in all, the least recently used
dropped first. A model to train is always built new (``fresh_model``).
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Optional

from ..config import ModelConfig
from ..model.gpt import GPT

# The kept models' parameters in all: 64M (256 MB of float32) holds the 13 scales of a model at the study's limit
# (init_study.MAX_SWEEP_PARAMS, 5M: 13 × 4.9M), the shipped mixture of experts' 13 (13 × 2.4M) and a few small ones.
KEPT_PARAMS = 64_000_000

_kept: "OrderedDict[ModelConfig, GPT]" = OrderedDict()
_kept_lock = threading.Lock()


def _changed(cfg: ModelConfig, init_std: Optional[float], activation: Optional[str]) -> ModelConfig:
    changes: dict = {}
    if init_std is not None:
        changes["init_std"] = float(init_std)
    if activation is not None:
        changes["activation"] = activation
    return cfg.replace(**changes) if changes else cfg


def fresh_model(cfg: ModelConfig, init_std: Optional[float] = None, activation: Optional[str] = None) -> GPT:
    """A new model of this shape at ``init_std`` (same seed, so the same weights every time): one to train."""
    return GPT(_changed(cfg, init_std, activation))


def read_only_model(cfg: ModelConfig, init_std: Optional[float] = None, activation: Optional[str] = None) -> GPT:
    """``fresh_model``'s model for reading only (forward passes, traces): built once and kept (while it fits
    KEPT_PARAMS), since the weights depend on the shape, the seed and the scale, never on the text. Never train it."""
    c = _changed(cfg, init_std, activation)
    n = c.num_params()
    if n > KEPT_PARAMS:
        return GPT(c)
    with _kept_lock:
        model = _kept.get(c)
        if model is not None:
            _kept.move_to_end(c)
            return model
    model = GPT(c)  # built outside the lock: another session's study need not wait for it
    with _kept_lock:
        model = _kept.setdefault(c, model)  # two sessions built it at once: both get the first one kept
        _kept.move_to_end(c)
        total = sum(k.num_params() for k in _kept)
        while total > KEPT_PARAMS:
            old, _ = _kept.popitem(last=False)
            total -= old.num_params()
    return model
