"""Transcoders: a sparse stand-in for a model's MLPs, one layer at a time (per-layer, PLT) or all at once
(cross-layer, CLT), as the attribution graphs of Ameisen et al. 2025 ("Circuit Tracing") replace them.

A transcoder reads what an MLP reads and writes what it writes. Layer l's features are

    f_l = TopK(ReLU(x_l @ W_enc[l] + b_enc[l]))             # x_l: the MLP's input (blocks.l.ln2.hook_out), (..., F)

and the output of the MLP of layer m is replaced by

    y_hat_m = b_dec[m] + sum over l <= m of  f_l @ W_dec[l][:, m - l]    # (..., d_model)

A cross-layer transcoder's layer-l features write to every later MLP's output (``W_dec[l]`` is
``(F, n_layer - l, d_model)``); a per-layer one's write only to their own (``W_dec[l]`` is ``(F, 1, d_model)``).
The weights are circuit-tracer's (``W_enc_{l}``, ``b_enc_{l}``, ``W_dec_{l}``, ``b_dec_{l}``), derived from its
description, not copied. Where gptviz differs: the input is the MLP's own input after its norm, with the
norm's weight and bias applied (``ln2.hook_out``), and the sparsity rule is TopK (Gao et al. 2024) rather than
JumpReLU.

The sparsity rule (``activation``) is ``topk`` (the shipped transcoders), ``relu`` (``f = ReLU(pre)``) or
``jumprelu`` with a threshold per feature and layer, as circuit-tracer defines it: ``f = pre · [pre > threshold]``
(so a negative threshold lets a negative score through, as there). The last two are what circuit-tracer's
cross-layer transcoders use; ``gptviz.interp.transcoder_formats`` reads and writes that format.

The file is safetensors (float16 or float32 weights) with metadata: ``format``, ``n_layer``, ``d_model``,
``n_features`` (per layer), ``activation`` (absent: ``topk``), ``k`` (TopK only), ``cross_layer``, and whatever
the trainer adds (the model it was trained on, the command, the figures: JSON); a JumpReLU transcoder also holds
``threshold_{l}``. Its tensors are named as circuit-tracer's, but ``W_enc_{l}`` is ``(d_model, F)`` here and all
of them are in one file. A shipped model ``checkpoints/NAME.safetensors`` has its transcoders at
``checkpoints/NAME.transcoder.safetensors`` (per-layer) and ``checkpoints/NAME.clt.transcoder.safetensors``.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional, Sequence, Union

import safetensors.torch
import torch
import torch.nn as nn

from ..model.hook_names import act_name
from ..paths import CHECKPOINTS
from .sae import _meta_value  # a metadata value read back as JSON where it is JSON, as the SAE's file does

FORMAT = "gptviz-transcoder-1"
MAX_FILE_BYTES = 64_000_000  # a transcoder file bigger than this is refused before it is read
MAX_FEATURES = 65_536
MAX_LAYERS = 128
MAX_D_MODEL = 65_536
ACTIVATIONS = ("topk", "relu", "jumprelu")


def input_hook(layer: int) -> str:
    """Where layer ``layer``'s features read: the MLP's input, after its norm."""
    return act_name("out", layer, "ln2")


def output_hook(layer: int) -> str:
    """What layer ``layer``'s MLP writes, and the transcoder replaces."""
    return act_name("mlp_out", layer)


