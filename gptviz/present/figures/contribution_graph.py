"""The contribution graph as a picture: layers from the bottom up, tokens from left to right, the routes as lines.

A pure function: a ``ContributionGraph`` (``gptviz.interp.contributions``) and the token labels in, a Plotly figure
out. Each edge's width and opacity grow with its share; its colour says what it passes through (a head, an MLP, or
the residual stream's skip), in colours that stay apart for the common colour blindnesses (Okabe and Ito). Heads
and MLPs are markers carrying ``customdata`` ("head:L:H:I" / "mlp:L:I"), as are the middles of their edges (an
edge from key token J: "head:L:H:I:J"), so a click on either names the block to open.
"""
from __future__ import annotations

from typing import Optional, Sequence

import plotly.graph_objects as go

from .base import TICK_FONT, axis, base_layout, escape_label, figure, text_px

HEAD_COLOR = "#0072B2"  # blue
MLP_COLOR = "#D55E00"  # vermillion
SKIP_COLOR = "#7a7a7a"  # the residual stream
STREAM_COLOR = "#4d4d4d"
BINS = (0.0, 0.1, 0.2, 0.35, 0.5, 1.01)  # edges drawn in five widths


def _rows(kind: str) -> dict[str, float]:
    """Each node type's height inside a layer (a layer is one unit tall; its input stream at 0)."""
    if kind == "sequential":
        return {"head": 0.28, "mid": 0.5, "mlp": 0.7}
    if kind == "parallel":
        return {"head": 0.4, "mlp": 0.7}
    return {"head": 0.5}


SPREAD = 0.84  # the share of a token's column its heads spread over
PLOT_PX = 820  # about how wide the plot is on a 1280-pixel screen


def columns(graph) -> tuple[list[float], list[float]]:
    """(centres, widths) of the token columns 0 … position. Only the positions the graph reaches get a column, side
    by side across the plot's width, wider the more heads of the graph sit in it side by side; a position the graph
    does not reach has width 0 (no column, no tick), so a graph at the end of a long line does not crowd into one
    column at the right edge."""
    crowd: dict[int, dict[int, int]] = {}
    for n in graph.nodes:
        if n[0] == "head":
            crowd.setdefault(n[3], {}).setdefault(n[1], 0)
            crowd[n[3]][n[1]] += 1
    used = {n[-1] for n in graph.nodes}
    centres, widths, x = [], [], 0.0
    for i in range(graph.position + 1):
        most = max(crowd.get(i, {}).values(), default=0)
        w = 1.0 + 0.4 * max(0, most - 2) if i in used else 0.0
        centres.append(x + w / 2)
        widths.append(w)
        x += w
    return centres, widths


def tick_labels(tokens: Sequence[str], widths: Sequence[float]) -> tuple[list[int], list[str]]:
    """The positions drawn (width > 0) and their labels: the token, with "…" before it where positions the graph does
    not reach were left out just before it."""
    shown = [i for i, w in enumerate(widths) if w > 0]
    labels = []
    for k, i in enumerate(shown):
        tok = str(tokens[i]) if i < len(tokens) else str(i)
        gap = i > (shown[k - 1] + 1 if k else 0)
        labels.append(("… " if gap else "") + tok)
    return shown, labels


def _head_slots(nodes) -> dict[tuple, float]:
    """Each head node's place in its column, from -0.5 to 0.5: the heads of the graph at one (layer, position)
    spread evenly, in head order."""
    cells: dict[tuple, list[tuple]] = {}
    for n in nodes:
        if n[0] == "head":
            cells.setdefault((n[1], n[3]), []).append(n)
    out = {}
    for heads in cells.values():
        heads.sort()
        for k, n in enumerate(heads):
            out[n] = 0.0 if len(heads) == 1 else (k + 0.5) / len(heads) - 0.5
    return out


