"""Tokenizers behind one small interface: a character-level BPE we train ourselves, and tiktoken's.

Every tokenizer has ``name``, ``vocab_size``, ``eot_id``, ``encode(text)``, ``decode(ids)`` and
``token_str(id)`` (a readable display string for one token).

The literal text ``<|endoftext|>`` is read as the end-of-text token by every tokenizer here.
"""
from __future__ import annotations

import base64
import bisect
import gzip
import hashlib
import threading
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Optional, Protocol, Sequence

from .bpe import apply_merges

EOT = "<|endoftext|>"

# Whitespace shown visibly in token chips and axis labels.
_VISIBLE = {" ": "␣", "\n": "↵", "\t": "⇥", "\r": "␍"}


def visible(s: str) -> str:
    """A token's text with whitespace and control characters made visible."""
    out = []
    for ch in s:
        if ch in _VISIBLE:
            out.append(_VISIBLE[ch])
        elif ord(ch) < 32 or ord(ch) == 127:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return "".join(out)


class Tokenizer(Protocol):
    name: str
    vocab_size: int
    eot_id: int

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Iterable[int]) -> str: ...

    def token_str(self, token_id: int) -> str: ...


class TokenizerUnavailable(ValueError):
    """An encoding that cannot be loaded here (for example: offline and not cached)."""


def _split_eot(text: str) -> list[str]:
    """Split on the literal end-of-text marker, keeping it as its own piece."""
    parts: list[str] = []
    for i, piece in enumerate(text.split(EOT)):
        if i:
            parts.append(EOT)
        if piece:
            parts.append(piece)
    return parts


