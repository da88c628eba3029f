"""A small, configurable GPT whose every step can be recorded.

Module names follow GPT-2 / nanoGPT (``transformer.wte``, ``transformer.h.0.attn.c_attn`` …), so
weights map across by name. Each intermediate tensor passes through a ``HookPoint`` named as in
TransformerLens (``blocks.0.attn.hook_pattern`` …).

A HookPoint holds no state. The forward pass takes an optional recorder, a plain callable
``rec(name, tensor) -> tensor`` that lives only for one call. Without one, a hook point returns its
input untouched, so the plain forward and a traced forward run exactly the same operations; that is
why a trace's logits are bit-identical to ``model(idx)[0]``, and why many threads can trace one
shared model at once.

Attention is written out step by step (no fused kernel) so every intermediate exists.
"""
from __future__ import annotations

import math
from typing import Callable, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..config import ModelConfig

Recorder = Optional[Callable[[str, torch.Tensor], torch.Tensor]]


class HookPoint(nn.Module):
    """An identity with a name. Given a recorder, it shows the tensor to it and passes on its answer."""

    def __init__(self, name: str):
        super().__init__()
        self.name = name

    def forward(self, x: torch.Tensor, rec: Recorder = None) -> torch.Tensor:
        return x if rec is None else rec(self.name, x)

    def extra_repr(self) -> str:
        return repr(self.name)


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
    """Rotate pairs (x[i], x[i + d/2]) by angle θ[t, i] (the GPT-NeoX / Hugging Face LLaMA layout).

    x: (B, T, nh, hs); cos, sin: (T, hs/2).
    """
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


# --------------------------------------------------------------------------- modules
class Norm(nn.Module):
    """LayerNorm or RMSNorm, written out so its divisor and its normalised input can be recorded."""

    def __init__(self, config: ModelConfig, hook_prefix: str):
        super().__init__()
        self.kind = config.norm
        self.eps = config.ln_eps
        self.weight = nn.Parameter(torch.ones(config.n_embd))
        self.bias = nn.Parameter(torch.zeros(config.n_embd)) if config.bias else None
        self.hook_scale = HookPoint(f"{hook_prefix}.hook_scale")
        self.hook_normalized = HookPoint(f"{hook_prefix}.hook_normalized")
        self.hook_out = HookPoint(f"{hook_prefix}.hook_out")

    def forward(self, x: torch.Tensor, rec: Recorder = None) -> torch.Tensor:
        if self.kind == "layernorm":
            x = x - x.mean(dim=-1, keepdim=True)
        scale = self.hook_scale((x.pow(2).mean(dim=-1, keepdim=True) + self.eps).sqrt(), rec)  # (B, T, 1)
        x = self.hook_normalized(x / scale, rec)  # (B, T, C)
        x = x * self.weight
        if self.bias is not None:
            x = x + self.bias
        return self.hook_out(x, rec)


class HeadsAttention(nn.Module):
    """Multi-head attention from per-position queries, keys and values, every step hooked.

    The shared core of every attention here: GPT's causal self-attention (below) and the encoder-decoder
    model's self- and cross-attention (``gptviz.model.encoder_decoder``). Queries may come from one sequence (T
    positions) and keys and values from another (S positions); ``mask`` says which keys each query may see.
    """

    STEPS = ("q", "k", "v", "rot_q", "rot_k", "scores_raw", "scores_scaled", "attn_scores", "pattern", "z")

    def __init__(self, config: ModelConfig, prefix: str, steps: tuple = STEPS):
        super().__init__()
        self.n_head, self.d_head = config.n_head, config.d_head
        self.d_attn = config.d_attn
        self.rope = config.pos_encoding == "rope"
        self.dropout = config.dropout
        for name in steps:
            setattr(self, f"hook_{name}", HookPoint(prefix + f"hook_{name}"))

    def attend(self, q, k, v, mask, rope_cs, rec: Recorder = None, train: bool = False):
        """q: (B, T, nh*hs); k, v: (B, S, nh*hs)  ->  z: (B, T, nh, hs).

        mask = (allowed, dead): allowed (1|B, 1, 1|T, S), the keys each query may see; dead, the query rows
        that may see none, or None."""
        allowed, dead = mask
        B, T, S = q.shape[0], q.shape[1], k.shape[1]
        nh, hs = self.n_head, self.d_head
        q = self.hook_q(q.view(B, T, nh, hs), rec)  # (B, T, nh, hs)
        k = self.hook_k(k.view(B, S, nh, hs), rec)  # (B, S, nh, hs)
        v = self.hook_v(v.view(B, S, nh, hs), rec)
        if self.rope:
            cos, sin = rope_cs
            q = self.hook_rot_q(apply_rope(q, cos, sin), rec)
            k = self.hook_rot_k(apply_rope(k, cos, sin), rec)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # (B, nh, T|S, hs)
        att = self.hook_scores_raw(q @ k.transpose(-2, -1), rec)  # (B, nh, T, S)
        att = self.hook_scores_scaled(att / math.sqrt(hs), rec)
        att = self.hook_attn_scores(att.masked_fill(~allowed, float("-inf")), rec)
        if dead is None:
            att = F.softmax(att, dim=-1)
        else:  # a row with every key masked would be 0/0: give it all zeros instead of NaN
            att = F.softmax(att.masked_fill(dead, 0.0), dim=-1).masked_fill(~allowed, 0.0)
        att = self.hook_pattern(att, rec)
        if train and self.dropout > 0:
            att = F.dropout(att, self.dropout, training=True)
        return self.hook_z((att @ v).transpose(1, 2), rec)  # (B, T, nh, hs)


