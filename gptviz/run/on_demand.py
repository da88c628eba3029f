"""Steps a slim trace does not keep, worked out again when they are read.

A trace of a long text is mostly attention: each layer's ``hook_scores_raw``, ``hook_scores_scaled``,
``hook_attn_scores`` and ``hook_pattern`` are (batch, head, T, T) each, three quarters of GPT-2 small's trace at
T = 512. A slim trace (``trace(..., slim=True)``) keeps the pattern and every other step, and for the first three
keeps only an ``OnDemand`` note, plus which cells its layer masked (one bool per query and key: the causal mask, or
the sliding window's band on a layer that has one). Reading one computes it
from the steps that made it, with the very operations of ``HeadsAttention.attend`` on the very tensors the forward
pass used, so the values are exactly (bit for bit) the full trace's:

- ``scores_raw  = q @ kᵀ``, from the recorded (rotated, repeated) queries and keys;
- ``scores_scaled = scores_raw / √d_head`` (√attn_scale_dim where the config sets one: Gemma's query_pre_attn_scalar);
- ``attn_scores = scores_scaled`` with the masked cells set to −∞.

With gradients, ``∂loss/∂attn_scores`` and ``∂loss/∂pattern`` are kept, and the other two follow from the
backward pass of the same two operations: ``∂/∂scores_scaled = ∂/∂attn_scores`` with the masked cells set to 0
(``masked_fill``'s backward), and ``∂/∂scores_raw = ∂/∂scores_scaled / √d_head`` (a division's).

Without gradients a slim trace also leaves out three steps that are one operation on steps it keeps (``extra_step``):
``hook_probs = softmax(hook_logits)`` (as ``loss_breakdown`` computes it; (B, T, V), GPT-2's is 100 MB at T = 512),
grouped-query attention's ``hook_k_rep``/``hook_v_rep`` (the keys and values repeated to the query heads) and the
MLP's ``hook_post`` (the activation of ``hook_pre``, times ``hook_pre_linear`` when gated).

A layer whose scores are edited keeps them (an edit could not be replayed here), so does an edited extra step, and an
encoder-decoder model is never slimmed: only decoder-only self-attention is.
"""
from __future__ import annotations

import math
import re
from typing import Any, Optional

import numpy as np
import torch

STEPS = ("scores_raw", "scores_scaled", "attn_scores")
_NAME = re.compile(r"^blocks\.(\d+)\.attn\.hook_(scores_raw|scores_scaled|attn_scores)$")


def slim_step(name: str) -> Optional[tuple[int, str]]:
    """(layer, step) when ``name`` is a self-attention score step a slim trace may leave out, else None."""
    m = _NAME.match(name)
    return (int(m.group(1)), m.group(2)) if m else None


_EXTRA = re.compile(r"^(?:hook_(probs)|blocks\.(\d+)\.attn\.hook_(k_rep|v_rep)|blocks\.(\d+)\.mlp\.hook_(post))$")


def extra_step(name: str) -> Optional[tuple[int, str]]:
    """(layer, step) when ``name`` is one of the extra steps a slim trace without gradients leaves out (layer -1 for
    ``hook_probs``), else None."""
    m = _EXTRA.match(name)
    if not m:
        return None
    if m.group(1):
        return -1, "probs"
    return (int(m.group(2)), m.group(3)) if m.group(3) else (int(m.group(4)), m.group(5))


_ATTN = re.compile(r"^blocks\.(\d+)\.attn\.hook_(scores_raw|scores_scaled|attn_scores|pattern|z)$")


def grad_kept_layers(edits) -> set[int]:
    """The layers whose pattern and attn_scores gradients are kept rather than worked out from ∂loss/∂z: an edit of
    a score step, the pattern (a head switched off) or z comes between them and would not be replayed."""
    return {int(m.group(1)) for m in map(_ATTN.match, edits or ()) if m}


def edited_layers(edits) -> set[int]:
    """The layers whose score steps are edited: those keep their scores (an edit is not replayed on demand)."""
    return {s[0] for s in map(slim_step, edits or ()) if s is not None}


class OnDemand:
    """The note a slim trace keeps in place of a score step: which step, which layer, the head size, and for
    ``attn_scores`` (and the gradients) the masked cells, (1 or batch, 1, T, T) bool: ``~allowed`` of the model's
    own ``layer_masks``, the very mask ``attend`` filled with −∞ in this layer (a sliding window's band on a layer
    that has one; one tensor shared by the layers with the same mask)."""

    def __init__(self, step: str, layer: int, d_head: float, masked: Any = None, how: Optional[dict] = None):
        self.step, self.layer, self.d_head, self.masked = step, layer, d_head, masked
        self.how = how or {}  # an extra step's recipe: "repeat" (k_rep, v_rep), "activation" and "gated" (post)

    def __repr__(self) -> str:
        return f"OnDemand({self.step!r}, layer {self.layer})"

    def numpy(self) -> "OnDemand":
        m = self.masked
        return OnDemand(self.step, self.layer, self.d_head, m.detach().cpu().numpy() if isinstance(m, torch.Tensor)
                        else m, self.how)

    def freeze(self) -> None:
        if isinstance(self.masked, np.ndarray):
            self.masked.setflags(write=False)


