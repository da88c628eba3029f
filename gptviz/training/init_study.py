"""Why the initial scale of the weights matters: three facts, measured on a given model shape and batch.

Every function is pure (no Streamlit, no global RNG): it builds fresh models ``GPT(cfg.replace(init_std=s))``
with the config's own seed, so the same arguments always give the same numbers.

1. ``loss_sweep``: the initial loss at many init scales. Small weights give near-zero logits, a near-uniform
   guess and a loss of ln V; large weights give confident, mostly wrong guesses and a loss far above it.
2. ``initial_distribution`` and ``training_curves``: the first guess at a small and a large scale, and a short
   seeded training from each. The large start spends its first steps undoing its own confidence.
3. ``activation_stats`` / ``activation_sweep``: the MLP's pre- and post-activation histograms, the share of
   units saturated (rule in ``SATURATION_RULES``) and the gradient that reaches the pre-activation.
4. ``spread_demo`` and ``residual_stds``: ``x @ W`` keeps std(x) when W ~ N(0, 1/n), multiplies it by √n when
   W ~ N(0, 1); and the std of each point of the residual stream of a freshly initialised model.

Nothing here changes torch's thread count: it is process-wide, so in the app (one process, every session) a change
would reach every other session's work. For models this small the intra-op thread pool's hand-offs cost more than
the arithmetic, badly so on a busy machine (the 13-scale saturation sweep: 0.4–0.8 s on one thread, 8.5–9.4 s on
two, with both cores loaded): the server is best started with one torch thread.
"""
from __future__ import annotations

import math
import threading
import time
from contextlib import contextmanager
from typing import Iterator, Optional, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from ..config import ModelConfig
from ..model.gpt import GPT
from ..model.hook_names import act_name
from ..run.loss import loss_breakdown
from ..run.trace import trace
from .fresh_models import fresh_model, read_only_model
from .tasks import Task, TaskBatch

# 13 scales, 4 per decade, from 0.002 to 2: 0.02 (GPT-2's choice) and 0.2 are on the grid.
GRID: tuple[float, ...] = tuple(round(0.002 * 10 ** (k / 4), 10) for k in range(13))
SMALL_STD = 0.02
LARGE_STD = 1.0
MAX_SWEEP_PARAMS = 5_000_000  # above this, building 13 models per view is too slow for a live page
MAX_TRAIN_PARAMS = 250_000  # above this, two live trainings of 200 steps take too long (e.g. a 50k vocabulary)
TANH_SATURATED = 0.97  # |tanh(x)| > 0.97  <=>  |x| > 2.09, where the slope 1 - tanh² is below 0.06
GELU_SATURATED = -3.0  # pre < -3: GELU's flat left tail, |slope| < 0.012 and |output| < 0.005

SATURATION_RULES = {
    "tanh": r"|\tanh(x)| > 0.97 \;(\text{slope } 1-\tanh^2 < 0.06)",
    "relu": r"\mathrm{relu}(x) = 0 \;(\text{slope exactly } 0)",
    "gelu": r"x < -3 \;(|\text{slope}| < 0.012)",
    "gelu_tanh": r"x < -3 \;(|\text{slope}| < 0.012)",
}
SATURATION_WORDS = {
    "tanh": "|tanh| > 0.97: the flat ends, where the slope is below 0.06",
    "relu": "output exactly 0 (input ≤ 0): the slope is exactly 0",
    "gelu": "input below −3: GELU's flat left tail, slope below 0.012 in size",
    "gelu_tanh": "input below −3: GELU's flat left tail, slope below 0.012 in size",
}


def _t(a, dtype=torch.long) -> Optional[torch.Tensor]:
    return None if a is None else torch.as_tensor(np.asarray(a), dtype=dtype)


def _valid(x: torch.Tensor, attention_mask: Optional[torch.Tensor]) -> torch.Tensor:
    """(B, T) bool: the real (not padded) tokens."""
    return torch.ones_like(x, dtype=torch.bool) if attention_mask is None else attention_mask.bool()


def ln_v(cfg: ModelConfig) -> float:
    return math.log(cfg.vocab_size)


# --------------------------------------------------------------------------- fact 1: the initial loss
@torch.no_grad()
def initial_loss(cfg: ModelConfig, x, y, attention_mask=None, init_std: Optional[float] = None) -> float:
    """Cross-entropy of a freshly initialised model (scale ``init_std``, default the config's) on the batch."""
    x, y, m = _t(x), _t(y), _t(attention_mask)
    _, loss = read_only_model(cfg, init_std)(x, y, m)
    return float(loss)


