"""Training a sparse autoencoder on a model's residual stream, and measuring it on held-out text.

- ``collect(model, ids, hook, ...)``: the hook's vectors over random windows of a token stream.
- ``train_sae(acts, hook, SAETrainConfig(...))``: a TopK SAE (Gao et al. 2024) with the AuxK loss, which gives
  the features that have stopped firing a gradient by having them reconstruct what the live ones missed.
  Plain Adam, unit-norm decoder rows after every step.
- ``evaluate(model, sae, windows)``: on held-out windows, the fraction of variance unexplained, L0, the share of
  dead features, and the loss with the reconstruction spliced in at the hook (``trace``'s ``edits``).
- ``top_snippets(sae, windows, resid)``: each feature's strongest windows (at most one per window), with the
  feature's activation over a span of tokens around the peak, for the feature browser.
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from typing import Callable, Optional

import torch

from ..interp.sae import SparseAutoencoder
from ..run.trace import trace


# --------------------------------------------------------------------------- reading the hook
def resid(model, x: torch.Tensor, hook: str) -> torch.Tensor:
    """The tensor at ``hook`` for token ids ``x`` (B, T), read with the model's own recorder."""
    with torch.no_grad():
        got = {}

        def rec(name, t):
            if name == hook:
                got["x"] = t.detach()
            return t

        model.run(x, rec=rec)
        if "x" not in got:
            raise ValueError(f"this model has no step {hook!r}")
        return got["x"]


def windows(ids: torch.Tensor, T: int) -> torch.Tensor:
    """The stream cut into non-overlapping windows of T tokens (the tail that does not fill one is dropped):
    ``(n, T + 1)``, each window with the token after it, so ``w[:, :-1]`` is the input and ``w[:, 1:]`` the target."""
    n = (ids.numel() - 1) // T
    return torch.stack([ids[i * T:(i + 1) * T + 1] for i in range(n)])


def collect(model, ids: torch.Tensor, hook: str, n_tokens: int, T: int = 128, batch: int = 64,
            seed: int = 0) -> torch.Tensor:
    """``(n_tokens, d)`` vectors at ``hook`` over random windows of ``ids`` (every position of each window)."""
    if n_tokens < 1:
        raise ValueError(f"n_tokens={n_tokens}: collect at least one vector")
    with torch.no_grad():
        g = torch.Generator().manual_seed(seed)
        out, have = [], 0
        while have < n_tokens:
            starts = torch.randint(0, ids.numel() - T, (batch,), generator=g)
            x = torch.stack([ids[s:s + T] for s in starts.tolist()])
            a = resid(model, x, hook).reshape(-1, model.config.n_embd)
            out.append(a)
            have += a.shape[0]
        return torch.cat(out)[:n_tokens]


# --------------------------------------------------------------------------- training
@dataclass
class SAETrainConfig:
    n_features: int = 1024
    k: int = 32
    steps: int = 2000
    batch_size: int = 4096
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


def init_sae(acts: torch.Tensor, hook: str, cfg: SAETrainConfig) -> SparseAutoencoder:
    """Unit-norm random decoder rows, the encoder their transpose, ``b_dec`` the data's mean."""
    g = torch.Generator().manual_seed(cfg.seed)
    d = acts.shape[-1]
    sae = SparseAutoencoder(d, cfg.n_features, hook, "topk", cfg.k)
    with torch.no_grad():
        sae.W_dec.copy_(torch.randn(cfg.n_features, d, generator=g))
        sae.normalise_decoder()
        sae.W_enc.copy_(sae.W_dec.T)
        sae.b_dec.copy_(acts.mean(0))
    return sae


