"""Which input tokens a prediction rests on: attention rollout and integrated gradients.

- ``attention_rollout(trace)``: Abnar and Zuidema (2020). Each layer's attention, averaged over its heads and mixed
  half and half with the identity (the residual connection carries each token on), is multiplied from the first
  layer up: ``R = Â_{L-1} ··· Â_1 Â_0`` with ``Â_l = ½ A_l + ½ I``. ``R[b, i, j]`` is how much position ``i``'s
  stream at the top draws on input token ``j``, if attention alone moved information. It reads nothing but the
  attention patterns, which is its weakness: attention weights say where a head looks, not what it takes from
  there (values, the MLPs and the output projection are left out).
- ``integrated_gradients(model, idx, position, target_id)``: Sundararajan et al. (2017), computed by Captum. The
  logit of ``target_id`` at ``position`` is followed from an all-zero token-embedding baseline (position
  embeddings kept) to the real embeddings; each token's attribution is the path integral of the gradient times
  the change, summed over the embedding's dimensions. Completeness: the attributions sum to
  ``f(x) − f(baseline)``; ``delta`` is how far off the numerical integral is.
"""
from __future__ import annotations

import sys
import threading
import types
from typing import Optional, Union

import numpy as np
import torch

from ..model.hook_names import act_name


def _np(x) -> np.ndarray:
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


def attention_rollout(trace) -> np.ndarray:
    """Attention rollout, (B, T, T): rows are positions at the top of the model, columns the input tokens; each row
    sums to 1. A padded query row (no key it may look at) stays on its own token."""
    L = trace.config.n_layer
    first = _np(trace[act_name("pattern", 0)])
    B, _, T, _ = first.shape
    eye = np.eye(T)[None]
    rollout = np.broadcast_to(eye, (B, T, T)).astype(np.float64)
    for layer in range(L):
        a = first if layer == 0 else _np(trace[act_name("pattern", layer)])
        mixed = 0.5 * a.astype(np.float64).mean(axis=1) + 0.5 * eye  # (B, T, T)
        mixed = mixed / mixed.sum(axis=-1, keepdims=True)  # a padded row (all zeros) becomes the identity's
        rollout = mixed @ rollout
    return rollout


_IMPORT_LOCK = threading.Lock()


def _captum_integrated_gradients():
    """Captum's ``IntegratedGradients``, imported with a blank module standing in for ``__main__``. Captum imports
    IPython, whose completer keeps the module that is ``__main__`` at that moment (``import __main__``) for as long
    as the process lives. In a Streamlit script run that is the page script's module: its ``ctx`` and every trace
    that page context memoised would never be freed (0.4 GB for GPT-2 small at 512 tokens)."""
    with _IMPORT_LOCK:
        if "captum.attr" not in sys.modules:
            main, blank = sys.modules.get("__main__"), types.ModuleType("__main__")
            sys.modules["__main__"] = blank
            try:
                import captum.attr  # noqa: F401
            finally:
                if sys.modules.get("__main__") is blank and main is not None:
                    sys.modules["__main__"] = main
    from captum.attr import IntegratedGradients

    return IntegratedGradients


def integrated_gradients(model, idx: Union[torch.Tensor, list], position: int, target_id: int,
                         steps: int = 64, batch: Optional[int] = None) -> tuple[np.ndarray, float]:
    """``(attributions, delta)``: one attribution per input position, (T,), for the logit of ``target_id`` at
    ``position``, by Captum's integrated gradients (Gauss-Legendre, ``steps`` points) from all-zero token embeddings
    with the position embeddings kept; ``delta`` is Captum's convergence delta, ``sum(attributions) − (f(x) −
    f(baseline))``. ``batch``: at most this many of the ``steps`` points in one forward pass (Captum's
    ``internal_batch_size``; bounds the memory on a big model). The model is only read: no weight changes and no
    gradient is left on it."""
    IntegratedGradients = _captum_integrated_gradients()

    idx = torch.as_tensor(idx, dtype=torch.long)
    if idx.dim() == 1:
        idx = idx[None]
    if idx.shape[0] != 1:
        raise ValueError(f"integrated_gradients explains one line at a time: idx has {idx.shape[0]} rows")
    T = idx.shape[1]
    if not -T <= position < T:
        raise ValueError(f"position {position} is outside the text's {T} tokens")
    if not 0 <= target_id < model.config.vocab_size:
        raise ValueError(f"target_id {target_id} is outside the vocabulary (vocab_size={model.config.vocab_size})")
    model.check_inputs(idx)

    def logit(emb: torch.Tensor) -> torch.Tensor:
        """The target's logit when the token embeddings are ``emb`` (N, T, C): the embedding step replaced."""
        rows = idx.expand(emb.shape[0], T)
        logits = model.run(rows, rec=lambda name, x: emb if name == "hook_embed" else x, train=False)
        return logits[:, position, target_id]

    with torch.no_grad():
        emb = model.transformer.wte(idx).detach()
    ig = IntegratedGradients(logit)
    attr, delta = ig.attribute(emb, baselines=torch.zeros_like(emb), n_steps=int(steps),
                               internal_batch_size=batch, return_convergence_delta=True)
    return attr.sum(dim=-1)[0].detach().numpy(), float(delta.detach().reshape(-1)[0])
