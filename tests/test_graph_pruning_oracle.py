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


def test_nodes_whose_edges_all_fall_below_the_edge_threshold_are_dropped_until_nothing_changes():
    """A chain token -> f0 -> f1 -> logit carries the influence; f2 reads the token strongly but writes to the logit
    a hair, f3 reads only f2: at an edge share of 0.95 the f2 -> logit edge goes, so f2 has no kept output and is
    dropped, and then f3 loses its only input and goes too (a second round of the cleanup)."""
    F, L, T, K = 4, 1, 1, 1
    N = F + (L + 1) * T + K
    tok, logit = F + L * T, N - 1
    A = torch.zeros(N, N)
    A[0, tok], A[1, 0], A[logit, 1] = 5.0, 5.0, 5.0
    A[2, tok], A[logit, 2] = 4.0, 0.01
    A[3, 2], A[logit, 3] = 0.02, 0.01
    g = AttributionGraph(ids=torch.tensor([0]), n_layer=L, active_features=torch.tensor([[0, 0, i] for i in range(F)]),
                         activations=torch.ones(F), selected=torch.arange(F), logit_ids=torch.tensor([0]),
                         logit_probs=torch.tensor([0.9]), adjacency=A)
    node_infl, keep, edges = by_hand(g, 1.0, 0.95)
    got = prune(g, 1.0, 0.95)
    assert got.node_mask.tolist() == keep.tolist()
    assert got.edge_mask.numpy().tolist() == edges.tolist()
    assert got.node_mask[:F].tolist() == [True, True, False, False]
    assert bool(got.node_mask[tok]) and bool(got.node_mask[logit])
    assert not bool(got.edge_mask[:, 2].any()) and not bool(got.edge_mask[3].any())
    # the error node (index F) reads nothing and writes nothing: dropped; tokens and logits never are
    assert not bool(got.node_mask[F])


def test_bad_thresholds_and_cycles_are_refused_by_name_and_zero_thresholds_keep_everything():
    g = synthetic_graph(7)
    with pytest.raises(ValueError, match=r"edge_threshold=1\.5 must be from 0 to 1"):
        prune(g, 0.8, 1.5)
    with pytest.raises(ValueError, match=r"node_threshold=-0\.1 must be from 0 to 1"):
        prune(g, -0.1, 0.9)
    everything = prune(g, 0.0, 0.0)
    assert bool(everything.node_mask[-(g.n_pos + 2):].all())
    loop = torch.tensor([[0.0, 1.0], [1.0, 0.0]])  # two nodes reading each other: influence never stops arriving
    with pytest.raises(ValueError, match="influence still arriving after 1000 steps: the graph has a cycle"):
        influence(loop, torch.tensor([1.0, 0.0]))


def test_the_threshold_of_one_score_and_of_a_share_reached_exactly_in_float64():
    assert threshold(torch.tensor([3.0]), 0.5) == 3.0
    assert threshold(torch.tensor([4.0, 4.0, 2.0]), 0.8) == 4.0  # 8 of 10 is 0.8 exactly: the second score


def test_completeness_divides_by_the_weights_even_when_they_add_up_to_less_than_one():
    g = synthetic_graph(8)
    g.logit_probs = g.logit_probs * 0.01
    A = g.adjacency.double().numpy()
    a = np.abs(A)
    n = a / np.maximum(a.sum(1, keepdims=True), 1e-10)
    w = np.zeros(g.n_nodes)
    w[-2:] = g.logit_probs.double().numpy()
    infl = w @ n @ np.linalg.inv(np.eye(g.n_nodes) - n)
    err = slice(g.n_features, g.n_features + g.n_layer * g.n_pos)
    weight = infl + w
    assert weight.sum() < 1
    assert scores(g)["completeness"] == pytest.approx(((1 - n[:, err].sum(1)) * weight).sum() / weight.sum(),
                                                      rel=1e-4)


@pytest.mark.parametrize("seed,F,density,node_t,edge_t", [
    (0, 12, 0.3, 0.8, 0.9),    # a feature kept by influence with a kept output but no kept input
    (0, 20, 0.15, 0.9, 0.9),   # a feature or error node with a kept input but no kept output
    (2, 20, 0.15, 0.9, 0.9),   # a node dropped only in the cleanup's second round
], ids=["needs an input", "needs an output", "second round"])
def test_the_cleanup_on_sparse_graphs_where_each_of_its_rules_matters(seed, F, density, node_t, edge_t):
    g = synthetic_graph(seed, F=F, density=density)
    node_infl, keep, edges = by_hand(g, node_t, edge_t)
    got = prune(g, node_t, edge_t)
    assert got.node_mask.tolist() == keep.tolist()
    assert got.edge_mask.numpy().tolist() == edges.tolist()
