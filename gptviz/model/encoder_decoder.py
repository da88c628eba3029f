"""Seq2Seq, an encoder-decoder transformer beside GPT: a decoder whose blocks also attend to an encoder's output.

Each decoder block has three sublayers, as in "Attention Is All You Need": masked self-attention,
cross-attention (queries from the decoder, keys and values from the encoder output, no causal mask) and
the MLP. With ``norm_placement="post"`` each is followed by ``LayerNorm(x + sublayer(x))``; with "pre"
it is ``x + sublayer(LayerNorm(x))``.

``config.n_enc_layer`` says where the encoder output comes from:

- ``0``: there is no encoder; the output is a fixed, seeded random tensor (batch, enc_len, n_embd), or
  the ``enc_out`` you pass. This is the teaching material's set-up (preset ``decoder-cross-attention``).
- ``1`` or more: a real encoder of that many blocks (bidirectional self-attention and an MLP) reads the
  token ids ``enc_input`` (batch, enc_pos). It shares the decoder's token embedding.

Every attention here has separate ``q_proj``, ``k_proj``, ``v_proj`` and ``o_proj`` linear layers; the
heads' arithmetic is GPT's own (``HeadsAttention.attend``), so every step is recorded the same way.
Hook names: the decoder's as GPT's (``blocks.{l}.attn.*``, without ``hook_qkv``), plus
``blocks.{l}.ln_cross.*``, ``blocks.{l}.cross_attn.hook_q|hook_k|...|hook_z``, ``blocks.{l}.hook_cross_out``
and ``blocks.{l}.hook_resid_cross``; the encoder's ``hook_enc_embed``, ``hook_enc_pos_embed``,
``enc_blocks.{l}.*``, ``enc_ln_final.*``; and ``hook_enc_out``, the tensor cross-attention reads.

``gptviz.model.build.build_model`` makes a GPT or a Seq2Seq by ``n_enc_layer``; the reversal task's training and
the material's own training loop are in ``gptviz.training.reversal``.
"""
from __future__ import annotations

from typing import Any, Optional

import torch
import torch.nn as nn

from ..config import ModelConfig
from .base import TransformerBase
from .hook_points import HookPoint, Recorder
from .layers import MLP, Embedding, HeadsAttention, Linear, Norm, sublayer, train_dropout


class Attention(HeadsAttention):
    """Multi-head attention with separate Q, K, V and O projections.

    ``forward(x, kv, ...)``: queries from ``x`` (B, T, C), keys and values from ``kv`` (B, S, C). Self-attention
    passes the same tensor twice; cross-attention passes the encoder output as ``kv`` (and never rotates).
    """

    def __init__(self, config: ModelConfig, prefix: str, cross: bool = False):
        rope = config.pos_encoding == "rope" and not cross
        super().__init__(config, prefix, rope=rope, fused_qkv=False, declare_rot=rope)
        C, D = config.n_embd, config.d_attn
        self.q_proj = Linear(C, D, bias=config.qkv_bias)
        self.k_proj = Linear(C, D, bias=config.qkv_bias)
        self.v_proj = Linear(C, D, bias=config.qkv_bias)
        self.o_proj = Linear(D, C, bias=config.attn_proj_bias)

    def forward(self, x, kv, mask, rope_cs=None, rec: Recorder = None, train: bool = False):
        B, T, _ = x.shape
        z = self.attend(self.q_proj(x), self.k_proj(kv), self.v_proj(kv), mask, rope_cs, rec, train)  # (B, T, nh, hs)
        return self.o_proj(z.reshape(B, T, self.d_attn))  # (B, T, C)


