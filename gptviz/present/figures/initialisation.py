"""Figures for the Initialisation page. Pure functions: results of ``gptviz.training.init_study`` in, a figure out.

Same conventions as ``base`` (plain dicts wrapped without validation, its fonts): probabilities on a
fixed 0-to-1 axis, reference lines dashed grey and labelled, the user's own setting in red.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

import numpy as np
import plotly.graph_objects as go

from .base import TICK_FONT, axis, base_layout, figure

BLUE, RED, GREY = "#1f77b4", "#d62728", "#777"
COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]
TANH_EDGE = math.atanh(0.97)  # |x| above this makes |tanh x| > 0.97


def _hline(y: float, label: str) -> tuple[dict, dict]:
    """A dashed horizontal reference line across the plot, and its label (right-aligned, just above it)."""
    shape = dict(type="line", xref="paper", x0=0, x1=1, yref="y", y0=y, y1=y, line=dict(dash="dash", color=GREY))
    note = dict(text=label, xref="paper", x=1, y=y, yref="y", xanchor="right", yanchor="bottom", showarrow=False,
                font=TICK_FONT)
    return shape, note


def _ax(title: str = "", grid: bool = False, **extra) -> dict:
    """An axis in ``base``'s style; ``grid=True`` adds light grid lines (for log axes and sweeps)."""
    ax = axis(title)
    if grid:
        ax.update(showgrid=True, gridcolor="#eee")
    ax.update(tickfont=TICK_FONT, **extra)
    return ax


def _fmt(s: float) -> str:
    return f"{s:.3g}"


# --------------------------------------------------------------------------- fact 1
def loss_sweep_figure(sweep: dict, title: Optional[str] = None) -> go.Figure:
    """Initial loss against init_std (log axis), a dashed ln V line, and a red marker at the user's init_std."""
    xs, ys = sweep["scales"], sweep["losses"]
    data = [
        dict(type="scatter", x=xs, y=ys, mode="lines+markers", name="initial loss", line=dict(color=BLUE),
             marker=dict(size=8), hovertemplate="init_std %{x:.3g}<br>loss %{y:.4f}<extra></extra>"),
        dict(type="scatter", x=[sweep["current_std"]], y=[sweep["current_loss"]], mode="markers",
             name=f"your init_std = {_fmt(sweep['current_std'])}",
             marker=dict(size=16, color=RED, symbol="diamond", line=dict(color="white", width=1)),
             hovertemplate="your init_std %{x:.3g}<br>loss %{y:.4f}<extra></extra>"),
    ]
    shape, note = _hline(sweep["ln_v"], f"ln V = {sweep['ln_v']:.3f}")
    note.update(y=sweep["ln_v"], yanchor="top")  # just below the line, at the right: the curve is high there
    layout = base_layout(title or "Initial loss against init_std", 420,
                         xaxis=_ax("init_std (log scale)", type="log", grid=True),
                         yaxis=_ax("loss of the untrained model", grid=True,
                                     rangemode="tozero"),
                         legend=dict(font=TICK_FONT, x=0.01, y=0.98, xanchor="left", yanchor="top",
                                     bgcolor="rgba(255,255,255,0.8)"),
                         shapes=[shape], annotations=[note])
    return figure(data, layout)


# --------------------------------------------------------------------------- fact 2
def prob_figure(probs: Sequence[float], vocab: Sequence[str], title: str, target: Optional[int] = None,
                top: int = 20) -> go.Figure:
    """The next-token distribution as bars on a fixed 0-to-1 axis: the ``top`` most likely tokens, most likely
    first, the target (if any) in red and always shown; a dashed line at the uniform 1/V."""
    p = np.asarray(probs, dtype=float)
    V = p.size
    order = np.argsort(-p, kind="stable")[: min(top, V)].tolist()
    if target is not None and target not in order:
        order[-1] = target
    labels = [f"{vocab[i]!s}" for i in order]
    colors = [RED if i == target else BLUE for i in order]
    bar = dict(type="bar", x=list(range(len(order))), y=[float(p[i]) for i in order], marker=dict(color=colors),
               customdata=[f"{i}: {vocab[i]}" + ("  (target)" if i == target else "") for i in order],
               hovertemplate="%{customdata}<br>p = %{y:.4f}<extra></extra>")
    shape, note = _hline(1.0 / V, f"uniform 1/V = {1.0 / V:.3g}")
    note["yanchor"] = "bottom"
    shown = f"top {len(order)} of {V}" if len(order) < V else f"all {V} tokens"
    layout = base_layout(title, 360,
                         xaxis=_ax(f"next token ({shown}, most likely first)", tickmode="array",
                                     tickvals=list(range(len(order))), ticktext=labels),
                         yaxis=_ax("probability", range=[0, 1]),
                         shapes=[shape], annotations=[note], bargap=0.15)
    layout["margin"] = dict(l=10, r=10, t=70, b=10)
    return figure([bar], layout)


