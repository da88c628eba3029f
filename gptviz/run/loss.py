"""Cross-entropy, taken apart into the steps a textbook shows."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

# The log-softmax is worked out this many logits at a time (whole rows): a big vocabulary's full table would be a
# fresh allocation on every text change (T = 128 × 151,936 floats is 78 MB, over the allocator's 32 MB threshold
# for reusing memory), where rows of 8 MB reuse the same memory. Each row's values are the same either way.
LOG_SOFTMAX_CHUNK = 1 << 21


def target_log_probs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """``log_softmax(logits)[..., targets]``: (...) from logits (..., V) and ids (...) in [0, V), rows at a time."""
    V = logits.shape[-1]
    flat, ids = logits.reshape(-1, V), targets.reshape(-1, 1)
    rows = max(1, LOG_SOFTMAX_CHUNK // max(V, 1))
    if flat.shape[0] <= rows:
        return F.log_softmax(flat, dim=-1).gather(-1, ids).reshape(targets.shape)
    parts = [F.log_softmax(flat[i:i + rows], dim=-1).gather(-1, ids[i:i + rows]) for i in range(0, flat.shape[0], rows)]
    return torch.cat(parts).reshape(targets.shape)


def loss_breakdown(logits: torch.Tensor, targets: torch.Tensor, ignore_index: int = -100,
                   with_probs: bool = True) -> dict:
    """Softmax, the target's probability, its log, the loss at each position, and their mean.

    logits: (..., V); targets: (...) of ids, ``ignore_index`` where there is no target.
    ``loss`` equals ``F.cross_entropy(logits.view(-1, V), targets.view(-1), ignore_index=...)``.
    At ignored positions ``target_probs`` is 1 and ``log_probs`` and ``loss_per_token`` are 0.
    ``uniform_loss`` is ln V: the loss of a model that guesses every token equally.
    ``with_probs=False`` leaves ``probs``, the (..., V) softmax, out (a slim trace works it out when it is read).
    """
    if logits.shape[:-1] != targets.shape:
        raise ValueError(f"targets shape {tuple(targets.shape)} does not match logits {tuple(logits.shape[:-1])}")
    V = logits.shape[-1]
    valid = targets != ignore_index
    bad = valid & ((targets < 0) | (targets >= V))
    if bool(bad.any()):
        raise ValueError(f"target id {int(targets[bad][0])} is outside the vocabulary (vocab_size={V})")
    if with_probs:
        probs = F.softmax(logits, dim=-1)  # (B, T, V)
    safe = torch.where(valid, targets, torch.zeros_like(targets))
    log_probs = target_log_probs(logits, safe).masked_fill(~valid, 0.0)  # (B, T): log_softmax(logits) at the targets
    loss_per_token = -log_probs  # (B, T)
    n = valid.sum()
    loss = loss_per_token.sum() / n  # (), nan when nothing has a target, as F.cross_entropy
    return {
        **({"probs": probs} if with_probs else {}),
        "target_probs": log_probs.exp(),
        "log_probs": log_probs,
        "loss_per_token": loss_per_token,
        "loss": loss,
        "valid": valid,
        "n_valid": int(n),
        "uniform_loss": math.log(V),
    }


def uniform_loss(vocab_size: int) -> float:
    """ln V: the cross-entropy of a model that gives every one of V tokens the same probability."""
    return math.log(vocab_size)


def mean_over(loss_per_token, targets, ignore_index: int = -100) -> float:
    """The mean of ``loss_per_token`` over the positions whose target is not ``ignore_index`` (nan if none):
    the loss on just the positions a task scores, given its targets."""
    import numpy as np

    lpt, y = np.asarray(loss_per_token, dtype=np.float64), np.asarray(targets)
    keep = y != ignore_index
    return float(lpt[keep].mean()) if keep.any() else math.nan
