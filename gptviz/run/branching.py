"""Branching generation: force another token at one step and see where the text goes instead.

``continuation(model, ids, n)`` generates ``n`` tokens (greedy, or sampled with a seed, as ``generate`` does) and
keeps, at every step, the chosen token's probability and the most likely alternatives. ``branch(...)`` generates
the original continuation and a second one that is the same up to step ``forced_at``, takes ``forced_id`` there,
and carries on from it.

Probabilities are the model's own: softmax of the logits at temperature 1, whatever the sampling settings. Sampled
runs use common random numbers: both continuations draw from one seeded stream, step for step (the forced step
draws too, and throws the draw away), so after the fork they differ because of the forced token, not because of
the dice.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import torch

from ..model.gpt import GPT
from .generation import check_sampling, distribution

MAX_NEW = 200  # tokens a continuation may have
TOP = 10  # alternatives kept per step


@dataclass
class Path:
    """One continuation: its tokens, each token's probability (softmax of the logits at that step), and the ``TOP``
    most likely tokens at every step as (id, probability), most likely first."""

    tokens: list[int]
    probs: list[float]
    top: list[list[tuple[int, float]]] = field(default_factory=list)

    def joint(self, start: int = 0) -> float:
        """The probability of the tokens from step ``start`` on, given the ones before: the product of theirs."""
        p = 1.0
        for v in self.probs[start:]:
            p *= v
        return p


@dataclass
class Branch:
    prompt: list[int]
    forced_at: int  # the step (0 = the first generated token) where the token was forced
    forced_id: int
    original: Path
    forced: Path
    parted_at: Optional[int]  # the first step where the two differ; None when the forced token is the original's


def _check(model: GPT, ids: list[int], n: int) -> None:
    if not ids:
        raise ValueError("generation needs a prompt of at least one token")
    if not 1 <= int(n) <= MAX_NEW:
        raise ValueError(f"n_new={n} must be between 1 and {MAX_NEW}")
    V = model.config.vocab_size
    if min(ids) < 0 or max(ids) >= V:
        raise ValueError(f"the prompt has token ids outside this model's vocabulary (0 to {V - 1})")


def continuation(model: GPT, prompt_ids: list[int], n_new: int, temperature: float = 1.0,
                 top_k: Optional[int] = None, top_p: Optional[float] = None, greedy: bool = True, seed: int = 0,
                 force: Optional[tuple[int, int]] = None) -> Path:
    """``n_new`` tokens after ``prompt_ids`` (the context is the last ``block_size`` tokens). Greedy takes the most
    likely token; sampled draws from the temperature / top-k / top-p distribution with a ``seed``ed generator (the
    same tokens as ``generation.generate`` with the same settings). ``force`` = (step, token id) takes that token
    at that step instead of the chosen one."""
    with torch.no_grad():
        ids = [int(i) for i in prompt_ids]
        _check(model, ids, n_new)
        check_sampling(temperature, top_k, top_p)
        if force is not None:
            at, fid = int(force[0]), int(force[1])
            if not 0 <= at < n_new:
                raise ValueError(f"forced_at={at} must be a step of the continuation (0 to {n_new - 1})")
            if not 0 <= fid < model.config.vocab_size:
                raise ValueError(f"forced_id={fid} is not a token of this model (0 to {model.config.vocab_size - 1})")
            force = (at, fid)
        g = torch.Generator().manual_seed(int(seed))
        ctx = list(ids)
        B = model.config.block_size
        out = Path([], [], [])
        for step in range(int(n_new)):
            x = torch.tensor([ctx[-B:]], dtype=torch.long)
            model.check_inputs(x)
            logits = model.run(x)[0, -1]
            d = distribution(logits, temperature, top_k, top_p)
            tok = int(d.raw.argmax()) if greedy else int(torch.multinomial(d.final, 1, generator=g))
            if force is not None and step == force[0]:
                tok = force[1]
            top_p_, top_i = torch.topk(d.raw, min(TOP, d.raw.shape[-1]))
            out.tokens.append(tok)
            out.probs.append(float(d.raw[tok]))
            out.top.append([(int(i), float(p)) for i, p in zip(top_i.tolist(), top_p_.tolist())])
            ctx.append(tok)
        return out


def parting_point(a: list[int], b: list[int]) -> Optional[int]:
    """The first step where two token lists differ (None if one is the start of the other)."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None


def branch(model: GPT, prompt_ids: list[int], forced_at: int, forced_id: int, n_new: int, temperature: float = 1.0,
           top_k: Optional[int] = None, top_p: Optional[float] = None, greedy: bool = True, seed: int = 0,
           original: Optional[Path] = None) -> Branch:
    """The original continuation and the one with ``forced_id`` at step ``forced_at``, both ``n_new`` tokens long,
    with every token's probability, and the step where they part. ``original``: the original continuation with
    these very settings, if already generated (it is not checked)."""
    if original is None:
        original = continuation(model, prompt_ids, n_new, temperature, top_k, top_p, greedy, seed)
    forced = continuation(model, prompt_ids, n_new, temperature, top_k, top_p, greedy, seed,
                          force=(forced_at, forced_id))
    return Branch([int(i) for i in prompt_ids], int(forced_at), int(forced_id), original, forced,
                  parting_point(original.tokens, forced.tokens))
