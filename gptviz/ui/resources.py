"""Cached resources shared by every session: models, tokenizers, traces.

A cached model is shared by every session and thread, so nothing here ever changes one after it is
built. Edits go through ``trace(edits=...)``; training (later) works on its own copy.
"""
from __future__ import annotations

import json
import os
import threading
import uuid
import weakref
from collections import OrderedDict
from functools import lru_cache
from types import MappingProxyType
from typing import Optional

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from ..config import ModelConfig
from ..model.build import build_model
from ..model.gpt import GPT
from ..paths import CHECKPOINTS
from ..perf import BIG_MODEL_PARAMS, in_worker
from ..present.page_context import Entry, trace_for_view
from ..run import edits as edit_specs
from ..run.byte_cache import ByteLRU, nbytes
from ..run.slots import BIG_LOAD
from ..run.trace import Trace
from ..text.tokenizers import TokenizerUnavailable, get_tokenizer

# Models that are not built from a config alone (trained, uploaded or shipped ones), by key, with the
# tokenizer they were made for. Each is registered once and never changed afterwards; a new training
# run or upload gets a new key. Past MAX_REGISTERED models or MAX_REGISTERED_BYTES of weights, the least
# recently used are forgotten here, but a session keeps its own (trained, uploaded) models for as long as it
# lives: ``registered`` finds them in its session state and registers them again.
MAX_REGISTERED = 32
# the largest model gptviz opens (MAX_PARAMS = 600M parameters: 2.4 GB of float32) beside a few small ones; at 2 GB a
# Qwen3-0.6B-shaped folder was let go as soon as a shipped model was registered beside it (the bench, 2026-11-27)
MAX_REGISTERED_BYTES = 3_000_000_000
OWN_MODELS = "gptviz.own_models"  # st.session_state: this session's own models, key -> Entry (most recent last)
LET_GO = "gptviz.own_models.let_go"  # st.session_state: the labels of own models let go, for the next page's notice
# A session's own models together (trained, uploaded, loaded from the hub), in bytes of weights: past it the least
# recently used are let go, with a notice naming them. The newest model is always kept, even alone over the budget
# (an upload is at most MAX_UPLOAD_BYTES). GPTVIZ_SESSION_MODEL_BYTES sets it, between 10 MB and 64 GB.
SESSION_MODEL_BYTES = 1_500_000_000

_REGISTERED: "OrderedDict[str, tuple[Entry, int]]" = OrderedDict()  # key -> (entry, its weights' bytes)
_REGISTER_LOCK = threading.Lock()


def _session_models() -> Optional[dict]:
    """This session's own models, or None outside a session's script run (a test, the bench, a command)."""
    if get_script_run_ctx(suppress_warning=True) is None:
        return None
    return st.session_state.setdefault(OWN_MODELS, {})


def session_model_bytes() -> int:
    """The per-session budget: GPTVIZ_SESSION_MODEL_BYTES (a whole number of bytes), else SESSION_MODEL_BYTES."""
    raw = os.environ.get("GPTVIZ_SESSION_MODEL_BYTES", "").strip()
    if raw.isdigit() and 10_000_000 <= int(raw) <= 64_000_000_000:
        return int(raw)
    return SESSION_MODEL_BYTES


def _keep_own(mine: dict, key: str, entry: Entry) -> None:
    """Keep ``entry`` among this session's own models as the most recent, and let the least recently used others
    go while they are over the session's budget (their labels are kept for the next page's notice)."""
    mine.pop(key, None)
    mine[key] = entry
    sizes = {k: nbytes(e.model) for k, e in mine.items()}
    total, budget, gone = sum(sizes.values()), session_model_bytes(), []
    while len(mine) > 1 and total > budget:
        old = next(iter(mine))
        total -= sizes[old]
        gone.append(mine.pop(old).label or old)
    if gone:
        st.session_state.setdefault(LET_GO, []).extend(gone)


def _store(key: str, entry: Entry) -> None:
    size = nbytes(entry.model)
    with _REGISTER_LOCK:
        _REGISTERED.pop(key, None)
        _REGISTERED[key] = (entry, size)
        total = sum(b for _, b in _REGISTERED.values())
        while len(_REGISTERED) > 1 and (len(_REGISTERED) > MAX_REGISTERED or total > MAX_REGISTERED_BYTES):
            _, (_, gone) = _REGISTERED.popitem(last=False)  # the least recently used
            total -= gone


def register_model(model: GPT, tokenizer=None, label: str = "", meta: Optional[dict] = None,
                   key: Optional[str] = None, own: bool = True) -> str:
    """Keep a model for the pages to show; returns its key. ``own``: the calling session keeps it too (a model
    it trained or uploaded), so it stays loaded while that session lives."""
    key = key or f"m-{uuid.uuid4().hex[:12]}"
    model.eval()
    entry = Entry(model, tokenizer, label, dict(meta or {}))
    _store(key, entry)
    mine = _session_models() if own else None
    if mine is not None:
        _keep_own(mine, key, entry)
    return key


