"""Sparse autoencoders in the format researchers share them in: a SAELens folder.

A SAELens folder (what ``SAE.save_model`` writes, and what SAELens's ``load_from_disk`` and Neuronpedia read) holds
``cfg.json`` and ``sae_weights.safetensors`` with ``W_enc`` (d_in, d_sae), ``b_enc`` (d_sae), ``W_dec`` (d_sae,
d_in), ``b_dec`` (d_in), and ``threshold`` (d_sae) for a JumpReLU SAE. The config names the ``architecture``
("standard": ReLU; "topk" with ``k``; "jumprelu"), ``d_in``, ``d_sae``, ``apply_b_dec_to_input`` and the hook it
reads (``metadata.hook_name`` in SAELens 6, or ``hook_name`` at the top in earlier versions, whose TopK SAEs were
"standard" with ``activation_fn_str`` "topk" and ``k`` in ``activation_fn_kwargs``). As SAELens defines them,
with ``x' = x - b_dec`` when ``apply_b_dec_to_input`` (else ``x``) and ``pre = x' W_enc + b_enc``:

- standard: ``f = ReLU(pre)``; topk: the ``k`` largest of ``pre``, through a ReLU, the rest 0;
- jumprelu: ``f = ReLU(pre) · [pre > threshold]``;
- ``x_hat = f W_dec + b_dec``.

gptviz's ``SparseAutoencoder`` computes exactly these (kinds "relu", "topk", "jumprelu", and ``b_dec_in``). Not
read: ``normalize_activations`` other than "none" (the input rescaled at run time: refused, with the reason),
``reshape_activations`` ("hook_z": refused), and the other architectures (gated, batchtopk, transcoders): refused.
Every value of the config and every tensor's shape in the safetensors header is checked before anything is
allocated.

``load_sae(path)`` opens a gptviz SAE file or a SAELens folder, and also a transcoder: a gptviz transcoder file or a
folder in circuit-tracer's format (``gptviz.interp.transcoder_formats``). ``save_saelens(sae, folder)`` writes a
SAELens folder.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional, Union

import safetensors.torch
import torch

from .sae import MAX_FEATURES, MAX_FILE_BYTES, SparseAutoencoder, fill_weights
from .sae import load_sae as load_gptviz_sae
from .transcoder import FORMAT as TRANSCODER_FORMAT
from .transcoder import Transcoder, load_transcoder
from .transcoder_formats import is_circuit_tracer_folder, load_circuit_tracer

CFG_NAME, WEIGHTS_NAME = "cfg.json", "sae_weights.safetensors"
MAX_CFG_BYTES = 65_536
ARCHITECTURES = {"standard": "relu", "topk": "topk", "jumprelu": "jumprelu"}
DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}


def is_saelens_folder(path: Union[str, Path]) -> bool:
    p = Path(path)
    return p.is_dir() and (p / CFG_NAME).is_file() and (p / WEIGHTS_NAME).is_file()


def load_sae(path: Union[str, Path]) -> Union[SparseAutoencoder, Transcoder]:
    """A gptviz SAE file (``SparseAutoencoder.save``), a SAELens folder (``cfg.json`` and
    ``sae_weights.safetensors``), a gptviz transcoder file (``Transcoder.save``) or a circuit-tracer transcoder
    folder (``config.yaml``, ``W_enc_{i}``/``W_dec_{i}.safetensors``). ValueError, naming what is wrong, for anything
    else."""
    p = Path(path)
    if p.is_dir():
        if is_circuit_tracer_folder(p):
            return load_circuit_tracer(p)
        if not is_saelens_folder(p):
            raise ValueError(f"{p.name} is a folder without {CFG_NAME} and {WEIGHTS_NAME} (a SAELens SAE) or "
                             "config.yaml and W_enc_0.safetensors (a circuit-tracer transcoder)")
        return load_saelens(p)
    if _file_format(p) == TRANSCODER_FORMAT:
        return load_transcoder(p)
    return load_gptviz_sae(p)


def _file_format(p: Path) -> Optional[str]:
    """The ``format`` a safetensors file's metadata names (its header only is read), or None."""
    from safetensors import safe_open

    try:
        with safe_open(str(p), framework="pt") as fh:
            return (fh.metadata() or {}).get("format")
    except Exception:  # noqa: BLE001 - not a readable safetensors file: the SAE loader says why
        return None


