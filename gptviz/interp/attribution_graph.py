"""The attribution graph of one prompt (Ameisen et al. 2025, "Circuit Tracing"), as circuit-tracer defines it.

Nodes: every active transcoder feature (layer, position, feature), an error node per layer and position, a token
node per position, and the target logits at the last position. An edge is the direct linear effect of a source on
a target in the local replacement model (``replacement``: attention patterns and norm divisors frozen, MLPs replaced
by features plus errors):

    A[t, s] = sum over the layers L that s writes to of  u_s(L) · dq_t / dy_L[p_s]

- ``u_s(L)``: a feature's activation times its decoder to layer L's MLP output (a per-layer transcoder writes only
  its own layer, a cross-layer one every later layer too); an error node's error vector; a token's embedding;
- ``q_t``: a feature's encoder column dotted with its MLP input (no encoder bias, no activation function), or a
  target logit's unembedding minus the vocabulary's mean unembedding, read after the final norm at the last position.

The adjacency is ``(N, N)``, row = target, column = source, nodes in circuit-tracer's order: features sorted by
(layer, position, feature), errors layer by layer then position, tokens, logits (most probable first). Only feature
and logit rows hold edges.

Where gptviz differs from circuit-tracer: no BOS token is prepended and no position is zeroed (gptviz's models read
the prompt as typed); a token node's vector is its token embedding, and learned position vectors are constants like
biases, as circuit-tracer treats TransformerLens's ``hook_pos_embed``; the rows are computed by a hand-written
backward pass through the frozen model (``replacement.read_back``) rather than by autograd hooks. An attention-only
model is attributed without a transcoder (``tc=None``): tokens and logits, and error nodes that are all zero.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

import torch

from .replacement import Frozen, Weights, freeze, read_back, weights_of
from .transcoder import Transcoder

MAX_N_LOGITS = 10
DESIRED_LOGIT_PROB = 0.95
BATCH_SIZE = 512
UPDATE_INTERVAL = 4


@dataclass
class AttributionGraph:
    ids: torch.Tensor  # (T,) the prompt's token ids
    n_layer: int
    active_features: torch.Tensor  # (n_active, 3) long: layer, position, feature; sorted
    activations: torch.Tensor  # (n_active,)
    selected: torch.Tensor  # (F,) long: which active features are nodes (ascending)
    logit_ids: torch.Tensor  # (K,) long
    logit_probs: torch.Tensor  # (K,)
    adjacency: torch.Tensor  # (N, N): [target, source]
    meta: dict = field(default_factory=dict)
    _feature_nodes: list = field(init=False, repr=False, compare=False)  # node(i) for each feature, made once

    def __post_init__(self) -> None:
        rows = self.active_features[self.selected].tolist()
        acts = self.activations[self.selected].tolist()
        self._feature_nodes = [("feature", a, b, c, v) for (a, b, c), v in zip(rows, acts)]

    @property
    def n_pos(self) -> int:
        return int(self.ids.numel())

    @property
    def n_features(self) -> int:
        return int(self.selected.numel())

    @property
    def n_nodes(self) -> int:
        return int(self.adjacency.shape[0])

    def error_index(self, layer: int, pos: int) -> int:
        return self.n_features + layer * self.n_pos + pos

    def token_index(self, pos: int) -> int:
        return self.n_features + self.n_layer * self.n_pos + pos

    def logit_index(self, i: int) -> int:
        return self.n_features + (self.n_layer + 1) * self.n_pos + i

    def node(self, i: int) -> tuple:
        """What node ``i`` is: ("feature", layer, pos, feature, activation), ("error", layer, pos),
        ("token", pos, token_id) or ("logit", i, token_id, probability)."""
        F, T, L = self.n_features, self.n_pos, self.n_layer
        if not 0 <= i < self.n_nodes:
            raise ValueError(f"there is no node {i}: this graph has {self.n_nodes}")
        if i < F:
            return self._feature_nodes[i]
        if i < F + L * T:
            layer, pos = divmod(i - F, T)
            return ("error", layer, pos)
        if i < F + (L + 1) * T:
            pos = i - F - L * T
            return ("token", pos, int(self.ids[pos]))
        k = i - F - (L + 1) * T
        return ("logit", k, int(self.logit_ids[k]), float(self.logit_probs[k]))


def salient_logits(last_logits: torch.Tensor, max_n_logits: int = MAX_N_LOGITS,
                   desired_logit_prob: float = DESIRED_LOGIT_PROB) -> tuple[torch.Tensor, torch.Tensor]:
    """The most probable next tokens, most probable first, until their probabilities add up to at least
    ``desired_logit_prob`` (at most ``max_n_logits``): ``(ids, probabilities)``."""
    probs = torch.softmax(last_logits.double(), -1)
    top_p, top_i = probs.topk(min(max_n_logits, probs.numel()))
    cumulative = top_p.cumsum(0)
    reached = (cumulative >= desired_logit_prob).nonzero()
    cut = int(reached[0]) + 1 if reached.numel() else top_p.numel()
    return top_i[:cut], top_p[:cut].float()


class _Sources:
    """Every active feature, and per source layer its features laid out by position (padded) for the edges."""

    def __init__(self, frozen: Frozen):
        T = frozen.ids.numel()
        rows, values = [], []
        for layer, f in enumerate(frozen.features):
            pos, feat = (f != 0).nonzero(as_tuple=True)
            rows.append(torch.stack([torch.full_like(pos, layer), pos, feat], 1))
            values.append(f[pos, feat])
        self.table = torch.cat(rows) if rows else torch.zeros(0, 3, dtype=torch.long)  # (layer, pos, feat) sorted
        self.acts = torch.cat(values) if values else torch.zeros(0)
        self.by_layer = []  # per source layer: (columns (T, kmax), activations (T, kmax), features (T, kmax))
        start = 0
        for layer in range(len(frozen.features)):
            here = self.table[self.table[:, 0] == layer]
            n = here.shape[0]
            counts = torch.bincount(here[:, 1], minlength=T) if n else torch.zeros(T, dtype=torch.long)
            kmax = int(counts.max()) if n else 0
            cols = torch.full((T, kmax), -1, dtype=torch.long)
            acts = torch.zeros(T, kmax)
            feats = torch.zeros(T, kmax, dtype=torch.long)
            slot = torch.arange(n) - torch.repeat_interleave(torch.cumsum(counts, 0) - counts, counts)
            cols[here[:, 1], slot] = torch.arange(start, start + n)
            acts[here[:, 1], slot] = self.acts[start:start + n]
            feats[here[:, 1], slot] = here[:, 2]
            self.by_layer.append((cols, acts, feats))
            start += n


def _rows(frozen: Frozen, w: Weights, tc: Optional[Transcoder], src: _Sources, layer: int, seeds: torch.Tensor,
          positions: torch.Tensor) -> torch.Tensor:
    """The rows (n, n_active + (L + 1) T) of ``n`` targets reading the MLP input of ``layer`` (n_layer: the final
    norm): their direct effects from every active feature, every error node and every token. Only the positions up
    to the last target's are carried back (nothing later can reach a target)."""
    L, T = len(frozen.features), frozen.ids.numel()
    upto = int(positions.max()) + 1
    n_active = src.table.shape[0]
    grads = read_back(frozen, w, layer, seeds, positions, upto=upto)
    out = torch.zeros(seeds.shape[0], n_active + (L + 1) * T)
    for m in range(layer):  # errors written at MLP m
        first = n_active + m * T
        out[:, first:first + upto] = (grads[m + 1] * frozen.errors[m][:upto]).sum(-1)
    first = n_active + L * T
    out[:, first:first + upto] = (grads[0] * frozen.embed[:upto]).sum(-1)
    for source in range(layer):
        cols, acts, feats = src.by_layer[source]
        if cols.numel() == 0 or tc is None:
            continue
        cols, acts, feats = cols[:upto], acts[:upto], feats[:upto]
        block = torch.zeros(seeds.shape[0], upto, cols.shape[1])
        last = min(layer, source + tc.reach(source))  # the MLP outputs this layer's features write, before the target
        for m in range(source, last):
            dec = tc.W_dec[source][:, m - source][feats] * acts.unsqueeze(-1)  # (upto, kmax, d)
            block += (grads[m + 1].transpose(0, 1) @ dec.transpose(1, 2)).transpose(0, 1)  # (n, upto, kmax)
        keep = cols >= 0
        out[:, cols[keep]] = block[:, keep]
    return out


