"""Activation patching between two prompts of the same length: which parts carry the difference?

Run the model on a *clean* prompt and on a *corrupted* one (say "the cat sat on the" and "the rat sat on
the"), and measure the logit difference ``logit[answer] − logit[wrong]`` at the last position. Then run
the corrupted prompt again with one activation replaced by its value from the clean run, and see how
much of the clean behaviour comes back:

    score = (patched − corrupt) / (clean − corrupt)        0 = as corrupted, 1 = as clean

Every patched run is an ordinary ``trace(model, x_corrupt, edits={hook: put_clean_values})``, so patching
goes through the same recorded steps as everything else. Three grids:

- residual stream: ``blocks.l.hook_resid_pre`` for every layer, plus the last ``hook_resid_post``, at one
  position at a time → ``(n_layer + 1, T)``;
- heads: one head's output ``blocks.l.attn.hook_z[:, :, h]`` at every position → ``(n_layer, n_head)``;
- MLPs: ``blocks.l.hook_mlp_out`` at every position → ``(n_layer,)`` (empty for attention-only models).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence, Union

import numpy as np
import torch

from ..model.gpt import GPT
from ..run.trace import trace
from .lens import resid_points

Answer = Union[int, Sequence[int]]


@dataclass
class PatchResult:
    resid: np.ndarray  # (n_layer + 1, T)
    heads: np.ndarray  # (n_layer, n_head)
    mlp: np.ndarray  # (n_layer,), empty for an attention-only model
    resid_labels: list[str]  # one per row of ``resid``
    clean_diff: float  # logit[answer] − logit[wrong] at the last position, clean run (mean over rows)
    corrupt_diff: float  # the same for the corrupted run
    n_forward: int  # forward passes it took, the clean and corrupted runs included
    resid_hooks: list[str] = field(default_factory=list)


def _ids(x) -> torch.Tensor:
    t = torch.as_tensor(np.asarray(x) if not isinstance(x, torch.Tensor) else x)
    if t.dim() == 1:
        t = t[None]
    return t.long()


def _answer_ids(a: Answer, B: int, vocab: int, what: str) -> torch.Tensor:
    t = torch.as_tensor(a, dtype=torch.long).reshape(-1)
    if t.numel() == 1:
        t = t.expand(B)
    if t.numel() != B:
        raise ValueError(f"{what} needs one token id per row ({B}), not {t.numel()}")
    if int(t.min()) < 0 or int(t.max()) >= vocab:
        raise ValueError(f"the {what} token id {int(t.max() if int(t.max()) >= vocab else t.min())} is outside "
                         f"the vocabulary (vocab_size={vocab})")
    return t


def logit_diff(logits, answer: torch.Tensor, wrong: torch.Tensor) -> float:
    """mean over rows of ``logits[b, -1, answer[b]] − logits[b, -1, wrong[b]]``."""
    last = torch.as_tensor(np.asarray(logits) if not isinstance(logits, torch.Tensor) else logits)[:, -1]
    rows = torch.arange(last.shape[0])
    return float((last[rows, answer].double() - last[rows, wrong].double()).mean())


def put_at(pos: Optional[int], values: torch.Tensor, head: Optional[int] = None) -> Callable:
    """An edit that writes ``values`` (the clean run's tensor) into the recorded one: at position ``pos``
    (all positions if None), and only head ``head``'s slice (axis 2) if given."""

    def edit(x: torch.Tensor) -> torch.Tensor:
        idx = (slice(None), slice(None) if pos is None else pos) + (() if head is None else (head,))
        x[idx] = values[idx]
        return x

    return edit


class Patcher:
    """The clean and corrupted runs, and a way to score any patched run against them."""

    def __init__(self, model: GPT, clean, corrupt, answer: Answer, wrong: Answer):
        self.model = model
        cfg = model.config
        if getattr(cfg, "n_enc_layer", -1) > 0:
            raise ValueError("two-prompt patching here runs decoder prompts only, and this encoder-decoder model also "
                             "reads a source sequence: choose a decoder-only model")
        self.clean_idx, self.corrupt_idx = _ids(clean), _ids(corrupt)
        if self.clean_idx.shape != self.corrupt_idx.shape:
            raise ValueError(
                f"the two prompts must have the same number of tokens to be patched position by position: "
                f"the clean one has {self.clean_idx.shape[-1]}, the corrupted one {self.corrupt_idx.shape[-1]}")
        B = self.clean_idx.shape[0]
        self.answer = _answer_ids(answer, B, cfg.vocab_size, "answer")
        self.wrong = _answer_ids(wrong, B, cfg.vocab_size, "wrong")
        if torch.equal(self.answer, self.wrong):
            raise ValueError("the answer and the wrong token are the same token: their logit difference is always 0. "
                             "Choose two different tokens")
        self.n_forward = 0
        self.clean = self._run(self.clean_idx, None)
        self.corrupt = self._run(self.corrupt_idx, None)
        self.clean_diff = logit_diff(self.clean.logits, self.answer, self.wrong)
        self.corrupt_diff = logit_diff(self.corrupt.logits, self.answer, self.wrong)
        if self.clean_diff == self.corrupt_diff:
            raise ValueError(
                f"the two prompts give the same logit difference ({self.clean_diff:.4g}), so there is nothing to "
                "recover: change one of the prompts or the answer tokens")

    def _run(self, idx, edits):
        self.n_forward += 1
        return trace(self.model, idx, edits=edits)

    def diff(self, edits: Optional[dict]) -> float:
        """The raw logit difference of the corrupted prompt run with ``edits``."""
        return logit_diff(self._run(self.corrupt_idx, edits).logits, self.answer, self.wrong)

    def score(self, edits: Optional[dict]) -> float:
        """(patched − corrupt) / (clean − corrupt) for the corrupted prompt run with ``edits``."""
        return (self.diff(edits) - self.corrupt_diff) / (self.clean_diff - self.corrupt_diff)

    def clean_value(self, hook: str) -> torch.Tensor:
        return self.clean[hook]


def activation_patching(model: GPT, clean, corrupt, answer: Answer, wrong: Answer,
                        what: Sequence[str] = ("resid", "heads", "mlp")) -> PatchResult:
    """Patch clean activations into the corrupted run, one at a time (see the module doc).

    ``clean`` and ``corrupt``: token ids, shape (T,) or (B, T), the same shape. ``answer`` and ``wrong``: a
    token id each (or one per row). Raises ValueError if the shapes differ, the two tokens are the same,
    or the two prompts give the same logit difference (the score would divide by 0).
    ``what`` picks the grids to compute; the others are left filled with NaN.
    """
    p = Patcher(model, clean, corrupt, answer, wrong)
    cfg = model.config
    L, H, T = cfg.n_layer, cfg.n_head, p.clean_idx.shape[1]
    points = resid_points(cfg)
    resid = np.full((L + 1, T), np.nan)
    heads = np.full((L, H), np.nan)
    attn_only = getattr(cfg, "attn_only", False)
    mlp = np.full((0 if attn_only else L,), np.nan)
    if "resid" in what:
        for i, (_, hook) in enumerate(points):
            clean = p.clean_value(hook)
            for t in range(T):
                resid[i, t] = p.score({hook: put_at(t, clean)})
    if "heads" in what:
        for l in range(L):
            hook = f"blocks.{l}.attn.hook_z"
            clean = p.clean_value(hook)
            for h in range(H):
                heads[l, h] = p.score({hook: put_at(None, clean, head=h)})
    if "mlp" in what and not attn_only:
        for l in range(L):
            hook = f"blocks.{l}.hook_mlp_out"
            mlp[l] = p.score({hook: put_at(None, p.clean_value(hook))})
    return PatchResult(resid, heads, mlp, [lab for lab, _ in points], p.clean_diff, p.corrupt_diff, p.n_forward,
                       [h for _, h in points])


def n_forward_needed(cfg, T: int) -> int:
    """How many forward passes ``activation_patching`` takes for prompts of T tokens."""
    return (2 + (cfg.n_layer + 1) * T + cfg.n_layer * cfg.n_head
            + (0 if getattr(cfg, "attn_only", False) else cfg.n_layer))


# --------------------------------------------------------------------------- choosing prompts and answers
# Ready-made pairs: the first whose two prompts tokenize to the same length is offered. A task model gets
# a pair in its own format: the corrupted prompt changes the one token the answer depends on.
PAIRS = {
    "sort": [("fbdacb|abbcd", "ebdacb|abbcd")],  # sorted "abbcdf": after "abbcd" comes f (or e, corrupted)
    "induction": [("kbhdcafkbhdca", "kbhdcagkbhdca")],  # "…a f … a" → f; with g after the first a → g
    # the Shakespeare models' char BPE: " England" is ' ', 'E', 'n', …, " Egypt" ' ', 'E', 'g', …: after the second
    # "E" an induction head copies what followed the first ('n' clean, 'g' corrupted)
    "shakespeare-induction": [("the Prince of England and the Prince of E", "the Prince of Egypt and the Prince of E")],
    "": [("the cat sat on the mat", "the rat sat on the mat"),
         ("the cat sat on the mat", "the dog sat on the mat"),
         ("the cat sat on the", "the dog sat on the"),
         ("when mary and john went to the store, john gave a drink to",
          "when mary and john went to the store, mary gave a drink to"),
         ("the cat sat", "the rat sat"), ("a cat", "a rat")],
}


def default_pair(tok, task: str = "", max_len: Optional[int] = None) -> tuple[str, str]:
    """A clean / corrupted pair for this tokenizer (and task): the first whose prompts differ and have the
    same number of tokens (at most ``max_len``, the model's context), else the first pair."""
    pairs = PAIRS.get(task or "", []) + PAIRS[""]
    for a, b in pairs:
        ia, ib = tok.encode(a), tok.encode(b)
        if len(ia) == len(ib) and 0 < len(ia) <= (max_len or len(ia)) and ia != ib:
            return a, b
    return pairs[0]


@dataclass
class AnswerOptions:
    ids: list[int]  # tokens to choose from, most likely after the clean prompt first
    p_clean: dict  # id -> probability after the clean prompt (last position)
    p_corrupt: dict  # id -> probability after the corrupted prompt
    answer: int  # the default answer: the clean prompt's favourite
    wrong: int  # the default wrong token: the corrupted prompt's favourite (else the clean one's second)


def answer_options(clean_logits, corrupt_logits, k: int = 30, all_below: int = 512) -> AnswerOptions:
    """Tokens to offer as the answer and the wrong token, from the two runs' last-position logits
    ((B, T, vocab): the first row's last position). A small vocabulary is offered whole."""
    pc = torch.softmax(_last_row(clean_logits).double(), -1)
    pk = torch.softmax(_last_row(corrupt_logits).double(), -1)
    V = pc.shape[-1]
    order_c = torch.argsort(pc, descending=True, stable=True).tolist()
    order_k = torch.argsort(pk, descending=True, stable=True).tolist()
    if V <= all_below:
        ids = order_c
    else:
        ids = list(dict.fromkeys(order_c[:k] + order_k[:k]))
    answer = order_c[0]
    wrong = order_k[0] if order_k[0] != answer else order_c[1 if V > 1 else 0]
    return AnswerOptions(ids, {i: float(pc[i]) for i in ids}, {i: float(pk[i]) for i in ids}, answer, wrong)


def _last_row(logits) -> torch.Tensor:
    """The last position's logits of the first row: (vocab,)."""
    t = torch.as_tensor(np.asarray(logits) if not isinstance(logits, torch.Tensor) else logits)
    while t.dim() > 1:
        t = t[0] if t.dim() > 2 else t[-1]
    return t
