"""A chart in words, for a screen reader (the chart's ``alt`` text): its title and its largest values with their
labels, so the point of a heatmap or a bar chart reaches someone who cannot see its colours."""
from __future__ import annotations

import base64
import html
import re

import numpy as np

TOP = 3
_TAG = re.compile(r"<[^>]+>")


def _plain(text) -> str:
    """A label as a reader hears it: the figures' own tags (<br>, <b>) dropped, escaped characters read back."""
    return " ".join(html.unescape(_TAG.sub(" ", str(text))).split())


def _array(v) -> np.ndarray | None:
    """A trace's array as numpy: a list, an array, or Plotly.js's typed-array spec ({dtype, bdata, shape})."""
    if v is None:
        return None
    if isinstance(v, dict) and "bdata" in v:
        a = np.frombuffer(base64.b64decode(v["bdata"]), dtype=np.dtype(v.get("dtype", "f8")))
        shape = v.get("shape")
        if isinstance(shape, str):
            shape = tuple(int(s) for s in shape.split(",") if s.strip())
        return a.reshape(shape) if shape else a
    try:
        return np.asarray(v, dtype=float)
    except (TypeError, ValueError):
        return None


def _labels(trace: dict, layout: dict, letter: str, n: int) -> list[str]:
    vals = trace.get(letter)
    if isinstance(vals, (list, tuple)) and len(vals) == n and all(isinstance(s, str) for s in vals):
        return [_plain(s) for s in vals]
    ax = layout.get(f"{letter}axis") or {}
    text, pos = ax.get("ticktext"), ax.get("tickvals")
    if text is not None and pos is not None:
        by = {int(p): _plain(t) for p, t in zip(pos, text) if isinstance(p, (int, float))}
        return [by.get(i, str(i)) for i in range(n)]
    return [str(i) for i in range(n)]


def in_words(spec: dict) -> str:
    """One or two sentences: the chart's title and what it shows most, e.g. "L0 attention weights · head 0. Largest
    values: 0.92 at row 'cat', column 'the'; …". Empty when there is nothing to say."""
    layout = spec.get("layout") or {}
    title = layout.get("title")
    title = _plain(title.get("text", "") if isinstance(title, dict) else title or "")
    for t in spec.get("data") or []:
        if not isinstance(t, dict) or t.get("name") in ("masked", "cells"):  # the grey mask, the click targets
            continue
        if t.get("type") == "heatmap":
            z = _array(t.get("z"))
            if z is None or z.ndim != 2 or not np.isfinite(z).any():
                continue
            rows, cols = _labels(t, layout, "y", z.shape[0]), _labels(t, layout, "x", z.shape[1])
            signed = np.nanmin(z) < 0
            key = np.where(np.isfinite(z), np.abs(z) if signed else z, -np.inf)
            order = np.argsort(key, axis=None)[::-1][:TOP]
            cells = [f"{z.flat[i]:.3g} at row {rows[i // z.shape[1]]}, column {cols[i % z.shape[1]]}"
                     for i in order if np.isfinite(key.flat[i])]
            what = "Largest values in size" if signed else "Largest values"
            return f"{title}. A {z.shape[0]} × {z.shape[1]} heatmap. {what}: {'; '.join(cells)}."
        if t.get("type") == "bar":
            horizontal = t.get("orientation") == "h"
            v = _array(t.get("x") if horizontal else t.get("y"))
            if v is None or not v.size:
                continue
            names = [_plain(s) for s in t.get("customdata") or []] or [str(i) for i in range(v.size)]
            order = np.argsort(np.abs(v))[::-1][:TOP]
            return f"{title}. Largest bars: " + "; ".join(f"{names[i]} {v[i]:.3g}" for i in order) + "."
        if t.get("type") in ("scatter", "scattergl"):
            lines = []
            for s in spec.get("data") or []:
                y = _array(s.get("y")) if isinstance(s, dict) and s.get("type") in ("scatter", "scattergl") else None
                if y is not None and y.size and np.isfinite(y).any():
                    lines.append(f"{_plain(s.get('name') or 'a line')} from {y[0]:.3g} to {y[-1]:.3g} "
                                 f"(lowest {np.nanmin(y):.3g}) over {y.size} points")
            return f"{title}. " + "; ".join(lines) + "." if lines else title
    return title
