"""Heatmaps: one step's matrix, a grid of heads' patterns, two patterns side by side, and grids of labelled cells.

Pure functions: arrays and labels in, a figure out, with the conventions of ``base``.
"""
from __future__ import annotations

import html
import math
import warnings
from typing import Optional, Sequence

import numpy as np
import plotly.graph_objects as go

from ..descriptions import PROBABILITY
from ..matrices import Matrix
from .base import (
    CHAR_EM,
    MASK_COLOR,
    MAX_TEXT_CELLS,
    PROB_SCALE,
    TICK_FONT,
    axis,
    base_layout,
    color_args,
    figure,
    ticks,
    unique_labels,
    wrap,
)
from .finishing import readable_x_layout


def _height(n_rows: int) -> int:
    """A heatmap's height in pixels for ``n_rows`` rows, kept between 260 and 720."""
    return int(min(720, max(260, 30 * n_rows + 150)))


def _mask_trace(masked: np.ndarray, x=None, y=None, **extra) -> dict:
    """A grey heatmap over the ``masked`` cells, its hover saying "masked" (so a masked cell never looks like 0)."""
    t = dict(type="heatmap", z=np.where(masked, 1.0, np.nan), showscale=False, name="masked", hoverongaps=False,
             colorscale=[[0, MASK_COLOR], [1, MASK_COLOR]], zmin=0, zmax=1, hovertemplate="masked<extra></extra>")
    if x is not None:
        t["x"], t["y"] = x, y
    t.update(extra)
    return t


def cell_points(xs: Sequence, ys: Sequence, hover: Sequence[Sequence[str]]) -> dict:
    """An invisible point at the centre of every cell of a heatmap, carrying that cell's hover text.

    plotly.js cannot select a heatmap cell (a heatmap trace has no point selection), so in Streamlit's
    ``selection_mode="points"`` a click on a heatmap alone returns no point. A click on a cell selects this
    cell's point instead: its ``x`` and ``y`` are the cell's column and row. ``hover[r][c]`` is cell (r, c)'s
    hover text (the heatmap's own hover is switched off, so there is one label, the same as before)."""
    R, C = len(ys), len(xs)
    cells = [(r, c) for r in range(R) for c in range(C)]
    return _click_targets(x=[xs[c] for _, c in cells], y=[ys[r] for r, _ in cells],
                          text=[hover[r][c] for r, c in cells], hovertemplate="%{text}<extra></extra>")


def _click_targets(**points) -> dict:
    """The invisible, selectable points named "cells" that ``cell_points`` and ``value_cell_points`` lay over a
    heatmap (``points``: their coordinates and hover), one look for both."""
    return dict(type="scatter", mode="markers", name="cells", showlegend=False, **points,
                marker=dict(symbol="square", size=28, opacity=0), selected=dict(marker=dict(opacity=0)),
                unselected=dict(marker=dict(opacity=0)))


MASKED_WORDS = "masked: this key is in the future or is padding"


def value_cell_points(xs: Sequence, ys: Sequence, z: np.ndarray, masked: np.ndarray, row_title: str,
                      col_title: str) -> list[dict]:
    """``cell_points`` for a heatmap of values, lighter to send: a cell's hover is ``row_title`` and its row label,
    ``col_title`` and its column label, then its value to 4 significant digits, or, for a ``masked`` cell, that it
    is masked. No string is written per cell besides the point's own ``x`` and ``y``: the points lie on a second
    pair of axes (``cell_axes``), over the heatmap's and matching them, where Plotly's hover template reads a
    category by its name, the whole label ("3: 'the'"); on the heatmap's own axes it would read their tick text,
    the token without its position. The value comes from the point's ``customdata`` (a number). Two traces, the
    cells with a value and the masked ones, both named "cells"; together they hold one point per cell, in row-major
    order within each. (A 31-token pattern's chart: 68 KB with each label written twice more as hover text, 40 KB
    this way.)"""
    R, C = len(ys), len(xs)
    rows, cols = np.divmod(np.arange(R * C), C)
    flat = np.asarray(masked, dtype=bool).reshape(-1)
    out = []
    for hidden, tail in ((False, "value %{customdata:.4~g}"), (True, MASKED_WORDS)):
        pick = flat == hidden
        if not pick.any():
            continue
        template = f"{row_title} %{{y}}<br>{col_title} %{{x}}<br>{tail}<extra></extra>"
        t = _click_targets(x=[xs[c] for c in cols[pick]], y=[ys[r] for r in rows[pick]], xaxis="x2", yaxis="y2",
                           hovertemplate=template)
        if not hidden:
            t["customdata"] = np.asarray(z, dtype=float).reshape(-1)[pick]
        out.append(t)
    return out


