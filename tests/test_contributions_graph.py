"""The contribution graph's walk, its routes and its arguments (gptviz.interp.contributions), each against a walk,
a route enumeration or a value written out here, and the engine's own choices (float32 above ``FLOAT32_PARAMS``,
a row computed on demand, ``b_V`` of a model without q/k/v biases, the defaults) against plain PyTorch.

test_contributions_ltt.py checks the shares against LTT's definition, with the values recomputed from the weights
(so within 1e-7); ``_exact_layer`` below applies the same rule to the *recorded* values, the engine's own input, so
it agrees with the engine to float64 rounding, and a computation in float32 (or with the bias in the wrong place)
shows. The graph oracles are test_contributions_ltt.py's walks (``_ltt_head_tree``, ``_ltt_token_tree``), fed with
those shares; the routes are enumerated here one by one."""
import copy
import functools

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from test_contributions_ltt import BASE, BLOCK_KINDS, _kind, _ltt_head_tree, _ltt_name, _ltt_token_tree, _model

from gptviz import ModelConfig, build_model, preset, trace
from gptviz.interp import contributions as contrib
from gptviz.interp.contributions import (
    ContributionGraph,
    Contributions,
    _depth,
    _in_edges,
    _token_in_edges,
    best_routes,
    contribution_graph,
    contributions,
    head_sources,
    route_graph,
    shares,
    token_graph,
    value_biases,
)

SEQ, PAR, ATT = "gpt2 (pre-norm LayerNorm, biases)", "gpt-neox (parallel, partial rotary)", "attention only"
QWEN, GEMMA, POST = "qwen2 (q/k/v biases, GQA)", "gemma (MQA, head width 16 != 32/4)", "post-norm (2017 Transformer)"
T = 10  # tokens of each of the two rows
EXACT = 1e-12  # float64 rounding (a float32 computation is off by ~1e-8 and more)


@functools.lru_cache(maxsize=None)
def _setup(name: str, n_layer: int = 2):
    """A model of the block kind ``name`` with weights far from their start, traced on two rows of other tokens."""
    m = _model(ModelConfig(**{**BASE, **BLOCK_KINDS[name], "n_layer": n_layer}), seed=11)
    idx = torch.randint(0, BASE["vocab_size"], (2, T), generator=torch.Generator().manual_seed(8))
    return m, trace(m, idx)


def _rule(parts: torch.Tensor, whole: torch.Tensor) -> torch.Tensor:
    """LTT's proportional contributions of ``parts`` (P, C) to ``whole`` (C), through torch's pairwise_distance."""
    score = (whole.abs().sum() - F.pairwise_distance(parts, whole.expand_as(parts), p=1.0, eps=1e-6)).clamp(min=1e-5)
    return score / score.sum()


