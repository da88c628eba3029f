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
from typing import Optional, Sequence

import numpy as np
import plotly.graph_objects as go

from .config import ModelConfig
from .steps import MASKED, NONNEGATIVE, PROBABILITY
from .views import Matrix

FONT = dict(size=16)
TICK_FONT = dict(size=14)
MASK_COLOR = "#9a9a9a"
SIGNED_SCALE = "RdBu_r"
PROB_SCALE = "Blues"
NONNEG_SCALE = "Viridis"
MAX_HOVER_CELLS = 40_000  # beyond this the hover names positions by number only
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


def _ticks(labels: Sequence[str]) -> dict:
    n = len(labels)
    step = max(1, math.ceil(n / MAX_TICKS))
    idx = list(range(0, n, step))
    return dict(tickmode="array", tickvals=idx, ticktext=[labels[i] for i in idx], tickfont=TICK_FONT)


def _layout(fig: go.Figure, title: str, n_rows: int, x_title: str, y_title: str, height: Optional[int] = None):
    fig.update_layout(
        title=dict(text=title, font=dict(size=18)),
        font=FONT,
        height=height or int(min(720, max(260, 30 * n_rows + 150))),
        margin=dict(l=10, r=10, t=60, b=10),
        plot_bgcolor="white",
    )
    fig.update_xaxes(title_text=x_title, showgrid=False, zeroline=False)
    fig.update_yaxes(title_text=y_title, showgrid=False, zeroline=False, autorange="reversed")
    return fig


def heatmap(m: Matrix, title: str = "", show_values: bool = False, colorbar_title: str = "",
            height: Optional[int] = None) -> go.Figure:
    """One step as a heatmap: rows are positions (tokens), columns whatever the step's last axis is."""
    z = np.asarray(m.values, dtype=float)
    nr, nc = z.shape
    ca = color_args(m.kind, z)
    hr = m.hover_rows or list(m.rows)
    hc = m.hover_cols or list(m.cols)
    trace_kw = dict(z=z, x=list(range(nc)), y=list(range(nr)), colorbar=dict(title=colorbar_title, tickfont=TICK_FONT), **ca)
    if nr * nc <= MAX_HOVER_CELLS:
        custom = np.empty((nr, nc, 2), dtype=object)
        custom[:, :, 0] = np.asarray(hr, dtype=object)[:, None]
        custom[:, :, 1] = np.asarray(hc, dtype=object)[None, :]
        trace_kw["customdata"] = custom
        trace_kw["hovertemplate"] = (f"{m.row_title or 'row'} %{{customdata[0]}}<br>{m.col_title or 'column'} "
                                     "%{customdata[1]}<br>value %{z:.4g}<extra></extra>")
    else:
        trace_kw["hovertemplate"] = f"{m.row_title} %{{y}}<br>{m.col_title} %{{x}}<br>value %{{z:.4g}}<extra></extra>"
    if show_values and nr * nc <= MAX_TEXT_CELLS:
        trace_kw["texttemplate"] = "%{z:.2f}"
        trace_kw["textfont"] = dict(size=12)
    fig = go.Figure(go.Heatmap(**trace_kw))
    if m.masked is not None and m.masked.any():
        mz = np.where(m.masked, 1.0, np.nan)
        mask_kw = dict(z=mz, x=list(range(nc)), y=list(range(nr)), showscale=False,
                       colorscale=[[0, MASK_COLOR], [1, MASK_COLOR]], zmin=0, zmax=1, name="masked")
        if nr * nc <= MAX_HOVER_CELLS:
            mask_kw["customdata"] = trace_kw["customdata"]
            mask_kw["hovertemplate"] = (f"{m.row_title} %{{customdata[0]}}<br>{m.col_title} %{{customdata[1]}}"
                                        "<br>masked: this key is in the future or is padding<extra></extra>")
        fig.add_trace(go.Heatmap(**mask_kw))
    if m.note:
        title = f"{title} <span style='font-size:13px'>({m.note})</span>" if title else m.note
    _layout(fig, title, nr, m.col_title, m.row_title, height)
    fig.update_xaxes(**_ticks(m.cols))
    fig.update_yaxes(**_ticks(m.rows))
    return fig