def cell_axes(xs: Sequence, ys: Sequence) -> dict:
    """The layout's second pair of axes for ``value_cell_points``: over the heatmap's, matching their ranges (a
    zoom moves both) and their categories in the same order, and showing nothing."""
    return dict(xaxis2=dict(overlaying="x", matches="x", visible=False, type="category", categoryorder="array",
                            categoryarray=list(xs)),
                yaxis2=dict(overlaying="y", matches="y", visible=False, type="category", categoryorder="array",
                            categoryarray=list(ys)))


def heatmap(m: Matrix, title: str = "", show_values: bool = False, colorbar_title: str = "",
            height: Optional[int] = None, highlight_row: Optional[int] = None,
            highlight_col: Optional[int] = None, clickable: bool = False,
            plot_px: Optional[float] = None) -> go.Figure:
    """One step as a heatmap: rows are positions (tokens), columns whatever the step's last axis is.

    Each row and column is a category named by its hover label (e.g. "3: 'the'"), so tokens that repeat
    stay distinct cells; the ticks show the plain token. ``clickable``: a click on a cell selects it in
    Streamlit's points selection mode (see ``cell_points``). ``plot_px``: the plot's width on screen, to stand the
    column labels level or upright and apart (``readable_x_labels``' rule, applied before the figure is built).
    """
    z = np.asarray(m.values, dtype=float)
    nr, nc = z.shape
    if nr * nc > BIG_CELLS:
        return big_heatmap(m, title, colorbar_title, height, highlight_row, highlight_col)
    xs = unique_labels(m.hover_cols or m.cols)
    ys = unique_labels(m.hover_rows or m.rows)
    main = dict(type="heatmap", z=z, x=xs, y=ys, colorbar=dict(title=dict(text=colorbar_title), tickfont=TICK_FONT),
                hovertemplate=f"{m.row_title or 'row'} %{{y}}<br>{m.col_title or 'column'} %{{x}}<br>"
                              f"value %{{z:.4g}}<extra></extra>",
                **color_args(m.kind, z))
    if show_values and nr * nc <= MAX_TEXT_CELLS:
        main["texttemplate"] = "%{z:.2f}"
        main["textfont"] = dict(size=12)
    data = [main]
    if m.masked is not None and m.masked.any():
        data.append(_mask_trace(m.masked, xs, ys, hovertemplate=(
            f"{m.row_title} %{{y}}<br>{m.col_title} %{{x}}<br>{MASKED_WORDS}<extra></extra>")))
    if m.note:
        title = f"{title} <span style='font-size:13px'>({m.note})</span>" if title else m.note
    xt, yt = ticks(m.cols), ticks(m.rows)
    xt["tickvals"] = [xs[i] for i in xt["tickvals"]]
    yt["tickvals"] = [ys[i] for i in yt["tickvals"]]
    layout = base_layout(title, height or _height(nr),
                         xaxis=axis(m.col_title, type="category", **xt),
                         yaxis=axis(m.row_title, reverse=True, type="category", **yt))
    if plot_px:
        layout = readable_x_layout(layout, plot_px, nc)
    shapes = outline_shapes(nr, nc, highlight_row, highlight_col)
    if shapes:
        layout["shapes"] = shapes
    if clickable:
        masked = m.masked if m.masked is not None else np.zeros(z.shape, dtype=bool)
        for t in data:
            t["hoverinfo"] = "skip"
        data += value_cell_points(xs, ys, z, masked, m.row_title or "row", m.col_title or "column")
        layout.update(cell_axes(xs, ys))
    return figure(data, layout)


# A heatmap with more cells than this (a pattern of a text over 96 tokens) is drawn as one light image: see big_heatmap.
BIG_CELLS = 96 * 96
LABEL_PX = 1.45  # the room a tick label needs across its line, in font sizes


def labels_that_fit(length_px: float, size: float = TICK_FONT["size"]) -> int:
    """How many tick labels of font ``size`` fit along ``length_px`` pixels without overlapping (4 at least)."""
    return max(4, int(length_px / (size * LABEL_PX)))


