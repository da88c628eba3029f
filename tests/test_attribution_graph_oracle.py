"""The attribution graph (gptviz/interp/attribution_graph.py) against autograd through the model itself: the
prompt is run again with every attention pattern and norm divisor replaced by its recorded value (detached), each
MLP's output replaced by its recorded value plus a zero leaf, and the token embeddings likewise; the gradient of each
target with respect to those leaves, dotted with each source's vector, is the edge circuit-tracer defines. Nothing
here goes through ``replacement.read_back``."""
import pytest
import torch

from gptviz.interp.attribution_graph import AttributionGraph, attribute, salient_logits
from gptviz.interp.transcoder import Transcoder, input_hook, output_hook
from gptviz.model.checkpoint import load_checkpoint
from gptviz.paths import CHECKPOINTS
from gptviz.run.trace import trace


@pytest.fixture(scope="module")
def shakespeare():
    return load_checkpoint(CHECKPOINTS / "shakespeare.safetensors")


def toy_transcoder(model, cross, F=16, k=4, seed=0):
    c = model.config
    tc = Transcoder(c.n_layer, c.n_embd, F, k, cross)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for layer in range(c.n_layer):
            tc.W_enc[layer].copy_(torch.randn(c.n_embd, F, generator=g) * 0.3)
            tc.b_enc[layer].copy_(torch.randn(F, generator=g) * 0.2)
            tc.W_dec[layer].copy_(torch.randn(tc.W_dec[layer].shape, generator=g) * 0.2)
            tc.b_dec[layer].copy_(torch.randn(c.n_embd, generator=g) * 0.1)
    return tc.requires_grad_(False)


class Oracle:
    """Gradients of a target's quantity with respect to what each layer's MLP writes and to the token embeddings,
    by autograd through ``model.run`` with patterns and norm divisors frozen."""

    def __init__(self, model, tc, ids):
        self.model, self.tc = model, tc
        self.x = torch.tensor([ids])
        self.tr = trace(self.model, self.x)
        L = model.config.n_layer
        self.feats = [tc.encode(layer, self.tr[input_hook(layer)][0]) for layer in range(L)]
        self.errors = [self.tr[output_hook(m)][0] - tc.decode(m, self.feats) for m in range(L)]

    def grads(self, quantity):
        L = self.model.config.n_layer
        T, d = self.x.shape[1], self.model.config.n_embd
        inj = [torch.zeros(1, T, d, requires_grad=True) for _ in range(L + 1)]  # [embed, mlp 0, ..., mlp L-1]
        seen = {}

        def rec(name, t):
            if name == "hook_embed":
                t = self.tr[name].detach() + inj[0]
            elif name.endswith("hook_scale") or name.endswith("hook_pattern"):
                t = self.tr[name].detach()
            elif name in {output_hook(m) for m in range(L)}:
                t = self.tr[name].detach() + inj[int(name.split(".")[1]) + 1]
            seen[name] = t
            return t

        with torch.enable_grad():
            self.model.run(self.x, rec=rec)
            q = quantity(seen)
            got = torch.autograd.grad(q, inj, allow_unused=True)
        return [torch.zeros(T, d) if g is None else g[0] for g in got]

    def row(self, graph: AttributionGraph, quantity, target_layer):
        """The row of one target over the graph's columns, from autograd."""
        g = self.grads(quantity)
        row = torch.zeros(graph.n_nodes)
        T, L = graph.n_pos, graph.n_layer
        for i in range(graph.n_features):
            _, ls, ps, fs, a = graph.node(i)
            reach = range(ls, L) if self.tc.cross_layer else [ls]
            row[i] = sum(float(a * self.tc.W_dec[ls][fs, m - ls] @ g[m + 1][ps]) for m in reach if m < target_layer)
        for m in range(L):
            for p in range(T):
                row[graph.error_index(m, p)] = float(self.errors[m][p] @ g[m + 1][p]) if m < target_layer else 0.0
        for p in range(T):
            row[graph.token_index(p)] = float(self.tr["hook_embed"][0, p] @ g[0][p])
        return row


