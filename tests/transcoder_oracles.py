"""Hand-written oracles for transcoders, shared by the transcoder, attribution-graph and intervention tests: the
features and the decoder's sums as loops, and the shipped GPT as a plain PyTorch forward from its state dict."""
import math

import torch
import torch.nn.functional as F


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
        a = F.layer_norm(h, (c.n_embd,), sd[p + "ln_1.weight"], sd[p + "ln_1.bias"], c.ln_eps)
        qkv = a @ sd[p + "attn.c_attn.weight"].T + sd[p + "attn.c_attn.bias"]
        q, k, v = (t.view(B, T, c.n_head, c.d_head).transpose(1, 2) for t in qkv.split(c.n_embd, -1))
        s = q @ k.transpose(-1, -2) / math.sqrt(c.d_head)
        s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        z = (s.softmax(-1) @ v).transpose(1, 2).reshape(B, T, c.n_embd)
        h = h + z @ sd[p + "attn.c_proj.weight"].T + sd[p + "attn.c_proj.bias"]
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