class CharBPETokenizer:
    """Byte-pair encoding over characters, small enough to read every merge.

    ``train(texts)``: the base vocabulary is every distinct character of the texts (sorted by code
    point; the texts are joined with nothing between them). Each merge takes the most frequent
    adjacent pair of the current sequence (ties: the pair that first appears earliest) and merges it
    everywhere, left to right. Merged tokens get ids after the base characters, in merge order;
    ``<|endoftext|>`` comes last.

    With ``lowercase=True`` text is lower-cased before training and before encoding.

    Unknown characters (never seen in training): ``encode(text, errors="skip")``, the default,
    leaves them out; ``errors="strict"`` raises ValueError naming them. ``unknown_chars(text)`` lists
    them so an app can say what was dropped.
    """

    def __init__(self, num_merges: int = 5, lowercase: bool = True):
        if isinstance(num_merges, bool) or not isinstance(num_merges, int) or num_merges < 0:
            raise ValueError(f"num_merges={num_merges!r} must be a whole number, 0 or more")
        self.num_merges = num_merges
        self.lowercase = lowercase
        self.name = "char-bpe"
        self.base: list[str] = []
        self.merges: list[tuple[str, str]] = []
        self.vocab: dict[str, int] = {}
        self.id_to_token: list[str] = []
        self.eot_id: int = -1
        self._ranks: dict[tuple[int, int], tuple[int, int]] = {}  # (a, b) -> (rank, merged id)

    @property
    def vocab_size(self) -> int:
        return len(self.id_to_token)

    def _norm(self, text: str) -> str:
        return text.lower() if self.lowercase else text

    def train(self, texts: Sequence[str] | str) -> "CharBPETokenizer":
        if isinstance(texts, str):
            texts = [texts]
        joined = "".join(self._norm(t) for t in texts).replace(EOT, "")
        if not joined:
            raise ValueError("the char BPE needs some training text: every text given was empty")
        base = sorted(set(joined))
        vocab = {ch: i for i, ch in enumerate(base)}
        tokens = list(base)
        seq = [vocab[ch] for ch in joined]
        merges: list[tuple[str, str]] = []
        for _ in range(self.num_merges):
            if len(seq) < 2:
                break
            counts = Counter(zip(seq, seq[1:]))  # insertion order = order of first appearance
            pair = max(counts, key=counts.__getitem__)  # max keeps the first of equal counts
            a, b = tokens[pair[0]], tokens[pair[1]]
            if a + b not in vocab:
                vocab[a + b] = len(tokens)
                tokens.append(a + b)
            merges.append((a, b))
            seq = _merge(seq, pair, vocab[a + b])
        self._build(base, merges)
        return self

    def _check_trained(self) -> None:
        if not self.id_to_token:
            raise ValueError("this tokenizer has not been trained: call .train(texts) first")

    def unknown_chars(self, text: str) -> list[str]:
        """Characters of ``text`` this tokenizer has never seen, in order of first appearance."""
        self._check_trained()
        seen: dict[str, None] = {}
        for piece in _split_eot(self._norm(text)):
            if piece == EOT:
                continue
            for ch in piece:
                if ch not in self.vocab:
                    seen.setdefault(ch, None)
        return list(seen)

    def encode(self, text: str, errors: str = "skip") -> list[int]:
        self._check_trained()
        if errors not in ("skip", "strict"):
            raise ValueError(f"errors={errors!r} must be 'skip' or 'strict'")
        if errors == "strict":
            unknown = self.unknown_chars(text)
            if unknown:
                raise ValueError("characters not in the vocabulary: " + " ".join(repr(c) for c in unknown))
        ids: list[int] = []
        for piece in _split_eot(self._norm(text)):
            if piece == EOT:
                ids.append(self.eot_id)
                continue
            seq = [self.vocab[ch] for ch in piece if ch in self.vocab]
            # apply the earliest-learned merge present, everywhere, and repeat (fast: see gptviz.text.bpe)
            ids.extend(apply_merges(seq, self._ranks))
        return ids

    def decode(self, ids: Iterable[int]) -> str:
        self._check_trained()
        out = []
        for i in ids:
            i = int(i)
            if not 0 <= i < len(self.id_to_token):
                raise ValueError(f"token id {i} is outside the vocabulary (vocab_size={self.vocab_size})")
            out.append(self.id_to_token[i])
        return "".join(out)

    def token_str(self, token_id: int) -> str:
        return visible(self.decode([token_id]))

    def to_dict(self) -> dict:
        """Everything needed to rebuild this tokenizer exactly (see ``from_dict``)."""
        self._check_trained()
        return {"kind": "char-bpe", "num_merges": self.num_merges, "lowercase": self.lowercase,
                "base": list(self.base), "merges": [list(m) for m in self.merges]}

    @classmethod
    def from_dict(cls, data: dict) -> "CharBPETokenizer":
        """Rebuild a trained tokenizer from ``to_dict()``: the same base, merges and ids."""
        try:
            tok = cls(int(data["num_merges"]), bool(data["lowercase"]))
            base = [str(c) for c in data["base"]]
            merges = [(str(a), str(b)) for a, b in data["merges"]]
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a char BPE tokenizer description: {exc}") from None
        if len(set(base)) != len(base) or any(len(c) != 1 for c in base):
            raise ValueError("a char BPE tokenizer's base must be distinct single characters")
        tok._build(base, merges)
        return tok

    def _build(self, base: list[str], merges: list[tuple[str, str]]) -> None:
        vocab = {ch: i for i, ch in enumerate(base)}
        id_to_token = list(base)
        ranks: dict[tuple[int, int], tuple[int, int]] = {}
        for rank, (a, b) in enumerate(merges):
            if a not in vocab or b not in vocab:
                raise ValueError(f"merge {a!r} + {b!r} uses a token that is not in the vocabulary")
            merged = a + b
            if merged not in vocab:  # two different merges can spell the same string
                vocab[merged] = len(id_to_token)
                id_to_token.append(merged)
            ranks[(vocab[a], vocab[b])] = (rank, vocab[merged])
        self.eot_id = len(id_to_token)
        id_to_token.append(EOT)
        vocab[EOT] = self.eot_id
        self.base, self.merges, self.vocab, self.id_to_token, self._ranks = (list(base), list(merges), vocab,
                                                                             id_to_token, ranks)


def _merge(seq: list[int], pair: tuple[int, int], new_id: int) -> list[int]:
    out: list[int] = []
    i, n = 0, len(seq)
    a, b = pair
    while i < n:
        if i + 1 < n and seq[i] == a and seq[i + 1] == b:
            out.append(new_id)
            i += 2
        else:
            out.append(seq[i])
            i += 1
    return out


# --------------------------------------------------------------------------- tiktoken
TIKTOKEN_ENCODINGS = {
    # name shown to users -> tiktoken encoding loaded. GPT-2's ranks are r50k_base's.
    "gpt2": "r50k_base",
    "cl100k_base": "cl100k_base",
    "o200k_base": "o200k_base",
}


