"""Cached resources shared by every session: models, tokenizers, traces.

A cached model is shared by every session and thread, so nothing here ever changes one after it is
built. Edits go through ``trace(edits=...)``; training (later) works on its own copy.
"""
from __future__ import annotations

import json
import threading
import uuid
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import streamlit as st
import torch

from .. import edits as edit_specs
from ..config import ModelConfig
from ..model import GPT
from ..tokenizers import TokenizerUnavailable, get_tokenizer
from ..trace import Trace, trace

CHECKPOINTS = Path(__file__).resolve().parents[2] / "checkpoints"

# Models that are not built from a config alone (trained, uploaded or shipped ones), by key, with the
# tokenizer they were made for. Each is registered once and never changed afterwards; a new training
# run or upload gets a new key. The oldest are forgotten past MAX_REGISTERED.
MAX_REGISTERED = 32


@dataclass
class Entry:
    model: GPT
    tokenizer: object = None
    label: str = ""
    meta: dict = field(default_factory=dict)


_REGISTERED: "OrderedDict[str, Entry]" = OrderedDict()
_REGISTER_LOCK = threading.Lock()


def register_model(model: GPT, tokenizer=None, label: str = "", meta: Optional[dict] = None,
                   key: Optional[str] = None) -> str:
    """Keep a model for the pages to show; returns its key."""
    key = key or f"m-{uuid.uuid4().hex[:12]}"
    model.eval()
    with _REGISTER_LOCK:
        _REGISTERED[key] = Entry(model, tokenizer, label, dict(meta or {}))
        _REGISTERED.move_to_end(key)
        while len(_REGISTERED) > MAX_REGISTERED:
            _REGISTERED.popitem(last=False)
    return key


def registered(key: Optional[str]) -> Optional[Entry]:
    if not key:
        return None
    with _REGISTER_LOCK:
        return _REGISTERED.get(key)


def registered_model(key: Optional[str]) -> Optional[GPT]:
    e = registered(key)
    return None if e is None else e.model


_LABELS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_LABELS_LOCK = threading.Lock()


def vocab_labels(tok) -> list[str]:
    """Every token's display string, worked out once per tokenizer object (50k+ for tiktoken)."""
    with _LABELS_LOCK:
        labels = _LABELS.get(tok)
    if labels is None:
        labels = [tok.token_str(i) for i in range(tok.vocab_size)]
        with _LABELS_LOCK:
            _LABELS[tok] = labels
    return labels


def shipped_checkpoint(name: str) -> str:
    """Load one of the checkpoints that ship with gptviz and register it (again, if it was forgotten)."""
    from ..checkpoint import load_checkpoint

    key = f"ckpt-{name}"
    if registered(key) is not None:
        return key
    path = CHECKPOINTS / f"{name}.safetensors"
    ck = load_checkpoint(path)
    return register_model(ck.model, ck.tokenizer, f"shipped checkpoint: {name}", ck.meta, key=f"ckpt-{name}")


def shipped_names() -> list[str]:
    return sorted(p.stem for p in CHECKPOINTS.glob("*.safetensors"))


@st.cache_resource(max_entries=12, show_spinner=False)
def model_for(cfg_json: str) -> GPT:
    """The seeded model for a config (JSON of ``ModelConfig.to_dict()``)."""
    return GPT(ModelConfig.from_dict(json.loads(cfg_json)))


def get_model(cfg_json: str, model_key: Optional[str] = None) -> GPT:
    m = registered_model(model_key)
    return m if m is not None else model_for(cfg_json)


@st.cache_resource(max_entries=24, show_spinner=False)
def tokenizer_for(name: str, merges: int, lowercase: bool):
    """(tokenizer, None) or (None, why it could not load). Failures are cached too: offline, asking the
    network again on every rerun would only make the page slow."""
    try:
        return get_tokenizer(name, num_merges=merges, lowercase=lowercase), None
    except TokenizerUnavailable as exc:
        return None, str(exc)


BIG_MODEL_PARAMS = 20_000_000


def traced(cfg_json: str, model_key: Optional[str], x: tuple, y: Optional[tuple], mask: Optional[tuple],
           edits_key: str, grads: bool) -> Trace:
    """A trace as numpy arrays, cached. Everything it depends on is in the arguments.

    A trace of a small model is tiny and many are kept; one of a GPT-2-sized model is ~0.1 GB, so only a
    few are, in a cache of their own.
    """
    m = registered_model(model_key)
    cfg = m.config if m is not None else ModelConfig.from_dict(json.loads(cfg_json))
    big = cfg.num_params() > BIG_MODEL_PARAMS
    fn = _traced_big if big else _traced_small
    return fn(cfg_json, model_key, x, y, mask, edits_key, grads)


def _compute_trace(cfg_json, model_key, x, y, mask, edits_key, grads) -> Trace:
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
    return tr.numpy().without_param_grads() if grads else tr.numpy()


@st.cache_data(max_entries=64, show_spinner=False)
def _traced_small(cfg_json, model_key, x, y, mask, edits_key, grads) -> Trace:
    return _compute_trace(cfg_json, model_key, x, y, mask, edits_key, grads)


@st.cache_data(max_entries=6, show_spinner="Running the big model…")
def _traced_big(cfg_json, model_key, x, y, mask, edits_key, grads) -> Trace:
    return _compute_trace(cfg_json, model_key, x, y, mask, edits_key, grads)
