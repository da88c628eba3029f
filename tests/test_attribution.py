"""Attention rollout and integrated gradients against computations written here: rollout multiplied out by hand
from the trace's patterns, and integrated gradients against its own completeness (the logits at the input and at
the baseline, each from a plain forward pass with a torch hook) and against a hand-written Riemann sum."""
import numpy as np
import pytest
import torch
from conftest import CONFIGS, random_ids
from lazy_import import lazy

import gptviz
from gptviz import GPT, trace

lazy("captum", skip=True)


def test_rollout_is_the_product_of_half_attention_half_identity_layer_by_layer():
    c = CONFIGS["gpt2-like"]
    tr = trace(GPT(c), random_ids(c, B=2, T=6))
    got = gptviz.attention_rollout(tr)
    assert got.shape == (2, 6, 6)
    for b in range(2):
        r = np.eye(6)
        for layer in range(c.n_layer):
            a = tr[f"blocks.{layer}.attn.hook_pattern"][b].double().numpy()  # (heads, T, T)
            mixed = np.zeros((6, 6))
            for i in range(6):
                for j in range(6):
                    mixed[i, j] = 0.5 * sum(a[h, i, j] for h in range(c.n_head)) / c.n_head + 0.5 * (i == j)
            r = mixed @ r
        assert np.allclose(got[b], r, atol=1e-6)
    assert np.allclose(got.sum(-1), 1.0)
    assert np.allclose(np.triu(got[0], 1), 0.0)  # causal: nothing flows from a later token


def test_rollout_of_attention_to_oneself_is_the_identity():
    c = CONFIGS["gpt2-like"]
    eye = torch.eye(5)[None, None].expand(1, c.n_head, 5, 5)
    tr = trace(GPT(c), random_ids(c, B=1, T=5),
               edits={f"blocks.{l}.attn.hook_pattern": eye for l in range(c.n_layer)})
    assert np.allclose(gptviz.attention_rollout(tr)[0], np.eye(5))


def _logit(model, idx, position, target, zero_tokens=False):
    """The target's logit by a plain forward pass; with ``zero_tokens`` the token embeddings are replaced by zeros
    by a forward hook on wte (the position embeddings stay)."""
    handle = model.transformer.wte.register_forward_hook(lambda m, i, o: torch.zeros_like(o)) if zero_tokens else None
    try:
        with torch.no_grad():
            return float(model(idx)[0][0, position, target])
    finally:
        if handle is not None:
            handle.remove()


def _riemann_ig(model, idx, position, target, n=400):
    """Integrated gradients written out: the midpoint rule over n steps from zero token embeddings, gradients by
    torch.autograd through a forward hook that scales wte's output."""
    emb = model.transformer.wte(idx).detach()
    total = torch.zeros_like(emb)
    for k in range(n):
        alpha = (k + 0.5) / n
        x = (alpha * emb).requires_grad_(True)
        handle = model.transformer.wte.register_forward_hook(lambda m, i, o, x=x: x)
        try:
            out = model(idx)[0][0, position, target]
        finally:
            handle.remove()
        total += torch.autograd.grad(out, x)[0]
    return (emb * total / n).sum(-1)[0].numpy()


@pytest.mark.parametrize("name", ["gpt2-like", "rope-relu-wide-heads"])
def test_integrated_gradients_are_complete_and_match_a_hand_written_integral(name):
    c = CONFIGS[name]
    model = GPT(c)
    idx = random_ids(c, B=1, T=6)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    position, target = 4, 7
    attr, delta = gptviz.integrated_gradients(model, idx, position, target, steps=64)
    assert attr.shape == (6,)
    gap = _logit(model, idx, position, target) - _logit(model, idx, position, target, zero_tokens=True)
    assert abs(attr.sum() - gap) < 1e-3 and abs(delta) < 1e-3
    assert abs(gap) > 1e-3  # a real difference to explain
    assert np.allclose(attr, _riemann_ig(model, idx, position, target), atol=2e-3 * max(1.0, np.abs(attr).max()))
    assert np.allclose(attr[position + 1:], 0.0, atol=1e-7)  # a later token can't matter (the causal mask)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert not model.transformer.wte._forward_hooks and all(p.grad is None for p in model.parameters())


def test_integrated_gradients_refuse_what_they_cant_explain():
    c = CONFIGS["gpt2-like"]
    model = GPT(c)
    with pytest.raises(ValueError, match="one line at a time"):
        gptviz.integrated_gradients(model, random_ids(c, B=2, T=4), 1, 0)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        gptviz.integrated_gradients(model, random_ids(c, B=1, T=4), 1, c.vocab_size)
    with pytest.raises(ValueError, match="outside the text"):
        gptviz.integrated_gradients(model, random_ids(c, B=1, T=4), 9, 0)
