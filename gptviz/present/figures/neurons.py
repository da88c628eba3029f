"""The Neurons page's figures: a neuron's top snippets (HTML), its activation histogram, its activation over the
user's text, and the tokens it pushes up and down.

Pure functions: values and labels in, a figure (or an HTML string, every token escaped) out, with the conventions
of ``base`` (the palette switch recolours the Plotly ones, see ``finishing.recolour``).
"""
from __future__ import annotations

import html
from typing import Optional, Sequence

import numpy as np
import plotly.graph_objects as go

from .base import SIGNED_SCALE, TICK_FONT, axis, base_layout, figure, ticks, unique_labels


def _signed_colours(values: Sequence[float], scale=None) -> list[str]:
    """The signed scale's ends (``scale``: a palette's own, default red above 0 and blue below), by sign."""
    scale = scale or SIGNED_SCALE
    up, down = scale[-1][1], scale[0][1]
    return [up if v >= 0 else down for v in values]


def activation_histogram(edges: Sequence[float], counts: Sequence[int], title: str = "",
                         marker: Optional[float] = None, marker_label: str = "", log_y: bool = True) -> go.Figure:
    """A neuron's activations as a histogram: ``counts[i]`` positions between ``edges[i]`` and ``edges[i+1]``.
    ``marker``: a vertical line at one activation (e.g. at the position chosen in the user's text)."""
    edges = np.asarray(edges, dtype=float)
    centres = ((edges[:-1] + edges[1:]) / 2).tolist()
    widths = np.diff(edges).tolist()
    bar = dict(type="bar", x=centres, y=[int(c) for c in counts], width=widths, marker=dict(color="#1f77b4"),
               customdata=[[float(a), float(b)] for a, b in zip(edges[:-1], edges[1:])],
               hovertemplate="%{customdata[0]:.3g} to %{customdata[1]:.3g}: %{y} positions<extra></extra>")
    layout = base_layout(title, 340, xaxis=axis("activation (hook_post)"),
                         yaxis=axis("positions (log scale)" if log_y else "positions",
                                    **({"type": "log", "dtick": 1} if log_y else {})),
                         bargap=0.05)
    if marker is not None and np.isfinite(marker):
        layout["shapes"] = [dict(type="line", xref="x", x0=float(marker), x1=float(marker), yref="paper", y0=0,
                                 y1=1, line=dict(color="#d62728", width=3, dash="dash"))]
        layout["annotations"] = [dict(text=marker_label, x=float(marker), xref="x", y=1, yref="paper",
                                      yanchor="bottom", showarrow=False, font=TICK_FONT)]
    return figure([bar], layout)


def activation_over_text(labels: Sequence[str], values: Sequence[float], title: str = "",
                         highlight: Optional[int] = None, scale=None) -> go.Figure:
    """One neuron's activation at every position of a text: a bar per token (the signed ``scale``'s ends: red
    above 0, blue below by default; the position ``highlight`` outlined)."""
    vals = [float(v) for v in values]
    names = unique_labels(labels)
    width = [3 if i == highlight else 0 for i in range(len(vals))]
    bar = dict(type="bar", x=list(range(len(vals))), y=vals, marker=dict(color=_signed_colours(vals, scale),
               line=dict(color="#111", width=width)), customdata=names,
               hovertemplate="%{x}: %{customdata}<br>activation %{y:.4g}<extra></extra>")
    layout = base_layout(title, 340, xaxis=axis("token", **ticks(list(labels))), yaxis=axis("activation"))
    return figure([bar], layout)


def logit_effect_chart(labels: Sequence[str], values: Sequence[float], title: str = "", scale=None) -> go.Figure:
    """Tokens a neuron pushes up (red) or down (blue; ``scale``: a palette's signed scale): one horizontal bar
    each, the token on the axis."""
    vals = [float(v) for v in values]
    pos = list(range(len(vals)))
    bar = dict(type="bar", x=vals, y=pos, orientation="h", marker=dict(color=_signed_colours(vals, scale)),
               text=[f"{v:+.3g}" for v in vals], textposition="auto", customdata=list(labels),
               hovertemplate="%{customdata}: %{x:+.4g} per unit of activation<extra></extra>")
    tick = dict(tickmode="array", tickvals=pos, ticktext=list(labels), tickfont=TICK_FONT)
    height = int(min(600, max(260, 28 * len(vals) + 120)))
    return figure([bar], base_layout(title, height, xaxis=axis("direct logit change per unit of activation"),
                                     yaxis=axis("", reverse=True, **tick)))


def _shade(value: float, top: float) -> str:
    """The highlight of an activating token: the red end of the scale, as strong as ``value / top``."""
    a = 0.0 if top <= 0 else max(0.15, min(1.0, value / top))
    return f"rgba(214,39,40,{a:.2f})"


def snippets_html(rows: Sequence[dict], top: Optional[float] = None) -> str:
    """Top-activating snippets as HTML: one line each, its tokens (``rows[i]["tokens"]``, display strings) in a
    monospace run, the activating one (``rows[i]["at"]``) highlighted and the activation (``rows[i]["value"]``)
    on the left. Every token is escaped; nothing in a row can add markup."""
    vals = [float(r["value"]) for r in rows]
    top = max(vals, default=0.0) if top is None else float(top)
    out = ['<div style="font-family:ui-monospace,Menlo,Consolas,monospace;font-size:16px;line-height:1.9">']
    for r in rows:
        cells = []
        for i, tok in enumerate(r["tokens"]):
            text = html.escape(str(tok))
            if i == int(r["at"]):
                cells.append(f'<span style="background:{_shade(float(r["value"]), top)};outline:2px solid #111;'
                             f'border-radius:3px;padding:1px 2px;font-weight:700">{text}</span>')
            else:
                cells.append(f'<span style="color:#333">{text}</span>')
        where = html.escape(str(r.get("where", "")))
        out.append(f'<div style="white-space:pre;overflow-x:auto" title="{where}">'
                   f'<span style="display:inline-block;min-width:5.5em;color:#555">{float(r["value"]):+.3f}</span>'
                   + "".join(cells) + "</div>")
    out.append("</div>")
    return "".join(out)
