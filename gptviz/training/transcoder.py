"""Training transcoders on a model's MLPs, and measuring them on held-out text.

- ``collect_mlp_pairs(model, ids, n_tokens, ...)``: every layer's MLP input and output ``(N, n_layer, d)`` over
  random windows of a token stream.
- ``train_transcoder(inputs, outputs, TranscoderTrainConfig(...))``: a TopK transcoder (per-layer or cross-layer),
  all layers trained together. The loss is the sum over layers of each MLP output's batch FVU, plus the AuxK loss
  (Gao et al. 2024) for each layer's dead features. Plain Adam, each feature's whole decoder unit-norm after every
  step.
- ``evaluate_transcoder(model, transcoder, windows)``: on held-out windows, each layer's FVU, L0 and dead share,
  and the loss with every MLP replaced (through ``trace``'s ``edits``).
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from typing import Callable, Optional

import torch

from ..interp.transcoder import Transcoder, input_hook, output_hook
from ..run.trace import trace


# --------------------------------------------------------------------------- reading the MLPs
def mlp_pairs(model, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(inputs, outputs)``, each ``(B, T, n_layer, d)``: every MLP's input and output for token ids ``x``,
    read with the model's own recorder."""
    L = model.config.n_layer
    want = {input_hook(layer): ("in", layer) for layer in range(L)}
    want.update({output_hook(layer): ("out", layer) for layer in range(L)})
    got: dict = {}

    def rec(name, t):
        if name in want:
            got[want[name]] = t.detach()
        return t

    with torch.no_grad():
        model.run(x, rec=rec)
    missing = [name for name, key in want.items() if key not in got]
    if missing:
        raise ValueError(f"this model has no step {missing[0]!r}: a transcoder needs an MLP after a norm in every "
                         "layer")
    return (torch.stack([got[("in", layer)] for layer in range(L)], -2),
            torch.stack([got[("out", layer)] for layer in range(L)], -2))


