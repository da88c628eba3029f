"""Two models on one text: what changed, step by step and head by head.

Model A and model B read the same token ids; their traces are compared hook by hook. Nothing here runs a model
(the caller traces both, so the app can serve the traces from its cache) and nothing draws.

- ``mismatch(tok_a, tok_b, tr_a, tr_b)``: why the two cannot be compared (another tokenizer, another step list or
  another shape at some step), or None;
- ``step_difference(a, b)``: B − A for one recorded step (NaN where either side is masked, -inf);
- ``head_changes(tr_a, tr_b, ...)``: per layer and head, how far B's attention pattern is from A's on this text,
  as the mean over query positions of a distance between the two rows (two probability distributions over keys):
  total variation ½ Σ_k |p_k − q_k| or the Jensen–Shannon distance in bits (both 0 for the same row, 1 at most);
- ``ranked_heads(changes)``: the heads, most changed first.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Optional

import numpy as np

from ..model.hook_names import act_name

TOTAL_VARIATION = "total variation"
JENSEN_SHANNON = "Jensen–Shannon"
MEASURES = (TOTAL_VARIATION, JENSEN_SHANNON)
# The measures in LaTeX: p = A's attention row of query i, q = B's, over the keys k ≤ i; averaged over the T queries.
FORMULAS = {
    TOTAL_VARIATION: r"\Delta_{\ell,h} = \frac{1}{T}\sum_{i=1}^{T} \tfrac12 \sum_{k \le i}"
                     r"\bigl|A^{\ell,h}_{ik} - B^{\ell,h}_{ik}\bigr|",
    JENSEN_SHANNON: r"\Delta_{\ell,h} = \frac{1}{T}\sum_{i=1}^{T} \Bigl(\tfrac12 \mathrm{KL}_2(A_i\,\|\,M_i) + "
                    r"\tfrac12 \mathrm{KL}_2(B_i\,\|\,M_i)\Bigr),\quad M_i = \tfrac12 (A_i + B_i)",
}
MAX_VOCAB_COMPARED = 300_000  # a tokenizer compared token by token (no name or saved form to compare) up to this


def _np(x) -> np.ndarray:
    return np.asarray(x.detach().cpu() if hasattr(x, "detach") else x, dtype=np.float64)


# --------------------------------------------------------------------------- can the two be compared?
def tokenizer_fingerprint(tok) -> Any:
    """What makes a tokenizer this tokenizer: its saved form (char BPE: alphabet, merges, lower-casing), else its
    kind, name and size, else every token's string."""
    if hasattr(tok, "to_dict"):
        return ("saved", type(tok).__name__, json.dumps(tok.to_dict(), sort_keys=True, default=str))
    name = getattr(tok, "name", None)
    if isinstance(name, str) and name:
        return ("named", type(tok).__name__, name, int(tok.vocab_size))
    n = int(tok.vocab_size)
    return ("tokens", type(tok).__name__, n, tuple(tok.token_str(i) for i in range(min(n, MAX_VOCAB_COMPARED))))


def same_tokenizer(tok_a, tok_b) -> bool:
    return tok_a is tok_b or tokenizer_fingerprint(tok_a) == tokenizer_fingerprint(tok_b)


def shape_mismatch(tr_a: Mapping, tr_b: Mapping) -> Optional[str]:
    """Why the two traces cannot be compared step by step (a step only one has, a step of another shape), or None."""
    only_a = [n for n in tr_a if n not in tr_b]
    only_b = [n for n in tr_b if n not in tr_a]
    if only_a or only_b:
        name, who = (only_a[0], "A") if only_a else (only_b[0], "B")
        return (f"the two models record different steps (only model {who} has `{name}`, and "
                f"{len(only_a) + len(only_b) - 1} more differ): they are not the same architecture")
    for n in tr_a:
        sa, sb = _shape(tr_a, n), _shape(tr_b, n)
        if sa != sb:
            return f"the step `{n}` has shape {sa} in model A but {sb} in model B: they are not the same shape"
    return None