def registered(key: Optional[str]) -> Optional[Entry]:
    """The model registered under ``key`` (used now: the last to be forgotten), or this session's own copy of
    it (registered again) if the shared registry forgot it."""
    if not key:
        return None
    mine = _session_models()
    if mine is not None and key in mine:
        mine[key] = mine.pop(key)  # used now: the last of this session's own models to be let go
    with _REGISTER_LOCK:
        found = _REGISTERED.get(key)
        if found is not None:
            _REGISTERED.move_to_end(key)
            return found[0]
    entry = None if mine is None else mine.get(key)
    if entry is not None:
        _store(key, entry)
    return entry


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
    with _SHIPPED_LOCK:  # loaded once even when a class opens it at once
        if registered(key) is None:
            ck = load_checkpoint(CHECKPOINTS / f"{name}.safetensors")
            register_model(ck.model, ck.tokenizer, f"shipped checkpoint: {name}", ck.meta, key=key, own=False)
    return key


_SHIPPED_LOCK = threading.Lock()


def model_folder_names() -> list[str]:
    """The model folders of the server's models directory (``GPTVIZ_MODELS_DIR``) that links may name."""
    from ..paths import model_folder_names as names

    return names()


def folder_model(name: str) -> str:
    """Open the Hugging Face model folder ``name`` of the server's models directory (``?model=NAME``) and register
    it for every session: read once (one big load at a time), then shared. ``name`` is looked up among the
    directory's folders, never used as a path; every failure is a ValueError."""
    from ..model.pretrained import from_pretrained, model_config
    from ..paths import model_folder

    folder = model_folder(name)
    key = f"folder-{name}"
    if registered(key) is not None:
        return key
    with _FOLDER_LOCK:  # opened once even when a class opens it at once
        if registered(key) is None:
            with BIG_LOAD.hold():
                model, tok = from_pretrained(folder)
            meta = {"source": f"the server's model folder {name!r}", "family": model_config(folder)[1]}
            register_model(model, tok, f"model folder: {name}", meta, key=key, own=False)
    return key


_FOLDER_LOCK = threading.Lock()
HUB_GPT2_KEY = "hub-gpt2"
_HUB_LOCK = threading.Lock()


def hub_gpt2(load) -> str:
    """The key of GPT-2 small from the hub: ``load()`` -> (model, tokenizer) is called once per process, however
    many sessions ask (the model is shared and never changed); a session that asks keeps it too."""
    with _HUB_LOCK:
        entry = registered(HUB_GPT2_KEY)
        if entry is None:
            model, tok = load()
            register_model(model, tok, "GPT-2 small (Hugging Face)", {}, key=HUB_GPT2_KEY)
        else:
            mine = _session_models()
            if mine is not None:
                _keep_own(mine, HUB_GPT2_KEY, entry)
    return HUB_GPT2_KEY


def shipped_names(decoder_only: bool = False) -> list[str]:
    """The checkpoints in checkpoints/ (not the *.snapshots files). ``decoder_only``: leave out
    encoder-decoder models (``config.n_enc_layer >= 0``). The folder is listed again only when its modification
    time changes (a file added, removed or renamed): one ``stat`` on every run, not a listing."""
    try:
        stamp = os.stat(CHECKPOINTS).st_mtime_ns
    except OSError:
        stamp = None
    names = _shipped_listing(stamp)
    return [n for n in names if not decoder_only or _shipped_config(n).get("n_enc_layer", -1) < 0]


@lru_cache(maxsize=4)
def _shipped_listing(stamp: int | None) -> tuple[str, ...]:
    """The checkpoint names in checkpoints/, for the folder as it was at ``stamp`` (its modification time)."""
    return tuple(sorted(p.stem for p in CHECKPOINTS.glob("*.safetensors") if "." not in p.stem))


@lru_cache(maxsize=64)
def _shipped_config(name: str) -> dict:
    """The config in a shipped checkpoint's header, read without loading its weights."""
    from safetensors import safe_open

    with safe_open(str(CHECKPOINTS / f"{name}.safetensors"), framework="pt") as f:
        return json.loads((f.metadata() or {}).get("config", "{}"))


# Models built from a config, shared by every session, least recently used forgotten past this many bytes of
# weights (a class's small models are kilobytes to megabytes; GPT-2 small's shape alone is 0.5 GB). At least the
# largest model gptviz opens (MAX_PARAMS float32 weights: 2.4 GB): a cache that cannot hold it stores nothing, and
# Compare models rebuilt a Qwen3-0.6B shape's untrained twin on every text change (7 of its 9 s, bench 2026-11-27).
MODEL_CACHE_BYTES = 3_000_000_000
_MODELS = ByteLRU(MODEL_CACHE_BYTES, "models")


