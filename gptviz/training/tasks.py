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

from ..text.batches import BUILTIN_TEXT, IGNORE_INDEX
from ..text.tokenizers import CharBPETokenizer

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


class ShakespeareTask(Task):
    """Next-token prediction on the shipped Shakespeare corpus (35 plays; Hamlet and Julius Caesar held out).

    With ``induction_share`` > 0, that share of the rows starts with a run of random tokens repeated
    twice (the synthetic signal from which induction heads form), the rest of the row being text.
    Every position is scored. ``validation`` scores held-out plays in nats and bits per character.
    """
    name = "shakespeare"
    description = "Predict the next token of Shakespeare's plays (two whole plays held out for validation)."

    def __init__(self, block_size: int = 128, induction_share: float = 0.0, run_len: tuple[int, int] = (8, 48),
                 warmup_share: float = 0.0, warmup_steps: int = 0):
        from ..text import corpus

        super().__init__(corpus.tokenizer())
        self.block_size = block_size
        self.induction_share = float(induction_share)
        self.run_len = run_len
        # a curriculum: for the first ``warmup_steps`` training steps, ``warmup_share`` of the rows repeat
        self.warmup_share, self.warmup_steps = float(warmup_share), int(warmup_steps)
        self.step: int | None = None  # set by the training loop (gptviz.training.loop.train) before each batch
        self.ids = torch.from_numpy(corpus.encoded("train", self.tokenizer).astype("int64"))
        if not 0 <= self.induction_share <= 1:
            raise ValueError(f"induction_share={induction_share!r} must be between 0 and 1")
        if not 0 <= self.warmup_share <= 1:
            raise ValueError(f"warmup_share={warmup_share!r} must be between 0 and 1")
        if 2 * run_len[1] > block_size:
            raise ValueError("a repeated run must fit in the block")

    def batch(self, batch_size: int, g: torch.Generator) -> TaskBatch:
        T = self.block_size
        starts = torch.randint(0, self.ids.numel() - T - 1, (batch_size,), generator=g)
        seq = torch.stack([self.ids[s:s + T + 1] for s in starts.tolist()])  # (B, T+1)
        warm = self.step is not None and self.step <= self.warmup_steps
        n_rep = int(round((self.warmup_share if warm else self.induction_share) * batch_size))
        if n_rep:
            lens = torch.randint(self.run_len[0], self.run_len[1] + 1, (n_rep,), generator=g)
            for b in range(n_rep):
                n = int(lens[b])
                run = torch.randint(0, self.vocab_size, (n,), generator=g)
                seq[b, :n] = run
                seq[b, n:2 * n] = run
        return TaskBatch(seq[:, :-1].contiguous(), seq[:, 1:].contiguous())

    def example(self) -> str:
        from ..text import corpus

        return corpus.HELD_OUT_LINE

    @torch.no_grad()
    def validation(self, model, max_windows: int = 0, batch_size: int = 64) -> dict:
        """Mean loss on the held-out plays, per token and per character. Non-overlapping windows of
        ``block_size`` tokens; ``max_windows`` > 0 takes that many, evenly spread (a quick estimate)."""
        from ..text import corpus

        ids = torch.from_numpy(corpus.encoded("val", self.tokenizer).astype("int64"))
        T = min(self.block_size, model.config.block_size)
        n = (ids.numel() - 1) // T
        picks = torch.arange(n) if not max_windows or max_windows >= n else torch.linspace(0, n - 1, max_windows).long()
        total, count = 0.0, 0
        with torch.no_grad():  # a measurement: no graph to keep (15 % less CPU for the Shakespeare GPT's)
            for i in range(0, len(picks), batch_size):
                w = picks[i:i + batch_size]
                x = torch.stack([ids[j * T:(j + 1) * T] for j in w.tolist()])
                y = torch.stack([ids[j * T + 1:(j + 1) * T + 1] for j in w.tolist()])
                _, loss = model(x, y)
                total += float(loss) * y.numel()
                count += y.numel()
        per_token = total / count
        out = {"loss_per_token": per_token, "windows": int(len(picks)), "tokens": count}
        out.update(corpus.per_char(per_token, "val", self.tokenizer))
        return out


