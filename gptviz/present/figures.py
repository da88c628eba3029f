"""Plotly figure builders. Each is a pure function: arrays and labels in, a figure out.

Conventions, the same on every chart:
- signed values: a diverging scale centred on 0 (blue below, red above, white at 0);
- probabilities: a fixed 0-to-1 scale;
- non-negative values (a norm's divisor, a loss): a sequential scale from 0;
- cells attention may not use are drawn grey and say "masked" in the hover, so they never look like 0;
- fonts large enough for a projector, axes labelled with tokens.
"""
from __future__ import annotations

import html
import math
import re
from typing import Optional, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.colors import get_colorscale

from ..config import ModelConfig
from .descriptions import NONNEGATIVE, PROBABILITY
from .matrices import Matrix

FONT = dict(size=16)
TICK_FONT = dict(size=14)
MASK_COLOR = "#9a9a9a"
# Explicit [position, colour] lists: a figure built without validation reaches plotly.js as is, and
# plotly.js reads some scale names the other way round from Plotly for Python (and knows no "_r").
SIGNED_SCALE = get_colorscale("RdBu_r")  # blue below 0, white at 0, red above
PROB_SCALE = get_colorscale("Blues")  # white at 0, dark blue at 1
NONNEG_SCALE = get_colorscale("Viridis")
MAX_TEXT_CELLS = 400  # numbers in cells only for small tensors
MAX_TICKS = 48


def color_args(kind: str, values: np.ndarray) -> dict:
    """Colour scale arguments for a kind of values (see the module doc)."""
    finite = values[np.isfinite(values)]
    if kind == PROBABILITY:
        return dict(colorscale=PROB_SCALE, zmin=0.0, zmax=1.0)
    if kind == NONNEGATIVE:
        top = float(finite.max()) if finite.size else 1.0
        return dict(colorscale=NONNEG_SCALE, zmin=0.0, zmax=top if top > 0 else 1.0)
    m = float(np.abs(finite).max()) if finite.size else 1.0
    m = m if m > 0 else 1.0
    return dict(colorscale=SIGNED_SCALE, zmin=-m, zmax=m, zmid=0.0)


def _figure(data: list, layout: dict) -> go.Figure:
    # Built from plain dicts and wrapped without validation: Plotly's object model costs ~15 ms per
    # heatmap, which a page of a dozen heatmaps cannot afford on every rerun. Tests check the result.
    return go.Figure(dict(data=data, layout=layout), _validate=False)


def _ticks(labels: Sequence[str]) -> dict:
    n = len(labels)
    step = max(1, math.ceil(n / MAX_TICKS))
    idx = list(range(0, n, step))
    return dict(tickmode="array", tickvals=idx, ticktext=[labels[i] for i in idx], tickfont=TICK_FONT)


def _axis(title: str = "", reverse: bool = False, **extra) -> dict:
    ax = dict(title=dict(text=title), showgrid=False, zeroline=False, **extra)
    if reverse:
        ax["autorange"] = "reversed"
    return ax


def _base_layout(title: str, height: int, **extra) -> dict:
    return dict(title=dict(text=title, font=dict(size=18)), font=FONT, height=height,
                margin=dict(l=10, r=10, t=60, b=10), plot_bgcolor="white", **extra)


def _height(n_rows: int) -> int:
    return int(min(720, max(260, 30 * n_rows + 150)))


def _mask_trace(masked: np.ndarray, x=None, y=None, **extra) -> dict:
    t = dict(type="heatmap", z=np.where(masked, 1.0, np.nan), showscale=False, name="masked", hoverongaps=False,
             colorscale=[[0, MASK_COLOR], [1, MASK_COLOR]], zmin=0, zmax=1, hovertemplate="masked<extra></extra>")
    if x is not None:
        t["x"], t["y"] = x, y
    t.update(extra)
    return t


