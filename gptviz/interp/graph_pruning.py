"""Pruning an attribution graph to the nodes and edges that carry most of the influence on its target logits, as
circuit-tracer defines it (defaults: nodes 0.8, edges 0.98), and the graph's replacement and completeness scores.

- ``normalise(A)``: ``|A|`` with each row divided by its sum (at least 1e-10): each target's edges as shares.
- ``influence(Â, w)``: ``w Â + w Â² + ...`` (the graph has no cycles, so the series ends): how much of the logits'
  weight ``w`` (their probabilities) reaches each node along every path.
- ``threshold(scores, share)``: the score at which the scores, largest first, first add up to ``share`` of their
  total; everything at or above it is kept.
- ``prune(graph, node_threshold, edge_threshold)``: nodes kept by their influence (tokens and logits always), then
  edges kept by their share times their target's influence, then nodes left without a kept edge dropped until
  nothing changes.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .attribution_graph import AttributionGraph

NODE_THRESHOLD = 0.8
EDGE_THRESHOLD = 0.98
MAX_PATH_LENGTH = 1000


def normalise(A: torch.Tensor) -> torch.Tensor:
    a = A.abs()
    return a / a.sum(1, keepdim=True).clamp(min=1e-10)


def influence(norm: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """``sum over k >= 1 of weights @ norm^k``: row vectors pushed down the edges until nothing arrives."""
    arrived = weights @ norm
    total = arrived.clone()
    for _ in range(MAX_PATH_LENGTH):
        if not bool(arrived.any()):
            return total
        arrived = arrived @ norm
        total += arrived
    raise ValueError(f"influence still arriving after {MAX_PATH_LENGTH} steps: the graph has a cycle")


def threshold(scores: torch.Tensor, share: float) -> float:
    """The score at the first place where the sorted scores (largest first) reach ``share`` of their sum."""
    ordered = scores.flatten().double().sort(descending=True).values
    running = ordered.cumsum(0)
    if not float(running[-1]) > 0:  # nothing to share (no edges at all): keep everything
        return 0.0
    # in float64, and as a share of the running sum's own end, so that a share of 1 stops exactly at the last
    # nonzero score (circuit-tracer divides a float32 cumsum by a separately computed sum)
    cumulative = running / running[-1]
    at = int(torch.searchsorted(cumulative, torch.tensor([share], dtype=cumulative.dtype)))
    return float(ordered[min(at, ordered.numel() - 1)])


def logit_weights(graph: AttributionGraph) -> torch.Tensor:
    w = torch.zeros(graph.n_nodes)
    w[graph.n_nodes - graph.logit_ids.numel():] = graph.logit_probs
    return w


@dataclass
class Pruned:
    node_mask: torch.Tensor  # (N,) bool
    edge_mask: torch.Tensor  # (N, N) bool: [target, source]
    cumulative: torch.Tensor  # (N,) each node's place in the unpruned influence ranking, as a share (smaller: more)
    node_influence: torch.Tensor  # (N,)


def prune(graph: AttributionGraph, node_threshold: float = NODE_THRESHOLD,
          edge_threshold: float = EDGE_THRESHOLD) -> Pruned:
    for name, v in (("node_threshold", node_threshold), ("edge_threshold", edge_threshold)):
        if not 0.0 <= float(v) <= 1.0:
            raise ValueError(f"{name}={v!r} must be from 0 to 1")
    A = graph.adjacency
    N, K, T = graph.n_nodes, graph.logit_ids.numel(), graph.n_pos
    w = logit_weights(graph)
    node_infl = influence(normalise(A), w)
    node_mask = node_infl >= threshold(node_infl, node_threshold)
    node_mask[N - K - T:] = True  # tokens and logits are always kept
    kept = A * node_mask.unsqueeze(0) * node_mask.unsqueeze(1)
    norm = normalise(kept)
    target_infl = influence(norm, w) + w
    scores = norm * target_infl.unsqueeze(1)
    edge_mask = scores >= threshold(scores, edge_threshold)
    sources_end = graph.n_features + graph.n_layer * T  # features and errors may be dropped; tokens and logits not
    while True:
        edge_mask &= node_mask.unsqueeze(0) & node_mask.unsqueeze(1)
        before = node_mask.clone()
        node_mask[:sources_end] &= edge_mask[:, :sources_end].any(0)  # something reads it
        node_mask[:graph.n_features] &= edge_mask[:graph.n_features].any(1)  # a feature also needs an input
        if torch.equal(before, node_mask):
            break
    order = node_infl.sort(descending=True)
    cumulative = torch.empty(N)
    cumulative[order.indices] = order.values.cumsum(0) / order.values.sum().clamp(min=1e-30)
    return Pruned(node_mask=node_mask, edge_mask=edge_mask, cumulative=cumulative, node_influence=node_infl)


def scores(graph: AttributionGraph) -> dict[str, float]:
    """circuit-tracer's two scores of a graph: ``replacement`` (the share of the influence that reaches the tokens
    rather than the error nodes, along every path) and ``completeness`` (the share of each node's direct inputs that
    are not errors, weighted by its influence)."""
    norm = normalise(graph.adjacency)
    w = logit_weights(graph)
    infl = influence(norm, w)
    F, L, T = graph.n_features, graph.n_layer, graph.n_pos
    errors = slice(F, F + L * T)
    tokens = slice(F + L * T, F + (L + 1) * T)
    token_infl, error_infl = float(infl[tokens].sum()), float(infl[errors].sum())
    non_error = 1 - norm[:, errors].sum(1)
    weight = infl + w
    return {"replacement": token_infl / max(token_infl + error_infl, 1e-30),
            "completeness": float((non_error * weight).sum() / weight.sum().clamp(min=1e-30))}
