"""The contribution graph against the LLM Transparency Tool's definition, derived here independently.

LTT (facebookresearch/llm-transparency-tool, ``routes/contributions.py`` and ``routes/graph.py``; licence CC BY-NC,
so nothing of it is copied: the rules below are written from its published definition) computes, for one layer of
a model loaded through TransformerLens with its defaults:

- attention: the parts ``decomposed_attn[i, j, h] = a^h_{ij} · v^h_j W_O^h`` for EVERY key ``j`` (a later key has
  ``a = 0``), with ``v`` TransformerLens's ``hook_v`` after ``fold_value_biases`` (no value bias: it went into
  ``b_O``), and the one-off part ``resid_pre``; the whole is ``resid_mid``;
- the MLP: the parts ``mlp_out`` and ``resid_mid``; the whole is ``resid_post``;
- each part's score ``max(1e-5, ‖whole‖₁ − pairwise_distance(part, whole, p=1))`` (torch's pairwise distance adds
  1e-6 to the difference), divided by the sum of the scores of all the parts;
- the graph: an edge ``I{l-1}_j → A{l}_i`` carries the sum over heads of key ``j``'s shares (plus the skip's when
  ``j = i``), ``A{l}_i → M{l}_i → I{l}_i`` the MLP's share and ``A{l}_i → I{l}_i`` the MLP skip's; the tree of a
  prediction is every edge above the threshold reached from ``I{L-1}_pos`` going down.

gptviz draws a head as a node of its own (key → head → stream), so its edges are LTT's shares before the sum over
heads; its token-level graph (``token_graph``) is LTT's graph itself. Where gptviz differs from LTT on purpose
(its shares are cut at exactly 0 and a later key is no part), every share still agrees within 1e-5, on every block
kind that the presets and the model families use: pre-norm with LayerNorm and biases (GPT-2), RMSNorm with rotary
positions, grouped-query attention and a gated MLP (Llama, Mistral), the same with q/k/v biases (Qwen2), multi-query
attention with a head width other than n_embd / n_head (Gemma), parallel blocks (GPT-NeoX), attention-only blocks
(the induction-heads model) and post-norm blocks (the 2017 Transformer), where LTT's sums are taken before each
norm: attention's whole is ``resid_pre + attn_out`` and the MLP's ``resid_mid + mlp_out``, ``resid_mid`` being the
normalised stream the MLP read."""
from pathlib import Path

import numpy as np
import pytest
import torch

from gptviz import GPT, ModelConfig, load_checkpoint, trace
from gptviz.interp import contributions as contrib
from gptviz.interp.contributions import Contributions, contributions, route_graph, token_graph

ROOT = Path(__file__).resolve().parents[1]
EPS = 1e-5  # LTT's clip
PAIRWISE_EPS = 1e-6  # torch.nn.functional.pairwise_distance's default, which LTT's distance goes through
TOL = 1e-5  # the bound for every share and edge

BASE = dict(vocab_size=60, block_size=24, n_layer=2, n_head=4, n_embd=32)
BLOCK_KINDS = {
    "gpt2 (pre-norm LayerNorm, biases)": dict(),
    "llama/mistral (RMSNorm, rope, GQA, gated)": dict(norm="rmsnorm", pos_encoding="rope", bias=False, n_kv_head=2,
                                                      gated_mlp=True, activation="silu", tie_weights=False),
    "qwen2 (q/k/v biases, GQA)": dict(norm="rmsnorm", pos_encoding="rope", bias=False, qkv_bias=True, n_kv_head=2,
                                      gated_mlp=True, activation="silu"),
    "gemma (MQA, head width 16 != 32/4)": dict(norm="rmsnorm", pos_encoding="rope", bias=False, n_kv_head=1,
                                                d_head=16, gated_mlp=True, activation="gelu_tanh"),
    "gpt-neox (parallel, partial rotary)": dict(parallel_attn=True, pos_encoding="rope", rotary_pct=0.5),
    "attention only": dict(attn_only=True),
    "post-norm (2017 Transformer)": dict(norm_placement="post", activation="relu", pos_encoding="sinusoidal"),
}


