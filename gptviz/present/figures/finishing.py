"""Finishing a built figure: margins worked out from its labels, and every font scaled for presenter mode.

Plotly's automatic margins measure every tick label in the browser and then draw the chart a second time:
a third of the browser's drawing time on the attention page. ``fixed_margins`` works the margins out here
from the labels instead (``base.text_px`` estimates a label's width).
"""
from __future__ import annotations

import math
import re

import numpy as np
import plotly.graph_objects as go

from .base import FONT, PALETTES, PlainFigure, figure, text_px


def _axis_labels(lay: dict, key: str, data: list) -> list:
    ax = lay.get(key) or {}
    if ax.get("ticktext") is not None:
        return list(ax["ticktext"])
    letter, n = key[0], key[5:]
    ref = letter + n
    out = []
    for t in data:
        if (t.get(f"{letter}axis") or letter) != ref:
            continue
        vals = t.get(letter)
        if vals is None and t.get("type") == "heatmap" and t.get("z") is not None:
            z = t["z"]
            count = len(z) if letter == "y" else (len(z[0]) if len(z) else 0)
            vals = list(range(count))
        if vals is None:
            continue
        vals = list(vals)
        if vals and all(isinstance(v, str) for v in vals):
            out += vals
        elif vals:
            nums = [float(v) for v in vals if isinstance(v, (int, float)) and math.isfinite(float(v))]
            if nums:
                lo, hi = min(nums), max(nums)
                out += [f"{lo:.3g}", f"{hi:.3g}", "0.000"]  # numeric ticks: a few characters
    return out


def fixed_margins(fig: go.Figure, plot_width: int = 700) -> go.Figure:
    """The same figure with margins worked out from its labels and Plotly's automatic margins off.

    Charts with a legend are returned as they are (a legend's size is hard to guess). ``plot_width`` is the
    width assumed when deciding whether x labels will be turned on their side.
    """
    spec = finish_spec(fig.to_plotly_json(), plot_width)
    return fig if spec is None else figure(spec["data"], spec["layout"])


def finish_spec(spec: dict, plot_width: int = 700) -> dict | None:
    """``fixed_margins`` on a figure's plain dict (``fig.to_plotly_json()``): a new dict, or None for a chart with
    a legend (left as it is). Only the dicts it changes are copied (shallowly): the traces' arrays are shared
    with ``spec``, never written."""
    lay = dict(spec.get("layout") or {})
    data = [dict(t) for t in spec.get("data") or []]
    legends = sum(1 for t in data
                  if t.get("type") in ("scatter", "bar", "scattergl") and t.get("showlegend") is not False)
    if legends >= 2 or lay.get("showlegend"):
        return None
    base = float((lay.get("font") or {}).get("size") or 12)
    m = dict(lay.get("margin") or {})
    need = {"l": 10.0, "r": 10.0, "t": float(m.get("t", 60)), "b": 10.0}
    axes = sorted(k for k in lay if re.fullmatch(r"[xy]axis\d*", k))
    for t in data:  # axes used by traces but absent from the layout
        for letter in "xy":
            ref = t.get(f"{letter}axis") or letter
            key = f"{letter}axis{ref[1:]}"
            if key not in axes:
                axes.append(key)
    for key in axes:
        ax = lay.get(key) or {}
        if ax.get("visible") is False or ax.get("showticklabels") is False:
            labels = []
        else:
            labels = _axis_labels(lay, key, data)
        size = float((ax.get("tickfont") or {}).get("size") or base)
        title = ax.get("title") or {}
        title_text = title.get("text") if isinstance(title, dict) else title
        title_px = (float((title.get("font") or {}).get("size") or base) * 1.4 + 8) if title_text else 0.0
        widest = max((text_px(l, size) for l in labels), default=0.0)
        if key[0] == "y":
            side = "r" if ax.get("side") == "right" else "l"
            need[side] = max(need[side], 10 + widest + 8 + title_px)
        else:
            dom = ax.get("domain") or [0, 1]
            room = plot_width * max(0.1, dom[1] - dom[0]) / max(1, len(labels))
            tall = size * 1.3
            angle = ax.get("tickangle")
            if labels and widest + 4 > room and (angle is None or angle == "auto"):
                # crowded labels turn: by 45° when there is room, else on their side
                angle = -45 if room >= size * 1.5 else -90
                lay[key] = dict(ax, tickangle=angle)
            if labels and angle is not None and angle != "auto":  # turned here or before (readable_x_labels)
                turn = abs(math.sin(math.radians(float(angle))))
                tall = widest * turn + size * (1.3 - turn)
            side = "t" if ax.get("side") == "top" else "b"
            extra = (tall + 8 + title_px) if labels or title_px else 0.0
            need[side] = (need[side] + extra) if side == "t" else max(need[side], 10 + extra)
    bars = [t for t in data if t.get("type") == "heatmap" and t.get("showscale") is not False]
    if bars:
        tick = max(float(((t.get("colorbar") or {}).get("tickfont") or {}).get("size") or base) for t in bars)
        if any((t.get("colorbar") or {}).get("orientation") != "h" for t in bars):  # a bar beside the plot
            need["r"] = max(need["r"], 30 + 12 + text_px("-0.000", tick) + 16)
    margin = {k: int(math.ceil(max(float(m.get(k, 0) or 0), v))) for k, v in need.items()}
    margin.update({k: v for k, v in m.items() if k not in ("l", "r", "t", "b", "autoexpand")})
    margin["autoexpand"] = False
    lay["margin"] = margin
    if bars and float(lay.get("height") or 450) - margin["t"] - margin["b"] < 8 * tick:
        for t in bars:  # a short chart: its colour bar labels only its ends and middle, never overlapping
            t["colorbar"] = dict(t.get("colorbar") or {}, nticks=3)
    for key in axes:
        lay[key] = dict(lay.get(key) or {}, automargin=False)
    return {"data": data, "layout": lay}


