"""An attribution graph (circuit tracing) as a picture: the pruned graph's nodes and edges, positions across, layers up.

A pure function: an ``AttributionGraph`` and its ``Pruned`` masks (``gptviz.interp``) and the token labels in, a
Plotly figure out. The bottom row holds the prompt's tokens (the embeddings, "E"), each layer a row above it, and the
target logits the top row. Features are circles sized by their influence on the logits, error nodes small grey
squares, tokens labelled boxes, logits labelled diamonds with their probability. An edge is a line, blue where it
excites and vermillion where it inhibits (Okabe and Ito's colours, apart for the common colour blindnesses), wider
the larger its weight. Only the positions that carry a drawn node get a column, spread across the width, so a graph
of a long prompt does not crowd into one column at the right edge; features of one (layer, position) sit side by
side. The figure is laid out for the width it is drawn at (``plot_px``: the Circuits page's, or a lesson's narrower
column): every column is at least ``MIN_COLUMN_PX`` wide there, so a position that holds only its token stays
readable beside a crowded one; where too many columns share the width for that, a token's label is left out where it
would run into a neighbour's (its box and hover still name it). The legend sits under the plot, out of the title's
way at any width. Every marker carries its node id
(``graph_json.node_id``) as ``customdata``, so a click names the node; a feature's hover names it, with its label and
its strongest snippets when they are given.

Also ``intervention_bars``: each target logit's change when features are scaled, as the graph predicts it and as the
model computes it.
"""
from __future__ import annotations

import math
from typing import Mapping, Optional, Sequence

import plotly.graph_objects as go
import torch

from ...interp.graph_json import node_id
from .base import TICK_FONT, axis, base_layout, escape_label, figure, text_px

POS_COLOR = "#0072B2"  # blue: an edge that excites its target
NEG_COLOR = "#D55E00"  # vermillion: one that inhibits it
FEATURE_COLOR = "#009E73"  # bluish green
ERROR_COLOR = "#8c8c8c"
TOKEN_FILL, TOKEN_LINE = "#f0f0f0", "#4d4d4d"
LOGIT_COLOR = "#CC79A7"  # reddish purple
PICKED_COLOR = "#000000"
MAX_EDGES = 8000  # more edges than this: the heaviest are drawn (the page says so)
# drawn by default: the heaviest 400 kept edges. In Streamlit's Chromium chart the drawing time grows with the
# lines: 1,328 edges held the browser's main thread for 0.9-1.0 s after each new graph, 400 for 0.2 s.
DRAWN_EDGES = 400
BINS = (0.0, 0.1, 0.25, 0.5, 1.01)  # |weight| over the largest drawn, in four widths
SPREAD = 0.84  # the share of a column its nodes at one (layer, position) spread over
PER_ROW, MAX_SUB_ROWS, SUB_ROW_DY = 12, 3, 0.24  # a crowded (layer, position): staggered rows, this far apart
TOKEN_ONLY = 0.55  # the width of a column that holds only its token (a column of nodes is at least 0.8), before
# the minimum below: beside a column of a dozen features side by side (9.6) it would be a hair-thin line
PLOT_PX = 700  # about how wide the plot area is on a 1280-pixel screen with the sidebar open
# A lesson's step draws it in its right-hand column: a plot area of about 310 px at 1280×720, and in presenter mode
# about 450 px at one and a half times the fonts (300 at these).
NARROW_PX = 300
# Every column gets at least MIN_COLUMN_PX of the plot's width, room for a token's upright label at the tick font
# (14 px) and its box; but together the raised columns never take more than MAX_RAISED of the width (a long prompt
# with many drawn positions: then labels are left out rather than crowded).
MIN_COLUMN_PX = 22
MAX_RAISED = 0.5
LABEL_LINE = 1.4  # an upright tick label takes this many times its font size across (its box: 1.3), with room to spare
LOGIT_PX = 66  # room for a logit's label
LOGIT_LABEL_PX = 30  # between the plot and its title: the logits' labels (two lines over each diamond) reach into it
MAX_SNIPPETS = 2  # snippets in a feature's hover
HOVER = dict(align="left", bgcolor="white", bordercolor="#555555", font=dict(size=14, color="#111111"))  # projector


