"""The attribution graph's figure (gptviz/present/figures/attribution_graph.py), on a small graph written by hand:
only the positions with a drawn node get a column, the token tick labels are escaped, every marker's customdata is its
node's id, every kept edge (and no other) is one line from its source to its target, coloured by its sign,
features of one (layer, position) stand side by side, user text in hovers is escaped, and a feature's hover shows
its label and its strongest snippets, their markup escaped, each peak in bold between ‹ ›."""
import json

import safetensors.torch
import torch
from test_feature_labels import TEXTS, VOCAB, arrays, write_snippets

from gptviz.interp import feature_labels
from gptviz.interp.attribution_graph import AttributionGraph
from gptviz.interp.graph_json import node_id
from gptviz.interp.graph_pruning import Pruned
from gptviz.present.figures.attribution_graph import (
    MAX_SNIPPETS,
    NEG_COLOR,
    POS_COLOR,
    attribution_figure,
    intervention_bars,
)

TOKENS = ["To", "<b>be</b>", "or", "not", "&amp", "be"]  # two that Plotly would read as markup
L, T = 2, len(TOKENS)
FEATURES = [(0, 1, 7), (0, 1, 9), (1, 4, 3)]  # (layer, position, feature): two share (layer 0, position 1)
F, K = len(FEATURES), 2
N = F + (L + 1) * T + K


def err(layer, pos):
    return F + layer * T + pos


def tok(pos):
    return F + L * T + pos


def logit(k):
    return F + (L + 1) * T + k


# (target, source, weight): kept edges, and one edge whose source is not kept (it must not be drawn)
KEPT = [(0, tok(1), 0.5), (1, tok(1), -0.4), (2, 0, 0.3), (2, tok(4), 0.2), (logit(0), 1, -0.6), (logit(0), 2, 0.9),
        (logit(1), 2, 0.1), (logit(1), err(0, 4), -0.05)]
DROPPED = (logit(0), err(1, 2), 0.7)


def graph_and_pruned():
    A = torch.zeros(N, N)
    node_mask = torch.zeros(N, dtype=torch.bool)
    edge_mask = torch.zeros(N, N, dtype=torch.bool)
    for t, s, w in [*KEPT, DROPPED]:
        A[t, s] = w
        edge_mask[t, s] = True
    for t, s, _ in KEPT:
        node_mask[t] = node_mask[s] = True
    node_mask[tok(0):] = True  # tokens and logits are always kept, as prune keeps them
    g = AttributionGraph(ids=torch.arange(T), n_layer=L, active_features=torch.tensor(FEATURES),
                         activations=torch.tensor([1.5, 0.25, 2.0]), selected=torch.arange(F),
                         logit_ids=torch.tensor([11, 12]), logit_probs=torch.tensor([0.7, 0.2]), adjacency=A)
    infl = torch.linspace(1.0, 0.1, N)
    return g, Pruned(node_mask=node_mask, edge_mask=edge_mask, cumulative=infl, node_influence=infl)


def figure_dict(**kw):
    g, p = graph_and_pruned()
    return g, attribution_figure(g, p, TOKENS, ["yes", "<no>"], "a graph", **kw).to_plotly_json()


def markers(spec):
    """node id -> (x, y), from every marker trace but the selection ring."""
    out = {}
    for t in spec["data"]:
        if t.get("mode", "").startswith("markers") and t.get("name") != "selected":
            for x, y, c in zip(t["x"], t["y"], t["customdata"]):
                out[c] = (x, y)
    return out


def lines(spec):
    """(source id, target id, colour) of every line segment, read back from its ends' coordinates."""
    at = {xy: c for c, xy in markers(spec).items()}
    out = []
    for t in spec["data"]:
        if t.get("mode") == "lines":
            xs, ys = list(t["x"]), list(t["y"])
            for k in range(0, len(xs), 3):
                out.append((at[xs[k], ys[k]], at[xs[k + 1], ys[k + 1]], t["line"]["color"]))
    return out


def test_only_positions_with_nodes_get_a_column_and_their_token_labels_are_escaped():
    g, spec = figure_dict()
    xa = spec["layout"]["xaxis"]
    # drawn: position 1 (two features, a token), 4 (a feature, an error node, a token) and 5 (the last: the logits)
    assert len(xa["tickvals"]) == 3
    assert xa["ticktext"] == ["… &lt;b&gt;be&lt;/b&gt;", "… &amp;amp", "be"]
    assert all("<b>" not in t for t in xa["ticktext"])
    xs = sorted({round(x, 6) for x, _ in markers(spec).values()})
    assert xs[0] >= 0 and xs[-1] <= spec["layout"]["xaxis"]["range"][1]


def test_customdata_is_each_drawn_nodes_id_and_the_kept_edges_are_the_lines():
    g, spec = figure_dict()
    want_nodes = {i for t, s, _ in KEPT for i in (t, s)} | {logit(0), logit(1)}
    assert set(markers(spec)) == {node_id(g, i) for i in want_nodes}
    assert node_id(g, err(1, 2)) not in markers(spec)  # its edge is kept but the node is not
    drawn = {(s, t): c for s, t, c in lines(spec)}
    assert set(drawn) == {(node_id(g, s), node_id(g, t)) for t, s, _ in KEPT}
    for t, s, w in KEPT:
        assert drawn[node_id(g, s), node_id(g, t)] == (POS_COLOR if w > 0 else NEG_COLOR), (t, s, w)