def tiled_heatmap(blocks: Sequence[Sequence[np.ndarray]], row_names: Sequence[str], col_names: Sequence[str],
                  kind: str = PROBABILITY, title: str = "", masked: Optional[np.ndarray] = None,
                  height: Optional[int] = None) -> go.Figure:
    """A grid of equal-sized matrices in one heatmap (fast even for 12 × 12 heads), one-cell gaps between.

    blocks[r][c]: (T, T). ``masked`` (T, T) is drawn grey in every tile.
    """
    R, C = len(blocks), len(blocks[0])
    T = np.asarray(blocks[0][0]).shape[0]
    g = T + 1
    big = np.full((R * g - 1, C * g - 1), np.nan)
    mask_big = np.full_like(big, np.nan)
    for r in range(R):
        for c in range(C):
            tile = np.asarray(blocks[r][c], dtype=float)
            if masked is not None:
                mask_big[r * g:r * g + T, c * g:c * g + T] = np.where(masked, 1.0, np.nan)
                tile = np.where(masked, np.nan, tile)
            big[r * g:r * g + T, c * g:c * g + T] = tile
    fig = go.Figure(go.Heatmap(z=big, hovertemplate="value %{z:.3f}<extra></extra>", **color_args(kind, big),
                               colorbar=dict(tickfont=TICK_FONT)))
    if masked is not None and masked.any():
        fig.add_trace(go.Heatmap(z=mask_big, showscale=False, colorscale=[[0, MASK_COLOR], [1, MASK_COLOR]],
                                 zmin=0, zmax=1, hovertemplate="masked<extra></extra>"))
    _layout(fig, title, R * g, "", "", height or int(min(900, max(300, 60 + R * max(90, 8 * g)))))
    fig.update_xaxes(tickmode="array", tickvals=[c * g + (T - 1) / 2 for c in range(C)], ticktext=list(col_names),
                     tickfont=TICK_FONT)
    fig.update_yaxes(tickmode="array", tickvals=[r * g + (T - 1) / 2 for r in range(R)], ticktext=list(row_names),
                     tickfont=TICK_FONT)
    return fig


def side_by_side(left: Matrix, right: Matrix, left_title: str, right_title: str, height: Optional[int] = None) -> go.Figure:
    """Two same-shaped matrices next to each other on one colour scale (e.g. a plain average vs a learned pattern)."""
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=(left_title, right_title), horizontal_spacing=0.08)
    both = np.concatenate([left.values[np.isfinite(left.values)], right.values[np.isfinite(right.values)]])
    ca = color_args(left.kind, both)
    for i, m in enumerate((left, right), start=1):
        fig.add_trace(go.Heatmap(z=m.values, showscale=i == 2, hovertemplate="query %{y} · key %{x}<br>%{z:.3f}<extra></extra>",
                                 colorbar=dict(tickfont=TICK_FONT), **ca), row=1, col=i)
        if m.masked is not None and m.masked.any():
            fig.add_trace(go.Heatmap(z=np.where(m.masked, 1.0, np.nan), showscale=False, zmin=0, zmax=1,
                                     colorscale=[[0, MASK_COLOR], [1, MASK_COLOR]], hovertemplate="masked<extra></extra>"),
                          row=1, col=i)
        fig.update_xaxes(**_ticks(m.cols), row=1, col=i)
        fig.update_yaxes(**_ticks(m.rows), autorange="reversed", row=1, col=i)
    fig.update_layout(font=FONT, height=height or int(min(640, max(300, 28 * len(left.rows) + 140))),
                      margin=dict(l=10, r=10, t=60, b=10), plot_bgcolor="white")
    return fig