def _unique(labels: Sequence[str]) -> list[str]:
    """Labels made distinct (a repeated token gets its index), so each can name a category on an axis."""
    seen: dict[str, int] = {}
    out = []
    for i, lab in enumerate(labels):
        lab = str(lab)
        out.append(lab if lab not in seen else f"{lab} [{i}]")
        seen[lab] = 1
    return out


def cell_points(xs: Sequence, ys: Sequence, hover: Sequence[Sequence[str]]) -> dict:
    """An invisible point at the centre of every cell of a heatmap, carrying that cell's hover text.

    plotly.js cannot select a heatmap cell (a heatmap trace has no point selection), so in Streamlit's
    ``selection_mode="points"`` a click on a heatmap alone returns no point. A click on a cell selects this
    cell's point instead: its ``x`` and ``y`` are the cell's column and row. ``hover[r][c]`` is cell (r, c)'s
    hover text (the heatmap's own hover is switched off, so there is one label, the same as before)."""
    R, C = len(ys), len(xs)
    return dict(type="scatter", mode="markers", name="cells", showlegend=False,
                x=[xs[c] for r in range(R) for c in range(C)], y=[ys[r] for r in range(R) for c in range(C)],
                text=[hover[r][c] for r in range(R) for c in range(C)], hovertemplate="%{text}<extra></extra>",
                marker=dict(symbol="square", size=28, opacity=0), selected=dict(marker=dict(opacity=0)),
                unselected=dict(marker=dict(opacity=0)))


def heatmap(m: Matrix, title: str = "", show_values: bool = False, colorbar_title: str = "",
            height: Optional[int] = None, highlight_row: Optional[int] = None,
            highlight_col: Optional[int] = None, clickable: bool = False) -> go.Figure:
    """One step as a heatmap: rows are positions (tokens), columns whatever the step's last axis is.

    Each row and column is a category named by its hover label (e.g. "3: 'the'"), so tokens that repeat
    stay distinct cells; the ticks show the plain token. ``clickable``: a click on a cell selects it in
    Streamlit's points selection mode (see ``cell_points``).
    """
    z = np.asarray(m.values, dtype=float)
    nr, nc = z.shape
    xs = _unique(m.hover_cols or m.cols)
    ys = _unique(m.hover_rows or m.rows)
    main = dict(type="heatmap", z=z, x=xs, y=ys, colorbar=dict(title=dict(text=colorbar_title), tickfont=TICK_FONT),
                hovertemplate=f"{m.row_title or 'row'} %{{y}}<br>{m.col_title or 'column'} %{{x}}<br>value %{{z:.4g}}<extra></extra>",
                **color_args(m.kind, z))
    if show_values and nr * nc <= MAX_TEXT_CELLS:
        main["texttemplate"] = "%{z:.2f}"
        main["textfont"] = dict(size=12)
    data = [main]
    if m.masked is not None and m.masked.any():
        data.append(_mask_trace(m.masked, xs, ys, hovertemplate=(
            f"{m.row_title} %{{y}}<br>{m.col_title} %{{x}}<br>masked: this key is in the future or is padding<extra></extra>")))
    if m.note:
        title = f"{title} <span style='font-size:13px'>({m.note})</span>" if title else m.note
    xt, yt = _ticks(m.cols), _ticks(m.rows)
    xt["tickvals"] = [xs[i] for i in xt["tickvals"]]
    yt["tickvals"] = [ys[i] for i in yt["tickvals"]]
    layout = _base_layout(title, height or _height(nr),
                          xaxis=_axis(m.col_title, type="category", **xt),
                          yaxis=_axis(m.row_title, reverse=True, type="category", **yt))
    shapes = outline_shapes(nr, nc, highlight_row, highlight_col)
    if shapes:
        layout["shapes"] = shapes
    if clickable:
        rt, ct = m.row_title or "row", m.col_title or "column"
        masked = m.masked if m.masked is not None else np.zeros(z.shape, dtype=bool)
        hover = [[f"{rt} {ys[r]}<br>{ct} {xs[c]}<br>" + ("masked: this key is in the future or is padding"
                                                          if masked[r, c] else f"value {z[r, c]:.4g}")
                  for c in range(nc)] for r in range(nr)]
        for t in data:
            t["hoverinfo"] = "skip"
        data.append(cell_points(xs, ys, hover))
    return _figure(data, layout)


