"""The SAE features page's pictures: a snippet of text shaded by one feature's activation (HTML), and a next-token
distribution before and after steering (grouped bars).

Pure functions: tokens and numbers in, HTML or a figure out. Every token is escaped.
"""
from __future__ import annotations

import html
from typing import Optional, Sequence

import plotly.graph_objects as go

from .base import TICK_FONT, axis, base_layout, figure

# orange, as the colour-blind-safe palette's positive end: reads on a projector and in either palette
_SHADE = (230, 97, 1)


def activation_html(labels: Sequence[str], acts: Sequence[float], scale: float, peak: Optional[int] = None) -> str:
    """Tokens side by side, each shaded by its activation over ``scale`` (0: white, ``scale`` or more: full
    orange), the activation in its tooltip; ``peak`` (an index) is outlined. Tokens keep their spaces."""
    scale = float(scale) if scale and scale > 0 else 1.0
    out = ['<div style="font-family:monospace;font-size:17px;line-height:1.9;white-space:pre-wrap;'
           'word-break:break-all">']
    for i, (lab, a) in enumerate(zip(labels, acts)):
        a = float(a)
        alpha = max(0.0, min(1.0, a / scale))
        bg = f"rgba({_SHADE[0]},{_SHADE[1]},{_SHADE[2]},{alpha:.2f})"
        border = "2px solid #111" if peak is not None and i == peak else "1px solid #ddd"
        text = html.escape(lab).replace("\n", "↵")
        out.append(f'<span title="activation {a:.3g}" style="background:{bg};border:{border};border-radius:3px;'
                   f'padding:0 1px;color:#111">{text}</span>')
    out.append("</div>")
    return "".join(out)


def before_after_bars(labels: Sequence[str], before: Sequence[float], after: Sequence[float], title: str = "",
                      x_title: str = "probability", names: tuple[str, str] = ("before", "after")) -> go.Figure:
    """Two bars per token (before and after a change), tokens down the side, the probability axis from 0 to the
    largest value shown (at most 1)."""
    pos = list(range(len(labels)))
    tick = dict(tickmode="array", tickvals=pos, ticktext=list(labels), tickfont=TICK_FONT)
    bars = []
    for name, vals, colour in ((names[0], before, "#9e9e9e"), (names[1], after, "#e66101")):
        bars.append(dict(type="bar", name=name, x=list(map(float, vals)), y=pos, orientation="h",
                         marker=dict(color=colour), customdata=list(labels),
                         hovertemplate=f"{name}: " + "%{customdata}: %{x:.4f}<extra></extra>"))
    height = int(min(760, max(300, 40 * len(labels) + 140)))
    top = max([0.0, *map(float, before), *map(float, after)])
    # from 0, to the largest probability shown (never past 1): small probabilities stay readable
    xa = axis(x_title, range=[0, min(1.0, max(0.05, 1.1 * top))])
    layout = base_layout(title, height, xaxis=xa, yaxis=axis("next token", reverse=True, **tick), barmode="group",
                         legend=dict(font=TICK_FONT, orientation="h", y=-0.15))
    return figure(bars, layout)
