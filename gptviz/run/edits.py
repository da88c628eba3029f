"""Edits described as plain JSON-able data, turned into the functions ``trace(edits=...)`` takes.

A spec is what an app keeps in its session and in a cache key:

    {"set": [{"name": "hook_embed", "index": [0, 3], "values": [0.1, -0.2, ...]}, ...],
     "heads_off": [[layer, head], ...],
     "experts_off": [[layer, expert], ...]}

``set`` writes ``values`` at ``index`` of a recorded tensor; ``heads_off`` zeroes a head's attention
weights (so its weighted values, and its share of the attention output, are zero too); ``experts_off`` takes an
expert out of a mixture's choice: its router logit becomes -inf, so its probability is 0 and each token goes to the
best experts that are left (an empty ``experts_off`` is left out of a spec, so older specs keep their keys).
"""
from __future__ import annotations

import json
from collections import defaultdict
from typing import Any, Optional

import numpy as np
import torch

EMPTY: dict = {"set": [], "heads_off": []}  # read only: use empty() for a spec to fill in


def empty() -> dict:
    """A new spec with no edits."""
    return {"set": [], "heads_off": []}


def normalise(spec: Optional[dict]) -> dict:
    spec = spec or {}
    out = {"set": list(spec.get("set", [])), "heads_off": sorted({tuple(h) for h in spec.get("heads_off", [])})}
    experts = sorted({tuple(e) for e in spec.get("experts_off", [])})
    if experts:
        out["experts_off"] = experts
    return out


def spec_key(spec: Optional[dict]) -> str:
    """A stable string for a spec: equal specs give equal keys (for caching)."""
    return json.dumps(normalise(spec), sort_keys=True)


def is_empty(spec: Optional[dict]) -> bool:
    s = normalise(spec)
    return not s["set"] and not s["heads_off"] and not s.get("experts_off")


def from_spec(spec: Optional[dict], n_layer: int, n_head: int, config=None) -> dict[str, Any]:
    """The ``edits`` dict for ``trace``. Raises ValueError for a head, expert or index that does not exist
    (``config``, the model's, says which layers have experts and how many; without it no expert can be off)."""
    s = normalise(spec)
    for layer, expert in s.get("experts_off", []):
        n_expert = getattr(config, "n_expert", 0)
        if not (0 <= layer < n_layer and 0 <= expert < n_expert and config.is_moe_layer(layer)):
            raise ValueError(f"there is no expert {expert} in layer {layer} of this model")
        s["set"].append({"name": f"blocks.{layer}.mlp.hook_router_logits", "expert_off": expert})
    by_name: dict[str, list] = defaultdict(list)
    for item in s["set"]:
        if "expert_off" in item:
            by_name[item["name"]].append(("expert", int(item["expert_off"])))
            continue
        by_name[item["name"]].append((tuple(int(i) for i in item["index"]),
                                      np.asarray(item["values"], dtype=np.float32)))
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
            if item[0] == "expert":  # the router's logits (B, T, E): this expert is never chosen
                t[..., item[1]] = float("-inf")
                continue
            index, values = item
            try:
                target = t[index]
            except IndexError:
                raise ValueError(f"the edit of {name} at {list(index)} no longer fits its shape "
                                 f"{tuple(t.shape)}") from None
            if tuple(target.shape) != values.shape:
                raise ValueError(f"the edit of {name} at {list(index)} has {values.shape} values, "
                                 f"not {tuple(target.shape)}")
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


# ------------------------------------------------------------------------- what switching a head off does to gradients
# Steps of a layer that only reach the loss through that head's attention weights (per head, before the softmax).
UPSTREAM_OF_PATTERN = ("hook_attn_scores", "hook_scores_capped", "hook_scores_scaled", "hook_scores_raw", "hook_rot_q",
                       "hook_rot_k", "hook_q_normed", "hook_k_normed", "hook_q", "hook_k")  # QK-norm's norm is per head
# too (OLMo 2's is over every head at once: its q and k are then read as they are, the value said, not assumed 0)
_UPSTREAM_WORDS = {
    "hook_q": "queries", "hook_k": "keys", "hook_rot_q": "rotated queries", "hook_rot_k": "rotated keys",
    "hook_q_normed": "normalised queries", "hook_k_normed": "normalised keys",
    "hook_scores_raw": "raw scores", "hook_scores_scaled": "scaled scores", "hook_scores_capped": "capped scores",
    "hook_attn_scores": "masked scores",
}


def heads_off_in(spec: Optional[dict], layer: int) -> list[int]:
    """The heads of ``layer`` the spec switches off, in order."""
    return sorted(h for l, h in normalise(spec)["heads_off"] if l == layer)


def _arr(t) -> np.ndarray:
    return t.detach().cpu().numpy() if isinstance(t, torch.Tensor) else np.asarray(t)


