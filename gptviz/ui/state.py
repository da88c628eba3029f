"""Shared settings: one dict in ``st.session_state`` that outlives Streamlit's page-scoped widget state,
kept in step with the URL so a link opens exactly the same view.
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np
import streamlit as st

from ..config import PRESETS
from ..present import page_context, url_params
from ..present.page_context import (
    CONFIG_FIELDS,
    FOLDER_PREFIX,
    URL_FIELDS,
    URL_NOTICES,
    _config_settings,
    defaults,
    encode_source,
)
from ..text.tokenizers import token_labels

KEY = "gptviz.settings"
PAGE_PARAMS = url_params.PAGE_PARAMS  # address-bar parameters a page owns (the Lessons page)
WIDGET = "w."  # prefix of the sidebar widgets' own keys

def settings() -> dict[str, Any]:
    """This session's settings. The first call in a session reads the URL (a shared link), every value checked
    and clamped by ``url_params.read`` before anything is built; its notices are shown by ``resolve``."""
    if KEY not in st.session_state:
        try:
            params = st.query_params.to_dict()
        except Exception:  # noqa: BLE001 - no URL outside a browser
            params = {}
        s, notices = url_params.read(params)
        s[URL_NOTICES] = notices
        st.session_state[KEY] = s
    return st.session_state[KEY]


def write_url(s: dict[str, Any]) -> None:
    """Put the non-default settings in the address bar, so the link can be shared."""
    base = defaults()
    opening = base["preset"]
    if s.get("preset") in PRESETS:
        base.update(_config_settings(PRESETS[s["preset"]]))
    want = {f: str(s[f]) for f in URL_FIELDS if f in s and (f == "preset" or s[f] != base.get(f))}
    if want.get("preset") == opening and len(want) == 1:
        want = {}
    if want.get("preset", "").startswith(FOLDER_PREFIX):  # a model folder is linked by its name alone
        want[url_params.MODEL_PARAM] = want.pop("preset")[len(FOLDER_PREFIX):]
    try:
        current = st.query_params.to_dict()
        want.update({k: v for k, v in current.items() if k in PAGE_PARAMS})
        if current != want:
            st.query_params.from_dict(want)
    except Exception:  # noqa: BLE001 - no address bar outside a browser
        pass


def set_address(values: dict[str, Optional[str]]) -> None:
    """Put a page's own parameters in the address bar (None removes one), writing only what changed, so a reload or
    a shared link reopens the same view. Outside a browser (a test, a script) there is no address bar: nothing."""
    try:
        for k, v in values.items():
            if v is None:
                if k in st.query_params:
                    del st.query_params[k]
            elif st.query_params.get(k) != v:
                st.query_params[k] = v
    except Exception:  # noqa: BLE001 - no address bar outside a browser
        pass


def apply_preset(s: dict[str, Any], name: str) -> None:
    page_context.apply_preset(s, name)
    for field in CONFIG_FIELDS:
        st.session_state.pop(WIDGET + field, None)


def reset() -> None:
    """Back to the defaults: settings, edits, the sidebar's widgets, and the URL."""
    for k in list(st.session_state.keys()):
        if k == KEY or str(k).startswith(WIDGET) or str(k).startswith("gptviz."):
            del st.session_state[k]
    try:
        st.query_params.clear()
    except Exception:  # noqa: BLE001 - no address bar outside a browser
        pass




# --------------------------------------------------------------------------- an encoder-decoder model's source
# The settings key ``source`` holds the text an encoder reads (one line per batch row); the sidebar's text is
# what the decoder reads. For the reversal task the decoder's text follows from the source (``^`` then the
# reversal so far, teacher forcing), so setting the source sets both.
SOURCE = "source"


def reverse_task():
    from ..training.tasks import ReverseTask

    return ReverseTask()


def model_task(ctx) -> str:
    """The task the shown model was trained on ("" for a fresh one)."""
    return str((ctx.entry.meta.get("task") if ctx.entry is not None else "") or "")


def default_source(ctx) -> str:
    """The source a model with an encoder starts from: its checkpoint's example, else the reversal task's."""
    ex = ctx.entry.meta.get("example") if ctx.entry is not None else None
    return str(ex) if ex else reverse_task().example()[: ctx.cfg.enc_len]


