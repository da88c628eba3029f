"""``from_pretrained``: a Hugging Face model folder (GPT-2, Llama, Mistral, Qwen2, Qwen3, GPT-NeoX, Gemma 1, 2 and 3,
OLMo 2, Phi-3, Mixtral, Qwen2-MoE, GPT-OSS) as a gptviz GPT.

A folder holds ``config.json``, the weights as ``model.safetensors`` (or shards listed in
``model.safetensors.index.json``) and ``tokenizer.json``. Each family (``gptviz.model.hf_families``) maps its config
onto a ``ModelConfig`` (``n_head`` and every other size read from ``config.json``, never guessed) and its tensor
names onto gptviz's GPT-2 names; the model then traces like any other, with the family's own steps (grouped-query
attention's repeat, the gated MLP) added.

Loading is safe and checked before anything big is allocated:

- ``config.json`` is capped in size; every value a family reads is checked for its type and range (a ValueError
  naming the key), then every size goes through ``ModelConfig`` and ``check_limits``;
- ``tokenizer.json`` is read next: a token id with no row in the model's embedding is refused there and then;
- weights are read as safetensors only (no pickle), each shard's header first: every tensor the family needs
  must be there, floating point and of the shape the config says, before a single tensor is read;
- a shard's file name must be a plain name in the folder.

A name that is not a folder is looked up on the Hugging Face hub when ``huggingface_hub`` is installed and the
hub can be reached; offline, the error says so and what to do instead.

Gemma 1 is exact in float32 but held untied: its embedding table times √hidden_size is ``wte`` (what the residual
stream receives) and the table itself is ``lm_head`` (``gptviz.model.hf_families._gemma_convert``).
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Optional, Union

import torch

from ..config import ModelConfig
from ..text.hf_tokenizer import HFTokenizer
from .gpt import GPT
from .hf_families import in_config_terms
from .hf_gemma_olmo import REFUSED
from .hf_gpt2 import load_state
from .hf_registry import FAMILIES

MAX_CONFIG_BYTES = 1_000_000
MAX_INDEX_BYTES = 10_000_000
FLOAT_DTYPES = {"F32", "F16", "BF16", "F64"}
_REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}")


# --------------------------------------------------------------------------- files
def _read_json(path: Path, limit: int, what: str) -> dict:
    try:
        size = path.stat().st_size
    except OSError:
        raise ValueError(f"the folder has no {what}") from None
    if size > limit:
        raise ValueError(f"{what} is {size:,} bytes, over the limit of {limit:,}: refused unread")
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise ValueError(f"{what} is not readable JSON") from None
    if not isinstance(value, dict):
        raise ValueError(f"{what} must be a JSON object")
    return value


def model_config(folder: Union[str, Path]) -> tuple[ModelConfig, str]:
    """(the gptviz config, the family) a model folder's ``config.json`` describes, checked against the limits;
    nothing else is read."""
    d = _read_json(Path(folder) / "config.json", MAX_CONFIG_BYTES, "config.json")
    family = d.get("model_type")
    if isinstance(family, str) and family in REFUSED:  # a model type gptviz knows and does not open (Gemma 3's
        raise ValueError(REFUSED[family])  # image-and-text model): what to open instead
    if not isinstance(family, str) or family not in FAMILIES:
        shown = repr(family) if len(repr(family)) <= 60 else repr(family)[:57] + "…"
        raise ValueError(f"config.json's model_type={shown} is not a family gptviz opens (it opens "
                         f"{', '.join(sorted(FAMILIES))})")
    try:
        cfg = FAMILIES[family].config(d)
    except KeyError as exc:
        raise ValueError(f"config.json lacks {exc.args[0]!r}, which a {family} model needs") from None
    except (TypeError, OverflowError) as exc:  # every value is checked first: this is a net, never the way out
        raise ValueError(f"config.json has a value of the wrong type ({exc})") from None
    try:
        cfg.check_limits(batch=1, seq_len=1)
    except ValueError as exc:
        raise ValueError(in_config_terms(str(exc), FAMILIES[family].names)) from None
    return cfg, family


def _shards(folder: Path) -> list[Path]:
    single = folder / "model.safetensors"
    if single.is_file():
        return [single]
    index = folder / "model.safetensors.index.json"
    if not index.is_file():
        raise ValueError("the folder has no model.safetensors (nor model.safetensors.index.json): gptviz reads "
                         "safetensors weights only")
    weight_map = _read_json(index, MAX_INDEX_BYTES, "model.safetensors.index.json").get("weight_map")
    if not isinstance(weight_map, dict):
        raise ValueError("model.safetensors.index.json has no weight_map")
    names = sorted({str(v) for v in weight_map.values()})
    for n in names:
        if Path(n).name != n or n.startswith(".") or not n.endswith(".safetensors"):
            raise ValueError(f"model.safetensors.index.json names a shard {n[:80]!r} that is not a plain "
                             ".safetensors file name in the folder")
    return [folder / n for n in names]


def _tensor_table(shards: list[Path]) -> dict[str, tuple[Path, tuple, str]]:
    """name -> (shard, shape, dtype) from the shards' headers only."""
    from safetensors import safe_open

    table = {}
    for shard in shards:
        try:
            with safe_open(str(shard), framework="pt") as f:
                for name in f.keys():
                    sl = f.get_slice(name)
                    table[name] = (shard, tuple(sl.get_shape()), str(sl.get_dtype()))
        except Exception as exc:  # noqa: BLE001 - safetensors raises its own error types
            raise ValueError(f"{shard.name} is not a readable .safetensors file ({str(exc)[:120]})") from None
    return table


