"""The model each row names (worked out from the config, never from the page) and the texts and tokens it reads."""
from __future__ import annotations

import re

import torch

from tools.bench.report import GOALS, BenchFailure

GPT2_SMALL_PARAMS = 124_439_808
LONG_GOAL_MS = 3000  # a text change of a line as long as the model reads (tools/bench/long_texts.py's GOAL_MS)
# The sidebar's model caption: the bench reads the vocabulary and parameter count a page really uses from it.
CAPTION = re.compile(r"vocab_size = ([\d,]+), set by the tokenizer · ([\d,]+) parameters")

# Different texts of the same length, so that every text change is a new trace of the same size.
WORDS = ["cat", "dog", "rat", "bat", "cow", "hen", "pig", "owl", "fox", "elk", "yak", "emu", "ant", "bee", "ape"]
# More than CLASSIC_T GPT-2 tokens; the word that changes comes first, so that it survives the cut.
LONG_TEXT = ("once upon a time, in a small village at the edge of a great forest, there lived an old clockmaker "
             "who repaired every clock in the valley. Children would gather at his window to watch the tiny gears "
             "turn, and he would tell them stories about the stars, the rivers and the mountains far away, and "
             "about the sea beyond them.")

_TEXTS_USED = [0]


def fresh_words() -> str:
    """Three words never used before in this run, always 11 characters: a text change is a new text (so a new
    trace, never one cached by an earlier page or repeat) of the same length."""
    k = _TEXTS_USED[0]
    _TEXTS_USED[0] += 1
    n = len(WORDS)
    return f"{WORDS[k % n]} {WORDS[(k // n) % n]} {WORDS[(k // n // n) % n]}"


# The T the GPT-2-small rows of the pages and memory parts read: 64 tokens, the app's cap for a big model until it
# was raised to 512 (issue 21), so these rows stay comparable with earlier runs; ``long_texts`` measures T = 512.
CLASSIC_T = 64


def big_model_t() -> int:
    """The T the GPT-2-small rows read (``CLASSIC_T``; the texts are cut to exactly that many tokens here)."""
    return CLASSIC_T


def cut_to_tokens(text: str, T: int, tokenizer: str = "gpt2") -> str:
    """``text``'s first ``T`` tokens as text, so that the app reads exactly ``T`` (a prefix that would encode to
    another length is shortened a token at a time; a text with fewer tokens is returned whole)."""
    from gptviz.text.tokenizers import get_tokenizer

    tok = get_tokenizer(tokenizer)
    ids = tok.encode(text)
    for n in range(min(T, len(ids)), 0, -1):
        out = tok.decode(ids[:n])
        if len(tok.encode(out)) == min(T, len(ids)):
            return out
    return text


def next_token_targets(idx: torch.Tensor) -> torch.Tensor:
    """The next token at each position, and -100 (ignored) at the last: what the app passes as targets."""
    y = torch.full_like(idx, -100)
    y[:, :-1] = idx[:, 1:]
    return y


def expected_model(shape: str) -> dict:
    """The model a row names, worked out here from the config (not from the page)."""
    from gptviz.config import preset
    from gptviz.text.tokenizers import get_tokenizer

    if shape == "default":
        tok = get_tokenizer("char-bpe", num_merges=20, lowercase=True)  # the sidebar's default tokenizer
        cfg = preset("default", vocab_size=tok.vocab_size)
        return {"cfg": cfg, "tokenizer": "char-bpe", "query": {"preset": "default"},
                "label": f"default · {cfg.num_params():,} params", "goal_ms": GOALS["page_default_ms"]}
    if shape in ("shakespeare-moe", "shakespeare-moe · full lines"):  # the shipped mixture of experts (issue 38)
        from gptviz.model.checkpoint import load_checkpoint
        from gptviz.paths import CHECKPOINTS

        cfg = load_checkpoint(CHECKPOINTS / "shakespeare-moe.safetensors").model.config
        if (cfg.n_expert, cfg.n_expert_active) != (8, 2):
            raise BenchFailure(f"shakespeare-moe has {cfg.n_expert} experts, top {cfg.n_expert_active}, not 8, top 2")
        # a loaded model: its traces carry no parameter count (the sidebar's caption is checked on every run instead).
        # A class types sentences: those rows hold the shipped models' goal. Lines as long as its context (128 tokens,
        # each page's integrated gradients 64 passes over them) hold the long texts' goal, as a big model's lines do.
        lines = shape.endswith("full lines")
        return {"cfg": cfg, "tokenizer": "its own char-bpe", "query": {"preset": "checkpoint: shakespeare-moe"},
                "loaded": True, "sentences": not lines,
                "label": f"shakespeare-moe · {cfg.num_params():,} params",
                "goal_ms": LONG_GOAL_MS if lines else GOALS["page_default_ms"]}
    cfg = preset("gpt2-small", vocab_size=50257)
    if cfg.num_params() != GPT2_SMALL_PARAMS:
        raise BenchFailure(f"preset gpt2-small has {cfg.num_params():,} parameters, not GPT-2 small's "
                           f"{GPT2_SMALL_PARAMS:,}")
    return {"cfg": cfg, "tokenizer": "gpt2", "T": CLASSIC_T,
            "query": {"preset": "gpt2-small", "tokenizer": "gpt2", "text": cut_to_tokens(LONG_TEXT, CLASSIC_T)},
            "text_for": lambda w: cut_to_tokens(f"{w} {LONG_TEXT}", CLASSIC_T),
            "label": f"gpt2-small · {cfg.num_params():,} params", "goal_ms": GOALS["page_gpt2_ms"]}


def shown_model(text: str) -> tuple[int, int] | None:
    """(vocab_size, parameters) from the first model caption in ``text``, or None when there is none."""
    m = CAPTION.search(text)
    return tuple(int(g.replace(",", "")) for g in m.groups()) if m else None
