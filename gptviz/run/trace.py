"""``trace(model, idx, ...)``: run the model once and keep every intermediate tensor, in order.

Nothing here touches the model: no hooks are registered, no flag is flipped, no weight is written.
The recorder (and, for weight-gradient norms, the Linear layers' taps: ``weight_norms``) lives for one
call in one thread, so any number of threads may trace one shared model at the same time.
"""
from __future__ import annotations

import contextlib
import itertools
import warnings
from collections.abc import Mapping
from typing import Any, Callable, Iterable, Iterator, Optional, Union, cast

import numpy as np
import torch

from ..model.gpt import GPT
from ..model.hook_names import parse_act_name
from . import on_demand
from .loss import loss_breakdown
from .on_demand import OnDemand
from .step_meta import StepMeta, step_metas
from .weight_norms import LinearTaps, embedding_matrices

_SIZE_VERSIONS = itertools.count(1)  # Trace.size_version: every value new, whichever thread draws it

# Traces served from a cache are read-only (Trace.freeze); reading one through torch.from_numpy is fine and
# nothing here writes to it, so torch's warning about non-writable arrays would only be noise.
warnings.filterwarnings("ignore", message="The given NumPy array is not writable", category=UserWarning)

Edit = Union[torch.Tensor, np.ndarray, Callable[[torch.Tensor], Optional[torch.Tensor]]]


class _Recorder:
    def __init__(self, edits: dict[str, Edit], grads: bool, slim_d_head: float = 0, masked=None, config=None,
                 lean_grads: bool = False, layers: Optional[frozenset[int]] = None):
        self.acts: dict[str, Union[torch.Tensor, OnDemand]] = {}  # OnDemand: a step worked out when read
        self.seen: set[str] = set()  # every step the model passed, kept or not
        self.layers = layers  # keep only the steps of these layers and those outside every block (None: all)
        self.edits = edits
        self.grads = grads
        self.raw: Optional[dict[str, torch.Tensor]] = None  # see _embedding_grad_norms
        # slim (d_head > 0): the score steps of the layers not edited there are worked out when read (on_demand)
        self.slim_d_head = slim_d_head
        self.keep_layers = on_demand.edited_layers(edits)
        self.notes: dict[str, OnDemand] = {}  # with grads: attn_scores kept until its gradient is taken
        # per layer, (1|B, 1, T, T) bool: the cells its attention may not use, as the model masks them (layers with
        # the same mask share one tensor)
        self.masked = masked
        self.config = config
        # lean_grads (no query row without a key): a layer's pattern and attn_scores gradients are worked out from
        # ∂loss/∂z too, unless an edit sits between them (on_demand.grad_kept_layers)
        self.lean_grads = lean_grads
        self.grad_keep_layers = on_demand.grad_kept_layers(edits)

    def __call__(self, name: str, x: torch.Tensor) -> torch.Tensor:
        self.seen.add(name)
        if name in self.edits:
            x = _apply_edit(name, x, self.edits[name])
        if self.layers is not None and parse_act_name(name).layer not in (None, *self.layers):
            return x  # another layer's step: the backward pass goes through it, the trace does not keep it
        if self.grads and not x.requires_grad:
            # A step with no path back to a weight (e.g. a fixed position table) becomes a leaf,
            # so the loss still has a gradient with respect to it.
            x = x.detach().requires_grad_(True)
        extra = on_demand.extra_step(name) if self.slim_d_head else None
        if extra is not None and (not self.grads or extra[1] == "probs") and name not in self.edits:
            # one operation on kept steps, worked out when read (probs is off the loss's path: it has no gradient)
            self.acts[name] = on_demand.extra_note(name, extra[1], extra[0], self.config)
            return x
        slim = on_demand.slim_step(name) if self.slim_d_head else None
        if slim is not None and slim[0] not in self.keep_layers:
            layer, step = slim
            if step != "attn_scores":
                self.acts[name] = OnDemand(step, layer, self.slim_d_head)
                return x
            note = OnDemand(step, layer, self.slim_d_head, self.masked[layer])
            if not self.grads or (self.lean_grads and layer not in self.grad_keep_layers):
                self.acts[name] = note
                return x
            self.notes[name] = note
        self.acts[name] = x
        return x


