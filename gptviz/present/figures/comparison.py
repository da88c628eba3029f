"""Comparisons: two models side by side with their difference, the heads ranked by how much they changed, and two
continuations of one prompt that part at a forced token.

Pure functions: arrays and labels in, a figure out, with the conventions of ``base``.
"""
from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

import numpy as np
import plotly.graph_objects as go

from ..descriptions import NONNEGATIVE, PROBABILITY, SIGNED
from ..matrices import Matrix
from .base import TICK_FONT, axis, base_layout, color_args, escape_label, figure, ticks, unique_labels, wrap
from .charts import bar_chart, line_chart
from .heatmaps import _mask_trace, cell_points, heatmap

DIFF_LABEL = "B − A"


def pair_heatmaps(a: Matrix, b: Matrix, title_a: str, title_b: str, title: str = "",
                  height: Optional[int] = None) -> go.Figure:
    """Model A's and model B's matrix of one step next to each other, on one colour scale (the step's own kind:
    0..1 for probabilities, diverging around 0 for signed values), each axis named by its tokens."""
    finite = np.concatenate([v[np.isfinite(v)] for v in (np.asarray(a.values, float), np.asarray(b.values, float))])
    ca = color_args(a.kind, finite)
    nr = len(a.rows)
    layout = base_layout(title, height or int(min(680, max(300, 26 * nr + 170))))
    layout["annotations"] = []
    data = []
    for i, (m, t) in enumerate(((a, title_a), (b, title_b)), start=1):
        sfx = "" if i == 1 else str(i)
        x0, x1 = (0.0, 0.45) if i == 1 else (0.53, 0.98)
        xs, ys = unique_labels(m.hover_cols or m.cols), unique_labels(m.hover_rows or m.rows)
        data.append(dict(type="heatmap", z=np.asarray(m.values, float), x=xs, y=ys, xaxis=f"x{sfx}",
                         yaxis=f"y{sfx}", showscale=i == 2, colorbar=dict(tickfont=TICK_FONT),
                         hovertemplate=f"{t}<br>{m.row_title or 'row'} %{{y}}<br>{m.col_title or 'column'} %{{x}}"
                                       f"<br>value %{{z:.4g}}<extra></extra>", **ca))
        if m.masked is not None and m.masked.any():
            data.append(_mask_trace(m.masked, xs, ys, xaxis=f"x{sfx}", yaxis=f"y{sfx}"))
        xt, yt = ticks(m.cols), ticks(m.rows)
        xt["tickvals"] = [xs[j] for j in xt["tickvals"]]
        yt["tickvals"] = [ys[j] for j in yt["tickvals"]]
        layout[f"xaxis{sfx}"] = axis(m.col_title, domain=[x0, x1], anchor=f"y{sfx}", type="category", **xt)
        layout[f"yaxis{sfx}"] = axis(m.row_title if i == 1 else "", reverse=True, anchor=f"x{sfx}", type="category",
                                     **yt)
        layout["annotations"].append(dict(text=wrap(escape_label(t), 40), x=(x0 + x1) / 2, y=1.0, xref="paper",
                                          yref="paper", yanchor="bottom", showarrow=False, font=dict(size=15)))
    layout["margin"] = dict(l=10, r=10, t=90 if title else 70, b=10)
    return figure(data, layout)


def difference_heatmap(d: Matrix, title: str = "", show_values: bool = False,
                       height: Optional[int] = None) -> go.Figure:
    """B − A for one step: a diverging scale centred on 0 (white: no change), masked cells grey."""
    return heatmap(dataclasses.replace(d, kind=SIGNED), title, show_values=show_values, colorbar_title=DIFF_LABEL,
                   height=height)


def head_change_grid(changes: np.ndarray, title: str = "", measure: str = "") -> go.Figure:
    """Layer × head grid of how much each head's attention pattern changed (0: not at all), a sequential scale."""
    z = np.asarray(changes, dtype=float)
    L, H = z.shape
    ca = color_args(NONNEGATIVE, z)
    ca["zmax"] = max(float(ca["zmax"]), 1e-6)
    main = dict(type="heatmap", z=z, x=[f"H{h}" for h in range(H)], y=[f"L{layer}" for layer in range(L)],
                xgap=2, ygap=2, colorbar=dict(title=dict(text="change"), tickfont=TICK_FONT),
                hovertemplate=f"layer %{{y}} · head %{{x}}<br>{measure or 'change'} %{{z:.4f}}<extra></extra>", **ca)
    if L * H <= 400:
        main["texttemplate"] = "%{z:.2f}"
        main["textfont"] = dict(size=14 if L * H <= 64 else 11)
    layout = base_layout(title, int(min(640, max(220, 46 * L + 140))), xaxis=axis("head", type="category", side="top"),
                         yaxis=axis("layer", reverse=True, type="category"))
    layout["margin"] = dict(l=10, r=10, t=90, b=10)
    return figure([main], layout)