HIGHLIGHT = "#111111"


def outline_shapes(n_rows: int, n_cols: int, row: Optional[int] = None, col: Optional[int] = None) -> list[dict]:
    """Rectangles outlining one row and/or one column of a heatmap (a selected query and key)."""
    out = []
    line = dict(color=HIGHLIGHT, width=3)
    if row is not None and 0 <= row < n_rows:
        out.append(dict(type="rect", xref="x", yref="y", x0=-0.5, x1=n_cols - 0.5, y0=row - 0.5, y1=row + 0.5,
                        line=line, fillcolor="rgba(0,0,0,0)", name="selected query"))
    if col is not None and 0 <= col < n_cols:
        out.append(dict(type="rect", xref="x", yref="y", x0=col - 0.5, x1=col + 0.5, y0=-0.5, y1=n_rows - 0.5,
                        line=dict(color=HIGHLIGHT, width=3, dash="dot"), fillcolor="rgba(0,0,0,0)",
                        name="selected key"))
    return out


def tiled_heatmap(blocks: Sequence[Sequence[np.ndarray]], row_names: Sequence[str], col_names: Sequence[str],
                  kind: str = PROBABILITY, title: str = "", masked: Optional[np.ndarray] = None,
                  height: Optional[int] = None) -> go.Figure:
    """A grid of equal-sized matrices in one heatmap (fast even for 12 × 12 heads), one-cell gaps between.

    blocks[r][c]: (T, T), or (T, S) for cross-attention (decoder rows × encoder columns). ``masked`` (of a
    tile's shape) is drawn grey in every tile.
    """
    R, C = len(blocks), len(blocks[0])
    T, S = np.asarray(blocks[0][0]).shape[:2]
    g, gc = T + 1, S + 1
    big = np.full((R * g - 1, C * gc - 1), np.nan)
    mask_big = np.zeros_like(big, dtype=bool)
    for r in range(R):
        for c in range(C):
            tile = np.asarray(blocks[r][c], dtype=float)
            if masked is not None:
                mask_big[r * g:r * g + T, c * gc:c * gc + S] = masked
                tile = np.where(masked, np.nan, tile)
            big[r * g:r * g + T, c * gc:c * gc + S] = tile
    data = [dict(type="heatmap", z=big, hovertemplate="value %{z:.3f}<extra></extra>", colorbar=dict(tickfont=TICK_FONT),
                 **color_args(kind, big))]
    if mask_big.any():
        data.append(_mask_trace(mask_big))
    layout = _base_layout(title, height or int(min(900, max(300, 60 + R * max(90, 8 * g)))),
                          xaxis=_axis(tickmode="array", tickvals=[c * gc + (S - 1) / 2 for c in range(C)],
                                      ticktext=list(col_names), tickfont=TICK_FONT),
                          yaxis=_axis(reverse=True, tickmode="array", tickvals=[r * g + (T - 1) / 2 for r in range(R)],
                                      ticktext=list(row_names), tickfont=TICK_FONT))
    return _figure(data, layout)


