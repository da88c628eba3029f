"""Line and bar charts: a loss curve with its reference lines, the top-k next tokens, gradient norms, rotary
frequencies plain and scaled.

Pure functions: values and labels in, a figure out, with the conventions of ``base``.
"""
from __future__ import annotations

from typing import Optional, Sequence

import plotly.graph_objects as go

from .base import TICK_FONT, axis, base_layout, figure


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
        xa, ya = axis(x_title, **rng), axis(y_title, reverse=True, **tick)
        height = int(min(720, max(260, 28 * len(labels) + 120)))
    else:
        bar = dict(type="bar", x=pos, y=list(values), marker=dict(color=colors), customdata=list(labels),
                   hovertemplate="%{customdata}: %{y:.4g}<extra></extra>")
        xa, ya = axis(x_title, **tick), axis(y_title, **rng)
        height = 420
    return figure([bar], base_layout(title, height, xaxis=xa, yaxis=ya))


def line_chart(series: dict[str, Sequence[float]], x: Optional[Sequence[float]] = None, title: str = "",
               x_title: str = "", y_title: str = "", hlines: Optional[dict[str, float]] = None,
               vline: Optional[float] = None, y2: Optional[dict[str, Sequence[float]]] = None) -> go.Figure:
    """Lines (e.g. a loss curve), with optional labelled horizontal reference lines (e.g. ln V), a vertical
    marker at ``vline`` (e.g. the step shown) and ``y2`` series on a second y axis (e.g. a score 0..1)."""
    data = []
    for name, ys in series.items():
        xs = list(x) if x is not None else list(range(len(ys)))
        data.append(dict(type="scatter", x=xs, y=list(ys), mode="lines+markers" if len(ys) < 40 else "lines",
                         name=name))
    layout = base_layout(title, 380, xaxis=dict(title=dict(text=x_title)), yaxis=dict(title=dict(text=y_title)),
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
    return figure(data, layout)


def frequency_chart(plain: Sequence[float], scaled: Sequence[float], scaled_name: str, title: str = "") -> go.Figure:
    """Rotary positions' frequency for each dimension pair (the angle it turns by per position), plain and as the
    model scales it, on a log axis: the lines part where the scaling slows a pair down."""
    pairs = list(range(len(plain)))
    data = [dict(type="scatter", x=pairs, y=[float(v) for v in ys], name=name, mode="lines+markers",
                 line=dict(dash=dash), hovertemplate=f"{name}, pair %{{x}}: %{{y:.3g}} rad/position<extra></extra>")
            for name, ys, dash in (("plain", plain, "dot"), (scaled_name, scaled, "solid"))]
    layout = base_layout(title, 340, xaxis=axis("dimension pair i", tickformat="d", dtick=max(1, len(pairs) // 16)),
                         yaxis=axis("frequency ωᵢ (radians per position, log)", type="log"),
                         legend=dict(font=TICK_FONT))
    return figure(data, layout)