def decoder_text(ctx, source: str) -> Optional[str]:
    """What the decoder reads for ``source`` (every line), when the model's task says so (reversal), else None.

    Each line is first cut to what the encoder can read (known tokens, at most ``enc_len`` of them), so the
    decoder reverses exactly the letters the encoder sees."""
    if model_task(ctx) != "reverse":
        return None
    task = reverse_task()
    lines = []
    for line in source.splitlines():
        ids = [i for i in ctx.tok.encode(line) if 0 <= i < ctx.cfg.vocab_size][: ctx.cfg.enc_len]
        if ids:
            lines.append(task.decoder_text(ctx.tok.decode(ids)))
    return "\n".join(lines) or None


class _SourceStore:
    """The store a Ctx traces through, with the source added to every trace (see ``use_source``)."""

    def __init__(self, store, src: tuple, src_mask: tuple):
        self._store, self._src = store, (src, src_mask)

    def __getattr__(self, name):
        return getattr(self._store, name)

    def traced(self, *args, **kw):
        return self._store.traced(*args, *self._src, **kw) if len(args) == 7 else self._store.traced(*args, **kw)


def source_batch(ctx):
    """The source the shown model's encoder reads (a ``Batch``, one row per batch row), or None (a
    decoder-only model, or a fixed random encoder output). ``ctx.source_batch`` when ``session.resolve``
    provides it; else worked out here from the settings' ``source``."""
    if hasattr(ctx, "source_batch"):
        return ctx.source_batch
    cached = ctx.__dict__.get("_source_batch", False)
    if cached is not False:
        return cached
    src, notes = encode_source(ctx.tok, ctx.cfg, ctx.s.get(SOURCE) or default_source(ctx), ctx.batch.x.shape[0])
    ctx.__dict__["_source_batch"] = src
    ctx.__dict__["_source_notes"] = notes
    return src


def source_notes(ctx) -> list[str]:
    """What was changed on the way when the source was encoded here (cut, characters left out)."""
    return list(ctx.__dict__.get("_source_notes", []))


def use_source(ctx):
    """Make ``ctx`` show its model on the session's source; returns the source batch (None without an encoder).

    The first time a model with an encoder is shown, the source starts as its example (and, for the reversal
    task, the decoder's text as the matching teacher-forced text: a rerun). Until ``session.resolve`` carries
    the source into the Ctx (``ctx.source_batch``), the Ctx's traces are routed through a store that adds it.
    """
    if ctx.cfg.n_enc_layer < 1:
        return None
    s = ctx.s
    if not s.get(SOURCE) or (ctx.entry is not None and s.get("text") == ctx.entry.meta.get("example")
                             and ctx.entry.meta.get("decoder_example")):
        s[SOURCE] = s.get(SOURCE) or default_source(ctx)
        want = decoder_text(ctx, s[SOURCE])
        if want and want != s.get("text"):
            s["text"] = want
            st.rerun()
    src = source_batch(ctx)
    if src is not None and not hasattr(ctx, "source_batch") and not isinstance(ctx.store, _SourceStore):
        ctx.store = _SourceStore(ctx.store, _tup(src.x), _tup(src.attention_mask))
        ctx._traces.clear()
    return src


def source_keys(ctx, b: Optional[int] = None) -> tuple[Optional[list[str]], Optional[np.ndarray]]:
    """(labels, padded) of the encoder positions for batch row ``b``: the source's tokens and an (S,) bool
    array, True at padding (None if there is none); ``(None, None)`` for a fixed random encoder output."""
    src = source_batch(ctx)
    if src is None:
        return None, None
    b = ctx.b if b is None else min(b, src.x.shape[0] - 1)
    labels = token_labels(ctx.tok, src.x[b].tolist())
    pad = np.asarray(src.attention_mask[b]) == 0
    return labels, (pad if pad.any() else None)


def set_source(s: dict[str, Any], widget_key: str, ctx) -> None:
    """on_change of a source box: the new source and, for the reversal task, the decoder's matching text."""
    s[SOURCE], note = url_params.typed_text("source", st.session_state[widget_key])
    if note is not None:
        s[URL_NOTICES] = [*s.get(URL_NOTICES, []), note]
        st.session_state[widget_key] = s[SOURCE]
    want = decoder_text(ctx, s[SOURCE])
    if want:
        s["text"] = want
    s["id_edits"] = {}  # token edits belong to the old text


def _tup(t) -> tuple:
    return tuple(map(tuple, t.tolist()))
