"""A sparse autoencoder (SAE) on one point of a model's residual stream: its weights, encode and decode, its file.

An SAE rewrites a residual-stream vector ``x`` (n_embd numbers) as a few active *features* out of many
(``n_features``, typically 8 to 16 times n_embd), each a direction in the stream (a row of ``W_dec``):

    f = TopK(ReLU((x - b_dec) @ W_enc + b_enc))      # (..., n_features), at most k non-zero
    x_hat = f @ W_dec + b_dec                         # (..., n_embd)

``kind="topk"`` keeps the ``k`` largest pre-activations (Gao et al. 2024, "Scaling and evaluating sparse
autoencoders"); ``kind="relu"`` keeps every positive one (an L1-trained SAE); ``kind="jumprelu"`` keeps each one
above its feature's own ``threshold`` (Rajamanoharan et al. 2024; Gemma Scope). ``b_dec_in=False`` leaves ``b_dec``
out of the encoder's input (SAELens's ``apply_b_dec_to_input``). The rows of ``W_dec`` of a gptviz-trained SAE have
unit norm, so a feature's activation is how far along its direction it writes. SAELens folders:
``gptviz.interp.sae_formats``.

The file is safetensors (``W_enc``, ``b_enc``, ``W_dec``, ``b_dec``, float16 or float32) with metadata: the hook it
reads (``hook``), ``kind``, ``k``, ``d_model``, ``n_features``, the model it was trained on (``model``, and that
model's config as JSON, ``model_config``), and the training figures (``figures``, ``training``: JSON). A shipped
model ``checkpoints/NAME.safetensors`` has its SAE at ``checkpoints/NAME.sae.safetensors`` (``sae_path``).

Also here, because every view of an SAE needs them: the steering edit (add ``alpha`` times a feature's direction
at every position of the hook) and a greedy generation with any edit applied at every step.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Optional, Union

import safetensors.torch
import torch
import torch.nn as nn

from ..paths import CHECKPOINTS
from ..run.trace import trace

FORMAT = "gptviz-sae-1"
KINDS = ("topk", "relu", "jumprelu")
WEIGHTS = ("W_enc", "b_enc", "W_dec", "b_dec")
MAX_FILE_BYTES = 64_000_000  # an SAE file bigger than this is refused before it is read
MAX_FEATURES = 65_536


class SparseAutoencoder(nn.Module):
    """The SAE's weights and its two maps. ``hook`` is the residual-stream hook it reads and writes back to."""

    def __init__(self, d_model: int, n_features: int, hook: str, kind: str = "topk", k: Optional[int] = 32,
                 meta: Optional[dict] = None, b_dec_in: bool = True):
        super().__init__()
        if kind not in KINDS:
            raise ValueError(f"kind={kind!r} must be one of {', '.join(KINDS)}")
        if not (0 < int(d_model) <= 65_536 and 0 < int(n_features) <= MAX_FEATURES):
            raise ValueError(f"an SAE of d_model={d_model} and n_features={n_features} is out of range")
        if kind == "topk" and not (k is not None and 0 < int(k) <= n_features):
            raise ValueError(f"a TopK SAE needs 1 <= k <= n_features, not k={k!r}")
        self.d_model, self.n_features, self.hook, self.kind = int(d_model), int(n_features), str(hook), kind
        self.k = int(k) if kind == "topk" and k is not None else None  # (checked above: a TopK SAE has its k)
        self.meta = dict(meta or {})
        self.b_dec_in = bool(b_dec_in)
        if kind == "jumprelu":  # each feature's threshold: a pre-activation at or below it is 0
            self.threshold = nn.Parameter(torch.zeros(n_features))
        self.W_enc = nn.Parameter(torch.zeros(d_model, n_features))
        self.b_enc = nn.Parameter(torch.zeros(n_features))
        self.W_dec = nn.Parameter(torch.zeros(n_features, d_model))
        self.b_dec = nn.Parameter(torch.zeros(d_model))

    def __repr__(self) -> str:
        return (f"SparseAutoencoder({self.hook!r}, d_model={self.d_model}, n_features={self.n_features}, "
                f"kind={self.kind!r}, k={self.k})")

    # ------------------------------------------------------------------ the maps
    def pre_acts(self, x: torch.Tensor) -> torch.Tensor:
        """``(x - b_dec) @ W_enc + b_enc`` (``x @ W_enc + b_enc`` when not ``b_dec_in``): every feature's score before
        the sparsity rule."""
        x = x.to(self.W_enc.dtype)
        return (x - self.b_dec if self.b_dec_in else x) @ self.W_enc + self.b_enc

    def encode(self, x) -> torch.Tensor:
        """Features ``(..., n_features)`` of residual-stream vectors ``x`` ``(..., d_model)``."""
        x = torch.as_tensor(x)
        if x.shape[-1] != self.d_model:
            raise ValueError(f"this SAE reads vectors of {self.d_model} numbers, not {x.shape[-1]}")
        pre = self.pre_acts(x)
        if self.kind == "relu":
            return torch.relu(pre)
        if self.kind == "jumprelu":  # ReLU, then 0 wherever the pre-activation is not above the threshold
            return torch.relu(pre) * (pre > self.threshold).to(pre.dtype)
        assert self.k is not None  # a TopK SAE has its k
        vals, idx = pre.topk(self.k, dim=-1)
        return torch.zeros_like(pre).scatter(-1, idx, torch.relu(vals))

    def decode(self, f) -> torch.Tensor:
        """Back to the residual stream: ``f @ W_dec + b_dec``, shape ``(..., d_model)``."""
        f = torch.as_tensor(f).to(self.W_dec.dtype)
        if f.shape[-1] != self.n_features:
            raise ValueError(f"this SAE has {self.n_features} features, not {f.shape[-1]}")
        return f @ self.W_dec + self.b_dec

    def reconstruct(self, x) -> torch.Tensor:
        return self.decode(self.encode(x))

    def direction(self, feature: int) -> torch.Tensor:
        """Feature ``feature``'s direction in the residual stream (its decoder row; unit norm)."""
        if not 0 <= int(feature) < self.n_features:
            raise ValueError(f"there is no feature {feature}: this SAE has {self.n_features} (0 to "
                             f"{self.n_features - 1})")
        return self.W_dec[int(feature)].detach()

    def normalise_decoder(self) -> None:
        """Give every decoder row unit norm (the encoder is left as it is)."""
        with torch.no_grad():
            self.W_dec.div_(self.W_dec.norm(dim=-1, keepdim=True).clamp(min=1e-8))

    # ------------------------------------------------------------------ the file
    def header(self) -> dict[str, str]:
        out = {"format": FORMAT, "hook": self.hook, "kind": self.kind, "k": str(self.k or 0),
               "d_model": str(self.d_model), "n_features": str(self.n_features)}
        if not self.b_dec_in:  # written only when not the default, so the shipped files stay as they are
            out["b_dec_in"] = "0"
        for key, value in self.meta.items():
            out[key] = value if isinstance(value, str) else json.dumps(value)
        return out

    def save(self, path: Union[str, Path], dtype: torch.dtype = torch.float16) -> None:
        """Write the weights (as ``dtype``) and the metadata. Figures should be measured on what is written:
        ``load_sae`` the file afterwards."""
        names = WEIGHTS + (("threshold",) if self.kind == "jumprelu" else ())
        tensors = {n: getattr(self, n).detach().to(dtype).contiguous() for n in names}
        safetensors.torch.save_file(tensors, str(path), metadata=self.header())


