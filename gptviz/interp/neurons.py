"""MLP neurons read over the held-out plays: what makes each one fire, and what it writes.

A neuron is one of the ``d_mlp`` numbers an MLP computes at every position: its activation is the MLP's
``hook_post`` value (``act(x W_in)``; for a gated MLP, SwiGLU, the product ``act(x W_gate) * (x W_in)``).

- ``corpus_windows(tok, vocab_size, n_windows, ctx_len)``: a fixed, bounded slice of the held-out plays
  (``gptviz.text.corpus``, split ``"val"``): ``n_windows`` windows of ``ctx_len`` tokens, their starts spread evenly
  over both plays (each at the start of a line), encoded with the model's own tokenizer.
- ``collect(model, windows)``: every neuron's activation at every position of those windows, (L, N, d_mlp),
  each window run as its own sequence (the model sees only the window's earlier tokens).
- ``summarise(acts, windows)``: per neuron its ``TOP_K`` largest activations (flat positions and values) and a
  ``HIST_BINS``-bin histogram (``numpy.histogram`` over its own min..max): what ships in a small file.
- ``logit_effect(model, layer, n)``: what one unit of the neuron's activation writes to every logit, directly:
  its output row ``W_out[:, n]`` through the final norm's weight (centred first for LayerNorm) and the unembedding,
  ``(γ ⊙ (w − mean w)) · W_U[v]``, the frozen-norm reading of ``gptviz.interp.lens.decompose`` without the
  position's own positive ``1/scale`` (which changes no ranking). A post-norm model has no final norm: ``w · W_U[v]``.

No Streamlit here; ``gptviz.interp.neuron_jobs`` runs ``compute`` in the background for the app.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np
import torch

from ..model.hook_names import act_name
from ..text import corpus

TOP_K = 20  # snippets kept per neuron
HIST_BINS = 40
WINDOW = 64  # tokens per window (at most the model's block_size)
SNIPPET_BEFORE, SNIPPET_AFTER = 10, 3
ROWS_PER_PASS = 8  # windows in one forward pass
MAX_FLOATS = 8_000_000  # activations kept while computing in the app (32 MB): bounds the slice of a big model


def why_no_neurons(cfg) -> Optional[str]:
    """Why this model has no neurons to show here, in a sentence; None when it has them."""
    if getattr(cfg, "attn_only", False):
        return ("This model has no MLP: it is attention-only, so its blocks have no neurons. Choose a model with "
                "MLPs (the Shakespeare GPT, say) to browse neurons.")
    if getattr(cfg, "n_expert", 0) > 0:
        return ("This model's MLPs are mixtures of experts: each hidden unit belongs to one expert, which runs only "
                "on the tokens routed to it, so there is no neuron every token passes through. The Experts page shows "
                "where each token goes and what each expert does.")
    if getattr(cfg, "n_enc_layer", -1) >= 0:
        return ("The neuron view reads the held-out plays as a decoder-only model would; this model is an "
                "encoder-decoder, whose decoder needs a source to read.")
    return None


def window_len(cfg, want: int = WINDOW) -> int:
    return max(1, min(int(want), int(cfg.block_size)))


def n_windows_for(cfg, n_tokens: int, ctx_len: int, max_floats: Optional[int] = MAX_FLOATS) -> int:
    """How many windows of ``ctx_len`` tokens to read: about ``n_tokens`` tokens, fewer if the activations of
    every neuron at every position (L × N × d_mlp floats) would pass ``max_floats``; at least one."""
    n = max(1, int(n_tokens) // ctx_len)
    if max_floats is not None:
        per_window = cfg.n_layer * cfg.d_mlp * ctx_len
        n = min(n, max(1, int(max_floats) // per_window))
    return n


def _line_start(text: str, i: int) -> int:
    j = text.find("\n", i)
    return i if j < 0 or j - i > 200 else j + 1


def corpus_windows(tok, vocab_size: int, n_windows: int, ctx_len: int) -> np.ndarray:
    """``(n_windows, ctx_len)`` int32 token ids from the held-out plays, the windows' starts spread evenly over
    the text (each moved to the start of its next line). Ids the model cannot read (past ``vocab_size``) are
    left out. Raises ValueError if the tokenizer reads too little of the plays to fill a window."""
    text = corpus.load("val")
    n_windows, ctx_len = max(1, int(n_windows)), max(1, int(ctx_len))
    rows = []
    for w in range(n_windows):
        start = _line_start(text, (w * len(text)) // n_windows)
        span = 8 * ctx_len
        while True:
            ids = [int(i) for i in tok.encode(text[start:start + span]) if 0 <= int(i) < vocab_size]
            if len(ids) >= ctx_len + 1 or start + span >= len(text) or span > 64 * ctx_len:
                break
            span *= 2
        ids = ids[:ctx_len]  # the last token of a chunk may be cut short: it is left out when there are spare ones
        if len(ids) < ctx_len:
            raise ValueError("this model's tokenizer reads too little of the held-out plays to fill a window of "
                             f"{ctx_len} tokens")
        rows.append(ids)
    return np.asarray(rows, dtype=np.int32)


def collect(model, windows: np.ndarray, rows_per_pass: int = ROWS_PER_PASS,
            progress: Optional[Callable[[float], None]] = None) -> np.ndarray:
    """Every neuron's activation (``blocks.l.mlp.hook_post``) at every position of ``windows``:
    ``(n_layer, n_windows * ctx_len, d_mlp)`` float32, position ``w * ctx_len + t`` being token ``t`` of window
    ``w``. Each window is its own sequence. The model is only read. ``progress(fraction)`` after each pass."""
    with torch.no_grad():
        cfg = model.config
        reason = why_no_neurons(cfg)
        if reason:
            raise ValueError(reason)
        W, T = windows.shape
        names = {act_name("post", layer): layer for layer in range(cfg.n_layer)}
        out = np.empty((cfg.n_layer, W * T, cfg.d_mlp), dtype=np.float32)
        step = max(1, int(rows_per_pass))
        for i in range(0, W, step):
            x = torch.as_tensor(np.asarray(windows[i:i + step]), dtype=torch.long)
            rows = x.shape[0]

            def rec(name, t, i=i, rows=rows):
                layer = names.get(name)
                if layer is not None:
                    out[layer, i * T:(i + rows) * T] = t.detach().float().reshape(rows * T, -1).cpu().numpy()
                return t

            model.run(x, rec=rec)
            if progress is not None:
                progress(min(1.0, (i + rows) / W))
        return out


@dataclass
class NeuronStats:
    """The summary of every neuron over one slice of the held-out plays (what ships in ``*.neurons.npz``)."""

    windows: np.ndarray  # (W, T) int32: the slice's token ids
    top_pos: np.ndarray  # (L, d_mlp, k) int32: flat positions (w * T + t) of the k largest activations, largest first
    top_val: np.ndarray  # (L, d_mlp, k) float32: those activations
    hist: np.ndarray  # (L, d_mlp, bins) int32: counts, numpy.histogram(acts, bins) over the neuron's own min..max
    hist_lo: np.ndarray  # (L, d_mlp) float64: the first bin edge (the neuron's smallest activation)
    hist_hi: np.ndarray  # (L, d_mlp) float64: the last bin edge (its largest)
    meta: dict = field(default_factory=dict)

    @property
    def n_layer(self) -> int:
        return int(self.top_val.shape[0])

    @property
    def d_mlp(self) -> int:
        return int(self.top_val.shape[1])

    @property
    def n_tokens(self) -> int:
        return int(self.windows.size)

    def edges(self, layer: int, n: int) -> np.ndarray:
        """The neuron's histogram's bin edges (``bins + 1`` of them)."""
        return np.linspace(self.hist_lo[layer, n], self.hist_hi[layer, n], self.hist.shape[-1] + 1)

    def snippets(self, layer: int, n: int, before: int = SNIPPET_BEFORE, after: int = SNIPPET_AFTER) -> list[dict]:
        """The neuron's top snippets, largest first: each ``{"ids", "at", "value", "window", "pos"}`` with ``ids``
        the tokens around the activating one (from its own window only: what the model saw, and a few after) and
        ``at`` the activating token's index in ``ids``."""
        W, T = self.windows.shape
        out = []
        for p, v in zip(self.top_pos[layer, n].tolist(), self.top_val[layer, n].tolist()):
            w, t = divmod(int(p), T)
            lo, hi = max(0, t - before), min(T, t + after + 1)
            out.append({"ids": self.windows[w, lo:hi].tolist(), "at": t - lo, "value": float(v), "window": w,
                        "pos": t})
        return out


