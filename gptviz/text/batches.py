"""Built-in text and batches: the classic next-token loader, and padded batches of several texts."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

import torch

IGNORE_INDEX = -100

# Written for gptviz. Plain, repetitive on purpose: a tiny model can learn some of it, and its
# character set covers ordinary English punctuation.
BUILTIN_TEXT = """\
the cat sat on the mat. the dog sat on the log. the cat saw the dog, and the dog saw the cat.
a small model reads one token at a time and guesses the next one. at first every guess is poor.
then it looks back at the tokens it has seen, weighs them, and tries again.
attention lets each word ask a question of the words before it: which of you matters to me now?
the answer is a weighted average of what those words have to say.
stack a few layers of this, add a little arithmetic in between, and the guesses get better.
when the model is wrong, the loss is large; when it is right, the loss is small.
training nudges every weight a little, step after step, until the loss falls.
the cat sat on the mat again, and this time the model knew what came next!
count with me: 0 1 2 3 4 5 6 7 8 9 10. is 2 + 2 = 4? yes; and 3 * 3 = 9 (not 6).
"quotes", 'apostrophes', a dash - a slash / an ampersand & a hash # a percent % and @ symbol.
"""

DEFAULT_PROMPT = "the cat sat on the mat."


@dataclass
class Batch:
    """Token ids ready for the model, with what is needed to show and explain them.

    x: (B, T) inputs; y: (B, T) targets, ``-100`` where a position has nothing to predict;
    attention_mask: (B, T) 1 for real tokens, 0 for padding; lengths: real tokens per row.
    notices: plain sentences about what was changed on the way (cut to block_size, dropped characters).
    """

    x: torch.Tensor
    y: torch.Tensor
    attention_mask: torch.Tensor
    lengths: list[int]
    notices: list[str] = field(default_factory=list)

    @property
    def padded(self) -> bool:
        return len(set(self.lengths)) > 1


def stream_batch(ids: Sequence[int], batch_size: int, block_size: int,
                 start: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """The classic loader: take ``B*T + 1`` tokens from one stream; x is (B, T), y is x shifted by one."""
    n = batch_size * block_size + 1
    if batch_size < 1 or block_size < 1:
        raise ValueError("batch_size and block_size must be at least 1")
    buf = torch.as_tensor(list(ids[start:start + n]), dtype=torch.long)
    if buf.numel() < n:
        raise ValueError(
            f"B×T+1 = {batch_size}×{block_size}+1 = {n} tokens are needed from position {start}, "
            f"but only {buf.numel()} are there"
        )
    x = buf[:-1].view(batch_size, block_size)
    y = buf[1:].view(batch_size, block_size)
    return x, y


def pad_batch(seqs: Sequence[Sequence[int]], pad_id: int, block_size: int | None = None,
              already_said: frozenset = frozenset()) -> Batch:
    """Several token sequences as one batch: padded on the right to the longest, with a mask.

    Every token is an input; the target at position t is token t+1 of the same row. The last
    real position of each row and every padded position have target -100 (ignored by the loss).
    Rows longer than ``block_size`` are cut, and a notice says so.
    """
    seqs = [list(s) for s in seqs]
    notices = []
    if not seqs or all(len(s) == 0 for s in seqs):
        raise ValueError("there are no tokens to show: type some text")
    if block_size is not None:
        for i, s in enumerate(seqs):
            if len(s) > block_size and i not in already_said:
                notices.append(
                    f"Line {i + 1} has {len(s)} tokens; the model's context (block_size) is {block_size}, "
                    f"so its last {len(s) - block_size} tokens were cut."
                )
            seqs[i] = s[:block_size]
    empty = [i + 1 for i, s in enumerate(seqs) if not s]
    if empty:
        notices.append("Empty line(s) " + ", ".join(map(str, empty)) + " were left out.")
        seqs = [s for s in seqs if s]
    B, T = len(seqs), max(len(s) for s in seqs)
    x = torch.full((B, T), pad_id, dtype=torch.long)
    y = torch.full((B, T), IGNORE_INDEX, dtype=torch.long)
    mask = torch.zeros((B, T), dtype=torch.long)
    for i, s in enumerate(seqs):
        n = len(s)
        x[i, :n] = torch.as_tensor(s)
        y[i, : n - 1] = torch.as_tensor(s[1:], dtype=torch.long)
        mask[i, :n] = 1
    return Batch(x, y, mask, [len(s) for s in seqs], notices)


MAX_LINES = 16


# What to change when a text's characters are not in a character tokenizer's vocabulary.
READ_OTHER_SCRIPTS = ("To read another script (Chinese, say), pick a byte-level tokenizer (gpt2, cl100k_base or "
                      "o200k_base) for the configurable model, or a model that uses one")


def _encode_line(tokenizer, text: str, block_size: int | None) -> tuple[list[int], bool]:
    """(token ids, whether the whole line was encoded). A line far longer than the context is not encoded whole:
    its first 4 × block_size + 64 characters are, then twice as many, until they give more tokens than the context
    holds (a token may be many characters: 512 GPT-2 tokens of academic English take about 3,400), so every token
    that fits is the whole line's own."""
    if block_size is None:
        return tokenizer.encode(text), True
    limit = 4 * block_size + 64
    while len(text) > limit:
        ids = tokenizer.encode(text[:limit])
        if len(ids) > block_size + 1:  # the cut is past the context (and past the token it may have split)
            return ids, False
        limit *= 2
    return tokenizer.encode(text), True


def encode_batch(tokenizer, texts: Sequence[str] | str, block_size: int | None = None,
                 max_lines: int = MAX_LINES, limit_said: Optional[str] = None) -> Batch:
    """Encode each line of text as one row of a batch (see ``pad_batch``), with notices for the user.

    At most ``max_lines`` lines are used. A line far longer than the context is cut before it is
    encoded (a token is at least one character, so nothing that could fit is lost). ``limit_said``: what
    ``block_size`` is, for the notice, when it is not the model's context (a big model's lines are cut shorter).
    """
    if isinstance(texts, str):
        texts = texts.splitlines()
    texts = [t for t in texts if t.strip()]
    if not texts:
        raise ValueError("the text is empty: type at least one line")
    notices = []
    if len(texts) > max_lines:
        notices.append(f"The text has {len(texts)} lines; only the first {max_lines} are used as the batch.")
        texts = texts[:max_lines]
    cut = set()
    seqs = []
    limit = limit_said or f"the model's context (block_size={block_size}) can hold"
    for i, t in enumerate(texts):
        ids, whole = _encode_line(tokenizer, t, block_size)
        seqs.append(ids)
        if not whole:
            notices.append(
                f"Line {i + 1} has {len(t):,} characters, far more than {limit}: it was cut to its first "
                f"{block_size} tokens."
            )
            cut.add(i)
    unknown_of = getattr(tokenizer, "unknown_chars", None)
    if unknown_of is not None:
        unknown: dict[str, None] = {}
        for t in texts:
            unknown.update(dict.fromkeys(unknown_of(t)))
        if unknown:
            shown = " ".join(repr(c) for c in list(unknown)[:12]) + (" …" if len(unknown) > 12 else "")
            notices.append(f"Not in this tokenizer's vocabulary, so left out: {shown}. {READ_OTHER_SCRIPTS}.")
    if all(len(s) == 0 for s in seqs):
        raise ValueError("none of the text's characters are in the tokenizer's vocabulary. " + READ_OTHER_SCRIPTS)
    batch = pad_batch(seqs, tokenizer.eot_id, block_size, frozenset(cut) if block_size is not None else frozenset())
    batch.notices = notices + batch.notices
    return batch