def feature_quantity(tc, layer, pos, feat):
    return lambda seen: seen[input_hook(layer)][0, pos] @ tc.W_enc[layer][:, feat]


def logit_quantity(model, token):
    W_U = model.lm_head.weight.detach()
    return lambda seen: seen["ln_final.hook_out"][0, -1] @ (W_U[token] - W_U.mean(0))


PROMPT = "ROMEO: But soft, what light"


@pytest.mark.parametrize("cross", [False, True], ids=["per-layer", "cross-layer"])
def test_every_logit_row_and_feature_rows_in_every_layer_equal_autograd(shakespeare, cross):
    model, tok = shakespeare.model, shakespeare.tokenizer
    ids = tok.encode(PROMPT)[:12]
    tc = toy_transcoder(model, cross)
    graph = attribute(model, tc, ids)
    oracle = Oracle(model, tc, ids)
    L = model.config.n_layer
    assert graph.n_features == sum(int((f != 0).sum()) for f in oracle.feats) > 0
    for k in range(graph.logit_ids.numel()):
        want = oracle.row(graph, logit_quantity(model, int(graph.logit_ids[k])), L)
        torch.testing.assert_close(graph.adjacency[graph.logit_index(k)], want, atol=2e-4, rtol=1e-3)
    picked = []
    for layer in range(1, L):  # the last feature at two positions of every layer that has sources below it
        rows = [i for i in range(graph.n_features) if graph.node(i)[1] == layer]
        picked += [rows[len(rows) // 3], rows[-1]]
    for i in picked:
        _, layer, pos, feat, _ = graph.node(i)
        want = oracle.row(graph, feature_quantity(tc, layer, pos, feat), layer)
        assert float(want.abs().max()) > 1e-3
        torch.testing.assert_close(graph.adjacency[i], want, atol=2e-4, rtol=1e-3)
    # layer-0 features read only tokens: no error or feature edges into them, and token rows are empty
    first = [i for i in range(graph.n_features) if graph.node(i)[1] == 0]
    assert float(graph.adjacency[first][:, :graph.token_index(0)].abs().max()) == 0
    assert float(graph.adjacency[graph.token_index(0):graph.logit_index(0)].abs().max()) == 0


def test_rows_computed_in_many_small_batches_are_the_same(shakespeare):
    model, tok = shakespeare.model, shakespeare.tokenizer
    ids = tok.encode(PROMPT)[:10]
    tc = toy_transcoder(model, True, seed=1)
    one = attribute(model, tc, ids)
    many = attribute(model, tc, ids, batch_size=7)
    torch.testing.assert_close(many.adjacency, one.adjacency, atol=1e-5, rtol=1e-4)


def test_a_graph_keeps_no_autograd_graph_and_grad_mode_is_left_as_it_was(shakespeare):
    """The graph is worked out without autograd: nothing in it requires a gradient (the model's weights do), and the
    caller's grad mode is on again afterwards."""
    model, tok = shakespeare.model, shakespeare.tokenizer
    tc = toy_transcoder(model, True, seed=2)
    assert any(p.requires_grad for p in model.parameters())
    g = attribute(model, tc, tok.encode(PROMPT)[:8])
    assert not g.adjacency.requires_grad and not g.activations.requires_grad and not g.logit_probs.requires_grad
    assert torch.is_grad_enabled()


def test_salient_logits_keep_the_smallest_prefix_reaching_the_probability():
    logits = torch.log(torch.tensor([0.05, 0.5, 0.3, 0.1, 0.05]))
    ids, probs = salient_logits(logits, max_n_logits=10, desired_logit_prob=0.85)
    assert ids.tolist() == [1, 2, 3] and probs.tolist() == pytest.approx([0.5, 0.3, 0.1], rel=1e-5)
    ids, _ = salient_logits(logits, max_n_logits=10, desired_logit_prob=0.8)
    assert ids.tolist() == [1, 2]  # 0.5 + 0.3 reaches 0.8 exactly
    ids, _ = salient_logits(logits, max_n_logits=2, desired_logit_prob=0.99)
    assert ids.tolist() == [1, 2]  # capped


def test_the_targets_edges_a_budget_of_none_and_the_meta(shakespeare):
    """The edges of what ``attribute`` accepts (mutation testing at 5a5c2fb): one target, token 0 and V − 1 as targets
    and V refused word for word, the most probable logits up to a probability other than the default, a budget of 0
    features, and the budget kept in the graph's meta."""
    model, tok = shakespeare.model, shakespeare.tokenizer
    ids = tok.encode(PROMPT)[:6]
    tc = toy_transcoder(model, False, seed=3)
    V = model.config.vocab_size
    assert attribute(model, tc, ids, logit_ids=[7]).logit_ids.tolist() == [7]
    assert attribute(model, tc, ids, logit_ids=[0, V - 1]).logit_ids.tolist() == [0, V - 1]
    with pytest.raises(ValueError) as exc:
        attribute(model, tc, ids, logit_ids=[V])
    assert str(exc.value) == f"target logits must be token ids from 0 to {V - 1}"
    last = trace(model, torch.tensor([ids])).logits[0, -1]
    want, _ = salient_logits(last, 10, 0.3)
    assert attribute(model, tc, ids, desired_logit_prob=0.3).logit_ids.tolist() == want.tolist()
    none = attribute(model, tc, ids, max_feature_nodes=0)
    assert none.n_features == 0 and none.meta == {"max_feature_nodes": 0, "n_active": none.meta["n_active"]}
    assert none.meta["n_active"] > 0


def test_chosen_targets_and_a_feature_budget(shakespeare):
    model, tok = shakespeare.model, shakespeare.tokenizer
    ids = tok.encode(PROMPT)[:10]
    tc = toy_transcoder(model, True, seed=2)
    full = attribute(model, tc, ids, logit_ids=[5, 17])
    assert full.logit_ids.tolist() == [5, 17]
    probs = torch.softmax(trace(model, torch.tensor([ids])).logits[0, -1].double(), -1)
    assert full.logit_probs.tolist() == pytest.approx(probs[[5, 17]].tolist(), rel=1e-5)
    budget = full.meta["n_active"] // 3
    part = attribute(model, tc, ids, logit_ids=[5, 17], max_feature_nodes=budget, batch_size=8, update_interval=2)
    assert part.n_features == budget
    # the kept nodes' edges are the full graph's: the rows and columns of the chosen features, errors, tokens, logits
    keep = torch.cat([part.selected, torch.arange(full.n_features, full.n_nodes)])
    torch.testing.assert_close(part.adjacency, full.adjacency[keep][:, keep], atol=1e-4, rtol=1e-4)
    # the first round (2 x 8 features) is the 16 with the most influence estimated from the logit rows alone
    logit_rows = full.adjacency[full.logit_index(0):]
    norm = logit_rows.abs() / logit_rows.abs().sum(1, keepdim=True).clamp(min=1e-8)
    first_estimate = (full.logit_probs @ norm)[:full.n_features]
    first = set(first_estimate.topk(16).indices.tolist())
    assert first <= set(part.selected.tolist())
    with pytest.raises(ValueError, match="target logits must be token ids"):
        attribute(model, tc, ids, logit_ids=[340])


# --------------------------------------------------------------------------- shapes other than the Shakespeare GPT's
def test_a_llama_shape_with_grouped_queries_and_wide_heads_equals_autograd():
    """RMSNorm, rotary positions, grouped-query attention (4 query heads over 2 key/value heads) and heads wider than
    d_model / n_head (4 × 16 = 64 numbers of attention for a 32-number stream), random weights."""
    import gptviz
    from gptviz.config import preset

    cfg = preset("llama-like").replace(vocab_size=50, block_size=32, n_layer=3, n_head=4, n_kv_head=2, n_embd=32,
                                       d_head=16, d_mlp=48, seed=3)
    model = gptviz.build_model(cfg).eval()
    tc = toy_transcoder(model, True, seed=4)
    ids = [3, 17, 8, 44, 2, 9, 30, 12, 5]
    graph = attribute(model, tc, ids)
    oracle = Oracle(model, tc, ids)
    for k in range(graph.logit_ids.numel()):
        want = oracle.row(graph, logit_quantity(model, int(graph.logit_ids[k])), cfg.n_layer)
        torch.testing.assert_close(graph.adjacency[graph.logit_index(k)], want, atol=2e-4, rtol=1e-3)
    last = [i for i in range(graph.n_features) if graph.node(i)[1] == 2][-1]
    _, layer, pos, feat, _ = graph.node(last)
    torch.testing.assert_close(graph.adjacency[last], oracle.row(graph, feature_quantity(tc, layer, pos, feat), layer),
                               atol=2e-4, rtol=1e-3)


def test_a_layer_with_no_active_feature_and_a_one_token_prompt(shakespeare):
    model, tok = shakespeare.model, shakespeare.tokenizer
    tc = toy_transcoder(model, True, seed=5)
    with torch.no_grad():
        tc.b_enc[1].fill_(-1e4)  # layer 1 never fires: its sources are empty, the layers after it are not
    ids = tok.encode(PROMPT)[:10]
    graph = attribute(model, tc, ids)
    assert not any(graph.node(i)[1] == 1 for i in range(graph.n_features))
    oracle = Oracle(model, tc, ids)
    want = oracle.row(graph, logit_quantity(model, int(graph.logit_ids[0])), model.config.n_layer)
    torch.testing.assert_close(graph.adjacency[graph.logit_index(0)], want, atol=2e-4, rtol=1e-3)
    assert any(graph.node(i)[1] == 3 for i in range(graph.n_features))
    one = Transcoder(4, 128, 16, 1, True)  # k = 1, every layer firing: one feature a layer at each position
    fresh = toy_transcoder(model, True, seed=5)
    with torch.no_grad():
        for layer in range(4):
            one.W_enc[layer].copy_(fresh.W_enc[layer])
            one.W_dec[layer].copy_(fresh.W_dec[layer])
            one.b_enc[layer].copy_(fresh.b_enc[layer] + 5.0)
    one.requires_grad_(False)
    first = tok.encode(PROMPT)[:1]
    g1 = attribute(model, one, first)
    assert g1.n_pos == 1 and g1.n_features == 4  # k = 1: one feature in each layer at the one position
    o1 = Oracle(model, one, first)
    want = o1.row(g1, logit_quantity(model, int(g1.logit_ids[0])), model.config.n_layer)
    torch.testing.assert_close(g1.adjacency[g1.logit_index(0)], want, atol=2e-4, rtol=1e-3)


def test_nodes_say_what_they_are_and_a_node_past_the_end_is_refused(shakespeare):
    model, tok = shakespeare.model, shakespeare.tokenizer
    graph = attribute(model, toy_transcoder(model, False, seed=6), tok.encode(PROMPT)[:6])
    F, T = graph.n_features, graph.n_pos
    assert graph.node(F) == ("error", 0, 0) and graph.node(F + T + 1) == ("error", 1, 1)
    assert graph.node(graph.token_index(2)) == ("token", 2, tok.encode(PROMPT)[2])
    k = graph.logit_ids.numel() - 1
    assert graph.node(graph.logit_index(k)) == ("logit", k, int(graph.logit_ids[k]), float(graph.logit_probs[k]))
    with pytest.raises(ValueError, match=f"there is no node {graph.n_nodes}: this graph has {graph.n_nodes}"):
        graph.node(graph.n_nodes)


def test_equal_logits_stop_where_the_probability_is_reached_exactly():
    ids, probs = salient_logits(torch.zeros(4), desired_logit_prob=0.5)  # 0.25 each, exactly: 0.25 + 0.25 = 0.5
    assert ids.numel() == 2 and probs.tolist() == [0.25, 0.25]


def influence_by_hand(rows, row_nodes, n_logit_rows, probs, n_cols, steps=128):
    """circuit-tracer's partial influence as plain NumPy loops: rows |.|-normalised (sums clamped at 1e-8), the
    logits' probabilities pushed down the rows, each step's arrival summed (the logits' own weights not counted)."""
    import numpy as np

    a = np.abs(rows.double().numpy())
    a = a / np.maximum(a.sum(1, keepdims=True), 1e-8)
    w = np.zeros(a.shape[0])
    w[:n_logit_rows] = probs.double().numpy()
    total = np.zeros(n_cols)
    for _ in range(steps):
        arrived = w @ a
        if not arrived.any():
            break
        total += arrived
        w = np.array([arrived[c] if c >= 0 else 0.0 for c in row_nodes.tolist()])
    return total


@pytest.mark.parametrize("cross, seed", [(True, 7), (False, 5)])
def test_a_feature_budget_visits_features_in_circuit_tracers_rounds(shakespeare, cross, seed):
    """Budget 40, batches of 8, one batch a round: each round takes the 8 unvisited features with the most
    influence estimated from the rows built so far (hand-written above, on the full graph's rows). The per-layer
    transcoder of seed 5 is a case where the targets' rows must pass nothing on after the first step: read as feature
    0's row (mutation testing at 29219ea, ``_attribute__mutmut_175``), they choose feature 27 instead of 85."""
    model, tok = shakespeare.model, shakespeare.tokenizer
    tc = toy_transcoder(model, cross, seed=seed)
    ids = tok.encode(PROMPT)[:10]
    full = attribute(model, tc, ids)
    part = attribute(model, tc, ids, max_feature_nodes=40, batch_size=8, update_interval=1)
    n_active, K = full.n_features, full.logit_ids.numel()
    cols = list(range(n_active)) + list(range(n_active, full.n_nodes - K))  # every source column of a row
    rows_of = {i: full.adjacency[i, cols] for i in range(n_active)}
    logit_rows = full.adjacency[full.n_nodes - K:, cols]
    visited: list[int] = []
    while len(visited) < 40:
        rows = torch.cat([logit_rows] + [rows_of[i].unsqueeze(0) for i in visited])
        row_nodes = torch.tensor([-1] * K + visited)
        infl = influence_by_hand(rows, row_nodes, K, full.logit_probs, len(cols))[:n_active]
        order = [i for i in sorted(range(n_active), key=lambda i: -infl[i]) if i not in visited]
        visited += order[:8]
    assert sorted(visited) == part.selected.tolist()


def test_partial_influence_on_small_rows_that_pass_through_feature_zero():
    """Rows whose absolute sums are below 1 (normalised, not clamped up) and a path through the feature in column
    0: the estimate equals the hand-written one."""
    from gptviz.interp.attribution_graph import _partial_influence

    g = torch.Generator().manual_seed(9)
    rows = torch.rand(4, 7, generator=g) * 0.05  # two logit rows, then the rows of features 0 and 3
    rows[2:, 0] = 0.0  # no feature reads itself
    rows[3, 3] = 0.0
    row_nodes = torch.tensor([-1, -1, 0, 3])
    probs = torch.tensor([0.6, 0.3])
    got = _partial_influence(rows, row_nodes, 2, probs, 7)
    want = influence_by_hand(rows, row_nodes, 2, probs, 7)
    assert float(rows.abs().sum(1).max()) < 1
    torch.testing.assert_close(got.double(), torch.tensor(want), rtol=1e-5, atol=1e-7)


def test_an_attention_only_model_is_attributed_without_a_transcoder_and_equals_autograd():
    """The induction-heads model has no MLPs: frozen, it is linear from its token embeddings to its logits. Each logit
    row is the gradient of the logit (minus the vocabulary's mean) with respect to the embeddings, by autograd through
    the model with its patterns and norm divisors held at their recorded values, dotted with each embedding."""
    ck = load_checkpoint(CHECKPOINTS / "induction-heads.safetensors")
    model, tok = ck.model, ck.tokenizer
    assert model.config.attn_only
    half = tok.encode("the Prince of England and")[:9]
    ids = half + half  # a repeat: the induction heads predict the second half from the first
    graph = attribute(model, None, ids)
    L, T = model.config.n_layer, len(ids)
    assert graph.n_features == 0 and graph.n_nodes == (L + 1) * T + graph.logit_ids.numel()
    x = torch.tensor([ids])
    tr = trace(model, x)
    W_U = model.lm_head.weight.detach()

    def embedding_grad(token):
        leaf = torch.zeros(1, T, model.config.n_embd, requires_grad=True)
        out = {}

        def rec(name, t):
            if name == "hook_embed":
                t = tr[name].detach() + leaf
            elif name.endswith("hook_scale") or name.endswith("hook_pattern"):
                t = tr[name].detach()
            out[name] = t
            return t

        with torch.enable_grad():
            model.run(x, rec=rec)
            q = out["ln_final.hook_out"][0, -1] @ (W_U[token] - W_U.mean(0))
            return torch.autograd.grad(q, [leaf])[0]

    for k in range(graph.logit_ids.numel()):
        g = embedding_grad(int(graph.logit_ids[k]))
        want = torch.zeros(graph.n_nodes)
        for p in range(T):
            want[graph.token_index(p)] = float(tr["hook_embed"][0, p] @ g[0, p])
        assert float(want.abs().max()) > 1e-2
        torch.testing.assert_close(graph.adjacency[graph.logit_index(k)], want, atol=2e-4, rtol=1e-3)
    assert float(graph.adjacency[:, :graph.token_index(0)].abs().sum()) == 0  # error nodes: no edges out
    assert float(graph.adjacency[:graph.logit_index(0)].abs().sum()) == 0  # only logit rows hold edges
    with pytest.raises(ValueError, match="no MLPs for a transcoder"):
        attribute(model, toy_transcoder(model, True), ids)
    with pytest.raises(ValueError, match="needs a transcoder"):
        attribute(load_checkpoint(CHECKPOINTS / "shakespeare.safetensors").model, None, ids[:4])


@pytest.mark.parametrize("cross", [False, True], ids=["per-layer", "cross-layer"])
def test_a_logits_inputs_add_up_to_the_logit_less_what_no_node_carries(shakespeare, cross):
    """The frozen replacement is affine in what the nodes write (token embeddings; each MLP output less the
    transcoder's b_dec, which is features plus errors). So a logit row's edges, features, errors and tokens together,
    add up to the logit (minus the vocabulary's mean) less the same logit with every node's write set to zero, both
    computed here by running the model with its patterns and norm divisors held."""
    model, tok = shakespeare.model, shakespeare.tokenizer
    ids = tok.encode(PROMPT)[:12]
    tc = toy_transcoder(model, cross)
    graph = attribute(model, tc, ids)
    x = torch.tensor([ids])
    tr = trace(model, x)
    L, W_U = model.config.n_layer, model.lm_head.weight.detach()

    def logit(token, zero):
        seen = {}

        def rec(name, t):
            if name == "hook_embed":
                t = torch.zeros_like(t) if zero else tr[name]
            elif name.endswith("hook_scale") or name.endswith("hook_pattern"):
                t = tr[name]
            elif name in {output_hook(m) for m in range(L)}:
                t = tc.b_dec[int(name.split(".")[1])].detach().expand_as(t) if zero else tr[name]
            seen[name] = t
            return t

        with torch.no_grad():
            model.run(x, rec=rec)
        return float(seen["ln_final.hook_out"][0, -1].double() @ (W_U[token] - W_U.mean(0)).double())

    for k in range(graph.logit_ids.numel()):
        token = int(graph.logit_ids[k])
        whole = float(graph.adjacency[graph.logit_index(k)].double().sum())
        assert abs(whole - (logit(token, False) - logit(token, True))) < 2e-3 * max(1.0, abs(whole))
    token = int(graph.logit_ids[0])  # the real logit, as the model computes it without anything held
    last = tr.logits[0, -1].double()
    assert abs(logit(token, False) - float(last[token] - last.mean())) < 1e-3
