"""The attribution graph's JSON file (gptviz/interp/graph_json.py) against the format circuit-tracer writes and
Neuronpedia's viewer reads, field by field, on a graph whose nodes are known."""
import json

import torch

from gptviz.interp.attribution_graph import AttributionGraph
from gptviz.interp.graph_json import graph_json
from gptviz.interp.graph_pruning import Pruned


def small_graph():
    # 2 features (layer 0 pos 1 feature 5; layer 1 pos 2 feature 3), 2 layers, 3 positions, 2 logits
    F, L, T, K = 2, 2, 3, 2
    N = F + (L + 1) * T + K
    A = torch.zeros(N, N)
    tok = lambda p: F + L * T + p
    err = lambda layer, p: F + layer * T + p
    A[1, 0] = 0.5            # feature 0 -> feature 1
    A[0, tok(1)] = 2.0       # token 1 -> feature 0
    A[N - 2, 1] = -1.5       # feature 1 -> top logit
    A[N - 1, err(1, 2)] = 0.25  # error (1, 2) -> second logit
    A[N - 1, tok(0)] = 0.1   # an edge whose source is kept but the edge is not
    g = AttributionGraph(ids=torch.tensor([7, 8, 9]), n_layer=L,
                         active_features=torch.tensor([[0, 1, 5], [1, 2, 3], [1, 0, 4]]),
                         activations=torch.tensor([1.25, 0.75, 9.0]), selected=torch.tensor([0, 1]),
                         logit_ids=torch.tensor([11, 12]), logit_probs=torch.tensor([0.6, 0.3]), adjacency=A)
    node_mask = torch.zeros(N, dtype=torch.bool)
    node_mask[[0, 1, err(1, 2), tok(0), tok(1), tok(2), N - 2, N - 1]] = True
    edge_mask = torch.zeros(N, N, dtype=torch.bool)
    for t, s in [(1, 0), (0, tok(1)), (N - 2, 1), (N - 1, err(1, 2))]:
        edge_mask[t, s] = True
    edge_mask[0, err(0, 0)] = True  # an edge from a dropped node: not written
    cumulative = torch.linspace(0.1, 1.0, N)
    return g, Pruned(node_mask=node_mask, edge_mask=edge_mask, cumulative=cumulative, node_influence=cumulative)


def test_the_file_has_circuit_tracers_fields_and_ids():
    g, p = small_graph()
    out = graph_json(g, p, prompt="abc", prompt_tokens=["a", "b", "c"], logit_tokens=["x", "y"], slug="my-graph",
                     scan="gptviz-shakespeare", node_threshold=0.8, labels={(0, 5): "commas"},
                     pinned=["0_5_1", "nope"], supernodes=[["<b>group</b>", "0_5_1", "1_3_2", "missing"], ["empty"]])
    json.dumps(out)  # plain JSON
    assert set(out) == {"metadata", "qParams", "nodes", "links"}
    assert out["metadata"] == {"slug": "my-graph", "scan": "gptviz-shakespeare", "transcoder_list": [],
                               "prompt_tokens": ["a", "b", "c"], "prompt": "abc", "node_threshold": 0.8,
                               "schema_version": 1}
    nodes = {n["node_id"]: n for n in out["nodes"]}
    assert set(nodes) == {"0_5_1", "1_3_2", "1_-1_2", "E_7_0", "E_8_1", "E_9_2", "3_11_2", "3_12_2"}
    f = nodes["0_5_1"]
    assert (f["feature"], f["layer"], f["ctx_idx"], f["feature_type"], f["jsNodeId"]) == (
        (0 + 5) * (0 + 5 + 1) // 2 + 5, "0", 1, "cross layer transcoder", "0_5-0")
    assert f["activation"] == 1.25 and f["clerp"] == "commas"
    assert nodes["1_3_2"]["feature"] == (1 + 3) * (1 + 3 + 1) // 2 + 3 and nodes["1_3_2"]["activation"] == 0.75
    e = nodes["1_-1_2"]
    assert (e["feature"], e["layer"], e["ctx_idx"], e["feature_type"], e["jsNodeId"]) == (
        -1, "1", 2, "mlp reconstruction error", "1_-1-2")
    t = nodes["E_8_1"]
    assert (t["feature"], t["layer"], t["ctx_idx"], t["feature_type"], t["jsNodeId"]) == (
        1, "E", 1, "embedding", "E_8-1")
    top = nodes["3_11_2"]
    assert (top["layer"], top["ctx_idx"], top["feature_type"], top["jsNodeId"], top["is_target_logit"]) == (
        "3", 2, "logit", "L_11-2", True)
    assert top["token_prob"] == torch.tensor(0.6).item() and top["clerp"] == 'Output "x" (p=0.600)'
    assert top["influence"] is None and nodes["3_12_2"]["is_target_logit"] is False
    assert nodes["0_5_1"]["influence"] == float(p.cumulative[0])
    links = sorted((lk["source"], lk["target"], lk["weight"]) for lk in out["links"])
    assert links == sorted([("0_5_1", "1_3_2", 0.5), ("E_8_1", "0_5_1", 2.0), ("1_3_2", "3_11_2", -1.5),
                            ("1_-1_2", "3_12_2", 0.25)])
    q = out["qParams"]
    assert q["pinnedIds"] == ["0_5_1"]
    assert q["supernodes"] == [["<b>group</b>", "0_5_1", "1_3_2"]]  # names kept as data; unknown ids dropped
    assert (q["linkType"], q["clickedId"], q["sg_pos"]) == ("both", "", "")


def test_every_field_of_error_token_and_unlabelled_nodes_and_what_is_left_out():
    g, p = small_graph()
    p.node_mask[g.error_index(0, 2)] = True  # kept, but no kept edge: not written
    out = graph_json(g, p, prompt="abc", prompt_tokens=["a", "b", "c"], logit_tokens=["x"], slug="s", scan="t",
                     node_threshold=0.8, supernodes=[[], ["g", "1_3_2"]])
    nodes = {n["node_id"]: n for n in out["nodes"]}
    assert "0_-1_2" not in nodes
    common = {"token_prob": 0.0, "is_target_logit": False, "run_idx": 0, "reverse_ctx_idx": 0, "clerp": "",
              "activation": None}
    assert nodes["1_-1_2"] == {**common, "node_id": "1_-1_2", "feature": -1, "layer": "1", "ctx_idx": 2,
                               "feature_type": "mlp reconstruction error", "jsNodeId": "1_-1-2",
                               "influence": float(p.cumulative[g.error_index(1, 2)])}
    assert nodes["E_7_0"] == {**common, "node_id": "E_7_0", "feature": 0, "layer": "E", "ctx_idx": 0,
                              "feature_type": "embedding", "jsNodeId": "E_7-0",
                              "influence": float(p.cumulative[g.token_index(0)])}
    f = nodes["1_3_2"]
    assert f["clerp"] == "" and isinstance(f["feature"], int) and f["feature"] == 13
    second = nodes["3_12_2"]
    assert (second["feature"], second["clerp"]) == (12, f'Output "12" (p={float(g.logit_probs[1]):.3f})')
    assert out["qParams"]["supernodes"] == [["g", "1_3_2"]]  # an empty group skipped, the next one kept
