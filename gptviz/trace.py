"""``trace(model, idx, ...)``: run the model once and keep every intermediate tensor, in order.

Nothing here touches the model: no hooks are registered, no flag is flipped, no weight is written.
The recorder is a local object that lives for one call, so any number of threads may trace one
shared model at the same time.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable, Iterator, Optional, Union

import numpy as np
import torch

from .loss import loss_breakdown
from .model import GPT
from .steps import StepInfo, describe

Edit = Union[torch.Tensor, np.ndarray, Callable[[torch.Tensor], Optional[torch.Tensor]]]


class _Recorder:
    def __init__(self, edits: dict[str, Edit], grads: bool):
        self.acts: dict[str, torch.Tensor] = {}
        self.edits = edits
        self.grads = grads

    def __call__(self, name: str, x: torch.Tensor) -> torch.Tensor:
        if name in self.edits:
            x = _apply_edit(name, x, self.edits[name])
        if self.grads and not x.requires_grad:
            # A step with no path back to a weight (e.g. a fixed position table) becomes a leaf,
            # so the loss still has a gradient with respect to it.
            x = x.detach().requires_grad_(True)
        self.acts[name] = x
        return x


def _apply_edit(name: str, x: torch.Tensor, edit: Edit) -> torch.Tensor:
    if callable(edit):
        out = edit(x.clone())
        if out is None:
            raise ValueError(f"the edit function for {name!r} returned None: return the new tensor")
    else:
        out = edit
    out = torch.as_tensor(out, dtype=x.dtype, device=x.device)
    if out.shape != x.shape:
        raise ValueError(f"the edit for {name!r} has shape {tuple(out.shape)}, but the step has shape {tuple(x.shape)}")
    return out


class Trace(Mapping):
    """A mapping from hook name to recorded tensor, in the order the forward pass computed them.

    Besides the tensors it carries what a page needs to show them: ``info(name)`` (axes, formula,
    explanation, PyTorch line, kind of values), the inputs, the loss, and, when traced with
    ``grads=True``, ``grad(name)`` = d loss / d tensor and ``param_grads``.
    """

    def __init__(self, acts, infos, config, idx, targets=None, attention_mask=None, grads=None,
                 param_grads=None, breakdown=None, source=None):
        self._acts = dict(acts)
        self._infos = dict(infos)
        self.config = config
        self.idx = idx
        self.targets = targets
        self.attention_mask = attention_mask
        self.grads = dict(grads) if grads is not None else None
        self.param_grads = dict(param_grads) if param_grads is not None else None
        self.breakdown = breakdown  # loss_breakdown(...) with targets, else None
        # an encoder-decoder model's source side as given: enc_input / enc_mask / enc_out (empty for GPT)
        self.source = dict(source or {})

    # Mapping
    def __getitem__(self, name: str):
        try:
            return self._acts[name]
        except KeyError:
            raise KeyError(f"{name!r} was not recorded in this trace") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._acts)

    def __len__(self) -> int:
        return len(self._acts)

    def __repr__(self) -> str:
        return f"Trace({len(self)} steps, idx shape {tuple(self.idx.shape)})"

    # Metadata
    def info(self, name: str) -> StepInfo:
        return self._infos[name]

    @property
    def steps(self) -> list[StepInfo]:
        return [self._infos[n] for n in self._acts]

    def grad(self, name: str):
        """d loss / d (this step), or None if the trace has no gradients or the step is off the loss path."""
        if self.grads is None:
            return None
        return self.grads.get(name)

    def param_grad_norms(self) -> dict[str, float]:
        """‖d loss / d W‖ for every parameter tensor (empty without grads)."""
        if self.param_grads is None:
            return dict(getattr(self, "_param_grad_norms", None) or {})
        return {k: float((v.detach() if isinstance(v, torch.Tensor) else torch.as_tensor(v)).float().norm())
                for k, v in self.param_grads.items()}

    def without_param_grads(self) -> "Trace":
        """The same trace keeping only each parameter gradient's norm: a GPT-2-sized model's full
        parameter gradients are 0.5 GB, too much to cache."""
        norms = self.param_grad_norms()
        self.param_grads = None
        self._param_grad_norms = norms
        return self

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self._acts[name].shape)

    def names(self, layer: Optional[int] = None, stage: Optional[str] = None) -> list[str]:
        return [n for n in self._acts
                if (layer is None or self._infos[n].layer == layer) and (stage is None or self._infos[n].stage == stage)]

    @property
    def logits(self):
        return self._acts["hook_logits"]

    @property
    def loss(self) -> Optional[float]:
        return float(self._acts["hook_loss"]) if "hook_loss" in self._acts else None

    @property
    def is_numpy(self) -> bool:
        return isinstance(self.idx, np.ndarray)

    def numpy(self) -> "Trace":
        """The same trace holding plain numpy arrays: picklable, cacheable, ready to download."""
        conv = _to_numpy
        bd = None
        if self.breakdown is not None:
            bd = {k: (conv(v) if isinstance(v, torch.Tensor) else v) for k, v in self.breakdown.items()}
        return Trace(
            {k: conv(v) for k, v in self._acts.items()}, self._infos, self.config, conv(self.idx),
            conv(self.targets), conv(self.attention_mask),
            None if self.grads is None else {k: conv(v) for k, v in self.grads.items()},
            None if self.param_grads is None else {k: conv(v) for k, v in self.param_grads.items()},
            bd, {k: conv(v) for k, v in self.source.items()},
        )

    to_numpy = numpy


def _to_numpy(t: Any):
    if t is None or isinstance(t, np.ndarray):
        return t
    return t.detach().cpu().numpy()


def trace(
    model: GPT,
    idx: torch.Tensor,
    targets: Optional[torch.Tensor] = None,
    attention_mask: Optional[torch.Tensor] = None,
    edits: Optional[dict[str, Edit]] = None,
    grads: bool = False,
    enc_input: Optional[torch.Tensor] = None,
    enc_mask: Optional[torch.Tensor] = None,
    enc_out: Optional[torch.Tensor] = None,
) -> Trace:
    """Run ``model`` on ``idx`` (batch, pos) and record every step.

    ``edits`` maps hook names to a replacement tensor or to a function of the recorded tensor; the
    replacement is used from there on, so everything downstream is computed again from it. The
    weights are never touched. ``grads=True`` (needs ``targets``) also records d loss / d step.
    Dropout is always off in a trace.

    An encoder-decoder model (``gptviz.seq2seq``) also takes its source: ``enc_input`` (batch, enc_pos)
    token ids for a real encoder, or ``enc_out`` (batch, enc_pos, n_embd) in place of the fixed random
    encoder output, and ``enc_mask`` (batch, enc_pos) for padding.
    """
    idx = torch.as_tensor(idx)
    if targets is not None:
        targets = torch.as_tensor(targets)
    if attention_mask is not None:
        attention_mask = torch.as_tensor(attention_mask)
    source = {k: torch.as_tensor(v) for k, v in (("enc_input", enc_input), ("enc_mask", enc_mask),
                                                 ("enc_out", enc_out)) if v is not None}
    if source and model.config.n_enc_layer < 0:
        raise ValueError(f"{', '.join(source)} is for an encoder-decoder model; this one is decoder-only")
    model.check_inputs(idx, targets, attention_mask, **source)
    if grads and targets is None:
        raise ValueError("grads=True needs targets: the gradient is of the loss")
    edits = dict(edits or {})
    rec = _Recorder(edits, grads)
    cfg = model.config
    with torch.set_grad_enabled(grads):
        logits = model.run(idx, attention_mask, rec=rec, train=False, **source)
        breakdown = None
        if targets is not None:
            breakdown = loss_breakdown(logits, targets)
            rec("hook_probs", breakdown["probs"])
            breakdown["loss_per_token"] = rec("hook_loss_per_token", breakdown["loss_per_token"])
            breakdown["loss"] = rec("hook_loss", breakdown["loss_per_token"].sum() / breakdown["n_valid"])
    unknown = sorted(set(edits) - set(rec.acts))
    if unknown:
        raise ValueError(f"cannot edit {', '.join(map(repr, unknown))}: no such step in this model")
    acts = rec.acts
    grad_map = param_grads = None
    if grads:
        names = list(acts)
        params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        inputs = [acts[n] for n in names] + [p for _, p in params]
        got = torch.autograd.grad(breakdown["loss"], inputs, allow_unused=True)
        grad_map = {n: g for n, g in zip(names, got[: len(names)]) if g is not None}
        param_grads = {n: (g if g is not None else torch.zeros_like(p)) for (n, p), g in zip(params, got[len(names):])}
        acts = {n: t.detach() for n, t in acts.items()}
        breakdown = {k: (v.detach() if isinstance(v, torch.Tensor) else v) for k, v in breakdown.items()}
    infos = {n: describe(n, cfg) for n in acts}
    return Trace(acts, infos, cfg, idx, targets, attention_mask, grad_map, param_grads, breakdown, source)
