"""Transcoders in the format circuit-tracer reads, and a TopK transcoder turned into one circuit-tracer computes.

circuit-tracer (Hanna, Piotrowski, Lindsey and Ameisen, 2025) keeps a cross-layer transcoder as a folder: a
``config.yaml`` (``model_kind: cross_layer_transcoder``, ``model_name``, ``feature_input_hook``,
``feature_output_hook``) and, for every layer ``i`` of ``n_layer``,

- ``W_enc_{i}.safetensors``: ``W_enc_{i}`` ``(F, d_model)`` (a feature per row), ``b_enc_{i}`` ``(F,)``,
  ``b_dec_{i}`` ``(d_model,)`` and, for JumpReLU, ``threshold_{i}`` ``(F,)``;
- ``W_dec_{i}.safetensors``: ``W_dec_{i}`` ``(F, n_layer - i, d_model)``, what each feature writes to its own and
  every later MLP's output.

Its features are ReLU (no thresholds) or JumpReLU (``f = pre · [pre > threshold]``); that is the layout of its
``CrossLayerTranscoder.to_safetensors`` and ``load_clt`` (read in its source, not copied). gptviz's ``Transcoder``
holds the same numbers with ``W_enc`` transposed, ``(d_model, F)``.

Where gptviz differs and what it refuses:
- The hooks are TransformerLens's names relative to a block. gptviz's features read the MLP's input after its norm
  (``ln2.hook_normalized``, with the norm's weight applied as circuit-tracer's unfolded models have it) and write
  ``hook_mlp_out``; a folder whose features read elsewhere (``hook_resid_mid``, before the norm) is refused, as its
  features are not functions of what gptviz's transcoder reads.
- A per-layer transcoder is written as a cross-layer one whose decoders to later layers are zero (the same
  numbers: circuit-tracer gives them no edges), and a folder read back whose later decoders are all zero is a
  per-layer transcoder again. ``model_kind: transcoder_set`` folders are refused.
- Skip connections (``W_skip``) and any other tensor are refused, naming it: gptviz computes no skip term.
- circuit-tracer has no TopK rule, so the shipped TopK transcoders cannot be written as they are.
  ``as_jumprelu`` turns one into a JumpReLU transcoder with a threshold per feature chosen on the training plays:
  each feature fires above its threshold as often as it fired under TopK (``matched_thresholds``). That is a
  different transcoder, with its own figures; ``python -m gptviz.export_sae`` measures it on the held-out plays,
  and gptviz opens the folder it writes, so both tools then compute the same features.

Every config value, file name and tensor shape is checked before any weight is read.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Optional, Union

import torch

from .transcoder import MAX_D_MODEL, MAX_FEATURES, MAX_FILE_BYTES, MAX_LAYERS, Transcoder

CONFIG_NAME = "config.yaml"
MAX_CONFIG_BYTES = 65_536
INPUT_HOOK = "ln2.hook_normalized"  # TransformerLens's name of gptviz's input_hook(layer): the MLP's normalised input
OUTPUT_HOOKS = ("hook_mlp_out", "mlp.hook_out")  # both name an MLP's output in TransformerLens
MODEL_KIND = "cross_layer_transcoder"
DTYPES = ("F32", "F16", "BF16")
_ENC = re.compile(r"^W_enc_(\d+)\.safetensors$")


def is_circuit_tracer_folder(path: Union[str, Path]) -> bool:
    p = Path(path)
    return p.is_dir() and (p / CONFIG_NAME).is_file() and (p / "W_enc_0.safetensors").is_file()


def read_config(folder: Path) -> dict[str, Any]:
    """config.yaml read and checked: what gptviz computes (a cross-layer transcoder on the MLPs' normalised inputs)."""
    import yaml  # type: ignore[import-untyped]  # PyYAML ships no type hints

    f = folder / CONFIG_NAME
    if f.stat().st_size > MAX_CONFIG_BYTES:
        raise ValueError(f"{CONFIG_NAME} is {f.stat().st_size:,} bytes: a transcoder's config is at most "
                         f"{MAX_CONFIG_BYTES:,}")
    try:
        cfg = yaml.safe_load(f.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError, RecursionError) as exc:
        raise ValueError(f"{CONFIG_NAME} is not readable YAML ({type(exc).__name__})") from None
    if not isinstance(cfg, dict):
        raise ValueError(f"{CONFIG_NAME} must hold a mapping (model_kind, feature_input_hook, ...)")
    kind = cfg.get("model_kind")
    if kind != MODEL_KIND:
        raise ValueError(f"{CONFIG_NAME}: model_kind={kind!r}: gptviz opens circuit-tracer's cross-layer layout "
                         f"({MODEL_KIND!r}); a per-layer set opens when written as a cross-layer transcoder whose "
                         "decoders to later layers are zero")
    hook_in, hook_out = cfg.get("feature_input_hook"), cfg.get("feature_output_hook")
    if hook_in != INPUT_HOOK:
        raise ValueError(f"{CONFIG_NAME}: feature_input_hook={hook_in!r}: gptviz's transcoder features read the MLP's "
                         f"normalised input ({INPUT_HOOK!r}), so features that read elsewhere cannot be used here")
    if hook_out not in OUTPUT_HOOKS:
        raise ValueError(f"{CONFIG_NAME}: feature_output_hook={hook_out!r}: gptviz's transcoders write the MLP's "
                         f"output ({' or '.join(map(repr, OUTPUT_HOOKS))})")
    name = cfg.get("model_name")
    return {"model": name if isinstance(name, str) and len(name) <= 200 else None}


def _headers(path: Path) -> dict[str, tuple[tuple[int, ...], str]]:
    """Each tensor's (shape, dtype) from a safetensors header, without reading a weight."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as fh:
            return {k: (tuple(fh.get_slice(k).get_shape()), fh.get_slice(k).get_dtype()) for k in fh.keys()}
    except Exception as exc:  # noqa: BLE001 - safetensors raises its own error kinds for a damaged file
        raise ValueError(f"{path.name} is not a readable safetensors file ({exc})") from None


def _check(path: Path, got: dict, want: dict) -> None:
    if set(got) != set(want):
        extra, missing = sorted(set(got) - set(want)), sorted(set(want) - set(got))
        if extra:
            raise ValueError(f"{path.name} holds {', '.join(extra[:3])}, which gptviz does not compute (it reads "
                             f"{', '.join(sorted(want))})")
        raise ValueError(f"{path.name} has no {', '.join(missing[:3])}")
    for key, shape in want.items():
        if got[key][0] != shape:
            raise ValueError(f"{path.name}: {key} has shape {list(got[key][0])}, not {list(shape)}")
        if got[key][1] not in DTYPES:
            raise ValueError(f"{path.name}: {key} is {got[key][1]}; gptviz reads F32, F16 or BF16")


def load_circuit_tracer(folder: Union[str, Path]) -> Transcoder:
    """The transcoder in a circuit-tracer folder (see the module's docstring), float32, for use in eval."""
    from safetensors import safe_open

    folder = Path(folder)
    c = read_config(folder)
    layers = sorted(int(m.group(1)) for f in folder.iterdir() if (m := _ENC.match(f.name)))
    L = len(layers)
    if not 1 <= L <= MAX_LAYERS or layers != list(range(L)):
        raise ValueError(f"{folder.name} must hold W_enc_0.safetensors to W_enc_{{n-1}}.safetensors for n from 1 to "
                         f"{MAX_LAYERS} layers, each once (found layers {layers[:6]})")
    files = [folder / f"W_{part}_{i}.safetensors" for i in range(L) for part in ("enc", "dec")]
    for f in files:
        if not f.is_file():
            raise ValueError(f"{folder.name} has no {f.name}")
    size = sum(f.stat().st_size for f in files)
    if size > MAX_FILE_BYTES:
        raise ValueError(f"the transcoder's files are {size:,} bytes together: gptviz opens at most {MAX_FILE_BYTES:,}")
    first = _headers(files[0])
    if "W_enc_0" not in first or len(first["W_enc_0"][0]) != 2:
        raise ValueError("W_enc_0.safetensors has no two-dimensional W_enc_0")
    F, d = first["W_enc_0"][0]
    if not 1 <= F <= MAX_FEATURES or not 1 <= d <= MAX_D_MODEL:
        raise ValueError(f"W_enc_0 is {F} features of {d} numbers: gptviz opens at most {MAX_FEATURES:,} features of "
                         f"{MAX_D_MODEL:,}")
    jump = "threshold_0" in first
    for i in range(L):
        enc, dec = folder / f"W_enc_{i}.safetensors", folder / f"W_dec_{i}.safetensors"
        want = {f"W_enc_{i}": (F, d), f"b_enc_{i}": (F,), f"b_dec_{i}": (d,)}
        if jump:
            want[f"threshold_{i}"] = (F,)
        _check(enc, first if i == 0 else _headers(enc), want)
        _check(dec, _headers(dec), {f"W_dec_{i}": (F, L - i, d)})
    weights: dict[str, torch.Tensor] = {}
    for f in files:  # every header checked: now the weights
        with safe_open(str(f), framework="pt") as fh:
            weights.update({k: fh.get_tensor(k).float() for k in fh.keys()})
    per_layer = all(not weights[f"W_dec_{i}"][:, 1:].any() for i in range(L))
    meta = {"format_read": "circuit-tracer", "source": folder.name}
    if c["model"]:
        meta["model"] = c["model"]
    tc = Transcoder(L, d, F, None, not per_layer, meta, activation="jumprelu" if jump else "relu")
    with torch.no_grad():
        for i in range(L):
            tc.W_enc[i].copy_(weights[f"W_enc_{i}"].T)
            tc.b_enc[i].copy_(weights[f"b_enc_{i}"])
            tc.b_dec[i].copy_(weights[f"b_dec_{i}"])
            tc.W_dec[i].copy_(weights[f"W_dec_{i}"][:, :tc.reach(i)])
            if jump:
                tc.threshold[i].copy_(weights[f"threshold_{i}"])
    tc.eval()
    tc.requires_grad_(False)
    return tc


def save_circuit_tracer(tc: Transcoder, folder: Union[str, Path], model_name: str = "",
                        extra: Optional[dict] = None) -> Path:
    """Write a ReLU or JumpReLU transcoder as a circuit-tracer folder (float32); returns the folder. ``extra``: more
    keys for config.yaml (circuit-tracer ignores keys it does not read)."""
    import safetensors.torch
    import yaml

    if tc.activation not in ("relu", "jumprelu"):
        raise ValueError(f"circuit-tracer computes ReLU and JumpReLU transcoders, not {tc.activation!r}: turn a TopK "
                         "transcoder into a JumpReLU one first (as_jumprelu)")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    L, F, d = tc.n_layer, tc.n_features, tc.d_model
    for i in range(L):
        enc = {f"W_enc_{i}": tc.W_enc[i].detach().float().T.contiguous(), f"b_enc_{i}": tc.b_enc[i].detach().float(),
               f"b_dec_{i}": tc.b_dec[i].detach().float()}
        if tc.activation == "jumprelu":
            enc[f"threshold_{i}"] = tc.threshold[i].detach().float()
        safetensors.torch.save_file({k: v.contiguous() for k, v in enc.items()}, str(folder / f"W_enc_{i}.safetensors"))
        W = torch.zeros(F, L - i, d)
        W[:, :tc.reach(i)] = tc.W_dec[i].detach().float()
        safetensors.torch.save_file({f"W_dec_{i}": W}, str(folder / f"W_dec_{i}.safetensors"))
    cfg = {"model_kind": MODEL_KIND, "model_name": model_name or str(tc.meta.get("model", "")),
           "feature_input_hook": INPUT_HOOK, "feature_output_hook": OUTPUT_HOOKS[0], **(extra or {})}
    (folder / CONFIG_NAME).write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
    return folder


# --------------------------------------------------------------------------- a TopK transcoder as a JumpReLU one
def matched_thresholds(tc: Transcoder, inputs: torch.Tensor) -> list[torch.Tensor]:
    """Per layer ``(F,)``: each feature's threshold such that, over the MLP inputs ``inputs`` ``(N, n_layer, d)``,
    its pre-activation is above it as often as the TopK rule made it fire: the ``r·N``-th largest of its
    pre-activations, a hair lower (``nextafter`` toward -inf) so that one counts too, where it fired ``r·N`` times
    (``r·N ≥ 1``). Never below 0 (a JumpReLU feature of circuit-tracer's kind should not pass negative scores), and a
    feature that never fired gets its largest pre-activation, so it does not fire on ``inputs`` either."""
    if tc.activation != "topk":
        raise ValueError(f"thresholds are matched to a TopK transcoder's firing; this one's rule is {tc.activation!r}")
    out = []
    with torch.no_grad():
        for layer in range(tc.n_layer):
            pre = tc.pre_acts(layer, inputs[:, layer])  # (N, F)
            fired = (tc.encode(layer, inputs[:, layer]) > 0).sum(0)  # (F,)
            ranked = pre.sort(0, descending=True).values  # (N, F)
            at = ranked.gather(0, (fired.clamp(min=1) - 1).unsqueeze(0)).squeeze(0)
            below = torch.nextafter(at, torch.full_like(at, float("-inf")))
            out.append(torch.where(fired > 0, below, ranked[0]).clamp(min=0.0))
    return out


def as_jumprelu(tc: Transcoder, thresholds: list[torch.Tensor], note: str = "") -> Transcoder:
    """A JumpReLU transcoder with ``tc``'s weights and these thresholds (one ``(F,)`` per layer)."""
    if len(thresholds) != tc.n_layer or any(t.shape != (tc.n_features,) for t in thresholds):
        raise ValueError(f"give {tc.n_layer} thresholds of {tc.n_features} features each")
    meta = dict(tc.meta, converted_from=f"{tc.activation} k={tc.k}", thresholds=note or "given")
    out = Transcoder(tc.n_layer, tc.d_model, tc.n_features, None, tc.cross_layer, meta, activation="jumprelu")
    with torch.no_grad():
        for name in ("W_enc", "b_enc", "W_dec", "b_dec"):
            for mine, theirs in zip(getattr(out, name), getattr(tc, name)):
                mine.copy_(theirs)
        for mine, t in zip(out.threshold, thresholds):
            mine.copy_(t)
    out.eval()
    out.requires_grad_(False)
    return out