def losses(sae: SparseAutoencoder, x: torch.Tensor, dead: Optional[torch.Tensor], aux_k: int):
    """``(mse, aux, features)``: the reconstruction's squared error over the data's variance (a batch FVU), and the
    AuxK loss: the error the live features left, reconstructed by the ``aux_k`` strongest dead ones (0 without
    dead features)."""
    pre = sae.pre_acts(x)
    vals, idx = pre.topk(sae.k, dim=-1)
    vals = torch.relu(vals)
    x_hat = (vals.unsqueeze(-1) * sae.W_dec[idx]).sum(-2) + sae.b_dec  # only k rows per vector: cheap
    var = (x - x.mean(0)).pow(2).sum(-1).mean()
    mse = (x_hat - x).pow(2).sum(-1).mean() / var
    aux = torch.zeros((), dtype=x.dtype)
    if dead is not None and bool(dead.any()):
        n = min(aux_k, int(dead.sum()))
        err = (x - x_hat).detach()
        masked = pre.masked_fill(~dead, float("-inf"))
        v2, i2 = masked.topk(n, dim=-1)
        e_hat = (torch.relu(v2).unsqueeze(-1) * sae.W_dec[i2]).sum(-2)
        aux = (e_hat - err).pow(2).sum(-1).mean() / err.pow(2).sum(-1).mean().clamp(min=1e-12)
    f = torch.zeros_like(pre).scatter(-1, idx, vals)
    return mse, aux, f


def train_sae(acts: torch.Tensor, hook: str, cfg: SAETrainConfig,
              on_progress: Optional[Callable[[int, dict], None]] = None,
              progress_every: int = 100) -> tuple[SparseAutoencoder, list[dict]]:
    """Train a TopK SAE on ``acts`` (N, d), drawing batches at random (seeded). Returns the SAE and its history:
    one row per ``progress_every`` steps (step, seconds, batch FVU, aux loss, dead share, lr)."""
    g = torch.Generator().manual_seed(cfg.seed + 1)
    sae = init_sae(acts, hook, cfg)
    opt = torch.optim.Adam(sae.parameters(), lr=cfg.lr, betas=(0.9, 0.999))
    since = torch.zeros(cfg.n_features, dtype=torch.long)  # training vectors since each feature last fired
    hist, t0 = [], time.perf_counter()
    N = acts.shape[0]
    for step in range(1, cfg.steps + 1):
        frac = step / cfg.steps
        lr = cfg.lr * (1.0 if frac <= cfg.decay_from else max(0.0, (1 - frac) / (1 - cfg.decay_from)))
        for group in opt.param_groups:
            group["lr"] = lr
        x = acts[torch.randint(0, N, (cfg.batch_size,), generator=g)]
        dead = since >= cfg.dead_after
        mse, aux, f = losses(sae, x, dead, cfg.aux_k)
        loss = mse + cfg.aux_coef * aux
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sae.normalise_decoder()
        fired = (f > 0).any(0)
        since = torch.where(fired, torch.zeros_like(since), since + cfg.batch_size)
        if step % progress_every == 0 or step == cfg.steps:
            row = {"step": step, "seconds": round(time.perf_counter() - t0, 1), "fvu": round(float(mse.detach()), 5),
                   "aux": round(float(aux.detach()), 5), "dead": round(float(dead.float().mean()), 4), "lr": lr}
            hist.append(row)
            if on_progress is not None:
                on_progress(step, row)
    sae.eval()
    sae.requires_grad_(False)
    sae.meta["train_config"] = asdict(cfg)
    return sae, hist


# --------------------------------------------------------------------------- measuring it
SNIPPET_CHUNK = 32  # windows encoded at a time by ``top_snippets``


def held_out_resid(model, wins: torch.Tensor, hook: str, batch: int = 64) -> torch.Tensor:
    """``(n, T, d)``: the hook's tensor over every held-out window (inputs ``wins[:, :-1]``)."""
    with torch.no_grad():
        return torch.cat([resid(model, wins[i:i + batch, :-1], hook) for i in range(0, wins.shape[0], batch)])