def model_for(cfg_json: str) -> GPT:
    """The seeded model for a config (JSON of ``ModelConfig.to_dict()``): a ``GPT``, or a
    ``gptviz.model.encoder_decoder.Seq2Seq`` when the config has ``n_enc_layer >= 0``. Built once however many
    sessions ask at once; a big one under the one-big-load-at-a-time slot."""
    def build() -> GPT:
        cfg = ModelConfig.from_dict(json.loads(cfg_json))
        if cfg.num_params() > BIG_MODEL_PARAMS:
            with BIG_LOAD.hold():
                return build_model(cfg)
        return build_model(cfg)

    return _MODELS.get_or_compute(cfg_json, build)


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


def traced(cfg_json: str, model_key: Optional[str], x: tuple, y: Optional[tuple], mask: Optional[tuple],
           edits_key: str, grads: bool, src: Optional[tuple] = None, src_mask: Optional[tuple] = None,
           grad_layer: Optional[int] = None) -> Trace:
    """A trace as numpy arrays, cached. Everything it depends on is in the arguments.

    ``src`` and ``src_mask`` are an encoder-decoder model's source: the token ids its encoder reads and their
    padding mask (1 real, 0 padding), one row per batch row; both None for a decoder-only model, or for one
    whose encoder output is the fixed random tensor (n_enc_layer = 0). A model with an encoder given no source
    reads ``default_source`` (its example), so a page that knows nothing of sources still draws.

    Traces are kept in one cache bounded by bytes (``TRACE_CACHE_BYTES``): a trace of a small model is tiny
    and many are kept; one of a GPT-2-sized model is ~0.1 GB, so only a few are.
    """
    m = registered_model(model_key)
    cfg = m.config if m is not None else ModelConfig.from_dict(json.loads(cfg_json))
    if src is None and cfg.n_enc_layer > 0:
        src, src_mask = default_source(model_key, x, cfg)
    big = cfg.num_params() > BIG_MODEL_PARAMS
    fn = _traced_big if big else _traced_small
    # read-only: a trace is one object shared by every session that asks for it
    return fn(cfg_json, model_key, x, y, mask, edits_key, grads, src, src_mask, grad_layer)


def traced_prompt(cfg_json: str, model_key: Optional[str], ids) -> Trace:
    """The cached trace of one prompt (a single row, no targets) on the model's own weights, without edits: what
    Generation and activation patching read."""
    return traced(cfg_json, model_key, (tuple(int(i) for i in ids),), None, None, edit_specs.spec_key(None), False)


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


def _compute_trace(cfg_json, model_key, x, y, mask, edits_key, grads, src=None, src_mask=None,
                   grad_layer=None) -> Trace:
    """The trace (frozen by trace_for_view), worked out in one of the process's long-lived worker threads
    (``gptviz.perf.in_worker``): their memory is reused trace after trace, where each script run's new thread faulted
    in fresh pages. The model is found here, in the caller's thread: a session's own models are in its session
    state."""
    model = get_model(cfg_json, model_key)
    return in_worker(lambda: trace_for_view(model, x, y, mask, edits_key, grads, src, src_mask, grad_layer))


# Traces, shared by every session (frozen: read-only arrays), least recently used forgotten past this many
# bytes. A trace of the class's small models is tens of kilobytes; one of GPT-2 small at the app's token cap
# ~0.1 GB (0.17 GB with gradients), so a few of those and thousands of small ones fit.
TRACE_CACHE_BYTES = 1_500_000_000
_TRACES = ByteLRU(TRACE_CACHE_BYTES, "traces")


def _traced_small(*args) -> Trace:
    return _TRACES.get_or_compute(args, lambda: _compute_trace(*args))


def _traced_big(*args) -> Trace:
    cached = _TRACES.get(args)
    if cached is not None:
        return cached
    with st.spinner("Running the big model…"):
        return _TRACES.get_or_compute(args, lambda: _compute_trace(*args))


@st.cache_resource(max_entries=32, show_spinner=False)
def probe_scores(cfg_json: str, model_key: Optional[str], n: Optional[int] = None, batch: Optional[int] = None,
                 seed: int = 0) -> MappingProxyType:
    """The head detector's repeated-random probe (one forward pass of ``batch`` rows), cached per model.

    One object shared by every session, so it is read-only: a mapping that can't be assigned to, whose score arrays
    can't be written. (It was ``st.cache_data``, which unpickles a copy on every call: 0.3 ms of every run of
    Attention.)"""
    from ..interp.head_detector import PROBE_N, PROBE_ROWS, probe

    out = probe(get_model(cfg_json, model_key), n=n or PROBE_N, batch=batch or PROBE_ROWS, seed=seed)
    for a in out["scores"].values():
        a.setflags(write=False)
    out["scores"] = MappingProxyType(out["scores"])
    return MappingProxyType(out)
