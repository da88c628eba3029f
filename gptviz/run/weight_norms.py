"""‖∂loss/∂W‖ and ‖∂loss/∂b‖ of a model's ``Linear`` layers, from what each call saw, without building ∂loss/∂W.

A layer called on inputs X (N rows: the B·T positions, more if it runs more than once) with outputs Y = X Wᵀ + b has
∂loss/∂W = Gᵀ X and ∂loss/∂b = Σ_rows G, where G = ∂loss/∂Y. So autograd is asked for G (N × out) instead of the
weight's gradient (out × in), and

- ‖Gᵀ X‖² = Σ_{s,t} (G Gᵀ)_{st} (X Xᵀ)_{st}: two N × N Gram matrices, when N·(in + out) < in·out, as on a big
  model's Backward page (N = 32 rows, a 1,024 × 3,072 weight). Building every weight's gradient there cost 1.8 GB of
  fresh memory and about a third of the backward pass for a Qwen3-0.6B shape;
- otherwise Gᵀ X itself, one layer at a time, dropped once its norm is read.

Worked in float64. The taps see a model only through ``LINEAR_TAP``, set for the calling thread alone.
"""
from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from typing import Optional

import torch

from ..model.layers import LINEAR_TAP, Linear


class LinearTaps:
    """The inputs and outputs of every ``Linear`` of ``model`` whose weight (and bias) belongs to it alone and needs a
    gradient, but those in ``skip`` (the embedding matrices, whose norms ``trace`` works out on its own)."""

    def __init__(self, model: torch.nn.Module, skip: Iterable[torch.Tensor] = ()):
        skipped = {id(p) for p in skip}
        owners = Counter(id(p) for _, m in model.named_modules(remove_duplicate=False)
                         for p in m._parameters.values() if p is not None)
        names = {id(p): n for n, p in model.named_parameters()}

        def own(p: Optional[torch.Tensor]) -> bool:
            return p is None or (p.requires_grad and owners[id(p)] == 1 and id(p) not in skipped)

        self._layers = {id(m): m for m in model.modules()
                        if isinstance(m, Linear) and own(m.weight) and own(m.bias) and id(m.weight) in names}
        self._names = {i: (names[id(m.weight)], None if m.bias is None else names[id(m.bias)])
                       for i, m in self._layers.items()}
        self._covered = {id(p) for m in self._layers.values() for p in (m.weight, m.bias) if p is not None}
        self._calls: list[tuple[int, torch.Tensor, torch.Tensor]] = []  # (layer, input, output), in call order

    def covers(self, p: torch.Tensor) -> bool:
        """Whether ``p`` (a weight or bias) gets its norm here rather than from autograd's gradient of it."""
        return id(p) in self._covered

    def _see(self, module: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> None:
        if id(module) in self._layers:
            self._calls.append((id(module), x.detach(), y))

    @contextlib.contextmanager
    def tapping(self) -> Iterator["LinearTaps"]:
        """Keep every call of a tapped layer in this thread while the block runs."""
        token = LINEAR_TAP.set(self._see)
        try:
            yield self
        finally:
            LINEAR_TAP.reset(token)

    def outputs(self) -> list[torch.Tensor]:
        """Each call's output: what autograd is asked for the gradient of (``norms`` takes them in this order)."""
        return [y for _, _, y in self._calls]

    def norms(self, grads: Sequence[Optional[torch.Tensor]]) -> dict[str, float]:
        """{parameter name: ‖∂loss/∂W‖} of every tapped layer, given ∂loss/∂(each output) from ``outputs``' order
        (None: that output is off the loss's path). A layer that no call reached the loss from gets 0."""
        if len(grads) != len(self._calls):
            raise ValueError(f"{len(grads)} gradients for {len(self._calls)} tapped calls")
        rows: dict[int, list[tuple[torch.Tensor, torch.Tensor]]] = {i: [] for i in self._layers}
        for (i, x, _), g in zip(self._calls, grads):
            if g is not None:
                rows[i].append((x.reshape(-1, x.shape[-1]), g.reshape(-1, g.shape[-1])))
        out: dict[str, float] = {}
        with torch.no_grad():
            for i, seen in rows.items():
                w_name, b_name = self._names[i]
                if not seen:
                    out[w_name] = 0.0
                    if b_name is not None:
                        out[b_name] = 0.0
                    continue
                X = torch.cat([x for x, _ in seen]).to(torch.float64)
                G = torch.cat([g for _, g in seen]).to(torch.float64)
                out[w_name] = weight_grad_norm(X, G)
                if b_name is not None:
                    out[b_name] = float(G.sum(0).norm())
        return out


def embedding_matrices(model: torch.nn.Module) -> list[torch.Tensor]:
    """The token embedding and the unembedding (one tensor when tied), whichever the model has."""
    found = [getattr(getattr(getattr(model, "transformer", None), "wte", None), "weight", None),
             getattr(getattr(model, "lm_head", None), "weight", None)]
    return [p for p in found if isinstance(p, torch.Tensor)]


def weight_grad_norm(X: torch.Tensor, G: torch.Tensor) -> float:
    """‖Gᵀ X‖ for X (N × in) and G (N × out): through the N × N Gram matrices when they are the smaller work."""
    n, d_in, d_out = X.shape[0], X.shape[1], G.shape[1]
    if n * (d_in + d_out) < d_in * d_out:
        return max(float(((G @ G.T) * (X @ X.T)).sum()), 0.0) ** 0.5
    return float((G.T @ X).norm())
