"""Where a mixture of experts sends tokens: each expert's load (the share of routing choices it takes) over a text or
the held-out plays, and the tokens routed to an expert most strongly.

A token routed to k experts makes k choices; an expert's load in a layer is the share of all choices that went to
it, so a layer's loads sum to 1 and an even router gives each of E experts 1/E.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from ..model.hook_names import act_name


def moe_layers(cfg) -> list[int]:
    """The layers whose MLP is a mixture of experts (none for a dense model)."""
    return [layer for layer in range(cfg.n_layer) if getattr(cfg, "n_expert", 0) and cfg.is_moe_layer(layer)]


def chosen(weights) -> np.ndarray:
    """Which experts each token went to, from the recorded ``expert_weights`` (..., E): True where chosen."""
    return np.asarray(weights) > 0


def load_from_weights(weights, real: Optional[np.ndarray] = None) -> np.ndarray:
    """An expert's share of the routing choices, (E,), from one layer's ``expert_weights`` (B, T, E); ``real``
    (B, T) bool leaves padding out."""
    c = chosen(weights)
    if real is not None:
        c = c[np.asarray(real, dtype=bool)]
    counts = c.reshape(-1, c.shape[-1]).sum(axis=0).astype(np.float64)
    return counts / max(counts.sum(), 1.0)


@torch.no_grad()
def expert_load(model, windows: torch.Tensor, batch_size: int = 64) -> dict[int, np.ndarray]:
    """Each mixture-of-experts layer's load, (E,), over token windows (N, T), counted from the chosen experts the
    model records (``blocks.L.mlp.hook_expert_weights``), in batches of ``batch_size``."""
    layers = moe_layers(model.config)
    names = {act_name("expert_weights", layer): layer for layer in layers}
    counts = {layer: np.zeros(model.config.n_expert) for layer in layers}

    def rec(name, x):
        if name in names:
            counts[names[name]] += (x > 0).reshape(-1, x.shape[-1]).sum(dim=0).double().numpy()
        return x

    was = model.training
    model.eval()
    try:
        for i in range(0, len(windows), batch_size):
            model.run(windows[i:i + batch_size], rec=rec)
    finally:
        model.train(was)
    return {layer: c / max(c.sum(), 1.0) for layer, c in counts.items()}


def held_out_windows(tokenizer, block_size: int, max_windows: int = 64) -> torch.Tensor:
    """Up to ``max_windows`` non-overlapping windows of the held-out plays, evenly spread, (N, block_size)."""
    from ..text import corpus

    ids = torch.from_numpy(corpus.encoded("val", tokenizer).astype("int64"))
    n = ids.numel() // block_size
    picks = torch.linspace(0, n - 1, min(n, max_windows)).long()
    return torch.stack([ids[j * block_size:(j + 1) * block_size] for j in picks.tolist()])


def top_routed(weights, tokens: list[str], expert: int, k: int = 10) -> list[tuple[int, str, float]]:
    """The positions of one row whose tokens gave ``expert`` the largest weight, strongest first:
    ``(position, token, weight)``; only the positions that chose it. ``weights``: (T, E)."""
    w = np.asarray(weights)[:, expert]
    order = [int(i) for i in np.argsort(-w, kind="stable") if w[i] > 0][:k]
    return [(i, tokens[i], float(w[i])) for i in order]


@torch.no_grad()
def routing_weights(model, windows: torch.Tensor) -> dict[int, np.ndarray]:
    """Each mixture-of-experts layer's recorded ``expert_weights`` over token windows (N, T): (N, T, E) per layer,
    0 for an expert a token did not go to. ``load_from_weights`` of one gives that layer's load."""
    names = {act_name("expert_weights", layer): layer for layer in moe_layers(model.config)}
    out: dict[int, np.ndarray] = {}

    def rec(name, x):
        if name in names:
            out[names[name]] = x.detach().float().numpy().copy()
        return x

    was = model.training
    model.eval()
    try:
        model.run(windows, rec=rec)
    finally:
        model.train(was)
    return out


def top_routed_windows(weights, windows, expert: int, k: int = 10) -> list[tuple[int, int, float]]:
    """The (window, position, weight) of the tokens of several windows that gave ``expert`` the largest weight,
    strongest first, only those that chose it. ``weights``: (N, T, E); ``windows``: (N, T) token ids."""
    w = np.asarray(weights)[..., expert]
    flat = w.reshape(-1)
    order = [int(i) for i in np.argsort(-flat, kind="stable")[:k] if flat[i] > 0]
    T = w.shape[1]
    return [(i // T, i % T, float(flat[i])) for i in order]