class FinishedFigure(go.Figure):
    """A finished figure's plain dict, handed to ``st.plotly_chart`` as it is.

    ``st.plotly_chart`` calls a Plotly figure's ``to_dict`` (a deep copy of every array) and sends that as JSON.
    A figure built again from the finished dict, only to be copied, cost a third of a page's server time under a
    class's load; this one returns the dict it holds. It is built without Plotly's own set-up (nothing but
    ``to_dict`` is ever asked of it) and is not meant for anything but drawing."""

    def __init__(self, spec: dict):  # no super().__init__(): an empty figure's set-up costs ~1 ms
        object.__setattr__(self, "_finished", spec)

    def to_dict(self) -> dict:
        return self._finished

    def __repr__(self) -> str:
        return f"FinishedFigure({len(self._finished.get('data', []))} traces)"


def _scale_key(scale) -> tuple:
    try:
        return tuple((round(float(a), 6), str(b)) for a, b in scale)
    except (TypeError, ValueError):
        return ()


_DEFAULT_SCALES = {_scale_key(v): k for k, v in PALETTES["default"].items()}


def recolour(spec: dict, palette: str) -> dict:
    """A figure's plain dict with its colour scales swapped for ``palette``'s (``PALETTES``): a trace on the
    default signed, probability or non-negative scale gets the palette's own; nothing else changes. New dicts
    for what changes; ``spec`` is left as it was."""
    if palette not in PALETTES or palette == "default":
        return spec
    scales = PALETTES[palette]
    data = []
    for t in spec.get("data") or []:
        kind = _DEFAULT_SCALES.get(_scale_key(t.get("colorscale") or ())) if isinstance(t, dict) else None
        data.append(dict(t, colorscale=scales[kind]) if kind else t)
    return dict(spec, data=data)


def finished(fig: go.Figure, plot_width: int = 700, palette: str = "default") -> go.Figure:
    """``fig`` with fixed margins, ready for ``st.plotly_chart``, without copying it: ``finish_spec`` copies only
    the few dicts it changes, and the rest is read where the figure holds it (Plotly 6 keeps a figure's arrays in
    base64 from the moment it is built, so they are sent as its ``to_dict`` would send them). ``fig`` is left as
    it was."""
    data, layout, plain = _stored(fig)
    spec = _typed_arrays({"data": data, "layout": layout}, drop_none=plain)
    if plain and spec["layout"].get("template") is None:  # never made into Plotly's object: add Plotly's template
        template = default_template()
        if template is not None:
            spec["layout"]["template"] = template
    return FinishedFigure(recolour(finish_spec(spec, plot_width) or spec, palette))


def _stored(fig: go.Figure) -> tuple[list, dict, bool]:
    """(traces, layout, plain) where ``fig`` keeps them, never copied: a ``PlainFigure``'s own dicts (plain: True),
    else Plotly's own (pinned) storage, else, for a figure that has neither, its plain JSON."""
    plain = fig.plain() if isinstance(fig, PlainFigure) else None
    if plain is not None:
        return plain[0], plain[1], True
    data, layout = getattr(fig, "_data", None), getattr(fig, "_layout", None)
    if isinstance(data, list) and isinstance(layout, dict):
        return data, layout, False
    spec = fig.to_plotly_json()
    return spec.get("data") or [], spec.get("layout") or {}, False


_templates: dict[int, tuple] = {}


def default_template() -> dict | None:
    """The layout template Plotly gives a new figure that names none (``plotly.io.templates.default``: Streamlit's
    own once Streamlit is imported), as the plain dict Plotly stores. Made once per template and shared: read-only."""
    import plotly.io as pio

    chosen = pio.templates.default
    if chosen is None:
        return None
    template = chosen if not isinstance(chosen, str) else pio.templates[chosen]
    spec = _templates.get(id(template))
    if spec is None or spec[0] is not template:
        spec = _templates[id(template)] = (template, template.to_plotly_json())
    return spec[1]