def _whole(cfg: dict, key: str, low: int, high: int) -> int:
    v = cfg.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high:
        raise ValueError(f"{CFG_NAME}: {key}={v!r} must be a whole number from {low:,} to {high:,}")
    return v


def _obj(v: Any) -> dict[str, Any]:
    """``v`` if it is a JSON object, else an empty one."""
    return v if isinstance(v, dict) else {}


def read_config(folder: Path) -> dict[str, Any]:
    """cfg.json read and checked (size, types, ranges, what gptviz computes): the SAE's kind, sizes and hook."""
    f = folder / CFG_NAME
    if f.stat().st_size > MAX_CFG_BYTES:
        raise ValueError(f"{CFG_NAME} is {f.stat().st_size:,} bytes: a SAELens config is at most {MAX_CFG_BYTES:,}")
    try:
        cfg = json.loads(f.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise ValueError(f"{CFG_NAME} is not readable JSON ({type(exc).__name__})") from None
    if not isinstance(cfg, dict):
        raise ValueError(f"{CFG_NAME} must hold a JSON object")
    arch = cfg.get("architecture", "standard")
    act = cfg.get("activation_fn_str", "relu")  # SAELens before 6: a TopK SAE was "standard" with a topk activation
    if arch == "standard" and act == "topk":
        arch = "topk"
    elif arch == "standard" and act != "relu":
        raise ValueError(f"{CFG_NAME}: activation_fn_str={act!r}: gptviz computes a standard SAE's ReLU (or topk)")
    if arch not in ARCHITECTURES:
        raise ValueError(f"{CFG_NAME}: architecture={arch!r} is not one gptviz computes: choose one of "
                         f"{', '.join(ARCHITECTURES)}")
    d_in, d_sae = _whole(cfg, "d_in", 1, 65_536), _whole(cfg, "d_sae", 1, MAX_FEATURES)
    if cfg.get("normalize_activations", "none") != "none":
        raise ValueError(f"{CFG_NAME}: normalize_activations={cfg.get('normalize_activations')!r}: gptviz reads SAEs "
                         "whose input is used as it is (\"none\"); fold the normalisation into the weights first")
    if cfg.get("reshape_activations", "none") != "none":
        raise ValueError(f"{CFG_NAME}: reshape_activations={cfg.get('reshape_activations')!r}: gptviz reads SAEs on a "
                         "hook's whole vector (\"none\"), not split into heads")
    b_dec_in = cfg.get("apply_b_dec_to_input", True)
    if not isinstance(b_dec_in, bool):
        raise ValueError(f"{CFG_NAME}: apply_b_dec_to_input={b_dec_in!r} must be true or false")
    meta = _obj(cfg.get("metadata")) if isinstance(cfg.get("metadata"), dict) else _obj(cfg.get("meta"))
    hook = meta.get("hook_name", cfg.get("hook_name"))
    if not isinstance(hook, str) or not 0 < len(hook) <= 200:
        raise ValueError(f"{CFG_NAME} names no hook (metadata.hook_name or hook_name)")
    k = None
    if arch == "topk":
        kwargs = _obj(cfg.get("activation_fn_kwargs"))
        k = cfg.get("k", kwargs.get("k"))
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= d_sae:
            raise ValueError(f"{CFG_NAME}: a TopK SAE needs a whole k from 1 to d_sae={d_sae}, not {k!r}")
    model = meta.get("model_name", cfg.get("model_name"))
    return {"kind": ARCHITECTURES[arch], "d_in": d_in, "d_sae": d_sae, "hook": hook, "k": k, "b_dec_in": b_dec_in,
            "model": model if isinstance(model, str) else None}


def load_saelens(folder: Union[str, Path]) -> SparseAutoencoder:
    """The SAE in a SAELens folder, float32, for use (eval mode, no gradients)."""
    folder = Path(folder)
    c = read_config(folder)
    wfile = folder / WEIGHTS_NAME
    size = wfile.stat().st_size
    if size > MAX_FILE_BYTES:
        raise ValueError(f"{WEIGHTS_NAME} is {size:,} bytes: an SAE file is at most {MAX_FILE_BYTES:,}")
    d, n = c["d_in"], c["d_sae"]
    want = {"W_enc": (d, n), "b_enc": (n,), "W_dec": (n, d), "b_dec": (d,)}
    if c["kind"] == "jumprelu":
        want["threshold"] = (n,)
    from safetensors import safe_open

    try:
        with safe_open(str(wfile), framework="pt") as fh:
            got = {name: (tuple(fh.get_slice(name).get_shape()), fh.get_slice(name).get_dtype())
                   for name in fh.keys() if name in want}
    except Exception as exc:  # noqa: BLE001 - safetensors raises its own error kinds for a damaged file
        raise ValueError(f"{WEIGHTS_NAME} is not a readable safetensors file ({exc})") from None
    for name, shape in want.items():  # before anything is allocated: a small file may claim huge tensors
        if name not in got:
            raise ValueError(f"{WEIGHTS_NAME} has no {name}")
        if got[name][0] != shape:
            raise ValueError(f"{WEIGHTS_NAME}: {name} has shape {got[name][0]}, not {shape} (from {CFG_NAME})")
        if got[name][1] not in DTYPES:
            raise ValueError(f"{WEIGHTS_NAME}: {name} is {got[name][1]}; gptviz reads F32, F16 or BF16")
    meta = {"format_read": "saelens", "source": folder.name}
    if c["model"]:
        meta["model"] = c["model"]
    sae = SparseAutoencoder(d, n, c["hook"], c["kind"], c["k"], meta, b_dec_in=c["b_dec_in"])
    return fill_weights(sae, wfile, want)


def saelens_config(sae: SparseAutoencoder, model_name: str = "") -> dict[str, Any]:
    """The cfg.json SAELens 6 writes for this SAE (its inference config: architecture, sizes, metadata)."""
    arch = {v: k for k, v in ARCHITECTURES.items()}[sae.kind]
    cfg: dict[str, Any] = {"architecture": arch, "d_in": sae.d_model, "d_sae": sae.n_features, "dtype": "float32",
                           "device": "cpu", "apply_b_dec_to_input": sae.b_dec_in, "normalize_activations": "none",
                           "reshape_activations": "none",
                           "metadata": {"model_name": model_name or str(sae.meta.get("model", "")),
                                        "hook_name": sae.hook, "hook_layer": _layer(sae.hook)}}
    if sae.kind == "topk":
        cfg["k"] = sae.k
    return cfg


def _layer(hook: str) -> Any:
    parts = hook.split(".")
    return int(parts[1]) if len(parts) > 2 and parts[0] == "blocks" and parts[1].isdigit() else None


def save_saelens(sae: SparseAutoencoder, folder: Union[str, Path], model_name: str = "") -> Path:
    """Write ``sae`` as a SAELens folder (float32 weights, cfg.json); returns the folder."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    names = ["W_enc", "b_enc", "W_dec", "b_dec"] + (["threshold"] if sae.kind == "jumprelu" else [])
    tensors = {n: getattr(sae, n).detach().float().contiguous() for n in names}
    safetensors.torch.save_file(tensors, str(folder / WEIGHTS_NAME))
    (folder / CFG_NAME).write_text(json.dumps(saelens_config(sae, model_name), indent=2), encoding="utf-8")
    return folder
