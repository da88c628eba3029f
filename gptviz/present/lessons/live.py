"""What a question reads: the live trace of the view shown, with the labels of its tokens and vocabulary."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
import torch

from ...text.tokenizers import token_labels


@dataclass
class Live:
    """What a question reads: the live trace and how to label it. ``b`` is the batch row shown."""

    trace: Any
    tokens: list[str]  # labels of row b's real positions
    vocab: list[str]  # label of every token id
    b: int = 0
    layer: int = 0
    head: int = 0
    model: Any = None  # for questions that probe the model (induction heads)
    tok: Any = None  # for questions that quote the text
    scored: Any = None  # (B, T) targets with -100 where the model's task does not score, or None

    @property
    def n_pos(self) -> int:
        return len(self.tokens)

    def arr(self, name: str) -> np.ndarray:
        v = self.trace[name]
        return v.detach().cpu().numpy() if isinstance(v, torch.Tensor) else np.asarray(v)

    @property
    def ids(self) -> list[int]:
        idx = self.trace.idx
        idx = idx.detach().cpu().numpy() if isinstance(idx, torch.Tensor) else np.asarray(idx)
        return [int(i) for i in idx[self.b, : self.n_pos]]

    @property
    def targets(self) -> np.ndarray:
        y = self.trace.targets
        y = y.detach().cpu().numpy() if isinstance(y, torch.Tensor) else np.asarray(y)
        return y[self.b, : self.n_pos]

    @property
    def vocab_size(self) -> int:
        return int(self.trace.config.vocab_size)

    def text(self, upto: Optional[int] = None) -> str:
        ids = self.ids[: None if upto is None else upto + 1]
        if self.tok is not None:
            return self.tok.decode(ids)
        return "".join(self.vocab[i] for i in ids)


def live_from_trace(tr, tok, b: int = 0, layer: int = 0, head: int = 0, model=None, scored=None) -> Live:
    """A Live for a trace made outside the app (tests, the report)."""
    mask = tr.attention_mask
    mask = mask.detach().cpu().numpy() if isinstance(mask, torch.Tensor) else np.asarray(mask)
    idx = tr.idx.detach().cpu().numpy() if isinstance(tr.idx, torch.Tensor) else np.asarray(tr.idx)
    n = int(mask[b].sum()) if mask is not None and mask.ndim == 2 else idx.shape[1]
    vocab = [tok.token_str(i) for i in range(tok.vocab_size)]
    return Live(tr, token_labels(tok, idx[b, :n].tolist()), vocab, b, layer, head, model, tok, scored)