def drawn(graph, pruned, max_edges: int = MAX_EDGES) -> tuple[list[int], list[tuple[int, int]], int]:
    """(nodes, edges, n_kept_edges): the nodes drawn (every end of a drawn edge, and every target logit), the edges
    drawn as (target, source) node indices (the kept edges with both ends kept; past ``max_edges``, the heaviest by
    |weight|), and how many edges were kept in all."""
    mask = pruned.edge_mask & pruned.node_mask.unsqueeze(0) & pruned.node_mask.unsqueeze(1)
    pairs = mask.nonzero()
    total = int(pairs.shape[0])
    if total > max_edges:
        w = graph.adjacency[pairs[:, 0], pairs[:, 1]].abs()
        pairs = pairs[w.topk(max_edges).indices.sort().values]
    edges = [(int(t), int(s)) for t, s in pairs.tolist()]
    K = int(graph.logit_ids.numel())
    nodes = sorted({i for e in edges for i in e} | set(range(graph.n_nodes - K, graph.n_nodes)))
    return nodes, edges, total


def _pos(node: tuple, last: int) -> int:
    return node[2] if node[0] in ("feature", "error") else node[1] if node[0] == "token" else last


def sub_rows(n: int) -> int:
    """How many staggered rows ``n`` nodes at one (layer, position) are drawn in: one up to ``PER_ROW``, at most
    ``MAX_SUB_ROWS``."""
    return max(1, min(MAX_SUB_ROWS, math.ceil(n / PER_ROW)))


def columns(kinds: dict[int, tuple], n_pos: int, plot_px: float = PLOT_PX) -> tuple[list[float], list[float]]:
    """(centres, widths) of the position columns 0 … n_pos - 1: only the positions with a drawn node (and the last,
    where the prediction is made) get a column, side by side, wider the more nodes share one (layer, position) there
    (a position with only its token, narrow), and none narrower than ``MIN_COLUMN_PX`` of a ``plot_px``-wide plot
    (see ``raised``); the others have width 0 (no column, no tick)."""
    crowd: dict[tuple[int, int], int] = {}
    for node in kinds.values():
        if node[0] in ("feature", "error"):
            crowd[node[2], node[1]] = crowd.get((node[2], node[1]), 0) + 1
    used = {_pos(n, n_pos - 1) for n in kinds.values()} | {n_pos - 1}
    natural = []
    for i in range(n_pos):
        most = max((math.ceil(c / sub_rows(c)) for (p, _), c in crowd.items() if p == i), default=0)
        natural.append((max(0.8, 0.8 * most) if most else TOKEN_ONLY) if i in used else 0.0)
    widths = raised(natural, MIN_COLUMN_PX / plot_px)
    centres, x = [], 0.0
    for w in widths:
        centres.append(x + w / 2)
        x += w
    return centres, widths


def raised(natural: Sequence[float], least: float) -> list[float]:
    """The column widths with every drawn one (width > 0) raised to at least a share of the whole x range (the
    widths and the range's 0.6 of padding): ``least``, or less when there are so many columns that together they
    would take more than ``MAX_RAISED``. The whole depends on the raised columns, so the floor is found as a fixed
    point (a contraction: the raised columns' shares add up to at most ``MAX_RAISED`` < 1)."""
    drawn_n = sum(1 for w in natural if w > 0)
    if not drawn_n:
        return list(natural)
    share = min(least, MAX_RAISED / drawn_n)
    total = sum(natural) + 0.6
    for _ in range(100):
        floor = share * total
        new = sum(max(w, floor) for w in natural if w > 0) + 0.6
        if abs(new - total) <= 1e-9 * new:
            break
        total = new
    floor = share * total
    return [max(w, floor) if w > 0 else 0.0 for w in natural]


def _spaced(centres: Sequence[float], widths: Sequence[float], shown: Sequence[int], gap: float) -> list[int]:
    """The positions among ``shown`` whose labels are kept: all of them when their columns are at least ``gap``
    apart (x units), else a label only where it clears every kept one, the last position's (the prediction's) first,
    then the columns with the most nodes (the widest), then the rest from the right."""
    if all(widths[i] >= gap for i in shown):
        return list(shown)
    order = sorted(shown, key=lambda i: (i != shown[-1], -round(widths[i], 9), -i))
    kept: list[int] = []
    for i in order:
        if all(abs(centres[i] - centres[j]) >= gap for j in kept):
            kept.append(i)
    return sorted(kept)


