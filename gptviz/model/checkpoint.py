"""Checkpoints: gptviz's own ``.safetensors`` (weights + config + tokenizer), Hugging Face GPT-2
``.safetensors``, and nanoGPT ``ckpt.pt``.

Nothing here unpickles arbitrary objects: safetensors holds only tensors and strings, and a ``.pt``
file is read with ``torch.load(weights_only=True)``, which refuses any object that is not plain data.

A file is small and the model it asks for may not be, so nothing is built from a file until it has been
checked: the safetensors header's length (``MAX_HEADER_BYTES``) before it is parsed; a ``.pt`` archive's entries
(stored, not compressed, and ``MAX_BYTES`` in all) before ``torch.load``; the config against
``ModelConfig.check_limits``; and every tensor's name, dtype and shape against that config (on the meta device)
before the model is allocated. Every failure is a ValueError that says what is wrong.
"""
from __future__ import annotations

import io
import json
import os
import pickle
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

import safetensors.torch
import torch
from safetensors import SafetensorError

from ..config import ModelConfig
from ..text.tokenizers import CharBPETokenizer, TiktokenTokenizer
from .base import TransformerBase, shapes_only
from .build import build_model
from .gpt import GPT
from .hf_gpt2 import gpt2_state_dict_to_gptviz, load_state

FORMAT = "gptviz-1"
MAX_BYTES = 1_200_000_000  # a file larger than this is refused before it is read
MAX_HEADER_BYTES = 1_000_000  # a safetensors header (JSON: tensor table, config, tokenizer, meta) larger than this
MAX_ZIP_ENTRIES = 10_000  # a .pt archive with more entries than this is refused before its directory is read

Source = Union[str, os.PathLike, bytes]


@dataclass
class Checkpoint:
    model: TransformerBase  # a GPT, or a gptviz.model.encoder_decoder.Seq2Seq when config.n_enc_layer >= 0
    tokenizer: Any = None  # a tokenizer, or None when the file names none
    meta: dict = field(default_factory=dict)
    kind: str = "gptviz"  # gptviz | hf-gpt2 | nanogpt

    @property
    def config(self) -> ModelConfig:
        return self.model.config


def tokenizer_to_meta(tok) -> dict:
    if tok is None:
        return {}
    if isinstance(tok, CharBPETokenizer):
        return tok.to_dict()
    if isinstance(tok, TiktokenTokenizer):
        return {"kind": "tiktoken", "name": tok.name}
    raise ValueError(f"cannot store a tokenizer of type {type(tok).__name__}")


def tokenizer_from_meta(d: dict):
    if not d:
        return None
    if d.get("kind") == "char-bpe":
        return CharBPETokenizer.from_dict(d)
    if d.get("kind") == "tiktoken":
        return TiktokenTokenizer(d["name"])
    raise ValueError(f"unknown tokenizer kind {d.get('kind')!r}")


def _payload(model: TransformerBase, tokenizer, meta: dict) -> tuple[dict, dict]:
    sd = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    if model.config.tie_weights:
        sd.pop("lm_head.weight", None)
    header = {
        "format": FORMAT,
        "config": json.dumps(model.config.to_dict()),
        "tokenizer": json.dumps(tokenizer_to_meta(tokenizer)),
        "meta": json.dumps(meta),
    }
    return sd, header


def save_checkpoint(path: Union[str, os.PathLike], model: TransformerBase, tokenizer=None, **meta: Any) -> None:
    """Write weights, config and tokenizer to one ``.safetensors`` file. A tied head is stored once."""
    sd, header = _payload(model, tokenizer, meta)
    safetensors.torch.save_file(sd, str(path), metadata=header)


def checkpoint_bytes(model: TransformerBase, tokenizer=None, **meta: Any) -> bytes:
    """The same file as ``save_checkpoint`` writes, as bytes (for a download button)."""
    sd, header = _payload(model, tokenizer, meta)
    return safetensors.torch.save(sd, metadata=header)


def _read_bytes(src: Source) -> bytes:
    if isinstance(src, (bytes, bytearray)):
        data = bytes(src)
    else:
        p = Path(src)
        if not p.is_file():
            raise ValueError(f"no such file: {p}")
        if p.stat().st_size > MAX_BYTES:
            raise ValueError(f"{p.name} is {p.stat().st_size / 1e9:.1f} GB, over the {MAX_BYTES / 1e9:.1f} GB limit")
        data = p.read_bytes()
    if len(data) > MAX_BYTES:
        raise ValueError(f"the file is {len(data) / 1e9:.1f} GB, over the {MAX_BYTES / 1e9:.1f} GB limit")
    if not data:
        raise ValueError("the file is empty")
    return data