class EncoderBlock(nn.Module):
    """GPT's block without the causal mask, hooked as ``enc_blocks.{l}.*``."""

    def __init__(self, config: ModelConfig, layer: int):
        super().__init__()
        p = f"enc_blocks.{layer}."
        self.pre_norm = config.norm_placement == "pre"
        self.dropout = config.dropout
        self.attn_only = config.attn_only
        self.ln_1 = Norm(config, p + "ln1")
        self.attn = Attention(config, p + "attn.")
        if not self.attn_only:
            self.ln_2 = Norm(config, p + "ln2")
            self.mlp = MLP(config, layer, prefix=p + "mlp")
        self.hook_resid_pre = HookPoint(p + "hook_resid_pre")  # (B, S, C)
        self.hook_attn_out = HookPoint(p + "hook_attn_out")  # (B, S, C)
        self.hook_resid_mid = HookPoint(p + "hook_resid_mid")  # (B, S, C)
        self.hook_mlp_out = HookPoint(p + "hook_mlp_out")  # (B, S, C)
        self.hook_resid_post = HookPoint(p + "hook_resid_post")  # (B, S, C)

    def forward(self, x, mask, rope_cs, rec: Recorder = None, train: bool = False):
        x = self.hook_resid_pre(x, rec)  # (B, S, C)
        x = sublayer(self, x, lambda h: self.attn(h, h, mask, rope_cs, rec, train), self.ln_1,
                     self.hook_attn_out,  # (B, S, C)
                     self.hook_resid_mid,  # (B, S, C)
                     rec, train)
        if self.attn_only:
            return self.hook_resid_post(x, rec)  # (B, S, C)
        return sublayer(self, x, lambda h: self.mlp(h, rec), self.ln_2,
                        self.hook_mlp_out,  # (B, S, C)
                        self.hook_resid_post,  # (B, S, C)
                        rec, train)


class DecoderBlock(nn.Module):
    """Masked self-attention, cross-attention to the encoder output, MLP; a residual and a norm around each.

    Modules are registered in the teaching material's order (the three sublayers, then the three norms), so
    the parameter table reads like its printout: ``attn``, ``cross_attn``, ``mlp``, ``ln_1``, ``ln_cross``, ``ln_2``.
    ``ln_1`` belongs to self-attention and ``ln_2`` to the MLP, as in GPT's blocks.
    """

    def __init__(self, config: ModelConfig, layer: int):
        super().__init__()
        p = f"blocks.{layer}."
        self.pre_norm = config.norm_placement == "pre"
        self.dropout = config.dropout
        self.attn_only = config.attn_only
        self.attn = Attention(config, p + "attn.")
        self.cross_attn = Attention(config, p + "cross_attn.", cross=True)
        if not self.attn_only:
            self.mlp = MLP(config, layer)
        self.ln_1 = Norm(config, p + "ln1")
        self.ln_cross = Norm(config, p + "ln_cross")
        if not self.attn_only:
            self.ln_2 = Norm(config, p + "ln2")
        self.hook_resid_pre = HookPoint(p + "hook_resid_pre")  # (B, T, C)
        self.hook_attn_out = HookPoint(p + "hook_attn_out")  # (B, T, C)
        self.hook_resid_mid = HookPoint(p + "hook_resid_mid")  # (B, T, C)
        self.hook_cross_out = HookPoint(p + "hook_cross_out")  # (B, T, C)
        self.hook_resid_cross = HookPoint(p + "hook_resid_cross")  # (B, T, C)
        self.hook_mlp_out = HookPoint(p + "hook_mlp_out")  # (B, T, C)
        self.hook_resid_post = HookPoint(p + "hook_resid_post")  # (B, T, C)

    def forward(self, x, enc, mask, cross_mask, rope_cs, rec: Recorder = None, train: bool = False):
        # pre-norm: x = x + sublayer(norm(x)); the 2017 Transformer: x = norm(x + sublayer(x)), three times
        x = self.hook_resid_pre(x, rec)  # (B, T, C)
        x = sublayer(self, x, lambda h: self.attn(h, h, mask, rope_cs, rec, train), self.ln_1,
                     self.hook_attn_out,  # (B, T, C)
                     self.hook_resid_mid,  # (B, T, C)
                     rec, train)
        x = sublayer(self, x, lambda h: self.cross_attn(h, enc, cross_mask, None, rec, train), self.ln_cross,
                     self.hook_cross_out,  # (B, T, C)
                     self.hook_resid_cross,  # (B, T, C)
                     rec, train)
        if self.attn_only:
            return self.hook_resid_post(x, rec)  # (B, T, C)
        return sublayer(self, x, lambda h: self.mlp(h, rec), self.ln_2,
                        self.hook_mlp_out,  # (B, T, C)
                        self.hook_resid_post,  # (B, T, C)
                        rec, train)