def side_by_side(left: Matrix, right: Matrix, left_title: str, right_title: str, height: Optional[int] = None) -> go.Figure:
    """Two same-shaped matrices next to each other on one colour scale (e.g. a plain average vs a learned pattern)."""
    both = np.concatenate([left.values[np.isfinite(left.values)], right.values[np.isfinite(right.values)]])
    ca = color_args(left.kind, both)
    data, layout = [], _base_layout("", height or int(min(640, max(300, 28 * len(left.rows) + 140))))
    layout["annotations"] = []
    for i, (m, t) in enumerate(((left, left_title), (right, right_title)), start=1):
        sfx = "" if i == 1 else str(i)
        x0, x1 = (0.0, 0.44) if i == 1 else (0.52, 0.96)
        data.append(dict(type="heatmap", z=m.values, xaxis=f"x{sfx}", yaxis=f"y{sfx}", showscale=i == 2,
                         hovertemplate="query %{y} · key %{x}<br>%{z:.3f}<extra></extra>",
                         colorbar=dict(tickfont=TICK_FONT), **ca))
        if m.masked is not None and m.masked.any():
            data.append(_mask_trace(m.masked, xaxis=f"x{sfx}", yaxis=f"y{sfx}"))
        layout[f"xaxis{sfx}"] = _axis("key", domain=[x0, x1], anchor=f"y{sfx}", **_ticks(m.cols))
        layout[f"yaxis{sfx}"] = _axis("query" if i == 1 else "", reverse=True, anchor=f"x{sfx}", **_ticks(m.rows))
        layout["annotations"].append(dict(text=wrap(t, 30), x=(x0 + x1) / 2, y=1.0, xref="paper", yref="paper",
                                          yanchor="bottom", showarrow=False, font=dict(size=15)))
    layout["margin"] = dict(l=10, r=10, t=80, b=10)  # room for two-line subplot titles
    return _figure(data, layout)


def wrap(text: str, width: int) -> str:
    """``text`` broken into lines of at most ``width`` characters at spaces (``<br>`` between lines), so two
    titles side by side never run into each other."""
    lines, cur = [], ""
    for word in text.split(" "):
        if cur and len(cur) + 1 + len(word) > width:
            lines.append(cur)
            cur = word
        else:
            cur = f"{cur} {word}" if cur else word
    lines.append(cur)
    return "<br>".join(lines)


# --------------------------------------------------------------------------- fixed margins
# Plotly's automatic margins measure every tick label in the browser and then draw the chart a second time:
# a third of the browser's drawing time on the attention page. ``fixed_margins`` works the margins out here
# from the labels instead (a character of an ASCII label is about 0.62 em wide; others up to 1 em).
_CHAR_EM, _WIDE_EM = 0.62, 1.0


def _text_px(label, size: float) -> float:
    return sum(_CHAR_EM if ord(c) < 128 else _WIDE_EM for c in str(label)) * size


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
    lay = fig.layout.to_plotly_json() if hasattr(fig.layout, "to_plotly_json") else dict(fig.layout)
    data = [t.to_plotly_json() if hasattr(t, "to_plotly_json") else dict(t) for t in fig.data]
    legends = sum(1 for t in data if t.get("type") in ("scatter", "bar", "scattergl") and t.get("showlegend") is not False)
    if legends >= 2 or lay.get("showlegend"):
        return fig
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
        widest = max((_text_px(l, size) for l in labels), default=0.0)
        if key[0] == "y":
            side = "r" if ax.get("side") == "right" else "l"
            need[side] = max(need[side], 10 + widest + 8 + title_px)
        else:
            dom = ax.get("domain") or [0, 1]
            room = plot_width * max(0.1, dom[1] - dom[0]) / max(1, len(labels))
            tall = size * 1.3
            if labels and widest + 4 > room:  # crowded labels turn: by 45° when there is room, else on their side
                angle = ax.get("tickangle")
                if angle is None or angle == "auto":
                    angle = -45 if room >= size * 1.5 else -90
                    lay[key] = dict(ax, tickangle=angle)
                turn = abs(math.sin(math.radians(float(angle))))
                tall = widest * turn + size * (1.3 - turn)
            side = "t" if ax.get("side") == "top" else "b"
            extra = (tall + 8 + title_px) if labels or title_px else 0.0
            need[side] = (need[side] + extra) if side == "t" else max(need[side], 10 + extra)
    bars = [t for t in data if t.get("type") == "heatmap" and t.get("showscale") is not False]
    if bars:
        tick = max(float(((t.get("colorbar") or {}).get("tickfont") or {}).get("size") or base) for t in bars)
        need["r"] = max(need["r"], 30 + 12 + _text_px("-0.000", tick) + 16)
    margin = {k: int(math.ceil(max(float(m.get(k, 0) or 0), v))) for k, v in need.items()}
    margin.update({k: v for k, v in m.items() if k not in ("l", "r", "t", "b", "autoexpand")})
    margin["autoexpand"] = False
    lay["margin"] = margin
    if bars and float(lay.get("height") or 450) - margin["t"] - margin["b"] < 8 * tick:
        for t in bars:  # a short chart: its colour bar labels only its ends and middle, never overlapping
            t["colorbar"] = dict(t.get("colorbar") or {}, nticks=3)
    for key in axes:
        lay[key] = dict(lay.get(key) or {}, automargin=False)
    return _figure(data, lay)


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
    return _figure(data, lay)


