"""The layers GPT and the encoder-decoder model share: positional tables, Norm, the multi-head attention
core, the MLP and the residual ``sublayer``, every intermediate passed through a HookPoint.

Attention is written out step by step (no fused kernel) so every intermediate exists. Shape comments use
B batch, T positions, S key positions (T again for self-attention, the source's for cross-attention),
C n_embd, nh heads, hs d_head, d_mlp. In an encoder block every position is a source position: there T is
the source length too.
"""
from __future__ import annotations

import math
from contextvars import ContextVar
from typing import Callable, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..config import ModelConfig
from ..config_moe import GLU_OSS
from .hook_points import HookPoint, Recorder


# --------------------------------------------------------------------------- positional tables
def sinusoidal_table(n_pos: int, d: int) -> torch.Tensor:
    """PE[t, 2i] = sin(t / 10000^(2i/d)), PE[t, 2i+1] = cos(t / 10000^(2i/d)).  Shape (n_pos, d)."""
    pos = torch.arange(n_pos, dtype=torch.float64)[:, None]
    two_i = torch.arange(0, d, 2, dtype=torch.float64)
    angle = pos / torch.pow(10000.0, two_i / d)  # (n_pos, ceil(d/2))
    table = torch.zeros(n_pos, d, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angle)
    table[:, 1::2] = torch.cos(angle[:, : d // 2])
    return table.float()


def rope_angles(n_pos: int, d_head: int, base: float = 10000.0) -> torch.Tensor:
    """Rotary angles θ[t, i] = t · base^(-2i/d_head) for i < d_head/2.  Shape (n_pos, d_head/2)."""
    inv_freq = torch.pow(base, -torch.arange(0, d_head, 2, dtype=torch.float64) / d_head)
    return (torch.arange(n_pos, dtype=torch.float64)[:, None] * inv_freq[None, :]).float()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (x[i], x[i + r/2]) by angle θ[t, i] (the GPT-NeoX / Hugging Face LLaMA layout), where r, twice
    the tables' width, is the number of dimensions turned: the first r of each head (all of them unless the model
    turns only a fraction, ``rotary_pct``); the rest pass through.

    x: (B, T, nh, hs); cos, sin: (T, r/2).
    """
    rot = 2 * cos.shape[-1]
    if rot < x.shape[-1]:  # partial rotary (Pythia): turn the first rot dimensions, keep the others
        return torch.cat([apply_rope(x[..., :rot], cos, sin), x[..., rot:]], dim=-1)
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


def train_dropout(x: torch.Tensor, p: float, train: bool) -> torch.Tensor:
    """Dropout with probability ``p`` while training, and ``x`` itself otherwise."""
    return F.dropout(x, p, training=True) if train and p > 0 else x


# --------------------------------------------------------------------------- modules

# Set for one thread's model run by a trace that works out weight-gradient norms (gptviz.run.weight_norms): every
# Linear passes it (module, input, output). A ContextVar, so threads running one shared model never see each other's.
LINEAR_TAP: ContextVar[Optional[Callable[[nn.Module, torch.Tensor, torch.Tensor], None]]] = \
    ContextVar("gptviz_linear_tap", default=None)


class Linear(nn.Linear):
    """``nn.Linear`` without torch's own first draw of its weights: every model here is built on the meta device and
    then drawn from its config's seed (``TransformerBase.reset_parameters``), so that draw was thrown away. Built on
    a real device it is uninitialised (``torch.empty``). Its output is shown to ``LINEAR_TAP`` when one is set."""

    def reset_parameters(self) -> None:
        pass

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        out = F.linear(input, self.weight, self.bias)
        tap = LINEAR_TAP.get()
        if tap is not None:
            tap(self, input, out)
        return out


class Embedding(nn.Embedding):
    """``nn.Embedding`` without torch's own first draw, as ``Linear``. On the meta device that draw (``normal_``) runs
    a Python decomposition that imports ``torch._dynamo``: 2.7 s of CPU in each new process (a server's first model,
    each CLI run), measured 2026-11-27 on this 2-core machine."""

    def reset_parameters(self) -> None:
        pass


class Norm(nn.Module):
    """LayerNorm or RMSNorm, written out so its divisor and its normalised input can be recorded."""

    def __init__(self, config: ModelConfig, hook_prefix: str):
        super().__init__()
        self.kind = config.norm
        self.eps = config.ln_eps
        self.weight = nn.Parameter(torch.ones(config.n_embd))
        self.bias = nn.Parameter(torch.zeros(config.n_embd)) if config.bias else None
        self.hook_scale = HookPoint(f"{hook_prefix}.hook_scale")  # (B, T, 1)
        self.hook_normalized = HookPoint(f"{hook_prefix}.hook_normalized")  # (B, T, C)
        self.hook_out = HookPoint(f"{hook_prefix}.hook_out")  # (B, T, C)

    def forward(self, x: torch.Tensor, rec: Recorder = None) -> torch.Tensor:
        if self.kind == "layernorm":
            x = x - x.mean(dim=-1, keepdim=True)
        scale = self.hook_scale((x.pow(2).mean(dim=-1, keepdim=True) + self.eps).sqrt(), rec)  # (B, T, 1)
        x = self.hook_normalized(x / scale, rec)  # (B, T, C)
        x = x * self.weight
        if self.bias is not None:
            x = x + self.bias
        return self.hook_out(x, rec)  # (B, T, C)


class HeadNorm(nn.Module):
    """QK-norm's RMSNorm (Qwen3): each head's vector (the last axis, ``d_head`` wide) divided by its root mean square,
    times a learned gain ``weight`` shared by every head; no shift. Its output is hooked by the attention."""

    def __init__(self, d_head: int, eps: float):  # OLMo 2's (qk_norm_full): d_head is the whole projection's width
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_head))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x / (x.pow(2).mean(dim=-1, keepdim=True) + self.eps).sqrt() * self.weight  # (..., hs)


class HeadsAttention(nn.Module):
    """Multi-head attention from per-position queries, keys and values, every step hooked.

    The shared core of every attention here: GPT's causal self-attention (``gptviz.model.gpt``) and the
    encoder-decoder model's self- and cross-attention (``gptviz.model.encoder_decoder``). Queries may come from
    one sequence (T positions) and keys and values from another (S positions); ``mask`` says which keys each
    query may see.

    ``rope``: rotate queries and keys. ``fused_qkv``: declare ``hook_qkv`` (GPT's one projection to q, k and v,
    hooked by the subclass). ``declare_rot``: declare ``hook_rot_q`` and ``hook_rot_k`` (GPT has them whatever
    its positions; the encoder-decoder model only where it rotates). ``grouped``: keys and values have
    ``config.n_kv_head`` heads (grouped-query attention), each repeated for the query heads it serves, a step of
    its own (``hook_k_rep``, ``hook_v_rep``) when there are fewer key/value heads than query heads. With
    ``config.qk_norm`` each head's queries and keys go through their own ``HeadNorm`` (``q_norm``, ``k_norm``) before
    they are rotated, steps of their own (``hook_q_normed``, ``hook_k_normed``); with ``config.qk_norm_full`` (OLMo 2)
    the norm is over all of a position's queries (keys) at once, and its output is recorded split into heads. The
    scores are divided by √``config.attn_scale_dim`` (√d_head unless set) and, with ``config.attn_softcap``,
    soft-capped before the mask (``hook_scores_capped``).
    """

    def __init__(self, config: ModelConfig, prefix: str, *, rope: bool, fused_qkv: bool, declare_rot: bool,
                 grouped: bool = False):
        super().__init__()
        self.n_head, self.d_head = config.n_head, config.d_head
        self.n_kv_head = config.n_kv_head if grouped else config.n_head
        self.d_attn = config.d_attn
        self.rope = rope
        self.qk_norm = config.qk_norm
        self.dropout = config.dropout
        if fused_qkv:
            self.hook_qkv = HookPoint(prefix + "hook_qkv")  # (B, T, 3*nh*hs)
        self.hook_q = HookPoint(prefix + "hook_q")  # (B, T, nh, hs)
        self.hook_k = HookPoint(prefix + "hook_k")  # (B, S, nkv, hs)
        self.hook_v = HookPoint(prefix + "hook_v")  # (B, S, nkv, hs)
        self.qk_norm_full = config.qk_norm_full
        self.scale_dim = config.attn_scale_dim  # None: √d_head; Gemma: √query_pre_attn_scalar
        self.softcap = config.attn_softcap
        if self.qk_norm:
            q_width, k_width = (self.n_head * self.d_head, self.n_kv_head * self.d_head) if self.qk_norm_full else \
                (config.d_head, config.d_head)
            self.q_norm, self.k_norm = HeadNorm(q_width, config.ln_eps), HeadNorm(k_width, config.ln_eps)
            self.hook_q_normed = HookPoint(prefix + "hook_q_normed")  # (B, T, nh, hs)
            self.hook_k_normed = HookPoint(prefix + "hook_k_normed")  # (B, S, nkv, hs)
        if declare_rot:
            self.hook_rot_q = HookPoint(prefix + "hook_rot_q")  # (B, T, nh, hs)
            self.hook_rot_k = HookPoint(prefix + "hook_rot_k")  # (B, S, nkv, hs)
        if self.n_kv_head != self.n_head:
            self.hook_k_rep = HookPoint(prefix + "hook_k_rep")  # (B, S, nh, hs)
            self.hook_v_rep = HookPoint(prefix + "hook_v_rep")  # (B, S, nh, hs)
        if config.attn_sinks:  # GPT-OSS: one learned logit per head, a key with no value that every query sees
            self.sinks = nn.Parameter(torch.zeros(config.n_head))
            self.hook_sink = HookPoint(prefix + "hook_sink")  # (B, nh, T, 1)
        self.hook_scores_raw = HookPoint(prefix + "hook_scores_raw")  # (B, nh, T, S)
        self.hook_scores_scaled = HookPoint(prefix + "hook_scores_scaled")  # (B, nh, T, S)
        if self.softcap is not None:
            self.hook_scores_capped = HookPoint(prefix + "hook_scores_capped")  # (B, nh, T, S)
        self.hook_attn_scores = HookPoint(prefix + "hook_attn_scores")  # (B, nh, T, S)
        self.hook_pattern = HookPoint(prefix + "hook_pattern")  # (B, nh, T, S)
        self.hook_z = HookPoint(prefix + "hook_z")  # (B, T, nh, hs)

    def attend(self, q, k, v, mask, rope_cs, rec: Recorder = None, train: bool = False):
        """q: (B, T, nh*hs); k, v: (B, S, nkv*hs)  ->  z: (B, T, nh, hs).

        mask = (allowed, dead): allowed (1|B, 1, 1|T, S), the keys each query may see; dead, the query rows
        that may see none, or None."""
        allowed, dead = mask
        B, T, S = q.shape[0], q.shape[1], k.shape[1]
        nh, nkv, hs = self.n_head, self.n_kv_head, self.d_head
        q = self.hook_q(q.view(B, T, nh, hs), rec)  # (B, T, nh, hs)
        k = self.hook_k(k.view(B, S, nkv, hs), rec)  # (B, S, nkv, hs)
        v = self.hook_v(v.view(B, S, nkv, hs), rec)  # (B, S, nkv, hs)
        if self.qk_norm and self.qk_norm_full:  # OLMo 2: all of a position's queries (keys) at once, then the heads
            q = self.hook_q_normed(self.q_norm(q.reshape(B, T, nh * hs)).view(B, T, nh, hs), rec)  # (B, T, nh, hs)
            k = self.hook_k_normed(self.k_norm(k.reshape(B, S, nkv * hs)).view(B, S, nkv, hs), rec)  # (B, S, nkv, hs)
        elif self.qk_norm:  # QK-norm: each head's query and key scaled to unit RMS, times a learned gain
            q = self.hook_q_normed(self.q_norm(q), rec)  # (B, T, nh, hs)
            k = self.hook_k_normed(self.k_norm(k), rec)  # (B, S, nkv, hs)
        if self.rope:
            cos, sin = rope_cs
            q = self.hook_rot_q(apply_rope(q, cos, sin), rec)  # (B, T, nh, hs)
            k = self.hook_rot_k(apply_rope(k, cos, sin), rec)  # (B, S, nkv, hs)
        if nkv != nh:  # grouped-query attention: query head h reads key/value head h // (nh / nkv)
            k = self.hook_k_rep(k.repeat_interleave(nh // nkv, dim=2), rec)  # (B, S, nh, hs)
            v = self.hook_v_rep(v.repeat_interleave(nh // nkv, dim=2), rec)  # (B, S, nh, hs)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # (B, nh, T|S, hs)
        att = self.hook_scores_raw(q @ k.transpose(-2, -1), rec)  # (B, nh, T, S)
        att = self.hook_scores_scaled(att / math.sqrt(self.scale_dim or hs), rec)  # (B, nh, T, S)
        if self.softcap is not None:  # soft-capping (Gemma 2): c · tanh(s / c), every score within ±c
            att = self.hook_scores_capped(torch.tanh(att / self.softcap) * self.softcap, rec)  # (B, nh, T, S)
        att = self.hook_attn_scores(att.masked_fill(~allowed, float("-inf")), rec)  # (B, nh, T, S)
        if hasattr(self, "sinks"):  # the sink is one more column in the softmax, dropped after it
            sink = self.sinks.view(1, nh, 1, 1).expand(B, nh, T, 1)
            att = F.softmax(torch.cat([att, sink], dim=-1), dim=-1)  # (B, nh, T, S + 1)
            self.hook_sink(att[..., -1:], rec)  # (B, nh, T, 1): the weight the sink takes, 1 - the row's sum
            att = att[..., :-1]
        elif dead is None:
            att = F.softmax(att, dim=-1)
        else:  # a row with every key masked would be 0/0: give it all zeros instead of NaN
            att = F.softmax(att.masked_fill(dead, 0.0), dim=-1).masked_fill(~allowed, 0.0)
        att = self.hook_pattern(att, rec)  # (B, nh, T, S)
        if train and self.dropout > 0:
            att = F.dropout(att, self.dropout, training=True)
        return self.hook_z((att @ v).transpose(1, 2), rec)  # (B, T, nh, hs)


def activate(h: torch.Tensor, activation: str) -> torch.Tensor:
    """The MLP's activation function, by its config name."""
    if activation == "gelu":
        return F.gelu(h)
    if activation == "gelu_tanh":
        return F.gelu(h, approximate="tanh")
    if activation == "tanh":
        return torch.tanh(h)
    if activation == "silu":
        return F.silu(h)
    return F.relu(h)


def gated_unit(g: torch.Tensor, u: torch.Tensor, config: ModelConfig) -> torch.Tensor:
    """A gated MLP's hidden activations from its gate ``g`` and its other projection ``u``: ``act(g) · u``, or
    GPT-OSS's clamped unit ``(clamp(u, -limit, limit) + 1) · g'·σ(α·g')`` with ``g' = min(g, limit)``."""
    if config.activation == GLU_OSS:
        g = g.clamp(max=config.swiglu_limit)
        return (u.clamp(-config.swiglu_limit, config.swiglu_limit) + 1) * (g * torch.sigmoid(g * config.swiglu_alpha))
    return activate(g, config.activation) * u


class MLP(nn.Module):
    """The feed-forward sublayer: C -> d_mlp, the activation, d_mlp -> C; hooked before and after the activation.

    Gated (``config.gated_mlp``, Llama's SwiGLU): two projections C -> d_mlp, the gate ``c_gate`` (through the
    activation) and ``c_fc``, multiplied, then d_mlp -> C. Hooked as in TransformerLens: ``hook_pre`` the gate
    before the activation, ``hook_pre_linear`` the other projection, ``hook_post`` their product."""

    def __init__(self, config: ModelConfig, layer: int, prefix: Optional[str] = None):
        super().__init__()
        p = prefix or f"blocks.{layer}.mlp"
        self.activation = config.activation
        self.config = config
        self.gated = config.gated_mlp
        if self.gated:
            self.c_gate = Linear(config.n_embd, config.d_mlp, bias=config.bias)
            self.hook_pre_linear = HookPoint(f"{p}.hook_pre_linear")  # (B, T, d_mlp)
        self.c_fc = Linear(config.n_embd, config.d_mlp, bias=config.bias)
        self.c_proj = Linear(config.d_mlp, config.n_embd, bias=config.bias)
        self.hook_pre = HookPoint(f"{p}.hook_pre")  # (B, T, d_mlp)
        self.hook_post = HookPoint(f"{p}.hook_post")  # (B, T, d_mlp)

    def forward(self, x, rec: Recorder = None):
        if self.gated:
            g = self.hook_pre(self.c_gate(x), rec)  # (B, T, d_mlp)
            u = self.hook_pre_linear(self.c_fc(x), rec)  # (B, T, d_mlp)
            h = self.hook_post(gated_unit(g, u, self.config), rec)  # (B, T, d_mlp)
            return self.c_proj(h)  # (B, T, C)
        h = self.hook_pre(self.c_fc(x), rec)  # (B, T, d_mlp)
        h = self.hook_post(activate(h, self.activation), rec)  # (B, T, d_mlp)
        return self.c_proj(h)  # (B, T, C)


def sublayer(block, x, f, norm, hook_out, hook_resid, rec: Recorder = None, train: bool = False, post=None):
    """One sublayer ``f`` (attention or MLP) of ``block`` with its residual connection and norm, hooked as
    ``hook_out`` (f's output, after dropout) and ``hook_resid`` (the stream after the add).

    Pre-norm (GPT-2): ``x + f(norm(x))``. Post-norm (the 2017 Transformer): ``norm(x + f(x))``. ``block`` gives
    ``pre_norm`` and ``dropout``. ``post``, a norm of f's output before the add: Gemma 2 and 3's
    ``x + post(f(norm(x)))``, and OLMo 2's ``x + post(f(x))`` (``norm`` None: no norm before)."""
    p = block.dropout
    h = norm(x, rec) if block.pre_norm and norm is not None else x
    out = f(h)
    if post is not None:
        out = post(out, rec)  # (B, T, C)
    if train and p > 0:
        out = F.dropout(out, p, training=True)
    out = hook_out(out, rec)  # (B, T, C)
    return hook_resid(x + out, rec) if block.pre_norm else hook_resid(norm(x + out, rec), rec)  # (B, T, C)