def _whole(name: str, value, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{name}={value!r} must be a whole number from {low} to {high}")
    return value


class Transcoder(nn.Module):
    """A transcoder's weights and its maps (see the module's docstring)."""

    def __init__(self, n_layer: int, d_model: int, n_features: int, k: Optional[int], cross_layer: bool,
                 meta: Optional[dict] = None, activation: str = "topk"):
        super().__init__()
        self.n_layer = _whole("n_layer", n_layer, 1, MAX_LAYERS)
        self.d_model = _whole("d_model", d_model, 1, MAX_D_MODEL)
        self.n_features = _whole("n_features", n_features, 1, MAX_FEATURES)
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation={activation!r}: choose one of {', '.join(ACTIVATIONS)}")
        self.activation = activation
        self.k: Optional[int] = _whole("k", k, 1, n_features) if activation == "topk" else None
        self.cross_layer = bool(cross_layer)
        self.meta = dict(meta or {})
        L, d, F = self.n_layer, self.d_model, self.n_features
        self.W_enc = nn.ParameterList([nn.Parameter(torch.zeros(d, F)) for _ in range(L)])
        self.b_enc = nn.ParameterList([nn.Parameter(torch.zeros(F)) for _ in range(L)])
        self.W_dec = nn.ParameterList([nn.Parameter(torch.zeros(F, self.reach(layer), d)) for layer in range(L)])
        self.b_dec = nn.ParameterList([nn.Parameter(torch.zeros(d)) for _ in range(L)])
        self.threshold = nn.ParameterList([nn.Parameter(torch.zeros(F)) for _ in range(L)]
                                          if activation == "jumprelu" else [])

    def __repr__(self) -> str:
        kind = "cross-layer" if self.cross_layer else "per-layer"
        rule = f"k={self.k}" if self.activation == "topk" else f"activation={self.activation!r}"
        return (f"Transcoder({kind}, n_layer={self.n_layer}, d_model={self.d_model}, n_features={self.n_features}, "
                f"{rule})")

    def tensor_names(self) -> tuple[str, ...]:
        """The weights each layer has: the encoder's and decoder's, and a JumpReLU's thresholds."""
        return ("W_enc", "b_enc", "W_dec", "b_dec") + (("threshold",) if self.activation == "jumprelu" else ())

    def reach(self, layer: int) -> int:
        """How many MLP outputs layer ``layer``'s features write: its own and, cross-layer, every later one."""
        return self.n_layer - layer if self.cross_layer else 1

    def _layer(self, layer) -> int:
        if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < self.n_layer:
            raise ValueError(f"there is no layer {layer!r}: this transcoder has layers 0 to {self.n_layer - 1}")
        return layer

    # ------------------------------------------------------------------ the maps
    def pre_acts(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        """``x @ W_enc[layer] + b_enc[layer]``: every feature's score before the sparsity rule, ``(..., F)``."""
        layer = self._layer(layer)
        x = torch.as_tensor(x)
        if x.shape[-1] != self.d_model:
            raise ValueError(f"this transcoder reads vectors of {self.d_model} numbers, not {x.shape[-1]}")
        W = self.W_enc[layer]
        return x.to(W.dtype) @ W + self.b_enc[layer]

    def encode(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        """Layer ``layer``'s features ``(..., F)`` of the MLP inputs ``x`` ``(..., d_model)``. TopK: the ``k``
        largest pre-activations, each through ReLU, and 0 elsewhere; ReLU: every pre-activation through ReLU;
        JumpReLU: each pre-activation where it is above its feature's threshold, and 0 elsewhere."""
        pre = self.pre_acts(layer, x)
        if self.activation == "relu":
            return torch.relu(pre)
        if self.activation == "jumprelu":
            return pre * (pre > self.threshold[layer])
        assert self.k is not None  # a TopK transcoder always has its k
        vals, idx = pre.topk(self.k, dim=-1)
        return torch.zeros_like(pre).scatter(-1, idx, torch.relu(vals))

    def decode(self, layer: int, features: Sequence[Optional[torch.Tensor]]) -> torch.Tensor:
        """The stand-in for MLP ``layer``'s output from the features of every layer that writes to it:
        ``features[l]`` for ``l <= layer`` (``(..., F)``; None counts as all zero). A per-layer transcoder reads only
        ``features[layer]``."""
        layer = self._layer(layer)
        out = self.b_dec[layer]
        first = 0 if self.cross_layer else layer
        for source in range(first, layer + 1):
            f = features[source] if source < len(features) else None
            if f is None:
                continue
            f = torch.as_tensor(f)
            if f.shape[-1] != self.n_features:
                raise ValueError(f"this transcoder has {self.n_features} features a layer, not {f.shape[-1]}")
            out = out + f.to(self.b_dec[layer].dtype) @ self.W_dec[source][:, layer - source]
        return out

    def decoder_row(self, layer: int, feature: int) -> torch.Tensor:
        """``(reach, d_model)``: what feature ``feature`` of layer ``layer`` writes to each MLP output it reaches."""
        layer = self._layer(layer)
        if isinstance(feature, bool) or not isinstance(feature, int) or not 0 <= feature < self.n_features:
            raise ValueError(f"there is no feature {feature!r}: each layer has {self.n_features} (0 to "
                             f"{self.n_features - 1})")
        return self.W_dec[layer][feature].detach()

    def normalise_decoder(self) -> None:
        """Give every feature's whole decoder (all the outputs it reaches together) unit norm."""
        with torch.no_grad():
            for W in self.W_dec:
                W.div_(W.pow(2).sum((1, 2), keepdim=True).sqrt().clamp(min=1e-8))

    # ------------------------------------------------------------------ in place of the MLPs
    def replacement_edits(self, layers: Optional[Sequence[int]] = None,
                          features: Optional[dict[int, torch.Tensor]] = None) -> dict:
        """``trace``'s ``edits`` that put the transcoder in place of the MLPs of ``layers`` (default: every layer).
        Each MLP input is encoded as the pass reaches it, and each replaced MLP output is the decoder's sum over the
        layers that write to it. ``features``, if given, is filled with each layer's features ``(B, T, F)``."""
        chosen = sorted({self._layer(int(v)) for v in (range(self.n_layer) if layers is None else layers)})
        got: dict[int, torch.Tensor] = {} if features is None else features
        needed = sorted({s for m in chosen for s in (range(m + 1) if self.cross_layer else (m,))})

        def reader(layer):
            def read(t):
                got[layer] = self.encode(layer, t)
                return t
            return read

        def writer(layer):
            def write(t):
                return self.decode(layer, [got.get(s) for s in range(layer + 1)]).to(t.dtype)
            return write

        edits: dict = {input_hook(layer): reader(layer) for layer in needed}
        edits.update({output_hook(layer): writer(layer) for layer in chosen})
        return edits

    # ------------------------------------------------------------------ the file
    def header(self) -> dict[str, str]:
        out = {"format": FORMAT, "n_layer": str(self.n_layer), "d_model": str(self.d_model),
               "n_features": str(self.n_features), "activation": self.activation,
               "cross_layer": "1" if self.cross_layer else "0"}
        if self.k is not None:
            out["k"] = str(self.k)
        for key, value in self.meta.items():
            out[key] = value if isinstance(value, str) else json.dumps(value)
        return out

    def save(self, path: Union[str, Path], dtype: torch.dtype = torch.float16) -> None:
        """Write the weights (as ``dtype``) and the metadata. Figures should be measured on what is written:
        read it back with ``load_transcoder``."""
        tensors = {}
        for layer in range(self.n_layer):
            for name in self.tensor_names():
                tensors[f"{name}_{layer}"] = getattr(self, name)[layer].detach().to(dtype).contiguous()
        safetensors.torch.save_file(tensors, str(path), metadata=self.header())


def _header_int(header: dict, key: str, low: int, high: int) -> int:
    raw = header.get(key)
    try:
        value = int(raw) if raw is not None and str(raw).strip().isdigit() else None
    except ValueError:
        value = None
    if value is None or not low <= value <= high:
        raise ValueError(f"the transcoder's header says {key}={raw!r}: it must be a whole number from {low} to "
                         f"{high}")
    return value


def load_transcoder(path: Union[str, Path]) -> Transcoder:
    """The transcoder in a safetensors file written by ``Transcoder.save`` (weights as float32, for use in eval).
    Every header value and every tensor's shape is checked before anything is allocated."""
    from safetensors import safe_open

    p = Path(path)
    if not p.is_file():
        raise ValueError(f"there is no transcoder file at {p.name}")
    size = p.stat().st_size
    if size > MAX_FILE_BYTES:
        raise ValueError(f"{p.name} is {size:,} bytes: a transcoder file may be at most {MAX_FILE_BYTES:,}")
    try:
        with safe_open(str(p), framework="pt") as fh:
            header = dict(fh.metadata() or {})
            shapes = {key: tuple(fh.get_slice(key).get_shape()) for key in fh.keys()}
    except Exception as exc:  # noqa: BLE001 - safetensors raises its own error kinds for a damaged file
        raise ValueError(f"{p.name} is not a readable safetensors file ({exc})") from None
    if header.get("format") != FORMAT:
        raise ValueError(f"{p.name} is not a gptviz transcoder (its format is {header.get('format')!r}, not "
                         f"{FORMAT!r})")
    L = _header_int(header, "n_layer", 1, MAX_LAYERS)
    d = _header_int(header, "d_model", 1, MAX_D_MODEL)
    F = _header_int(header, "n_features", 1, MAX_FEATURES)
    activation = header.get("activation", "topk")
    if activation not in ACTIVATIONS:
        raise ValueError(f"the transcoder's header says activation={activation!r}: it must be one of "
                         f"{', '.join(ACTIVATIONS)}")
    k = _header_int(header, "k", 1, F) if activation == "topk" else None
    if header.get("cross_layer") not in ("0", "1"):
        raise ValueError(f"the transcoder's header says cross_layer={header.get('cross_layer')!r}: it must be 0 or 1")
    cross = header["cross_layer"] == "1"
    want = {}
    for layer in range(L):
        reach = L - layer if cross else 1
        want.update({f"W_enc_{layer}": (d, F), f"b_enc_{layer}": (F,), f"W_dec_{layer}": (F, reach, d),
                     f"b_dec_{layer}": (d,)})
        if activation == "jumprelu":
            want[f"threshold_{layer}"] = (F,)
    if set(shapes) != set(want):
        missing, extra = sorted(set(want) - set(shapes)), sorted(set(shapes) - set(want))
        raise ValueError(f"{p.name} does not hold the tensors its header names (missing: {missing[:4]}, "
                         f"unexpected: {extra[:4]})")
    for key, shape in want.items():
        if shapes[key] != shape:
            raise ValueError(f"{p.name}: {key} is {list(shapes[key])}, not {list(shape)} as its header says")
    meta = {key: _meta_value(v) for key, v in header.items()
            if key not in ("format", "n_layer", "d_model", "n_features", "activation", "k", "cross_layer")}
    tc = Transcoder(L, d, F, k, cross, meta, activation=activation)
    weights = safetensors.torch.load_file(str(p))
    with torch.no_grad():
        for layer in range(L):
            for name in tc.tensor_names():
                getattr(tc, name)[layer].copy_(weights[f"{name}_{layer}"].float())
    tc.eval()
    tc.requires_grad_(False)
    return tc


def transcoder_path(model_name: str, cross_layer: bool, folder: Optional[Path] = None) -> Path:
    """Where a shipped model's transcoder lives: ``NAME.transcoder.safetensors`` (per-layer) or
    ``NAME.clt.transcoder.safetensors`` (cross-layer)."""
    return Path(folder or CHECKPOINTS) / f"{model_name}.{'clt.' if cross_layer else ''}transcoder.safetensors"


def snippets_path(model_name: str, cross_layer: bool, folder: Optional[Path] = None) -> Path:
    """Where a shipped transcoder's top held-out snippets live, beside it (``…transcoder.snippets.safetensors``)."""
    path = transcoder_path(model_name, cross_layer, folder)
    return path.with_name(path.name.replace(".transcoder.safetensors", ".transcoder.snippets.safetensors"))


def save_snippets(path: Union[str, Path], per_layer: list[dict], meta: Optional[dict] = None) -> None:
    """Each layer's snippets (``gptviz.training.sae.top_snippets``'s dict) under keys ``L{layer}.{name}``."""
    tensors = {f"L{layer}.{name}": t.contiguous() for layer, snips in enumerate(per_layer) for name, t in snips.items()}
    safetensors.torch.save_file(tensors, str(path), metadata={k: json.dumps(v) for k, v in (meta or {}).items()})


def load_snippets(path: Union[str, Path], n_layer: int) -> tuple[list[dict], dict]:
    """``(per_layer, meta)`` of a ``save_snippets`` file: per layer a dict of tensors (ids, acts, peak, where,
    density). A file bigger than ``MAX_FILE_BYTES`` or missing a layer is refused."""
    from safetensors import safe_open

    p = Path(path)
    if p.stat().st_size > MAX_FILE_BYTES:
        raise ValueError(f"{p.name} is {p.stat().st_size:,} bytes: a snippets file may be at most {MAX_FILE_BYTES:,}")
    with safe_open(str(p), framework="pt") as fh:
        meta = {k: _meta_value(v) for k, v in (fh.metadata() or {}).items()}
        per_layer: list[dict] = [{} for _ in range(n_layer)]
        for key in fh.keys():
            head, _, name = key.partition(".")
            layer = int(head[1:]) if head[:1] == "L" and head[1:].isdigit() else -1
            if 0 <= layer < n_layer:
                per_layer[layer][name] = fh.get_tensor(key)
    if any(not d for d in per_layer):
        raise ValueError(f"{p.name} does not hold snippets for every one of the {n_layer} layers")
    return per_layer, meta