TASKS["shakespeare"] = ShakespeareTask


# --------------------------------------------------------------------------- which positions a task scores
# A model trained on a task was only ever scored on some positions (the sorted half, the second copy);
# elsewhere its guesses are meaningless by design. The pages show its loss on the positions its task
# scores, with the all-positions loss beside it.
SCORING_RULES = {
    "sort": "The sort model is scored only on the letters after the separator: the unsorted letters before it "
            "are random, so no model can predict them.",
    "induction": "The induction model is scored only from the first repeated token on: the first run of letters "
                 "is random, so no model can predict it; the copy can be predicted by looking back.",
}


def scoring_rule(task: str) -> str:
    """One sentence on the positions ``task`` scores, or "" if it scores every position."""
    return SCORING_RULES.get(task, "")


def scored_targets(task: str, x: torch.Tensor, y: torch.Tensor, tokenizer) -> torch.Tensor:
    """``y`` with IGNORE_INDEX wherever ``task`` does not score the prediction.

    - sort: positions from the separator on (the separator's own position predicts the first sorted letter);
    - induction: positions whose token occurred earlier in the row (the second copy; its last token has no
      target anyway);
    - any other task: ``y`` unchanged.
    """
    y = y.clone()
    if task == "sort":
        sep = tokenizer.vocab.get(SEP) if hasattr(tokenizer, "vocab") else None
        for b in range(x.shape[0]):
            where = (x[b] == sep).nonzero()
            first = int(where[0]) if sep is not None and len(where) else x.shape[1]
            y[b, :first] = IGNORE_INDEX
    elif task == "induction":
        for b in range(x.shape[0]):
            seen: set[int] = set()
            for t in range(x.shape[1]):
                tok = int(x[b, t])
                if tok not in seen:
                    y[b, t] = IGNORE_INDEX
                seen.add(tok)
    return y


@dataclass
class Seq2SeqBatch(TaskBatch):
    """A teacher-forced encoder-decoder batch: ``src`` (B, S) is what the encoder reads, ``x`` (B, T) what
    the decoder reads (a start token, then the answer so far) and ``y`` (B, T) what it should write."""
    src: Optional[torch.Tensor] = None
    src_mask: Optional[torch.Tensor] = None


class ReverseTask(Task):
    """Sequence to sequence: an encoder reads some letters, the decoder writes them backwards.

    The decoder reads ``^`` then the reversed letters so far (teacher forcing) and is scored on every
    position. Output position t must copy source position L-1-t, so a trained model's cross-attention
    shows an anti-diagonal. Not in ``TASKS``: it needs an encoder-decoder model (``gptviz.model.encoder_decoder``).
    """
    name = "reverse"
    description = "An encoder reads some letters; a decoder writes them backwards after a start token (abcd → ^dcba)."
    START = "^"

    def __init__(self, n_letters: int = 10, length: int = 8):
        self.letters = "abcdefghijklmnopqrstuvwxyz"[:n_letters]
        self.length = length
        super().__init__(CharBPETokenizer(num_merges=0, lowercase=False).train([self.letters + self.START]))
        self.start_id = self.tokenizer.vocab[self.START]
        self.letter_ids = torch.tensor([self.tokenizer.vocab[c] for c in self.letters])
        self.block_size = length  # decoder positions
        self.enc_len = length  # encoder positions

    def batch(self, batch_size: int, g: torch.Generator) -> Seq2SeqBatch:
        src = self.letter_ids[torch.randint(0, len(self.letters), (batch_size, self.length), generator=g)]
        out = src.flip(1)  # (B, L): the letters backwards
        x = torch.cat([torch.full((batch_size, 1), self.start_id), out[:, :-1]], dim=1)  # ^ then the answer so far
        return Seq2SeqBatch(x, out.clone(), None, src=src)

    def example(self) -> str:
        return "fbdacbeg"[: self.length]

    def decoder_text(self, source: str) -> str:
        """What the decoder reads for ``source`` under teacher forcing: ``^`` then the reversal, less its last
        letter."""
        return self.START + source[::-1][:-1]