class CausalSelfAttention(HeadsAttention):
    def __init__(self, config: ModelConfig, layer: int):
        super().__init__(config, f"blocks.{layer}.attn.", ("qkv",) + HeadsAttention.STEPS)
        self.c_attn = nn.Linear(config.n_embd, 3 * config.d_attn, bias=config.qkv_bias)
        self.c_proj = nn.Linear(config.d_attn, config.n_embd, bias=config.attn_proj_bias)

    def forward(self, x, mask, rope_cs, rec: Recorder = None, train: bool = False):
        # mask: (allowed (1|B, 1, T, T) keys each query may see, dead query rows that see none or None)
        B, T, _ = x.shape
        qkv = self.hook_qkv(self.c_attn(x), rec)  # (B, T, 3*nh*hs)
        q, k, v = qkv.split(self.d_attn, dim=2)
        z = self.attend(q, k, v, mask, rope_cs, rec, train)  # (B, T, nh, hs)
        return self.c_proj(z.reshape(B, T, self.d_attn))  # (B, T, C)


class MLP(nn.Module):
    def __init__(self, config: ModelConfig, layer: int, prefix: Optional[str] = None):
        super().__init__()
        p = prefix or f"blocks.{layer}.mlp"
        self.activation = config.activation
        self.c_fc = nn.Linear(config.n_embd, config.d_mlp, bias=config.bias)
        self.c_proj = nn.Linear(config.d_mlp, config.n_embd, bias=config.bias)
        self.hook_pre = HookPoint(f"{p}.hook_pre")
        self.hook_post = HookPoint(f"{p}.hook_post")

    def forward(self, x, rec: Recorder = None):
        h = self.hook_pre(self.c_fc(x), rec)  # (B, T, d_mlp)
        if self.activation == "gelu":
            h = F.gelu(h)
        elif self.activation == "gelu_tanh":
            h = F.gelu(h, approximate="tanh")
        elif self.activation == "tanh":
            h = torch.tanh(h)
        else:
            h = F.relu(h)
        h = self.hook_post(h, rec)
        return self.c_proj(h)  # (B, T, C)


def sublayer(block, x, f, norm, hook_out, hook_resid, rec: Recorder = None, train: bool = False):
    """One sublayer ``f`` (attention or MLP) of ``block`` with its residual connection and norm, hooked as
    ``hook_out`` (f's output, after dropout) and ``hook_resid`` (the stream after the add).

    Pre-norm (GPT-2): ``x + f(norm(x))``. Post-norm (the 2017 Transformer): ``norm(x + f(x))``. ``block`` gives
    ``pre_norm`` and ``dropout``."""
    p = block.dropout
    h = norm(x, rec) if block.pre_norm else x
    out = f(h)
    if train and p > 0:
        out = F.dropout(out, p, training=True)
    out = hook_out(out, rec)
    return hook_resid(x + out, rec) if block.pre_norm else hook_resid(norm(x + out, rec), rec)