def big_heatmap(m: Matrix, title: str = "", colorbar_title: str = "", height: Optional[int] = None,
                highlight_row: Optional[int] = None, highlight_col: Optional[int] = None) -> go.Figure:
    """A matrix of many cells (a 512 × 512 pattern) as one heatmap trace, light enough to send and draw.

    The values go as one float32 array (the trace's own float32 values, unrounded: 1 MB for 512 × 512) and the
    masked cells are left empty over a grey plot, so there is no second, grey trace and no per-cell hover text or
    click points (those are 262,144 strings at 512 tokens; a cell is a pixel wide, so cells are not clicked, the
    selection is still outlined). The axes are the positions' labels ("37: 'the'"), categories as in ``heatmap``,
    with plotly.js choosing the ticks and choosing again as one zooms in (drag a box; double-click to zoom out), so
    the tokens become readable when zoomed: on the rows at most as many as fit the height (``labels_that_fit``), on
    the columns as many as plotly.js finds room for in the width it is drawn at (a figure does not know it)."""
    z = np.asarray(m.values, dtype=np.float32)
    nr, nc = z.shape
    masked = m.masked if m.masked is not None else np.zeros(z.shape, dtype=bool)
    shown = np.where(masked | ~np.isfinite(z), np.float32(np.nan), z)
    xs = unique_labels(m.hover_cols or m.cols)
    ys = unique_labels(m.hover_rows or m.rows)
    h = height or _height(nr)
    main = dict(type="heatmap", z=shown, x=xs, y=ys, hoverongaps=False,
                # the colour bar lies above the map, under the title: beside it, it would take a third of a narrow
                # column's width from a map whose cells are already a pixel
                colorbar=dict(title=dict(text=colorbar_title, side="right"), tickfont=TICK_FONT, thickness=10,
                              orientation="h", x=0.5, xanchor="center", len=0.9, y=1.01, yanchor="bottom"),
                hovertemplate=f"{m.row_title or 'row'} %{{y}}<br>{m.col_title or 'column'} %{{x}}<br>"
                              f"value %{{z:.4g}}<extra></extra>",
                **color_args(m.kind, np.where(masked, np.nan, z)))
    note = f"{nr} × {nc} · drag to zoom"
    note = f"{m.note}; {note}" if m.note else note
    title = f"{title} <span style='font-size:13px'>({note})</span>" if title else note
    layout = base_layout(title, h,
                         xaxis=axis(m.col_title, type="category", tickmode="auto", tickfont=TICK_FONT),
                         yaxis=axis(m.row_title, reverse=True, type="category", tickmode="auto",
                                    nticks=labels_that_fit(h - 150), tickfont=TICK_FONT))
    layout["plot_bgcolor"] = MASK_COLOR  # the empty (masked) cells show the plot's grey
    layout["margin"] = dict(layout["margin"], t=110)  # the title, then the colour bar
    shapes = outline_shapes(nr, nc, highlight_row, highlight_col)
    if shapes:
        layout["shapes"] = shapes
    return figure([main], layout)


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
    k = max(1, math.ceil(max(T, S) / TILE_CELLS))
    if k > 1:  # a long text: every tile pooled to at most TILE_CELLS cells a side (see pooled)
        blocks = [[pooled(np.asarray(b, dtype=float), masked, k, kind) for b in row] for row in blocks]
        masked = None if masked is None else pooled(masked.astype(float), None, k, "mask") > 0.999  # all masked
        T, S = blocks[0][0].shape
        what = "the largest" if kind == PROBABILITY else "the mean"
        note = f"each cell is {what} of {k} × {k} cells: open one head to see them all"
        title = f"{title} <span style='font-size:13px'>({note})</span>" if title else note
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
    data = [dict(type="heatmap", z=big, hovertemplate="value %{z:.3f}<extra></extra>",
                 colorbar=dict(tickfont=TICK_FONT), **color_args(kind, big))]
    if mask_big.any():
        data.append(_mask_trace(mask_big))
    layout = base_layout(title, height or int(min(900, max(300, 60 + R * max(90, 8 * g)))),
                         xaxis=axis(tickmode="array", tickvals=[c * gc + (S - 1) / 2 for c in range(C)],
                                    ticktext=list(col_names), tickfont=TICK_FONT),
                         yaxis=axis(reverse=True, tickmode="array", tickvals=[r * g + (T - 1) / 2 for r in range(R)],
                                    ticktext=list(row_names), tickfont=TICK_FONT))
    return figure(data, layout)


TILE_CELLS = 128  # a tile of a tiled heatmap is pooled to at most this many cells a side


