"""The Experts page's figures: where a mixture of experts' router sends each token (tokens × experts, the chosen
experts marked), and each expert's load against the even share.

Pure functions: arrays and labels in, a figure out, with the conventions of ``base``.
"""
from __future__ import annotations

from typing import Collection, Sequence

import numpy as np
import plotly.graph_objects as go

from .base import MASK_COLOR, PROB_SCALE, TICK_FONT, axis, base_layout, escape_label, figure, unique_labels

CHOSEN_COLOR = "#e6550d"  # orange: stands out on white and on dark blue
BAR_COLORS = ("#1f77b4", "#9467bd")  # your text, the held-out plays


def expert_labels(n_expert: int, off: Collection[int] = ()) -> list[str]:
    """ "expert 0" … "expert E-1", "(off)" after an expert switched off."""
    return [f"expert {e}" + (" (off)" if e in off else "") for e in range(n_expert)]


def routing_heatmap(probs: np.ndarray, weights: np.ndarray, tokens: Sequence[str], off: Collection[int] = (),
                    title: str = "", height: int = 560) -> go.Figure:
    """The router's probabilities, tokens (rows) × experts (columns), on a fixed 0-to-1 scale; a dot on every
    chosen cell (weight > 0), its weight in the hover; a switched-off expert's column grey.

    ``probs`` and ``weights``: (T, E), one batch row's ``router_probs`` and ``expert_weights``; ``tokens``: the T
    token labels."""
    p = np.asarray(probs, dtype=float)
    w = np.asarray(weights, dtype=float)
    T, E = p.shape
    xs = expert_labels(E, off)
    # escaped here: figure() keeps the figures' own tags (<b>, <br>) in hover text, and a token may be one
    hover_rows = unique_labels([f"{t}: '{escape_label(str(tok))}'" for t, tok in enumerate(tokens)])
    ys = list(range(T))
    main = dict(type="heatmap", z=p, x=xs, y=ys, zmin=0.0, zmax=1.0, colorscale=PROB_SCALE, customdata=w,
                colorbar=dict(title=dict(text="probability"), tickfont=TICK_FONT, len=0.8),
                text=[[hover_rows[t]] * E for t in range(T)],
                hovertemplate="token %{text}<br>%{x}<br>router probability %{z:.3f}<br>"
                              "weight %{customdata:.3f}<extra></extra>")
    data = [main]
    if off:
        grey = np.full((T, E), np.nan)
        grey[:, sorted(e for e in off if 0 <= e < E)] = 1.0
        data.append(dict(type="heatmap", z=grey, x=xs, y=ys, showscale=False, hoverongaps=False, name="off",
                         colorscale=[[0, MASK_COLOR], [1, MASK_COLOR]], zmin=0, zmax=1,
                         text=[[hover_rows[t]] * E for t in range(T)],
                         hovertemplate="token %{text}<br>%{x}: switched off, probability 0<extra></extra>"))
    rows, cols = np.nonzero(w > 0)
    row_px = max(4.0, (height - 150) / max(T, 1))
    data.append(dict(type="scatter", mode="markers", name="chosen expert (weight in the hover)", showlegend=True,
                     x=[xs[c] for c in cols], y=rows.tolist(),
                     marker=dict(symbol="circle", size=float(min(14.0, max(5.0, 0.6 * row_px))), color=CHOSEN_COLOR,
                                 line=dict(color="white", width=1)),
                     text=[f"{hover_rows[r]}<br>{xs[c]}<br>chosen · weight {w[r, c]:.3f} · probability "
                           f"{p[r, c]:.3f}" for r, c in zip(rows, cols)],
                     hovertemplate="%{text}<extra></extra>"))
    step = max(1, int(np.ceil(T * TICK_FONT["size"] * 1.3 / max(height - 150, 1))))  # labels that fit, apart
    shown = list(range(0, T, step))
    layout = base_layout(title, height,
                         xaxis=axis("", type="category", side="top", tickfont=TICK_FONT),
                         yaxis=axis("token", reverse=True, tickmode="array", tickvals=shown,
                                    ticktext=[str(tokens[t]) for t in shown], tickfont=TICK_FONT),
                         legend=dict(orientation="h", x=0, y=-0.02, yanchor="top"))
    layout["margin"] = dict(l=10, r=10, t=90, b=40)
    return figure(data, layout)


def load_bars(loads: dict[str, Sequence[float]], n_expert: int, off: Collection[int] = (),
              title: str = "") -> go.Figure:
    """Each expert's load (its share of the routing choices), one group of bars per expert, one bar per source
    (e.g. your text, the held-out plays), and the even share 1/E as a dashed line."""
    xs = [f"{e}" + (" (off)" if e in off else "") for e in range(n_expert)]  # short: they stay upright
    data = [dict(type="bar", name=name, x=xs, y=[float(v) for v in vals], marker=dict(color=BAR_COLORS[i % 2]),
                 hovertemplate=f"{name}<br>expert %{{x}}: %{{y:.3f}} of the choices<extra></extra>")
            for i, (name, vals) in enumerate(loads.items())]
    even = 1.0 / max(n_expert, 1)
    data.append(dict(type="scatter", mode="lines", name=f"even share 1/{n_expert}", x=xs, y=[even] * n_expert,
                     line=dict(color="#333333", width=2, dash="dash"),
                     hovertemplate=f"even share 1/{n_expert} = {even:.3f}<extra></extra>"))
    top = max([even] + [float(v) for vals in loads.values() for v in vals])
    layout = base_layout(title, 400, barmode="group",
                         xaxis=axis("expert", type="category", tickfont=TICK_FONT),
                         yaxis=axis("share of choices", range=[0, top * 1.5], tickfont=TICK_FONT),
                         legend=dict(x=0, y=1, xanchor="left", yanchor="top", font=dict(size=14),
                                     bgcolor="rgba(255,255,255,0.8)"))
    layout["margin"] = dict(l=10, r=10, t=80, b=10)
    return figure(data, layout)
