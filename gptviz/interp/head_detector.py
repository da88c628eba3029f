"""Heads that name themselves: score every layer × head for five well-known kinds of behaviour.

Each score is the mean, over the query positions where the behaviour says where to look, of the
attention weight the head puts on the position(s) it predicts:

- ``previous``: position t−1 (every query but the first);
- ``current``: position t itself;
- ``first``: position 0, the "attention sink" (every query but the first);
- ``duplicate``: the earlier occurrences of the current token (queries whose token occurred before);
- ``induction``: the token just after an earlier occurrence of the current token (queries whose token
  occurred before, at a position s with s + 1 < t).

A score of 1 means the head puts all its weight where the behaviour predicts. ``duplicate`` and
``induction`` need repeated tokens, so they are also measured on the standard probe: a random run of
tokens, repeated twice (``repeated_probe``).
"""
from __future__ import annotations

from typing import cast

import numpy as np
import torch

KINDS = ("previous", "induction", "duplicate", "first", "current")

DESCRIPTIONS = {
    "previous": "looks at the token just before: the first half of an induction circuit, and of many "
                "bigram-like features.",
    "induction": "finds the earlier occurrence of the current token and looks at what came after it, so "
                 "the model can copy it: …A B … A → B.",
    "duplicate": "looks at earlier copies of the current token: 'have I seen this before?'.",
    "first": "parks its weight on the first token when it has nothing better to do (an attention sink).",
    "current": "looks at its own position.",
}

HOW = {
    "previous": "mean weight on position t−1",
    "induction": "mean weight on the position after an earlier occurrence of the current token",
    "duplicate": "mean weight on earlier occurrences of the current token",
    "first": "mean weight on position 0 (queries after the first)",
    "current": "mean weight on position t",
}


def target_cells(tokens, kind: str) -> np.ndarray:
    """A (T, T) 0/1 matrix: which key positions ``kind`` predicts for each query position.

    A query row with no predicted key is all 0 and is not scored.
    """
    tok = np.asarray(tokens).reshape(-1)
    T = tok.shape[0]
    m = np.zeros((T, T), dtype=bool)
    if kind == "previous":
        m[np.arange(1, T), np.arange(0, T - 1)] = True
    elif kind == "current":
        m[np.arange(T), np.arange(T)] = True
    elif kind == "first":
        m[1:, 0] = True
    elif kind in ("duplicate", "induction"):
        same = tok[:, None] == tok[None, :]
        earlier = np.tril(np.ones((T, T), dtype=bool), k=-1)
        dup = same & earlier  # (query t, key s): s < t and token s == token t
        if kind == "duplicate":
            m = dup
        else:  # shift each earlier occurrence one step right: the token that followed it
            m[:, 1:] = dup[:, :-1]
            m &= earlier
    else:
        raise ValueError(f"kind={kind!r} must be one of {', '.join(KINDS)}")
    return m


def head_scores(patterns, tokens, kinds=KINDS) -> dict[str, np.ndarray]:
    """Scores for every head. ``patterns`` is (n_layer, n_head, T, T) or (n_layer, n_head, B, T, T) with
    ``tokens`` (T,) or (B, T). Returns ``{kind: (n_layer, n_head) array}`` (NaN if no query is scored)."""
    p = np.asarray(patterns)  # read where the scored cells are only: a long text's T × T is mostly unscored
    tok = np.asarray(tokens)
    if p.ndim == 4:
        p, tok = p[:, :, None], tok.reshape(1, -1)
    out: dict[str, np.ndarray] = {}
    for kind in kinds:
        num, den = 0.0, 0
        for b in range(tok.shape[0]):
            cells = target_cells(tok[b], kind)
            rows = cells.any(axis=1)
            if rows.any():
                q, k = np.nonzero(cells)
                num = num + p[:, :, b][:, :, q, k].astype(np.float64).sum(-1)
                den += int(rows.sum())
        # den > 0 once a row was scored, and num is then the (n_layer, n_head) sum
        out[kind] = cast(np.ndarray, num / den) if den else np.full(p.shape[:2], np.nan)
    return out


def patterns_from_trace(tr, b: int = 0) -> np.ndarray:
    """(n_layer, n_head, T, T): every layer's attention pattern for batch row ``b``."""
    L = tr.config.n_layer
    return np.stack([_np(tr[f"blocks.{l}.attn.hook_pattern"][b]) for l in range(L)])


def _np(x) -> np.ndarray:
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


# The probe's default shape: PROBE_ROWS rows of PROBE_N random tokens, each run repeated once.
PROBE_ROWS, PROBE_N = 8, 32