def _partial_influence(rows: torch.Tensor, row_nodes: torch.Tensor, logit_rows: int,
                       logit_probs: torch.Tensor, n_cols: int, steps: int = 128) -> torch.Tensor:
    """circuit-tracer's estimate of each column's influence on the logits from the rows built so far: the rows
    |.|-normalised (row sums clamped at 1e-8), influence pushed from the logits' probabilities down the rows, each
    step's arrival summed (the logits' own weights not counted). ``row_nodes[r]`` is the column of the node whose row
    ``r`` is (-1 for a logit)."""
    norm = rows.abs()
    norm = norm / norm.sum(1, keepdim=True).clamp(min=1e-8)
    weight = torch.zeros(rows.shape[0])
    weight[:logit_rows] = logit_probs
    total = torch.zeros(n_cols)
    has_row = row_nodes >= 0
    for _ in range(steps):
        arrived = weight @ norm  # (n_cols,)
        if not bool(arrived.any()):
            break
        total += arrived
        weight = torch.zeros(rows.shape[0])
        weight[has_row] = arrived[row_nodes[has_row]]
    return total


def attribute(model, tc: Optional[Transcoder], ids, logit_ids: Optional[Sequence[int]] = None,
              max_n_logits: int = MAX_N_LOGITS, desired_logit_prob: float = DESIRED_LOGIT_PROB,
              max_feature_nodes: Optional[int] = None, batch_size: int = BATCH_SIZE,
              update_interval: int = UPDATE_INTERVAL) -> AttributionGraph:
    """The attribution graph of the prompt ``ids`` for the target logits ``logit_ids`` at its last position (default:
    the most probable, see ``salient_logits``). ``max_feature_nodes``: when fewer than the active features, only
    that many get rows, chosen in rounds by their estimated influence on the logits, as circuit-tracer does; the
    others are left out of the graph (their effect is not moved to the error nodes). ``tc=None``: an
    attention-only model, whose graph has no features."""
    with torch.no_grad():  # a block, not a decorator: mutmut 3.8 mutates no decorated function
        return _attribute(model, tc, ids, logit_ids, max_n_logits, desired_logit_prob, max_feature_nodes, batch_size,
                          update_interval)