def loss_sweep(cfg: ModelConfig, x, y, attention_mask=None, scales: Sequence[float] = GRID) -> dict:
    """The initial loss at each scale, ln V, and the loss at the config's own ``init_std``.

    Returns ``scales, losses, ln_v, current_std, current_loss``.
    """
    return _loss_sweep_of(cfg, x, y, attention_mask, scales, [initial_loss(cfg, x, y, attention_mask, s)
                                                                 for s in scales])


def _loss_sweep_of(cfg: ModelConfig, x, y, attention_mask, scales: Sequence[float], losses: list[float]) -> dict:
    cur = cfg.init_std
    near = [i for i, s in enumerate(scales) if math.isclose(s, cur, rel_tol=1e-9)]
    cur_loss = losses[near[0]] if near else initial_loss(cfg, x, y, attention_mask, cur)
    return dict(scales=[float(s) for s in scales], losses=losses, ln_v=ln_v(cfg), current_std=cur,
                current_loss=cur_loss)


# --------------------------------------------------------------------------- fact 2: confident starts
def _guess(lg: torch.Tensor, pos: int, init_std: float, V: int, y_row) -> dict:
    lg = lg.double()
    p = F.softmax(lg, dim=-1)
    ent = float(-(p * F.log_softmax(lg, dim=-1)).sum())
    out = dict(probs=p.float().numpy(), pos=pos, init_std=float(init_std), max_prob=float(p.max()), entropy=ent,
               ln_v=math.log(V), logit_std=float(lg.std()), target=None, target_prob=None)
    if y_row is not None and int(y_row[pos]) >= 0:
        t = int(y_row[pos])
        out["target"], out["target_prob"] = t, float(p[t])
    return out


@torch.no_grad()
def initial_distributions(cfg: ModelConfig, x, attention_mask=None, init_std: Optional[float] = None,
                          row: int = 0, y=None) -> list[dict]:
    """``initial_distribution`` at every real position of one row, from one forward pass."""
    x, m = _t(x), _t(attention_mask)
    n = int(_valid(x, m)[row].sum())
    std = float(cfg.init_std if init_std is None else init_std)
    logits, _ = read_only_model(cfg, std)(x, None, m)
    y_row = None if y is None else np.asarray(y)[row]
    return [_guess(logits[row, t], t, std, cfg.vocab_size, y_row) for t in range(n)]


def initial_distribution(cfg: ModelConfig, x, attention_mask=None, init_std: Optional[float] = None,
                         row: int = 0, pos: Optional[int] = None, y=None) -> dict:
    """The first guess of a fresh model: softmax(logits) at one position (default: the row's last real token
    with a target, or its last real token).

    Returns ``probs`` (V,), ``pos``, ``init_std``, ``max_prob``, ``entropy`` (nats), ``ln_v``, ``logit_std``
    and, given ``y``, ``target`` (id or None) and ``target_prob``.
    """
    every = initial_distributions(cfg, x, attention_mask, init_std, row, y)
    n = len(every)
    if pos is None:  # the last real token that has a target, else the last real token
        scored = [d["pos"] for d in every if d["target"] is not None]
        pos = scored[-1] if scored else n - 1
    return every[int(min(max(pos, 0), n - 1))]


class IdsTask(Task):
    """Next-token prediction on a fixed stream of token ids (random windows, seeded): no tokenizer needed."""

    name = "ids"

    def __init__(self, ids: Sequence[int], vocab_size: int, block_size: int):
        super().__init__(None)
        self.ids = torch.as_tensor(list(ids), dtype=torch.long)
        self._vocab_size = int(vocab_size)
        self.block_size = int(block_size)
        if self.ids.numel() < self.block_size + 2:
            raise ValueError(f"the text is too short to train on: {self.ids.numel()} tokens, "
                             f"need at least block_size + 2 = {self.block_size + 2}")

    @property
    def vocab_size(self) -> int:
        return self._vocab_size

    def batch(self, batch_size: int, g: torch.Generator) -> TaskBatch:
        T = self.block_size
        starts = torch.randint(0, self.ids.numel() - T - 1, (batch_size,), generator=g).tolist()
        x = torch.stack([self.ids[s:s + T] for s in starts])
        y = torch.stack([self.ids[s + 1:s + T + 1] for s in starts])
        return TaskBatch(x, y)


