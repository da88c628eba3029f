"""A Hugging Face ``tokenizer.json`` behind gptviz's tokenizer interface, through the ``tokenizers`` library.

The model families gptviz opens (GPT-2, Llama, Qwen2, GPT-NeoX …) ship their tokenizer as one ``tokenizer.json``.
``tokenizers`` reads it and does all the work (pre-tokenising, byte-level or SentencePiece-style BPE, special
tokens): nothing here re-implements a tokenizer. What this adds is what the app's token chips need: a readable
string for each token (``token_str``), with a byte-level vocabulary's ``Ġ`` shown as the space it stands for and
SentencePiece's ``▁`` too.
"""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Iterable, Union

from .tokenizers import EOT, visible

MAX_TOKENIZER_BYTES = 64_000_000  # a tokenizer.json larger than this is refused unread (Llama 3's is ~9 MB)
# What a model's end-of-text token is called, by family, most common first.
EOS_NAMES = (EOT, "</s>", "<|im_end|>", "<eos>", "<|end_of_text|>", "<|eot_id|>")
# A text each tokenizer.json encodes when it is read: words it may lack, digits, punctuation, accents, CJK, emoji.
PROBE = "The cat sat, 42 times! naïve Ünïcode 注意 🙂\n\tend"


@lru_cache(maxsize=1)
def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet read back: the printable character that stands for each byte -> the byte."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), 256))
    chars, n = keep[:], 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(keep, chars)}


class HFTokenizer:
    """``tokenizers.Tokenizer`` with ``name``, ``vocab_size``, ``eot_id``, ``encode``, ``decode`` and ``token_str``.

    ``encode`` adds what the tokenizer's own post-processor adds (Llama's beginning-of-text token, say), as
    ``transformers`` does by default, so a model sees the ids it was trained on."""

    kind = "hf"

    def __init__(self, tok, name: str = "tokenizer.json"):
        self._tok = tok
        self.name = name
        # the ids run from 0 to the largest, gaps included (what the page's id ranges and checks need); a count of
        # the tokens would be smaller than the largest id where the vocabulary has gaps
        ids = list(tok.get_vocab(with_added_tokens=True).values()) + list(tok.encode(PROBE).ids)
        self.vocab_size = max(ids, default=-1) + 1
        self.eot_id = next((i for i in (tok.token_to_id(n) for n in EOS_NAMES) if i is not None), -1)
        decoder = json.loads(tok.to_str()).get("decoder") or {}
        kinds = {decoder.get("type")} | {d.get("type") for d in decoder.get("decoders") or [] if isinstance(d, dict)}
        self._byte_level = "ByteLevel" in kinds

    @classmethod
    def from_file(cls, path: Union[str, Path], name: str = "") -> "HFTokenizer":
        """Read a ``tokenizer.json``; a ValueError that says why if it can't be read."""
        from tokenizers import Tokenizer

        path = Path(path)
        try:
            size = path.stat().st_size
        except OSError as exc:
            raise ValueError(f"there is no tokenizer.json to read ({exc.strerror})") from None
        if size > MAX_TOKENIZER_BYTES:
            raise ValueError(f"tokenizer.json is {size:,} bytes, over the limit of {MAX_TOKENIZER_BYTES:,}: refused "
                             "unread")
        try:
            tok = Tokenizer.from_file(str(path))
        except Exception as exc:  # noqa: BLE001 - the library raises its own Exception subclasses
            raise ValueError(f"tokenizer.json can't be read by the tokenizers library: {str(exc)[:200]}") from None
        # as transformers encodes by default: no padding to a length, no truncation (a file's padding to a fixed
        # length would have every text, and the probe below, padded to it: a billion ids if it says so)
        tok.no_padding()
        tok.no_truncation()
        if tok.get_vocab_size(with_added_tokens=True) == 0:
            raise ValueError("tokenizer.json's model has an empty vocab: it has no tokens")
        try:  # what it is told to do on the first text (an unknown token it lacks, say) fails here, not on a page
            tok.decode(tok.encode(PROBE).ids, skip_special_tokens=False)
        except Exception as exc:  # noqa: BLE001 - as above
            raise ValueError(f"tokenizer.json can't encode text: {str(exc)[:200]}") from None
        return cls(tok, name or path.parent.name or "tokenizer.json")

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(str(text)).ids)

    def decode(self, ids: Iterable[int]) -> str:
        ids = [int(i) for i in ids]
        for i in ids:
            if not 0 <= i < self.vocab_size:
                raise ValueError(f"token id {i} is outside the vocabulary (vocab_size={self.vocab_size})")
        return self._tok.decode(ids, skip_special_tokens=False)

    def token_text(self, token_id: int) -> str:
        """The text one token stands for (a byte-level token's bytes as UTF-8, ``\\xNN`` for a partial character)."""
        piece = self._tok.id_to_token(int(token_id))
        if piece is None:
            return f"<unused {token_id}>"
        if self._byte_level:
            table = _byte_decoder()
            if all(ch in table for ch in piece):
                return bytes(table[ch] for ch in piece).decode("utf-8", errors="backslashreplace")
            return piece
        if piece.startswith("<0x") and piece.endswith(">") and len(piece) == 6:  # SentencePiece's byte fallback
            return f"\\x{piece[3:5].lower()}"
        return piece.replace("▁", " ")

    def token_bytes(self, token_id: int) -> bytes:
        """The bytes one token stands for: a byte-level token's bytes, SentencePiece's byte fallback ``<0xNN>`` as
        that byte, any other piece as UTF-8 (``▁`` as a space). Raises KeyError for an id with no piece."""
        piece = self._tok.id_to_token(int(token_id))
        if piece is None:
            raise KeyError(token_id)
        if self._byte_level:
            table = _byte_decoder()
            if all(ch in table for ch in piece):
                return bytes(table[ch] for ch in piece)
            return piece.encode("utf-8")
        if piece.startswith("<0x") and piece.endswith(">") and len(piece) == 6:
            try:
                return bytes([int(piece[3:5], 16)])
            except ValueError:
                pass
        return piece.replace("▁", " ").encode("utf-8")

    def token_str(self, token_id: int) -> str:
        return visible(self.token_text(token_id))