def test_features_of_one_cell_stand_side_by_side_and_layers_go_up():
    g, spec = figure_dict()
    at = markers(spec)
    a, b, c = (at[node_id(g, i)] for i in range(3))
    assert a[1] == b[1] == 1.0 and a[0] != b[0]  # layer 0 is the row above the tokens
    assert c[1] == 2.0
    assert at[node_id(g, tok(1))][1] == 0.0 and at[node_id(g, logit(0))][1] == L + 1


def test_hover_texts_and_group_names_are_escaped_and_picked_nodes_ringed_with_their_edges():
    g, spec = figure_dict(labels={(0, 7): "<i>label</i>"}, groups=[["<img src=x onerror=alert(1)>", "0_7_1"]],
                          picked=["0_7_1"])
    feats = next(t for t in spec["data"] if t.get("name") == "features")
    text = feats["hovertext"][0]
    assert text.startswith("L0 #7 at '&lt;b&gt;be&lt;/b&gt;' act 1.50")
    assert "&lt;i&gt;label&lt;/i&gt;" in text and "&lt;img src=x onerror=alert(1)&gt;" in text
    assert "<img" not in str(spec) and "<i>" not in str(spec)
    ring = next(t for t in spec["data"] if t.get("name") == "selected")
    assert list(ring["customdata"]) == ["0_7_1"]
    own = [t for t in spec["data"] if t.get("name") == "selected node's edges"]  # its two edges, both positive
    assert len(own) == 1 and own[0]["line"]["color"] == POS_COLOR and list(own[0]["x"]).count(None) == 2
    logits = next(t for t in spec["data"] if t.get("name") == "logits")
    assert list(logits["text"]) == ["'yes'<br>70%", "'&lt;no&gt;'<br>20%"]


def escaped(text):
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def test_a_features_hover_shows_its_label_and_strongest_snippets_escaped(tmp_path):
    # feature 7 of layer 0 (node 0_7_1): three snippets full of markup, as (token ids, activations); TEXTS has
    # "Caesar", " ", "&", "<b>", "x" and "<script>" at ids 6, 2, 5, 4, 8, 7
    spans = {0: {7: [([6, 2, 5, 4, 8, 7], [0.0, 0.1, 0.2, 0.9, 0.3, 0.0]), ([7, 4, 5, 1], [0.2, 0.1, 0.6, 0.0]),
                     ([0, 0, 7], [0.0, 0.0, 0.5])]}}
    path = write_snippets(tmp_path / "t.transcoder.snippets.safetensors", spans, n_layer=L, n_features=10)
    up = [torch.tensor([[8, 4, 3]] * 10).numpy() for _ in range(L)]  # promoted: 'x', '<b>', '↵'
    per_layer = arrays(path, L)
    g, spec = figure_dict(labels=feature_labels.feature_labels(10, VOCAB, up, per_layer),
                          snippets=feature_labels.feature_snippets(per_layer, TEXTS, n=3))
    feats = next(t for t in spec["data"] if t.get("name") == "features")
    hover = dict(zip(feats["customdata"], feats["hovertext"]))["0_7_1"]
    raw = safetensors.torch.load_file(str(path))  # what the hover should say, read from the file's tensors
    lines, peaks = [], []
    for j in range(3):
        n = int((raw["L0.ids"][7, j] >= 0).sum())
        ids = raw["L0.ids"][7, j, :n].tolist()
        p = int(raw["L0.acts"][7, j, :n].float().argmax())
        peaks += [VOCAB[ids[p]]] if VOCAB[ids[p]] not in peaks else []
        before, after = "".join(TEXTS[t] for t in ids[:p]), "".join(TEXTS[t] for t in ids[p + 1:])
        lines.append(f"{escaped(before[-5:])}<b>‹{escaped(TEXTS[ids[p]])}›</b>{escaped(after[:3])}")
    label = "fires on " + ", ".join(f"'{w}'" for w in peaks) + " · promotes 'x', '<b>', '↵'"
    assert escaped(label) in hover.split("<br>")
    assert lines[0] == "sar &amp;<b>‹&lt;b&gt;›</b>x&lt;s" and lines[0] in hover and lines[1] in hover
    assert lines[2] not in hover and hover.count("<b>") == MAX_SNIPPETS == 2  # the two strongest only
    assert "<script>" not in json.dumps(spec) and "&lt;script&gt;" in hover
    other = dict(zip(feats["customdata"], feats["hovertext"]))["0_9_1"]  # a feature without snippets: its label
    assert "never fires on the held-out text · promotes 'x', '&lt;b&gt;', '↵'" in other and "<b>" not in other


def test_intervention_bars_show_both_changes_per_token():
    spec = intervention_bars(["a", "<b>"], torch.tensor([0.5, -1.0]), [0.4, -0.8], "t").to_plotly_json()
    assert [list(t["x"]) for t in spec["data"]] == [[0.5, -1.0], [0.4, -0.8]]
    assert spec["layout"]["yaxis"]["ticktext"] == ["'a'", "'&lt;b&gt;'"]