def histograms(a: np.ndarray, bins: int = HIST_BINS) -> tuple[np.ndarray, np.ndarray]:
    """``numpy.histogram(a[n], bins)`` for every row ``n`` of ``a`` (D, N) at once: ``(counts (D, bins), edges
    (D, bins + 1))``. Each row's bins span its own min..max (±0.5 if they are equal), computed as numpy does (edges
    in ``a``'s dtype, every value checked against its bin's edges, the last bin closed), so the counts are
    numpy's exactly; one vectorised pass instead of D calls."""
    a = np.asarray(a)
    D = a.shape[0]
    lo, hi = a.min(axis=1), a.max(axis=1)
    same = lo == hi
    lo, hi = np.where(same, lo - 0.5, lo), np.where(same, hi + 0.5, hi)
    edges = np.linspace(lo, hi, bins + 1, axis=1, dtype=a.dtype)  # (D, bins + 1)
    idx = (((a - lo[:, None]) / (hi - lo)[:, None]) * bins).astype(np.intp)
    idx[idx == bins] -= 1
    rows = np.arange(D)[:, None]
    idx[a < edges[rows, idx]] -= 1  # the estimate can be one bin off next to an edge
    idx[(a >= edges[rows, idx + 1]) & (idx != bins - 1)] += 1
    counts = np.bincount((rows * bins + idx).ravel(), minlength=D * bins).reshape(D, bins)
    return counts, edges


