"""Hand-written oracles for transcoders, shared by the transcoder, attribution-graph and intervention tests: the
features and the decoder's sums as loops, the shipped GPT as a plain PyTorch forward from its state dict, and that
forward steered as circuit-tracer's ``feature_intervention`` steers the real model."""
import math

import torch
import torch.nn.functional as F

from gptviz.interp.transcoder import Transcoder


def features_by_hand(tc, layer, x):
    """One vector at a time: the k largest pre-activations, each through ReLU, 0 elsewhere."""
    flat = x.reshape(-1, x.shape[-1])
    out = torch.zeros(flat.shape[0], tc.n_features)
    W, b = tc.W_enc[layer].detach(), tc.b_enc[layer].detach()
    all_scores = (flat.double() @ W.double() + b.double()).tolist()
    for r in range(flat.shape[0]):
        scores = all_scores[r]
        order = sorted(range(tc.n_features), key=lambda j: -scores[j])[:tc.k]
        for j in order:
            out[r, j] = max(scores[j], 0.0)
    return out.reshape(*x.shape[:-1], tc.n_features)


def output_by_hand(tc, layer, feats):
    """The decoder's sum written as loops over the layers that write to ``layer`` and their features."""
    flat = [f.reshape(-1, tc.n_features) for f in feats]
    out = tc.b_dec[layer].detach().clone().expand(flat[0].shape[0], -1).clone()
    sources = range(layer + 1) if tc.cross_layer else [layer]
    for s in sources:
        for r in range(flat[s].shape[0]):
            for j in range(tc.n_features):
                if flat[s][r, j] != 0:
                    out[r] += flat[s][r, j] * tc.W_dec[s][j, layer - s].detach()
    return out.reshape(*feats[0].shape[:-1], tc.d_model)


def plain_attention(sd, c, layer, h, pattern=None):
    """Block ``layer``'s attention sublayer of the plain forward: ``(h + its output, its pattern)``; ``pattern``
    (B, H, T, T), if given, is used in place of the softmax of the scores."""
    B, T = h.shape[:2]
    p = f"transformer.h.{layer}."
    a = F.layer_norm(h, (c.n_embd,), sd[p + "ln_1.weight"], sd[p + "ln_1.bias"], c.ln_eps)
    qkv = a @ sd[p + "attn.c_attn.weight"].T + sd[p + "attn.c_attn.bias"]
    q, k, v = (t.view(B, T, c.n_head, c.d_head).transpose(1, 2) for t in qkv.split(c.n_embd, -1))
    s = q @ k.transpose(-1, -2) / math.sqrt(c.d_head)
    if pattern is None:
        pattern = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf")).softmax(-1)
    z = (pattern @ v).transpose(1, 2).reshape(B, T, c.n_embd)
    return h + z @ sd[p + "attn.c_proj.weight"].T + sd[p + "attn.c_proj.bias"], pattern


def plain_forward(model, x, replace=None, layers=(), errors=None, scaled=(), scale=1.0):
    """The shipped pre-norm GPT in plain PyTorch from its state dict; the MLPs of ``layers`` replaced by
    ``replace`` (a transcoder, by the loops above): each MLP input is encoded as the pass reaches it. ``errors``:
    per layer (T, d), added to each replaced MLP's output. ``scaled``: (layer, pos, feature) activations multiplied
    by ``scale`` where they are encoded (batch row 0)."""
    sd = {k: v.detach().double() for k, v in model.state_dict().items()}
    c = model.config
    B, T = x.shape
    h = sd["transformer.wte.weight"][x] + sd["transformer.wpe.weight"][:T]
    feats = {}
    for layer in range(c.n_layer):
        p = f"transformer.h.{layer}."
        h, _ = plain_attention(sd, c, layer, h)
        m = F.layer_norm(h, (c.n_embd,), sd[p + "ln_2.weight"], sd[p + "ln_2.bias"], c.ln_eps)
        if replace is not None:
            feats[layer] = features_by_hand(replace, layer, m.float()).double()
            for sl, sp, sf in scaled:
                if sl == layer:
                    feats[layer][0, sp, sf] *= scale
        if layer in layers:
            out = output_by_hand(replace, layer, [feats.get(s_, torch.zeros_like(feats[layer]))
                                                  for s_ in range(layer + 1)])
            if errors is not None:
                out = out + errors[layer].double()
        else:
            u = m @ sd[p + "mlp.c_fc.weight"].T + sd[p + "mlp.c_fc.bias"]
            out = F.gelu(u, approximate="tanh") @ sd[p + "mlp.c_proj.weight"].T + sd[p + "mlp.c_proj.bias"]
        h = h + out
    h = F.layer_norm(h, (c.n_embd,), sd["transformer.ln_f.weight"], sd["transformer.ln_f.bias"], c.ln_eps)
    return h @ sd["lm_head.weight"].T


