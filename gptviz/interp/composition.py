"""How heads compose (Elhage et al. 2021, "A Mathematical Framework for Transformer Circuits"): how much of what an
earlier head writes a later head reads, through its queries (Q-composition), its keys (K-composition) or its values
(V-composition), from the weights alone.

Each head has two d_model × d_model circuits (row vectors, as in TransformerLens: ``x @ W``):

- its OV circuit ``W_OV = W_V W_O``: what it writes, given what it reads at the attended position;
- its QK circuit ``W_QK = W_Q W_Kᵀ``: the score ``x_q W_QK x_kᵀ`` between a query's and a key's inputs.

The composition score of an earlier head A into a later head B is ``‖W_A W_B‖_F / (‖W_A‖_F ‖W_B‖_F)``, with
``W_A = W_OV(A)`` and ``W_B`` = ``W_QK(B)`` for Q, ``W_QK(B)ᵀ`` for K and ``W_OV(B)`` for V: TransformerLens's
``HookedTransformer.all_composition_scores(mode)``, on the same (unfolded) weights, with its layout
``(n_layer, n_head, n_layer, n_head)`` and 0 wherever A's layer is not before B's. Between 0 and 1; two random
matrices give about ``1/√d_model``.

Differences from TransformerLens, on purpose: biases are left out as there (they are no matrices); layer-norm
gains are not folded into the weights (TransformerLens folds them by default when it loads a model; build it with
``fold_ln=False`` to compare), so these are the scores of the weights gptviz shows. Grouped-query attention: each
query head uses its key/value head's W_K and W_V, as TransformerLens repeats them.

The norms are computed from d_head × d_head Gram matrices, never a d_model × d_model product:
``‖X M Yᵀ‖_F² = tr(Mᵀ XᵀX M YᵀY)``.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

MODES = ("Q", "K", "V")
MEANING = {
    "Q": "the later head's queries read what the earlier head wrote (it changes what the later head looks for)",
    "K": "the later head's keys read what the earlier head wrote (it changes where the later head can be found: an "
         "induction head's keys read a previous-token head)",
    "V": "the later head's values read what the earlier head wrote (it moves the earlier head's output on)",
}
# Pairs of heads (earlier layer, later layer) past which the scores are not computed in one go: each pair costs a few
# d_head³ products, so a 12-layer, 12-head model (9,504 pairs) takes well under a second; a 28-layer, 16-head one
# (94,976 pairs at d_head 128) would take minutes.
MAX_PAIRS = 20_000


def head_weights(model) -> dict[str, torch.Tensor]:
    """Every attention layer's per-head matrices in float64, TransformerLens's layout: ``W_Q``, ``W_K``, ``W_V`` of
    shape (n_layer, n_head, d_model, d_head) (a key/value head repeated for each query head it serves) and ``W_O`` of
    shape (n_layer, n_head, d_head, d_model)."""
    cfg = model.config
    nh, nkv, hs, C = cfg.n_head, cfg.n_kv_head, cfg.d_head, cfg.n_embd
    rep = nh // nkv
    out: dict[str, list[torch.Tensor]] = {"W_Q": [], "W_K": [], "W_V": [], "W_O": []}
    for block in model.transformer.h:
        w = block.attn.c_attn.weight.detach().double()  # (nh*hs + 2*nkv*hs, C)
        q, k, v = w.split([nh * hs, nkv * hs, nkv * hs], dim=0)
        out["W_Q"].append(q.view(nh, hs, C).transpose(1, 2))  # (nh, C, hs)
        out["W_K"].append(k.view(nkv, hs, C).transpose(1, 2).repeat_interleave(rep, dim=0))  # (nh, C, hs)
        out["W_V"].append(v.view(nkv, hs, C).transpose(1, 2).repeat_interleave(rep, dim=0))  # (nh, C, hs)
        o = block.attn.c_proj.weight.detach().double()  # (C, nh*hs)
        out["W_O"].append(o.view(C, nh, hs).permute(1, 2, 0))  # (nh, hs, C)
    return {k: torch.stack(v) for k, v in out.items()}


def why_not(cfg) -> str:
    """Why the scores cannot be computed for this model, or ""."""
    if getattr(cfg, "n_enc_layer", -1) >= 0:
        return "composition scores are for decoder-only models; this one also has an encoder and cross-attention"
    if cfg.n_layer < 2:
        return "a one-layer model has no earlier head for a later one to read: composition needs two layers or more"
    pairs = n_pairs(cfg)
    if pairs > MAX_PAIRS:
        return (f"this model has {pairs:,} pairs of heads in different layers, over the {MAX_PAIRS:,} computed at "
                "once here (it would take minutes): use gptviz.interp.composition.scores in a notebook")
    return ""


def n_pairs(cfg) -> int:
    """How many (earlier head, later head) pairs a model has."""
    L, H = cfg.n_layer, cfg.n_head
    return H * H * L * (L - 1) // 2


def scores(model, mode: str) -> np.ndarray:
    """The composition scores of ``mode`` ("Q", "K" or "V"): an array (n_layer, n_head, n_layer, n_head), entry
    [l1, h1, l2, h2] the score of head (l1, h1) into head (l2, h2), 0 unless l1 < l2."""
    if mode not in MODES:
        raise ValueError(f"mode={mode!r}: choose one of {', '.join(MODES)}")
    why = why_not(model.config)
    if why:
        raise ValueError(why)
    with torch.no_grad():
        W = head_weights(model)
        L, H = W["W_Q"].shape[:2]
        # A = W_OV(earlier) = V O; B = Q Kᵀ (mode Q), K Qᵀ (mode K) or V O (mode V): each B = X_b N_b Y_bᵀ
        # with d_head-wide factors, so A B = V (O X_b) N_b Y_bᵀ and its norm needs only d_head × d_head matrices.
        V, O = W["W_V"], W["W_O"].transpose(-1, -2)  # (L, H, C, hs) each: W_OV = V Oᵀ
        if mode == "Q":
            X, Y = W["W_Q"], W["W_K"]  # W_QK = Q Kᵀ
        elif mode == "K":
            X, Y = W["W_K"], W["W_Q"]  # W_QKᵀ = K Qᵀ
        else:
            X, Y = V, O  # W_OV = V Oᵀ
        gram = lambda m: m.transpose(-1, -2) @ m  # (L, H, hs, hs)
        gV, gO, gX, gY = gram(V), gram(O), gram(X), gram(Y)
        norm_a = torch.einsum("lhij,lhji->lh", gV, gO).clamp_min(0).sqrt()  # ‖V Oᵀ‖_F = √tr(VᵀV OᵀO)
        norm_b = torch.einsum("lhij,lhji->lh", gX, gY).clamp_min(0).sqrt()
        out = torch.zeros(L, H, L, H, dtype=torch.float64)
        for l2 in range(1, L):
            M = torch.einsum("ahcj,bck->ahbjk", O[:l2], X[l2])  # Oᵀ X: (l2, H, H, hs, hs), earlier × later heads
            # ‖V M Yᵀ‖² = tr(Mᵀ (VᵀV) M (YᵀY))
            left = torch.einsum("ahij,ahbjk->ahbik", gV[:l2], M)  # (VᵀV) M
            right = M @ gY[l2][None, None]  # M (YᵀY), the later head's Y per column b
            sq = torch.einsum("ahbik,ahbik->ahb", left, right)  # tr(Mᵀ (VᵀV) M (YᵀY)) = Σ ((VᵀV) M) ⊙ (M (YᵀY))
            denom = norm_a[:l2, :, None] * norm_b[l2][None, None, :]
            out[:l2, :, l2] = torch.where(denom > 0, sq.clamp_min(0).sqrt() / denom.clamp_min(1e-300),
                                          torch.zeros_like(sq))
    return out.numpy()


def strongest(score: np.ndarray, top: int = 10) -> list[dict[str, Any]]:
    """The ``top`` largest scores as rows ``{"from": (l1, h1), "to": (l2, h2), "score": s}``, largest first (ties:
    the earlier pair first)."""
    flat = score.reshape(-1)
    order = np.argsort(-flat, kind="stable")[:top]
    L, H = score.shape[:2]
    rows = []
    for i in order:
        l1, h1, l2, h2 = np.unravel_index(int(i), (L, H, L, H))
        if l1 < l2:
            rows.append({"from": (int(l1), int(h1)), "to": (int(l2), int(h2)), "score": float(flat[i])})
    return rows