def tick_labels(tokens: Sequence[str], widths: Sequence[float]) -> tuple[list[int], list[str]]:
    """The positions drawn (width > 0) and their labels: the token, escaped, with "…" before it where positions
    without nodes were left out just before it."""
    shown = [i for i, w in enumerate(widths) if w > 0]
    out = []
    for k, i in enumerate(shown):
        tok = _show(tokens[i]) if i < len(tokens) else str(i)
        out.append(("… " if i > (shown[k - 1] + 1 if k else 0) else "") + tok)
    return shown, out


def _show(token) -> str:
    """A token as a label: escaped, a new line as ↵ (a label has one line), a lone space as ␣."""
    text = str(token).replace("\r", "").replace("\n", "↵")
    return escape_label("␣" if text == " " else text)


def _slots(kinds: dict[int, tuple]) -> dict[int, tuple[float, float]]:
    """Each feature's and error node's place in its cell: (across, from -0.5 to 0.5; up, in layers). The features of
    one (layer, position) in feature order, its error node last; past ``PER_ROW`` of them, in staggered rows."""
    cells: dict[tuple[int, int], list[tuple]] = {}
    for i, n in kinds.items():
        if n[0] in ("feature", "error"):
            order = (0, n[3]) if n[0] == "feature" else (1, 0)
            cells.setdefault((n[1], n[2]), []).append((*order, i))
    out = {}
    for members in cells.values():
        members.sort()
        rows = sub_rows(len(members))
        per = math.ceil(len(members) / rows)
        for k, (_, _, i) in enumerate(members):
            r, c = divmod(k, per)
            here = min(per, len(members) - r * per)
            across = 0.0 if here == 1 else (c + 0.5) / here - 0.5
            out[i] = (across, (r - (rows - 1) / 2) * SUB_ROW_DY)
    return out


def _edge_traces(graph, edges, xy) -> list[dict]:
    if not edges:
        return []
    weights = [float(graph.adjacency[t, s]) for t, s in edges]
    top = max(abs(w) for w in weights) or 1.0
    data, heaviest = [], {}
    for lo, hi in zip(BINS[:-1], BINS[1:]):  # light first: the heavy edges are drawn over them
        for sign, colour, name in ((1, POS_COLOR, "excites (+)"), (-1, NEG_COLOR, "inhibits (−)")):
            xs, ys = [], []
            for (t, s), w in zip(edges, weights):
                if (w > 0 if sign > 0 else w < 0) and lo <= abs(w) / top < hi:
                    xs += [xy[s][0], xy[t][0], None]
                    ys += [xy[s][1], xy[t][1], None]
            if xs:
                mid = (lo + min(hi, 1.0)) / 2
                heaviest[sign] = len(data)
                data.append(dict(type="scatter", mode="lines", x=xs, y=ys, hoverinfo="skip", name=name,
                                 legendgroup=name, legendrank=1 if sign > 0 else 2, showlegend=False,
                                 line=dict(color=colour, width=0.6 + 7 * mid),
                                 opacity=min(1.0, 0.12 + 1.2 * mid)))
    for k in heaviest.values():
        data[k]["showlegend"] = True  # the heaviest of each sign: its legend sample is visible
    return data


def snippet_line(before: str, peak: str, after: str) -> str:
    """A snippet as one hover line: its text escaped, new lines as ↵, the peak token in bold between ‹ › (its spaces
    as ␣, as the labels show tokens)."""
    def one(text: str) -> str:
        return escape_label(text.replace("\r", "").replace("\n", "↵"))

    return f"{one(before)}<b>‹{_show(peak.replace(' ', '␣'))}›</b>{one(after)}"