def _model(cfg: ModelConfig, seed: int = 3) -> GPT:
    """Random weights far from their start (biases and norm weights included), so nothing is 0 or 1."""
    m = GPT(cfg)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(torch.randn(p.shape, generator=g) * (0.3 if p.dim() == 1 else 0.1))
    return m.eval()


# --------------------------------------------------------------------------- LTT's definition, written out here
def _ltt_shares(parts: torch.Tensor, whole: torch.Tensor) -> torch.Tensor:
    """parts (P, C), whole (C) -> (P,): LTT's proportional contributions, its clip and distance included."""
    distance = (parts - whole + PAIRWISE_EPS).abs().sum(-1)
    score = (whole.abs().sum() - distance).clamp(min=EPS)
    return score / score.sum()


def _rec(tr, name, b, T):
    return tr[name][b, :T].double() if tr[name].dim() == 3 else tr[name][b].double()


def _ltt_layer(m: GPT, tr, b: int, T: int, l: int) -> dict:
    """LTT's shares of layer ``l`` for batch row ``b``'s first ``T`` positions, from the recorded streams, the
    recorded pattern of row ``b`` and the model's weights (the values recomputed from the weights, without b_V)."""
    cfg, blk = m.config, m.transformer.h[l]
    H, K, hs, C, d_attn = cfg.n_head, cfg.n_kv_head, cfg.d_head, cfg.n_embd, cfg.d_attn
    x = tr[f"blocks.{l}.hook_resid_pre"][b, :T].double()
    attn_out = tr[f"blocks.{l}.hook_attn_out"][b, :T].double()
    reads = tr[f"blocks.{l}.ln1.hook_out"][b, :T].double() if blk.pre_norm else x  # what attention read
    W_v = blk.attn.c_attn.weight.detach().double()[d_attn + K * hs:]  # (K*hs, C), without its bias
    v = (reads @ W_v.T).view(T, K, hs).repeat_interleave(H // K, dim=1)  # (T, H, hs)
    W_O = blk.attn.c_proj.weight.detach().double().view(C, H, hs)
    written = torch.einsum("jhd,chd->jhc", v, W_O)  # (T, H, C)
    a = tr[f"blocks.{l}.attn.hook_pattern"][b, :, :T, :T].double()  # (H, i, j)
    decomposed = a.permute(1, 2, 0)[..., None] * written[None]  # (i, j, h, C), every key j
    # the decomposition is exact: the parts plus the output bias with the value bias folded in are attn_out
    b_O = blk.attn.c_proj.bias.detach().double() if blk.attn.c_proj.bias is not None else torch.zeros(C)
    if blk.attn.c_attn.bias is not None:
        b_V = blk.attn.c_attn.bias.detach().double()[d_attn + K * hs:].view(K, hs).repeat_interleave(H // K, dim=0)
        b_O = b_O + torch.einsum("hd,chd->c", b_V, W_O)
    np.testing.assert_allclose(decomposed.sum((1, 2)) + b_O, attn_out, atol=1e-4)
    mlp_out = None if cfg.attn_only else tr[f"blocks.{l}.hook_mlp_out"][b, :T].double()
    whole = x + attn_out + (mlp_out if cfg.parallel_attn else 0)  # resid_mid (the sum before a post-norm)
    shapes = {"attn": (T, T, H), "skip": (T,), "mlp": (T,), "mlp_skip": (T,)}
    out = {k: torch.zeros(shape, dtype=torch.float64) for k, shape in shapes.items()}
    for i in range(T):
        parts = [decomposed[i].reshape(T * H, C), x[i][None]] + ([mlp_out[i][None]] if cfg.parallel_attn else [])
        s = _ltt_shares(torch.cat(parts), whole[i])
        out["attn"][i], out["skip"][i] = s[: T * H].view(T, H), s[T * H]
        if cfg.parallel_attn:
            out["mlp"][i] = s[T * H + 1]
        elif not cfg.attn_only:
            mid = tr[f"blocks.{l}.hook_resid_mid"][b, i].double()  # the stream the MLP read and added to
            out["mlp"][i], out["mlp_skip"][i] = _ltt_shares(torch.stack([mlp_out[i], mid]), mid + mlp_out[i])
    return out


def _ltt_token_tree(shares: list[dict], kind: str, position: int, threshold: float) -> dict:
    """LTT's graph builder and its tree for one prediction: {(u, v): weight} over nodes X0_j, A{l}_i, M{l}_i, I{l}_i
    (a parallel block: X/I -> I directly, M reading the layer's input; attention only: A{l}_i is I{l}_i)."""
    L, T = len(shares), shares[0]["skip"].shape[0]
    full: dict = {}

    def add(u, v, w):
        full[u, v] = full.get((u, v), 0.0) + float(w)

    def inp(l, t):
        return f"X0_{t}" if l == 0 else f"I{l - 1}_{t}"

    for l, s in enumerate(shares):
        after = "I" if kind in ("attn_only", "parallel") else "A"  # the stream after attention
        for i in range(T):
            for j in range(T):
                add(inp(l, j), f"{after}{l}_{i}", s["attn"][i, j].sum())
            add(inp(l, i), f"{after}{l}_{i}", s["skip"][i])
            if kind == "sequential":
                add(f"A{l}_{i}", f"M{l}_{i}", s["mlp"][i])
                add(f"M{l}_{i}", f"I{l}_{i}", s["mlp"][i])
                add(f"A{l}_{i}", f"I{l}_{i}", s["mlp_skip"][i])
            elif kind == "parallel":
                add(inp(l, i), f"M{l}_{i}", s["mlp"][i])
                add(f"M{l}_{i}", f"I{l}_{i}", s["mlp"][i])
    into: dict = {}
    for (u, v), w in full.items():
        if w > threshold:
            into.setdefault(v, []).append(u)
    tree, todo, seen = {}, [f"I{L - 1}_{position}"], set()
    while todo:
        v = todo.pop()
        if v in seen:
            continue
        seen.add(v)
        for u in into.get(v, []):
            tree[u, v] = full[u, v]
            todo.append(u)
    return tree


def _ltt_head_tree(shares: list[dict], kind: str, position: int, threshold: float) -> dict:
    """The same walk with each head as a node (gptviz's drawing): key -> head -> stream, {(src, dst): weight}."""
    L, H = len(shares), shares[0]["attn"].shape[2]
    edges, todo, seen = {}, [("x", L, position)], set()
    while todo:
        node = todo.pop()
        if node in seen:
            continue
        seen.add(node)
        cands = []
        if node[0] == "head":
            _, l, h, i = node
            cands = [(("x", l, j), shares[l]["attn"][i, j, h]) for j in range(i + 1)]
        elif node[0] == "mlp":
            _, l, i = node
            cands = [(("mid", l, i) if kind == "sequential" else ("x", l, i), shares[l]["mlp"][i])]
        elif not (node[0] == "x" and node[1] == 0):
            _, l1, i = node
            if node[0] == "x" and kind == "sequential":
                cands = [(("mid", l1 - 1, i), shares[l1 - 1]["mlp_skip"][i]),
                         (("mlp", l1 - 1, i), shares[l1 - 1]["mlp"][i])]
            else:
                l = l1 if node[0] == "mid" else l1 - 1
                cands = [(("x", l, i), shares[l]["skip"][i])]
                cands += [(("head", l, h, i), shares[l]["attn"][i, : i + 1, h].sum()) for h in range(H)]
                cands += [(("mlp", l, i), shares[l]["mlp"][i])] if kind == "parallel" else []
        for src, w in cands:
            if float(w) > threshold:
                edges[src, node] = float(w)
                todo.append(src)
    return edges


def _ltt_name(node: tuple) -> str:
    """gptviz's node of the token graph by LTT's name: the embedding X0, the stream after attention A, the MLP M,
    the stream after the layer I."""
    if node[0] == "x":
        return f"X0_{node[2]}" if node[1] == 0 else f"I{node[1] - 1}_{node[2]}"
    return f"{'A' if node[0] == 'mid' else 'M'}{node[1]}_{node[2]}"


def _kind(cfg: ModelConfig) -> str:
    return "attn_only" if cfg.attn_only else "parallel" if cfg.parallel_attn else "sequential"


def _compare(m, tr, b, T, c: Contributions, thresholds=(0.04, 0.1)) -> float:
    """Every share and every edge of ``c`` (row ``b``, ``T`` positions) against LTT's; the largest difference."""
    cfg = m.config
    ltt = [_ltt_layer(m, tr, b, T, l) for l in range(cfg.n_layer)]
    got = c.arrays()
    worst = 0.0
    for l, s in enumerate(ltt):
        for i in range(T):
            want = s["attn"][i, : i + 1].numpy()
            np.testing.assert_allclose(got.attn[l, i, : i + 1], want, atol=TOL, err_msg=f"layer {l} query {i}")
            assert np.all(got.attn[l, i, i + 1:] == 0)
            worst = max(worst, float(np.abs(got.attn[l, i, : i + 1] - want).max()))
        np.testing.assert_allclose(got.attn_skip[l], s["skip"].numpy(), atol=TOL, err_msg=f"layer {l} skip")
        worst = max(worst, float(np.abs(got.attn_skip[l] - s["skip"].numpy()).max()))
        if got.mlp is not None:
            np.testing.assert_allclose(got.mlp[l], s["mlp"].numpy(), atol=TOL, err_msg=f"layer {l} MLP")
            worst = max(worst, float(np.abs(got.mlp[l] - s["mlp"].numpy()).max()))
        if got.mlp_skip is not None:
            np.testing.assert_allclose(got.mlp_skip[l], s["mlp_skip"].numpy(), atol=TOL, err_msg=f"layer {l}")
            worst = max(worst, float(np.abs(got.mlp_skip[l] - s["mlp_skip"].numpy()).max()))
    kind = _kind(cfg)
    for thr in thresholds:
        for pos in (T - 1, T // 2):
            for name, want, g in (("head", _ltt_head_tree(ltt, kind, pos, thr), route_graph(c, pos, thr)),
                                  ("token", _ltt_token_tree(ltt, kind, pos, thr), token_graph(c, pos, thr))):
                have = {(e.src, e.dst) if name == "head" else (_ltt_name(e.src), _ltt_name(e.dst)): e.weight
                        for e in g.edges}
                # an edge within TOL of the threshold may fall either side: only those are allowed to differ
                sure = {k for k, w in want.items() if abs(w - thr) > TOL}
                assert sure <= set(have), f"{name} graph at {thr}, position {pos}: missing {sure - set(have)}"
                assert {k for k, w in have.items() if abs(w - thr) > TOL} <= set(want), f"{name} graph: extra edges"
                for k in sure:
                    assert have[k] == pytest.approx(want[k], abs=TOL), (name, k)
    return worst


@pytest.mark.parametrize("name", list(BLOCK_KINDS))
@torch.no_grad()
def test_every_share_and_edge_equals_ltts_definition_on_every_block_kind(name):
    cfg = ModelConfig(**{**BASE, **BLOCK_KINDS[name]})
    m = _model(cfg)
    idx = torch.randint(0, 60, (1, 14), generator=torch.Generator().manual_seed(0))
    tr = trace(m, idx)
    _compare(m, tr, 0, 14, Contributions(m, tr, 0))


@torch.no_grad()
def test_a_second_batch_row_with_padding_is_split_with_its_own_pattern():
    """Row 1 of a two-row batch, shorter and right-padded: its shares are LTT's on row 1's own tensors, and the
    same as when it is traced alone (row 0's pattern would give other shares)."""
    cfg = ModelConfig(**{**BASE, **BLOCK_KINDS["qwen2 (q/k/v biases, GQA)"]})
    m = _model(cfg, seed=5)
    g = torch.Generator().manual_seed(1)
    idx = torch.randint(0, 60, (2, 16), generator=g)
    mask = torch.ones(2, 16, dtype=torch.long)
    mask[1, 11:] = 0
    tr = trace(m, idx, attention_mask=mask)
    c = Contributions(m, tr, 1, n_pos=11)
    _compare(m, tr, 1, 11, c)
    alone = trace(m, idx[1:, :11])
    np.testing.assert_allclose(c.arrays().attn, contributions(m, alone, 0).attn, atol=1e-6)
    assert not np.allclose(c.arrays().attn, contributions(m, tr, 0, n_pos=11).attn, atol=1e-3)


@torch.no_grad()
def test_queries_split_over_many_chunks_give_the_same_shares(monkeypatch):
    """A chunk of queries a few at a time (every test model fits one chunk at the shipped size): the second and
    later chunks hold their own queries."""
    cfg = ModelConfig(**{**BASE, **BLOCK_KINDS["gpt2 (pre-norm LayerNorm, biases)"]})
    m = _model(cfg, seed=7)
    idx = torch.randint(0, 60, (1, 20), generator=torch.Generator().manual_seed(2))
    tr = trace(m, idx)
    monkeypatch.setattr(contrib, "CHUNK_ELEMENTS", 3 * 20 * cfg.n_head * cfg.n_embd)  # 3 queries a chunk
    c = Contributions(m, tr, 0)
    c.compute(0, range(20))  # 7 chunks in one call
    _compare(m, tr, 0, 20, c)


@torch.no_grad()
def test_the_value_bias_per_token_is_the_labelled_variant_and_differs_from_ltt():
    """``value_bias="per_token"`` keeps b_V inside every head x token term: the shares of that decomposition
    (the parts a·v·W_O with the bias, which add up to attn_out minus b_O alone), not LTT's."""
    cfg = ModelConfig(**{**BASE, **BLOCK_KINDS["gpt2 (pre-norm LayerNorm, biases)"]})
    m = _model(cfg)
    idx = torch.randint(0, 60, (1, 12), generator=torch.Generator().manual_seed(4))
    tr = trace(m, idx)
    kept = contributions(m, tr, 0, value_bias="per_token")
    folded = contributions(m, tr, 0)
    assert np.abs(kept.attn - folded.attn).max() > 1e-2
    blk = m.transformer.h[0]
    H, hs, C = cfg.n_head, cfg.d_head, cfg.n_embd
    v = tr["blocks.0.attn.hook_v"][0].double()  # with its bias
    W_O = blk.attn.c_proj.weight.double().view(C, H, hs)
    a = tr["blocks.0.attn.hook_pattern"][0].double()
    x, y = tr["blocks.0.hook_resid_pre"][0].double(), tr["blocks.0.hook_resid_mid"][0].double()
    i = 11
    parts = torch.einsum("hj,jhc->jhc", a[:, i], torch.einsum("jhd,chd->jhc", v, W_O))  # (j, h, C)
    want = _ltt_shares(torch.cat([parts.reshape(-1, C), x[i][None]]), y[i])[:-1].view(12, H)  # the same rule
    np.testing.assert_allclose(kept.attn[0, i], want, atol=1e-9)
    with pytest.raises(ValueError, match="value bias"):
        Contributions(m, tr, 0, value_bias="bias")


@torch.no_grad()
def test_the_shipped_shakespeare_gpt_on_a_real_line_equals_ltts_definition():
    """A trained model on a line from a play: every share within 1e-5 of LTT's (in fact within 1e-6)."""
    ck = load_checkpoint(ROOT / "checkpoints" / "shakespeare.safetensors")
    m = ck.model.eval()
    idx = torch.tensor([ck.tokenizer.encode("Now is the winter of our discontent made glorious")])
    tr = trace(m, idx)
    worst = _compare(m, tr, 0, idx.shape[1], Contributions(m, tr, 0))
    assert worst < 1e-6