def node_xy(node: tuple, kind: str, centres: Sequence[float], widths: Sequence[float],
            slot: float = 0.0) -> tuple[float, float]:
    """Where a node is drawn: x its token's column (a head moved ``slot`` of the column to the side, an MLP a
    little to the right, off the skip's line), y the layer."""
    rows = _rows(kind)
    i = node[-1]
    x = centres[i]
    if node[0] == "head":
        return x + slot * SPREAD * widths[i], node[1] + rows["head"]
    if node[0] == "x":
        return x, float(node[1])
    if node[0] == "mlp":
        return x + 0.3 * widths[i], node[1] + rows["mlp"]
    return x, node[1] + rows["mid"]


def node_key(node: tuple) -> str:
    """What a click on a node hands back: "head:L:H:I", "mlp:L:I", or "" for a stream node."""
    return ":".join(str(v) for v in node) if node[0] in ("head", "mlp") else ""


def _tok(tokens: Sequence[str], i: int) -> str:
    """A token and its position for hover text, the token escaped (so even a token spelling ``<b>``, a tag the
    figures keep, stays text)."""
    return f"'{escape_label(str(tokens[i]))}' ({i})" if 0 <= i < len(tokens) else str(i)


def _name(node: tuple, tokens: Sequence[str], n_layer: int) -> str:
    if node[0] == "head":
        return f"L{node[1]} H{node[2]} at {_tok(tokens, node[3])}"
    if node[0] == "mlp":
        return f"L{node[1]} MLP at {_tok(tokens, node[2])}"
    if node[0] == "mid":
        return f"stream after L{node[1]} attention at {_tok(tokens, node[2])}"
    if node[1] == 0:
        return f"embedding of {_tok(tokens, node[2])}"
    if node[1] == n_layer:
        return f"final stream at {_tok(tokens, node[2])}"
    return f"stream into L{node[1]} at {_tok(tokens, node[2])}"