def _meta_value(v: str):
    try:
        return json.loads(v)
    except (ValueError, TypeError):
        return v


def load_sae(path: Union[str, Path]) -> SparseAutoencoder:
    """The SAE in a safetensors file written by ``SparseAutoencoder.save`` (weights as float32, in eval use only).

    Raises ValueError for a file that is not such an SAE (missing weights, shapes that disagree, a header it
    does not know), and OSError for one that cannot be read."""
    p = Path(path)
    size = p.stat().st_size
    if size > MAX_FILE_BYTES:
        raise ValueError(f"{p.name} is {size:,} bytes: an SAE file is at most {MAX_FILE_BYTES:,}")
    from safetensors import safe_open

    try:
        with safe_open(str(p), framework="pt") as fh:
            header = dict(fh.metadata() or {})
            names = set(fh.keys())
            shapes = {n: tuple(fh.get_slice(n).get_shape()) for n in WEIGHTS + ("threshold",) if n in names}
    except Exception as exc:  # noqa: BLE001 - safetensors raises its own error kinds for a damaged file
        raise ValueError(f"{p.name} is not a readable safetensors file ({exc})") from None
    if header.get("format") != FORMAT:
        raise ValueError(f"{p.name} is not a gptviz SAE (its format is {header.get('format')!r}, not {FORMAT!r})")
    missing = [n for n in WEIGHTS if n not in names]
    if missing:
        raise ValueError(f"{p.name} has no {', '.join(missing)}")
    try:
        d, n, k = int(header["d_model"]), int(header["n_features"]), int(header.get("k", "0"))
        hook, kind = header["hook"], header["kind"]
    except (KeyError, ValueError) as exc:
        raise ValueError(f"{p.name} has a broken header ({exc})") from None
    # the header's sizes against the file's own tensors before anything is allocated: a 400-byte file may claim
    # d_model = n_features = 65,536 (two 17 GB matrices)
    want = {"W_enc": (d, n), "b_enc": (n,), "W_dec": (n, d), "b_dec": (d,)}
    if kind == "jumprelu":
        want["threshold"] = (n,)
    for name, shape in want.items():
        if shapes.get(name) != shape:
            raise ValueError(f"{p.name}: {name} has shape {shapes[name]}, not {shape}")
    meta = {}
    for key, v in header.items():
        if key not in ("format", "hook", "kind", "k", "d_model", "n_features", "b_dec_in"):
            try:
                meta[key] = _meta_value(v)
            except RecursionError:
                raise ValueError(f"{p.name}: the header's {key!r} is nested too deeply to read") from None
    sae = SparseAutoencoder(d, n, hook, kind, k or None, meta, b_dec_in=header.get("b_dec_in", "1") != "0")
    return fill_weights(sae, p, want)