_threads_lock = threading.Lock()
_threads_users = 0
_threads_saved = 0


@contextmanager
def torch_threads(n: Optional[int]) -> Iterator[None]:
    """Run the block with ``n`` torch intra-op threads (None: leave the setting alone), then restore it.

    For a script that is the only user of its process: the setting is process-wide, so in the app it would change
    every other session's computations too. Nothing in this module uses it (overlapping users share one change:
    the first sets it, the last restores it).
    """
    global _threads_users, _threads_saved
    if n is None:
        yield
        return
    with _threads_lock:
        if _threads_users == 0:
            _threads_saved = torch.get_num_threads()
            torch.set_num_threads(n)
        _threads_users += 1
    try:
        yield
    finally:
        with _threads_lock:
            _threads_users -= 1
            if _threads_users == 0:
                torch.set_num_threads(_threads_saved)


def training_curves(cfg: ModelConfig, ids: Sequence[int], scales: Sequence[float] = (SMALL_STD, LARGE_STD),
                    steps: int = 200, batch_size: int = 16, lr: float = 3e-3, block_size: int = 32,
                    seed: int = 0) -> dict:
    """A short seeded AdamW training (constant lr, no warm-up) on ``ids`` from each scale.

    It runs on the process's own torch thread setting and never changes it (the setting is process-wide: it is
    every session's). A model this small trains fastest on one thread (on a busy 2-core machine, 2.8 s per 200-step
    curve on one thread against 45 s on two): a server that runs it should start with one torch thread.

    Returns ``scales, curves`` (one list of ``steps`` training losses per scale, plus the loss at step 0 first),
    ``seconds`` (per scale), ``ln_v``, ``steps``, ``tokens``.
    """
    from .loop import TrainConfig, train

    T = int(min(block_size, cfg.block_size, len(ids) - 2))
    if T < 2:
        raise ValueError(f"the text is too short to train on: {len(ids)} tokens, need at least 4")
    task = IdsTask(ids, cfg.vocab_size, T)
    tc = TrainConfig(steps=steps, batch_size=batch_size, lr=lr, seed=seed, schedule="constant",
                     eval_every=steps, snapshot_every=steps)
    curves, seconds = [], []
    for s in scales:
        t0 = time.perf_counter()
        _, hist = train(fresh_model(cfg, s), task, tc, copy_model=False)
        seconds.append(time.perf_counter() - t0)
        curves.append([hist.eval_loss[0], *hist.loss])
    return dict(scales=[float(s) for s in scales], curves=curves, seconds=seconds, ln_v=ln_v(cfg), steps=steps,
                tokens=int(task.ids.numel()))


# --------------------------------------------------------------------------- fact 3: saturation
def saturated(activation: str, pre: torch.Tensor, post: torch.Tensor) -> torch.Tensor:
    """Bool mask of saturated units (see ``SATURATION_WORDS``): where the activation's slope is (nearly) 0."""
    if activation == "tanh":
        return post.abs() > TANH_SATURATED
    if activation == "relu":
        return post == 0
    if activation in ("gelu", "gelu_tanh"):
        return pre < GELU_SATURATED
    raise ValueError(f"unknown activation {activation!r}")


def has_mlp(cfg: ModelConfig) -> bool:
    """Whether the study has dense MLP activations to look at: not attention-only, and no mixture of experts (whose
    hidden units each run on the tokens routed to their expert only)."""
    return not getattr(cfg, "attn_only", False) and not getattr(cfg, "n_expert", 0)


def _hist(v: np.ndarray, lo: float, hi: float, bins: int) -> tuple[list[int], list[float]]:
    if not hi > lo:
        lo, hi = lo - 0.5, hi + 0.5
    counts, edges = np.histogram(v, bins=bins, range=(lo, hi))
    return counts.tolist(), edges.tolist()


class _MlpRecorder:
    """Keeps each layer's MLP input to the activation (``hook_pre``) and its output (``hook_post``), nothing else:
    the saturation study reads only these and their gradients."""

    def __init__(self, n_layer: int):
        self.kept = {act_name(step, l): None for l in range(n_layer) for step in ("pre", "post")}

    def __call__(self, name: str, x: torch.Tensor) -> torch.Tensor:
        if name in self.kept:
            self.kept[name] = x
        return x