def curves_figure(curves: dict, title: str = "Training loss from a small and a large init") -> go.Figure:
    """One loss curve per starting scale (small blue, large red), on one chart, with ln V dashed."""
    x = list(range(curves["steps"] + 1))
    data = [dict(type="scatter", x=x, y=list(c), mode="lines", name=f"init_std = {_fmt(s)}", line=dict(color=col),
                 hovertemplate=f"init_std {_fmt(s)} · step %{{x}}: loss %{{y:.3f}}<extra></extra>")
            for s, c, col in zip(curves["scales"], curves["curves"], [BLUE, RED, "#2ca02c", "#9467bd"])]
    shape, note = _hline(curves["ln_v"], f"ln V = {curves['ln_v']:.2f}")
    layout = base_layout(title, 400, xaxis=_ax("training step", grid=True),
                         yaxis=_ax("training loss", grid=True, rangemode="tozero"),
                         legend=dict(font=TICK_FONT, x=0.99, y=0.98, xanchor="right", yanchor="top",
                                     bgcolor="rgba(255,255,255,0.8)"),
                         shapes=[shape], annotations=[note])
    return figure(data, layout)


# --------------------------------------------------------------------------- fact 3
def _sat_center(act: str, c: float, post: bool) -> bool:
    if act == "tanh":
        return abs(c) > (0.97 if post else TANH_EDGE)
    if act == "relu":
        return (not post) and c <= 0
    return (not post) and c < -3  # gelu: the rule is on the input


def histogram_figure(layer: dict, activation: str, init_std: float) -> go.Figure:
    """One layer's MLP pre-activation and activation histograms side by side; saturated bins in red, and the
    share of saturated units in the title."""
    data, layout = [], base_layout(
        f"Layer {layer['layer']} · init_std {_fmt(init_std)} · {100 * layer['saturated']:.1f}% of units saturated",
        340)
    layout["margin"] = dict(l=10, r=10, t=90, b=10)
    layout["annotations"], layout["showlegend"] = [], False
    panes = (("pre", "input x (fc output, hook_pre)", 0.0, 0.46), ("post", f"output {activation}(x)", 0.54, 1.0))
    for i, (which, name, x0, x1) in enumerate(panes, start=1):
        sfx = "" if i == 1 else str(i)
        counts, edges = np.asarray(layer[f"{which}_counts"]), np.asarray(layer[f"{which}_edges"])
        centers = (edges[:-1] + edges[1:]) / 2
        sat = [_sat_center(activation, c, which == "post") for c in centers]
        if activation == "relu" and which == "post" and len(counts):
            sat[0] = edges[0] <= 0 <= edges[1]
        data.append(dict(type="bar", x=centers.tolist(), y=counts.tolist(), width=float(edges[1] - edges[0]),
                         marker=dict(color=[RED if s else BLUE for s in sat]), xaxis=f"x{sfx}", yaxis=f"y{sfx}",
                         hovertemplate="%{x:.3g}: %{y} units<extra></extra>"))
        layout[f"xaxis{sfx}"] = _ax("value", domain=[x0, x1], anchor=f"y{sfx}")
        layout[f"yaxis{sfx}"] = _ax("count" if i == 1 else "", anchor=f"x{sfx}")
        layout["annotations"].append(dict(text=name, x=(x0 + x1) / 2, y=1.0, xref="paper", yref="paper",
                                          yanchor="bottom", showarrow=False, font=dict(size=16)))
    layout["bargap"] = 0
    return figure(data, layout)