def bar_chart(labels: Sequence[str], values: Sequence[float], title: str = "", x_title: str = "",
              y_title: str = "", highlight: Optional[int] = None, horizontal: bool = True,
              prob: bool = False) -> go.Figure:
    """Bars, e.g. the top-k next tokens or each parameter's gradient norm. ``highlight`` colours one bar."""
    colors = ["#1f77b4"] * len(values)
    if highlight is not None and 0 <= highlight < len(values):
        colors[highlight] = "#d62728"
    if horizontal:
        fig = go.Figure(go.Bar(x=list(values), y=list(range(len(labels))), orientation="h", marker_color=colors,
                               text=[f"{v:.3g}" for v in values], textposition="auto",
                               hovertemplate="%{customdata}: %{x:.4g}<extra></extra>", customdata=list(labels)))
        fig.update_yaxes(tickmode="array", tickvals=list(range(len(labels))), ticktext=list(labels),
                         autorange="reversed", tickfont=TICK_FONT, title_text=y_title)
        fig.update_xaxes(title_text=x_title, range=[0, 1] if prob else None)
    else:
        fig = go.Figure(go.Bar(x=list(range(len(labels))), y=list(values), marker_color=colors,
                               hovertemplate="%{customdata}: %{y:.4g}<extra></extra>", customdata=list(labels)))
        fig.update_xaxes(tickmode="array", tickvals=list(range(len(labels))), ticktext=list(labels), tickfont=TICK_FONT,
                         title_text=x_title)
        fig.update_yaxes(title_text=y_title, range=[0, 1] if prob else None)
    fig.update_layout(title=dict(text=title, font=dict(size=18)), font=FONT, margin=dict(l=10, r=10, t=60, b=10),
                      height=int(min(720, max(260, (28 * len(labels) + 120) if horizontal else 420))),
                      plot_bgcolor="white")
    return fig


def line_chart(series: dict[str, Sequence[float]], x: Optional[Sequence[float]] = None, title: str = "",
               x_title: str = "", y_title: str = "", hlines: Optional[dict[str, float]] = None) -> go.Figure:
    """Lines (e.g. a loss curve), with optional labelled horizontal reference lines (e.g. ln V)."""
    fig = go.Figure()
    for name, ys in series.items():
        fig.add_trace(go.Scatter(x=list(x) if x is not None else list(range(len(ys))), y=list(ys), mode="lines+markers"
                                 if len(ys) < 40 else "lines", name=name))
    for label, yv in (hlines or {}).items():
        fig.add_hline(y=yv, line_dash="dash", line_color="#777", annotation_text=label, annotation_font=TICK_FONT)
    fig.update_layout(title=dict(text=title, font=dict(size=18)), font=FONT, height=380,
                      margin=dict(l=10, r=10, t=60, b=10), xaxis_title=x_title, yaxis_title=y_title,
                      legend=dict(font=TICK_FONT))
    return fig


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


