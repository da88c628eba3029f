"""Training tasks: each makes seeded batches, scores accuracy, and has a tokenizer the app can display.

- ``text``: next-token prediction on a text (the classic B×T+1 loader at random offsets).
- ``sort``: ``dbca|abcd``: read letters, then write them in order. Loss and accuracy on the sorted half.
- ``induction``: a random run of letters of random length, then the same run again. The second copy can
  only be predicted by finding the earlier occurrence of the current token and copying what followed:
  the job of an induction head.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from .data import BUILTIN_TEXT, IGNORE_INDEX
from .tokenizers import CharBPETokenizer

SEP = "|"


@dataclass
class TaskBatch:
    x: torch.Tensor  # (B, T)
    y: torch.Tensor  # (B, T), -100 where not scored
    attention_mask: Optional[torch.Tensor] = None


class Task:
    name = "task"
    description = ""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    def batch(self, batch_size: int, g: torch.Generator) -> TaskBatch:
        raise NotImplementedError

    def example(self) -> str:
        """A line of text in this task's format, for the other pages to show."""
        raise NotImplementedError

    @staticmethod
    def accuracy(logits: torch.Tensor, y: torch.Tensor) -> float:
        """Share of scored positions where the most likely token is the target."""
        scored = y != IGNORE_INDEX
        if not bool(scored.any()):
            return float("nan")
        return float((logits.argmax(-1)[scored] == y[scored]).float().mean())


class SortTask(Task):
    name = "sort"
    description = "Read a few letters, then write them in alphabetical order (e.g. dbca|abcd)."

    def __init__(self, n_letters: int = 8, length: int = 6):
        self.letters = "abcdefghijklmnopqrstuvwxyz"[:n_letters]
        self.length = length
        super().__init__(CharBPETokenizer(num_merges=0, lowercase=False).train([self.letters + SEP]))
        self.sep_id = self.tokenizer.vocab[SEP]
        self.block_size = 2 * length + 1

    def batch(self, batch_size: int, g: torch.Generator) -> TaskBatch:
        L = self.length
        src = torch.randint(0, len(self.letters), (batch_size, L), generator=g)
        ids = torch.tensor([self.tokenizer.vocab[c] for c in self.letters])[src]
        out = ids.sort(dim=1).values
        seq = torch.cat([ids, torch.full((batch_size, 1), self.sep_id), out], dim=1)  # (B, 2L+1)
        x = seq[:, :-1]
        y = seq[:, 1:].clone()
        y[:, : L] = IGNORE_INDEX  # predicting the unsorted letters is guesswork: not scored
        return TaskBatch(x, y)

    def example(self) -> str:
        s = "fbdacb"[: self.length]
        return s + SEP + "".join(sorted(s))


class InductionTask(Task):
    name = "induction"
    description = ("Some random letters, then a run of distinct letters, then the same run again: "
                   "copy what followed last time.")

    def __init__(self, n_letters: int = 16, min_len: int = 4, max_len: int = 10, max_prefix: int = 0):
        self.letters = "abcdefghijklmnopqrstuvwxyz"[:n_letters]
        self.min_len, self.max_len, self.max_prefix = min_len, max_len, max_prefix
        super().__init__(CharBPETokenizer(num_merges=0, lowercase=False).train([self.letters]))
        self.block_size = 2 * max_len + max_prefix

    def batch(self, batch_size: int, g: torch.Generator) -> TaskBatch:
        T = self.block_size
        x = torch.randint(0, len(self.letters), (batch_size, T), generator=g)
        y = torch.full((batch_size, T), IGNORE_INDEX)
        lens = torch.randint(self.min_len, self.max_len + 1, (batch_size,), generator=g)
        pre = torch.randint(0, self.max_prefix + 1, (batch_size,), generator=g)
        for b in range(batch_size):
            n, r = int(lens[b]), int(pre[b])
            # distinct letters, none of them in the prefix, so "the previous occurrence" is never ambiguous;
            # the random-length prefix means the copy starts at a different place every time
            perm = torch.randperm(len(self.letters), generator=g)
            x[b, r:r + n] = perm[:n]
            x[b, :r] = perm[n:][torch.randint(0, len(self.letters) - n, (r,), generator=g)]
            x[b, r + n:r + 2 * n] = perm[:n]
            # from the first token of the copy on, the next token is known: it followed last time
            y[b, r + n:r + 2 * n - 1] = x[b, r + n + 1:r + 2 * n]
        return TaskBatch(x, y)

    def example(self) -> str:
        return "kbhdcaf" + "kbhdcaf"


class TextTask(Task):
    name = "text"
    description = "Predict the next token of a text (the built-in one, or yours)."

    def __init__(self, text: str = BUILTIN_TEXT, num_merges: int = 20, block_size: int = 32, tokenizer=None):
        tok = tokenizer or CharBPETokenizer(num_merges=num_merges).train([text])
        super().__init__(tok)
        self.ids = torch.tensor(tok.encode(text), dtype=torch.long)
        self.block_size = block_size
        if self.ids.numel() < block_size + 2:
            raise ValueError(f"the text is too short to train on: {self.ids.numel()} tokens, "
                             f"need at least block_size + 2 = {block_size + 2}")
        self.text = text

    def batch(self, batch_size: int, g: torch.Generator) -> TaskBatch:
        T = self.block_size
        starts = torch.randint(0, self.ids.numel() - T - 1, (batch_size,), generator=g)
        x = torch.stack([self.ids[s:s + T] for s in starts.tolist()])
        y = torch.stack([self.ids[s + 1:s + T + 1] for s in starts.tolist()])
        return TaskBatch(x, y)

    def example(self) -> str:
        return self.text.splitlines()[0]


TASKS = {"sort": SortTask, "induction": InductionTask, "text": TextTask}


def make_task(name: str, **kwargs) -> Task:
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}: choose one of {', '.join(TASKS)}")
    return TASKS[name](**kwargs)