def fill_weights(sae: SparseAutoencoder, path: Path, names) -> SparseAutoencoder:
    """``sae`` with the tensors ``names`` read from the safetensors file ``path`` (as float32; their shapes already
    checked against the header), for use: no gradients, eval mode."""
    weights = safetensors.torch.load_file(str(path))
    for name in names:
        getattr(sae, name).data = weights[name].float()
    sae.requires_grad_(False)
    sae.eval()
    return sae


# --------------------------------------------------------------------------- which shipped model has one
def sae_path(model_name: str, folder: Optional[Path] = None) -> Path:
    """Where the SAE of the shipped model ``model_name`` lives (whether or not it exists)."""
    return Path(folder or CHECKPOINTS) / f"{model_name}.sae.safetensors"


def snippets_path(model_name: str, folder: Optional[Path] = None) -> Path:
    """The precomputed top snippets of that SAE (``gptviz.training.sae.top_snippets``)."""
    return Path(folder or CHECKPOINTS) / f"{model_name}.sae.snippets.safetensors"


def labels_path(model_name: str, folder: Optional[Path] = None) -> Path:
    """Hand-written labels of some of its features (TOML: ``[labels]`` feature number = "label")."""
    return Path(folder or CHECKPOINTS) / f"{model_name}.sae.labels.toml"


