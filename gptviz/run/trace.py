"""``trace(model, idx, ...)``: run the model once and keep every intermediate tensor, in order.

Nothing here touches the model: no hooks are registered, no flag is flipped, no weight is written.
The recorder is a local object that lives for one call, so any number of threads may trace one
shared model at the same time.
"""
from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any, Callable, Iterator, Optional, Union

import numpy as np
import torch

from ..model.gpt import GPT
from .loss import loss_breakdown
from .step_meta import StepMeta, step_meta

# Traces served from a cache are read-only (Trace.freeze); reading one through torch.from_numpy is fine and
# nothing here writes to it, so torch's warning about non-writable arrays would only be noise.
warnings.filterwarnings("ignore", message="The given NumPy array is not writable", category=UserWarning)

Edit = Union[torch.Tensor, np.ndarray, Callable[[torch.Tensor], Optional[torch.Tensor]]]


class _Recorder:
    def __init__(self, edits: dict[str, Edit], grads: bool):
        self.acts: dict[str, torch.Tensor] = {}
        self.edits = edits
        self.grads = grads
        self.raw: Optional[dict[str, torch.Tensor]] = None  # see _embedding_grad_norms

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
    def info(self, name: str) -> StepMeta:
        return self._infos[name]

    @property
    def steps(self) -> list[StepMeta]:
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
                if (layer is None or self._infos[n].layer == layer)
                and (stage is None or self._infos[n].stage == stage)]

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
        out = Trace(
            {k: conv(v) for k, v in self._acts.items()}, self._infos, self.config, conv(self.idx),
            conv(self.targets), conv(self.attention_mask),
            None if self.grads is None else {k: conv(v) for k, v in self.grads.items()},
            None if self.param_grads is None else {k: conv(v) for k, v in self.param_grads.items()},
            bd, {k: conv(v) for k, v in self.source.items()},
        )
        if self.param_grads is None and getattr(self, "_param_grad_norms", None):
            out._param_grad_norms = dict(self._param_grad_norms)
        return out

    to_numpy = numpy

    def freeze(self) -> "Trace":
        """Make every numpy array of this trace read-only (in place) and return it: a trace shared between
        sessions from a cache can then never be changed by one of them by accident (writing to it raises)."""
        def fix(v):
            if isinstance(v, np.ndarray):
                v.setflags(write=False)

        for d in (self._acts, self.grads or {}, self.param_grads or {}, self.breakdown or {}, self.source):
            for v in d.values():
                fix(v)
        for v in (self.idx, self.targets, self.attention_mask):
            fix(v)
        return self


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
    weight_grads: str = "tensors",
) -> Trace:
    """Run ``model`` on ``idx`` (batch, pos) and record every step.

    ``edits`` maps hook names to a replacement tensor or to a function of the recorded tensor; the
    replacement is used from there on, so everything downstream is computed again from it. The
    weights are never touched. ``grads=True`` (needs ``targets``) also records d loss / d step.
    Dropout is always off in a trace.

    ``weight_grads``, with ``grads=True``: ``"tensors"`` keeps every parameter's gradient
    (``trace.param_grads``); ``"norms"`` keeps only their norms (``trace.param_grad_norms()``), and works
    out the norms of the token embedding's and unembedding's gradients (vocab × n_embd each, most of a
    GPT-2's backward pass) from the gradients at their inputs and outputs, without building those
    matrices (see ``_embedding_grad_norms``). The norms agree with the tensors' to float rounding.

    An encoder-decoder model (``gptviz.model.encoder_decoder``) also takes its source: ``enc_input`` (batch, enc_pos)
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
    if weight_grads not in ("tensors", "norms"):
        raise ValueError(f"weight_grads={weight_grads!r} must be 'tensors' or 'norms'")
    rec = _Recorder(edits, grads)
    if grads and weight_grads == "norms":
        rec.raw = {}
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
        big = _embedding_weights(model) if rec.raw and {"wte_out", "lm_in", "lm_out"} <= set(rec.raw) else {}
        params = [(n, p) for n, p in params if n not in big]
        extra = [rec.raw["wte_out"], rec.raw["lm_out"]] if big else []
        inputs = [acts[n] for n in names] + [p for _, p in params] + extra
        got = torch.autograd.grad(breakdown["loss"], inputs, allow_unused=True)
        grad_map = {n: g for n, g in zip(names, got[: len(names)]) if g is not None}
        n_act, n_par = len(names), len(params)
        param_grads = {n: (g if g is not None else torch.zeros_like(p))
                       for (n, p), g in zip(params, got[n_act:n_act + n_par])}
        if weight_grads == "norms":
            norms = {n: float(g.detach().float().norm()) for n, g in param_grads.items()}
            if big:
                norms.update(_embedding_grad_norms(model, idx, got[-2], rec.raw["lm_in"].detach(), got[-1], big))
            order = [n for n, _ in model.named_parameters() if n in norms]
            param_grads, param_norms = None, {n: norms[n] for n in order}
        acts = {n: t.detach() for n, t in acts.items()}
        breakdown = {k: (v.detach() if isinstance(v, torch.Tensor) else v) for k, v in breakdown.items()}
    infos = {n: step_meta(n, cfg) for n in acts}
    out = Trace(acts, infos, cfg, idx, targets, attention_mask, grad_map, param_grads, breakdown, source)
    if grads and weight_grads == "norms":
        out._param_grad_norms = param_norms
    return out


def _embedding_weights(model) -> dict[str, str]:
    """{parameter name: role} for the token embedding and the unembedding ("tied" when they are one matrix)."""
    wte = model.transformer.wte.weight
    if model.lm_head.weight is wte:
        return {n: "tied" for n, p in model.named_parameters() if p is wte}
    out = {n: "embed" for n, p in model.named_parameters() if p is wte}
    out.update({n: "unembed" for n, p in model.named_parameters() if p is model.lm_head.weight})
    return out


@torch.no_grad()
def _embedding_grad_norms(model, idx, g_embed, x, g_logits, names: dict[str, str]) -> dict[str, float]:
    """‖∂loss/∂W‖ of the embedding and unembedding matrices, from the gradients at their inputs and outputs.

    Over the N = B·T positions, with ids i_t, the embedding's output gradient e_t (N × C), the unembedding's
    input x_t (N × C) and its output gradient G (N × V):
    - the unembedding's gradient is U = Gᵀ X, and ‖U‖² = Σ_{s,t} (G Gᵀ)_{st} (X Xᵀ)_{st} (two N × N Gram
      matrices instead of a V × C product);
    - the embedding's gradient is S, row v = Σ_{t: i_t = v} e_t, so ‖S‖² sums over the distinct ids only;
    - tied, the matrix gets U + S, and ‖U + S‖² = ‖U‖² + 2⟨U, S⟩ + ‖S‖², with ⟨U, S⟩ = Σ_v U_v · S_v over
      the ids present, U_v = Σ_t G_{tv} x_t.
    Worked in float64."""
    dt = torch.float64
    ids = idx.reshape(-1)
    uniq, inv = torch.unique(ids, return_inverse=True)
    C = model.config.n_embd
    S = torch.zeros(len(uniq), C, dtype=dt)
    if g_embed is not None:
        S.index_add_(0, inv, g_embed.reshape(-1, C).to(dt))
    s2 = float((S * S).sum())
    u2 = cross = 0.0
    if g_logits is not None:
        G = g_logits.reshape(-1, g_logits.shape[-1]).to(dt)
        X = x.reshape(-1, C).to(dt)
        u2 = float(((G @ G.T) * (X @ X.T)).sum())
        cross = float(((G[:, uniq].T @ X) * S).sum())
    out = {}
    for n, role in names.items():
        sq = {"tied": u2 + 2 * cross + s2, "embed": s2, "unembed": u2}[role]
        out[n] = max(sq, 0.0) ** 0.5
    return out
