"""Checkpoints: gptviz's own ``.safetensors`` (weights + config + tokenizer), Hugging Face GPT-2
``.safetensors``, and nanoGPT ``ckpt.pt``.

Nothing here unpickles arbitrary objects: safetensors holds only tensors and strings, and a ``.pt``
file is read with ``torch.load(weights_only=True)``, which refuses any object that is not plain data.
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
from .base import TransformerBase
from .build import build_model
from .gpt import GPT
from .hf_gpt2 import gpt2_state_dict_to_gptviz, load_state

FORMAT = "gptviz-1"
MAX_BYTES = 1_200_000_000  # a file larger than this is refused before it is read

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
    GPT-2 file, whose weights do not say how many heads there are (default: d_head = 64, as in GPT-2).
    """
    data = _read_bytes(src)
    name = name or (str(src) if not isinstance(src, (bytes, bytearray)) else "")
    if data[:2] == b"PK" or data[:1] == b"\x80" or name.endswith((".pt", ".pth", ".ckpt", ".bin")):
        return _load_torch(data, n_head)
    return _load_safetensors(data, n_head)


def _load_safetensors(data: bytes, n_head: Optional[int]) -> Checkpoint:
    try:
        header_len = int.from_bytes(data[:8], "little")
        if len(data) < 8 or header_len <= 0 or 8 + header_len > len(data):
            raise ValueError
        header = json.loads(data[8:8 + header_len])
        tensors = safetensors.torch.load(data)
    except (ValueError, SafetensorError, UnicodeDecodeError, json.JSONDecodeError, RuntimeError) as exc:
        raise ValueError("this is not a readable .safetensors file (it may be truncated or of another format)") from exc
    meta = header.get("__metadata__") or {}
    if meta.get("format") == FORMAT:
        try:
            cfg = ModelConfig.from_dict(json.loads(meta["config"]))
            tok = tokenizer_from_meta(json.loads(meta.get("tokenizer") or "{}"))
            extra = json.loads(meta.get("meta") or "{}")
        except (KeyError, TypeError, json.JSONDecodeError) as exc:
            raise ValueError(f"the gptviz checkpoint's header is damaged: {exc}") from None
        cfg.check_limits(batch=1, seq_len=1)
        model = build_model(cfg)  # a GPT, or an encoder-decoder model when n_enc_layer >= 0
        if cfg.tie_weights:
            tensors["lm_head.weight"] = tensors.get("transformer.wte.weight")
        _load_checked(model, tensors)
        return Checkpoint(model, tok, extra, "gptviz")
    return _from_gpt2_tensors(tensors, n_head, "hf-gpt2")


def _from_gpt2_tensors(tensors: dict, n_head: Optional[int], kind: str) -> Checkpoint:
    sd = {k.removeprefix("transformer."): v for k, v in tensors.items()}
    if "wte.weight" not in sd or "wpe.weight" not in sd:
        raise ValueError("these weights are neither a gptviz checkpoint nor GPT-2 (no wte/wpe)")
    V, C = sd["wte.weight"].shape
    block = sd["wpe.weight"].shape[0]
    n_layer = 1 + max((int(k.split(".")[1]) for k in sd if k.startswith("h.")), default=-1)
    if n_layer < 1:
        raise ValueError("these GPT-2 weights have no layers (h.0...)")
    n_head = n_head or max(1, C // 64)
    tied = "lm_head.weight" not in tensors or torch.equal(tensors["lm_head.weight"], sd["wte.weight"])
    d_mlp = sd["h.0.mlp.c_fc.weight"].shape[1]
    cfg = ModelConfig(vocab_size=V, block_size=block, n_layer=n_layer, n_head=n_head, n_embd=C, d_mlp=d_mlp,
                      activation="gelu_tanh", tie_weights=tied)
    cfg.check_limits(batch=1, seq_len=1)
    model = GPT(cfg)
    _load_checked(model, gpt2_state_dict_to_gptviz(tensors, n_layer))
    tok = None
    if V == 50257:
        try:
            tok = TiktokenTokenizer("gpt2")
        except ValueError:
            tok = None
    return Checkpoint(model, tok, {"source": "Hugging Face GPT-2 weights"}, kind)


def _load_torch(data: bytes, n_head: Optional[int]) -> Checkpoint:
    try:
        obj = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise ValueError(
            "this .pt file holds Python objects other than tensors and plain data, so it was refused "
            "unread: loading it could run code. Save just the weights (e.g. nanoGPT's ckpt.pt, or a state_dict)."
        ) from exc
    except (RuntimeError, EOFError, zipfile.BadZipFile, ValueError, OSError, AttributeError, KeyError) as exc:
        raise ValueError("this is not a readable PyTorch checkpoint "
                         "(it may be truncated or of another format)") from exc
    if not isinstance(obj, dict):
        raise ValueError("a PyTorch checkpoint must hold a dict (a state_dict, or nanoGPT's ckpt with 'model')")
    if "model" in obj and "model_args" in obj:  # nanoGPT
        args = obj["model_args"]
        sd = {k.removeprefix("_orig_mod."): v for k, v in obj["model"].items()}
        try:
            cfg = ModelConfig(vocab_size=int(args["vocab_size"]), block_size=int(args["block_size"]),
                              n_layer=int(args["n_layer"]), n_head=int(args["n_head"]), n_embd=int(args["n_embd"]),
                              bias=bool(args.get("bias", True)), activation="gelu", tie_weights=True)
        except (KeyError, TypeError) as exc:
            raise ValueError(f"nanoGPT checkpoint's model_args are incomplete: {exc}") from None
        cfg.check_limits(batch=1, seq_len=1)
        model = GPT(cfg)
        sd = {k: v for k, v in sd.items() if not k.endswith(".attn.bias")}  # old causal-mask buffers
        _load_checked(model, sd)
        return Checkpoint(model, TiktokenTokenizer("gpt2") if cfg.vocab_size in (50257, 50304) and _gpt2_ok() else None,
                          {"source": "nanoGPT ckpt.pt", "iter_num": obj.get("iter_num")}, "nanogpt")
    tensors = {k: v for k, v in obj.items() if isinstance(v, torch.Tensor)}
    return _from_gpt2_tensors(tensors, n_head, "hf-gpt2")


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