class Block(nn.Module):
    def __init__(self, config: ModelConfig, layer: int):
        super().__init__()
        self.pre_norm = config.norm_placement == "pre"
        self.dropout = config.dropout
        self.attn_only = config.attn_only
        self.ln_1 = Norm(config, f"blocks.{layer}.ln1")
        self.attn = CausalSelfAttention(config, layer)
        if not self.attn_only:  # an attention-only block has no second norm and no MLP
            self.ln_2 = Norm(config, f"blocks.{layer}.ln2")
            self.mlp = MLP(config, layer)
        p = f"blocks.{layer}."
        for name in ("resid_pre", "attn_out", "resid_mid", "mlp_out", "resid_post"):
            setattr(self, f"hook_{name}", HookPoint(p + f"hook_{name}"))

    def forward(self, x, mask, rope_cs, rec: Recorder = None, train: bool = False):
        x = self.hook_resid_pre(x, rec)
        x = sublayer(self, x, lambda h: self.attn(h, mask, rope_cs, rec, train), self.ln_1, self.hook_attn_out,
                     self.hook_resid_mid, rec, train)
        if self.attn_only:
            return self.hook_resid_post(x, rec)
        return sublayer(self, x, lambda h: self.mlp(h, rec), self.ln_2, self.hook_mlp_out, self.hook_resid_post,
                        rec, train)