def load_checkpoint(src: Source, name: str = "", n_head: Optional[int] = None) -> Checkpoint:
    """Load a checkpoint from a path or bytes, whatever its format. Every failure is a ValueError.

    ``name`` (a file name) helps tell formats apart for bytes. ``n_head`` is needed for a Hugging Face
    GPT-2 file, whose weights do not say how many heads there are, unless it has one of the released GPT-2
    sizes (``OPENAI_GPT2_HEADS``); without it such a file is refused with a message saying so. (A model folder,
    with its config.json, is ``gptviz.from_pretrained``'s.)
    """
    data = _read_bytes(src)
    name = name or (str(src) if not isinstance(src, (bytes, bytearray)) else "")
    # safetensors: an 8-byte little-endian header length, then the JSON header; a length whose first byte is 0x80
    # (pickle's first byte) is a safetensors file still, not a pickle
    header = int.from_bytes(data[:8], "little") if len(data) > 8 else -1
    safetensors_file = data[8:9] == b"{" and 0 < header <= len(data) - 8
    if not safetensors_file and (data[:2] == b"PK" or data[:1] == b"\x80"
                                 or name.endswith((".pt", ".pth", ".ckpt", ".bin"))):
        return _load_torch(data, n_head)
    return _load_safetensors(data, n_head)


# --------------------------------------------------------------------------- checks before building
def expected_shapes(cfg: ModelConfig) -> dict[str, tuple]:
    """The name and shape of every parameter the model for ``cfg`` has, worked out on the meta device (nothing is
    allocated). ``lm_head.weight`` is listed only when the head is not tied. Refuses a config over the limits."""
    with shapes_only():
        meta_model = build_model(cfg)  # TransformerBase.__init__ runs cfg.check_limits first
    shapes = {name: tuple(p.shape) for name, p in meta_model.named_parameters()}
    if cfg.tie_weights:
        shapes.pop("lm_head.weight", None)
    return shapes


def check_tensors(cfg: ModelConfig, sd: dict, source: str) -> None:
    """Refuse, before the model is built, weights that do not fit ``cfg``: a missing tensor, one that is not
    floating point, or one whose shape is not the one ``cfg`` (which ``source`` names) asks for."""
    want = expected_shapes(cfg)
    missing = sorted(set(want) - set(sd))
    if missing:
        raise ValueError(f"the weights lack {', '.join(missing[:6])}{' …' if len(missing) > 6 else ''}, "
                         f"which {source} asks for")
    for name, shape in want.items():
        t = sd[name]
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} is a {type(t).__name__}, not a tensor")
        if not t.is_floating_point():
            raise ValueError(f"{name} holds {t.dtype} values: weights must be floating point")
        if tuple(t.shape) != shape:
            raise ValueError(f"{name} has shape {tuple(t.shape)}, but {source} asks for {shape}")


def _json_dict(text: Any, what: str) -> dict:
    """``text`` parsed as a JSON object; a ValueError naming ``what`` if it is not one."""
    try:
        value = json.loads(text)
    except (TypeError, ValueError, RecursionError) as exc:
        raise ValueError(f"the gptviz checkpoint's {what} is not readable JSON ({type(exc).__name__})") from None
    if not isinstance(value, dict):
        raise ValueError(f"the gptviz checkpoint's {what} must be a JSON object, not {type(value).__name__}")
    return value


# --------------------------------------------------------------------------- safetensors
def _load_safetensors(data: bytes, n_head: Optional[int]) -> Checkpoint:
    unreadable = "this is not a readable .safetensors file (it may be truncated or of another format)"
    header_len = int.from_bytes(data[:8], "little")
    if len(data) < 8 or header_len <= 0 or 8 + header_len > len(data):
        raise ValueError(unreadable)
    if header_len > MAX_HEADER_BYTES:
        raise ValueError(f"this .safetensors file's header is {header_len:,} bytes, over the limit of "
                         f"{MAX_HEADER_BYTES:,}: it was refused unread")
    try:
        header = json.loads(data[8:8 + header_len])
        if not isinstance(header, dict):
            raise ValueError
        tensors = safetensors.torch.load(data)
    except (ValueError, SafetensorError, UnicodeDecodeError, RecursionError, RuntimeError) as exc:
        raise ValueError(unreadable) from exc
    meta = header.get("__metadata__") or {}
    if not isinstance(meta, dict):
        raise ValueError(unreadable)
    if meta.get("format") == FORMAT:
        if "config" not in meta:
            raise ValueError("the gptviz checkpoint's header is damaged: it has no config")
        cfg = ModelConfig.from_dict(_json_dict(meta["config"], "config"))
        tok_meta = _json_dict(meta.get("tokenizer") or "{}", "tokenizer")
        extra = _json_dict(meta.get("meta") or "{}", "meta")
        try:
            tok = tokenizer_from_meta(tok_meta)
        except (KeyError, TypeError, AttributeError, IndexError, ValueError) as exc:
            raise ValueError(f"the gptviz checkpoint's tokenizer is damaged: {exc}") from None
        check_tensors(cfg, tensors, "the checkpoint's config")  # checks cfg against the limits first
        model = build_model(cfg)  # a GPT, or an encoder-decoder model when n_enc_layer >= 0
        if cfg.tie_weights:
            tensors["lm_head.weight"] = tensors["transformer.wte.weight"]
        _load_checked(model, tensors)
        return Checkpoint(model, tok, extra, "gptviz")
    return _from_gpt2_tensors(tensors, n_head, "hf-gpt2")