def pooled(tile: np.ndarray, masked: Optional[np.ndarray], k: int, kind: str) -> np.ndarray:
    """``tile`` (T, S) in blocks of k × k cells, each block one cell: the largest value for a probability (a sharp
    attention stays visible), else the mean, of the block's cells that are not ``masked``; NaN where every cell of
    the block is masked. ``kind="mask"``: the share of masked cells."""
    T, S = tile.shape
    t = np.where(masked, np.nan, tile) if masked is not None else tile
    full = np.full((math.ceil(T / k) * k, math.ceil(S / k) * k), np.nan)
    full[:T, :S] = t
    blocks = full.reshape(full.shape[0] // k, k, full.shape[1] // k, k)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-masked block: NaN, as meant
        return np.nanmax(blocks, axis=(1, 3)) if kind == PROBABILITY else np.nanmean(blocks, axis=(1, 3))


def side_by_side(left: Matrix, right: Matrix, left_title: str, right_title: str,
                 height: Optional[int] = None) -> go.Figure:
    """Two same-shaped matrices next to each other on one colour scale (e.g. a plain average vs a learned pattern)."""
    both = np.concatenate([left.values[np.isfinite(left.values)], right.values[np.isfinite(right.values)]])
    ca = color_args(left.kind, both)
    data, layout = [], base_layout("", height or int(min(640, max(300, 28 * len(left.rows) + 140))))
    layout["annotations"] = []
    for i, (m, t) in enumerate(((left, left_title), (right, right_title)), start=1):
        sfx = "" if i == 1 else str(i)
        x0, x1 = (0.0, 0.44) if i == 1 else (0.52, 0.96)
        data.append(dict(type="heatmap", z=m.values, xaxis=f"x{sfx}", yaxis=f"y{sfx}", showscale=i == 2,
                         hovertemplate="query %{y} · key %{x}<br>%{z:.3f}<extra></extra>",
                         colorbar=dict(tickfont=TICK_FONT), **ca))
        if m.masked is not None and m.masked.any():
            data.append(_mask_trace(m.masked, xaxis=f"x{sfx}", yaxis=f"y{sfx}"))
        layout[f"xaxis{sfx}"] = axis("key", domain=[x0, x1], anchor=f"y{sfx}", **ticks(m.cols))
        layout[f"yaxis{sfx}"] = axis("query" if i == 1 else "", reverse=True, anchor=f"x{sfx}", **ticks(m.rows))
        layout["annotations"].append(dict(text=wrap(t, 30), x=(x0 + x1) / 2, y=1.0, xref="paper", yref="paper",
                                          yanchor="bottom", showarrow=False, font=dict(size=15)))
    layout["margin"] = dict(l=10, r=10, t=80, b=10)  # room for two-line subplot titles
    return figure(data, layout)


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
    layout = base_layout(title, int(min(600, 90 + 62 * B)),
                         xaxis=axis("position t", tickmode="array", tickvals=xs, ticktext=[str(t) for t in xs],
                                    tickfont=TICK_FONT),
                         yaxis=axis("batch row b", reverse=True, tickmode="array", tickvals=ys,
                                    ticktext=[str(b) for b in ys], tickfont=TICK_FONT))
    return figure(data, layout)


HEAD_SHORT = {"previous": "prev", "induction": "ind", "duplicate": "dup", "first": "1st", "current": "self"}


def head_grid(best: np.ndarray, labels: np.ndarray, title: str = "", hover: Optional[np.ndarray] = None,
              height: Optional[int] = None, cells_px: int = 300) -> go.Figure:
    """Layer × head: each cell coloured by its best score (0..1) and labelled with that kind of head.

    best, labels: (n_layer, n_head); ``hover`` (n_layer, n_head) strings with every score, for the tooltip;
    ``cells_px``: about how wide the cells are drawn, together (300 in two fifths of a page).
    """
    best = np.asarray(best, dtype=float)
    L, H = best.shape
    # The words shrink to fit their cell, and become short forms when even 11 px would not fit. Every cell prints
    # its score, so no colour bar.
    words = [[str(labels[l, h]) for h in range(H)] for l in range(L)]
    longest = max((len(w) for row in words for w in row), default=1)
    size = int(min(14, cells_px / H / (CHAR_EM * max(longest, 4))))
    if size < 11:
        words = [[HEAD_SHORT.get(w, w[:4]) for w in row] for row in words]
        size = int(max(9, min(14, cells_px / H / (CHAR_EM * 4))))
    text = [[f"{words[l][h]}<br>{best[l, h]:.2f}" for h in range(H)] for l in range(L)]
    xs, ys = [f"H{h}" for h in range(H)], [f"L{l}" for l in range(L)]
    main = dict(type="heatmap", z=best, x=xs, y=ys, text=text, texttemplate="%{text}", textfont=dict(size=size),
                showscale=False, colorscale=PROB_SCALE, zmin=0.0, zmax=1.0, xgap=2, ygap=2, hoverinfo="skip")
    text = [[f"{labels[l, h]}<br>{best[l, h]:.2f}" for h in range(H)] for l in range(L)]
    tips = hover if hover is not None else np.array(text, dtype=object)
    # a click on a cell selects its (invisible) point: a heatmap alone cannot be point-selected (see cell_points)
    cells = cell_points(xs, ys, [[f"layer {ys[l]} · head {xs[h]}<br>{tips[l][h]}" for h in range(H)] for l in range(L)])
    layout = base_layout(title, height or int(min(560, max(220, 70 * L + 120))),
                         xaxis=axis("", type="category", side="top"),
                         yaxis=axis("layer", reverse=True, type="category"))
    layout["margin"] = dict(l=10, r=10, t=80, b=10)
    layout["title"]["y"] = 0.98  # above the head labels, which sit on top
    return figure([main, cells], layout)
