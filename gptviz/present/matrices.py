"""Turn a recorded step into the 2-D slice a heatmap shows: values, row and column labels, masked cells.

No Streamlit and no Plotly here, so the slicing rules are tested on their own.
"""
from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from ..run.step_meta import MASKED, StepMeta

MAX_COLS = 256  # a heatmap wider than this is paged
TOPK_DEFAULT = 12


@dataclass
class Matrix:
    values: np.ndarray  # (rows, cols) float; masked cells hold NaN
    rows: list[str]
    cols: list[str]
    row_title: str
    col_title: str
    kind: str
    masked: Optional[np.ndarray] = None  # (rows, cols) bool
    note: str = ""  # e.g. "columns 0-255 of 3072"
    hover_rows: Optional[list[str]] = None  # full descriptions for the hover (e.g. "pos 3: 'the'")
    hover_cols: Optional[list[str]] = None


def token_hover(labels: Sequence[str]) -> list[str]:
    return [f"{i}: '{t}'" for i, t in enumerate(labels)]


def _dim_labels(n: int, prefix: str = "") -> list[str]:
    return [f"{prefix}{i}" for i in range(n)]


def enc_labels(n: int) -> list[str]:
    """Labels for encoder positions that have no tokens (a fixed random encoder output): "enc 0" … "enc n-1"."""
    return [f"enc {i}" for i in range(n)]


def _column_title(info) -> str:
    """The one column's label of a (pos,) step: its title without the layer, or its hook name's words."""
    title = getattr(info, "title", "")
    if not title:
        return info.name.rsplit("hook_", 1)[-1].replace("_", " ")
    return title.split(" ", 1)[-1] if info.layer is not None else title


