"""Edits described as plain JSON-able data, turned into the functions ``trace(edits=...)`` takes.

A spec is what an app keeps in its session and in a cache key:

    {"set": [{"name": "hook_embed", "index": [0, 3], "values": [0.1, -0.2, ...]}, ...],
     "heads_off": [[layer, head], ...]}

``set`` writes ``values`` at ``index`` of a recorded tensor; ``heads_off`` zeroes a head's attention
weights (so its weighted values, and its share of the attention output, are zero too).
"""
from __future__ import annotations

import json
from collections import defaultdict
from typing import Any, Optional

import numpy as np
import torch

EMPTY: dict = {"set": [], "heads_off": []}


def normalise(spec: Optional[dict]) -> dict:
    spec = spec or {}
    return {"set": list(spec.get("set", [])), "heads_off": sorted({tuple(h) for h in spec.get("heads_off", [])})}


def spec_key(spec: Optional[dict]) -> str:
    """A stable string for a spec: equal specs give equal keys (for caching)."""
    return json.dumps(normalise(spec), sort_keys=True)


def is_empty(spec: Optional[dict]) -> bool:
    s = normalise(spec)
    return not s["set"] and not s["heads_off"]


def from_spec(spec: Optional[dict], n_layer: int, n_head: int) -> dict[str, Any]:
    """The ``edits`` dict for ``trace``. Raises ValueError for a head or index that does not exist."""
    s = normalise(spec)
    by_name: dict[str, list] = defaultdict(list)
    for item in s["set"]:
        by_name[item["name"]].append((tuple(int(i) for i in item["index"]), np.asarray(item["values"], dtype=np.float32)))
    for layer, head in s["heads_off"]:
        if not (0 <= layer < n_layer and 0 <= head < n_head):
            raise ValueError(f"there is no head {head} in layer {layer} of this model")
        by_name[f"blocks.{layer}.attn.hook_pattern"].append(("head", head))
    return {name: _writer(name, items) for name, items in by_name.items()}


def _writer(name: str, items: list):
    def edit(t: torch.Tensor) -> torch.Tensor:
        for item in items:
            if item[0] == "head":
                t[:, item[1]] = 0.0
                continue
            index, values = item
            try:
                target = t[index]
            except IndexError:
                raise ValueError(f"the edit of {name} at {list(index)} no longer fits its shape {tuple(t.shape)}") from None
            if tuple(target.shape) != values.shape:
                raise ValueError(f"the edit of {name} at {list(index)} has {values.shape} values, not {tuple(target.shape)}")
            t[index] = torch.from_numpy(values)
        return t

    return edit


def apply_id_edits(x: torch.Tensor, y: torch.Tensor, lengths: list[int], id_edits: dict, vocab_size: int):
    """Replace token ids at (row, pos), keeping targets consistent (y is x shifted by one).

    ``id_edits`` maps "row,pos" to a new id. Edits outside the batch or the vocabulary are skipped
    and reported. Returns (x, y, notices).
    """
    x, y = x.clone(), y.clone()
    notices = []
    for key, new in sorted(id_edits.items()):
        try:
            b, t = (int(v) for v in str(key).split(","))
            new = int(new)
        except ValueError:
            notices.append(f"Ignored a token edit {key!r}: not of the form row,position.")
            continue
        if not (0 <= b < x.shape[0] and 0 <= t < lengths[b]):
            notices.append(f"Token edit at row {b}, position {t} no longer fits the text: ignored.")
            continue
        if not 0 <= new < vocab_size:
            notices.append(f"Token id {new} is outside the vocabulary (0 to {vocab_size - 1}): ignored.")
            continue
        x[b, t] = new
        if t > 0:
            y[b, t - 1] = new
    return x, y, notices