def _shape(tr: Mapping, name: str) -> tuple[int, ...]:
    """A step's shape, read without working out a slim trace's step (``Trace.shape``)."""
    shape = getattr(tr, "shape", None)
    return tuple(shape(name)) if callable(shape) else tuple(np.shape(tr[name]))


def mismatch(tok_a, tok_b, tr_a: Mapping, tr_b: Mapping) -> Optional[str]:
    """Why models A and B (their tokenizers, their traces of one text) cannot be compared, or None."""
    if not same_tokenizer(tok_a, tok_b):
        return ("the two models use different tokenizers, so the same text is not the same token ids: compare "
                "models made with one tokenizer")
    return shape_mismatch(tr_a, tr_b)


# --------------------------------------------------------------------------- one step
def step_difference(a, b) -> np.ndarray:
    """B − A, elementwise, as float64; NaN where either value is not finite (a masked score, -inf)."""
    va, vb = _np(a), _np(b)
    if va.shape != vb.shape:
        raise ValueError(f"the two steps have shapes {va.shape} and {vb.shape}")
    with np.errstate(invalid="ignore"):
        d = vb - va
    return np.where(np.isfinite(va) & np.isfinite(vb), d, np.nan)


# --------------------------------------------------------------------------- head by head
def total_variation(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """½ Σ |p − q| over the last axis: 0 for the same distribution, 1 for disjoint ones."""
    return 0.5 * np.abs(_np(p) - _np(q)).sum(-1)


def _kl2(p: np.ndarray, m: np.ndarray) -> np.ndarray:
    safe = np.where(p > 0, p, 1.0)
    return np.where(p > 0, p * np.log2(safe / np.where(m > 0, m, 1.0)), 0.0).sum(-1)


def jensen_shannon(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """The Jensen–Shannon divergence in bits over the last axis: 0 for the same distribution, 1 for disjoint ones."""
    p, q = np.clip(_np(p), 0.0, None), np.clip(_np(q), 0.0, None)
    m = 0.5 * (p + q)
    return np.clip(0.5 * _kl2(p, m) + 0.5 * _kl2(q, m), 0.0, 1.0)


DISTANCES = {TOTAL_VARIATION: total_variation, JENSEN_SHANNON: jensen_shannon}


def head_changes(tr_a: Mapping, tr_b: Mapping, batch: int = 0, n_pos: Optional[int] = None,
                 measure: str = TOTAL_VARIATION) -> np.ndarray:
    """(n_layer, n_head): for each head, the mean over this row's first ``n_pos`` query positions of the distance
    (``measure``: one of ``MEASURES``) between A's and B's attention rows. A layer whose patterns the traces lack
    is NaN."""
    if measure not in DISTANCES:
        raise ValueError(f"unknown measure {measure!r}: choose one of {', '.join(MEASURES)}")
    dist = DISTANCES[measure]
    layers = []
    n_layer = _n_layers(tr_a)
    for layer in range(n_layer):
        name = act_name("pattern", layer)
        pa, pb = _np(tr_a[name])[batch], _np(tr_b[name])[batch]  # (head, query, key)
        T = pa.shape[1] if n_pos is None else max(1, min(int(n_pos), pa.shape[1]))
        layers.append(dist(pa[:, :T, :T], pb[:, :T, :T]).mean(-1))
    return np.stack(layers) if layers else np.zeros((0, 0))


def _n_layers(tr: Mapping) -> int:
    n = 0
    while act_name("pattern", n) in tr:
        n += 1
    return n


def ranked_heads(changes: np.ndarray) -> list[tuple[int, int, float]]:
    """(layer, head, change) for every head, the most changed first (ties: lower layer, then lower head)."""
    c = np.asarray(changes, dtype=float)
    out = [(layer, head, float(c[layer, head])) for layer in range(c.shape[0]) for head in range(c.shape[1])]
    return sorted(out, key=lambda t: (-t[2] if np.isfinite(t[2]) else np.inf, t[0], t[1]))
