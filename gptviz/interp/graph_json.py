"""An attribution graph as the JSON file Neuronpedia's graph viewer and circuit-tracer's local server read
(``metadata``, ``qParams``, ``nodes``, ``links``), written from circuit-tracer's description of its format.

Node ids, as circuit-tracer writes them: a feature ``"{layer}_{feature}_{pos}"``; an error node
``"{layer}_-1_{pos}"`` (circuit-tracer's newer form: the older ``"0_{layer}_{pos}"`` could be mistaken for a feature
of layer 0); a token ``"E_{token id}_{pos}"`` (layer "E"); a logit ``"{n_layer + 1}_{token id}_{last pos}"``. A
feature's ``feature`` number is the Cantor pairing of its layer and index, as circuit-tracer's. Links are the kept
edges with both ends kept, weights signed as in the adjacency. Supernodes are ``[name, node id, ...]`` lists.
"""
from __future__ import annotations

from typing import Optional, Sequence

from .attribution_graph import AttributionGraph
from .graph_pruning import Pruned

SCHEMA_VERSION = 1
MAX_NAME_CHARS = 80
MAX_SUPERNODES = 200


def cantor(layer: int, feature: int) -> int:
    return (layer + feature) * (layer + feature + 1) // 2 + feature


def node_id(graph: AttributionGraph, i: int) -> str:
    kind = graph.node(i)
    if kind[0] == "feature":
        return f"{kind[1]}_{kind[3]}_{kind[2]}"
    if kind[0] == "error":
        return f"{kind[1]}_-1_{kind[2]}"
    if kind[0] == "token":
        return f"E_{kind[2]}_{kind[1]}"
    return f"{graph.n_layer + 1}_{kind[2]}_{graph.n_pos - 1}"


def _node(graph: AttributionGraph, i: int, pruned: Pruned, tokens: Sequence[str], labels: dict) -> dict:
    kind = graph.node(i)
    base = {"node_id": node_id(graph, i), "token_prob": 0.0, "is_target_logit": False, "run_idx": 0,
            "reverse_ctx_idx": 0, "clerp": "", "influence": float(pruned.cumulative[i]), "activation": None}
    if kind[0] == "feature":
        _, layer, pos, feat, act = kind
        base.update(feature=cantor(layer, feat), layer=str(layer), ctx_idx=pos,
                    feature_type="cross layer transcoder", jsNodeId=f"{layer}_{feat}-0", activation=act,
                    clerp=labels.get((layer, feat), ""))
    elif kind[0] == "error":
        _, layer, pos = kind
        base.update(feature=-1, layer=str(layer), ctx_idx=pos, feature_type="mlp reconstruction error",
                    jsNodeId=f"{layer}_-1-{pos}")
    elif kind[0] == "token":
        _, pos, tok = kind
        base.update(feature=pos, layer="E", ctx_idx=pos, feature_type="embedding", jsNodeId=f"E_{tok}-{pos}")
    else:
        _, k, tok, prob = kind
        last = graph.n_pos - 1
        text = tokens[k] if k < len(tokens) else str(tok)
        base.update(feature=tok, layer=str(graph.n_layer + 1), ctx_idx=last, feature_type="logit",
                    jsNodeId=f"L_{tok}-{last}", token_prob=prob, is_target_logit=k == 0, influence=None,
                    clerp=f'Output "{text}" (p={prob:.3f})')
    return base


def graph_json(graph: AttributionGraph, pruned: Pruned, prompt: str, prompt_tokens: Sequence[str],
               logit_tokens: Sequence[str], slug: str, scan: str, node_threshold: float,
               labels: Optional[dict] = None, pinned: Sequence[str] = (),
               supernodes: Sequence[Sequence[str]] = ()) -> dict:
    """The graph's JSON (a dict ready for ``json.dumps``). ``labels`` maps (layer, feature) to a feature's name;
    ``pinned`` and ``supernodes`` are node ids the page's user chose (ids not in the graph are dropped)."""
    labels = labels or {}
    kept = pruned.node_mask.nonzero(as_tuple=True)[0].tolist()
    edges = (pruned.edge_mask & pruned.node_mask.unsqueeze(0) & pruned.node_mask.unsqueeze(1)).nonzero().tolist()
    ids = {i: node_id(graph, i) for i in kept}
    links = [{"source": ids[s], "target": ids[t], "weight": float(graph.adjacency[t, s])} for t, s in edges]
    linked = {i for t, s in edges for i in (t, s)}
    always = set(range(graph.n_nodes - graph.logit_ids.numel() - graph.n_pos, graph.n_nodes))
    nodes = [_node(graph, i, pruned, logit_tokens, labels) for i in kept if i in linked or i in always]
    known = {n["node_id"] for n in nodes}
    groups = []
    for group in list(supernodes)[:MAX_SUPERNODES]:
        if not group:
            continue
        name, members = str(group[0])[:MAX_NAME_CHARS], [m for m in group[1:] if m in known]
        if members:
            groups.append([name, *members])
    return {
        "metadata": {"slug": slug, "scan": scan, "transcoder_list": [], "prompt_tokens": list(prompt_tokens),
                     "prompt": prompt, "node_threshold": float(node_threshold), "schema_version": SCHEMA_VERSION},
        "qParams": {"pinnedIds": [p for p in pinned if p in known], "supernodes": groups, "linkType": "both",
                    "clickedId": "", "sg_pos": ""},
        "nodes": nodes,
        "links": links,
    }
