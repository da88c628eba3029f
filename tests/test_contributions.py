"""The contribution graph (gptviz.interp.contributions) against a hand-written oracle, and on the shipped
induction-heads model against heads identified here from their attention patterns.

The oracle reads the block's input with a torch forward pre-hook and recomputes the rest by hand from the model's
parameters: the norm, the q/k/v projection, grouped-query repetition, the causal softmax, each head's per-source
vector ``a_ij · v_j W_O^h``, and Ferrando and Voita's proportional rule
``max(0, ‖y‖₁ − ‖y − c‖₁) / Σ max(0, ‖y‖₁ − ‖y − c'‖₁)``, written out again below."""
from pathlib import Path

import numpy as np
import pytest
import torch

from gptviz import GPT, ModelConfig, load_checkpoint, trace
from gptviz.interp.contributions import Contributions, best_routes, contributions, head_sources, route_graph

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = {
    "gpt2-like": dict(),
    "grouped-query + gated MLP": dict(n_head=4, n_kv_head=2, gated_mlp=True, activation="silu"),
    "parallel": dict(parallel_attn=True),
    "attention only": dict(attn_only=True),
}


def _model(cfg: ModelConfig) -> GPT:
    """Random weights far from their start (biases and norm weights included), so nothing is 0 or 1."""
    m = GPT(cfg)
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(torch.randn(p.shape, generator=g) * (0.3 if p.dim() == 1 else 0.1))
    return m.eval()


def _captured(m: GPT, idx: torch.Tensor):
    """Each block's input and its MLP's output, caught with torch hooks on a plain forward pass."""
    ins, mlps, final = {}, {}, {}
    hooks = []
    for l, blk in enumerate(m.transformer.h):
        hooks.append(blk.register_forward_pre_hook(lambda mod, a, l=l: ins.__setitem__(l, a[0].double())))
        if hasattr(blk, "mlp"):
            hooks.append(blk.mlp.register_forward_hook(lambda mod, a, o, l=l: mlps.__setitem__(l, o.double())))
    hooks.append(m.transformer.h[-1].register_forward_hook(lambda mod, a, o: final.__setitem__(0, o.double())))
    with torch.no_grad():
        m(idx)
    for h in hooks:
        h.remove()
    return ins, mlps, final[0]


def _layernorm(x, w, b):
    x = x - x.mean(-1, keepdim=True)
    return x / (x.pow(2).mean(-1, keepdim=True) + 1e-5).sqrt() * w.double() + (0 if b is None else b.double())