def _names(graph, kinds, tokens, logit_tokens, labels, groups, influence, snippets) -> dict[int, str]:
    def tok(p: int) -> str:
        return f"'{_show(tokens[p])}'" if 0 <= p < len(tokens) else str(p)

    member: dict[str, list[str]] = {}
    for g in groups:
        for m in list(g)[1:]:
            member.setdefault(str(m), []).append(escape_label(str(g[0])))
    out = {}
    for i, n in kinds.items():
        if n[0] == "feature":
            _, layer, pos, feat, act = n
            text = f"L{layer} #{feat} at {tok(pos)} act {act:.2f}"
            lab = labels.get((layer, feat))
            text += f"<br>{escape_label(str(lab))}" if lab else ""
            text += "".join(f"<br>{snippet_line(*w)}" for w in snippets.get((layer, feat), ())[:MAX_SNIPPETS])
            text += f"<br>influence {influence[i]:.3g}"
        elif n[0] == "error":
            text = f"error node: what the transcoder misses of L{n[1]}'s MLP at {tok(n[2])}"
        elif n[0] == "token":
            text = f"token {tok(n[1])} (position {n[1]})"
        else:
            k, prob = n[1], n[3]
            word = _show(logit_tokens[k]) if k < len(logit_tokens) else str(n[2])
            text = f"logit '{word}': p = {prob:.3f}"
        ids = member.get(node_id(graph, i))
        out[i] = text + (f"<br>in group: {', '.join(ids)}" if ids else "")
    return out


