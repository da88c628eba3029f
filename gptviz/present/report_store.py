"""What the HTML report reads models, tokenizers and traces from: the app's cached resources, without Streamlit."""
from __future__ import annotations

import json
from typing import Any, Optional

from ..config import ModelConfig
from ..model.build import build_model
from ..model.checkpoint import load_checkpoint
from ..paths import CHECKPOINTS
from ..run.trace import Trace
from ..text.tokenizers import TokenizerUnavailable, get_tokenizer
from . import page_context

Entry = page_context.Entry


def shipped_names() -> list[str]:
    """The checkpoints in checkpoints/ (not the *.snapshots files)."""
    return sorted(p.stem for p in CHECKPOINTS.glob("*.safetensors") if "." not in p.stem)


class Store:
    """What ``session.resolve`` needs from the app's ``gptviz.ui.resources``, without Streamlit: models by
    config, shipped checkpoints, tokenizers, traces. Plain dicts for caches: one store serves one report
    (or one process), so nothing is ever evicted."""

    def __init__(self):
        self._models: dict[str, Any] = {}
        self._registered: dict[str, Entry] = {}
        self._tokenizers: dict[tuple, tuple] = {}
        self._labels: dict[int, list[str]] = {}
        self._traces: dict[tuple, Trace] = {}

    def registered(self, key: Optional[str]) -> Optional[Entry]:
        return self._registered.get(key) if key else None

    def shipped_checkpoint(self, name: str) -> str:
        names = shipped_names()  # only a plain name found in checkpoints/: never a path from a link
        if not isinstance(name, str) or name not in names:
            raise ValueError(f"there is no shipped checkpoint of that name (choose one of {', '.join(names)})")
        key = f"ckpt-{name}"
        if key not in self._registered:
            ck = load_checkpoint(CHECKPOINTS / f"{name}.safetensors")
            ck.model.eval()
            self._registered[key] = Entry(ck.model, ck.tokenizer, f"shipped checkpoint: {name}", dict(ck.meta))
        return key

    def get_model(self, cfg_json: str, model_key: Optional[str] = None):
        e = self.registered(model_key)
        if e is not None:
            return e.model
        if cfg_json not in self._models:
            self._models[cfg_json] = build_model(ModelConfig.from_dict(json.loads(cfg_json)))
        return self._models[cfg_json]

    def tokenizer_for(self, name: str, merges: int, lowercase: bool):
        """(tokenizer, None) or (None, why it could not load), as the app's."""
        k = (name, merges, lowercase)
        if k not in self._tokenizers:
            try:
                self._tokenizers[k] = (get_tokenizer(name, num_merges=merges, lowercase=lowercase), None)
            except TokenizerUnavailable as exc:
                self._tokenizers[k] = (None, str(exc))
        return self._tokenizers[k]

    def vocab_labels(self, tok) -> list[str]:
        if id(tok) not in self._labels:
            self._labels[id(tok)] = [tok.token_str(i) for i in range(tok.vocab_size)]
        return self._labels[id(tok)]

    def default_source(self, model_key: Optional[str], x: tuple, cfg: ModelConfig) -> tuple[tuple, tuple]:
        """A model with an encoder given no source reads its checkpoint's example, else the decoder's tokens
        (as ``gptviz.ui.resources.default_source``)."""
        e = self.registered(model_key)
        ids: list[int] = []
        if e is not None and e.tokenizer is not None and e.meta.get("example"):
            ids = [i for i in e.tokenizer.encode(str(e.meta["example"]).splitlines()[0]) if 0 <= i < cfg.vocab_size]
        rows = [tuple(list(ids or row)[: cfg.enc_len]) for row in x]
        S = max(len(r) for r in rows)
        pad = rows[0][0] if rows[0] else 0
        return (tuple(r + (pad,) * (S - len(r)) for r in rows),
                tuple((1,) * len(r) + (0,) * (S - len(r)) for r in rows))

    def traced(self, cfg_json: str, model_key: Optional[str], x: tuple, y: Optional[tuple], mask: Optional[tuple],
               edits_key: str, grads: bool, src: Optional[tuple] = None, src_mask: Optional[tuple] = None,
               grad_layer: Optional[int] = None) -> Trace:
        """A trace as numpy arrays (the arguments as ``gptviz.ui.resources.traced``)."""
        k = (cfg_json, model_key, x, y, mask, edits_key, grads, src, src_mask, grad_layer)
        if k in self._traces:
            return self._traces[k]
        model = self.get_model(cfg_json, model_key)
        if src is None and model.config.n_enc_layer > 0:
            src, src_mask = self.default_source(model_key, x, model.config)
        tr = page_context.trace_for_view(model, x, y, mask, edits_key, grads, src, src_mask, grad_layer)
        self._traces[k] = tr
        return tr