def read_labels(path: Path, n_features: int, max_chars: int = 120) -> dict[int, str]:
    """{feature: label} from a labels file; an absent file gives {} and bad entries are skipped."""
    import tomllib

    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return {}
    out = {}
    for key, value in (data.get("labels") or {}).items():
        try:
            i = int(key)
        except ValueError:
            continue
        if 0 <= i < n_features and isinstance(value, str) and value.strip():
            out[i] = value.strip()[:max_chars]
    return out


def save_snippets(path: Union[str, Path], snippets: dict, meta: Optional[dict] = None) -> None:
    """Top snippets (``ids`` int32 (F, n, W), ``acts`` float16 (F, n, W), ``peak`` float32 (F, n), ``where``
    int32 (F, n, 2): window and position of the peak; ``density`` float32 (F,)) as safetensors."""
    tensors = {k: torch.as_tensor(v).contiguous() for k, v in snippets.items()}
    safetensors.torch.save_file(tensors, str(path), metadata={k: json.dumps(v) for k, v in (meta or {}).items()})


def load_snippets(path: Union[str, Path]) -> tuple[dict, dict]:
    """``(tensors, meta)`` of a ``save_snippets`` file."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as fh:
        meta = {k: _meta_value(v) for k, v in (fh.metadata() or {}).items()}
    return safetensors.torch.load_file(str(path)), meta


# --------------------------------------------------------------------------- what a feature writes
def direction_logits(model, direction: torch.Tensor) -> torch.Tensor:
    """``(V,)``: how much writing ``direction`` into the final residual stream moves each token's logit, through the
    final norm's linear part as the logit lens and direct logit attribution read it: ``W_U (γ ⊙ (d − mean d))`` for
    a LayerNorm (no centring for RMSNorm; the norm's scale and shift are the same for every token's logit, so they
    leave the order alone and are left out), ``W_U d`` for a model without a final norm."""
    with torch.no_grad():
        d = torch.as_tensor(direction).float()
        ln = model.transformer["ln_f"] if "ln_f" in model.transformer else None
        if ln is not None:
            if model.config.norm == "layernorm":
                d = d - d.mean()
            if getattr(ln, "weight", None) is not None:
                d = d * ln.weight.float()
        return model.lm_head.weight.float() @ d


# --------------------------------------------------------------------------- steering
def steering_edit(vector: torch.Tensor, alpha: float) -> Callable[[torch.Tensor], torch.Tensor]:
    """A ``trace`` edit that adds ``alpha * vector`` to the tensor at every position (and every batch row)."""
    v = torch.as_tensor(vector).detach().float() * float(alpha)

    def add(x: torch.Tensor) -> torch.Tensor:
        return x + v.to(x.dtype)

    return add


def greedy(model, ids: list[int], steps: int, edits: Optional[dict] = None) -> list[int]:
    """``steps`` tokens after ``ids``, each the most likely one, with ``edits`` (functions, as ``trace`` takes them)
    applied to the whole context at every step. The context is the last ``block_size`` tokens. Only the edited
    steps are looked at (no trace is kept), so it is as quick as plain generation."""
    with torch.no_grad():
        if not ids:
            raise ValueError("generation needs a prompt of at least one token")
        edits = dict(edits or {})
        unknown = sorted(set(edits) - set(trace(model, torch.tensor([list(ids)[-1:]])).keys()))
        if unknown:
            raise ValueError(f"cannot edit {', '.join(map(repr, unknown))}: no such step in this model")

        def rec(name: str, t: torch.Tensor) -> torch.Tensor:  # trace's edits, without recording every step
            return edits[name](t.clone()) if name in edits else t

        ctx, out, B = list(ids), [], model.config.block_size
        for _ in range(int(steps)):
            x = torch.tensor([ctx[-B:]], dtype=torch.long)
            model.check_inputs(x)
            logits = model.run(x, rec=rec)[0, -1]
            nxt = int(logits.argmax())
            ctx.append(nxt)
            out.append(nxt)
        return out