def resolve_folder(path_or_repo_id: Union[str, Path]) -> Path:
    """The local folder of a model: the path itself, or the hub's copy of a repo id ("owner/name")."""
    p = Path(path_or_repo_id)
    try:
        p = p.expanduser()
        is_dir = p.is_dir()
    except (OSError, RuntimeError):  # a name too long for the file system, or "~user" of no such user: no folder
        is_dir = False
    if is_dir:
        return p
    name = str(path_or_repo_id)
    if not _REPO_ID.fullmatch(name):
        raise ValueError(f"{name[:200]!r} is not a folder here, nor a Hugging Face repo id such as "
                         "'HuggingFaceTB/SmolLM2-135M'")
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise ValueError(f"{name!r} is not a folder here, and the huggingface_hub package that fetches models is "
                         "not installed: download the model folder and give its path") from None
    try:
        return Path(snapshot_download(name, allow_patterns=["config.json", "*.safetensors",
                                                            "model.safetensors.index.json", "tokenizer.json"]))
    except Exception as exc:  # noqa: BLE001 - offline, unknown repo, gated model …
        raise ValueError(f"{name!r} is not a folder here, and the Hugging Face hub can't provide it "
                         f"({type(exc).__name__}: {str(exc)[:160]}). Offline, download the model folder elsewhere "
                         "and give its path.") from None


# --------------------------------------------------------------------------- the loader
def load_folder(folder: Union[str, Path]) -> GPT:
    """The model in a Hugging Face model folder (config.json and safetensors weights), every tensor checked before
    it is read."""
    folder = Path(folder)
    cfg, family = model_config(folder)
    return _load(folder, cfg, family)


def _load(folder: Path, cfg: ModelConfig, family: str) -> GPT:
    fam = FAMILIES[family]
    table = _tensor_table(_shards(folder))
    if cfg.n_layer > len(table):  # each layer has tensors of its own: refused before a list of them is made
        raise ValueError(f"config.json's {fam.names.get('n_layer', 'n_layer')}={cfg.n_layer:,} asks for more layers "
                         f"than the weights hold tensors ({len(table):,})")
    stored = {k: k for k in table}  # the name a tensor is stored under
    if family == "gpt2":  # GPT-2 files name tensors with or without the "transformer." prefix
        stored = {k.removeprefix("transformer."): k for k in table}
        table = {k.removeprefix("transformer."): v for k, v in table.items()}
    want = fam.shapes(cfg)
    missing = sorted(set(want) - set(table))
    if missing:
        raise ValueError(f"the weights lack {', '.join(missing[:4])}{' …' if len(missing) > 4 else ''}, which this "
                         f"{family} config.json asks for")
    for name, shape in want.items():
        _, have, dtype = table[name]
        if dtype not in FLOAT_DTYPES:
            raise ValueError(f"{name} holds {dtype} values: weights must be floating point")
        if have != shape:
            raise ValueError(f"{name} has shape {have}, but config.json asks for {shape}")
    from safetensors import safe_open

    handles: dict[Path, safe_open] = {}

    def get(name: str) -> torch.Tensor:
        shard = table[name][0]
        if shard not in handles:
            handles[shard] = safe_open(str(shard), framework="pt")
        return handles[shard].get_tensor(stored[name]).float()

    sd = fam.convert(get, cfg)
    model = GPT(cfg)
    load_state(model, sd)
    model.family_note = fam.note(cfg) if fam.note else None  # set before the model is shared, never after
    return model