def architecture_dot(cfg: ModelConfig, B: int, T: int) -> str:
    """The model as a Graphviz pipeline, each arrow labelled with the live tensor shape."""
    C, V, H, D, M, L = cfg.n_embd, cfg.vocab_size, cfg.n_head, cfg.d_head, cfg.d_mlp, cfg.n_layer
    pre = cfg.norm_placement == "pre"
    norm = "LayerNorm" if cfg.norm == "layernorm" else "RMSNorm"
    pos = {"learned": f"wpe: learned [{cfg.block_size}×{C}]", "sinusoidal": f"sin/cos table [{cfg.block_size}×{C}]",
           "rope": "RoPE (inside attention)", "none": "no position signal"}[cfg.pos_encoding]
    act = {"gelu": "GELU", "gelu_tanh": "GELU (tanh)", "relu": "ReLU"}[cfg.activation]
    lines = [
        "digraph G {", "rankdir=TB; node [shape=box, style=\"rounded,filled\", fillcolor=\"#eef3fb\", fontsize=14, fontname=Helvetica];",
        "edge [fontsize=12, fontname=Helvetica];",
        f'idx [label="token ids x\\n[B={B} × T={T}]", fillcolor="#fff3d6"];',
        f'wte [label="wte: token embedding\\n[V={V} × C={C}]"];',
    ]
    if cfg.pos_encoding in ("learned", "sinusoidal"):
        lines += [f'wpe [label="{pos}"];', 'add0 [label="+", shape=circle];',
                  f'idx -> wte; wte -> add0 [label="[{B}×{T}×{C}]"]; wpe -> add0 [label="[{T}×{C}]"];']
        prev = "add0"
    else:
        lines += ["idx -> wte;"]
        prev = "wte"
    attn_in = f"{norm} ln_1 → " if pre else ""
    mlp_in = f"{norm} ln_2 → " if pre else ""
    block = (f'block [label="× {L} block{"s" if L > 1 else ""}\\n'
             f'{attn_in}attention: {H} head{"s" if H > 1 else ""} × d_head={D}\\n'
             f'QKV [{B}×{T}×{3 * H * D}] → scores [{B}×{H}×{T}×{T}] → z [{B}×{T}×{H * D}] → + residual'
             + ("" if pre else f" → {norm} ln_1") + "\\n"
             f'{mlp_in}MLP: {C} → {M} ({act}) → {C} → + residual' + ("" if pre else f" → {norm} ln_2")
             + '", fillcolor="#e8f5e9"];')
    lines += [block, f'{prev} -> block [label="[{B}×{T}×{C}]"];']
    if pre:
        lines += [f'lnf [label="{norm} ln_f"];', f'block -> lnf [label="[{B}×{T}×{C}]"];']
        prev = "lnf"
    else:
        prev = "block"
    tied = " (tied to wte)" if cfg.tie_weights else ""
    lines += [
        f'head [label="lm_head{tied}\\n[C={C} × V={V}]"];', f'{prev} -> head [label="[{B}×{T}×{C}]"];',
        'loss [label="softmax → cross-entropy loss", fillcolor="#fdecea"];',
        f'head -> loss [label="logits [{B}×{T}×{V}]"];', "}",
    ]
    return "\n".join(lines)


def token_grid(tokens: Sequence[Sequence[str]], ids: np.ndarray, mask: np.ndarray, title: str = "",
               ignore_label: str = "—") -> go.Figure:
    """A B×T grid of tokens (e.g. x or y): each cell shows its token and id; padding is grey.

    ids: (B, T), -100 where there is no target; mask: (B, T) 1 for a real cell, 0 for padding.
    """
    ids = np.asarray(ids)
    B, T = ids.shape
    real = (np.asarray(mask) > 0) & (ids >= 0)
    z = np.where(real, 1.0, np.nan)
    text = [[(f"{tokens[b][t]}<br>{int(ids[b, t])}" if real[b, t] else ignore_label) for t in range(T)] for b in range(B)]
    fig = go.Figure(go.Heatmap(z=z, x=list(range(T)), y=list(range(B)), colorscale=[[0, "#dbe8fb"], [1, "#dbe8fb"]],
                               showscale=False, text=text, texttemplate="%{text}", textfont=dict(size=15),
                               hovertemplate="row %{y}, position %{x}<br>%{text}<extra></extra>", xgap=3, ygap=3))
    pad = np.where(real, np.nan, 1.0)
    if np.isfinite(pad).any():
        fig.add_trace(go.Heatmap(z=pad, x=list(range(T)), y=list(range(B)), showscale=False, xgap=3, ygap=3,
                                 colorscale=[[0, "#d0d0d0"], [1, "#d0d0d0"]], text=text, texttemplate="%{text}",
                                 hovertemplate="row %{y}, position %{x}: padding / no target<extra></extra>"))
    _layout(fig, title, B, "position t", "batch row b", height=int(min(600, 90 + 62 * B)))
    fig.update_xaxes(tickmode="array", tickvals=list(range(T)), ticktext=[str(t) for t in range(T)], tickfont=TICK_FONT)
    fig.update_yaxes(tickmode="array", tickvals=list(range(B)), ticktext=[str(b) for b in range(B)], tickfont=TICK_FONT)
    return fig