def _head_max(tr, name: str, head: int, grad: bool, allowed: Optional[np.ndarray] = None) -> Optional[float]:
    """max |value| (or |gradient|) of one head's slice of a per-head step, over the whole batch (over the
    ``allowed`` cells only, if given)."""
    if name not in tr:
        return None
    a = tr.grad(name) if grad else tr[name]
    if a is None:
        return None
    a = _arr(a)
    a = np.take(a, head, axis=tr.info(name).axes.index("head"))
    a = a[np.isfinite(a) & (True if allowed is None else allowed)]  # masked scores hold -inf
    return float(np.abs(a).max()) if a.size else 0.0


def _upstream_max(tr, layer: int, head: int) -> tuple[float, list[str]]:
    """The largest |gradient| over every step upstream of this head's pattern, and the steps looked at."""
    vals, seen = [], []
    for short in UPSTREAM_OF_PATTERN:
        v = _head_max(tr, f"blocks.{layer}.attn.{short}", head, grad=True)
        if v is not None:
            vals.append(v)
            seen.append(short)
    return (max(vals) if vals else 0.0), seen


def _exactly_zero(v: float) -> str:
    return "exactly 0" if v == 0 else f"not 0 (up to {v:.3g})"


def _and(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def switched_off_reading(tr, name: str, spec: Optional[dict], head: Optional[int] = None) -> Optional[str]:
    """What the gradient at step ``name`` says about the heads that ``spec`` switches off, or None.

    Switching a head off replaces its attention weights with 0. The forward value there is 0, but the loss
    still depends on those weights, so their gradient is not 0 in general. Everything that made the weights
    (the head's masked, scaled and raw scores, its queries and keys) no longer reaches the loss through
    this head, so its gradient is exactly 0. The head's values are multiplied by those zero weights, so
    theirs is 0 too. Every number in the sentence is measured on ``tr`` (a trace with gradients), for the
    switched-off heads of the step's layer (only ``head``, if given).
    """
    parts = name.split(".")
    if len(parts) != 4 or parts[0] != "blocks" or parts[2] != "attn" or not parts[1].isdigit():
        return None
    layer, short = int(parts[1]), parts[3]
    heads = [h for h in heads_off_in(spec, layer) if head is None or h == head]
    if not heads or tr.grad(name) is None:
        return None
    out = []
    for h in heads:
        who = f"Head {h} of layer {layer} is switched off"
        up, seen = _upstream_max(tr, layer, h)
        upstream = _and([_UPSTREAM_WORDS[s] for s in seen])
        cut = "exactly 0: the edit cut them off from the loss." if up == 0 else f"{_exactly_zero(up)}."
        if short == "hook_pattern":
            # cells attention may use (the rest are masked: their weight is 0 whatever the head does)
            allowed = np.isfinite(_arr(tr[f"blocks.{layer}.attn.hook_attn_scores"])[:, h])
            fwd = _head_max(tr, name, h, grad=False)
            g = _head_max(tr, name, h, grad=True, allowed=allowed)
            assert fwd is not None and g is not None  # the step is in tr with its gradient (checked above)
            out.append(
                f"{who}: your edit replaces its attention weights with 0, so their forward value is "
                f"{_exactly_zero(fwd)}. Their gradient is {_exactly_zero(g)} on the cells attention may use: it says "
                f"how the loss would change if those weights were nudged up from 0. Upstream of the edit, the "
                f"gradient on this head's {upstream} is {cut}")
        elif short in UPSTREAM_OF_PATTERN:
            g = _head_max(tr, name, h, grad=True)
            assert g is not None  # the step is in tr with its gradient (checked above)
            tail = (f"and so is the gradient on all of its {upstream}: the edit cut them off from the loss." if up == 0
                    else f"and on its {upstream} it is {_exactly_zero(up)}.")
            out.append(
                f"{who} after this step: its attention weights are replaced with 0, so this step no longer reaches "
                f"the loss through head {h}. Head {h}'s gradient here is {_exactly_zero(g)}, {tail}")
        elif short == "hook_v":
            g = _head_max(tr, name, h, grad=True)
            assert g is not None  # the step is in tr with its gradient (checked above)
            out.append(
                f"{who}: its values are multiplied by attention weights that are all 0, so head {h}'s gradient "
                f"here is {_exactly_zero(g)}.")
        elif short == "hook_qkv":
            ga = _arr(tr.grad(name))
            nh, dh = tr.shape(f"blocks.{layer}.attn.hook_q")[2:4]  # (batch, pos, head, d_head)
            cols = [c * nh * dh + h * dh + i for c in range(3) for i in range(dh)]
            v = float(np.abs(ga[..., cols]).max())
            out.append(
                f"{who}: the gradient on its query, key and value columns here is {_exactly_zero(v)}; the "
                "other columns feed the heads that are still on.")
        else:
            return None
    return " ".join(out)