def evaluate(model, sae: SparseAutoencoder, wins: torch.Tensor, resid_all: Optional[torch.Tensor] = None,
             batch: int = 64) -> dict:
    """On windows ``wins`` (n, T + 1): FVU (the reconstruction's squared error summed over every vector, over the
    vectors' summed squared distance from their mean), L0 (mean active features per vector), the share of
    features that never fire, and the mean next-token loss per token of the model as it is and with the
    SAE's reconstruction in place of the hook's tensor (through ``trace``'s ``edits``)."""
    with torch.no_grad():
        if resid_all is None:
            resid_all = held_out_resid(model, wins, sae.hook, batch)
        X = resid_all.reshape(-1, sae.d_model)
        err = tot = l0 = 0.0
        mean = X.mean(0)
        fired = torch.zeros(sae.n_features, dtype=torch.bool)
        for i in range(0, X.shape[0], 8192):
            x = X[i:i + 8192]
            f = sae.encode(x)
            err += float((sae.decode(f) - x).double().pow(2).sum())
            tot += float((x - mean).double().pow(2).sum())
            l0 += float((f > 0).sum())
            fired |= (f > 0).any(0)
        clean = spliced = 0.0
        n_tok = 0
        splice = {sae.hook: lambda t: sae.reconstruct(t)}
        for i in range(0, wins.shape[0], batch):
            w = wins[i:i + batch]
            x, y = w[:, :-1], w[:, 1:]
            clean += float(trace(model, x, y).loss) * y.numel()
            spliced += float(trace(model, x, y, edits=splice).loss) * y.numel()
            n_tok += y.numel()
        return {"fvu": err / tot, "l0": l0 / X.shape[0], "dead_fraction": float((~fired).float().mean()),
                "loss_per_token": clean / n_tok, "spliced_loss_per_token": spliced / n_tok, "tokens": n_tok,
                "windows": int(wins.shape[0])}


def top_snippets(sae: SparseAutoencoder, wins: torch.Tensor, resid_all: torch.Tensor, n_top: int = 8,
                 width: int = 24, after: int = 4) -> dict:
    """Each feature's ``n_top`` strongest windows (its largest activation in each window, one snippet per window),
    strongest first. For each: ``where`` (window, position of the peak), ``peak``, and a span of ``width`` tokens
    of the window around the peak (up to ``after`` tokens after it) as ``ids`` with the feature's activation on
    each (``acts``); spans cut by the window's edge are padded with id -1 and activation 0. Also ``density``: the
    share of all held-out tokens on which each feature fires."""
    with torch.no_grad():
        n, T, d = resid_all.shape
        F = sae.n_features
        best_v = torch.full((F, n_top), -1.0)
        best_w = torch.full((F, n_top), -1, dtype=torch.long)
        best_p = torch.zeros((F, n_top), dtype=torch.long)
        count = torch.zeros(F)
        for i in range(0, n, SNIPPET_CHUNK):
            f = sae.encode(resid_all[i:i + SNIPPET_CHUNK])  # (b, T, F)
            count += (f > 0).sum((0, 1)).float()
            v, p = f.max(1)  # (b, F): each window's peak per feature
            cand_v = torch.cat([best_v, v.T], 1)
            cand_w = torch.cat([best_w, torch.arange(i, i + f.shape[0]).expand(F, -1)], 1)
            cand_p = torch.cat([best_p, p.T], 1)
            top = cand_v.topk(n_top, dim=1).indices
            best_v, best_w, best_p = cand_v.gather(1, top), cand_w.gather(1, top), cand_p.gather(1, top)
        live = best_v > 0
        ids = torch.full((F, n_top, width), -1, dtype=torch.int32)
        acts = torch.zeros((F, n_top, width), dtype=torch.float16)
        for fi in range(F):
            for j in range(n_top):
                if not live[fi, j]:
                    continue
                w, p = int(best_w[fi, j]), int(best_p[fi, j])
                end = min(T, max(p + 1 + after, width))
                start = max(0, end - width)
                span = wins[w, start:end]
                ids[fi, j, :span.numel()] = span.to(torch.int32)
                acts[fi, j, :span.numel()] = sae.encode(resid_all[w, start:end])[:, fi].half()
        where = torch.stack([torch.where(live, best_w, -1), torch.where(live, best_p, -1)], -1).to(torch.int32)
        return {"ids": ids, "acts": acts, "peak": torch.where(live, best_v, torch.zeros_like(best_v)).float(),
                "where": where, "density": (count / (n * T)).float()}