def _apply_edit(name: str, x: torch.Tensor, edit: Edit) -> torch.Tensor:
    out: Union[torch.Tensor, np.ndarray, None]
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
            v = self._acts[name]
        except KeyError:
            raise KeyError(f"{name!r} was not recorded in this trace") from None
        if isinstance(v, OnDemand):  # a slim trace's step, worked out now (gptviz.run.on_demand)
            return self._worked_out(name, False, lambda: on_demand.forward_value(self, v))
        return v

    _MEMO = 4  # the last few values worked out: a page reads one step twice, gradients build on each other
    size_version = 0  # changes whenever the trace's size may have (a step worked out): ByteLRU measures it then

    def _worked_out(self, name: str, grad: bool, compute):
        memo = getattr(self, "_memo", ())
        for key, value in memo:
            if key == (name, grad):
                return value
        value = compute()
        value = None if value is None else on_demand.as_trace_value(self, value)
        # a new tuple swapped in whole: sessions sharing the trace never see it half written
        self._memo = (((name, grad), value),) + tuple(memo[: self._MEMO - 1])
        self.size_version = next(_SIZE_VERSIONS)  # never seen before: a cache holding this trace measures it again
        return value

    def __contains__(self, name) -> bool:
        return name in self._acts

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
        g = self.grads.get(name)
        if isinstance(g, OnDemand):
            return self._worked_out(name, True, lambda: on_demand.grad_value(self, g))
        return g

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
        v = self._acts[name]
        if isinstance(v, OnDemand):
            if v.step in on_demand.STEPS:  # every score step has the pattern's shape
                v = self._acts[f"blocks.{v.layer}.attn.hook_pattern"]
            else:
                same = {"probs": "hook_logits", "k_rep": f"blocks.{v.layer}.attn.hook_q",
                        "v_rep": f"blocks.{v.layer}.attn.hook_q", "post": f"blocks.{v.layer}.mlp.hook_pre"}[v.step]
                v = self._acts[same]
        return tuple(v.shape)

    @property
    def slim(self) -> bool:
        """Whether some score steps are worked out when read rather than kept (``trace(..., slim=True)``)."""
        return any(isinstance(v, OnDemand) for v in self._acts.values())

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
            elif isinstance(v, OnDemand):
                v.freeze()

        for d in (self._acts, self.grads or {}, self.param_grads or {}, self.breakdown or {}, self.source):
            for v in d.values():
                fix(v)
        for v in (self.idx, self.targets, self.attention_mask):
            fix(v)
        return self