def step_matrix(
    value: np.ndarray,
    info: StepMeta,
    tokens: Sequence[str],
    batch: int = 0,
    head: Optional[int] = None,
    col_page: int = 0,
    max_cols: int = MAX_COLS,
    masked: Optional[np.ndarray] = None,
    n_pos: Optional[int] = None,
    key_tokens: Optional[Sequence[str]] = None,
    key_mask: Optional[np.ndarray] = None,
) -> Matrix:
    """The 2-D view of one step for one batch row.

    ``head``: a head for per-head steps; None shows every head side by side (or, for score
    steps, head 0). ``tokens`` label the positions. ``masked`` (T, T) marks cells attention may not
    use. ``n_pos`` drops trailing padded positions. Wide steps are paged ``max_cols`` columns at a time.

    Steps over an encoder-decoder model's encoder positions (axis ``enc_pos``: cross-attention's keys, values
    and its T × S scores and weights, the encoder output) take the keys side from ``key_tokens`` (the source's
    tokens, one per real source position; default "enc 0" … "enc S-1") and ``key_mask`` (S,) bool, True at
    padded source positions, greyed in every row. Cross-attention has no causal triangle, so ``masked`` (the
    decoder's own T × T mask) is not used for them.
    """
    axes = info.axes
    v = np.asarray(value)
    toks = list(tokens)
    kind = info.kind
    mask = None
    if axes == ():
        m = Matrix(v.reshape(1, 1).astype(float), ["loss"], [""], "", "", kind)
        return m
    if axes[0] == "batch":
        v = v[batch]
        axes = axes[1:]
    if axes[0] == "head" and axes[-1] == "enc_pos":  # (head, query_pos, enc_pos): T decoder rows × S source columns
        v = v[head or 0]
        T = v.shape[0] if n_pos is None else min(n_pos, v.shape[0])
        S, keys = _keys_side(v.shape[1], key_tokens)
        v = v[:T, :S].astype(float)
        if key_mask is not None:
            km = np.asarray(key_mask, dtype=bool)[:S]
            mask = np.broadcast_to(np.pad(km, (0, S - len(km))), (T, S)).copy()
        if kind == MASKED:
            mask = np.isneginf(v) if mask is None else (mask | np.isneginf(v))
        if mask is not None and not mask.any():
            mask = None
        if mask is not None:
            v = np.where(mask, np.nan, v)
        return Matrix(v, toks[:T], keys, "query (decoder)", "key (encoder)", kind, mask, "",
                      token_hover(toks[:T]), token_hover(keys))
    if axes[0] == "head":  # (head, query_pos, key_pos)
        v = v[head or 0]
        T = v.shape[0] if n_pos is None else n_pos
        v = v[:T, :T].astype(float)
        mask = None if masked is None else np.asarray(masked)[:T, :T]
        if kind == MASKED:
            mask = np.isneginf(v) if mask is None else (mask | np.isneginf(v))
        if mask is not None:
            v = np.where(mask, np.nan, v)
        return Matrix(v, toks[:T], toks[:T], "query", "key", kind, mask, "",
                      token_hover(toks[:T]), token_hover(toks[:T]))
    if axes[0] == "enc_pos":  # one row per source position
        T, rows = _keys_side(v.shape[0], key_tokens)
        row_title = "source position"
    else:
        T = v.shape[0] if n_pos is None else min(n_pos, v.shape[0])
        rows = toks[:T]
        row_title = "position"
    v = v[:T]
    if len(axes) == 1:  # (pos,)
        v = v[:, None].astype(float)
        cols = [_column_title(info)]
        return Matrix(v, rows, cols, row_title, "", kind, None, "", token_hover(rows), cols)
    if len(axes) == 3:  # (pos, head, d_head)
        nh, hs = v.shape[1], v.shape[2]
        name = "kv" if info.head_group > 1 else "h"  # grouped-query keys and values: query head h reads kv h // group
        if head is not None:
            h = min(head // info.head_group, nh - 1)
            v = v[:, h]
            cols = _dim_labels(hs, f"{name}{h}.")
        else:
            v = v.reshape(T, nh * hs)
            cols = [f"{name}{h}.{d}" for h in range(nh) for d in range(hs)]
        col_title = "head.dim"
    else:
        last = axes[-1]
        n = v.shape[1]
        if last == "qkv" and info.qkv_split:  # grouped-query: q is wider than k and v
            cols = [f"{w}{i}" for w, width in zip("qkv", info.qkv_split) for i in range(width)]
        elif last == "qkv":
            third = n // 3
            cols = [f"{'qkv'[i // third]}{i % third}" for i in range(n)]
        elif last == "scale":
            cols = ["σ" if "ln" in info.name else "scale"]
        else:
            cols = _dim_labels(n)
        col_title = {"d_model": "d_model dim", "d_mlp": "hidden unit", "qkv": "q | k | v dim",
                     "scale": "", "vocab": "token id"}.get(last, last)
    v = v.astype(float)
    note = ""
    if v.shape[1] > max_cols:
        pages = (v.shape[1] + max_cols - 1) // max_cols
        col_page = max(0, min(col_page, pages - 1))
        lo, hi = col_page * max_cols, min(v.shape[1], (col_page + 1) * max_cols)
        note = f"columns {lo}–{hi - 1} of {v.shape[1]} (page {col_page + 1} of {pages})"
        v = v[:, lo:hi]
        cols = cols[lo:hi]
    return Matrix(v, rows, cols, row_title, col_title, kind, None, note, token_hover(rows), None)


def _keys_side(S: int, key_tokens: Optional[Sequence[str]]) -> tuple[int, list[str]]:
    """How many source positions to show and their labels: the source's tokens if given, else "enc s"."""
    if key_tokens is None:
        return S, enc_labels(S)
    keys = list(key_tokens)[:S]
    return len(keys), keys


def page_count(n_cols: int, max_cols: int = MAX_COLS) -> int:
    return max(1, (n_cols + max_cols - 1) // max_cols)


def vocab_columns(logits: np.ndarray, targets: Optional[np.ndarray], k: int = TOPK_DEFAULT) -> np.ndarray:
    """For a big vocabulary: the ids to show as columns — the top-k at any position, plus every target.

    logits: (T, V); targets: (T,) with -100 where none. Sorted by id.
    """
    V = logits.shape[-1]
    k = min(k, V)
    if k < V:  # torch's top-k: (T, k) ids, where argpartition made a (T, V) table of ids, 155 MB for Qwen3 at T = 128
        import torch

        with warnings.catch_warnings():  # a cached trace's arrays are read-only; top-k only reads them
            warnings.filterwarnings("ignore", "The given NumPy array is not writable", UserWarning)
            top = torch.from_numpy(np.asarray(logits)).topk(k, dim=-1, sorted=False).indices.numpy()
    else:
        top = np.tile(np.arange(V), (logits.shape[0], 1))
    ids = set(top.ravel().tolist())
    if targets is not None:
        ids |= {int(t) for t in np.asarray(targets).ravel() if 0 <= t < V}
    return np.array(sorted(ids), dtype=np.int64)


def vocab_matrix(values: np.ndarray, ids: np.ndarray, id_labels: Sequence[str], tokens: Sequence[str],
                 kind: str, targets: Optional[np.ndarray] = None) -> Matrix:
    """(T, V) values restricted to columns ``ids``; targets are marked in the column hover."""
    v = np.asarray(values)[:, ids].astype(float)
    cols = [f"{id_labels[i]}" for i in ids]
    hover_cols = [f"id {i}: '{id_labels[i]}'" for i in ids]
    return Matrix(v, list(tokens), cols, "position", "next token", kind, None, "", token_hover(tokens), hover_cols)


def top_predictions(probs: np.ndarray, k: int, id_labels: Sequence[str]) -> list[list[tuple[str, float]]]:
    """For each position, the k most likely next tokens as (label, probability), best first."""
    V = probs.shape[-1]
    k = min(k, V)
    if k == V:
        order = np.argsort(-probs, axis=-1, kind="stable")
    else:  # only the candidates (every id at least as likely as the k-th) are sorted: a long text × 50k ids
        import torch

        with warnings.catch_warnings():  # the k-th largest of each row, without partitioning a copy of the table
            warnings.filterwarnings("ignore", "The given NumPy array is not writable", UserWarning)
            kth = torch.from_numpy(np.asarray(probs)).topk(k, dim=-1).values[:, -1].numpy()
        order = [c[np.argsort(-probs[t, c], kind="stable")][:k]
                 for t in range(probs.shape[0]) for c in [np.flatnonzero(probs[t] >= kth[t])]]
    return [[(id_labels[i], float(probs[t, i])) for i in order[t]] for t in range(probs.shape[0])]


def masked_cells(trace, batch: int, name: Optional[str] = None) -> Optional[np.ndarray]:
    """(T, S) bool: the cells one attention may not use in this batch row, from its masked scores.

    ``name``: any step of that attention (e.g. ``blocks.0.cross_attn.hook_pattern``); its sibling
    ``hook_attn_scores`` is read. By default, the decoder's self-attention (T, T: future keys and padding);
    for cross-attention (T, S) only padded source positions are masked. None if the trace has no such step.
    """
    if name is not None:
        scores = name.rsplit(".", 1)[0] + ".hook_attn_scores" if "." in name else None
        if scores is None or scores not in trace:
            return None
        return np.isneginf(np.asarray(trace[scores])[batch, 0])
    for n in trace:
        if _SELF_SCORES.match(n):
            return np.isneginf(np.asarray(trace[n])[batch, 0])
    return None


_SELF_SCORES = re.compile(r"^blocks\.\d+\.attn\.hook_attn_scores$")


def averaging_matrix(T: int) -> np.ndarray:
    """The plain causal average: row t gives 1/(t+1) to every position up to t."""
    m = np.tril(np.ones((T, T)))
    return m / m.sum(axis=1, keepdims=True)


def residual_norms(trace, batch: int, n_pos: Optional[int] = None) -> tuple[np.ndarray, list[str]]:
    """The L2 norm of every position's residual vector at each point of the stream. (stages, T)."""
    names = [n for n in trace if n.endswith(("hook_resid_pre", "hook_resid_mid"))]
    names += [n for n in trace if n.endswith("hook_resid_post")][-1:]
    order = [n for n in trace if n in names]
    rows = [np.linalg.norm(np.asarray(trace[n])[batch], axis=-1) for n in order]
    out = np.stack(rows)
    if n_pos is not None:
        out = out[:, :n_pos]
    labels = [n.replace("blocks.", "L").replace(".hook_", " ") for n in order]
    return out, labels


def embedding_lookup(wte: np.ndarray, ids: Sequence[int], max_vocab_cols: int = 64):
    """Token embedding as a matrix product: one-hot (T, U) × W_E[U] (U, C) = E (T, C).

    For a big vocabulary only the U distinct ids of the text are kept as columns (every other column of
    the one-hot matrix is all zeros). Returns (onehot, rows_of_W_E, product, column_ids).
    """
    ids = np.asarray(ids, dtype=np.int64)
    V = wte.shape[0]
    cols = np.arange(V) if V <= max_vocab_cols else np.unique(ids)
    onehot = (ids[:, None] == cols[None, :]).astype(np.float32)
    rows = np.asarray(wte)[cols]
    return onehot, rows, onehot @ rows, cols


def loss_check(logits: np.ndarray, targets: np.ndarray) -> float:
    """``F.cross_entropy`` on the same logits and targets, computed by PyTorch itself (for comparison)."""
    import torch
    import torch.nn.functional as F

    lg = torch.as_tensor(np.asarray(logits))
    y = torch.as_tensor(np.asarray(targets))
    return float(F.cross_entropy(lg.reshape(-1, lg.shape[-1]), y.reshape(-1), ignore_index=-100))


def gradient_reading(info, grad: np.ndarray, labels: Sequence[str], batch: int = 0, head: Optional[int] = None) -> str:
    """One plain sentence on what this gradient says, naming its largest entry (in ``head``, if given)."""
    g = np.asarray(grad)
    if g.ndim == 0:
        return "The gradient of the loss with respect to itself is 1: this is where the backward pass starts."
    gb = g[batch] if info.axes and info.axes[0] == "batch" else g
    axes = info.axes[1:] if info.axes and info.axes[0] == "batch" else info.axes
    prefix = ""
    if head is not None and "head" in axes:
        k = axes.index("head")
        gb = np.take(gb, head, axis=k)
        axes = axes[:k] + axes[k + 1:]
        prefix = f"head {head}, "
    if not np.any(gb):
        return ("Every entry is 0: nudging this step would not change the loss at all (for example a head that is "
                "switched off, or a masked cell).")
    idx = np.unravel_index(np.argmax(np.abs(gb)), gb.shape)
    where = [prefix.rstrip(", ")] if prefix else []
    for ax, i in zip(axes, idx):
        if ax in ("pos", "query_pos") and i < len(labels):
            where.append(f"{ax.replace('_', ' ')} {i} ('{labels[i]}')")
        elif ax == "key_pos" and i < len(labels):
            where.append(f"key {i} ('{labels[i]}')")
        else:
            where.append(f"{ax.replace('_', ' ')} {i}")
    val = float(gb[idx])
    direction = "lower" if val > 0 else "raise"
    return (f"Each number says how much the loss would rise if that value grew a little. The strongest is at "
            f"{', '.join(where)} ({val:+.3g}): to lower the loss, training would {direction} that value.")


def pattern_with_sink(pattern: np.ndarray, sink: np.ndarray, tokens: Sequence[str],
                      masked: Optional[np.ndarray] = None) -> Matrix:
    """One head's attention weights (T, T) with its sink's weight (T,) as one more key column, named "sink" (GPT-OSS):
    a row's token weights and its sink weight sum to 1, so the token weights visibly sum to less. ``masked`` (T, T)
    marks the keys a query may not see (the sink is never masked)."""
    T = pattern.shape[0]
    v = np.concatenate([np.asarray(pattern, dtype=float), np.asarray(sink, dtype=float).reshape(T, 1)], axis=1)
    mask = None
    if masked is not None:
        mask = np.concatenate([np.asarray(masked, dtype=bool)[:T, :T], np.zeros((T, 1), dtype=bool)], axis=1)
        v = np.where(mask, np.nan, v)
    labels = list(tokens)[:T]
    return Matrix(v, labels, labels + ["sink"], "query", "key", "probability", mask,
                  hover_rows=token_hover(labels), hover_cols=token_hover(labels) + ["the sink: no token, no value"])