def contribution_figure(graph, tokens: Sequence[str], title: str, prediction: Optional[str] = None) -> go.Figure:
    """The graph's edges as lines (width and opacity by share), its heads and MLPs as markers to click, the input
    tokens along the bottom and the prediction at the top of its position's column."""
    kind, L = graph.kind, graph.n_layer
    slots = _head_slots(graph.nodes)
    centres, widths = columns(graph)
    xy = {n: node_xy(n, kind, centres, widths, slots.get(n, 0.0)) for n in graph.nodes}
    gaps = [abs(xy[a][0] - xy[b][0]) for a in slots for b in slots if a < b and a[1] == b[1] and a[3] == b[3]]
    unit_px = PLOT_PX / (sum(widths) + 0.6)
    head_px = int(max(8, min(16, 0.85 * unit_px * min(gaps, default=1.0))))
    data = []
    for lo, hi in zip(BINS[:-1], BINS[1:]):
        for colour, kinds, label in ((SKIP_COLOR, ("skip",), "residual stream"),
                                     (HEAD_COLOR, ("head_in", "head_out", "attn"), "through a head"),
                                     (MLP_COLOR, ("mlp_in", "mlp_out"), "through an MLP")):
            xs, ys = [], []
            for e in graph.edges:
                if e.kind in kinds and lo <= e.weight < hi:
                    (x0, y0), (x1, y1) = xy[e.src], xy[e.dst]
                    xs += [x0, x1, None]
                    ys += [y0, y1, None]
            if xs:
                w = (lo + min(hi, 1.0)) / 2
                data.append(dict(type="scatter", mode="lines", x=xs, y=ys, hoverinfo="skip", showlegend=False,
                                 line=dict(color=colour, width=1.5 + 12 * w), opacity=min(1.0, 0.45 + 0.8 * w),
                                 name=label))
    # the middles of the head and MLP edges: hover says the share, a click opens the block
    mx, my, mtext, mkey = [], [], [], []
    for e in graph.edges:
        if e.kind == "skip":
            continue
        block = e.dst if e.kind in ("head_in", "mlp_in", "attn") else e.src
        (x0, y0), (x1, y1) = xy[e.src], xy[e.dst]
        mx.append((x0 + x1) / 2)
        my.append((y0 + y1) / 2)
        mtext.append(f"{_name(e.src, tokens, L)} → {_name(e.dst, tokens, L)}<br>share {e.weight:.3f}")
        mkey.append(node_key(block) + (f":{e.src[2]}" if e.kind == "head_in" else ""))  # and the key token
    if mx:
        data.append(dict(type="scatter", mode="markers", x=mx, y=my, customdata=mkey, text=mtext, name="edges",
                         marker=dict(size=12, color="rgba(0,0,0,0.01)"), hovertemplate="%{text}<extra></extra>",
                         showlegend=False))
    groups = (("stream", lambda n: n[0] in ("x", "mid"), dict(size=9, color=STREAM_COLOR, symbol="circle")),
              ("head", lambda n: n[0] == "head", dict(size=head_px, color=HEAD_COLOR, symbol="circle",
                                                      line=dict(color="white", width=1))),
              ("MLP", lambda n: n[0] == "mlp", dict(size=16, color=MLP_COLOR, symbol="square",
                                                    line=dict(color="white", width=1))))
    for label, pick, marker in groups:
        nodes = [n for n in graph.nodes if pick(n) and n != graph.output]
        if not nodes:
            continue
        text = [_name(n, tokens, L) + ("<br>click to open it" if n[0] != "x" and n[0] != "mid" else "")
                for n in nodes]
        data.append(dict(type="scatter", mode="markers", x=[xy[n][0] for n in nodes], y=[xy[n][1] for n in nodes],
                         customdata=[node_key(n) for n in nodes], text=text, marker=marker, name=label,
                         hovertemplate="%{text}<extra></extra>", showlegend=True))
    ox, oy = xy[graph.output]
    said = f"predicts '{escape_label(str(prediction))}'" if prediction is not None else "the prediction"
    data.append(dict(type="scatter", mode="markers+text", x=[ox], y=[oy], text=[said + "  "],
                     textposition="middle left",
                     marker=dict(size=20, color="#000000", symbol="star"), name="prediction", showlegend=False,
                     textfont=dict(size=16), hovertemplate=f"final stream at {_tok(tokens, graph.position)}: "
                                                           f"{said}<extra></extra>"))
    shown, ticktext = tick_labels(tokens, widths)
    xa = axis("input token (only the positions the graph reaches; … where some were left out)",
              range=[-0.3, sum(widths) + 0.3], tickmode="array", tickvals=[centres[i] for i in shown],
              ticktext=ticktext, tickfont=TICK_FONT)
    if any(text_px(t, TICK_FONT["size"]) > widths[i] * unit_px - 4 for t, i in zip(ticktext, shown)):
        xa["tickangle"] = -90  # upright, one column each, rather than into each other
    step = max(1, (L + 11) // 12)
    heads_row = _rows(kind)["head"]
    yvals, ytext = [0.0, float(L)], ["embeddings", "output"]
    for l in range(0, L, step):  # each layer by its heads' row (and its MLP's, when there is room)
        yvals.append(l + heads_row)
        ytext.append((f"L{l} heads" if getattr(graph, "heads", True) else f"L{l} attention") if L <= 4 else f"L{l}")
        if L <= 2 and "mlp" in _rows(kind):
            yvals.append(l + _rows(kind)["mlp"])
            ytext.append(f"L{l} MLP")
    ya = axis("layer", range=[-0.35, L + 0.45], tickmode="array", tickvals=yvals, ticktext=ytext, tickfont=TICK_FONT)
    height = int(min(680, 360 + 30 * L))  # twelve layers still fit a 720-pixel projector screen
    layout = base_layout(title, height, xaxis=xa, yaxis=ya, hovermode="closest", dragmode=False,
                         legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="right", x=1.0,
                                     font=TICK_FONT))
    return figure(data, layout)
