"""Figure builders for "who did it": logit lens, direct logit attribution, activation patching.

Pure functions, arrays and labels in, a figure out, with the conventions of ``base``: a fixed
0-to-1 scale for probabilities, blue-white-red centred on 0 for signed values, fonts for a projector,
axes labelled with tokens.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import plotly.graph_objects as go

from .base import MAX_TEXT_CELLS, PROB_SCALE, SIGNED_SCALE, TICK_FONT, axis, base_layout, figure, ticks, unique_labels

POS_COLOR = "#d6604d"  # pushes a logit up (the red end of the signed scale)
NEG_COLOR = "#4393c3"  # pushes it down (the blue end)
MAX_BARS = 30


def _signed(values: np.ndarray, at_least: float = 0.0) -> dict:
    finite = values[np.isfinite(values)]
    m = max(float(np.abs(finite).max()) if finite.size else 0.0, at_least)
    m = m if m > 0 else 1.0
    return dict(colorscale=SIGNED_SCALE, zmin=-m, zmax=m, zmid=0.0)


def _category_axes(xs: list[str], xlabels: Sequence[str], ys: list[str], ylabels: Sequence[str], x_title: str,
                   y_title: str) -> dict:
    xt, yt = ticks(list(xlabels)), ticks(list(ylabels))
    xt["tickvals"] = [xs[i] for i in xt["tickvals"]]
    yt["tickvals"] = [ys[i] for i in yt["tickvals"]]
    return dict(xaxis=axis(x_title, type="category", **xt), yaxis=axis(y_title, reverse=True, type="category", **yt))


def _zero_axis(title: str) -> dict:
    """A value axis with a dark line at 0 (base.axis turns the zero line off)."""
    ax = axis(title)
    ax.update(zeroline=True, zerolinecolor="#444", zerolinewidth=2)
    return ax


def _height(n_rows: int, per_row: int = 34, lo: int = 260, hi: int = 720) -> int:
    return int(min(hi, max(lo, per_row * n_rows + 160)))


def lens_heatmap(target_prob: np.ndarray, point_labels: Sequence[str], tokens: Sequence[str],
                 targets: Sequence[str], top1: np.ndarray, top1_prob: np.ndarray, title: str = "",
                 show_values: bool = False, first_pos: int = 0) -> go.Figure:
    """Layer × position: the probability the lens gives the true next token, on a fixed 0..1 scale.

    target_prob, top1 (strings), top1_prob: (points, T). ``targets``: the true next token of each position
    ("" where there is none: those cells are empty). The hover names the lens's top-1 token. ``first_pos``: the
    position of the first column (a window of a long text), which the x labels count from.
    """
    z = np.asarray(target_prob, dtype=float)
    P, T = z.shape
    xs = unique_labels([f"{first_pos + i}: '{t}'" for i, t in enumerate(tokens)])
    ys = unique_labels(point_labels)
    custom = [[[str(top1[p][t]), float(top1_prob[p][t]), targets[t] or "(none)"] for t in range(T)] for p in range(P)]
    main = dict(type="heatmap", z=z, x=xs, y=ys, customdata=custom, colorscale=PROB_SCALE, zmin=0.0, zmax=1.0,
                colorbar=dict(title=dict(text="p(next)"), tickfont=TICK_FONT), xgap=1, ygap=1,
                hovertemplate="%{y} · position %{x}<br>true next '%{customdata[2]}': p = %{z:.3f}"
                              "<br>top-1 '%{customdata[0]}' (p = %{customdata[1]:.3f})<extra></extra>")
    if show_values and P * T <= MAX_TEXT_CELLS:
        main["texttemplate"] = "%{z:.2f}"
        main["textfont"] = dict(size=12)
    layout = base_layout(title, _height(P), **_category_axes(xs, tokens, ys, point_labels, "position (token)",
                                                             "read after"))
    return figure([main], layout)


def lens_topk(point_labels: Sequence[str], top_tokens: Sequence[Sequence[str]], top_probs: np.ndarray,
              title: str = "", highlight: Optional[str] = None) -> go.Figure:
    """One position through the layers: each row a point of the residual stream, its k most likely tokens
    left to right, coloured by probability (0..1), each cell labelled with its token. ``highlight``: a
    token (e.g. the true next one) whose cells get a star."""
    p = np.asarray(top_probs, dtype=float)
    P, k = p.shape
    ys = unique_labels(point_labels)
    text = [[("★ " if highlight is not None and top_tokens[r][j] == highlight else "") + f"'{top_tokens[r][j]}'"
             for j in range(k)] for r in range(P)]
    main = dict(type="heatmap", z=p, x=[f"#{j + 1}" for j in range(k)], y=ys, text=text,
                texttemplate="%{text}<br>%{z:.2f}", textfont=dict(size=14), colorscale=PROB_SCALE, zmin=0.0, zmax=1.0,
                xgap=2, ygap=2, colorbar=dict(title=dict(text="p"), tickfont=TICK_FONT),
                hovertemplate="%{y} · rank %{x}<br>%{text}: p = %{z:.3f}<extra></extra>")
    layout = base_layout(title, _height(P, 46), xaxis=axis("rank", type="category", side="top"),
                         yaxis=axis("read after", reverse=True, type="category"))
    layout["margin"] = dict(l=10, r=10, t=90, b=10)
    return figure([main], layout)


def dla_bars(labels: Sequence[str], values: Sequence[float], title: str = "", max_bars: int = MAX_BARS) -> go.Figure:
    """Every component's contribution to one logit, sorted from the biggest push up to the biggest push down.

    Red bars raise the logit, blue ones lower it. With more than ``max_bars`` components the largest by size
    are shown and the rest are summed into one grey bar, so the bars still add up to the same total.
    """
    v = np.asarray(values, dtype=float)
    labs = list(labels)
    if len(v) > max_bars:
        keep = np.sort(np.argsort(-np.abs(v))[: max_bars - 1])
        others = np.setdiff1d(np.arange(len(v)), keep)
        labs = [labs[i] for i in keep] + [f"{len(others)} others"]
        v = np.concatenate([v[keep], [v[others].sum()]])
    order = np.argsort(-v, kind="stable")
    labs = [labs[i] for i in order]
    v = v[order]
    colors = ["#9a9a9a" if lab.endswith(" others") else (POS_COLOR if x >= 0 else NEG_COLOR) for lab, x in zip(labs, v)]
    pos = list(range(len(labs)))
    bar = dict(type="bar", x=v.tolist(), y=pos, orientation="h", marker=dict(color=colors), customdata=labs,
               text=[f"{x:+.3g}" for x in v], textposition="auto", textfont=TICK_FONT,
               hovertemplate="%{customdata}: %{x:+.4g}<extra></extra>")
    layout = base_layout(title, int(min(900, max(260, 26 * len(labs) + 130))),
                         xaxis=_zero_axis("contribution to the logit"),
                         yaxis=axis("", reverse=True, tickmode="array", tickvals=pos, ticktext=labs,
                                    tickfont=TICK_FONT))
    return figure([bar], layout)


def layer_head_heatmap(values: np.ndarray, title: str = "", colorbar_title: str = "", at_least: float = 0.0,
                       fmt: str = ".2f") -> go.Figure:
    """Layer × head grid of signed values (a head's contribution, a patching score), diverging around 0.

    ``at_least``: the colour scale reaches at least ±this (1 for patching scores, so 1 is full red)."""
    z = np.asarray(values, dtype=float)
    L, H = z.shape
    show = L * H <= 400
    main = dict(type="heatmap", z=z, x=[f"H{h}" for h in range(H)], y=[f"L{l}" for l in range(L)], xgap=2, ygap=2,
                colorbar=dict(title=dict(text=colorbar_title), tickfont=TICK_FONT),
                hovertemplate="layer %{y} · head %{x}<br>%{z:.4f}<extra></extra>", **_signed(z, at_least))
    if show:
        main["texttemplate"] = f"%{{z:{fmt}}}"
        main["textfont"] = dict(size=14 if L * H <= 64 else 11)
    layout = base_layout(title, int(min(640, max(220, 46 * L + 140))), xaxis=axis("head", type="category", side="top"),
                         yaxis=axis("layer", reverse=True, type="category"))
    layout["margin"] = dict(l=10, r=10, t=90, b=10)
    return figure([main], layout)


def patch_resid_heatmap(values: np.ndarray, point_labels: Sequence[str], tokens: Sequence[str], title: str = "",
                        show_values: bool = True) -> go.Figure:
    """Residual-stream patching: rows are points of the stream, columns positions (the corrupted prompt's
    tokens), colour the score (0 = as corrupted, 1 = as clean), diverging around 0 and reaching at least ±1."""
    z = np.asarray(values, dtype=float)
    P, T = z.shape
    xs = unique_labels([f"{i}: '{t}'" for i, t in enumerate(tokens)])
    ys = unique_labels(point_labels)
    main = dict(type="heatmap", z=z, x=xs, y=ys, xgap=1, ygap=1,
                colorbar=dict(title=dict(text="score"), tickfont=TICK_FONT),
                hovertemplate="patch %{y} at position %{x}<br>score %{z:.3f}<extra></extra>", **_signed(z, 1.0))
    if show_values and P * T <= MAX_TEXT_CELLS:
        main["texttemplate"] = "%{z:.2f}"
        main["textfont"] = dict(size=12)
    layout = base_layout(title, _height(P), **_category_axes(xs, tokens, ys, point_labels, "position (token)",
                                                             "residual stream"))
    return figure([main], layout)


def mlp_bars(values: Sequence[float], title: str = "") -> go.Figure:
    """One bar per layer's MLP (a patching score): red above 0, blue below."""
    v = np.asarray(values, dtype=float)
    labs = [f"L{l} MLP" for l in range(len(v))]
    bar = dict(type="bar", x=labs, y=v.tolist(), marker=dict(color=[POS_COLOR if x >= 0 else NEG_COLOR for x in v]),
               text=[f"{x:.2f}" for x in v], textposition="auto", hovertemplate="%{x}: %{y:.3f}<extra></extra>")
    layout = base_layout(title, 320, xaxis=axis("", type="category", tickfont=TICK_FONT),
                         yaxis=_zero_axis("score"))
    return figure([bar], layout)