def _to_numpy(t: Any):
    if t is None or isinstance(t, np.ndarray):
        return t
    if isinstance(t, OnDemand):
        return t.numpy()
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
    slim: bool = False,
    layers: Optional[Iterable[int]] = None,
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

    ``slim=True`` (a decoder-only model): each layer's ``hook_scores_raw``, ``hook_scores_scaled`` and
    ``hook_attn_scores`` are not kept but worked out, bit for bit the same, when read (``gptviz.run.on_demand``):
    a trace of a long text then holds one (batch, head, T, T) tensor a layer instead of four. So are
    ``hook_probs`` (then ``trace.breakdown`` has no ``"probs"``) and, without gradients, the repeated keys and
    values and the MLP's ``hook_post``; with gradients, the four score steps' gradients come from ∂loss/∂z.

    ``layers`` (a decoder-only model): keep only the steps, and their gradients, of these layers and those outside
    every block (embeddings, final norm, logits, loss), as the Backward page does for the layer in view on a long
    text. Every number kept is the same as in the whole trace; the other layers' steps are simply not there.
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
    # slim_d_head: what attend() divides the scores by the square root of (d_head, or Gemma's attn_scale_dim); a
    # model that soft-caps its scores (Gemma 2) is never slimmed: the cap comes between the steps worked out
    cfg0 = model.config
    slim_d_head = (cfg0.d_head if cfg0.attn_scale_dim is None else cfg0.attn_scale_dim) \
        if slim and cfg0.n_enc_layer < 0 and cfg0.attn_softcap is None else 0
    masked: list[torch.Tensor] = []  # slim: each layer's masked cells
    lean = None
    if slim_d_head:  # the model's own masks, each layer's (a sliding window may be on some layers only)
        masks = model.layer_masks(idx.shape[1], attention_mask)
        inverted = {id(a): ~a for a, _ in masks}  # one tensor for the layers that share a mask
        masked, lean = [inverted[id(a)] for a, _ in masks], grads and all(dead is None for _, dead in masks)
    if layers is not None:
        layers = frozenset(int(l) for l in layers)
        if model.config.n_enc_layer >= 0 or not layers <= set(range(model.config.n_layer)):
            raise ValueError(f"layers={sorted(layers)} must be layers of a decoder-only model (0 to "
                             f"{model.config.n_layer - 1})")
    rec = _Recorder(edits, grads, slim_d_head, masked, model.config, bool(lean), layers)
    taps = None
    if grads and weight_grads == "norms":
        rec.raw = {}
        taps = LinearTaps(model, skip=embedding_matrices(model))  # the Linear layers' norms from their outputs
    cfg = model.config
    with torch.set_grad_enabled(grads), (taps.tapping() if taps is not None else contextlib.nullcontext()):
        logits = model.run(idx, attention_mask, rec=rec, train=False, **source)
        breakdown = None
        if targets is not None:
            lazy = bool(slim_d_head) and "hook_probs" not in edits  # the recorder keeps a note: no (B, T, V) table
            breakdown = loss_breakdown(logits, targets, with_probs=not lazy)
            rec("hook_probs", logits if lazy else breakdown["probs"])  # lazy: only the note is kept, never the value
            breakdown["loss_per_token"] = rec("hook_loss_per_token", breakdown["loss_per_token"])
            breakdown["loss"] = rec("hook_loss", breakdown["loss_per_token"].sum() / breakdown["n_valid"])
    unknown = sorted(set(edits) - rec.seen)
    if unknown:
        raise ValueError(f"cannot edit {', '.join(map(repr, unknown))}: no such step in this model")
    acts = rec.acts
    if isinstance(acts.get("hook_probs"), OnDemand):
        assert breakdown is not None  # hook_probs is recorded with targets only
        breakdown.pop("probs", None)  # a slim trace keeps no (B, T, V) probabilities: tr["hook_probs"] works them out
    grad_map: Optional[dict[str, Union[torch.Tensor, OnDemand]]] = None
    param_grads = None
    if grads:
        assert breakdown is not None  # grads=True needs targets (checked above)
        lean_layers = {t.layer for t in acts.values() if isinstance(t, OnDemand) and t.step == "attn_scores"}
        worked_out = {on_demand.step_name(layer, "pattern") for layer in lean_layers}  # its gradient: from z's
        names = [n for n, t in acts.items() if not isinstance(t, OnDemand) and n not in worked_out]
        params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        raw = rec.raw or {}  # the unembedding's inputs and outputs, if the model recorded them
        big = _embedding_weights(model) if {"wte_out", "lm_in", "lm_out"} <= set(raw) else {}
        params = [(n, p) for n, p in params if n not in big and not (taps is not None and taps.covers(p))]
        extra = [raw["wte_out"], raw["lm_out"]] if big else []
        outs = taps.outputs() if taps is not None else []
        inputs = [cast(torch.Tensor, acts[n]) for n in names] + [p for _, p in params] + extra + outs  # no OnDemand
        got = torch.autograd.grad(breakdown["loss"], inputs, allow_unused=True)
        grad_map = {n: g for n, g in zip(names, got[: len(names)]) if g is not None}
        for n, note in rec.notes.items():  # a kept attn_scores gives way to its note once its gradient is taken;
            acts[n] = note  # the gradients of the two score steps before it are worked out from its gradient
            if n in grad_map:
                for step in ("scores_raw", "scores_scaled"):
                    grad_map[on_demand.step_name(note.layer, step)] = OnDemand(step, note.layer, note.d_head,
                                                                               note.masked)
        for layer in lean_layers:  # every score step's gradient worked out, from ∂loss/∂z down
            if on_demand.step_name(layer, "z") in grad_map:
                for step in ("scores_raw", "scores_scaled", "attn_scores", "pattern"):
                    grad_map[on_demand.step_name(layer, step)] = OnDemand(step, layer, slim_d_head, masked[layer])
        n_act, n_par = len(names), len(params)
        param_grads = {n: (g if g is not None else torch.zeros_like(p))
                       for (n, p), g in zip(params, got[n_act:n_act + n_par])}
        if weight_grads == "norms":
            norms = {n: float(g.detach().float().norm()) for n, g in param_grads.items()}
            at = n_act + n_par  # then the embedding's output and the logits, then the tapped layers' outputs
            if big:
                norms.update(_embedding_grad_norms(model, idx, got[at], raw["lm_in"].detach(), got[at + 1], big))
            if taps is not None:
                norms.update(taps.norms(got[at + len(extra):]))
            order = [n for n, _ in model.named_parameters() if n in norms]
            param_grads, param_norms = None, {n: norms[n] for n in order}
        acts = {n: (t if isinstance(t, OnDemand) else t.detach()) for n, t in acts.items()}
        breakdown = {k: (v.detach() if isinstance(v, torch.Tensor) else v) for k, v in breakdown.items()}
    infos = step_metas(acts, cfg)
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
    with torch.no_grad():
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
