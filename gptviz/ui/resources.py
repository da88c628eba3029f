"""Cached resources shared by every session: models, tokenizers, traces.

A cached model is shared by every session and thread, so nothing here ever changes one after it is
built. Edits go through ``trace(edits=...)``; training (later) works on its own copy.
"""
from __future__ import annotations

import json
import threading
from typing import Optional

import streamlit as st
import torch

from .. import edits as edit_specs
from ..config import ModelConfig
from ..model import GPT
from ..tokenizers import TokenizerUnavailable, get_tokenizer
from ..trace import Trace, trace

# Models that are not built from a config alone (trained or imported ones), by key. Each is
# registered once and never changed afterwards; a new training run registers a new key.
_REGISTERED: dict[str, GPT] = {}
_REGISTER_LOCK = threading.Lock()


def register_model(key: str, model: GPT) -> None:
    with _REGISTER_LOCK:
        _REGISTERED[key] = model


def registered_model(key: str) -> Optional[GPT]:
    return _REGISTERED.get(key)


@st.cache_resource(max_entries=12, show_spinner=False)
def model_for(cfg_json: str) -> GPT:
    """The seeded model for a config (JSON of ``ModelConfig.to_dict()``)."""
    return GPT(ModelConfig.from_dict(json.loads(cfg_json)))


def get_model(cfg_json: str, model_key: Optional[str] = None) -> GPT:
    if model_key:
        m = registered_model(model_key)
        if m is not None:
            return m
    return model_for(cfg_json)


@st.cache_resource(max_entries=24, show_spinner=False)
def tokenizer_for(name: str, merges: int, lowercase: bool):
    """(tokenizer, None) or (None, why it could not load). Failures are cached too: offline, asking the
    network again on every rerun would only make the page slow."""
    try:
        return get_tokenizer(name, num_merges=merges, lowercase=lowercase), None
    except TokenizerUnavailable as exc:
        return None, str(exc)


@st.cache_data(max_entries=64, show_spinner=False)
def traced(cfg_json: str, model_key: Optional[str], x: tuple, y: Optional[tuple], mask: Optional[tuple],
           edits_key: str, grads: bool) -> Trace:
    """A trace as numpy arrays. Everything it depends on is in the arguments, so it caches safely."""
    model = get_model(cfg_json, model_key)
    cfg = model.config
    spec = json.loads(edits_key)
    edits = edit_specs.from_spec(spec, cfg.n_layer, cfg.n_head) if not edit_specs.is_empty(spec) else None
    tr = trace(
        model,
        torch.tensor(x, dtype=torch.long),
        targets=None if y is None else torch.tensor(y, dtype=torch.long),
        attention_mask=None if mask is None else torch.tensor(mask, dtype=torch.long),
        edits=edits,
        grads=grads,
    )
    return tr.numpy()
