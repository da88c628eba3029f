"""Who did it, read off one trace: the logit lens and direct logit attribution.

- ``logit_lens(trace, model)``: decode the residual stream after every layer with the model's own final
  norm and unembedding, as if the model stopped there (TransformerLens
  ``accumulated_resid(apply_ln=True)`` followed by the unembedding).
- ``decompose(trace, model, tokens)``: split one token's logit into the share each part of the model
  wrote into the residual stream (embeddings, every head, every MLP), through the final norm frozen at
  the scale it actually used.

Both work on a trace of torch tensors and on its ``.numpy()`` copy (what the app caches); the weights
come from ``model``, which must be the model that made the trace.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence, Union

import numpy as np
import torch

from ..model.gpt import GPT

Tokens = Union[str, int, torch.Tensor, np.ndarray]


# --------------------------------------------------------------------------- helpers
def _t(x) -> torch.Tensor:
    return x if isinstance(x, torch.Tensor) else torch.from_numpy(np.asarray(x))


def _out(x: torch.Tensor, numpy: bool):
    return x.detach().cpu().numpy() if numpy else x


def _check(trace, model: Optional[GPT]) -> GPT:
    if model is None:
        raise ValueError("this needs the model's weights: call it as f(trace, model) with the model that made "
                         "the trace")
    if trace.config != model.config:
        raise ValueError("the trace was made by a different model than the one given (their configs differ)")
    return model


def resid_points(cfg) -> list[tuple[str, str]]:
    """(label, hook name) of every point where the residual stream is read: the input of each layer
    (``blocks.l.hook_resid_pre``) and the output of the last one (``blocks.{L-1}.hook_resid_post``)."""
    L = cfg.n_layer
    pts = [("embeddings", "blocks.0.hook_resid_pre")]
    pts += [(f"after layer {l - 1}", f"blocks.{l}.hook_resid_pre") for l in range(1, L)]
    pts.append((f"after layer {L - 1}", f"blocks.{L - 1}.hook_resid_post"))
    return pts


def _unembed(model: GPT, x: torch.Tensor) -> torch.Tensor:
    """The model's own last two steps: the final norm (with x's own mean and scale) and lm_head."""
    with torch.no_grad():
        if "ln_f" in model.transformer:
            x = model.transformer.ln_f(x)
        cap = model.config.final_softcap  # Gemma 2's soft cap on the logits, as the model applies it
        return model.lm_head(x) if cap is None else torch.tanh(model.lm_head(x) / cap) * cap


def _rows(rows) -> Union[slice, list[int]]:
    if rows is None:
        return slice(None)
    if isinstance(rows, (int, np.integer)):
        return [int(rows)]
    return rows if isinstance(rows, slice) else [int(r) for r in rows]


# --------------------------------------------------------------------------- logit lens
def logit_lens(trace, model: Optional[GPT] = None, rows=None):
    """``(labels, logits)``: the logits the model would give if it stopped at each point of the residual stream.

    logits has shape ``(n_layer + 1, B, T, vocab)`` (``B`` = the number of ``rows`` if given: an int, a list
    or a slice of batch rows). Point ``l < n_layer`` is ``lm_head(ln_f(blocks.l.hook_resid_pre))``; the last
    point is ``lm_head(ln_f(blocks.{L-1}.hook_resid_post))``, which is exactly the trace's ``hook_logits``
    (the same operations on the same input). The final norm is applied again with each point's own mean
    and scale, as TransformerLens's ``accumulated_resid(apply_ln=True)`` does.

    Post-norm models (``norm_placement="post"``) have no final norm: every block already ends with a norm,
    so each point goes straight through ``lm_head`` (the last point is again ``hook_logits``). Only the
    first point, the raw embeddings, is then read without a norm.

    Returns a torch tensor for a torch trace and a numpy array for a numpy one (``trace.numpy()``).
    """
    model = _check(trace, model)
    r = _rows(rows)
    labels, hooks = zip(*resid_points(model.config))
    out = torch.stack([_unembed(model, _t(trace[h])[r]) for h in hooks])
    return list(labels), _out(out, trace.is_numpy)


@dataclass
class LensSummary:
    """What the lens pages show for one batch row, without keeping (points × T × vocab) logits around."""

    labels: list[str]  # one per point (n_layer + 1)
    target_prob: np.ndarray  # (P, W) probability of the true next token; NaN where there is none
    top_ids: np.ndarray  # (P, W, k) the k most likely tokens at each point and position
    top_probs: np.ndarray  # (P, W, k)
    start: int = 0  # the first position decoded: column j is position start + j (W: every position, or a window)


# The logit lens decodes (points × positions) rows through the whole unembedding. A long text on a big model is
# read a window of positions at a time, so that one view never costs more than GPT-2 small's 13 points × 128
# positions × 50,257 tokens × 768 (about 64 G multiply-adds).
LENS_BUDGET_MACS = 13 * 128 * 50257 * 768
LENS_WINDOWS = (128, 64, 32, 16, 8)  # a Qwen3-0.6B shape (29 points × 151,936 × 1,024 a position) reads 8


def lens_window(cfg, T: int) -> int:
    """How many positions one view of the lens decodes: all T when that fits ``LENS_BUDGET_MACS``, else the largest
    of 128, 64, 32, 16 or 8 that fits (8 at least)."""
    per_position = (cfg.n_layer + 1) * cfg.vocab_size * cfg.n_embd
    if T * per_position <= LENS_BUDGET_MACS:
        return T
    return next((w for w in LENS_WINDOWS if w < T and w * per_position <= LENS_BUDGET_MACS), min(T, LENS_WINDOWS[-1]))


def lens_window_starts(T: int, window: int) -> list[int]:
    """The first position of each window, earliest first: the last window ends at the last position, each earlier
    one starts ``window`` before the next, and the first starts at 0 (so it may overlap the second)."""
    if window >= T:
        return [0]
    return sorted(set(range(T - window, 0, -window)) | {0})


def lens_summary(trace, model: GPT, b: int = 0, k: int = 5, max_rows: int = 512, start: int = 0,
                 stop: Optional[int] = None) -> LensSummary:
    """The logit lens of batch row ``b`` at positions ``start:stop`` (default: all), boiled down to p(target)
    and the top-k tokens at every point.

    The points are decoded together, ``max_rows`` (point, position) rows per matrix product: one big product
    is much faster than one per point, and a big vocabulary never holds more than ``max_rows`` rows of logits
    at once.
    """
    model = _check(trace, model)
    k = max(1, min(int(k), model.config.vocab_size))
    labels, hooks = zip(*resid_points(model.config))
    xs = torch.stack([_t(trace[h])[b, start:stop] for h in hooks])  # (P, W, C)
    T = xs.shape[1]
    if T == 0:
        raise ValueError(f"positions {start}:{stop} hold no token")
    flat = xs.reshape(-1, xs.shape[-1])
    chunk = max(T, (max_rows // T) * T)
    parts = [_unembed(model, flat[i:i + chunk]) for i in range(0, flat.shape[0], chunk)]
    tgt = None if trace.targets is None else _t(trace.targets)[b, start:stop].long()
    tp, ti, tv = [], [], []
    for logits in parts:
        # p = softmax(logits) read only where it is shown (the target, the top k) as exp(logit - logsumexp): the
        # same numbers without a (points × W × V) array of probabilities (Qwen3-0.6B shape: 0.28 s of 0.65 s)
        logits = logits.float().view(-1, T, logits.shape[-1])  # (points, W, V)
        lse = torch.logsumexp(logits, dim=-1, keepdim=True)  # (points, W, 1)
        if tgt is None:
            tp.append(torch.full(logits.shape[:2], float("nan")))
        else:
            z = logits.gather(-1, tgt.clamp(min=0)[None, :, None].expand(logits.shape[0], T, 1))
            p = (z - lse).exp()[..., 0]
            tp.append(torch.where(tgt >= 0, p, torch.full_like(p, float("nan"))))
        v, i = logits.topk(k, dim=-1)
        tv.append((v - lse).exp())
        ti.append(i)
    return LensSummary(list(labels), torch.cat(tp).numpy(), torch.cat(ti).numpy(), torch.cat(tv).numpy(),
                       int(start))


# --------------------------------------------------------------------------- direct logit attribution
@dataclass(frozen=True)
class Component:
    """One thing that writes into the residual stream."""

    label: str
    kind: str  # "embed" | "pos" | "head" | "attn_bias" | "cross" | "mlp" | "rest"
    layer: Optional[int] = None
    head: Optional[int] = None


def components(cfg) -> list[Component]:
    """The components ``decompose`` splits the final residual stream into, in its order."""
    out = [Component("token embedding", "embed")]
    if cfg.pos_encoding in ("learned", "sinusoidal"):
        out.append(Component("position embedding", "pos"))
    for l in range(cfg.n_layer):
        out += [Component(f"L{l}.H{h}", "head", l, h) for h in range(cfg.n_head)]
        if _attn_bias(cfg):
            out.append(Component(f"L{l} attn bias", "attn_bias", l))
        if getattr(cfg, "n_enc_layer", -1) >= 0:  # an encoder-decoder's decoder block: cross-attention, whole
            out.append(Component(f"L{l} cross-attn", "cross", l))
        if not getattr(cfg, "attn_only", False):
            out.append(Component(f"L{l} MLP", "mlp", l))
    return out


REST_LABEL = "rest (edited stream)"


def _attn_bias(cfg) -> bool:
    b = getattr(cfg, "attn_proj_bias", None)
    return cfg.bias if b is None else b


def head_grid(contributions, cfg):
    """The heads' rows of ``decompose``'s contributions as ``(n_layer, n_head, ...)``."""
    idx = [i for i, c in enumerate(components(cfg)) if c.kind == "head"]
    c = contributions[idx]
    return c.reshape(cfg.n_layer, cfg.n_head, *c.shape[1:])


def _token_ids(trace, tokens: Tokens, shape: tuple[int, ...], vocab: int) -> torch.Tensor:
    if isinstance(tokens, str):
        if tokens != "target":
            raise ValueError(f"tokens must be 'target', a token id or a (batch, pos) array of ids, not {tokens!r}")
        if trace.targets is None:
            raise ValueError("this trace has no targets: pass the token ids to attribute instead of 'target'")
        ids = _t(trace.targets)
    elif isinstance(tokens, (int, np.integer)):
        ids = torch.full(shape, int(tokens), dtype=torch.long)
    else:
        ids = _t(tokens)
    if tuple(ids.shape) != tuple(shape):
        raise ValueError(f"tokens has shape {tuple(ids.shape)}, but the trace's batch is {tuple(shape)}")
    ids = ids.long()
    bad = ids[(ids != -100) & ((ids < 0) | (ids >= vocab))]
    if bad.numel():
        raise ValueError(f"token id {int(bad[0])} is outside the vocabulary (vocab_size={vocab})")
    return ids


def decompose(trace, model: GPT, tokens: Tokens = "target", at: Optional[tuple[int, int]] = None):
    """Direct logit attribution: ``(labels, contributions, bias)`` with
    ``contributions.sum(0) + bias == logits[b, t, tokens[b, t]]``. Refused (ValueError) for a model with a norm after
    its sublayers (``sublayer_norms``: Gemma 2 and 3, OLMo 2), whose heads' outputs are normalised together.

    ``at=(b, t)``: that one batch row and position only (outputs of batch and position size 1), as the page shows
    one position: a long text's every position would cost hundreds of times more.

    ``tokens``: ``"target"`` (the trace's targets), one token id for every position, or a ``(B, T)`` array
    of ids. Positions whose token is ``-100`` (nothing to predict) get NaN in both outputs.

    The final residual stream is a sum: token embedding, position embedding (learned or sinusoidal; rope
    and none add none), and for every layer each head's own output ``z_h @ W_O[:, h]ᵀ`` (its slice of
    ``c_proj``), the attention output bias (``c_proj.bias``), and the MLP output (its bias included; none
    for ``attn_only`` models). An encoder-decoder model (``gptviz.model.encoder_decoder``) has one more per layer: the
    cross-attention's whole output (``hook_cross_out``), and its self-attention's projection is ``o_proj``. The
    final norm is linear once its scale is fixed at the value the model
    used (``ln_final.hook_scale``), so each component ``c`` contributes
    ``γ ⊙ (c − mean(c)) / scale · W_U[token]`` (RMSNorm: no centring), and ``bias`` is ``β · W_U[token]``
    plus lm_head's own bias for the token, if it has one (0 when there is neither). contributions has shape
    ``(n_components, B, T)`` with
    rows in the order of ``components(model.config)``; labels name them.

    If an edit replaced part of the residual stream itself, the components no longer add up to it: the
    difference is then one more component, ``"rest (edited stream)"``, so the sum still holds.

    Only pre-norm models can be split like this: raises ValueError for a post-norm model.
    """
    with torch.no_grad():
        model = _check(trace, model)
        cfg = model.config
        if cfg.norm_placement != "pre" or "ln_f" not in model.transformer:
            raise ValueError(
                "direct logit attribution needs a pre-norm model: with norm_placement='post' every block renormalises "
                "the stream, so the logit is not a sum of what each part wrote. Choose norm_placement='pre'."
            )
        if cfg.sublayer_norms != "before":
            raise ValueError("direct logit attribution splits attention into heads, but this model normalises each "
                             "sublayer's output as a whole (a norm after it: Gemma 2 and 3, OLMo 2), so the heads' "
                             "shares do not add up to what attention wrote")
        L = cfg.n_layer
        x_final = _t(trace[f"blocks.{L - 1}.hook_resid_post"])
        ids = _token_ids(trace, tokens, tuple(x_final.shape[:2]), cfg.vocab_size)
        if at is not None:
            b, t = (int(i) for i in at)
            if not (0 <= b < ids.shape[0] and 0 <= t < ids.shape[1]):
                raise ValueError(f"at={at} is outside the trace's batch of shape {tuple(ids.shape)}")
            ids = ids[b:b + 1, t:t + 1]

        def read(name: str) -> torch.Tensor:  # a step, at (b, t) only if asked
            v = _t(trace[name])
            return v if at is None else v[b:b + 1, t:t + 1]

        x_final = read(f"blocks.{L - 1}.hook_resid_post")
        B, T, C = x_final.shape
        valid = ids != -100

        dt = torch.float64
        ln = model.transformer.ln_f
        u = model.lm_head.weight[ids.clamp(min=0)].to(dt)  # (B, T, C): the unembedding row of each token (rows first:
        # converting the whole unembedding of a big vocabulary to float64 would cost more than everything else)
        d = u * ln.weight.to(dt)
        if cfg.norm == "layernorm":  # (c - mean c) · d == c · (d - mean d)
            d = d - d.mean(-1, keepdim=True)
        d = d / read("ln_final.hook_scale").to(dt)  # (B, T, 1) the scale the model actually used
        bias = (u * ln.bias.to(dt)).sum(-1) if ln.bias is not None else torch.zeros(B, T, dtype=dt)
        if model.lm_head.bias is not None:
            bias = bias + model.lm_head.bias[ids.clamp(min=0)].to(dt)

        rows, stream = [], torch.zeros(B, T, C, dtype=dt)

        def add(vec: torch.Tensor) -> None:  # a component's vector in the residual stream, (B, T, C) or (C,)
            nonlocal stream
            vec = vec.to(dt)
            stream = stream + vec
            rows.append((vec * d).sum(-1) if vec.dim() == 3 else (d @ vec))

        add(read("hook_embed"))
        if cfg.pos_encoding in ("learned", "sinusoidal"):
            add(read("hook_pos_embed"))
        nh, hs = cfg.n_head, cfg.d_head
        W_O = None  # one float64 buffer for every layer's W_O: a fresh 16 MB a layer cost more in page faults than the
        # copy (Qwen3-0.6B shape: 0.2 s of a 0.35 s call)
        for l in range(L):
            attn = model.transformer.h[l].attn
            # GPT / encoder-decoder (gptviz.model.encoder_decoder)
            proj = attn.c_proj if hasattr(attn, "c_proj") else attn.o_proj
            if W_O is None or W_O.shape != proj.weight.shape:
                W_O = torch.empty(proj.weight.shape, dtype=dt)
            W_O.copy_(proj.weight)  # (C, nh·hs): column block h is head h's W_O
            z = read(f"blocks.{l}.attn.hook_z").to(dt)  # (B, T, nh, hs)
            # plain matrix products (BLAS), not einsum: float64 einsum took 5x as long (Qwen3-0.6B shape, one position)
            e = (d @ W_O).view(B, T, nh, hs)  # d pulled back through each head's W_O
            rows.extend((z * e).sum(-1).unbind(-1))  # (B, T) per head
            stream = stream + z.reshape(B, T, nh * hs) @ W_O.T
            if proj.bias is not None:
                add(proj.bias)
            if getattr(cfg, "n_enc_layer", -1) >= 0:
                add(read(f"blocks.{l}.hook_cross_out"))
            if not getattr(cfg, "attn_only", False):
                add(read(f"blocks.{l}.hook_mlp_out"))
        labels = [c.label for c in components(cfg)]
        rest = x_final.to(dt) - stream
        if float(rest.abs().max()) > 1e-4 * (1.0 + float(x_final.abs().max())):
            rows.append((rest * d).sum(-1))
            labels.append(REST_LABEL)
        contrib = torch.stack(rows)
        nan = torch.tensor(float("nan"), dtype=dt)
        contrib = torch.where(valid[None], contrib, nan)
        bias = torch.where(valid, bias, nan)
        out_dt = x_final.dtype
        return labels, _out(contrib.to(out_dt), trace.is_numpy), _out(bias.to(out_dt), trace.is_numpy)


def top_contributors(labels: Sequence[str], values: np.ndarray, n: int = 3) -> tuple[list, list]:
    """The ``n`` largest positive and negative contributions as (label, value), biggest first."""
    v = np.asarray(values, dtype=float)
    order = np.argsort(-v)
    pos = [(labels[i], float(v[i])) for i in order if v[i] > 0][:n]
    neg = [(labels[i], float(v[i])) for i in order[::-1] if v[i] < 0][:n]
    return pos, neg


def describe_top(labels: Sequence[str], values: np.ndarray, token: str, n: int = 3) -> str:
    """One sentence naming the biggest contributors to a token's logit."""
    pos, neg = top_contributors(labels, values, n)
    fmt = lambda items: ", ".join(f"**{l}** ({v:+.3g})" for l, v in items)
    parts = []
    if pos:
        parts.append(f"The biggest pushes towards '{token}' come from {fmt(pos)}")
    if neg:
        parts.append(("; the biggest pushes against it from " if pos else
                      f"Every part pushes against '{token}'; the most from ") + fmt(neg))
    return ("".join(parts) + ".") if parts else f"No part of the model changes the logit of '{token}'."