def _mlp_acts_and_grads(model: GPT, x, y, m) -> tuple[dict, dict, float]:
    """The MLP's ``hook_pre``/``hook_post`` of every layer and ∂loss/∂ each, the loss being ``trace``'s (the mean
    over the positions with a target). The same numbers as ``trace(..., grads=True)``, without its bookkeeping and
    without the weights' gradients: a 13-scale sweep on every text change stays quick."""
    model.check_inputs(x, y, m)
    rec = _MlpRecorder(model.config.n_layer)
    with torch.enable_grad():
        logits = model.run(x, m, rec=rec, train=False)
        loss = loss_breakdown(logits, y)["loss"]
        names = [n for n, t in rec.kept.items() if t is not None and t.requires_grad]
        got = torch.autograd.grad(loss, [rec.kept[n] for n in names], allow_unused=True)
    acts = {n: t.detach() for n, t in rec.kept.items() if t is not None}
    return acts, {n: g for n, g in zip(names, got) if g is not None}, float(loss.detach())


def _mlp_layers(cfg: ModelConfig, x, y, attention_mask, init_std, activation, bins: Optional[int]) -> list[dict]:
    return _mlp_pass(cfg, x, y, attention_mask, init_std, activation, bins)[0]


def _mlp_pass(cfg: ModelConfig, x, y, attention_mask, init_std, activation,
              bins: Optional[int]) -> tuple[list[dict], float]:
    """Each layer's saturation numbers (and histograms, given ``bins``), and the loss of the model studied."""
    x, y, m = _t(x), _t(y), _t(attention_mask)
    act = activation or cfg.activation
    if cfg.gated_mlp:  # saturation is a plain MLP's story: study one of the same shape (the gate multiplies it)
        cfg = cfg.replace(gated_mlp=False)
    acts, grads, loss = _mlp_acts_and_grads(read_only_model(cfg, init_std, act), x, y, m)
    valid = _valid(x, m)
    layers = []
    for l in range(cfg.n_layer):
        pre = acts[act_name("pre", l)][valid]  # (N, d_mlp), real tokens only
        post = acts[act_name("post", l)][valid]
        gpre = grads.get(act_name("pre", l))
        gpost = grads.get(act_name("post", l))
        g_pre = float(gpre[valid].abs().mean()) if gpre is not None else 0.0
        g_post = float(gpost[valid].abs().mean()) if gpost is not None else 0.0
        d = dict(layer=l, saturated=float(saturated(act, pre, post).float().mean()), grad_pre=g_pre, grad_post=g_post,
                 pass_through=g_pre / g_post if g_post > 0 else float("nan"),
                 pre_std=float(pre.std()) if pre.numel() > 1 else 0.0)
        if bins:
            p, q = pre.flatten().numpy(), post.flatten().numpy()
            r = float(np.abs(p).max()) if p.size else 1.0
            d["pre_counts"], d["pre_edges"] = _hist(p, -r, r, bins)
            qlo, qhi = (-1.0, 1.0) if act == "tanh" else (float(q.min()), float(q.max()))
            d["post_counts"], d["post_edges"] = _hist(q, qlo, qhi, bins)
        layers.append(d)
    return layers, loss


def activation_stats(cfg: ModelConfig, x, y, attention_mask=None, init_std: Optional[float] = None,
                     activation: Optional[str] = None, bins: int = 40) -> dict:
    """Per layer, for a fresh model at ``init_std`` with ``activation`` (default: the config's):
    histograms (counts + bin edges) of the MLP pre- and post-activation over the real tokens, the share
    of units saturated, and the mean |∂loss/∂pre| and |∂loss/∂post| (their ratio: how much of the gradient
    arriving at the activation's output gets through to its input).

    Returns ``has_mlp, activation, init_std, rule, layers``; an attention-only config gives ``has_mlp=False``
    and no layers.
    """
    act = activation or cfg.activation
    std = float(cfg.init_std if init_std is None else init_std)
    base = dict(activation=act, init_std=std, rule=SATURATION_WORDS[act])
    if not has_mlp(cfg):
        return dict(base, has_mlp=False, layers=[])
    return dict(base, has_mlp=True, layers=_mlp_layers(cfg, x, y, attention_mask, std, act, bins))


def activation_sweep(cfg: ModelConfig, x, y, attention_mask=None, scales: Sequence[float] = GRID,
                     activation: Optional[str] = None) -> dict:
    """``activation_stats`` without histograms at each scale: ``scales`` and, per layer (lists over scales),
    ``saturated, grad_pre, grad_post, pass_through``."""
    act = activation or cfg.activation
    out = dict(has_mlp=has_mlp(cfg), activation=act, scales=[float(s) for s in scales], layers=[])
    if not out["has_mlp"]:
        return out
    return _activation_sweep_of(out, [_mlp_layers(cfg, x, y, attention_mask, s, act, None) for s in scales])


