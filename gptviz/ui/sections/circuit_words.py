"""Words for the Circuits page's features: every feature's label and strongest held-out snippets
(``gptviz.interp.feature_labels``), made once per (model, transcoder file, snippet file) version and shared by every
session, for the attribution graph's hover; and the snippet file itself, read once per version, for the feature in
view."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import streamlit as st

from ...interp import feature_labels
from ...interp.transcoder import Transcoder, load_snippets


def snippets_file(transcoder_file: str) -> Path:
    """The snippet file shipped beside a transcoder file."""
    return Path(transcoder_file.replace(".transcoder.safetensors", ".transcoder.snippets.safetensors"))


@st.cache_resource(max_entries=4, show_spinner=False)
def _snippet_file(file: str, mtime: float, n_layer: int) -> Optional[list]:
    """Each layer's snippets as numpy arrays, read once per file version; None when the file is missing or bad."""
    try:
        per_layer, _ = load_snippets(file, n_layer)
        return [{k: v.float().numpy() if v.is_floating_point() else v.numpy() for k, v in d.items()}
                for d in per_layer]
    except (OSError, ValueError, KeyError, RuntimeError):
        return None


def snippet_arrays(transcoder_file: str, n_layer: int) -> Optional[list]:
    """The snippets shipped beside a transcoder, per layer a dict of numpy arrays (``_snippet_file``), or None."""
    path = snippets_file(transcoder_file)
    return _snippet_file(str(path), path.stat().st_mtime, n_layer) if path.is_file() else None


@st.cache_resource(max_entries=4, show_spinner=False)
def _words(model_key: str, file: str, mtime: float, snippets_mtime: float, _model, _tc: Transcoder, _tok, _vocab,
           _per_layer) -> tuple[dict, dict]:
    """(labels, snippets) of every feature of the transcoder, made once per file version: read, never changed."""
    F = _tc.n_features
    ok = _per_layer is not None and all(d["peak"].shape[0] == F for d in _per_layer)
    texts = [_tok.decode([i]) if i < _tok.vocab_size else v for i, v in enumerate(_vocab)]  # text, not labels
    labels = feature_labels.feature_labels(F, _vocab, feature_labels.promoted(_model, _tc), _per_layer if ok else None)
    return labels, feature_labels.feature_snippets(_per_layer, texts) if ok else {}


def words(ctx, file: str, mtime: float, tc: Transcoder) -> tuple[dict, dict]:
    """(layer, feature) -> its label, and (layer, feature) -> its strongest snippets as (before, peak, after) texts,
    for the transcoder in ``file``; ({}, {}) when they cannot be made (the graph is drawn all the same)."""
    per_layer = snippet_arrays(file, tc.n_layer)
    try:
        snippets_mtime = snippets_file(file).stat().st_mtime if per_layer is not None else 0.0
        return _words(str(ctx.model_key), file, mtime, snippets_mtime, ctx.model, tc, ctx.tok, ctx.vocab_labels(),
                      per_layer)
    except Exception:  # noqa: BLE001 - a hover without its words, never a page without its graph
        return {}, {}
