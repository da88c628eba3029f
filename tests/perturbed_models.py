"""A model far from its initialisation, for oracle tests whose check must not pass by accident on near-zero weights."""
import torch

from gptviz.model.build import build_model


def perturbed(cfg, seed: int = 0):
    """Every weight drawn anew (standard deviation 0.5), biases and norm weights moved by as much: γ, β and lm_head's
    bias all matter, and the logit is clearly nonlinear in the token embeddings."""
    torch.manual_seed(seed)
    m = build_model(cfg)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in m.parameters():
            if p.dim() == 1:
                p.add_(torch.randn(p.shape, generator=g) * 0.5)
            else:
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    return m