def _weight(sd: dict, name: str, dims: int) -> torch.Tensor:
    t = sd.get(name)
    if t is None:
        raise ValueError(f"these GPT-2 weights lack {name}")
    if not isinstance(t, torch.Tensor) or t.dim() != dims or not t.is_floating_point():
        shape = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
        dtype = t.dtype if isinstance(t, torch.Tensor) else "?"
        raise ValueError(f"{name} must be a {dims}-D floating-point tensor, not {shape} of {dtype}")
    return t


# The released GPT-2 sizes, recognised by (vocab_size, n_embd, n_layer): their head counts are known, not guessed.
OPENAI_GPT2_HEADS = {(50257, 768, 12): 12, (50257, 1024, 24): 16, (50257, 1280, 36): 20, (50257, 1600, 48): 25,
                     (50257, 768, 6): 12}  # GPT-2 small, medium, large, XL; DistilGPT2


def _from_gpt2_tensors(tensors: dict, n_head: Optional[int], kind: str) -> Checkpoint:
    sd = {k.removeprefix("transformer."): v for k, v in tensors.items()}
    if "wte.weight" not in sd or "wpe.weight" not in sd:
        raise ValueError("these weights are neither a gptviz checkpoint nor GPT-2 (no wte/wpe)")
    V, C = _weight(sd, "wte.weight", 2).shape
    block = _weight(sd, "wpe.weight", 2).shape[0]
    layers = {int(k.split(".")[1]) for k in sd if k.startswith("h.") and k.split(".")[1].isdigit()}
    n_layer = 1 + max(layers, default=-1)
    if n_layer < 1:
        raise ValueError("these GPT-2 weights have no layers (h.0...)")
    known = OPENAI_GPT2_HEADS.get((V, C, n_layer))
    heads_told = n_head or known
    n_head = heads_told or 1  # for the structural checks below; a file that passes them still needs its heads
    d_mlp = _weight(sd, "h.0.mlp.c_fc.weight", 2).shape[1]
    lm, wte = tensors.get("lm_head.weight"), sd["wte.weight"]
    tied = lm is None or (isinstance(lm, torch.Tensor) and lm.shape == wte.shape and lm.dtype == wte.dtype
                          and torch.equal(lm, wte))
    cfg = ModelConfig(vocab_size=V, block_size=block, n_layer=n_layer, n_head=n_head, n_embd=C, d_mlp=d_mlp,
                      activation="gelu_tanh", tie_weights=tied)
    cfg.check_limits(batch=1, seq_len=1)
    try:
        converted = gpt2_state_dict_to_gptviz(tensors, n_layer)
    except RuntimeError as exc:  # a Conv1D weight that is not 2-D cannot be transposed
        raise ValueError(f"these GPT-2 weights do not have GPT-2's shapes: {exc}") from None
    check_tensors(cfg, converted, f"GPT-2 with n_embd={C}, {n_layer} layer(s), {n_head} head(s), d_mlp={d_mlp}")
    if not heads_told:
        raise ValueError(f"a Hugging Face GPT-2 weights file does not say how many heads it has (n_embd={C}, "
                         f"{n_layer} layer(s) could be split many ways): open its folder, config.json with the "
                         "weights, or give the number of heads")
    model = GPT(cfg)
    _load_checked(model, converted)
    tok = None
    if V == 50257:
        try:
            tok = TiktokenTokenizer("gpt2")
        except ValueError:
            tok = None
    return Checkpoint(model, tok, {"source": "Hugging Face GPT-2 weights"}, kind)