def bar_chart(labels: Sequence[str], values: Sequence[float], title: str = "", x_title: str = "",
              y_title: str = "", highlight: Optional[int] = None, horizontal: bool = True,
              prob: bool = False) -> go.Figure:
    """Bars, e.g. the top-k next tokens or each parameter's gradient norm. ``highlight`` colours one bar."""
    colors = ["#1f77b4"] * len(values)
    if highlight is not None and 0 <= highlight < len(values):
        colors[highlight] = "#d62728"
    pos = list(range(len(labels)))
    tick = dict(tickmode="array", tickvals=pos, ticktext=list(labels), tickfont=TICK_FONT)
    rng = dict(range=[0, 1]) if prob else {}
    if horizontal:
        bar = dict(type="bar", x=list(values), y=pos, orientation="h", marker=dict(color=colors),
                   text=[f"{v:.3g}" for v in values], textposition="auto", customdata=list(labels),
                   hovertemplate="%{customdata}: %{x:.4g}<extra></extra>")
        xa, ya = _axis(x_title, **rng), _axis(y_title, reverse=True, **tick)
        height = int(min(720, max(260, 28 * len(labels) + 120)))
    else:
        bar = dict(type="bar", x=pos, y=list(values), marker=dict(color=colors), customdata=list(labels),
                   hovertemplate="%{customdata}: %{y:.4g}<extra></extra>")
        xa, ya = _axis(x_title, **tick), _axis(y_title, **rng)
        height = 420
    return _figure([bar], _base_layout(title, height, xaxis=xa, yaxis=ya))


def line_chart(series: dict[str, Sequence[float]], x: Optional[Sequence[float]] = None, title: str = "",
               x_title: str = "", y_title: str = "", hlines: Optional[dict[str, float]] = None,
               vline: Optional[float] = None, y2: Optional[dict[str, Sequence[float]]] = None) -> go.Figure:
    """Lines (e.g. a loss curve), with optional labelled horizontal reference lines (e.g. ln V), a vertical
    marker at ``vline`` (e.g. the step shown) and ``y2`` series on a second y axis (e.g. a score 0..1)."""
    data = []
    for name, ys in series.items():
        xs = list(x) if x is not None else list(range(len(ys)))
        data.append(dict(type="scatter", x=xs, y=list(ys), mode="lines+markers" if len(ys) < 40 else "lines", name=name))
    layout = _base_layout(title, 380, xaxis=dict(title=dict(text=x_title)), yaxis=dict(title=dict(text=y_title)),
                          legend=dict(font=TICK_FONT))
    layout["plot_bgcolor"] = None
    shapes, notes = [], []
    for label, yv in (hlines or {}).items():
        shapes.append(dict(type="line", xref="paper", x0=0, x1=1, yref="y", y0=yv, y1=yv,
                           line=dict(dash="dash", color="#777")))
        notes.append(dict(text=label, xref="paper", x=1, y=yv, yref="y", xanchor="right", yanchor="bottom",
                          showarrow=False, font=TICK_FONT))
    if vline is not None:
        shapes.append(dict(type="line", xref="x", x0=vline, x1=vline, yref="paper", y0=0, y1=1,
                           line=dict(color="#111", width=2)))
    for name, ys in (y2 or {}).items():
        xs = list(x) if x is not None else list(range(len(ys)))
        data.append(dict(type="scatter", x=xs, y=list(ys), mode="lines", name=name, yaxis="y2",
                         line=dict(dash="dot", width=3)))
    if y2:
        layout["yaxis2"] = dict(overlaying="y", side="right", range=[0, 1], title=dict(text="score"), showgrid=False,
                                tickvals=[0, 0.25, 0.5, 0.75, 1])
        layout["legend"] = dict(font=TICK_FONT, orientation="h", y=-0.2)
    layout["shapes"], layout["annotations"] = shapes, notes
    return _figure(data, layout)