def attribution_figure(graph, pruned, tokens: Sequence[str], logit_tokens: Sequence[str], title: str,
                       labels: Optional[Mapping[tuple[int, int], str]] = None,
                       snippets: Optional[Mapping[tuple[int, int], Sequence[Sequence[str]]]] = None,
                       groups: Sequence[Sequence[str]] = (), picked: Sequence[str] = (),
                       max_edges: int = MAX_EDGES, legend: bool = True, plot_px: float = PLOT_PX) -> go.Figure:
    """The pruned graph (see the module's docstring). ``tokens``: the prompt's token labels, one per position;
    ``logit_tokens``: the target logits' tokens; ``labels``: (layer, feature) -> a feature's name; ``snippets``:
    (layer, feature) -> its strongest snippets as (before, peak token, after) texts, the first ``MAX_SNIPPETS`` shown
    in its hover; ``groups``: supernodes ``[name, node id, ...]`` (named in the hover); ``picked``: node ids drawn
    ringed; ``legend``: False leaves the legend out (where the text beside the graph says what its marks mean and the
    height is short: a lesson step in presenter mode); ``plot_px``: about how wide the plot area is where it is drawn
    (``NARROW_PX`` in a lesson's column), which sets the columns' least width, the labels' size and spacing and the
    markers' room. Every text is escaped here."""
    labels, snippets, L, T = labels or {}, snippets or {}, graph.n_layer, graph.n_pos
    nodes, edges, _ = drawn(graph, pruned, max_edges)
    kinds = {i: graph.node(i) for i in nodes}
    ids = {i: node_id(graph, i) for i in nodes}
    centres, widths = columns(kinds, T, plot_px)
    W = sum(widths)
    unit_px = plot_px / (W + 0.6)
    slots = _slots(kinds)
    logits = [i for i in nodes if kinds[i][0] == "logit"]
    step = min(max(1.0, LOGIT_PX / unit_px), W / max(1, len(logits)))
    xy = {}
    for i, n in kinds.items():
        if n[0] in ("feature", "error"):
            xy[i] = (centres[n[2]] + slots[i][0] * SPREAD * widths[n[2]], n[1] + 1 + slots[i][1])
        elif n[0] == "token":
            xy[i] = (centres[n[1]], 0.0)
        else:  # side by side, most probable first, centred over the last position, inside the plot
            start = min(max(0.0, centres[T - 1] - step * len(logits) / 2), W - step * len(logits))
            xy[i] = (start + (n[1] + 0.5) * step, float(L + 1))
    infl = {i: float(pruned.node_influence[i]) for i in nodes}
    names = _names(graph, kinds, tokens, logit_tokens, labels, groups, infl, snippets)
    data = _edge_traces(graph, edges, xy)
    cells: dict[tuple, int] = {}  # (layer, position) -> how many nodes share it
    for n in kinds.values():
        if n[0] in ("feature", "error"):
            cells[n[1:3]] = cells.get(n[1:3], 0) + 1
    top = max((infl[i] for i in nodes if kinds[i][0] == "feature"), default=0.0) or 1.0

    def size(i: int) -> float:  # by influence, never wider than the node's slot
        n = kinds[i]
        per = math.ceil(cells[n[1:3]] / sub_rows(cells[n[1:3]]))
        room = 0.9 * SPREAD * widths[n[2]] * unit_px / per if per > 1 else 40.0
        return round(max(6.0, min(8.0 + 16.0 * math.sqrt(max(infl[i], 0.0) / top), room)), 1)

    ringed = [i for i in nodes if ids[i] in set(picked)]
    for sign, colour in ((1, POS_COLOR), (-1, NEG_COLOR)):  # the selected nodes' own edges, drawn over the rest
        mine = [(t, s) for t, s in edges if (ids[t] in picked or ids[s] in picked)
                and (graph.adjacency[t, s] > 0) == (sign > 0)]
        if mine:
            data.append(dict(type="scatter", mode="lines", x=[v for t, s in mine for v in (xy[s][0], xy[t][0], None)],
                             y=[v for t, s in mine for v in (xy[s][1], xy[t][1], None)], hoverinfo="skip",
                             name="selected node's edges", showlegend=False, line=dict(color=colour, width=2.5)))
    if ringed:
        data.append(dict(type="scatter", mode="markers", x=[xy[i][0] for i in ringed], y=[xy[i][1] for i in ringed],
                         customdata=[ids[i] for i in ringed], name="selected", hoverinfo="skip", showlegend=False,
                         marker=dict(size=[(size(i) if kinds[i][0] == "feature" else 18) + 7 for i in ringed],
                                     color="rgba(0,0,0,0)", line=dict(color=PICKED_COLOR, width=2))))
    groups_drawn = (
        ("token", dict(symbol="square", size=26, color=TOKEN_FILL, line=dict(color=TOKEN_LINE, width=1.5))),
        ("error", dict(symbol="square", size=9, color=ERROR_COLOR, line=dict(color="white", width=1))),
        ("feature", dict(symbol="circle", color=FEATURE_COLOR, line=dict(color="white", width=1))),
        ("logit", dict(symbol="diamond", size=20, color=LOGIT_COLOR, line=dict(color="white", width=1))),
    )
    for kind, marker in groups_drawn:
        which = [i for i in nodes if kinds[i][0] == kind]
        if not which:
            continue
        if kind == "feature":
            marker = dict(marker, size=[size(i) for i in which])
        trace = dict(type="scatter", mode="markers", x=[xy[i][0] for i in which], y=[xy[i][1] for i in which],
                     customdata=[ids[i] for i in which], hovertext=[names[i] for i in which], name=kind + "s",
                     marker=marker, hovertemplate="%{hovertext}<extra></extra>", hoverlabel=HOVER,
                     showlegend=kind in ("feature", "error"))
        if kind == "token":  # a box as wide as its column allows, the token in it where it fits
            px = [min(26.0, max(8.0, 0.9 * widths[kinds[i][1]] * unit_px)) for i in which]
            box = [_show(tokens[kinds[i][1]]) if kinds[i][1] < len(tokens) else "" for i in which]
            trace.update(mode="markers+text", marker=dict(marker, size=px), textposition="middle center",
                         textfont=dict(size=13, color="#111111"),
                         text=[t if text_px(t, 13) <= p - 2 else "" for t, p in zip(box, px)])
        if kind == "logit":
            words = [_show(logit_tokens[kinds[i][1]]) if kinds[i][1] < len(logit_tokens) else "?" for i in which]
            # the labels may reach above the plot area, into the room kept under the title (LOGIT_LABEL_PX)
            trace.update(mode="markers+text", textposition="top center", textfont=dict(size=14), cliponaxis=False,
                         text=[f"'{w}'<br>{kinds[i][3]:.0%}" for w, i in zip(words, which)])
        data.append(trace)
    # upright labels one column each, smaller where columns are narrow, and past the smallest font some left out
    shown, ticktext = tick_labels(tokens, widths)
    narrow = min(widths[i] for i in shown) * unit_px
    tick_font = dict(TICK_FONT, size=int(max(10, min(TICK_FONT["size"], narrow / LABEL_LINE))))
    keep = set(_spaced(centres, widths, shown, LABEL_LINE * tick_font["size"] / unit_px))
    ticktext = [t for t, i in zip(ticktext, shown) if i in keep]
    shown = [i for i in shown if i in keep]
    xa = axis("", range=[-0.3, W + 0.3], tickmode="array", tickvals=[centres[i] for i in shown], ticktext=ticktext,
              tickfont=tick_font)
    del xa["title"]  # no title at all: plotly.js keeps a line of room under the tick labels even for an empty one
    if any(text_px(t, tick_font["size"]) > widths[i] * unit_px - 4 for t, i in zip(ticktext, shown)):
        xa["tickangle"] = -90
    ya = axis("layer", range=[-0.45, L + 1.9], tickmode="array", tickvals=list(range(L + 2)),
              ticktext=["tokens (E)", *(f"L{layer}" for layer in range(L)), "logits"], tickfont=TICK_FONT)
    # The legend under the plot, below the tick labels: placed in the whole figure's coordinates (yref "container"),
    # Plotly keeps its height free at the bottom on top of the margin the tick labels push, so it never meets them,
    # nor the title, however narrow the column and however large presenter mode's fonts (a legend at the top grew
    # into the title when its entries wrapped onto two rows). The title just above the plot: the top margin grows to
    # hold it (however many lines, at any font size) and LOGIT_LABEL_PX under it for the target logits' labels.
    layout = base_layout(title, int(min(700, 320 + 48 * L)), xaxis=xa, yaxis=ya, hovermode="closest",
                         dragmode=False, uirevision=f"{T}-{L}-{graph.n_features}",  # a box or lasso tool kept
                         legend=dict(orientation="h", xref="container", yref="container", x=0.0, xanchor="left",
                                     y=0.0, yanchor="bottom", font=TICK_FONT))
    layout["title"].update(yref="paper", y=1.0, yanchor="bottom", automargin=True, pad=dict(b=LOGIT_LABEL_PX))
    layout["margin"] = dict(layout["margin"], t=10)
    if not legend:
        layout["showlegend"] = False
    return figure(data, layout)