# --------------------------------------------------------------------------- PyTorch .pt
def _check_archive(data: bytes) -> None:
    """Refuse, before ``torch.load`` reads it, a ``.pt`` file that is not torch.save's zip archive, or one that
    would unpack to more than it holds: torch.save stores every entry uncompressed, so a compressed entry can only
    be a zip bomb (a few MB that inflate to GBs)."""
    unreadable = ("this is not a readable PyTorch checkpoint (it may be truncated or of another format; gptviz reads "
                  "the zip archive torch.save has written since PyTorch 1.6)")
    if data.count(b"PK\x01\x02") > MAX_ZIP_ENTRIES:  # central-directory records (an upper bound on the entries)
        raise ValueError(f"this .pt archive has over {MAX_ZIP_ENTRIES:,} entries: it was refused unread")
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            entries = z.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, OSError, EOFError, IndexError, KeyError) as exc:
        raise ValueError(unreadable) from exc
    packed = [e.filename for e in entries if e.compress_type != zipfile.ZIP_STORED or e.file_size != e.compress_size]
    if packed:
        raise ValueError(f"this .pt archive has compressed entries ({', '.join(packed[:3])}"
                         f"{' …' if len(packed) > 3 else ''}): torch.save stores them uncompressed, and a compressed "
                         "one can unpack to far more than the file's size (a zip bomb), so it was refused unread")
    total = sum(e.file_size for e in entries)
    if total > MAX_BYTES or total > len(data):
        raise ValueError(f"this .pt archive says it unpacks to {total / 1e9:.1f} GB, more than the file holds or "
                         f"the {MAX_BYTES / 1e9:.1f} GB limit: it was refused unread")


def _load_torch(data: bytes, n_head: Optional[int]) -> Checkpoint:
    _check_archive(data)
    try:
        obj = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise ValueError(
            "this .pt file holds Python objects other than tensors and plain data, so it was refused "
            "unread: loading it could run code. Save just the weights (e.g. nanoGPT's ckpt.pt, or a state_dict)."
        ) from exc
    except (RuntimeError, EOFError, zipfile.BadZipFile, ValueError, OSError, AttributeError, KeyError,
            RecursionError) as exc:
        raise ValueError("this is not a readable PyTorch checkpoint "
                         "(it may be truncated or of another format)") from exc
    if not isinstance(obj, dict):
        raise ValueError("a PyTorch checkpoint must hold a dict (a state_dict, or nanoGPT's ckpt with 'model')")
    if "model" in obj and "model_args" in obj:  # nanoGPT
        return _from_nanogpt(obj)
    tensors = {k: v for k, v in obj.items() if isinstance(k, str) and isinstance(v, torch.Tensor)}
    return _from_gpt2_tensors(tensors, n_head, "hf-gpt2")


def _from_nanogpt(obj: dict) -> Checkpoint:
    args, weights = obj["model_args"], obj["model"]
    if not isinstance(args, dict):
        raise ValueError(f"nanoGPT checkpoint's model_args must be a dict, not {type(args).__name__}")
    if not isinstance(weights, dict) or not all(isinstance(k, str) for k in weights):
        raise ValueError("nanoGPT checkpoint's model must be a state_dict (a dict of names to tensors), "
                         f"not {type(weights).__name__}")
    sd = {k.removeprefix("_orig_mod."): v for k, v in weights.items()}
    try:
        cfg = ModelConfig(vocab_size=int(args["vocab_size"]), block_size=int(args["block_size"]),
                          n_layer=int(args["n_layer"]), n_head=int(args["n_head"]), n_embd=int(args["n_embd"]),
                          bias=bool(args.get("bias", True)), activation="gelu", tie_weights=True)
    except KeyError as exc:
        raise ValueError(f"nanoGPT checkpoint's model_args are incomplete: {exc} is missing") from None
    except (TypeError, ValueError, OverflowError) as exc:
        raise ValueError(f"nanoGPT checkpoint's model_args are not whole numbers: {exc}") from None
    sd = {k: v for k, v in sd.items() if not k.endswith(".attn.bias")}  # old causal-mask buffers
    check_tensors(cfg, sd, "the checkpoint's model_args")  # checks cfg against the limits first
    model = GPT(cfg)
    _load_checked(model, sd)
    iter_num = obj.get("iter_num")
    iter_num = iter_num if isinstance(iter_num, int) and not isinstance(iter_num, bool) else None
    return Checkpoint(model, TiktokenTokenizer("gpt2") if cfg.vocab_size in (50257, 50304) and _gpt2_ok() else None,
                      {"source": "nanoGPT ckpt.pt", "iter_num": iter_num}, "nanogpt")


def _gpt2_ok() -> bool:
    try:
        TiktokenTokenizer("gpt2")
        return True
    except ValueError:
        return False


def _load_checked(model: TransformerBase, sd: dict) -> None:
    try:
        load_state(model, sd)
    except (KeyError, RuntimeError) as exc:
        raise ValueError(f"the weights do not fit the model: {exc}") from None
