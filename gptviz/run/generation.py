"""Sampling the next token: temperature, top-k and top-p, each step visible."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F

from ..model.gpt import GPT


@dataclass
class Distribution:
    """How one position's logits become the distribution a token is drawn from."""

    raw: torch.Tensor  # softmax(logits), temperature 1
    tempered: torch.Tensor  # softmax(logits / T)
    after_top_k: torch.Tensor  # tempered, outside the top k set to 0, renormalised
    final: torch.Tensor  # after_top_k, outside the top-p nucleus set to 0, renormalised
    kept: torch.Tensor  # bool: tokens that may still be drawn


def check_sampling(temperature: float, top_k: Optional[int], top_p: Optional[float]) -> None:
    if not (temperature >= 0):
        raise ValueError(f"temperature={temperature} must be 0 or more")
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k={top_k} must be at least 1 (or None for no limit)")
    if top_p is not None and not (0 < top_p <= 1):
        raise ValueError(f"top_p={top_p} must be above 0 and at most 1")


def top_k_mask(probs: torch.Tensor, k: Optional[int]) -> torch.Tensor:
    """True for the k most likely tokens (ties at the boundary broken by id). None keeps all."""
    if k is None or k >= probs.shape[-1]:
        return torch.ones_like(probs, dtype=torch.bool)
    idx = torch.argsort(probs, dim=-1, descending=True, stable=True)[..., :k]
    return torch.zeros_like(probs, dtype=torch.bool).scatter(-1, idx, True)


def top_p_mask(probs: torch.Tensor, p: Optional[float]) -> torch.Tensor:
    """True for the smallest set of most likely tokens whose probabilities add up to at least p."""
    if p is None or p >= 1.0:
        return probs > 0
    order = torch.argsort(probs, dim=-1, descending=True, stable=True)
    sorted_p = probs.gather(-1, order)
    before = sorted_p.cumsum(-1) - sorted_p  # mass of the tokens strictly more likely
    keep_sorted = before < p
    return torch.zeros_like(probs, dtype=torch.bool).scatter(-1, order, keep_sorted) & (probs > 0)


def distribution(logits: torch.Tensor, temperature: float = 1.0, top_k: Optional[int] = None,
                 top_p: Optional[float] = None) -> Distribution:
    """logits: (V,) for one position. Temperature 0 puts all the mass on the most likely token."""
    check_sampling(temperature, top_k, top_p)
    logits = logits.float()
    raw = F.softmax(logits, dim=-1)
    if temperature == 0:
        tempered = F.one_hot(logits.argmax(-1), logits.shape[-1]).float()
    else:
        tempered = F.softmax(logits / temperature, dim=-1)
    k_mask = top_k_mask(tempered, top_k)
    after_k = tempered * k_mask
    after_k = after_k / after_k.sum(-1, keepdim=True)
    p_mask = top_p_mask(after_k, top_p)
    final = after_k * p_mask
    final = final / final.sum(-1, keepdim=True)
    return Distribution(raw, tempered, after_k, final, k_mask & p_mask)


def next_token_logits(model: GPT, ids: list[int]) -> torch.Tensor:
    """The logits for the token after ``ids`` (the last ``block_size`` of them). Shape (V,)."""
    with torch.no_grad():
        if not ids:
            raise ValueError("the prompt needs at least one token")
        x = torch.tensor([list(ids)[-model.config.block_size:]], dtype=torch.long)
        model.check_inputs(x)
        return model.run(x)[0, -1]


@dataclass
class GenStep:
    token: int
    dist: Distribution


def generate(model: GPT, ids: list[int], steps: int, temperature: float = 1.0, top_k: Optional[int] = None,
             top_p: Optional[float] = None, greedy: bool = False, seed: int = 0) -> list[GenStep]:
    """Add ``steps`` tokens to ``ids`` one at a time. Greedy takes the most likely token each time.

    The context is the last ``block_size`` tokens. Seeded: the same call gives the same tokens.
    """
    with torch.no_grad():
        if not ids:
            raise ValueError("generation needs a prompt of at least one token")
        check_sampling(temperature, top_k, top_p)
        g = torch.Generator().manual_seed(seed)
        ctx = list(ids)
        out: list[GenStep] = []
        B = model.config.block_size
        for _ in range(steps):
            x = torch.tensor([ctx[-B:]], dtype=torch.long)
            model.check_inputs(x)
            logits = model.run(x)[0, -1]
            d = distribution(logits, temperature, top_k, top_p)
            if greedy:
                tok = int(d.raw.argmax())
            else:
                tok = int(torch.multinomial(d.final, 1, generator=g))
            ctx.append(tok)
            out.append(GenStep(tok, d))
        return out