def plain_steered(model, x, tc, scaled=(), scale=1.0, clean=None, hold_patterns=False):
    """The real model in float64 with the ``scaled`` features steered as circuit-tracer steers them. Returns the
    logits of batch row 0 and what a clean run records: each layer's pattern and features. ``clean``: that record,
    from the clean run (the values to steer to, and the patterns to hold)."""
    sd = {k: v.detach().double() for k, v in model.state_dict().items()}
    c = model.config
    B, T = x.shape
    h = sd["transformer.wte.weight"][x] + sd["transformer.wpe.weight"][:T]
    record = {"pattern": [], "features": []}
    extra = torch.zeros(c.n_layer, T, c.n_embd, dtype=torch.float64)
    for layer in range(c.n_layer):
        p = f"transformer.h.{layer}."
        h, pattern = plain_attention(sd, c, layer, h, clean["pattern"][layer] if hold_patterns else None)
        record["pattern"].append(pattern)
        m = F.layer_norm(h, (c.n_embd,), sd[p + "ln_2.weight"], sd[p + "ln_2.bias"], c.ln_eps)
        live = features_by_hand(tc, layer, m[0].float()).double()  # (T, F)
        record["features"].append(live)
        for sl, sp, sf in scaled:
            if sl == layer:
                value = scale * clean["features"][layer][sp, sf]
                reach = range(layer, c.n_layer) if tc.cross_layer else [layer]
                for target in reach:
                    extra[target, sp] += (value - live[sp, sf]) * tc.W_dec[layer][sf, target - layer].double()
        u = m @ sd[p + "mlp.c_fc.weight"].T + sd[p + "mlp.c_fc.bias"]
        out = F.gelu(u, approximate="tanh") @ sd[p + "mlp.c_proj.weight"].T + sd[p + "mlp.c_proj.bias"]
        h = h + out + extra[layer]
    h = F.layer_norm(h, (c.n_embd,), sd["transformer.ln_f.weight"], sd["transformer.ln_f.bias"], c.ln_eps)
    return (h @ sd["lm_head.weight"].T)[0], record


def toy_transcoder(model, cross, F_=16, k=4, seed=0, gain=0.1):
    """A TopK transcoder for ``model`` with seeded random weights; ``gain`` scales the encoders and decoders (a toy
    with large ones amplifies float32 rounding tenfold a layer)."""
    c = model.config
    tc = Transcoder(c.n_layer, c.n_embd, F_, k, cross)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for layer in range(c.n_layer):
            tc.W_enc[layer].copy_(torch.randn(c.n_embd, F_, generator=g) * gain)
            tc.b_enc[layer].copy_(torch.randn(F_, generator=g) * 0.2)
            tc.W_dec[layer].copy_(torch.randn(tc.W_dec[layer].shape, generator=g) * gain)
            tc.b_dec[layer].copy_(torch.randn(c.n_embd, generator=g) * 0.1)
    return tc.requires_grad_(False)
