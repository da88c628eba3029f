"""The contribution graph: the routes from the input tokens through heads and MLPs to one position's prediction.

Ferrando and Voita (2024), "Information flow routes", with the definitions of the LLM Transparency Tool (LTT:
``routes/contributions.py`` and ``routes/graph.py``, on a model loaded through TransformerLens with its defaults).
Every residual update is a sum ``y = x + Σ_k c_k`` (``x`` the stream coming in, the skip term; ``c_k`` what a block
wrote). The *proportional contribution* of a term is how much closer to ``y`` the term alone is than nothing (L1
distance), cut at zero and normalised over all the terms, the skip term included::

    w_k = max(0, ‖y‖₁ − ‖y − c_k‖₁) / Σ_m max(0, ‖y‖₁ − ‖y − c_m‖₁)

- Attention at layer ``l``, query position ``i``: ``y = x_i + attn_out_i``; the terms are the skip ``x_i`` and,
  for every head ``h`` and key ``j``, the per-source vector ``c_{ijh} = a^h_{ij} · (v^h_j − b^h_V) W_O^h``
  (``v`` the value head serving ``h``, repeated under grouped-query attention; ``W_O^h`` head ``h``'s columns of
  ``c_proj``). The value bias ``b_V`` is folded into the output bias, as TransformerLens folds it by default
  (``fold_value_biases``) and so as LTT computes: since each row of the pattern sums to 1,
  ``Σ_{j,h} c_{ijh} + b_O + Σ_h b^h_V W_O^h = attn_out_i`` exactly, and that folded bias is in ``y`` but is no term.
  ``value_bias="per_token"`` keeps ``b_V`` inside every ``c_{ijh}`` instead (not LTT's definition; the page labels
  it so).
- MLP at layer ``l``: ``y = resid_mid_i + mlp_out_i``, two terms: the MLP output and the skip ``resid_mid_i``, the
  stream the MLP read and added to (LTT: ``resid_mid`` and ``resid_post``).
- Parallel blocks (GPT-NeoX): attention and the MLP both read ``x``, so one sum ``y = x + Σ c_{ijh} + b + mlp_out``,
  all the terms normalised together (LTT has no parallel case: this is its rule applied to the block's one sum).
- Post-norm blocks (the 2017 Transformer): each sum is split before its norm. Attention: ``y = x + attn_out``;
  the MLP: ``y = resid_mid + mlp_out``, where ``resid_mid`` is the *normalised* stream the MLP read.

LTT's two constants are kept, so its numbers come out: each unnormalised share is at least ``CLIP`` = 10⁻⁵ rather
than 0 (nothing divides by 0; a key a head may not see, even a later one, still counts a sliver of 10⁻⁵ in the sum,
though no share of a later key is kept here), and the distance adds ``PAIRWISE_EPS`` = 10⁻⁶ to every component, as
torch's ``pairwise_distance`` does. tests/test_contributions_ltt.py compares every share and edge with LTT's
definition, derived there independently, on every block kind: within 10⁻⁷.

``contributions(model, trace, b)`` computes every share of one batch row, at every position and layer (cache it:
threshold and position changes then cost nothing); ``route_graph(contribs, position, threshold)`` walks down
from ``position``'s final stream along the edges above ``threshold``: the nodes and edges it reaches are the graph,
each head a node of its own; ``token_graph`` is LTT's graph itself, a token's heads summed into one edge.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import torch

from ..model.hook_names import act_name
from .lens import _check, _t

# Elements of the (queries × keys × heads × d_model) block held at once: ~64 MB in float64.
CHUNK_ELEMENTS = 8_000_000
# Above this many parameters the shares are computed in float32 (half the memory and time); float64 below.
FLOAT32_PARAMS = 20_000_000


@dataclass
class ContributionArrays:
    """Every proportional contribution of one batch row (see the module doc), as arrays. ``kind``: "sequential"
    (attention, then the MLP), "attn_only" (no MLP) or "parallel" (one sum per layer)."""

    kind: str
    attn: np.ndarray  # (L, T, T, H): [layer, query i, key j, head h] share of c_{ijh} in y_i
    attn_skip: np.ndarray  # (L, T): share of the skip x_i in attention's sum (parallel: in the layer's one sum)
    mlp: Optional[np.ndarray] = None  # (L, T): share of mlp_out_i (None for an attention-only model)
    mlp_skip: Optional[np.ndarray] = None  # (L, T): share of the skip in the MLP's sum (None unless sequential)


# LTT's two small constants: every unnormalised share is at least CLIP (so nothing divides by 0), and its distance
# is torch's pairwise_distance, which adds PAIRWISE_EPS to every component of the difference.
CLIP = 1e-5
PAIRWISE_EPS = 1e-6


def shares(parts: torch.Tensor, whole: torch.Tensor) -> torch.Tensor:
    """The unnormalised proportional contribution ``max(CLIP, ‖whole‖₁ − ‖part − whole + ε‖₁)`` of each of
    ``parts`` (..., C) to ``whole``, broadcast over the leading dimensions; (...). ``ε = PAIRWISE_EPS``."""
    return (whole.abs().sum(-1) - (whole - parts - PAIRWISE_EPS).abs().sum(-1)).clamp(min=CLIP)


def _norm(scores: list[torch.Tensor], total: torch.Tensor) -> list[torch.Tensor]:
    return [s / total.reshape(total.shape + (1,) * (s.dim() - total.dim())) for s in scores]


VALUE_BIAS = ("folded", "per_token")  # where b_V goes: into the output bias (LTT's default), or into every term


def value_biases(model, layer: int, dtype=torch.float64) -> torch.Tensor:
    """``b_V`` of ``layer`` for every query head, (H, hs): the value slice of ``c_attn``'s bias, each key/value head's
    repeated for the query heads it serves (zeros when the projection has no bias)."""
    cfg, attn = model.config, model.transformer.h[layer].attn
    if attn.c_attn.bias is None:
        return torch.zeros(cfg.n_head, cfg.d_head, dtype=dtype)
    b = attn.c_attn.bias.detach().to(dtype)[cfg.d_attn + cfg.d_kv:].view(cfg.n_kv_head, cfg.d_head)
    return b.repeat_interleave(cfg.n_head // cfg.n_kv_head, dim=0)


def head_sources(model, trace, b: int, layer: int, dtype=torch.float64, value_bias: str = "folded") -> torch.Tensor:
    """``u[j, h] = (v^h_j − b^h_V) W_O^h`` (T, H, C): what head ``h`` would write at any query that attended to key
    ``j`` alone, the value bias folded out (``value_bias="per_token"``: ``v^h_j W_O^h``, the bias kept in). Head
    ``h``'s output at query ``i`` is ``Σ_j a^h_{ij} u[j, h]`` plus its share of the folded bias ``b^h_V W_O^h``
    (the split of ``lens.decompose``: the column block ``h`` of ``c_proj`` is head ``h``'s ``W_O``)."""
    if value_bias not in VALUE_BIAS:
        raise ValueError(f"the value bias goes into {' or '.join(VALUE_BIAS)}, not {value_bias!r}")
    cfg = model.config
    rep = act_name("v_rep", layer)
    v = _t(trace[rep if rep in trace else act_name("v", layer)])[b].to(dtype)  # (T, H, hs)
    if value_bias == "folded":
        v = v - value_biases(model, layer, dtype)
    W_O = model.transformer.h[layer].attn.c_proj.weight.detach().to(dtype).view(cfg.n_embd, cfg.n_head, cfg.d_head)
    return torch.einsum("jhd,chd->jhc", v, W_O)


class Contributions:
    """The proportional contributions of batch row ``b``, computed a layer's positions at a time when first asked
    for and kept (``route_graph`` asks only for the positions its routes reach). ``arrays()`` computes them all.

    Bounded memory: the per-source vectors are built for a few queries at a time (``CHUNK_ELEMENTS``). All of
    them is about ``L · T² · H · C / 2`` absolute differences (GPT-2 small, 64 tokens: 2.3·10⁸)."""

    def __init__(self, model, trace, b: int = 0, n_pos: Optional[int] = None, value_bias: str = "folded"):
        model = _check(trace, model)
        if value_bias not in VALUE_BIAS:
            raise ValueError(f"the value bias goes into {' or '.join(VALUE_BIAS)}, not {value_bias!r}")
        cfg = model.config
        if cfg.n_enc_layer >= 0:
            raise ValueError("the contribution graph is for decoder-only models; this one also reads a source "
                             "through cross-attention")
        if cfg.sublayer_norms != "before":
            raise ValueError("the contribution graph splits each sublayer's output into the parts that wrote it, but "
                             "this model normalises that output as a whole before adding it (a norm after each "
                             "sublayer: Gemma 2 and 3, OLMo 2), so the parts do not add up to it")
        self.model, self.trace, self.b, self.value_bias = model, trace, int(b), value_bias
        self.n_layer, self.n_head = cfg.n_layer, cfg.n_head
        self.n_pos = int(n_pos) if n_pos is not None else int(trace[act_name("resid_pre", 0)].shape[1])
        self.kind = "attn_only" if cfg.attn_only else "parallel" if cfg.parallel_attn else "sequential"
        self.dtype = torch.float32 if cfg.num_params() > FLOAT32_PARAMS else torch.float64
        self._attn: dict[tuple[int, int], np.ndarray] = {}  # (l, i) -> (i + 1, H)
        self._attn_skip: dict[tuple[int, int], float] = {}
        self._mlp: dict[tuple[int, int], float] = {}
        self._mlp_skip: dict[tuple[int, int], float] = {}
        self.rows_computed = 0

    def _get(self, step: str, l: int) -> torch.Tensor:
        return _t(self.trace[act_name(step, l)])[self.b, : self.n_pos].to(self.dtype)

    def compute(self, l: int, positions) -> None:
        """Work out layer ``l``'s shares at ``positions`` (those not known yet)."""
        with torch.no_grad():
            todo = sorted({int(i) for i in positions if (l, int(i)) not in self._attn_skip})
            if not todo:
                return
            T, H, C = self.n_pos, self.n_head, self.model.config.n_embd
            x, out = self._get("resid_pre", l), self._get("attn_out", l)
            y = x + out
            m_out = self._get("mlp_out", l) if self.kind != "attn_only" else None
            if self.kind == "parallel":
                assert m_out is not None  # a parallel block has an MLP
                y = y + m_out
            u = head_sources(self.model, self.trace, self.b, l, self.dtype, self.value_bias)[:T]  # (T, H, C)
            pattern = _t(self.trace[act_name("pattern", l)])[self.b, :, :T, :T].to(self.dtype)  # (H, T, T)
            step = max(1, CHUNK_ELEMENTS // max(1, (todo[-1] + 1) * H * C))
            for c0 in range(0, len(todo), step):
                q = torch.tensor(todo[c0:c0 + step])
                k = int(q.max()) + 1
                a = pattern[:, q, :k].permute(1, 2, 0)  # (q, k, H)
                yq = y[q]
                # ‖c_{ijh} − y + ε‖₁ with c_{ijh} = a_{ijh} u_{jh}, in one pass that writes (q, k, H, C) once
                far = torch.addcmul((yq - PAIRWISE_EPS)[:, None, None, :], a[..., None], u[None, :k],
                                    value=-1.0).abs_().sum(-1)
                s_heads = (yq.abs().sum(-1)[:, None, None] - far).clamp(min=CLIP)  # (q, k, H), as shares() would
                # the keys after k (after every query of the chunk): c = 0, so each scores as a zero vector does
                later = shares(torch.zeros_like(yq), yq) * ((T - k) * H)
                s_skip = shares(x[q], yq)
                s_mlp = (shares(m_out[q], yq) if self.kind == "parallel" and m_out is not None
                         else torch.zeros_like(s_skip))
                s_heads, s_skip, s_mlp = _norm([s_heads, s_skip, s_mlp], s_heads.sum((1, 2)) + later + s_skip + s_mlp)
                for r, i in enumerate(q.tolist()):
                    self._attn[l, i] = s_heads[r, : i + 1].double().numpy()
                    self._attn_skip[l, i] = float(s_skip[r])
                    if self.kind == "parallel":
                        self._mlp[l, i] = float(s_mlp[r])
            # the stream the MLP read and added to: x + out, or its norm in a post-norm block
            if self.kind == "sequential":
                assert m_out is not None  # a sequential block has an MLP
                q = torch.tensor(todo)
                xm = self._get("resid_mid", l)[q]
                ym = xm + m_out[q]
                s_m, s_x = shares(m_out[q], ym), shares(xm, ym)
                s_m, s_x = _norm([s_m, s_x], s_m + s_x)
                for r, i in enumerate(todo):
                    self._mlp[l, i], self._mlp_skip[l, i] = float(s_m[r]), float(s_x[r])
            self.rows_computed += len(todo)

    def _row(self, table: dict, l: int, i: int):
        if (l, i) not in self._attn_skip:
            self.compute(l, [i])
        return table[l, i]

    def attn(self, l: int, i: int) -> np.ndarray:
        """(i + 1, H): the share of ``c_{ijh}`` for every key ``j ≤ i`` and head ``h``."""
        return self._row(self._attn, l, i)

    def attn_skip(self, l: int, i: int) -> float:
        return self._row(self._attn_skip, l, i)

    def mlp(self, l: int, i: int) -> float:
        return self._row(self._mlp, l, i)

    def mlp_skip(self, l: int, i: int) -> float:
        return self._row(self._mlp_skip, l, i)

    def arrays(self) -> ContributionArrays:
        """Every share at every layer and position."""
        L, T, H = self.n_layer, self.n_pos, self.n_head
        attn, skip = np.zeros((L, T, T, H)), np.zeros((L, T))
        mlp = None if self.kind == "attn_only" else np.zeros((L, T))
        mlp_skip = np.zeros((L, T)) if self.kind == "sequential" else None
        for l in range(L):
            self.compute(l, range(T))
            for i in range(T):
                attn[l, i, : i + 1], skip[l, i] = self._attn[l, i], self._attn_skip[l, i]
                if mlp is not None:
                    mlp[l, i] = self._mlp[l, i]
                if mlp_skip is not None:
                    mlp_skip[l, i] = self._mlp_skip[l, i]
        return ContributionArrays(self.kind, attn, skip, mlp, mlp_skip)


def contributions(model, trace, b: int = 0, n_pos: Optional[int] = None,
                  value_bias: str = "folded") -> ContributionArrays:
    """Every proportional contribution of batch row ``b``'s first ``n_pos`` positions (all by default)."""
    return Contributions(model, trace, b, n_pos, value_bias).arrays()


# --------------------------------------------------------------------------- the graph for one position
# Node ids (tuples, so they sort and hash): ("x", l, i) the stream entering layer l at position i (l = 0: the
# embeddings; l = L: the final stream, what the prediction is read from); ("mid", l, i) the stream after
# attention (sequential blocks only); ("head", l, h, i) head h of layer l at query i; ("mlp", l, i).


@dataclass(frozen=True)
class Edge:
    """One edge of the graph. ``weight`` is the share drawn; ``factor`` is what it multiplies a route's weight
    by (a head's or an MLP's outgoing edge repeats the share its incoming edges already counted: factor 1)."""

    src: tuple
    dst: tuple
    weight: float
    kind: str  # "skip" | "head_in" | "head_out" | "attn" (a token's heads summed) | "mlp_in" | "mlp_out"
    factor: float


@dataclass
class ContributionGraph:
    """The routes into one position's final stream whose every edge has a share above ``threshold``."""

    position: int
    threshold: float
    n_layer: int
    n_head: int
    kind: str
    nodes: list = field(default_factory=list)  # node ids, top (the output) first
    edges: list = field(default_factory=list)  # Edge
    heads: bool = True  # each head a node of its own; False: summed per token, LTT's graph (``token_graph``)

    @property
    def output(self) -> tuple:
        return ("x", self.n_layer, self.position)

    def sources(self) -> list[tuple]:
        """The input-token nodes (embeddings) the graph reaches."""
        return sorted(n for n in self.nodes if n[0] == "x" and n[1] == 0)


def _in_edges(c: Contributions, node: tuple) -> list[Edge]:
    """Every edge into ``node``, whatever its weight."""
    kind, H = c.kind, c.n_head
    if node[0] == "x" and node[1] == 0:
        return []
    if node[0] == "head":
        _, l, h, i = node
        row = c.attn(l, i)[:, h]
        return [Edge(("x", l, j), node, float(row[j]), "head_in", float(row[j])) for j in range(i + 1)]
    if node[0] == "mlp":
        _, l, i = node
        src = ("mid", l, i) if kind == "sequential" else ("x", l, i)
        return [Edge(src, node, c.mlp(l, i), "mlp_in", c.mlp(l, i))]
    _, l1, i = node  # ("x", l + 1, i) or ("mid", l, i)
    if node[0] == "x" and kind == "sequential":
        l = l1 - 1
        return [Edge(("mid", l, i), node, c.mlp_skip(l, i), "skip", c.mlp_skip(l, i)),
                Edge(("mlp", l, i), node, c.mlp(l, i), "mlp_out", 1.0)]
    l = l1 if node[0] == "mid" else l1 - 1
    per_head = c.attn(l, i).sum(0)
    out = [Edge(("x", l, i), node, c.attn_skip(l, i), "skip", c.attn_skip(l, i))]
    out += [Edge(("head", l, h, i), node, float(per_head[h]), "head_out", 1.0) for h in range(H)]
    if kind == "parallel":
        out.append(Edge(("mlp", l, i), node, c.mlp(l, i), "mlp_out", 1.0))
    return out


def _token_in_edges(c: Contributions, node: tuple) -> list[Edge]:
    """Every edge into ``node`` in the LLM Transparency Tool's graph: attention's edges go from each key's stream
    straight to the query's, summed over the heads; the query's own stream carries the skip's share plus its heads'
    shares of itself, one edge (as LTT's builder adds them)."""
    if node[0] == "mlp" or (node[0] == "x" and (node[1] == 0 or c.kind == "sequential")):
        return _in_edges(c, node)
    _, l1, i = node  # ("mid", l, i), or ("x", l + 1, i) after an attention-only or a parallel block
    l = l1 if node[0] == "mid" else l1 - 1
    per_key = c.attn(l, i).sum(1)
    out = [Edge(("x", l, j), node, float(per_key[j]), "attn", float(per_key[j])) for j in range(i)]
    own = float(per_key[i]) + c.attn_skip(l, i)
    out.append(Edge(("x", l, i), node, own, "skip", own))
    if c.kind == "parallel":
        out.append(Edge(("mlp", l, i), node, c.mlp(l, i), "mlp_out", 1.0))
    return out


def route_graph(c: Contributions, position: int, threshold: float = 0.04, heads: bool = True) -> ContributionGraph:
    """The graph of ``position``'s prediction: from its final stream down, every edge whose share is above
    ``threshold`` (0 ≤ threshold < 1) and the nodes it reaches. A head whose inputs are each below the threshold
    (it gathers a little from many tokens) stays in the graph as a node with no edge below it. ``heads=False``:
    the heads of a token summed, as the LLM Transparency Tool draws it (``token_graph``).

    Walks down a layer at a time, asking ``c`` for the shares of only the positions reached (at once, per layer)."""
    T = c.n_pos
    if not 0 <= int(position) < T:
        raise ValueError(f"position {position} is outside the text (0 to {T - 1})")
    if not 0.0 <= float(threshold) < 1.0:
        raise ValueError(f"the threshold is a share: at least 0 and below 1, not {threshold}")
    g = ContributionGraph(int(position), float(threshold), c.n_layer, c.n_head, c.kind, heads=bool(heads))
    in_edges = _in_edges if heads else _token_in_edges
    seen = {g.output}
    level = [g.output]  # the stream nodes entering layer l + 1 reached so far, top down
    for l in range(c.n_layer - 1, -1, -1):
        c.compute(l, [n[2] for n in level])
        todo = list(level)
        below: list[tuple] = []
        while todo:  # everything inside layer l, down to the streams entering it
            node = todo.pop()
            g.nodes.append(node)
            for e in in_edges(c, node):
                if e.weight > threshold:
                    g.edges.append(e)
                    if e.src not in seen:
                        seen.add(e.src)
                        (below if e.src[0] == "x" else todo).append(e.src)
        level = below
    g.nodes.extend(level)  # the input tokens reached
    return g


def token_graph(c: Contributions, position: int, threshold: float = 0.04) -> ContributionGraph:
    """The LLM Transparency Tool's graph of ``position``'s prediction (``build_paths_to_predictions`` on
    ``build_full_graph``): nodes are streams and MLPs, an attention edge is a key token's share summed over the
    heads, and the edges above ``threshold`` reached from the prediction going down."""
    return route_graph(c, position, threshold, heads=False)


def _depth(node: tuple) -> tuple:
    """Sort key from the bottom up: layer, then stage within it (stream in, heads, after attention, MLP)."""
    stage = {"x": 0, "head": 1, "mid": 2, "mlp": 3}[node[0]]
    return (node[1], stage)


def best_routes(g: ContributionGraph, k: int = 5) -> list[tuple[float, list[tuple]]]:
    """The ``k`` heaviest routes of the graph from an input token to the output, as (weight, nodes bottom-up).
    A route's weight is the product of the shares along it (``Edge.factor``): the part of the final stream that
    flows along that route if every sum split as its shares say."""
    into: dict[tuple, list[Edge]] = {}
    for e in g.edges:
        into.setdefault(e.dst, []).append(e)
    memo: dict[tuple, list[tuple[float, list[tuple]]]] = {}
    for node in sorted(set(g.nodes), key=_depth):  # every source before what it feeds
        if node[0] == "x" and node[1] == 0:
            memo[node] = [(1.0, [node])]
            continue
        cands = [(w * e.factor, path + [node]) for e in into.get(node, []) for w, path in memo.get(e.src, [])]
        memo[node] = sorted(cands, key=lambda wp: -wp[0])[:k]
    return memo.get(g.output, [])


def contribution_graph(model, trace, b: int = 0, position: int = -1, threshold: float = 0.04,
                       n_pos: Optional[int] = None, value_bias: str = "folded") -> ContributionGraph:
    """``route_graph(Contributions(model, trace, b, n_pos, value_bias), position, threshold)``; ``position=-1``:
    the last."""
    c = Contributions(model, trace, b, n_pos, value_bias)
    return route_graph(c, position % c.n_pos, threshold)