def repeated_probe(vocab_size: int, n: int = PROBE_N, batch: int = PROBE_ROWS, seed: int = 0,
                   avoid: tuple[int, ...] = ()) -> torch.Tensor:
    """(batch, 2n) token ids: a random run of n distinct tokens, then the same run again."""
    g = torch.Generator().manual_seed(seed)
    allowed = torch.tensor([i for i in range(vocab_size) if i not in set(avoid)])
    if len(allowed) < n:
        raise ValueError(f"a probe of {n} distinct tokens needs a vocabulary of at least {n}")
    rows = []
    for _ in range(batch):
        run = allowed[torch.randperm(len(allowed), generator=g)[:n]]
        rows.append(torch.cat([run, run]))
    return torch.stack(rows)


def probe(model, n: int = PROBE_N, batch: int = PROBE_ROWS, seed: int = 0, avoid: tuple[int, ...] = ()) -> dict:
    """Run ``model`` on the repeated-random probe. Returns every kind's (n_layer, n_head) scores and the
    mean loss on the first and second copy (the second copy can be predicted only by looking back)."""
    with torch.no_grad():
        from ..run.trace import trace

        n = min(n, model.config.block_size // 2)
        idx = repeated_probe(model.config.vocab_size, n, batch, seed, avoid)
        tr = trace(model, idx)
        pats = np.stack([tr[f"blocks.{l}.attn.hook_pattern"].cpu().numpy() for l in range(model.config.n_layer)])
        pats = pats.transpose(0, 2, 1, 3, 4)  # (L, B, H, T, T) -> (L, H, B, T, T)
        scores = head_scores(pats, idx.numpy())
        logp = torch.log_softmax(tr["hook_logits"].float(), -1)
        nll = -logp[:, :-1].gather(-1, idx[:, 1:, None])[..., 0]  # (B, 2n-1): predicting token t+1
        return {"scores": scores, "loss_first": float(nll[:, : n - 1].mean()), "loss_second": float(nll[:, n:].mean()),
                "n": n, "batch": batch}


def best_labels(scores: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Each head's highest-scoring kind and that score: two (n_layer, n_head) arrays."""
    kinds = list(scores)
    stack = np.stack([np.nan_to_num(scores[k], nan=-1.0) for k in kinds])
    best = stack.argmax(0)
    return np.array(kinds, dtype=object)[best], stack.max(0)


# Kinds that say something about the text (a head that looks back one token, or finds earlier copies); a first- or
# current-token head is a resting place, shown first only when no head of these kinds scores TELLING_MIN.
TELLING_KINDS = ("previous", "induction", "duplicate")
TELLING_MIN = 0.3


def clearest_head(scores: dict[str, np.ndarray]) -> tuple[int, int, str, float]:
    """``(layer, head, kind, score)`` of the head to show first: the highest score of a telling kind (previous,
    induction, duplicate) if one reaches ``TELLING_MIN``, else the highest score of any kind. Ties go to the
    earliest layer and head."""
    kinds, best = best_labels(scores)
    telling = {k: v for k, v in scores.items() if k in TELLING_KINDS}
    if telling:
        t_kinds, t_best = best_labels(telling)
        if float(np.max(t_best)) >= TELLING_MIN:
            kinds, best = t_kinds, t_best
    layer, head = (int(i) for i in np.unravel_index(int(np.argmax(best)), best.shape))
    return layer, head, str(kinds[layer, head]), float(best[layer, head])


def detect(tr, b: int = 0, probe_model=None, probe_seed: int = 0,
           probe_batch: int = PROBE_ROWS) -> dict[str, np.ndarray]:
    """Scores on the trace's own text (row ``b``, padding left out); with ``probe_model``, ``induction``
    and ``duplicate`` come from the repeated-random probe (``probe_batch`` rows) instead (the user's text may
    repeat nothing)."""
    T = (int(np.asarray(tr.attention_mask[b]).sum()) if getattr(tr, "attention_mask", None) is not None
         else tr.idx.shape[1])
    pats = patterns_from_trace(tr, b)[:, :, :T, :T]
    scores = head_scores(pats, np.asarray(tr.idx[b, :T]))
    if probe_model is not None:
        pr = probe(probe_model, batch=probe_batch, seed=probe_seed)["scores"]
        scores["induction"], scores["duplicate"] = pr["induction"], pr["duplicate"]
    return scores


def summarise(scores: dict[str, np.ndarray], precision: int = 2) -> list[str]:
    """One line per head: 'L0H1 previous 0.93 · induction 0.02 · ...'."""
    L, H = next(iter(scores.values())).shape
    lines = []
    for l in range(L):
        for h in range(H):
            parts = " · ".join(f"{k} {scores[k][l, h]:.{precision}f}" for k in scores)
            lines.append(f"L{l}H{h}  {parts}")
    return lines