# --------------------------------------------------------------------------- non-Plotly pictures
_CHIP_COLORS = ["#ffd6a5", "#caffbf", "#9bf6ff", "#bdb2ff", "#ffc6ff", "#fdffb6", "#a0c4ff", "#ffadad"]


def token_chips_html(labels: Sequence[str], ids: Sequence[int], pad_from: Optional[int] = None) -> str:
    """Tokens as coloured chips with their ids underneath. Colours follow the id, so repeats match."""
    out = ['<div style="display:flex;flex-wrap:wrap;gap:6px;font-size:20px;line-height:1.2">']
    for i, (lab, tid) in enumerate(zip(labels, ids)):
        pad = pad_from is not None and i >= pad_from
        bg = "#e0e0e0" if pad else _CHIP_COLORS[int(tid) % len(_CHIP_COLORS)]
        border = "2px dashed #888" if pad else "1px solid #999"
        out.append(
            f'<span title="position {i}, id {int(tid)}" style="background:{bg};border:{border};border-radius:6px;'
            f'padding:4px 8px;color:#111;display:inline-flex;flex-direction:column;align-items:center">'
            f'<span style="white-space:pre">{html.escape(lab)}</span>'
            f'<span style="font-size:13px;color:#444">{int(tid)}{" pad" if pad else ""}</span></span>'
        )
    out.append("</div>")
    return "".join(out)


def architecture_parts(cfg: ModelConfig, B: int, T: int) -> list[dict]:
    """The model as a pipeline of boxes, top to bottom: each {"lines", "fill", "edge"} where ``edge`` is the
    live tensor shape on the arrow into the box (and ``side`` a box feeding in from the side)."""
    C, V, H, D, M, L = cfg.n_embd, cfg.vocab_size, cfg.n_head, cfg.d_head, cfg.d_mlp, cfg.n_layer
    pre = cfg.norm_placement == "pre"
    norm = "LayerNorm" if cfg.norm == "layernorm" else "RMSNorm"
    pos = {"learned": f"wpe: learned [{cfg.block_size}×{C}]", "sinusoidal": f"sin/cos table [{cfg.block_size}×{C}]",
           "rope": "RoPE (inside attention)", "none": "no position signal"}[cfg.pos_encoding]
    act = {"gelu": "GELU", "gelu_tanh": "GELU (tanh)", "relu": "ReLU", "tanh": "tanh"}[cfg.activation]
    parts = [dict(lines=["token ids x", f"[B={B} × T={T}]"], fill="#fff3d6", edge=None),
             dict(lines=["wte: token embedding", f"[V={V} × C={C}]"], fill="#eef3fb", edge=None)]
    if cfg.pos_encoding in ("learned", "sinusoidal"):
        parts.append(dict(lines=["+"], fill="#eef3fb", edge=f"[{B}×{T}×{C}]", side=(pos, f"[{T}×{C}]")))
    attn_in = f"{norm} ln_1 → " if pre else ""
    mlp_in = f"{norm} ln_2 → " if pre else ""
    block = [f"× {L} block{'s' if L > 1 else ''}",
             f"{attn_in}attention: {H} head{'s' if H > 1 else ''} × d_head={D}",
             f"QKV [{B}×{T}×{3 * H * D}] → scores [{B}×{H}×{T}×{T}] → z [{B}×{T}×{H * D}] → + residual"
             + ("" if pre else f" → {norm} ln_1")]
    block.append("(attention only: no MLP)" if cfg.attn_only else
                 f"{mlp_in}MLP: {C} → {M} ({act}) → {C} → + residual" + ("" if pre else f" → {norm} ln_2"))
    parts.append(dict(lines=block, fill="#e8f5e9", edge=f"[{B}×{T}×{C}]"))
    if pre:
        parts.append(dict(lines=[f"{norm} ln_f"], fill="#eef3fb", edge=f"[{B}×{T}×{C}]"))
    tied = " (tied to wte)" if cfg.tie_weights else ""
    parts.append(dict(lines=[f"lm_head{tied}", f"[C={C} × V={V}]"], fill="#eef3fb", edge=f"[{B}×{T}×{C}]"))
    parts.append(dict(lines=["softmax → cross-entropy loss"], fill="#fdecea", edge=f"logits [{B}×{T}×{V}]"))
    return parts