def head_change_bars(ranked: Sequence[tuple[int, int, float]], top: int = 12, title: str = "",
                     measure: str = "") -> go.Figure:
    """The ``top`` most changed heads, most changed first, as horizontal bars (0..1: both measures are at most 1)."""
    shown = list(ranked)[:top]
    fig = bar_chart([f"L{layer} H{head}" for layer, head, _ in shown], [v for _, _, v in shown], title=title,
                    x_title=measure, prob=True)
    return fig


def branch_paths(names: Sequence[str], tokens: Sequence[Sequence[str]], probs: Sequence[Sequence[float]],
                 parted_at: Optional[int] = None, title: str = "", clickable: bool = True) -> go.Figure:
    """Continuations as rows of tokens, one cell per generated step, coloured by the token's probability (0..1);
    the step where they part is outlined. ``clickable``: a click on a cell selects it (rows "r: name", columns
    "k: step k+1", so ``widgets.clicked_cell`` reads (row, step))."""
    n = max(len(t) for t in tokens)
    z = np.full((len(tokens), n), np.nan)
    text = [[""] * n for _ in tokens]
    for r, (toks, ps) in enumerate(zip(tokens, probs)):
        z[r, :len(ps)] = ps
        for k, t in enumerate(toks):
            text[r][k] = escape_label(str(t))
    xs = [f"{k}: step {k + 1}" for k in range(n)]
    ys = [f"{r}: {escape_label(str(name))}" for r, name in enumerate(names)]
    hover = [[f"{escape_label(str(names[r]))}, step {k + 1}<br>token “{text[r][k]}”<br>probability {z[r, k]:.4g}"
              for k in range(n)] for r in range(len(tokens))]
    main = dict(type="heatmap", z=z, x=xs, y=ys, text=text, texttemplate="%{text}", textfont=dict(size=15),
                xgap=2, ygap=2, colorbar=dict(title=dict(text="probability"), tickfont=TICK_FONT),
                **color_args(PROBABILITY, z))
    if clickable:
        main["hoverinfo"] = "skip"  # the cells' points carry the hover
    else:
        main["customdata"] = hover
        main["hovertemplate"] = "%{customdata}<extra></extra>"
    data = [main]
    if clickable:
        data.append(cell_points(xs, ys, hover))
    xt = ticks([str(k + 1) for k in range(n)])
    xt["tickvals"] = [xs[j] for j in xt["tickvals"]]
    layout = base_layout(title, 110 + 60 * len(tokens), xaxis=axis("generated step", type="category", **xt),
                         yaxis=axis("", reverse=True, type="category", tickmode="array", tickvals=ys,
                                    ticktext=[escape_label(str(s)) for s in names], tickfont=TICK_FONT))
    if parted_at is not None and 0 <= parted_at < n:
        layout["shapes"] = [dict(type="rect", xref="x", yref="paper", x0=parted_at - 0.5, x1=parted_at + 0.5, y0=0,
                                 y1=1, line=dict(color="#d62728", width=4), fillcolor="rgba(0,0,0,0)",
                                 name="they part here")]
    return figure(data, layout)


def branch_probs(series: dict[str, Sequence[float]], parted_at: Optional[int] = None,
                 title: str = "Each token's probability") -> go.Figure:
    """Each continuation's per-token probabilities by step (1 = the first generated token), with a line where they
    part."""
    n = max((len(v) for v in series.values()), default=0)
    fig = line_chart({escape_label(k): list(v) for k, v in series.items()}, x=list(range(1, n + 1)), title=title,
                     x_title="generated step", y_title="probability",
                     vline=None if parted_at is None else parted_at + 1)
    fig.layout.yaxis.range = [0, 1.02]
    return fig