def collect_mlp_pairs(model, ids: torch.Tensor, n_tokens: int, T: int = 128, batch: int = 64,
                      seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """``(inputs, outputs)``, each ``(n_tokens, n_layer, d)``, over random windows of ``ids`` (every position)."""
    if n_tokens < 1:
        raise ValueError(f"n_tokens={n_tokens}: collect at least one vector")
    g = torch.Generator().manual_seed(seed)
    ins, outs, have = [], [], 0
    while have < n_tokens:
        starts = torch.randint(0, ids.numel() - T, (batch,), generator=g)
        x = torch.stack([ids[s:s + T] for s in starts.tolist()])
        a, b = mlp_pairs(model, x)
        ins.append(a.reshape(-1, *a.shape[-2:]))
        outs.append(b.reshape(-1, *b.shape[-2:]))
        have += ins[-1].shape[0]
    return torch.cat(ins)[:n_tokens], torch.cat(outs)[:n_tokens]


# --------------------------------------------------------------------------- training
@dataclass
class TranscoderTrainConfig:
    n_features: int = 1024
    k: int = 32
    cross_layer: bool = False
    steps: int = 2000
    batch_size: int = 2048
    lr: float = 1e-3
    aux_k: int = 256  # how many dead features the AuxK loss uses per vector
    aux_coef: float = 1 / 32
    dead_after: int = 200_000  # a feature is dead once it has not fired for this many training vectors
    decay_from: float = 0.8  # the learning rate falls linearly to 0 over the last fifth of the steps
    seed: int = 0

    def __post_init__(self):
        for name in ("n_features", "k", "steps", "batch_size", "aux_k", "dead_after"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name}={v!r} must be a whole number of at least 1")
        if self.k > self.n_features:
            raise ValueError(f"k={self.k} cannot be more than n_features={self.n_features}")
        if not (math.isfinite(self.lr) and 0 < self.lr <= 1):
            raise ValueError(f"lr={self.lr!r} must be above 0 and at most 1")


def init_transcoder(inputs: torch.Tensor, outputs: torch.Tensor, cfg: TranscoderTrainConfig) -> Transcoder:
    """Random encoders (scaled by 1/sqrt(d)), random unit-norm decoders, ``b_dec`` each MLP output's mean."""
    g = torch.Generator().manual_seed(cfg.seed)
    L, d = inputs.shape[-2], inputs.shape[-1]
    tc = Transcoder(L, d, cfg.n_features, cfg.k, cfg.cross_layer)
    with torch.no_grad():
        for layer in range(L):
            tc.W_enc[layer].copy_(torch.randn(d, cfg.n_features, generator=g) / math.sqrt(d))
            tc.W_dec[layer].copy_(torch.randn(*tc.W_dec[layer].shape, generator=g))
            tc.b_dec[layer].copy_(outputs[:, layer].mean(0))
        tc.normalise_decoder()
    return tc


def losses(tc: Transcoder, x: torch.Tensor, y: torch.Tensor, dead: Optional[torch.Tensor], aux_k: int):
    """``(fvu, aux, fired)`` for a batch ``x``, ``y`` ``(B, n_layer, d)``: the sum over layers of each MLP output's
    squared error over its variance (a batch FVU), the AuxK loss (each layer's error at its own output,
    reconstructed by the ``aux_k`` strongest of that layer's dead features; 0 without dead features), and which
    features fired ``(n_layer, F)``."""
    L = tc.n_layer
    if tc.k is None:
        raise ValueError(f"gptviz trains TopK transcoders; this one's rule is {tc.activation!r}")
    feats, pres = [], []
    for layer in range(L):
        pre = tc.pre_acts(layer, x[:, layer])
        vals, idx = pre.topk(tc.k, dim=-1)
        feats.append(torch.zeros_like(pre).scatter(-1, idx, torch.relu(vals)))
        pres.append(pre)
    fvu = torch.zeros((), dtype=x.dtype)
    aux = torch.zeros((), dtype=x.dtype)
    for layer in range(L):
        y_hat = tc.decode(layer, feats)
        target = y[:, layer]
        var = (target - target.mean(0)).pow(2).sum(-1).mean().clamp(min=1e-12)
        fvu = fvu + (y_hat - target).pow(2).sum(-1).mean() / var
        if dead is not None and bool(dead[layer].any()):
            n = min(aux_k, int(dead[layer].sum()))
            err = (target - y_hat).detach()
            v, i = pres[layer].masked_fill(~dead[layer], float("-inf")).topk(n, dim=-1)
            e_hat = (torch.relu(v).unsqueeze(-1) * tc.W_dec[layer][i, 0]).sum(-2)
            aux = aux + (e_hat - err).pow(2).sum(-1).mean() / err.pow(2).sum(-1).mean().clamp(min=1e-12)
    fired = torch.stack([(f > 0).any(0) for f in feats])
    return fvu, aux, fired


def train_transcoder(inputs: torch.Tensor, outputs: torch.Tensor, cfg: TranscoderTrainConfig,
                     on_progress: Optional[Callable[[int, dict], None]] = None,
                     progress_every: int = 100) -> tuple[Transcoder, list[dict]]:
    """Train a transcoder on MLP inputs and outputs ``(N, n_layer, d)``, drawing batches at random (seeded).
    Returns it and its history: one row per ``progress_every`` steps (step, seconds, the batch FVU summed over
    layers, the aux loss, the dead share over every layer, lr)."""
    if inputs.shape != outputs.shape or inputs.dim() != 3:
        raise ValueError(f"inputs {tuple(inputs.shape)} and outputs {tuple(outputs.shape)} must both be "
                         "(N, n_layer, d)")
    g = torch.Generator().manual_seed(cfg.seed + 1)
    tc = init_transcoder(inputs, outputs, cfg)
    opt = torch.optim.Adam(tc.parameters(), lr=cfg.lr, betas=(0.9, 0.999))
    since = torch.zeros(tc.n_layer, cfg.n_features, dtype=torch.long)  # vectors since each feature last fired
    hist, t0 = [], time.perf_counter()
    N = inputs.shape[0]
    for step in range(1, cfg.steps + 1):
        frac = step / cfg.steps
        lr = cfg.lr * (1.0 if frac <= cfg.decay_from else max(0.0, (1 - frac) / (1 - cfg.decay_from)))
        for group in opt.param_groups:
            group["lr"] = lr
        rows = torch.randint(0, N, (cfg.batch_size,), generator=g)
        dead = since >= cfg.dead_after
        fvu, aux, fired = losses(tc, inputs[rows], outputs[rows], dead, cfg.aux_k)
        loss = fvu + cfg.aux_coef * aux
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        tc.normalise_decoder()
        since = torch.where(fired, torch.zeros_like(since), since + cfg.batch_size)
        if step % progress_every == 0 or step == cfg.steps:
            row = {"step": step, "seconds": round(time.perf_counter() - t0, 1), "fvu": round(float(fvu.detach()), 5),
                   "aux": round(float(aux.detach()), 5), "dead": round(float(dead.float().mean()), 4), "lr": lr}
            hist.append(row)
            if on_progress is not None:
                on_progress(step, row)
    tc.eval()
    tc.requires_grad_(False)
    tc.meta["train_config"] = asdict(cfg)
    return tc, hist


# --------------------------------------------------------------------------- measuring it
def evaluate_transcoder(model, tc: Transcoder, wins: torch.Tensor, batch: int = 64) -> dict:
    """On windows ``wins`` (n, T + 1): for each layer, the FVU of its MLP output (the squared error summed over
    every vector, over the vectors' summed squared distance from their mean), L0 (mean active features per vector)
    and the share of features that never fire; and the mean next-token loss per token of the model as it is and
    with the transcoder in place of every MLP at once."""
    L = tc.n_layer
    err = torch.zeros(L, dtype=torch.float64)
    sq = torch.zeros(L, dtype=torch.float64)
    total = torch.zeros(L, tc.d_model, dtype=torch.float64)
    l0 = torch.zeros(L, dtype=torch.float64)
    fired = torch.zeros(L, tc.n_features, dtype=torch.bool)
    clean = spliced = 0.0
    n_vec = n_tok = 0
    with torch.no_grad():
        for i in range(0, wins.shape[0], batch):
            w = wins[i:i + batch]
            x, y = w[:, :-1], w[:, 1:]
            a, b = mlp_pairs(model, x)
            a, b = a.reshape(-1, L, tc.d_model), b.reshape(-1, L, tc.d_model)
            feats = [tc.encode(layer, a[:, layer]) for layer in range(L)]
            for layer in range(L):
                out = b[:, layer].double()
                err[layer] += (tc.decode(layer, feats).double() - out).pow(2).sum()
                sq[layer] += out.pow(2).sum()
                total[layer] += out.sum(0)
                l0[layer] += (feats[layer] > 0).sum()
                fired[layer] |= (feats[layer] > 0).any(0)
            n_vec += a.shape[0]
            losses_here = [trace(model, x, y).loss, trace(model, x, y, edits=tc.replacement_edits()).loss]
            assert losses_here[0] is not None and losses_here[1] is not None  # targets given: a loss
            clean += float(losses_here[0]) * y.numel()
            spliced += float(losses_here[1]) * y.numel()
            n_tok += y.numel()
    # sum of squared distances from the mean = sum of squares - n * |mean|^2
    spread = sq - total.pow(2).sum(-1) / n_vec
    return {"fvu": (err / spread).tolist(), "l0": (l0 / n_vec).tolist(),
            "dead_fraction": (~fired).double().mean(-1).tolist(),
            "loss_per_token": clean / n_tok, "replaced_loss_per_token": spliced / n_tok, "tokens": n_tok,
            "windows": int(wins.shape[0])}