def _t(x) -> torch.Tensor:
    return torch.from_numpy(x) if isinstance(x, np.ndarray) else x


def step_name(layer: int, step: str) -> str:
    return f"blocks.{layer}.attn.hook_{step}"


def _last_recorded(trace, layer: int, steps: tuple[str, ...]) -> torch.Tensor:
    for s in steps:
        n = step_name(layer, s)
        if n in trace:
            return _t(trace[n])
    raise KeyError(f"layer {layer}'s {steps[-1]} was not recorded")


def extra_note(name: str, step: str, layer: int, config) -> OnDemand:
    """The note for an extra step (see ``extra_step``), with what it needs from the model's config."""
    how = {}
    if step in ("k_rep", "v_rep"):
        how["repeat"] = config.n_head // config.n_kv_head
    elif step == "post":
        how.update(activation=config.activation, gated=bool(config.gated_mlp))
    return OnDemand(step, layer, config.d_head, None, how)


def forward_value(trace, note: OnDemand) -> torch.Tensor:
    """The step ``note`` stands for, as torch, from the trace's own recorded steps (the forward pass's operation)."""
    if note.step == "probs":
        return torch.softmax(_t(trace["hook_logits"]), dim=-1)
    if note.step in ("k_rep", "v_rep"):
        src = ("rot_k", "k_normed", "k") if note.step == "k_rep" else ("v",)
        return _last_recorded(trace, note.layer, src).repeat_interleave(note.how["repeat"], dim=2)
    if note.step == "post":
        from ..model.layers import activate

        pre = _t(trace[f"blocks.{note.layer}.mlp.hook_pre"])
        h = activate(pre, note.how["activation"])
        return h * _t(trace[f"blocks.{note.layer}.mlp.hook_pre_linear"]) if note.how["gated"] else h
    if note.step == "attn_scores":
        scaled = _t(trace[step_name(note.layer, "scores_scaled")])
        return scaled.masked_fill(_t(note.masked), float("-inf"))
    if note.step == "scores_scaled":
        return _t(trace[step_name(note.layer, "scores_raw")]) / math.sqrt(note.d_head)
    # scores_raw: the queries and keys as attend() multiplied them (normalised, rotated, repeated to the query heads)
    q = _last_recorded(trace, note.layer, ("rot_q", "q_normed", "q"))
    k = _last_recorded(trace, note.layer, ("k_rep", "rot_k", "k_normed", "k"))
    q, k = q.transpose(1, 2), k.transpose(1, 2)  # (B, nh, T|S, hs)
    return q @ k.transpose(-2, -1)


def grad_value(trace, note: OnDemand) -> Optional[torch.Tensor]:
    """∂loss/∂ the score step ``note`` stands for, by the backward pass's own operations, from the kept ∂loss/∂z
    (the pattern's, then attn_scores') or the kept ∂loss/∂attn_scores (the other two); None without gradients."""
    if note.step == "pattern":  # z = pattern @ v (per head): ∂/∂pattern = ∂/∂(pattern @ v) @ vᵀ
        g = trace.grad(step_name(note.layer, "z"))
        if g is None:
            return None
        v = _last_recorded(trace, note.layer, ("v_rep", "v")).transpose(1, 2)  # (B, nh, S, hs)
        return _t(g).transpose(1, 2) @ v.transpose(-2, -1)
    if note.step == "attn_scores":  # pattern = softmax(attn_scores): softmax's own backward
        g = trace.grad(step_name(note.layer, "pattern"))
        p = _t(trace[step_name(note.layer, "pattern")])
        return None if g is None else torch._softmax_backward_data(_t(g), p, -1, p.dtype)
    if note.step == "scores_scaled":
        g = trace.grad(step_name(note.layer, "attn_scores"))
        return None if g is None else _t(g).masked_fill(_t(note.masked), 0.0)
    if note.step == "scores_raw":
        g = trace.grad(step_name(note.layer, "scores_scaled"))
        return None if g is None else _t(g) / math.sqrt(note.d_head)
    raise KeyError(f"∂loss/∂{note.step} is not worked out")


def as_trace_value(trace, value: torch.Tensor):
    """A worked-out value in the trace's own kind: a read-only numpy array for a numpy trace, else the tensor."""
    if not trace.is_numpy:
        return value
    out = value.numpy()
    out.setflags(write=False)
    return out