def grad_figure(stats: dict) -> go.Figure:
    """Per layer: mean |∂loss/∂ activation output| and mean |∂loss/∂ activation input| as grouped bars."""
    layers = stats["layers"]
    names = [f"layer {d['layer']}" for d in layers]
    data = [
        dict(type="bar", x=names, y=[d["grad_post"] for d in layers], name="mean |∂loss/∂ output|",
             marker=dict(color="#9ecae1"), hovertemplate="%{x}: %{y:.3g}<extra>at the output</extra>"),
        dict(type="bar", x=names, y=[d["grad_pre"] for d in layers], name="mean |∂loss/∂ input| (hook_pre)",
             marker=dict(color=BLUE), hovertemplate="%{x}: %{y:.3g}<extra>at the input</extra>",
             text=[f"{100 * d['pass_through']:.0f}% gets through" for d in layers], textposition="outside"),
    ]
    layout = base_layout(f"The gradient either side of {stats['activation']} · init_std {_fmt(stats['init_std'])}",
                         380, xaxis=_ax(""),
                         yaxis=_ax("mean |gradient|", rangemode="tozero"),
                         barmode="group", legend=dict(font=TICK_FONT, orientation="h", x=0, y=-0.15))
    layout["margin"] = dict(l=10, r=10, t=60, b=40)
    return figure(data, layout)


def saturation_sweep_figure(sweep: dict, chosen: Optional[float] = None) -> go.Figure:
    """Against init_std (log axis), per layer: the share of units saturated (dashed) and the share of the
    gradient that gets through the activation (solid), both on 0 to 1."""
    data = []
    for d, (l, c) in zip(sweep["layers"], enumerate(COLORS * 4)):
        data.append(dict(type="scatter", x=sweep["scales"], y=d["pass_through"], mode="lines+markers",
                         name=f"L{l} gradient that gets through", line=dict(color=c),
                         hovertemplate="init_std %{x:.3g}: %{y:.1%} gets through<extra></extra>"))
        data.append(dict(type="scatter", x=sweep["scales"], y=d["saturated"], mode="lines+markers",
                         name=f"L{l} units saturated", line=dict(color=c, dash="dash"), marker=dict(symbol="x"),
                         hovertemplate="init_std %{x:.3g}: %{y:.1%} saturated<extra></extra>"))
    layout = base_layout(f"{sweep['activation']}: saturation against init_std", 420,
                         xaxis=_ax("init_std (log scale)", type="log", grid=True),
                         yaxis=_ax("share", range=[0, 1.05], tickformat=".0%", grid=True),
                         legend=dict(font=TICK_FONT))
    if chosen is not None:
        layout["shapes"] = [dict(type="line", xref="x", x0=chosen, x1=chosen, yref="paper", y0=0, y1=1,
                                 line=dict(color=RED, dash="dot"))]
    return figure(data, layout)


# --------------------------------------------------------------------------- keeping the spread
def spread_figure(demo: dict) -> go.Figure:
    """std after k multiplications by random n×n matrices, W ~ N(0, 1/n) against W ~ N(0, 1), log y."""
    n = demo["n"]
    k = list(range(len(demo["depth_scaled"])))
    data = [
        dict(type="scatter", x=k, y=demo["depth_scaled"], mode="lines+markers", name="W ~ N(0, 1/n)",
             line=dict(color=BLUE), hovertemplate="after %{x}: std %{y:.4g}<extra></extra>"),
        dict(type="scatter", x=k, y=demo["depth_unit"], mode="lines+markers", name="W ~ N(0, 1)",
             line=dict(color=RED), hovertemplate="after %{x}: std %{y:.4g}<extra></extra>"),
    ]
    layout = base_layout(f"std of x after k multiplications by random {n}×{n} matrices", 380,
                         xaxis=_ax("k (matrices applied)", dtick=1),
                         yaxis=_ax("std (log scale)", type="log", grid=True),
                         legend=dict(font=TICK_FONT))
    return figure(data, layout)


def residual_figure(results: Sequence[dict]) -> go.Figure:
    """std at each point of the residual stream, one line per init_std, log y."""
    data = []
    for r, c in zip(results, [RED, BLUE, "#2ca02c", "#9467bd"]):
        data.append(dict(type="scatter", x=list(range(len(r["stds"]))), y=r["stds"], mode="lines+markers",
                         name=f"init_std = {_fmt(r['init_std'])}", line=dict(color=c), customdata=r["labels"],
                         hovertemplate="%{customdata}: std %{y:.4g}<extra></extra>"))
    labels = results[0]["labels"] if results else []
    layout = base_layout("std of the residual stream, point by point (fresh model)", 400,
                         xaxis=_ax("", tickmode="array", tickvals=list(range(len(labels))), ticktext=labels),
                         yaxis=_ax("std (log scale)", type="log", grid=True),
                         legend=dict(font=TICK_FONT))
    return figure(data, layout)