def architecture_dot(cfg: ModelConfig, B: int, T: int) -> str:
    """The model as a Graphviz pipeline, each arrow labelled with the live tensor shape."""
    lines = ["digraph G {", "rankdir=TB; node [shape=box, style=\"rounded,filled\", fontsize=14, fontname=Helvetica];",
             "edge [fontsize=12, fontname=Helvetica];"]
    for i, p in enumerate(architecture_parts(cfg, B, T)):
        label = "\\n".join(p["lines"])
        shape = ", shape=circle" if p["lines"] == ["+"] else ""
        lines.append(f'n{i} [label="{label}", fillcolor="{p["fill"]}"{shape}];')
        if i:
            lines.append(f"n{i - 1} -> n{i}" + (f' [label="{p["edge"]}"]' if p["edge"] else "") + ";")
        if p.get("side"):
            lines += [f's{i} [label="{p["side"][0]}", fillcolor="#eef3fb"];', f's{i} -> n{i} [label="{p["side"][1]}"];']
    return "\n".join(lines + ["}"])


def architecture_html(cfg: ModelConfig, B: int, T: int) -> str:
    """The same pipeline as HTML boxes and arrows: quick for a browser to draw (no layout engine)."""
    out = ['<div style="display:flex;flex-direction:column;align-items:center;gap:0;font-size:17px;'
           'line-height:1.35;font-family:sans-serif">']
    for p in architecture_parts(cfg, B, T):
        if p["edge"] is not None or len(out) > 1:
            label = html.escape(p["edge"] or "")
            out.append('<div style="display:flex;flex-direction:column;align-items:center;color:#555;font-size:14px">'
                       f'<div style="width:2px;height:14px;background:#555"></div>{label}'
                       '<div style="width:0;height:0;border-left:7px solid transparent;border-right:7px solid '
                       'transparent;border-top:9px solid #555"></div></div>')
        side = ""
        if p.get("side"):
            side = (f'<div style="border:1px solid #999;border-radius:10px;background:#eef3fb;padding:6px 12px;'
                    f'margin-right:10px">{html.escape(p["side"][0])}</div><span style="color:#555;font-size:14px;'
                    f'margin-right:10px">{html.escape(p["side"][1])} →</span>')
        body = "<br>".join(html.escape(x) for x in p["lines"])
        out.append(f'<div style="display:flex;align-items:center">{side}<div style="border:1px solid #999;'
                   f'border-radius:12px;background:{p["fill"]};padding:8px 16px;text-align:center">{body}</div></div>')
    out.append("</div>")
    return "".join(out)