def _attribute(model, tc, ids, logit_ids, max_n_logits, desired_logit_prob, max_feature_nodes, batch_size,
               update_interval) -> AttributionGraph:
    frozen = freeze(model, tc, ids)
    w = weights_of(model)
    L, T = len(frozen.features), frozen.ids.numel()
    last = frozen.logits[-1]
    if logit_ids is None:
        t_ids, t_probs = salient_logits(last, max_n_logits, desired_logit_prob)
    else:
        t_ids = torch.as_tensor(list(logit_ids), dtype=torch.long)
        if t_ids.numel() == 0 or bool(((t_ids < 0) | (t_ids >= last.numel())).any()):
            raise ValueError(f"target logits must be token ids from 0 to {last.numel() - 1}")
        t_probs = torch.softmax(last.double(), -1)[t_ids].float()
    src = _Sources(frozen)
    n_active = src.table.shape[0]
    W_U = model.lm_head.weight.detach().float()
    seeds = W_U[t_ids] - W_U.mean(0)
    logit_rows = _rows(frozen, w, tc, src, L, seeds, torch.full((t_ids.numel(),), T - 1))

    budget = n_active if max_feature_nodes is None else max(0, min(int(max_feature_nodes), n_active))
    feature_rows = torch.zeros(budget, logit_rows.shape[1])  # in the order the features are visited
    slot_of = torch.full((n_active,), -1, dtype=torch.long)
    visited = torch.zeros(n_active, dtype=torch.bool)

    def visit(which: torch.Tensor) -> None:
        which = which.sort().values  # by layer, then position: each batch carries as few positions as it can
        for i in range(0, which.numel(), batch_size):
            chunk = which[i:i + batch_size]
            for layer in sorted(set(src.table[chunk, 0].tolist())):
                part = chunk[src.table[chunk, 0] == layer]
                feats, pos = src.table[part, 2], src.table[part, 1]
                start = int(visited.sum())
                slot_of[part] = torch.arange(start, start + part.numel())
                assert tc is not None  # features exist only with a transcoder
                feature_rows[start:start + part.numel()] = _rows(frozen, w, tc, src, layer,
                                                                 tc.W_enc[layer].detach().T[feats], pos)
                visited[part] = True

    if budget >= n_active:
        visit(torch.arange(n_active))
    else:
        while int(visited.sum()) < budget:
            done = visited.nonzero(as_tuple=True)[0]
            rows = torch.cat([logit_rows, feature_rows[slot_of[done]]])
            row_nodes = torch.cat([torch.full((t_ids.numel(),), -1, dtype=torch.long), done])
            influence = _partial_influence(rows, row_nodes, t_ids.numel(), t_probs, rows.shape[1])[:n_active]
            influence[visited] = float("-inf")
            take = min(update_interval * batch_size, budget - int(visited.sum()))
            visit(influence.topk(take).indices)
    selected = visited.nonzero(as_tuple=True)[0]
    keep_cols = torch.cat([selected, torch.arange(n_active, n_active + (L + 1) * T)])
    F, K = selected.numel(), t_ids.numel()
    N = F + (L + 1) * T + K
    adjacency = torch.zeros(N, N)
    adjacency[:F, :F + (L + 1) * T] = feature_rows[slot_of[selected]][:, keep_cols]
    adjacency[N - K:, :F + (L + 1) * T] = logit_rows[:, keep_cols]
    return AttributionGraph(ids=frozen.ids.clone(), n_layer=L, active_features=src.table, activations=src.acts,
                            selected=selected, logit_ids=t_ids, logit_probs=t_probs, adjacency=adjacency,
                            meta={"max_feature_nodes": max_feature_nodes, "n_active": n_active})