def folder_tokenizer(folder: Union[str, Path], cfg: ModelConfig) -> Optional[HFTokenizer]:
    """The folder's ``tokenizer.json`` (None if it has none), refused when one of its token ids (the largest in its
    vocabulary, or one its post-processor adds) has no row in the model's embedding: checked when the folder opens,
    not when that token first turns up in a text."""
    tok_file = Path(folder) / "tokenizer.json"
    if not tok_file.is_file():
        return None
    tok = HFTokenizer.from_file(tok_file, name=Path(folder).name)
    if tok.vocab_size > cfg.vocab_size:
        top = tok.vocab_size - 1
        raise ValueError(f"tokenizer.json has token id {top:,} ({tok.token_str(top)!r}), outside the model's "
                         f"vocabulary: config.json's vocab_size={cfg.vocab_size:,} gives the embedding rows "
                         f"0 to {cfg.vocab_size - 1:,} only")
    return tok


def from_pretrained(path_or_repo_id: Union[str, Path]) -> tuple[GPT, Optional[HFTokenizer]]:
    """``(model, tokenizer)`` for a Hugging Face model folder (or a hub repo id, where there is a network): GPT-2,
    Llama, Mistral, Qwen2, Qwen3, GPT-NeoX, Gemma 1, 2 or 3 (text), OLMo 2, Phi-3, Mixtral, Qwen2-MoE or GPT-OSS
    (``hf_registry.FAMILY_TABLE``). The tokenizer is the folder's ``tokenizer.json`` read by ``tokenizers`` (None if
    the folder has none). Every failure is a ValueError that says what to change; config.json and tokenizer.json
    are checked before a weight is read."""
    folder = resolve_folder(path_or_repo_id)
    cfg, family = model_config(folder)
    tok = folder_tokenizer(folder, cfg)
    return _load(folder, cfg, family), tok


UPLOAD_FILES = ("config.json", "tokenizer.json", "model.safetensors.index.json")  # and any *.safetensors
MAX_UPLOAD_BYTES = 1_200_000_000


def from_uploaded_files(files: list[tuple[str, bytes]]) -> tuple[GPT, Optional[HFTokenizer]]:
    """``from_pretrained`` on a model folder sent as files (a browser's folder upload): ``(name, bytes)`` pairs.

    Only the files a model folder needs are kept, by their base name (``config.json``, ``tokenizer.json``, the
    safetensors index and ``*.safetensors``); anything else (a README, a pickled ``.bin``) is left out unread, and
    a path in a name is never followed. The kept files, at most ``MAX_UPLOAD_BYTES`` in all, are written to a
    temporary folder that is removed afterwards."""
    import tempfile

    kept: dict[str, bytes] = {}
    for name, data in files:
        base = Path(str(name).replace("\\", "/")).name
        if (base in UPLOAD_FILES or base.endswith(".safetensors")) and not base.startswith("."):
            kept[base] = data
    if "config.json" not in kept:
        raise ValueError("the folder has no config.json: open the model's folder as Hugging Face saves it "
                         "(config.json, model.safetensors, tokenizer.json)")
    total = sum(len(d) for d in kept.values())
    if total > MAX_UPLOAD_BYTES:
        raise ValueError(f"the folder's model files come to {total:,} bytes, over the limit of {MAX_UPLOAD_BYTES:,}")
    with tempfile.TemporaryDirectory(prefix="gptviz-folder-") as tmp:
        for base, data in kept.items():
            (Path(tmp) / base).write_bytes(data)
        return from_pretrained(Path(tmp))