def token_grid(tokens: Sequence[Sequence[str]], ids: np.ndarray, mask: np.ndarray, title: str = "",
               ignore_label: str = "—") -> go.Figure:
    """A B×T grid of tokens (e.g. x or y): each cell shows its token and id; padding is grey.

    ids: (B, T), -100 where there is no target; mask: (B, T) 1 for a real cell, 0 for padding.
    """
    ids = np.asarray(ids)
    B, T = ids.shape
    real = (np.asarray(mask) > 0) & (ids >= 0)
    text = [[(f"{html.escape(tokens[b][t])}<br>{int(ids[b, t])}" if real[b, t] else ignore_label) for t in range(T)]
            for b in range(B)]
    xs, ys = list(range(T)), list(range(B))
    data = [dict(type="heatmap", z=np.where(real, 1.0, np.nan), x=xs, y=ys, colorscale=[[0, "#dbe8fb"], [1, "#dbe8fb"]],
                 showscale=False, text=text, texttemplate="%{text}", textfont=dict(size=15), xgap=3, ygap=3,
                 hovertemplate="row %{y}, position %{x}<br>%{text}<extra></extra>")]
    if (~real).any():
        data.append(dict(type="heatmap", z=np.where(real, np.nan, 1.0), x=xs, y=ys, showscale=False, xgap=3, ygap=3,
                         colorscale=[[0, "#d0d0d0"], [1, "#d0d0d0"]], text=text, texttemplate="%{text}",
                         hovertemplate="row %{y}, position %{x}: padding / no target<extra></extra>"))
    layout = _base_layout(title, int(min(600, 90 + 62 * B)),
                          xaxis=_axis("position t", tickmode="array", tickvals=xs, ticktext=[str(t) for t in xs], tickfont=TICK_FONT),
                          yaxis=_axis("batch row b", reverse=True, tickmode="array", tickvals=ys, ticktext=[str(b) for b in ys],
                                      tickfont=TICK_FONT))
    return _figure(data, layout)


HEAD_SHORT = {"previous": "prev", "induction": "ind", "duplicate": "dup", "first": "1st", "current": "self"}


def head_grid(best: np.ndarray, labels: np.ndarray, title: str = "", hover: Optional[np.ndarray] = None,
              height: Optional[int] = None) -> go.Figure:
    """Layer × head: each cell coloured by its best score (0..1) and labelled with that kind of head.

    best, labels: (n_layer, n_head); ``hover`` (n_layer, n_head) strings with every score, for the tooltip.
    """
    best = np.asarray(best, dtype=float)
    L, H = best.shape
    # The grid usually sits in half a page (about 300 px of cells): the words shrink to fit their cell,
    # and become short forms when even 11 px would not fit. Every cell prints its score, so no colour bar.
    words = [[str(labels[l, h]) for h in range(H)] for l in range(L)]
    longest = max((len(w) for row in words for w in row), default=1)
    size = int(min(14, 300 / H / (_CHAR_EM * max(longest, 4))))
    if size < 11:
        words = [[HEAD_SHORT.get(w, w[:4]) for w in row] for row in words]
        size = int(max(9, min(14, 300 / H / (_CHAR_EM * 4))))
    text = [[f"{words[l][h]}<br>{best[l, h]:.2f}" for h in range(H)] for l in range(L)]
    xs, ys = [f"H{h}" for h in range(H)], [f"L{l}" for l in range(L)]
    main = dict(type="heatmap", z=best, x=xs, y=ys, text=text, texttemplate="%{text}", textfont=dict(size=size),
                showscale=False, colorscale=PROB_SCALE, zmin=0.0, zmax=1.0, xgap=2, ygap=2, hoverinfo="skip")
    text = [[f"{labels[l, h]}<br>{best[l, h]:.2f}" for h in range(H)] for l in range(L)]
    tips = hover if hover is not None else np.array(text, dtype=object)
    # a click on a cell selects its (invisible) point: a heatmap alone cannot be point-selected (see cell_points)
    cells = cell_points(xs, ys, [[f"layer {ys[l]} · head {xs[h]}<br>{tips[l][h]}" for h in range(H)] for l in range(L)])
    layout = _base_layout(title, height or int(min(560, max(220, 70 * L + 120))),
                          xaxis=_axis("", type="category", side="top"),
                          yaxis=_axis("layer", reverse=True, type="category"))
    layout["margin"] = dict(l=10, r=10, t=80, b=10)
    layout["title"]["y"] = 0.98  # above the head labels, which sit on top
    return _figure([main, cells], layout)
