"""How heads compose: an earlier head (rows) into a later head (columns), one Q-, K- or V-composition score a cell
(``gptviz.interp.composition``), grey where the row's layer is not before the column's.

Pure functions: arrays in, a figure out, with the conventions of ``base``.
"""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from .base import MASK_COLOR, NONNEG_SCALE, TICK_FONT, axis, base_layout, figure

MODE_NAMES = {"Q": "queries", "K": "keys", "V": "values"}


def head_names(n_layer: int, n_head: int, layers: range) -> list[str]:
    """ "L0 H0" … for the heads of ``layers``."""
    return [f"L{l} H{h}" for l in layers for h in range(n_head)]


def composition_heatmap(score: np.ndarray, mode: str, title: str = "", height: int | None = None) -> go.Figure:
    """``score``: (n_layer, n_head, n_layer, n_head), entry [l1, h1, l2, h2] head (l1, h1) into head (l2, h2). Rows:
    the heads of layers 0 … L−2 (the writers); columns: the heads of layers 1 … L−1 (the readers); cells whose row
    layer is not before the column layer are grey ("no composition: not a later layer"). The scale runs from 0 to the
    largest score; thin lines separate the layers."""
    s = np.asarray(score, dtype=float)
    L, H = s.shape[:2]
    rows, cols = range(0, L - 1), range(1, L)
    z = s[: L - 1, :, 1:, :].reshape((L - 1) * H, (L - 1) * H)
    later = np.array([[l1 < l2 for l2 in cols for _ in range(H)] for l1 in rows for _ in range(H)])
    ys, xs = head_names(L, H, rows), head_names(L, H, cols)
    top = float(z[later].max()) if later.any() else 1.0
    reader = MODE_NAMES.get(mode, mode)
    main = dict(type="heatmap", z=np.where(later, z, np.nan), x=xs, y=ys, zmin=0.0, zmax=top if top > 0 else 1.0,
                colorscale=NONNEG_SCALE, hoverongaps=False, xgap=1, ygap=1,
                colorbar=dict(title=dict(text="score"), tickfont=TICK_FONT),
                hovertemplate=f"%{{y}} writes · %{{x}} reads it through its {reader}<br>"
                              f"{mode}-composition %{{z:.3f}}<extra></extra>")
    grey = dict(type="heatmap", z=np.where(later, np.nan, 1.0), x=xs, y=ys, showscale=False, hoverongaps=False,
                colorscale=[[0, MASK_COLOR], [1, MASK_COLOR]], zmin=0, zmax=1, xgap=1, ygap=1,
                hovertemplate="%{y} → %{x}: no composition (the reader is not in a later layer)<extra></extra>")
    n = (L - 1) * H
    layout = base_layout(title, height or int(min(720, max(320, 24 * n + 170))),
                         xaxis=axis("the later head: it reads", type="category", side="top", tickangle=-45),
                         yaxis=axis("the earlier head: it writes", reverse=True, type="category"))
    layout["shapes"] = [dict(type="line", xref="x", yref="paper", x0=k * H - 0.5, x1=k * H - 0.5, y0=0, y1=1,
                             line=dict(color="#444", width=1)) for k in range(1, L - 1)] + \
                       [dict(type="line", xref="paper", yref="y", y0=k * H - 0.5, y1=k * H - 0.5, x0=0, x1=1,
                             line=dict(color="#444", width=1)) for k in range(1, L - 1)]
    layout["margin"] = dict(l=10, r=10, t=100, b=10)
    return figure([main, grey], layout)