class Seq2Seq(TransformerBase):
    """An encoder-decoder transformer.

    ``forward(idx, targets=None, attention_mask=None, enc_input=None, enc_mask=None, enc_out=None)
    -> (logits, loss)``: ``idx`` (B, T) is what the decoder reads; ``enc_input`` (B, S) the source token ids
    (with a real encoder); ``enc_out`` (B, S, C) an encoder output to use instead of the fixed random one
    (n_enc_layer = 0); ``enc_mask`` (B, S) is 1 for real source positions and 0 for padding.
    """

    encoder: Any  # a ModuleDict (with a real encoder) read by attribute, as ``transformer``

    def __init__(self, config: ModelConfig):
        if config.n_enc_layer < 0:
            raise ValueError("n_enc_layer=-1 describes a decoder-only model: build it with GPT(config)")
        super().__init__(config)
        C = config.n_embd
        with torch.device("meta"):
            modules = dict(wte=Embedding(config.vocab_size, C),
                           h=nn.ModuleList(DecoderBlock(config, i) for i in range(config.n_layer)))
            if config.pos_encoding == "learned":
                modules["wpe"] = Embedding(config.block_size, C)
            if config.norm_placement == "pre":
                modules["ln_f"] = Norm(config, "ln_final")
            self.transformer = nn.ModuleDict(modules)
            if config.n_enc_layer > 0:
                enc: dict[str, nn.Module] = dict(
                    h=nn.ModuleList(EncoderBlock(config, i) for i in range(config.n_enc_layer)))
                if config.pos_encoding == "learned":
                    enc["wpe"] = Embedding(config.enc_len, C)
                if config.norm_placement == "pre":
                    enc["ln_f"] = Norm(config, "enc_ln_final")
                self.encoder = nn.ModuleDict(enc)
            self.lm_head = Linear(C, config.vocab_size, bias=config.head_bias)
        self.hook_enc_embed = HookPoint("hook_enc_embed")  # (B, S, C)
        self.hook_enc_pos_embed = HookPoint("hook_enc_pos_embed")  # (B, S, C)
        self.hook_enc_out = HookPoint("hook_enc_out")  # (B, S, C)
        self.hook_embed = HookPoint("hook_embed")  # (B, T, C)
        self.hook_pos_embed = HookPoint("hook_pos_embed")  # (B, T, C)
        self.hook_logits = HookPoint("hook_logits")  # (B, T, V)
        self.set_up(n_pos=max(config.block_size, config.enc_len))

    def residual_branches(self) -> int:
        return 3 * self.config.n_layer + 2 * max(0, self.config.n_enc_layer)

    def fixed_enc_out(self, batch: int) -> torch.Tensor:
        """The stand-in encoder output when n_enc_layer = 0: standard normal, (batch, enc_len, n_embd).

        Seeded by the config's seed and drawn a row at a time, so row b is the same whatever the batch size."""
        cfg = self.config
        g = torch.Generator().manual_seed(cfg.seed + 1_000_003)
        return torch.stack([torch.randn(cfg.enc_len, cfg.n_embd, generator=g) for _ in range(batch)])

    # ------------------------------------------------------------------ inputs
    def check_inputs(self, idx, targets=None, attention_mask=None, enc_input=None, enc_mask=None, enc_out=None) -> None:
        super().check_inputs(idx, targets, attention_mask)  # the decoder's side: GPT's rules
        cfg = self.config
        B = idx.shape[0]
        if cfg.n_enc_layer > 0:
            if enc_out is not None:
                raise ValueError("this model has an encoder: pass its input token ids as enc_input, not enc_out")
            if enc_input is None:
                raise ValueError("this encoder-decoder model reads a source: "
                                 "pass enc_input, token ids (batch, enc_pos)")
            if not isinstance(enc_input, torch.Tensor) or enc_input.dim() != 2 or enc_input.dtype.is_floating_point:
                raise ValueError("enc_input must be a 2-D tensor of token ids, shape (batch, enc_pos)")
            S = enc_input.shape[1]
            if enc_input.shape[0] != B or S < 1:
                raise ValueError(f"enc_input has shape {tuple(enc_input.shape)}: "
                                 f"it needs batch {B} and at least one token")
            lo, hi = int(enc_input.min()), int(enc_input.max())
            if lo < 0 or hi >= cfg.vocab_size:
                raise ValueError(f"source token id {lo if lo < 0 else hi} is outside the vocabulary "
                                 f"(vocab_size={cfg.vocab_size})")
        else:
            if enc_input is not None:
                raise ValueError("this model has no encoder (n_enc_layer=0): "
                                 "pass an encoder output as enc_out, or nothing")
            if enc_out is None:
                S = cfg.enc_len
            else:
                if not isinstance(enc_out, torch.Tensor) or enc_out.dim() != 3 or not enc_out.dtype.is_floating_point:
                    raise ValueError("enc_out must be a float tensor of shape (batch, enc_pos, n_embd)")
                S = enc_out.shape[1]
                if enc_out.shape[0] != B or enc_out.shape[2] != cfg.n_embd or S < 1:
                    raise ValueError(f"enc_out has shape {tuple(enc_out.shape)}, not ({B}, enc_pos, {cfg.n_embd})")
        if S > cfg.enc_len:
            raise ValueError(f"source length {S} is longer than enc_len={cfg.enc_len}")
        if enc_mask is not None and tuple(enc_mask.shape) != (B, S):
            raise ValueError(f"enc_mask must have the shape of the source {(B, S)}, not {tuple(enc_mask.shape)}")

    @staticmethod
    def source_keys(S: int, enc_mask: Optional[torch.Tensor], T: int = 1):
        """``(allowed, dead)`` for attention over source positions: every one, except padding (no causal mask).
        allowed: (1 or B, 1, 1, S)."""
        if enc_mask is None:
            return torch.ones(1, 1, 1, S, dtype=torch.bool), None
        allowed = enc_mask.bool()[:, None, None, :]
        dead = ~allowed.any(dim=-1, keepdim=True)
        return allowed, (dead if bool(dead.any()) else None)

    # ------------------------------------------------------------------ forward
    def encode(self, batch: int, enc_input=None, enc_mask=None, enc_out=None, rec: Recorder = None,
               train: bool = False) -> torch.Tensor:
        """The encoder output (B, S, C) that cross-attention reads, recorded as ``hook_enc_out``."""
        cfg = self.config
        if cfg.n_enc_layer == 0:
            mem = enc_out if enc_out is not None else self.fixed_enc_out(batch)
            return self.hook_enc_out(mem, rec)  # (B, S, C)
        S = enc_input.shape[1]
        x = self.hook_enc_embed(self.transformer.wte(enc_input), rec)  # (B, S, C), the decoder's table
        pos = self.position_vectors(x.shape[0], S, self.encoder["wpe"] if "wpe" in self.encoder else None, x.device)
        x = x if pos is None else x + self.hook_enc_pos_embed(pos, rec)  # (B, S, C)
        x = train_dropout(x, cfg.dropout, train)
        mask = self.source_keys(S, enc_mask)
        mask = (mask[0].expand(-1, -1, S, -1), mask[1])  # every source position sees every source position
        rope_cs = self.rope_tables(S)
        for block in self.encoder.h:
            x = block(x, mask, rope_cs, rec, train)
        if "ln_f" in self.encoder:
            x = self.encoder.ln_f(x, rec)
        return self.hook_enc_out(x, rec)  # (B, S, C)

    def run(self, idx, attention_mask=None, rec: Recorder = None, train: bool = False,
            enc_input=None, enc_mask=None, enc_out=None) -> torch.Tensor:
        """The forward pass to the logits. ``rec`` sees (and may replace) every hooked tensor."""
        B, T = idx.shape
        enc = self.encode(B, enc_input, enc_mask, enc_out, rec, train)  # (B, S, C)
        tok = self.hook_embed(self.transformer.wte(idx), rec)  # (B, T, C)
        pos = self.position_vectors(B, T, self.transformer["wpe"] if "wpe" in self.transformer else None, tok.device)
        x = tok if pos is None else tok + self.hook_pos_embed(pos, rec)  # (B, T, C)
        x = train_dropout(x, self.config.dropout, train)
        masks = self.layer_masks(T, attention_mask)  # the decoder's self-attention, per layer (sliding windows)
        cross_mask = self.source_keys(enc.shape[1], enc_mask)
        rope_cs = self.rope_tables(T)
        for block, mask in zip(self.transformer.h, masks):
            x = block(x, enc, mask, cross_mask, rope_cs, rec, train)
        if "ln_f" in self.transformer:
            x = self.transformer.ln_f(x, rec)
        return self.hook_logits(self.lm_head(x), rec)  # (B, T, V)

    def forward(self, idx, targets=None, attention_mask=None, enc_input=None, enc_mask=None, enc_out=None):
        self.check_inputs(idx, targets, attention_mask, enc_input, enc_mask, enc_out)
        logits = self.run(idx, attention_mask, train=self.training, enc_input=enc_input, enc_mask=enc_mask,
                          enc_out=enc_out)
        loss = None if targets is None else self.token_loss(logits, targets)
        return logits, loss