# The vocabularies ship with gptviz (gptviz/text/data/tiktoken/, gzipped; provenance and licences in its
# README), so these tokenizers work offline on any machine. Each file's SHA-256 (of the gunzipped text)
# is the ``expected_hash`` tiktoken itself checks, and is checked here on every load.
TIKTOKEN_DIR = Path(__file__).resolve().parent / "data" / "tiktoken"
_R50K_PAT = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
# tiktoken's own pattern strings and special tokens for each encoding (tiktoken_ext.openai_public;
# tests/test_tokenizers.py checks they are still the same).
TIKTOKEN_SPECS: dict[str, dict[str, Any]] = {
    "r50k_base": dict(
        sha256="306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930", explicit_n_vocab=50257,
        pat_str=_R50K_PAT, special_tokens={EOT: 50256}),
    "cl100k_base": dict(
        sha256="223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7", explicit_n_vocab=None,
        pat_str=r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|"""
                r"""\s++$|\s*[\r\n]|\s+(?!\S)|\s""",
        special_tokens={EOT: 100257, "<|fim_prefix|>": 100258, "<|fim_middle|>": 100259, "<|fim_suffix|>": 100260,
                        "<|endofprompt|>": 100276}),
    "o200k_base": dict(
        sha256="446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d", explicit_n_vocab=None,
        pat_str="|".join([
            r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
            r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
            r"""\p{N}{1,3}""",
            r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
            r"""\s*[\r\n]+""",
            r"""\s+(?!\S)""",
            r"""\s+""",
        ]),
        special_tokens={EOT: 199999, "<|endofprompt|>": 200018}),
}

_ENCODINGS: dict = {}
_ENC_LOCK = threading.Lock()


def load_mergeable_ranks(encoding: str, path: Optional[Path] = None) -> dict[bytes, int]:
    """The ranks of a shipped vocabulary, after checking its SHA-256. Raises TokenizerUnavailable."""
    spec = TIKTOKEN_SPECS[encoding]
    path = path or TIKTOKEN_DIR / f"{encoding}.tiktoken.gz"
    try:
        data = gzip.decompress(path.read_bytes())
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise TokenizerUnavailable(f"The {encoding} vocabulary file {path.name} could not be read ({exc}).") from exc
    digest = hashlib.sha256(data).hexdigest()
    if digest != spec["sha256"]:
        raise TokenizerUnavailable(f"The {encoding} vocabulary file {path.name} is damaged: its SHA-256 is "
                                   f"{digest}, tiktoken expects {spec['sha256']}.")
    ranks = {}
    for line in data.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def tiktoken_encoding(encoding: str):
    """A ``tiktoken.Encoding`` built from the shipped file, with tiktoken's pattern and special tokens.
    One per process: building one takes a second or two."""
    with _ENC_LOCK:
        if encoding not in _ENCODINGS:
            try:
                import tiktoken
            except ImportError as exc:
                raise TokenizerUnavailable("The tiktoken package is not installed (pip install tiktoken).") from exc
            spec = TIKTOKEN_SPECS[encoding]
            kw = {"explicit_n_vocab": spec["explicit_n_vocab"]} if spec["explicit_n_vocab"] else {}
            _ENCODINGS[encoding] = tiktoken.Encoding(
                name=encoding, pat_str=spec["pat_str"], mergeable_ranks=load_mergeable_ranks(encoding),
                special_tokens=dict(spec["special_tokens"]), **kw)
        return _ENCODINGS[encoding]


class TiktokenTokenizer:
    """One of tiktoken's encodings, built from the vocabulary that ships with gptviz (no network)."""

    def __init__(self, name: str):
        if name not in TIKTOKEN_ENCODINGS:
            raise ValueError(f"unknown encoding {name!r}: choose one of {', '.join(TIKTOKEN_ENCODINGS)}")
        self.name = name
        self._enc = tiktoken_encoding(TIKTOKEN_ENCODINGS[name])
        self.vocab_size = self._enc.n_vocab
        self.eot_id = self._enc.eot_token

    def encode(self, text: str) -> list[int]:
        return self._enc.encode(text, allowed_special={EOT}, disallowed_special=())

    def decode(self, ids: Iterable[int]) -> str:
        ids = [int(i) for i in ids]
        for i in ids:
            if not 0 <= i < self.vocab_size:
                raise ValueError(f"token id {i} is outside the vocabulary (vocab_size={self.vocab_size})")
        return self._enc.decode(ids, errors="replace")

    def token_bytes(self, token_id: int) -> bytes:
        return self._enc.decode_single_token_bytes(int(token_id))

    def token_str(self, token_id: int) -> str:
        try:
            raw = self.token_bytes(token_id)
        except KeyError:
            return f"<unused {token_id}>"
        # Bytes that are not whole UTF-8 characters (part of an emoji, say) are shown as \xNN.
        return visible(raw.decode("utf-8", errors="backslashreplace"))


def _utf8_chars(data: bytes) -> list[tuple[int, int, str]]:
    """``data`` read as UTF-8, one ``(start, end, text)`` per character; a byte that starts no valid character is
    its own piece, shown as ``\\xNN``."""
    out, i, n = [], 0, len(data)
    while i < n:
        lead = data[i]
        size = 1 if lead < 0x80 else 2 if 0xC2 <= lead < 0xE0 else 3 if 0xE0 <= lead < 0xF0 else \
            4 if 0xF0 <= lead < 0xF5 else 0
        try:
            ch = data[i:i + size].decode("utf-8") if size and i + size <= n else None
        except UnicodeDecodeError:
            ch = None
        if ch is None:
            out.append((i, i + 1, f"\\x{lead:02x}"))
            i += 1
        else:
            out.append((i, i + size, ch))
            i += size
    return out


SPLIT_MARK = "…"  # stands where a character goes on into the token before or after


def token_labels(tokenizer, ids: Sequence[int]) -> list[str]:
    """A display label for each token of one sequence, read in context.

    A byte-level tokenizer (GPT-2's, cl100k, o200k, a byte-level ``tokenizer.json``) may split one character into
    several tokens: a Chinese character is three UTF-8 bytes, and GPT-2 often gives it two tokens. Such a token
    means nothing alone (``\\xe6\\xb3``), so it is labelled with the character it is part of, and ``…`` on the side
    where the character goes on into the next or previous token: 注 as two tokens reads ``注…`` then ``…注``.
    A token that is whole characters keeps its ``token_str``. Tokenizers without ``token_bytes`` (the char BPE)
    are labelled by ``token_str`` alone."""
    ids = [int(i) for i in ids]
    labels = [tokenizer.token_str(i) for i in ids]
    token_bytes = getattr(tokenizer, "token_bytes", None)
    if token_bytes is None or not ids:
        return labels
    pieces = []
    for i in ids:
        try:
            pieces.append(token_bytes(i))
        except (KeyError, ValueError):
            pieces.append(None)
    split = [p is not None and _utf8_split(p) for p in pieces]
    if not any(split):
        return labels
    # read the run of byte tokens around each split one as one byte string
    starts, data, pos = [], b"", 0
    for p in pieces:
        starts.append(pos)
        data += p or b""
        pos += len(p or b"")
    chars = _utf8_chars(data)
    char_starts, char_ends = [c[0] for c in chars], [c[1] for c in chars]
    for k, p in enumerate(pieces):
        if not split[k]:
            continue
        s, e = starts[k], starts[k] + len(p)
        first = bisect.bisect_right(char_ends, s)  # the first character that ends after s
        inside = [c for c in chars[first:bisect.bisect_left(char_starts, e)]]
        if not inside:
            continue
        text = "".join(c[2] for c in inside)
        labels[k] = (SPLIT_MARK if inside[0][0] < s else "") + visible(text) + (SPLIT_MARK if inside[-1][1] > e else "")
    return labels


def _utf8_split(piece: bytes) -> bool:
    """Whether a token's bytes are not whole UTF-8 characters."""
    try:
        piece.decode("utf-8")
        return False
    except UnicodeDecodeError:
        return True


def get_tokenizer(name: str, train_texts: Optional[Sequence[str]] = None, num_merges: int = 5,
                  lowercase: bool = True):
    """Build a tokenizer by name: "char-bpe" (trained on ``train_texts``) or a tiktoken encoding."""
    if name == "char-bpe":
        if train_texts is None:
            from .batches import BUILTIN_TEXT

            train_texts = [BUILTIN_TEXT]
        return CharBPETokenizer(num_merges, lowercase).train(train_texts)
    return TiktokenTokenizer(name)


TOKENIZER_NAMES = ("char-bpe", *TIKTOKEN_ENCODINGS)