def _exact_layer(m, tr, b: int, n: int, l: int, value_bias: str = "folded") -> dict:
    """Layer ``l``'s shares of row ``b``'s first ``n`` positions, in float64 from the recorded streams, the recorded
    values (``hook_v``, repeated here for grouped-query attention) and pattern, and ``W_O``: each head x key part
    ``a_ij (v_j - b_V) W_O^h`` (``per_token``: ``a_ij v_j W_O^h``), every key j in the sum (a later one is a zero
    part: its sliver is in the sum, but no share of it is kept)."""
    cfg, blk = m.config, m.transformer.h[l]
    H, K, hs, C = cfg.n_head, cfg.n_kv_head, cfg.d_head, cfg.n_embd

    def rec(name):
        return tr[f"blocks.{l}.{name}"][b, :n].double()

    x, attn_out = rec("hook_resid_pre"), rec("hook_attn_out")
    v = rec("attn.hook_v").repeat_interleave(H // K, dim=1)  # (n, H, hs)
    bias = blk.attn.c_attn.bias
    if value_bias == "folded" and bias is not None:
        v = v - bias.detach().double()[(H + K) * hs:].view(K, hs).repeat_interleave(H // K, dim=0)
    W_O = blk.attn.c_proj.weight.detach().double()  # (C, H * hs)
    u = torch.stack([v[:, h] @ W_O[:, h * hs:(h + 1) * hs].T for h in range(H)], dim=1)  # (n, H, C)
    a = tr[f"blocks.{l}.attn.hook_pattern"][b, :, :n, :n].double()  # (H, i, j)
    mlp_out = None if cfg.attn_only else rec("hook_mlp_out")
    whole = x + attn_out + (mlp_out if cfg.parallel_attn else 0)
    out = {"attn": torch.zeros(n, n, H, dtype=torch.float64)}
    out.update({k: torch.zeros(n, dtype=torch.float64) for k in ("skip", "mlp", "mlp_skip")})
    for i in range(n):
        heads = (a[:, i].T[..., None] * u).reshape(n * H, C)  # (j, h) flattened
        extra = [mlp_out[i][None]] if cfg.parallel_attn else []
        s = _rule(torch.cat([heads, x[i][None]] + extra), whole[i])
        out["attn"][i, : i + 1], out["skip"][i] = s[: n * H].view(n, H)[: i + 1], s[n * H]
        if cfg.parallel_attn:
            out["mlp"][i] = s[n * H + 1]
        elif not cfg.attn_only:
            mid = rec("hook_resid_mid")[i]  # the stream the MLP read and added to
            out["mlp"][i], out["mlp_skip"][i] = _rule(torch.stack([mlp_out[i], mid]), mid + mlp_out[i])
    return out


def _exact(m, tr, b: int, n: int = T, value_bias: str = "folded") -> list[dict]:
    return [_exact_layer(m, tr, b, n, l, value_bias) for l in range(m.config.n_layer)]


def _as_shares(arr) -> list[dict]:
    """The engine's arrays in the walks' format (to walk the engine's own numbers: exact threshold comparisons)."""
    z = np.zeros_like(arr.attn_skip)
    return [{"attn": torch.from_numpy(arr.attn[l]), "skip": torch.from_numpy(arr.attn_skip[l]),
             "mlp": torch.from_numpy((arr.mlp if arr.mlp is not None else z)[l]),
             "mlp_skip": torch.from_numpy((arr.mlp_skip if arr.mlp_skip is not None else z)[l])}
            for l in range(arr.attn.shape[0])]


def _assert_arrays(got, want: list[dict], n: int, atol: float):
    for l, s in enumerate(want):
        for i in range(n):
            np.testing.assert_allclose(got.attn[l, i, : i + 1], s["attn"][i, : i + 1], rtol=0, atol=atol)
            assert np.all(got.attn[l, i, i + 1:] == 0)
        np.testing.assert_allclose(got.attn_skip[l], s["skip"], rtol=0, atol=atol)
        if got.mlp is not None:
            np.testing.assert_allclose(got.mlp[l], s["mlp"], rtol=0, atol=atol)
        if got.mlp_skip is not None:
            np.testing.assert_allclose(got.mlp_skip[l], s["mlp_skip"], rtol=0, atol=atol)


def _edges(g) -> dict:
    return {(e.src, e.dst): e.weight for e in g.edges}


def _kind_and_factor(src: tuple, dst: tuple, weight: float) -> tuple[str, float]:
    """By hand: an edge out of a head or an MLP repeats what its incoming edges counted (factor 1); every other
    edge multiplies a route by its share."""
    if src[0] == "head":
        return "head_out", 1.0
    if src[0] == "mlp":
        return "mlp_out", 1.0
    if dst[0] == "head":
        return "head_in", weight
    if dst[0] == "mlp":
        return "mlp_in", weight
    return "skip", weight


def _token_kind_and_factor(src: tuple, dst: tuple, weight: float) -> tuple[str, float]:
    """The same in LTT's graph, where attention's edges go from each key's stream to the query's (summed over the
    heads), the query's own stream being the skip."""
    if src[0] == "x" and dst[0] in ("x", "mid") and src[2] != dst[2]:
        return "attn", weight
    return _kind_and_factor(src, dst, weight)


# --------------------------------------------------------------------------- the rule and the engine's inputs
def test_shares_is_the_l1_score_of_torchs_pairwise_distance_over_any_leading_dimensions():
    """``max(CLIP, ‖whole‖₁ − pairwise_distance(part, whole, p=1))`` for parts (2, 3, C) against one whole (C)."""
    g = torch.Generator().manual_seed(0)
    whole = torch.randn(8, dtype=torch.float64, generator=g) * 3
    parts = whole * torch.rand(2, 3, 1, dtype=torch.float64, generator=g)
    parts = parts + 0.2 * torch.randn(2, 3, 8, dtype=torch.float64, generator=g)
    want = whole.abs().sum() - F.pairwise_distance(parts.reshape(6, 8), whole.expand(6, 8), p=1.0, eps=1e-6)
    got = shares(parts, whole)
    assert got.shape == (2, 3) and (want > 1e-3).sum() >= 4  # most are above the clip
    torch.testing.assert_close(got, want.clamp(min=1e-5).view(2, 3), rtol=0, atol=EXACT)
    # by hand: ‖(3, 2)‖₁ − ‖(3, 2) − (1, 1) − ε‖₁ = 5 − (2 − ε) − (1 − ε) = 2 + 2ε
    one = torch.tensor([1.0, 1.0], dtype=torch.float64)
    assert float(shares(one, torch.tensor([3.0, 2.0], dtype=torch.float64))) == pytest.approx(2 + 2e-6, rel=1e-12)
    # a part farther from the whole than nothing scores the clip, 1e-5
    assert float(shares(-one, one)) == 1e-5


def test_value_biases_are_the_value_slice_of_the_qkv_bias_per_query_head_or_zeros_without_one():
    m, _ = _setup(QWEN)  # 4 query heads, 2 key/value heads, q/k/v biases
    H, K, hs = m.config.n_head, m.config.n_kv_head, m.config.d_head
    assert (H, K) == (4, 2)
    for l in range(2):
        bias = m.transformer.h[l].attn.c_attn.bias.detach()  # q (H·hs), then k (K·hs), then v (K·hs)
        v_bias = bias[(H + K) * hs:]
        want = torch.stack([v_bias[(h // 2) * hs:(h // 2 + 1) * hs] for h in range(H)])  # heads 0, 1 read kv head 0
        got = value_biases(m, l)
        assert got.dtype == torch.float64 and torch.equal(got, want.double())
        got32 = value_biases(m, l, torch.float32)
        assert got32.dtype == torch.float32 and torch.equal(got32, want)
    m, _ = _setup(GEMMA)  # no biases; 4 heads of width 16
    assert m.transformer.h[0].attn.c_attn.bias is None
    z = value_biases(m, 1)
    assert z.shape == (4, 16) and z.dtype == torch.float64 and not z.any()
    z = value_biases(m, 0, torch.float32)
    assert z.shape == (4, 16) and z.dtype == torch.float32 and not z.any()


def test_a_bad_value_bias_is_refused_naming_both_choices():
    m, tr = _setup(SEQ)
    msg = r"^the value bias goes into folded or per_token, not 'bias'$"
    with pytest.raises(ValueError, match=msg):
        Contributions(m, tr, 0, value_bias="bias")
    with pytest.raises(ValueError, match=msg):
        contributions(m, tr, value_bias="bias")
    with pytest.raises(ValueError, match=msg):
        head_sources(m, tr, 0, 1, value_bias="bias")


@torch.no_grad()
def test_a_decoder_with_cross_attention_even_without_an_encoder_is_refused_with_a_clear_message():
    """The preset ``decoder-cross-attention`` (n_enc_layer = 0: a fixed random encoder output) reads a source too."""
    cfg = preset("decoder-cross-attention")
    assert cfg.n_enc_layer == 0
    m = build_model(cfg).eval()
    tr = trace(m, torch.randint(0, cfg.vocab_size, (1, 6), generator=torch.Generator().manual_seed(0)))
    msg = r"^the contribution graph is for decoder-only models; this one also reads a source through cross-attention$"
    with pytest.raises(ValueError, match=msg):
        Contributions(m, tr)
    with pytest.raises(ValueError, match=msg):
        contribution_graph(m, tr)


# --------------------------------------------------------------------------- the shares, exactly
@pytest.mark.parametrize("name,kind", [(SEQ, "sequential"), (PAR, "parallel"), (ATT, "attn_only"),
                                       (QWEN, "sequential"), (POST, "sequential")])
@torch.no_grad()
def test_every_share_of_row_1_equals_the_rule_on_the_recorded_values_to_float64_rounding(name, kind):
    m, tr = _setup(name)
    got = contributions(m, tr, 1)
    assert got.kind == kind
    assert got.attn.shape == (2, T, T, 4) and (got.mlp is None) == (kind == "attn_only")
    assert (got.mlp_skip is None) == (kind != "sequential")
    want = _exact(m, tr, 1)
    _assert_arrays(got, want, T, EXACT)
    with pytest.raises(AssertionError):  # row 0 is another text: other shares
        _assert_arrays(got, _exact(m, tr, 0), T, 1e-3)


@torch.no_grad()
def test_the_defaults_are_row_0_every_position_and_the_folded_bias_and_the_arguments_are_passed_on():
    m, tr = _setup(QWEN)
    row0 = _exact(m, tr, 0)
    _assert_arrays(contributions(m, tr), row0, T, EXACT)
    _assert_arrays(Contributions(m, tr).arrays(), row0, T, EXACT)
    # row 1's first 7 positions, its value bias kept inside every term (not LTT's definition: another rule)
    got = contributions(m, tr, 1, n_pos=7, value_bias="per_token")
    assert got.attn.shape == (2, 7, 7, 4)
    _assert_arrays(got, _exact(m, tr, 1, 7, "per_token"), 7, EXACT)
    with pytest.raises(AssertionError):
        _assert_arrays(got, _exact(m, tr, 1, 7), 7, 1e-3)
    # a model of one layer: its positions are counted from its one layer's input
    m1, tr1 = _setup(SEQ, n_layer=1)
    got = contributions(m1, tr1, 1)
    assert got.attn.shape == (1, T, T, 4)
    _assert_arrays(got, _exact(m1, tr1, 1), T, EXACT)


@torch.no_grad()
def test_above_float32_params_parameters_the_shares_are_computed_in_float32(monkeypatch):
    """At exactly ``FLOAT32_PARAMS`` parameters: float64 (exact); one fewer: float32, every share a float32 number
    within float32 rounding of the float64 one, a model with a value bias included (its b_V in float32 too)."""
    m, tr = _setup(QWEN)
    want = _exact(m, tr, 1)
    monkeypatch.setattr(contrib, "FLOAT32_PARAMS", m.config.num_params())
    c = Contributions(m, tr, 1)
    assert c.dtype == torch.float64
    at64 = c.arrays()
    _assert_arrays(at64, want, T, EXACT)
    assert np.any(at64.attn.astype(np.float32).astype(np.float64) != at64.attn)
    monkeypatch.setattr(contrib, "FLOAT32_PARAMS", m.config.num_params() - 1)
    c = Contributions(m, tr, 1)
    assert c.dtype == torch.float32
    at32 = c.arrays()
    _assert_arrays(at32, want, T, 1e-5)
    for a in (at32.attn, at32.attn_skip, at32.mlp, at32.mlp_skip):
        assert np.array_equal(a.astype(np.float32).astype(np.float64), a)
    assert np.any(at32.attn != at64.attn)
    # a model held in float64 is computed in float32 all the same
    m64 = copy.deepcopy(m).double()
    tr64 = trace(m64, torch.randint(0, BASE["vocab_size"], (2, T), generator=torch.Generator().manual_seed(8)))
    c = Contributions(m64, tr64, 1, value_bias="per_token")
    assert c.dtype == torch.float32
    got = c.arrays()
    for a in (got.attn, got.attn_skip, got.mlp, got.mlp_skip):
        assert np.array_equal(a.astype(np.float32).astype(np.float64), a)
    _assert_arrays(got, _exact(m64, tr64, 1, T, "per_token"), T, 1e-5)
    got = Contributions(m64, tr64, 1).arrays()
    assert np.array_equal(got.attn.astype(np.float32).astype(np.float64), got.attn)
    _assert_arrays(got, _exact(m64, tr64, 1), T, 1e-5)


@torch.no_grad()
def test_a_row_asked_for_is_computed_on_demand_once_and_counted():
    m, tr = _setup(SEQ)
    want = _exact(m, tr, 1)
    c = Contributions(m, tr, 1)
    assert c.rows_computed == 0
    np.testing.assert_allclose(c.attn(1, 3), want[1]["attn"][3, :4], rtol=0, atol=EXACT)
    assert c.rows_computed == 1
    assert c.attn_skip(1, 3) == pytest.approx(float(want[1]["skip"][3]), abs=EXACT)
    assert c.mlp(1, 3) == pytest.approx(float(want[1]["mlp"][3]), abs=EXACT)
    assert c.mlp_skip(1, 3) == pytest.approx(float(want[1]["mlp_skip"][3]), abs=EXACT)
    assert c.rows_computed == 1  # the row's other shares came with it
    assert c.mlp_skip(0, 6) == pytest.approx(float(want[0]["mlp_skip"][6]), abs=EXACT)
    assert c.rows_computed == 2
    c.compute(0, range(T))
    assert c.rows_computed == 1 + T
    c.arrays()
    assert c.rows_computed == 2 * T


# --------------------------------------------------------------------------- the graph
def test_the_graph_refuses_a_position_or_a_threshold_outside_its_range():
    m, tr = _setup(SEQ)
    c = Contributions(m, tr, 0, n_pos=8)
    for pos in (8, -1):
        with pytest.raises(ValueError, match=rf"^position {pos} is outside the text \(0 to 7\)$"):
            route_graph(c, pos)
    for thr in (1.0, 1.5, -0.01):
        with pytest.raises(ValueError, match=rf"^the threshold is a share: at least 0 and below 1, not {thr}$"):
            route_graph(c, 7, thr)
    assert route_graph(c, 7, 0.0).threshold == 0.0  # 0 is allowed: every edge
    assert route_graph(c, 7, 0.999).edges == []  # no share is that large here


@torch.no_grad()
def test_the_graph_holds_its_position_threshold_shape_kind_and_whether_heads_are_nodes():
    m, tr = _setup(PAR)
    c = Contributions(m, tr, 1)
    g = route_graph(c, 6, 0.1)
    assert (g.position, g.threshold, g.n_layer, g.n_head, g.kind) == (6, 0.1, 2, 4, "parallel")
    assert type(g.threshold) is float and g.heads is True
    assert route_graph(c, 6, 0.1, heads=False).heads is False
    t = token_graph(c, 6, 0.1)
    assert t.heads is False and (t.position, t.threshold, t.n_head, t.kind) == (6, 0.1, 4, "parallel")
    assert route_graph(c, 6).threshold == 0.04


@pytest.mark.parametrize("name", [SEQ, PAR, ATT])
@torch.no_grad()
def test_at_threshold_0_the_graph_is_every_edge_reached_once_each_with_its_kind_and_factor(name):
    """Every share is above 0, so every edge reachable from the position is drawn: exactly the walk's, each once,
    with the share of the rule on the recorded values; positions 0 (the first token), 4 and the last."""
    m, tr = _setup(name)
    kind = _kind(m.config)
    exact = _exact(m, tr, 1)
    c = Contributions(m, tr, 1)
    for pos in (0, 4, T - 1):
        want = _ltt_head_tree(exact, kind, pos, 0.0)
        g = route_graph(c, pos, 0.0)
        assert len(g.edges) == len(want) and set(_edges(g)) == set(want)
        for e in g.edges:
            assert e.weight == pytest.approx(want[e.src, e.dst], abs=EXACT)
            k, factor = _kind_and_factor(e.src, e.dst, want[e.src, e.dst])
            assert e.kind == k and e.factor == pytest.approx(factor, abs=EXACT), e
        nodes = {n for edge in want for n in edge}
        assert len(g.nodes) == len(set(g.nodes)) and set(g.nodes) == nodes and g.nodes[0] == g.output
        assert g.output == ("x", 2, pos)
        assert g.sources() == sorted(n for n in nodes if n[0] == "x" and n[1] == 0) == [("x", 0, j)
                                                                                       for j in range(pos + 1)]
        if kind != "attn_only":
            assert any(e.kind == "mlp_out" for e in g.edges) and any(e.kind == "mlp_in" for e in g.edges)
        # LTT's own graph (``token_graph``): the same walk with a token's heads summed into one edge
        t = token_graph(c, pos, 0.0)
        want = _ltt_token_tree(exact, kind, pos, 0.0)
        named = {(_ltt_name(e.src), _ltt_name(e.dst)): e for e in t.edges}
        assert len(t.edges) == len(named) == len(want) and set(named) == set(want)
        for k, e in named.items():
            assert e.weight == pytest.approx(want[k], abs=EXACT)
            kk, factor = _token_kind_and_factor(e.src, e.dst, want[k])
            assert e.kind == kk and e.factor == pytest.approx(factor, abs=EXACT), e
        assert len(t.nodes) == len(set(t.nodes)) and t.nodes[0] == t.output and t.sources() == g.sources()
        assert {e.kind for e in t.edges} >= ({"attn", "skip"} if pos else {"skip"})


@pytest.mark.parametrize("name", [SEQ, PAR])
@torch.no_grad()
def test_an_edge_whose_share_equals_the_threshold_is_not_drawn_and_the_default_threshold_is_0_04(name):
    m, tr = _setup(name)
    kind = _kind(m.config)
    c = Contributions(m, tr, 1)
    ours = _as_shares(c.arrays())  # walked with the engine's own numbers: a tie is exact
    pos = T - 1
    skip = next(e for e in route_graph(c, pos, 0.0).edges if e.dst == ("x", 2, pos) and e.kind == "skip")
    w = skip.weight
    assert 0.0 < w < 1.0
    at = route_graph(c, pos, w)
    assert (skip.src, skip.dst) not in _edges(at) and all(e.weight > w for e in at.edges)
    assert set(_edges(at)) == set(_ltt_head_tree(ours, kind, pos, w))
    below = route_graph(c, pos, float(np.nextafter(w, 0.0)))
    assert (skip.src, skip.dst) in _edges(below)
    # the default threshold, LTT's first: 0.04
    g = route_graph(c, pos)
    assert g.threshold == 0.04 and set(_edges(g)) == set(_ltt_head_tree(ours, kind, pos, 0.04))
    t = token_graph(c, pos)
    want = _ltt_token_tree(ours, kind, pos, 0.04)
    assert t.threshold == 0.04 and {(_ltt_name(e.src), _ltt_name(e.dst)) for e in t.edges} == set(want)


@pytest.mark.parametrize("name", [SEQ, PAR])
@torch.no_grad()
def test_the_walk_goes_down_a_layer_at_a_time_computing_each_layers_rows_in_one_go(name):
    """``route_graph`` asks for layer l's shares once, for the positions whose stream into layer l + 1 it reached,
    and lists the nodes top down: a layer's streams, heads and MLPs before those of the layer below."""
    m, tr = _setup(name)
    for thr in (0.0, 0.05):
        c = Contributions(m, tr, 1)
        calls, real = [], c.compute

        def spy(l, positions, real=real, c=c, calls=calls):
            before = c.rows_computed
            real(l, positions)
            if c.rows_computed > before:
                calls.append((l, c.rows_computed - before))

        c.compute = spy
        g = route_graph(c, T - 1, thr)
        reached = [sum(1 for n in g.nodes if n[0] == "x" and n[1] == l + 1) for l in (1, 0)]
        assert calls == [(1, reached[0]), (0, reached[1])]
        band = [n[1] - 1 if n[0] == "x" else n[1] for n in g.nodes]  # the layer a node belongs to (x: below)
        assert band[0] == 1 and band == sorted(band, reverse=True)
        assert band[-1] == -1  # the input tokens last


@torch.no_grad()
def test_an_embedding_has_no_edges_into_it():
    m, tr = _setup(SEQ)
    c = Contributions(m, tr, 1)
    for j in (0, 3):
        assert _in_edges(c, ("x", 0, j)) == [] and _token_in_edges(c, ("x", 0, j)) == []
    assert c.rows_computed == 0
    # a stream of position 0 above the embeddings has its edges (position 0 is no leaf)
    assert {e.kind for e in _in_edges(c, ("x", 1, 0))} == {"skip", "mlp_out"}


def test_nodes_sort_bottom_up_by_layer_then_stream_heads_after_attention_mlp():
    bottom_up = [("x", 0, 2), ("head", 0, 3, 2), ("mid", 0, 2), ("mlp", 0, 2),
                 ("x", 1, 2), ("head", 1, 0, 2), ("mid", 1, 2), ("mlp", 1, 2), ("x", 2, 2)]
    assert sorted(reversed(bottom_up), key=_depth) == bottom_up


def _all_routes(g) -> list[tuple[float, list]]:
    """Every route of the graph from an input token up to the output, heaviest first; its weight by hand: the
    product of its shares, an edge out of a head or an MLP counting 1 (its share was counted on the way in)."""
    into: dict = {}
    for e in g.edges:
        into.setdefault(e.dst, []).append(e)

    def down(node):
        if node[0] == "x" and node[1] == 0:
            return [(1.0, [node])]
        found = []
        for e in into.get(node, []):
            step = 1.0 if e.src[0] in ("head", "mlp") else e.weight
            found += [(w * step, path + [node]) for w, path in down(e.src)]
        return found

    return sorted(down(g.output), key=lambda r: -r[0])


@pytest.mark.parametrize("name,heads", [(SEQ, True), (SEQ, False), (PAR, True), (PAR, False)])
@torch.no_grad()
def test_the_best_routes_are_the_heaviest_of_all_the_routes_enumerated_with_their_weights(name, heads):
    m, tr = _setup(name)
    c = Contributions(m, tr, 1)
    g = route_graph(c, T - 1, 0.01, heads=heads)
    every = _all_routes(g)
    weight = {tuple(p): w for w, p in every}
    assert len(every) > 6 and len(weight) == len(every)
    best = best_routes(g)  # 5 by default
    assert len(best) == 5
    np.testing.assert_allclose([w for w, _ in best], [w for w, _ in every[:5]], rtol=1e-12)
    for w, path in best:
        assert w == pytest.approx(weight[tuple(path)], rel=1e-12)
        assert path[0][:2] == ("x", 0) and path[-1] == g.output  # bottom-up
    assert [w for w, _ in best_routes(g, 2)] == pytest.approx([w for w, _ in every[:2]], rel=1e-12)
    allr = best_routes(g, len(every) + 10)
    assert len(allr) == len(every)
    assert {tuple(p): pytest.approx(w, rel=1e-12) for w, p in allr} == weight
    if name == PAR:
        assert any(n[0] == "mlp" for _, p in best for n in p)


def test_a_graph_without_edges_has_no_routes_and_no_sources():
    empty = ContributionGraph(3, 0.5, 2, 4, "sequential")
    assert best_routes(empty) == [] and empty.sources() == []
    m, tr = _setup(SEQ)
    alone = route_graph(Contributions(m, tr, 1), 5, 0.999)
    assert alone.nodes == [("x", 2, 5)] and best_routes(alone) == [] and alone.sources() == []


@torch.no_grad()
def test_contribution_graph_is_the_walk_of_its_row_at_the_last_position_by_default():
    m, tr = _setup(QWEN)
    kind = _kind(m.config)
    g = contribution_graph(m, tr)  # row 0, the last position, 0.04, every position, b_V folded
    want = _ltt_head_tree(_exact(m, tr, 0), kind, T - 1, 0.04)
    assert (g.position, g.threshold, g.heads) == (T - 1, 0.04, True) and set(_edges(g)) == set(want)
    for k, w in _edges(g).items():
        assert w == pytest.approx(want[k], abs=EXACT)
    g = contribution_graph(m, tr, 1, -1, 0.1, n_pos=7, value_bias="per_token")
    want = _ltt_head_tree(_exact(m, tr, 1, 7, "per_token"), kind, 6, 0.1)
    assert (g.position, g.threshold) == (6, 0.1) and set(_edges(g)) == set(want)
    for k, w in _edges(g).items():
        assert w == pytest.approx(want[k], abs=EXACT)
    g = contribution_graph(m, tr, 1, 3, 0.1)
    assert g.position == 3 and set(_edges(g)) == set(_ltt_head_tree(_exact(m, tr, 1), kind, 3, 0.1))
