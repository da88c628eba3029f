"""Pruning an attribution graph (gptviz/interp/graph_pruning.py) against circuit-tracer's definition written out
by hand: influence as w Â (I - Â)^-1 in float64 NumPy, the threshold by walking the sorted scores, and the cleanup
node by node."""
import numpy as np
import pytest
import torch

from gptviz.interp.attribution_graph import AttributionGraph
from gptviz.interp.graph_pruning import influence, normalise, prune, scores, threshold


def synthetic_graph(seed, F=9, L=2, T=3, K=2, density=0.6):
    """A random graph in circuit-tracer's layout: feature rows read earlier features, errors and tokens; logit rows
    read any feature, error or token. Some edges are exactly 0, some negative."""
    rng = np.random.default_rng(seed)
    N = F + (L + 1) * T + K
    A = np.zeros((N, N))
    for t in range(F):
        for s in list(range(t)) + list(range(F, F + (L + 1) * T)):
            if rng.random() < density:
                A[t, s] = rng.normal()
    for k in range(K):
        for s in range(F + (L + 1) * T):
            if rng.random() < density:
                A[N - K + k, s] = rng.normal()
    active = torch.tensor([[i * L // F, i % T, i] for i in range(F)])
    probs = torch.tensor(sorted(rng.dirichlet(np.ones(K + 1))[:K], reverse=True), dtype=torch.float32)
    return AttributionGraph(ids=torch.arange(T), n_layer=L, active_features=active, activations=torch.ones(F),
                            selected=torch.arange(F), logit_ids=torch.arange(K), logit_probs=probs,
                            adjacency=torch.tensor(A, dtype=torch.float32))


def by_hand(graph, node_threshold, edge_threshold):
    A = graph.adjacency.double().numpy()
    N, K, T, F, L = graph.n_nodes, graph.logit_ids.numel(), graph.n_pos, graph.n_features, graph.n_layer
    w = np.zeros(N)
    w[N - K:] = graph.logit_probs.double().numpy()

    def norm(M):
        a = np.abs(M)
        return a / np.maximum(a.sum(1, keepdims=True), 1e-10)

    def infl(Mn):
        return w @ Mn @ np.linalg.inv(np.eye(N) - Mn)

    def cut(values, share):
        ordered = sorted(values.ravel().tolist(), reverse=True)
        total, run = sum(ordered), 0.0
        for v in ordered:
            run += v
            if run / total >= share - 1e-12:
                return v
        return ordered[-1]

    node_infl = infl(norm(A))
    keep = node_infl >= cut(node_infl, node_threshold) - 1e-9
    keep[N - K - T:] = True
    kept = A * keep[None, :] * keep[:, None]
    kn = norm(kept)
    edge_scores = kn * (infl(kn) + w)[:, None]
    edges = edge_scores >= cut(edge_scores, edge_threshold) - 1e-9
    changed = True
    while changed:
        changed = False
        edges &= keep[None, :] & keep[:, None]
        for i in range(F + L * T):
            if keep[i] and not edges[:, i].any():
                keep[i], changed = False, True
            if i < F and keep[i] and not edges[i, :].any():
                keep[i], changed = False, True
    return node_infl, keep, edges


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("node_t,edge_t", [(0.8, 0.98), (0.5, 0.9), (1.0, 1.0)])
def test_pruning_equals_the_definition(seed, node_t, edge_t):
    g = synthetic_graph(seed)
    node_infl, keep, edges = by_hand(g, node_t, edge_t)
    got = prune(g, node_t, edge_t)
    np.testing.assert_allclose(got.node_influence.numpy(), node_infl, rtol=1e-4, atol=1e-6)
    assert got.node_mask.tolist() == keep.tolist()
    assert got.edge_mask.numpy().tolist() == edges.tolist()
    # the cumulative share: the node ranked first has its own share, the last 1
    order = np.argsort(-node_infl, kind="stable")
    cum = np.cumsum(node_infl[order]) / node_infl.sum()
    np.testing.assert_allclose(got.cumulative.numpy()[order], cum, rtol=1e-4, atol=1e-6)


def test_the_default_thresholds_prune_something_and_keep_tokens_and_logits():
    g = synthetic_graph(4, F=30, density=0.8)
    got = prune(g)
    T, K = g.n_pos, g.logit_ids.numel()
    assert bool(got.node_mask[-(T + K):].all())
    assert 0 < int(got.node_mask[:g.n_features].sum()) < g.n_features
    assert int(got.edge_mask.sum()) < int((g.adjacency != 0).sum())
    with pytest.raises(ValueError, match="node_threshold=1.5 must be from 0 to 1"):
        prune(g, 1.5)


def test_influence_is_the_whole_series_and_the_threshold_the_first_score_reaching_the_share():
    g = synthetic_graph(5)
    n = normalise(g.adjacency).double()
    w = torch.zeros(g.n_nodes, dtype=torch.float64)
    w[-2:] = g.logit_probs.double()
    want = w @ n @ torch.linalg.inv(torch.eye(g.n_nodes, dtype=torch.float64) - n)
    torch.testing.assert_close(influence(n, w), want)
    assert threshold(torch.tensor([1.0, 4.0, 3.0, 2.0]), 0.7) == 3.0  # 4 + 3 = 7 of 10
    assert threshold(torch.tensor([1.0, 4.0, 3.0, 2.0]), 0.71) == 2.0
    assert threshold(torch.tensor([1.0, 4.0, 3.0, 2.0]), 1.0) == 1.0
    assert threshold(torch.zeros(4), 0.8) == 0.0


def test_scores_equal_their_definitions():
    g = synthetic_graph(6)
    A = g.adjacency.double().numpy()
    N = g.n_nodes
    a = np.abs(A)
    n = a / np.maximum(a.sum(1, keepdims=True), 1e-10)
    w = np.zeros(N)
    w[-2:] = g.logit_probs.double().numpy()
    infl = w @ n @ np.linalg.inv(np.eye(N) - n)
    F, L, T = g.n_features, g.n_layer, g.n_pos
    err, tok = slice(F, F + L * T), slice(F + L * T, F + (L + 1) * T)
    got = scores(g)
    assert got["replacement"] == pytest.approx(infl[tok].sum() / (infl[tok].sum() + infl[err].sum()), rel=1e-4)
    weight = infl + w
    assert got["completeness"] == pytest.approx(((1 - n[:, err].sum(1)) * weight).sum() / weight.sum(), rel=1e-4)