def summarise(acts: np.ndarray, windows: np.ndarray, k: int = TOP_K, bins: int = HIST_BINS,
              meta: Optional[dict] = None) -> NeuronStats:
    """Top-``k`` positions and values, and a ``bins``-bin histogram, of every neuron in ``acts`` (L, N, d_mlp)."""
    L, N, D = acts.shape
    k = max(1, min(int(k), N))
    top_pos = np.empty((L, D, k), dtype=np.int32)
    top_val = np.empty((L, D, k), dtype=np.float32)
    hist = np.empty((L, D, bins), dtype=np.int32)
    lo = np.empty((L, D), dtype=np.float64)
    hi = np.empty((L, D), dtype=np.float64)
    for layer in range(L):
        a = np.ascontiguousarray(acts[layer].T)  # (D, N): one neuron a row
        v, i = torch.from_numpy(a).topk(k, dim=1)  # largest first
        top_pos[layer], top_val[layer] = i.numpy().astype(np.int32), v.numpy()
        step = max(1, 2_000_000 // max(1, N))  # a few neurons at a time: the temporaries stay small
        for r in range(0, D, step):
            counts, edges = histograms(a[r:r + step], bins)
            hist[layer, r:r + step], lo[layer, r:r + step], hi[layer, r:r + step] = counts, edges[:, 0], edges[:, -1]
    return NeuronStats(np.asarray(windows, dtype=np.int32), top_pos, top_val, hist, lo, hi, dict(meta or {}))


def compute(model, tok, n_tokens: int = 4096, ctx_len: Optional[int] = None, max_floats: Optional[int] = MAX_FLOATS,
            progress: Optional[Callable[[float], None]] = None) -> NeuronStats:
    """Read the held-out plays (about ``n_tokens`` tokens, fewer on a big model: see ``n_windows_for``) and
    summarise every neuron. ``progress(fraction)`` as the forward passes go (summarising is the last 10 %)."""
    cfg = model.config
    reason = why_no_neurons(cfg)
    if reason:
        raise ValueError(reason)
    t0 = time.perf_counter()
    T = window_len(cfg, ctx_len or WINDOW)
    windows = corpus_windows(tok, cfg.vocab_size, n_windows_for(cfg, n_tokens, T, max_floats), T)
    tell = (lambda f: progress(0.9 * f)) if progress is not None else None
    acts = collect(model, windows, progress=tell)
    stats = summarise(acts, windows, meta={"ctx_len": T, "n_tokens": int(windows.size)})
    stats.meta["seconds"] = round(time.perf_counter() - t0, 2)
    if progress is not None:
        progress(1.0)
    return stats


# --------------------------------------------------------------------------- what a neuron writes
def _unembedding(model) -> torch.Tensor:
    return model.lm_head.weight  # (V, C): row v is W_U[v] (tied or not)


def logit_effect(model, layer: int, n: int) -> np.ndarray:
    """What one unit of neuron ``n`` of ``layer`` adds to every logit directly, ``(V,)``: ``W_out[:, n]`` (its
    column of ``mlp.c_proj``) through the final norm's weight γ (centred first for LayerNorm, as the norm
    centres its input) and the unembedding. The norm's ``1/scale`` at a position, a positive number, is left out."""
    with torch.no_grad():
        cfg = model.config
        if why_no_neurons(cfg):
            raise ValueError(why_no_neurons(cfg))
        if not 0 <= int(layer) < cfg.n_layer or not 0 <= int(n) < cfg.d_mlp:
            raise ValueError(f"no neuron {n} in layer {layer}: layers 0..{cfg.n_layer - 1}, neurons 0..{cfg.d_mlp - 1}")
        w = model.transformer.h[int(layer)].mlp.c_proj.weight[:, int(n)].float()  # (C,)
        if "ln_f" in model.transformer:
            if cfg.norm == "layernorm":
                w = w - w.mean()
            w = w * model.transformer.ln_f.weight.float()
        return (_unembedding(model).float() @ w).numpy()


def promoted(model, layer: int, n: int, k: int = 10) -> tuple[list[int], list[float], list[int], list[float]]:
    """``(up_ids, up_values, down_ids, down_values)``: the ``k`` tokens the neuron pushes up most (largest
    ``logit_effect`` first) and the ``k`` it pushes down most (most negative first)."""
    eff = logit_effect(model, layer, n)
    k = max(1, min(int(k), eff.size))
    up = np.argsort(-eff, kind="stable")[:k]
    down = np.argsort(eff, kind="stable")[:k]
    return up.tolist(), eff[up].tolist(), down.tolist(), eff[down].tolist()


def most_active(trace, b: int, pos: int, k: int = 12) -> list[tuple[int, int, float]]:
    """The ``k`` neurons (of every layer) most active at position ``pos`` of batch row ``b`` of a trace:
    ``(layer, neuron, activation)``, largest first."""
    cfg = trace.config
    rows = []
    for layer in range(cfg.n_layer):
        a = np.asarray(trace[act_name("post", layer)])[b, pos]
        top = np.argsort(-a, kind="stable")[:k]
        rows += [(layer, int(n), float(a[n])) for n in top]
    rows.sort(key=lambda r: -r[2])
    return rows[:k]
