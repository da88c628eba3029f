"""The precomputed neuron summaries that ship beside a checkpoint: ``checkpoints/NAME.neurons.npz``.

One compressed ``.npz`` of plain arrays (no pickles: ``allow_pickle=False`` when read): the slice's token ids, every
neuron's top-k positions and values and histogram counts with its first and last bin edge, and a ``meta`` JSON
string that names the weights it was computed from (``fingerprint``), so a file left over from older weights is
never shown as if it were the new model's.
"""
from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from ..paths import CHECKPOINTS
from .neurons import NeuronStats

ARRAYS = ("windows", "top_pos", "top_val", "hist", "hist_lo", "hist_hi")
MAX_FILE_BYTES = 16_000_000  # a shipped file is a few hundred kB; anything this big is not one of ours


def path_for(name: str) -> Path:
    """The summary file of shipped checkpoint ``name`` (a plain name, never a path)."""
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}", name):
        raise ValueError("a shipped checkpoint is named by a plain name such as 'shakespeare'")
    return CHECKPOINTS / f"{name}.neurons.npz"


def fingerprint(model) -> str:
    """A short SHA-256 of every parameter (names, shapes and bytes) of ``model``."""
    h = hashlib.sha256()
    for name, p in model.state_dict().items():
        t = p.detach().cpu().contiguous()
        h.update(name.encode())
        h.update(str(tuple(t.shape)).encode())
        h.update(t.view(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()[:16]


def save(stats: NeuronStats, path: Path) -> int:
    """Write ``stats`` to ``path`` (compressed); returns the file's size in bytes."""
    path = Path(path)
    arrays = {a: getattr(stats, a) for a in ARRAYS}
    arrays["hist"] = arrays["hist"].astype(np.uint16 if int(arrays["hist"].max(initial=0)) < 65536 else np.int32)
    arrays["windows"] = arrays["windows"].astype(np.uint16 if int(arrays["windows"].max(initial=0)) < 65536
                                                 else np.int32)
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez_compressed(tmp, meta=np.array(json.dumps(stats.meta)), **arrays)
    tmp.replace(path)
    return path.stat().st_size


def load(path: Path) -> NeuronStats:
    """Read a file ``save`` wrote, checked: every array there with consistent shapes. Raises ValueError."""
    path = Path(path)
    if path.stat().st_size > MAX_FILE_BYTES:
        raise ValueError(f"{path.name} is too big to be a neuron summary")
    try:
        with np.load(path, allow_pickle=False) as f:
            got = {a: f[a] for a in ARRAYS}
            meta = json.loads(str(f["meta"]))
    except (KeyError, OSError, ValueError) as exc:
        raise ValueError(f"{path.name} is not a neuron summary ({exc})") from None
    L, D, k = got["top_pos"].shape
    W, T = got["windows"].shape
    if got["top_val"].shape != (L, D, k) or got["hist"].shape[:2] != (L, D) or got["hist_lo"].shape != (L, D) \
            or got["hist_hi"].shape != (L, D) or not (0 <= got["top_pos"]).all() or (got["top_pos"] >= W * T).any():
        raise ValueError(f"{path.name} is damaged: its arrays do not fit together")
    stats = NeuronStats(got["windows"].astype(np.int32), got["top_pos"].astype(np.int32),
                        got["top_val"].astype(np.float32), got["hist"].astype(np.int64),
                        got["hist_lo"].astype(np.float64), got["hist_hi"].astype(np.float64), meta)
    for a in ARRAYS:
        getattr(stats, a).flags.writeable = False  # shared by every session: read only
    return stats


def shipped(name: str, model) -> Optional[NeuronStats]:
    """The shipped summary of checkpoint ``name`` if there is one and it was computed from ``model``'s weights."""
    p = path_for(name)
    if not p.is_file():
        return None
    stats = load(p)
    return stats if stats.meta.get("fingerprint") == fingerprint(model) else None