def _activation_sweep_of(out: dict, per_scale: list[list[dict]]) -> dict:
    for l in range(len(per_scale[0])):
        out["layers"].append({k: [ps[l][k] for ps in per_scale]
                              for k in ("saturated", "grad_pre", "grad_post", "pass_through")})
    return out


def sweeps(cfg: ModelConfig, x, y, attention_mask=None, scales: Sequence[float] = GRID) -> tuple[dict, Optional[dict]]:
    """``loss_sweep`` and ``activation_sweep`` of the config's own activation, from one forward and backward pass
    of each fresh model: the pass the saturation study makes gives the loss too. Only a plain MLP with an activation
    the study knows is studied as it is; for any other model the second is None (``activation_sweep`` studies a
    plain MLP of the same shape) and the first is ``loss_sweep``'s."""
    act = cfg.activation
    if not has_mlp(cfg) or cfg.gated_mlp or act not in SATURATION_WORDS:
        return loss_sweep(cfg, x, y, attention_mask, scales), None
    passes = [_mlp_pass(cfg, x, y, attention_mask, s, act, None) for s in scales]
    losses = _loss_sweep_of(cfg, x, y, attention_mask, scales, [loss for _, loss in passes])
    out = dict(has_mlp=True, activation=act, scales=[float(s) for s in scales], layers=[])
    return losses, _activation_sweep_of(out, [layers for layers, _ in passes])


# --------------------------------------------------------------------------- keeping the spread
def spread_demo(n: int, rows: Optional[int] = None, depth: Optional[int] = None, seed: int = 0) -> dict:
    """x ~ N(0, 1) of shape (rows, n) through ``depth`` random n×n matrices, W ~ N(0, 1/n) or W ~ N(0, 1).

    Returns ``n, sqrt_n, std_x``, the one-step ratios ``ratio_scaled`` (≈ 1) and ``ratio_unit`` (≈ √n), and the
    std after each of ``depth`` multiplications for both (``depth_scaled``, ``depth_unit``, index 0 = x).
    By default 6 matrices and 2,000 rows, fewer of both for a wide n (GPT-2's 768) so it stays well under a second.
    """
    depth = depth or (6 if n <= 1024 else 2)
    rows = rows or int(min(2000, max(16, 100_000_000 // (n * n * depth))))
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, n, generator=g)
    out = dict(n=n, sqrt_n=math.sqrt(n), std_x=float(x.std()))
    for name, w_std in (("scaled", 1 / math.sqrt(n)), ("unit", 1.0)):
        h, stds = x, [float(x.std())]
        for _ in range(depth):
            W = torch.randn(n, n, generator=g) * w_std
            h = h @ W
            stds.append(float(h.std()))
        out[f"depth_{name}"] = stds
        out[f"ratio_{name}"] = stds[1] / stds[0]
    return out


def residual_points(cfg: ModelConfig) -> list[tuple[str, str]]:
    """(hook name, label) for each point of the residual stream, in order, without repeats."""
    pts = [("hook_embed", "token embedding")]
    for l in range(cfg.n_layer):
        if l == 0:
            pts.append((f"blocks.{l}.hook_resid_pre", "L0 in (tok + pos)"))
        if has_mlp(cfg):
            pts.append((f"blocks.{l}.hook_resid_mid", f"L{l} after attn"))
            pts.append((f"blocks.{l}.hook_resid_post", f"L{l} after MLP"))
        else:  # an attention-only block's output is its resid_mid: list it once
            pts.append((f"blocks.{l}.hook_resid_post", f"L{l} after attn"))
    return pts


@torch.no_grad()
def residual_stds(cfg: ModelConfig, x, attention_mask=None, init_std: Optional[float] = None) -> dict:
    """The std (over real tokens and channels) at each point of a fresh model's residual stream.

    Returns ``names, labels, stds, init_std``.
    """
    x, m = _t(x), _t(attention_mask)
    tr = trace(read_only_model(cfg, init_std), x, attention_mask=m)
    valid = _valid(x, m)
    pts = residual_points(cfg)
    stds = [float(tr[n][valid].std()) for n, _ in pts]
    return dict(names=[n for n, _ in pts], labels=[lab for _, lab in pts], stds=stds,
                init_std=float(cfg.init_std if init_std is None else init_std))
