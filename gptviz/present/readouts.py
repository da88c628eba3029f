"""The small computations behind the page sections, kept out of the Streamlit code (no Streamlit here).

Each takes plain arrays, a trace or a model and returns what a section draws.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import torch

from ..run.generation import Distribution, distribution, next_token_logits
from ..run.trace import Trace


def _np(x) -> np.ndarray:
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


def lookup_difference(product: np.ndarray, embedded: np.ndarray) -> float:
    """The largest difference between one-hot(x) × W_E and the looked-up rows W_E[x]."""
    return float(np.abs(np.asarray(product) - np.asarray(embedded)).max())


def target_table(tr: Trace, b: int, T: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For row b's first T positions: p(target), −log p(target) (NaN where there is no target), and the
    targets themselves."""
    y = _np(tr.targets)[b, :T]
    valid = y != -100
    tp = _np(tr.breakdown["target_probs"])[b, :T]
    nll = _np(tr["hook_loss_per_token"])[b, :T]
    return np.where(valid, tp, np.nan), np.where(valid, nll, np.nan), y


def next_distribution(model, ids: Sequence[int], temperature: float, top_k: Optional[int], top_p: Optional[float],
                      show: int) -> tuple[Distribution, list[int]]:
    """How the logits after ``ids`` become the distribution a token is drawn from, and the ``show`` most
    likely token ids before any reshaping (most likely first)."""
    d = distribution(next_token_logits(model, list(ids)), temperature, top_k or None, top_p)
    order = torch.argsort(d.raw, descending=True, stable=True)[:show].tolist()
    return d, order


def top_with(p: np.ndarray, chosen: int, show: int) -> np.ndarray:
    """The ``show`` most likely ids of ``p``, the last swapped for ``chosen`` if it is not among them."""
    p = np.asarray(p)
    top = np.argsort(-p, kind="stable")[:show]
    if chosen not in top:
        top = np.append(top[:-1], chosen)
    return top