def _typed_arrays(node, drop_none: bool = False):
    """``node`` with every array value of a dict written as Plotly.js's typed-array spec (base64), as
    ``Figure.to_dict`` writes them (``convert_to_base64``), but into new dicts and lists, never into ``node``; a
    list of plain values (hover text) is shared, not walked. ``drop_none``: a property set to None is left out, as
    Plotly leaves it out of a figure it builds (plain dicts, ``PlainFigure``)."""
    from _plotly_utils.basevalidators import is_homogeneous_array
    from _plotly_utils.utils import is_skipped_key, to_typed_array_spec

    def walk(n):
        if isinstance(n, dict):
            out = {}
            for k, v in n.items():
                if v is None:
                    if not drop_none:
                        out[k] = v
                elif type(v) in _PLAIN_VALUES or _skipped(k, is_skipped_key):  # a number or a string is no array
                    out[k] = v
                elif type(v) in _CONTAINERS:  # Plotly never counts a dict, list or tuple as an array: walked
                    out[k] = walk(v)
                else:
                    out[k] = to_typed_array_spec(v) if is_homogeneous_array(v) else walk(v)
            return out
        if isinstance(n, (list, tuple)) and n and isinstance(n[0], (dict, list, tuple)):
            return [walk(v) for v in n]
        return n

    return walk(node)


_PLAIN_VALUES = frozenset({str, int, float, bool})
_CONTAINERS = frozenset({dict, list, tuple})
_SKIPPED: dict[str, bool] = {}  # Plotly's answer for each key seen: a figure's few dozen keys recur in every figure


def _skipped(key, is_skipped_key) -> bool:
    known = _SKIPPED.get(key)
    if known is None:
        known = _SKIPPED[key] = bool(is_skipped_key(key))
    return known


def readable_x_labels(fig: go.Figure, plot_px: float) -> go.Figure:
    """The same figure with every x tick label readable and apart on a ``plot_px``-wide plot (a first screen, read
    from the back of a room): level if every label fits its column, else turned upright (-90°, one line of text
    per column), and only if even that is too tight, every k-th label. Never at 45°, where neighbours cross. Only
    an axis with its own tick labels (``ticktext``) is changed. A new figure, built without Plotly's validation
    (a validated copy took 15 ms for a 25-token pattern); ``fig`` is left as it was."""
    data, layout, plain = _stored(fig)
    first = data[0] if data else {}
    if first.get("x") is not None:
        n_cols = len(first["x"])
    elif first.get("z") is not None:
        n_cols = np.asarray(first["z"]).shape[-1]
    else:
        n_cols = None
    if plain:
        return PlainFigure(data, readable_x_layout(layout, plot_px, n_cols))
    return go.Figure(dict(data=data, layout=readable_x_layout(layout, plot_px, n_cols)), _validate=False)


def readable_x_layout(layout: dict, plot_px: float, n_cols: int | None = None) -> dict:
    """``layout`` (a figure's plain layout dict) with its x tick labels readable and apart on a ``plot_px``-wide
    plot of ``n_cols`` columns (the tick count if not given), as ``readable_x_labels`` describes: a new dict where
    the x axis changes, else ``layout`` itself."""
    ax = layout.get("xaxis") or {}
    vals, text = ax.get("tickvals"), ax.get("ticktext")
    if vals is None or text is None or not len(vals):
        return layout
    size = float((ax.get("tickfont") or {}).get("size") or (layout.get("font") or {}).get("size") or FONT["size"])
    per_col = plot_px / max(1, n_cols or 0, len(vals))
    if max(text_px(str(s), size) for s in text) + 6 <= per_col:
        return dict(layout, xaxis=dict(ax, tickangle=0))
    step = max(1, math.ceil(1.5 * size / per_col))  # an upright label is one line of text: its box ~1.45 × its size
    return dict(layout, xaxis=dict(ax, tickangle=-90, tickvals=list(vals)[::step], ticktext=list(text)[::step]))


def styled(fig: go.Figure, font_scale: float = 1.0, height_scale: float = 1.0) -> go.Figure:
    """The same figure with every font (and optionally its height) scaled: presenter mode's larger chart
    text. Works on this figure only; the module's defaults are never changed."""
    if font_scale == 1.0 and height_scale == 1.0:
        return fig
    lay = fig.layout.to_plotly_json() if hasattr(fig.layout, "to_plotly_json") else dict(fig.layout)

    def scale(node):
        if isinstance(node, dict):
            for k, v in node.items():
                if k in ("font", "tickfont") and isinstance(v, dict) and "size" in v:
                    v["size"] = round(v["size"] * font_scale)
                scale(v)
        elif isinstance(node, list):
            for v in node:
                scale(v)

    lay.setdefault("font", {}).setdefault("size", FONT["size"])
    scale(lay)
    if height_scale != 1.0 and lay.get("height"):
        lay["height"] = int(lay["height"] * height_scale)
    data = [t.to_plotly_json() if hasattr(t, "to_plotly_json") else dict(t) for t in fig.data]
    scale(data)
    return figure(data, lay)

