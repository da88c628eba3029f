"""A mixture of experts, the MLP sublayer of Mixtral, OLMoE, Qwen2-MoE, GPT-OSS and gptviz's own MoE GPT, every step
hooked: the router's logits and probabilities, the weight each token gives each expert (zero for the experts it
does not go to), each chosen expert's output, the shared expert, and their weighted sum (the block's ``mlp_out``).

Shapes: B batch, T positions, C n_embd, E experts, d d_expert. ``gptviz.config_moe`` says what each config field
means.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..config import ModelConfig
from ..config_moe import GLU_OSS
from .hook_points import HookPoint, Recorder
from .layers import MLP, Linear, activate, gated_unit


class ExpertLinear(nn.Module):
    """E linear maps side by side: ``weight`` (E, out, in), ``bias`` (E, out) or None. ``forward(x, e)`` is expert
    e's map of the rows x (N, in) -> (N, out)."""

    def __init__(self, n_expert: int, d_in: int, d_out: int, bias: bool):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_expert, d_out, d_in))
        self.bias = nn.Parameter(torch.empty(n_expert, d_out)) if bias else None

    def forward(self, x: torch.Tensor, e: int) -> torch.Tensor:
        return F.linear(x, self.weight[e], None if self.bias is None else self.bias[e])


class MixtureOfExperts(nn.Module):
    """The router (``router``: C -> E logits), the experts (``c_gate`` when gated, ``c_fc``, ``c_proj``: each an
    ``ExpertLinear``), and Qwen2-MoE's shared expert (``shared``, an MLP, and ``shared_gate``: C -> 1).

    Each token goes to the ``n_expert_active`` experts of highest router probability (``torch.topk``, ties to the
    lower index, as transformers); only those experts run on it."""

    def __init__(self, config: ModelConfig, layer: int):
        super().__init__()
        p = f"blocks.{layer}.mlp."
        self.config = config
        E, C, d = config.n_expert, config.n_embd, config.d_expert
        self.gated = config.gated_mlp or config.activation == GLU_OSS
        self.router = Linear(C, E, bias=config.router_bias)
        if self.gated:
            self.c_gate = ExpertLinear(E, C, d, config.expert_bias)
        self.c_fc = ExpertLinear(E, C, d, config.expert_bias)
        self.c_proj = ExpertLinear(E, d, C, config.expert_bias)
        if config.d_shared_expert:
            self.shared = MLP(config.replace(d_mlp=config.d_shared_expert, bias=False, gated_mlp=True), layer,
                              prefix=p + "shared")
            self.shared_gate = Linear(C, 1, bias=False)
            self.hook_shared_gate = HookPoint(p + "hook_shared_gate")  # (B, T, 1)
            self.hook_shared_out = HookPoint(p + "hook_shared_out")  # (B, T, C)
        self.hook_router_logits = HookPoint(p + "hook_router_logits")  # (B, T, E)
        self.hook_router_probs = HookPoint(p + "hook_router_probs")  # (B, T, E)
        self.hook_expert_weights = HookPoint(p + "hook_expert_weights")  # (B, T, E)
        self.hook_expert_out = HookPoint(p + "hook_expert_out")  # (B, T, E, C)
        self.aux_loss: Optional[torch.Tensor] = None  # set by a training forward pass: that batch's balancing loss

    def expert(self, x: torch.Tensor, e: int) -> torch.Tensor:
        """Expert ``e`` on the rows x (N, C) -> (N, C)."""
        u = self.c_fc(x, e)  # (N, d)
        h = gated_unit(self.c_gate(x, e), u, self.config) if self.gated else activate(u, self.config.activation)
        return self.c_proj(h, e)  # (N, C)

    def forward(self, x: torch.Tensor, rec: Recorder = None, train: bool = False) -> torch.Tensor:
        cfg = self.config
        B, T, C = x.shape
        E, k = cfg.n_expert, cfg.n_expert_active
        logits = self.hook_router_logits(self.router(x), rec)  # (B, T, E)
        probs = self.hook_router_probs(F.softmax(logits, dim=-1), rec)  # (B, T, E)
        top, chosen = probs.topk(k, dim=-1)  # (B, T, k) each: the k largest probabilities and their experts
        if cfg.expert_renorm:
            top = top / top.sum(dim=-1, keepdim=True)
        weights = torch.zeros_like(probs).scatter(-1, chosen, top)  # (B, T, E): 0 for an expert not chosen
        weights = self.hook_expert_weights(weights, rec)  # (B, T, E)
        flat, picked = x.reshape(B * T, C), chosen.reshape(B * T, k)
        out = x.new_zeros(B * T, E, C)
        for e in range(E):
            rows = (picked == e).any(dim=-1).nonzero().flatten()  # the tokens routed to expert e
            if len(rows):
                out[rows, e] = self.expert(flat[rows], e)
        out = self.hook_expert_out(out.view(B, T, E, C), rec)  # (B, T, E, C): 0 where the expert was not chosen
        y = (weights[..., None] * out).sum(dim=-2)  # (B, T, C)
        if train:
            self.aux_loss = load_balance_loss(probs, chosen, E)
        if cfg.d_shared_expert:
            gate = self.hook_shared_gate(torch.sigmoid(self.shared_gate(x)), rec)  # (B, T, 1)
            y = y + self.hook_shared_out(gate * self.shared(x), rec)  # (B, T, C); its own steps are not recorded
        return y  # (B, T, C)


def load_balance_loss(probs: torch.Tensor, chosen: torch.Tensor, n_expert: int) -> torch.Tensor:
    """The Switch Transformer's load-balancing loss, as Mixtral trains with it: ``E · Σ_e f_e · P_e``, where f_e is
    the share of (token, choice) pairs routed to expert e and P_e its mean router probability. 1 when the load is
    even; it grows as the router favours a few experts."""
    f = F.one_hot(chosen, n_expert).float().mean(dim=(0, 1, 2))  # (E,)
    P = probs.reshape(-1, n_expert).mean(dim=0)  # (E,)
    return n_expert * (f * P).sum()
