"""The local replacement model of one prompt (Ameisen et al. 2025, "Circuit Tracing"), and how each of its nodes
is read back through it.

On one prompt, the model's MLPs are replaced by a transcoder's features plus an *error* per layer and position (what
the MLP really wrote minus what the features wrote), so the replacement computes exactly what the model computes.
Then every attention pattern and every norm's divisor is frozen at its value on this prompt. What is left between
the nodes is linear: the residual stream, each attention head's OV circuit weighted by its frozen pattern, and each
norm as ``(x - mean(x)) / s · w + b`` with ``s`` a constant (RMSNorm: no mean).

An attention-only model (no MLPs) needs no transcoder: frozen, it is already linear from its token embeddings to
its logits, so its graph has token and logit nodes only (``transcoder=None``), and its error nodes are all zero.

- ``freeze(model, transcoder, ids)``: the frozen quantities of one prompt (``Frozen``).
- ``read_back(frozen, weights, layer, seeds)``: for targets that read the residual stream at the MLP input of
  ``layer`` (or at the final norm, ``layer = n_layer``), the gradient of each target with respect to what is written
  at each layer's output, at every position: the linear map of the frozen model, run backwards by hand.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..model.hook_names import act_name
from ..run.trace import trace
from .composition import head_weights
from .transcoder import Transcoder, input_hook, output_hook


def why_no_replacement(cfg, tc: Transcoder | None = None, need_tc: bool = False) -> str:
    """Why this model (and transcoder) cannot be read as a local replacement, or "". ``need_tc``: ``tc`` is what the
    graph will use, so None is only right for an attention-only model, and a transcoder is wrong for one."""
    if getattr(cfg, "n_enc_layer", -1) >= 0:
        return "attribution graphs are for decoder-only models; this one also has an encoder and cross-attention"
    if cfg.attn_only:
        return "this model has no MLPs for a transcoder to replace" if tc is not None else ""
    if cfg.norm_placement != "pre" or cfg.sublayer_norms != "before":
        return ("the replacement is written for blocks that normalise before each sublayer (GPT-2, Llama); this "
                "model normalises after them")
    if cfg.parallel_attn:
        return "in this model attention and the MLP read the same normalised input in parallel; not supported yet"
    if cfg.n_expert:
        return "a mixture of experts has no single MLP for a transcoder to replace"
    if need_tc and tc is None:
        return "this model has MLPs: its graph needs a transcoder in their place"
    if tc is not None and (tc.n_layer != cfg.n_layer or tc.d_model != cfg.n_embd):
        return (f"this transcoder was made for {tc.n_layer} layers of {tc.d_model} numbers, not this model's "
                f"{cfg.n_layer} of {cfg.n_embd}")
    return ""


@dataclass
class Frozen:
    """One prompt through the model, with what the replacement freezes and what its nodes write."""
    ids: torch.Tensor  # (T,)
    logits: torch.Tensor  # (T, V): the model's own, which the replacement reproduces
    embed: torch.Tensor  # (T, d): the token embeddings, the token nodes' vectors (position vectors are constants)
    attn_scale: list[torch.Tensor]  # per layer (T, 1): the divisor of the norm before attention
    pattern: list[torch.Tensor]  # per layer (H, T, T): query × key
    mlp_scale: list[torch.Tensor]  # per layer (T, 1): the divisor of the norm before the MLP
    final_scale: torch.Tensor  # (T, 1)
    features: list[torch.Tensor]  # per layer (T, F): the transcoder's features on the MLP inputs
    errors: list[torch.Tensor]  # per layer (T, d): the MLP's output minus the transcoder's
    layernorm: bool  # LayerNorm (subtracts the mean) or RMSNorm


def freeze(model, tc: Transcoder | None, ids) -> Frozen:
    """Run the prompt ``ids`` (a list or a (T,) tensor of token ids) and keep what the replacement needs. ``tc``:
    None for an attention-only model (no features, zero errors, no norm before an MLP)."""
    cfg = model.config
    why = why_no_replacement(cfg, tc, need_tc=True)
    if why:
        raise ValueError(why)
    x = torch.as_tensor(ids, dtype=torch.long).reshape(1, -1)
    with torch.no_grad():
        tr = trace(model, x)
        L, T = cfg.n_layer, x.shape[1]
        if tc is None:
            feats = [torch.zeros(T, 0) for _ in range(L)]
            errors = [torch.zeros(T, cfg.n_embd) for _ in range(L)]
            mlp_scale = [torch.ones(T, 1) for _ in range(L)]
        else:
            feats = [tc.encode(layer, tr[input_hook(layer)][0]) for layer in range(L)]
            errors = [tr[output_hook(layer)][0] - tc.decode(layer, feats) for layer in range(L)]
            mlp_scale = [tr[act_name("scale", layer, "ln2")][0] for layer in range(L)]
        return Frozen(
            ids=x[0], logits=tr.logits[0].float(), embed=tr[act_name("embed")][0].float(),
            attn_scale=[tr[act_name("scale", layer, "ln1")][0] for layer in range(L)],
            pattern=[tr[act_name("pattern", layer)][0] for layer in range(L)],
            mlp_scale=mlp_scale,
            final_scale=tr[act_name("scale", part="ln_final")][0],
            features=feats, errors=errors, layernorm=cfg.norm == "layernorm")


@dataclass
class Weights:
    """The weights the read-back needs, in float32, arranged for it: each layer's attention as two
    (d, n_head * d_head) matrices, and each norm's gain."""
    W_O_T: torch.Tensor  # (L, d, H * d_head): every head's W_O, transposed and side by side
    W_V_in: torch.Tensor  # (L, d, H * d_head): every head's W_V with the gain of the norm before attention (and,
    # for LayerNorm, its mean removal) folded in: P diag(w) W_V
    n_head: int
    ln2: torch.Tensor  # (L, d): the gain of the norm before the MLP
    ln_final: torch.Tensor  # (d,)


