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
from functools import lru_cache
from typing import Optional

import streamlit as st

from ..config import ModelConfig
from ..model.build import build_model
from ..model.gpt import GPT
from ..paths import CHECKPOINTS
from ..present.page_context import Entry, trace_for_view
from ..run.trace import Trace
from ..text.tokenizers import TokenizerUnavailable, get_tokenizer

# Models that are not built from a config alone (trained, uploaded or shipped ones), by key, with the
# tokenizer they were made for. Each is registered once and never changed afterwards; a new training
# run or upload gets a new key. The oldest are forgotten past MAX_REGISTERED.
MAX_REGISTERED = 32


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
    """Load one of the checkpoints that ship with gptviz and register it (again, if it was forgotten).

    ``name`` comes from a link (``?preset=checkpoint:NAME``), so only the name of a shipped checkpoint, a plain
    file name found in checkpoints/, is accepted: never a path, and the error names the choices, not the folder."""
    from ..model.checkpoint import load_checkpoint

    names = shipped_names()
    if not isinstance(name, str) or name not in names:
        raise ValueError(f"there is no shipped checkpoint of that name (choose one of {', '.join(names)})")
    key = f"ckpt-{name}"
    if registered(key) is not None:
        return key
    ck = load_checkpoint(CHECKPOINTS / f"{name}.safetensors")
    return register_model(ck.model, ck.tokenizer, f"shipped checkpoint: {name}", ck.meta, key=key)


def shipped_names(decoder_only: bool = False) -> list[str]:
    """The checkpoints in checkpoints/ (not the *.snapshots files). ``decoder_only``: leave out
    encoder-decoder models (``config.n_enc_layer >= 0``)."""
    names = sorted(p.stem for p in CHECKPOINTS.glob("*.safetensors") if "." not in p.stem)
    return [n for n in names if not decoder_only or _shipped_config(n).get("n_enc_layer", -1) < 0]


@lru_cache(maxsize=64)
def _shipped_config(name: str) -> dict:
    """The config in a shipped checkpoint's header, read without loading its weights."""
    from safetensors import safe_open

    with safe_open(str(CHECKPOINTS / f"{name}.safetensors"), framework="pt") as f:
        return json.loads((f.metadata() or {}).get("config", "{}"))


@st.cache_resource(max_entries=12, show_spinner=False)
def model_for(cfg_json: str) -> GPT:
    """The seeded model for a config (JSON of ``ModelConfig.to_dict()``): a ``GPT``, or a
    ``gptviz.model.encoder_decoder.Seq2Seq`` when the config has ``n_enc_layer >= 0``."""
    return build_model(ModelConfig.from_dict(json.loads(cfg_json)))


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
           edits_key: str, grads: bool, src: Optional[tuple] = None, src_mask: Optional[tuple] = None) -> Trace:
    """A trace as numpy arrays, cached. Everything it depends on is in the arguments.

    ``src`` and ``src_mask`` are an encoder-decoder model's source: the token ids its encoder reads and their
    padding mask (1 real, 0 padding), one row per batch row; both None for a decoder-only model, or for one
    whose encoder output is the fixed random tensor (n_enc_layer = 0). A model with an encoder given no source
    reads ``default_source`` (its example), so a page that knows nothing of sources still draws.

    A trace of a small model is tiny and many are kept; one of a GPT-2-sized model is ~0.1 GB, so only a
    few are, in a cache of their own.
    """
    m = registered_model(model_key)
    cfg = m.config if m is not None else ModelConfig.from_dict(json.loads(cfg_json))
    if src is None and cfg.n_enc_layer > 0:
        src, src_mask = default_source(model_key, x, cfg)
    big = cfg.num_params() > BIG_MODEL_PARAMS
    fn = _traced_big if big else _traced_small
    # read-only: a big trace is one object shared by every session, and a small one is a fresh copy of
    # the cached value, frozen too so that every page is tested against read-only traces
    return fn(cfg_json, model_key, x, y, mask, edits_key, grads, src, src_mask).freeze()


def default_source(model_key: Optional[str], x: tuple, cfg: ModelConfig) -> tuple[tuple, tuple]:
    """(src, src_mask) for a model with an encoder when the caller gave none: the loaded model's example
    source (its checkpoint's ``example``) in every row, else the decoder's own tokens, cut to ``enc_len``."""
    e = registered(model_key)
    ids: list[int] = []
    if e is not None and e.tokenizer is not None and e.meta.get("example"):
        ids = [i for i in e.tokenizer.encode(str(e.meta["example"]).splitlines()[0]) if 0 <= i < cfg.vocab_size]
    rows = []
    for row in x:
        r = list(ids or row)[: cfg.enc_len]
        rows.append(tuple(r))
    S = max(len(r) for r in rows)
    pad = rows[0][0] if rows[0] else 0
    src = tuple(r + (pad,) * (S - len(r)) for r in rows)
    return src, tuple((1,) * len(r) + (0,) * (S - len(r)) for r in rows)


def _compute_trace(cfg_json, model_key, x, y, mask, edits_key, grads, src=None, src_mask=None) -> Trace:
    return trace_for_view(get_model(cfg_json, model_key), x, y, mask, edits_key, grads, src, src_mask)


@st.cache_data(max_entries=64, show_spinner=False)
def _traced_small(cfg_json, model_key, x, y, mask, edits_key, grads, src=None, src_mask=None) -> Trace:
    return _compute_trace(cfg_json, model_key, x, y, mask, edits_key, grads, src, src_mask)


# A big trace (GPT-2 small with gradients: ~170 MB) is kept as it is, not pickled as st.cache_data would do
# on every miss (~0.3 s) and copy on every hit; its arrays are read-only (Trace.freeze).
@st.cache_resource(max_entries=4, show_spinner="Running the big model…")
def _traced_big(cfg_json, model_key, x, y, mask, edits_key, grads, src=None, src_mask=None) -> Trace:
    return _compute_trace(cfg_json, model_key, x, y, mask, edits_key, grads, src, src_mask)


@st.cache_data(max_entries=32, show_spinner=False)
def probe_scores(cfg_json: str, model_key: Optional[str], n: int = 32, batch: int = 8, seed: int = 0) -> dict:
    """The head detector's repeated-random probe (one forward pass of ``batch`` rows), cached per model."""
    from ..interp.head_detector import probe

    return probe(get_model(cfg_json, model_key), n=n, batch=batch, seed=seed)