def node_words(node: tuple, tokens: Sequence[str], logit_tokens: Sequence[str]) -> str:
    """A node (``AttributionGraph.node``) in plain words, for a widget's label (not escaped: plain text)."""
    if node[0] == "feature":
        return f"L{node[1]} #{node[3]} at '{tokens[node[2]]}' ({node[2]}), act {node[4]:.2f}"
    if node[0] == "error":
        return f"error L{node[1]} at '{tokens[node[2]]}' ({node[2]})"
    if node[0] == "token":
        return f"token '{tokens[node[1]]}' ({node[1]})"
    return f"logit '{logit_tokens[node[1]]}' (p = {node[3]:.3f})"


def intervention_bars(tokens: Sequence[str], predicted, real, title: str,
                      computed: str = "computed (replacement model)") -> go.Figure:
    """Each target logit's change (minus the mean logit's change) as the graph predicts it and as the model
    computes it (``computed`` names how: the legend's second entry): two bars per token, tokens down the side."""
    pos = list(range(len(tokens)))
    words = [f"'{_show(t)}'" for t in tokens]
    bars = []
    for name, vals, colour in (("predicted by the graph", predicted, "#56B4E9"), (computed, real, "#E69F00")):
        v = [float(x) for x in (vals.tolist() if isinstance(vals, torch.Tensor) else vals)]
        bars.append(dict(type="bar", name=name, x=v, y=pos, orientation="h", marker=dict(color=colour),
                         customdata=words, hovertemplate=f"{name}: " + "%{customdata}: %{x:+.3f}<extra></extra>"))
    tick = dict(tickmode="array", tickvals=pos, ticktext=words, tickfont=TICK_FONT)
    xa = axis("change of the logit (minus the mean logit's)")
    xa.update(zeroline=True, zerolinecolor="#444444")
    layout = base_layout(title, int(min(620, max(260, 44 * len(tokens) + 140))), xaxis=xa,
                         yaxis=axis("target logit", reverse=True, **tick), barmode="group",
                         legend=dict(font=TICK_FONT, orientation="h", xref="container", yref="container", x=0.0,
                                     xanchor="left", y=0.0, yanchor="bottom"))  # under the axis title, never on it
    return figure(bars, layout)