def weights_of(model) -> Weights:
    hw = head_weights(model)
    blocks = model.transformer.h
    L, H, d, dh = hw["W_V"].shape
    W_V = hw["W_V"].permute(0, 2, 1, 3).reshape(L, d, H * dh)  # (L, d, H*dh): row i: input dim i into each head
    gains = torch.stack([b.ln_1.weight.detach().double() for b in blocks])  # (L, d)
    W_V_in = W_V * gains.unsqueeze(-1)
    if model.config.norm == "layernorm":
        W_V_in = W_V_in - W_V_in.mean(1, keepdim=True)
    return Weights(W_O_T=hw["W_O"].reshape(L, H * dh, d).transpose(1, 2).float().contiguous(),
                   W_V_in=W_V_in.float().contiguous(), n_head=H,
                   ln2=torch.stack([b.ln_2.weight.detach().float() if getattr(b, "ln_2", None) is not None
                                    else torch.ones(d) for b in blocks]),  # attention-only: no norm, never read
                   ln_final=model.transformer.ln_f.weight.detach().float())


def norm_back(g: torch.Tensor, gain: torch.Tensor, scale: torch.Tensor, layernorm: bool) -> torch.Tensor:
    """The transpose of a frozen norm's Jacobian applied to ``g`` (..., T, d): ``P (w ⊙ g) / s``, with ``P`` the
    mean-removing projection for LayerNorm and the identity for RMSNorm."""
    out = g * gain
    if layernorm:
        out = out - out.mean(-1, keepdim=True)
    return out / scale


def read_back(frozen: Frozen, w: Weights, layer: int, seeds: torch.Tensor, positions: torch.Tensor,
              through_norm: bool = True, upto: int | None = None) -> list[torch.Tensor]:
    """For ``n`` targets, each a vector ``seeds[j]`` (d,) read at position ``positions[j]`` of the normalised
    residual stream at the MLP input of ``layer`` (``layer = n_layer``: at the final norm): the gradient of each
    target with respect to what is written at the output of every layer before it. Returns ``grads`` with
    ``grads[m + 1]`` of shape (n, T, d) for m = -1 (the embeddings) .. layer - 1; what MLP m writes (features,
    errors) is added to the residual stream right after it. ``through_norm=False``: the seeds already are gradients
    with respect to the residual stream. ``upto``: only the first ``upto`` positions are carried (causal attention:
    a target at position q depends on positions up to q only), so every tensor is ``(n, upto, d)``."""
    T = frozen.ids.numel() if upto is None else int(upto)
    if int(positions.max()) >= T:
        raise ValueError(f"a target at position {int(positions.max())} is past upto={T}")
    n = seeds.shape[0]
    g = torch.zeros(n, T, seeds.shape[-1])
    rows = torch.arange(n)
    if through_norm:
        scale = frozen.mlp_scale[layer] if layer < len(frozen.mlp_scale) else frozen.final_scale
        gain = w.ln2[layer] if layer < len(frozen.mlp_scale) else w.ln_final
        g[rows, positions] = norm_back(seeds, gain, scale[positions], frozen.layernorm)
    else:
        g[rows, positions] = seeds
    grads: list[torch.Tensor] = [torch.empty(0)] * (layer + 1)
    if layer < len(frozen.pattern):  # a target at an MLP input reads resid_mid: back through its own attention first
        g = g + _attention_back(frozen, w, layer, g)
    for j in range(layer - 1, -1, -1):
        grads[j + 1] = g  # the gradient at resid_post_j (= resid_pre_{j+1}), where what MLP j writes lands
        g = g + _attention_back(frozen, w, j, g)  # resid_mid_j -> resid_pre_j
    grads[0] = g
    return grads


def _attention_back(frozen: Frozen, w: Weights, j: int, g: torch.Tensor) -> torch.Tensor:
    """The gradient ``g`` (n, T, d) at attention j's output, carried back to its input (resid_pre_j) through each
    head's OV circuit with the pattern frozen and the norm before it frozen (first T positions only): into each
    head's z (through W_O), back along the pattern from queries to keys, through W_V and the norm."""
    n, T, d = g.shape
    H = w.n_head
    dh = w.W_O_T.shape[-1] // H
    gz = (g @ w.W_O_T[j]).view(n, T, H, dh).permute(2, 1, 0, 3).reshape(H, T, n * dh)  # (H, T, n*dh)
    gv = torch.bmm(frozen.pattern[j][:, :T, :T].transpose(-1, -2).contiguous(), gz)  # (H, T(keys), n*dh)
    gv = gv.view(H, T, n, dh).permute(2, 1, 0, 3).reshape(n, T, H * dh)
    return (gv @ w.W_V_in[j].T) / frozen.attn_scale[j][:T]