def _oracle_layer(m: GPT, l: int, x: torch.Tensor, mlp_out):
    """By hand, for one layer of a one-row batch: (per-source vectors c[i, j, h, :], b_O, attention's output)."""
    cfg, blk = m.config, m.transformer.h[l]
    T, H, K, hs = x.shape[0], cfg.n_head, cfg.n_kv_head, cfg.d_head
    h_in = _layernorm(x, blk.ln_1.weight, blk.ln_1.bias)
    W, bqkv = blk.attn.c_attn.weight.double(), blk.attn.c_attn.bias
    qkv = h_in @ W.T + (0 if bqkv is None else bqkv.double())
    q, k, v = qkv.split([H * hs, K * hs, K * hs], dim=-1)
    q, k, v = q.view(T, H, hs), k.view(T, K, hs), v.view(T, K, hs)
    k, v = k.repeat_interleave(H // K, dim=1), v.repeat_interleave(H // K, dim=1)
    scores = torch.einsum("ihd,jhd->hij", q, k) / hs ** 0.5
    scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    a = torch.softmax(scores, dim=-1)  # (H, T, T)
    W_O = blk.attn.c_proj.weight.double()  # (C, H*hs)
    b_O = blk.attn.c_proj.bias.double() if blk.attn.c_proj.bias is not None else torch.zeros(cfg.n_embd)
    if bqkv is not None:  # the value bias folded into the output bias (TransformerLens's default, so LTT's)
        b_V = bqkv.double()[(H + K) * hs:].view(K, hs).repeat_interleave(H // K, dim=0)
        v = v - b_V
        b_O = b_O + sum(W_O[:, h * hs:(h + 1) * hs] @ b_V[h] for h in range(H))
    per = torch.stack([(v[:, h] @ W_O[:, h * hs:(h + 1) * hs].T) for h in range(H)], dim=1)  # (T, H, C)
    c = a.permute(1, 2, 0)[..., None] * per[None]  # (i, j, h, C)
    return c, b_O, c.sum((1, 2)) + b_O


def _proportional(parts: list, whole: torch.Tensor) -> list:
    """The rule with the LLM Transparency Tool's two constants: each score at least 1e-5, and 1e-6 added to every
    component of the difference (torch's pairwise_distance)."""
    raw = [max(1e-5, float(whole.abs().sum() - (p - whole + 1e-6).abs().sum())) for p in parts]
    s = sum(raw)
    return [r / s for r in raw]


@pytest.mark.parametrize("name", list(CONFIGS))
@torch.no_grad()
def test_every_share_matches_the_hand_written_oracle_and_the_parts_add_up(name):
    cfg = ModelConfig(**{**dict(vocab_size=50, block_size=16, n_layer=2, n_head=2, n_embd=16), **CONFIGS[name]})
    m = _model(cfg)
    idx = torch.randint(0, 50, (1, 9), generator=torch.Generator().manual_seed(0))
    ins, mlps, final = _captured(m, idx)
    tr = trace(m, idx)
    c = contributions(m, tr, 0)
    T, H = 9, cfg.n_head
    stream = tr["hook_embed"][0].double() + tr["hook_pos_embed"][0].double()
    for l in range(cfg.n_layer):
        x = ins[l][0]
        parts, b_O, attn_out = _oracle_layer(m, l, x, mlps.get(l))
        mlp_out = mlps[l][0] if l in mlps else None
        for i in range(T):
            y = x[i] + attn_out[i] + (mlp_out[i] if cfg.parallel_attn else 0)
            terms = [parts[i, j, h] for j in range(T) for h in range(H)] + [x[i]]
            terms += [mlp_out[i]] if cfg.parallel_attn else []
            want = _proportional(terms, y)
            seen = (i + 1) * H  # the keys up to i: a later key's sliver is in the sum, but no share of it is kept
            want = want[:seen] + want[T * H:]
            got = [c.attn[l, i, j, h] for j in range(i + 1) for h in range(H)] + [c.attn_skip[l, i]]
            got += [c.mlp[l, i]] if cfg.parallel_attn else []
            np.testing.assert_allclose(got, want, atol=1e-5, err_msg=f"{name} layer {l} position {i}")
            if cfg.attn_only or cfg.parallel_attn:
                continue
            xm = x[i] + attn_out[i]
            np.testing.assert_allclose([c.mlp[l, i], c.mlp_skip[l, i]],
                                       _proportional([mlp_out[i], xm], xm + mlp_out[i]), atol=1e-5)
        # the decomposition is exact: the engine's per-head outputs (its per-source vectors weighted by the
        # recorded pattern, summed over keys) plus b_O are attention's whole output
        u = head_sources(m, tr, 0, l)  # (T, H, C)
        heads = torch.einsum("hij,jhc->ihc", tr[f"blocks.{l}.attn.hook_pattern"][0].double(), u)  # (i, H, C)
        np.testing.assert_allclose(heads.sum(1) + b_O, attn_out.detach(), atol=1e-5)
        stream = stream + heads.sum(1) + b_O + (mlp_out if mlp_out is not None else 0)
    # embeddings + every head + every attention bias + every MLP = the final residual stream
    np.testing.assert_allclose(stream.detach(), final[0].detach(), atol=1e-5)
    total = c.attn.sum((2, 3)) + c.attn_skip + (c.mlp if cfg.parallel_attn else 0)
    assert np.all(total <= 1 + 1e-9) and total[:, -1] == pytest.approx(1.0)  # a later key's sliver is not kept


def test_the_graph_keeps_exactly_the_edges_above_the_threshold_reachable_from_the_position():
    cfg = ModelConfig(vocab_size=50, block_size=16, n_layer=2, n_head=2, n_embd=16)
    m = _model(cfg)
    tr = trace(m, torch.randint(0, 50, (1, 8), generator=torch.Generator().manual_seed(1)))
    c, lazy = contributions(m, tr, 0), Contributions(m, tr, 0)
    low, high = route_graph(lazy, 7, 0.0), route_graph(lazy, 7, 0.1)
    assert all(e.weight > 0.1 for e in high.edges) and all(e.weight > 0 for e in low.edges)
    assert {(e.src, e.dst) for e in high.edges} < {(e.src, e.dst) for e in low.edges}
    # the head edge from key j at layer 0 is the share computed for query 7, key j, head h
    for e in low.edges:
        if e.kind == "head_in":
            _, l, h, i = e.dst
            assert i == 7 or ("x", l + 1, i) in low.nodes or ("mid", l, i) in low.nodes
            assert e.weight == pytest.approx(c.attn[l, i, e.src[2], h])
    assert low.output == ("x", 2, 7) and low.output in low.nodes
    with pytest.raises(ValueError, match="outside the text"):
        route_graph(lazy, 8, 0.1)
    with pytest.raises(ValueError, match="threshold"):
        route_graph(lazy, 0, 1.5)


# --------------------------------------------------------------------------- the shipped induction-heads model
N, SEED = 24, 0  # a run of 24 distinct random tokens, repeated: 48 tokens (the model's context is 64)


@pytest.fixture(scope="module")
def induction():
    ck = load_checkpoint(ROOT / "checkpoints" / "induction-heads.safetensors")
    m = ck.model.eval()
    run = torch.randperm(m.config.vocab_size, generator=torch.Generator().manual_seed(SEED))[:N]
    idx = torch.cat([run, run])[None]
    tr = trace(m, idx)
    # the heads, from their attention patterns alone (not gptviz's head detector)
    p0, p1 = (tr[f"blocks.{l}.attn.hook_pattern"][0].numpy() for l in (0, 1))
    T = 2 * N
    prev = np.array([np.mean([p0[h, i, i - 1] for i in range(1, T)]) for h in range(p0.shape[0])])
    ind = np.array([np.mean([p1[h, i, i - N + 1] for i in range(N, T)]) for h in range(p1.shape[0])])
    previous_head = int(np.argmax(prev))
    induction_heads = {int(h) for h in np.nonzero(ind > 0.3)[0]}
    assert prev[previous_head] > 0.5 and induction_heads
    return m, tr, Contributions(m, tr, 0), previous_head, induction_heads


def test_on_repeated_text_the_routes_run_through_the_token_after_the_earlier_occurrence(induction):
    """At each position ``i = N + m`` of the second half (the second ``t_m``; skipping the first two and the last),
    the graph (threshold 0.04) holds the induction route: the earlier occurrence ``t_m`` (position m) → the
    previous-token head at the token after it (m + 1) → the stream at m + 1 → an induction head at i → the
    prediction; it is the heaviest route through the previous-token head; and the heaviest route of all enters
    the prediction through an induction head reading the stream at m + 1.

    What the heaviest route's layer-0 step is varies: mostly a head at m + 1 that attends to m + 1 itself (it
    carries the token ``t_{m+1}`` the induction head copies: 17 of the 21 positions here), at 1 of the 21 the
    previous-token head. The previous-token head's part in induction is to make m + 1's *key* match, which a
    decomposition of values does not show; the graph shows what is moved."""
    m, tr, c, P, ind = induction
    positions = range(N + 2, 2 * N - 1)
    through, prev_route_in, prev_route_best = 0, 0, 0
    for i in positions:
        after = i - N + 1  # the token after the earlier occurrence of t_m
        g = route_graph(c, i, 0.04)
        edges = {(e.src, e.dst) for e in g.edges}
        routes = best_routes(g, 400)
        (w, top), *_ = routes
        l1 = [n for n in top if n[0] == "head" and n[1] == 1]
        through += ("x", 1, after) in top and len(l1) == 1 and l1[0][2] in ind and l1[0][3] == i
        prev = [("x", 0, after - 1), ("head", 0, P, after), ("x", 1, after)]
        if any({(prev[0], prev[1]), (prev[1], prev[2]), (prev[2], ("head", 1, h, i)),
                (("head", 1, h, i), g.output)} <= edges for h in ind):
            prev_route_in += 1
        via_prev = [p for _, p in routes if any(n[:3] == ("head", 0, P) for n in p)]
        if via_prev and via_prev[0][:3] == prev and via_prev[0][3][2] in ind and via_prev[0][3][3] == i:
            prev_route_best += 1
    n = len(positions)
    assert n == 21
    assert through >= 18, f"the heaviest route went through the stream after the earlier occurrence {through}/{n}"
    assert prev_route_in >= 18, f"the previous-token route was in the graph at {prev_route_in}/{n} positions"
    assert prev_route_best >= 17, f"it was the heaviest through the previous-token head at {prev_route_best}/{n}"


def test_the_figure_draws_each_edge_once_and_escapes_the_tokens():
    import json

    from gptviz.present.figures import contribution_figure

    cfg = ModelConfig(vocab_size=50, block_size=16, n_layer=2, n_head=2, n_embd=16)
    m = _model(cfg)
    tr = trace(m, torch.randint(0, 50, (1, 6), generator=torch.Generator().manual_seed(2)))
    g = route_graph(Contributions(m, tr, 0), 5, 0.02)
    tokens = ['<a href="x">t</a>', "b", "c", "d", "e", "<b>f"]
    spec = json.loads(contribution_figure(g, tokens, "graph", prediction="<a href=\"x\">t</a>").to_json())
    lines = [t for t in spec["data"] if t.get("mode") == "lines"]
    assert sum(list(t["x"]).count(None) for t in lines) == len(g.edges)
    strings = json.dumps(spec)
    assert "<a href" not in strings and "<b>f" not in strings
    assert "&lt;a href=\\\"x\\\"&gt;t&lt;/a&gt;" in strings  # still there, as text
    clickable = {k for t in spec["data"] for k in (t.get("customdata") or []) if isinstance(k, str) and k}
    heads = {":".join(map(str, n)) for n in g.nodes if n[0] in ("head", "mlp")}
    assert heads and heads <= clickable


def test_the_figure_draws_only_the_positions_the_graph_reaches_spread_across_the_width():
    """Issue 34: at the last position of an 18-token line the routes used to crowd into one column at the right edge
    of a page-wide axis. Only the positions with a node of the graph get a column (and a tick, the token, with "…"
    where positions were left out before it); together they fill the axis, so no drawn column is narrower than 1."""
    import json

    from gptviz.present.figures import contribution_figure

    cfg = ModelConfig(vocab_size=50, block_size=32, n_layer=2, n_head=2, n_embd=16)
    m = _model(cfg)
    tr = trace(m, torch.randint(0, 50, (2, 18), generator=torch.Generator().manual_seed(3)))
    g = route_graph(Contributions(m, tr, 1), 17, 0.1)  # batch row 1
    used = sorted({n[-1] for n in g.nodes})
    assert 1 < len(used) < 18  # the graph skips some positions
    tokens = [f"t{i}" for i in range(18)]
    spec = json.loads(contribution_figure(g, tokens, "graph").to_json())
    xa = spec["layout"]["xaxis"]
    want = [("… " if i > (used[k - 1] + 1 if k else 0) else "") + f"t{i}" for k, i in enumerate(used)]
    assert xa["ticktext"] == want
    ticks = xa["tickvals"]
    assert len(ticks) == len(used) and all(b - a >= 1.0 for a, b in zip(ticks, ticks[1:]))
    lo, hi = xa["range"]
    assert hi - lo <= len(used) * 1.0 + 0.4 * 2 * len(used) + 0.6  # no room kept for the positions left out
    xs = [x for t in spec["data"] for x in (t.get("x") or []) if x is not None]
    assert lo <= min(xs) and max(xs) <= hi