class GPT(nn.Module):
    """A decoder-only transformer. ``forward(idx, targets, attention_mask) -> (logits, loss)``."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        if config.n_enc_layer >= 0:
            raise ValueError(f"n_enc_layer={config.n_enc_layer} describes an encoder-decoder model: build it with "
                             "gptviz.model.encoder_decoder.build_model(config), not GPT")
        config.check_limits(batch=1, seq_len=1)
        self.config = config
        # Build on the meta device, then initialise from a private generator: the global RNG is
        # neither read nor advanced, and the same config always gives the same weights.
        with torch.device("meta"):
            modules = dict(
                wte=nn.Embedding(config.vocab_size, config.n_embd),
                h=nn.ModuleList(Block(config, i) for i in range(config.n_layer)),
            )
            if config.pos_encoding == "learned":
                modules["wpe"] = nn.Embedding(config.block_size, config.n_embd)
            if config.norm_placement == "pre":
                modules["ln_f"] = Norm(config, "ln_final")
            self.transformer = nn.ModuleDict(modules)
            self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=config.head_bias)
        self.to_empty(device="cpu")
        if config.tie_weights:
            self.lm_head.weight = self.transformer.wte.weight
        self.hook_embed = HookPoint("hook_embed")
        self.hook_pos_embed = HookPoint("hook_pos_embed")
        self.hook_logits = HookPoint("hook_logits")
        if config.pos_encoding == "sinusoidal":
            self.register_buffer("pos_table", sinusoidal_table(config.block_size, config.n_embd), persistent=False)
        if config.pos_encoding == "rope":
            ang = rope_angles(config.block_size, config.d_head, config.rope_base)
            self.register_buffer("rope_cos", ang.cos(), persistent=False)
            self.register_buffer("rope_sin", ang.sin(), persistent=False)
        self.register_buffer(
            "causal", torch.ones(config.block_size, config.block_size, dtype=torch.bool).tril(), persistent=False
        )
        self.reset_parameters(config.seed)
        self.eval()  # a model here is mostly looked at: dropout is off until .train() is called

    # ------------------------------------------------------------------ weights
    @torch.no_grad()
    def reset_parameters(self, seed: int) -> None:
        """nanoGPT's initialisation, drawn from a generator seeded with ``seed``."""
        g = torch.Generator().manual_seed(seed)
        std = self.config.init_std
        for name, p in self.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            if leaf == "bias":
                p.zero_()
            elif p.dim() == 1:  # norm weight
                p.fill_(1.0)
            elif name.endswith("c_proj.weight"):  # residual projections, scaled as in GPT-2
                p.normal_(0.0, std / math.sqrt(2 * self.config.n_layer), generator=g)
            else:
                p.normal_(0.0, std, generator=g)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def parameter_table(self) -> list[dict]:
        """One row per parameter tensor: name, shape, count. A tied head is listed with its partner."""
        rows = [
            {"name": name, "shape": tuple(p.shape), "count": p.numel()}
            for name, p in self.named_parameters()
        ]
        if self.config.tie_weights:
            rows.append({"name": "lm_head.weight (tied to transformer.wte.weight)",
                         "shape": tuple(self.lm_head.weight.shape), "count": 0})
        return rows

    def hook_names(self) -> list[str]:
        """The names of every hook point in this model, in module order."""
        return [m.name for m in self.modules() if isinstance(m, HookPoint)]

    # ------------------------------------------------------------------ forward
    def check_inputs(self, idx: torch.Tensor, targets=None, attention_mask=None) -> None:
        cfg = self.config
        if not isinstance(idx, torch.Tensor) or idx.dim() != 2:
            raise ValueError("idx must be a 2-D tensor of token ids, shape (batch, pos)")
        if idx.dtype not in (torch.int64, torch.int32, torch.int16, torch.uint8):
            raise ValueError(f"idx must hold integer token ids, not {idx.dtype}")
        B, T = idx.shape
        if B < 1 or T < 1:
            raise ValueError(f"idx has shape {tuple(idx.shape)}: it needs at least one token")
        if T > cfg.block_size:
            raise ValueError(f"sequence length {T} is longer than block_size={cfg.block_size}")
        lo, hi = int(idx.min()), int(idx.max())
        if lo < 0 or hi >= cfg.vocab_size:
            bad = lo if lo < 0 else hi
            raise ValueError(f"token id {bad} is outside the vocabulary (vocab_size={cfg.vocab_size})")
        for name, t in (("targets", targets), ("attention_mask", attention_mask)):
            if t is not None and tuple(t.shape) != (B, T):
                raise ValueError(f"{name} must have the shape of idx {(B, T)}, not {tuple(t.shape)}")

    def allowed_keys(self, T: int, attention_mask: Optional[torch.Tensor]):
        """``(allowed, dead)``. allowed: (1 or B, 1, T, T) bool, query i may look at key j (causal, and
        not at padded keys). dead: the query rows that may look at no key at all, or None if there are none."""
        allowed = self.causal[:T, :T][None, None]
        if attention_mask is None:
            return allowed, None  # the diagonal is always allowed
        allowed = allowed & attention_mask.bool()[:, None, None, :]
        dead = ~allowed.any(dim=-1, keepdim=True)
        return allowed, (dead if bool(dead.any()) else None)

    def run(self, idx, attention_mask=None, rec: Recorder = None, train: bool = False) -> torch.Tensor:
        """The forward pass to the logits. ``rec`` sees (and may replace) every hooked tensor."""
        cfg = self.config
        B, T = idx.shape
        raw = getattr(rec, "raw", None)  # a trace that wants the unembedding's own inputs and outputs
        tok = self.transformer.wte(idx)
        if raw is not None:
            raw["wte_out"] = tok
        tok = self.hook_embed(tok, rec)  # (B, T, C)
        if cfg.pos_encoding == "learned":
            pos = self.transformer.wpe(torch.arange(T, device=idx.device))[None].expand(B, T, cfg.n_embd)
            x = tok + self.hook_pos_embed(pos, rec)
        elif cfg.pos_encoding == "sinusoidal":
            x = tok + self.hook_pos_embed(self.pos_table[:T][None].expand(B, T, cfg.n_embd), rec)
        else:
            x = tok
        if train and cfg.dropout > 0:
            x = F.dropout(x, cfg.dropout, training=True)
        mask = self.allowed_keys(T, attention_mask)
        rope_cs = (self.rope_cos[:T], self.rope_sin[:T]) if cfg.pos_encoding == "rope" else None
        for block in self.transformer.h:
            x = block(x, mask, rope_cs, rec, train)
        if "ln_f" in self.transformer:
            x = self.transformer.ln_f(x, rec)
        logits = self.lm_head(x)
        if raw is not None:
            raw["lm_in"], raw["lm_out"] = x, logits
        return self.hook_logits(logits, rec)  # (B, T, vocab)

    def forward(self, idx, targets=None, attention_mask=None):
        self.check_inputs(idx, targets, attention_mask)
        logits = self.run(idx, attention_mask, train=self.training)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1), ignore_index=-100)
        return logits, loss

    # ------------------------------------------------------------------ import
    @classmethod
    def from_hf_gpt2(cls, hf_model) -> "GPT":
        from .hf_gpt2 import from_hf_gpt2

        return from_hf_gpt2(hf_model)
