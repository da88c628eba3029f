"""GPT, a small configurable decoder-only transformer whose every step can be recorded, and its block.

Module names follow GPT-2 / nanoGPT (``transformer.wte``, ``transformer.h.0.attn.c_attn`` …), so
weights map across by name. Each intermediate tensor passes through a ``HookPoint`` named as in
TransformerLens (``blocks.0.attn.hook_pattern`` …); see ``gptviz.model.hook_points`` for why a traced
forward is bit-identical to the plain one.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn as nn

from ..config import ModelConfig
from .base import TransformerBase
from .experts import MixtureOfExperts
from .hook_points import HookPoint, Recorder
from .layers import MLP, Embedding, HeadsAttention, Linear, Norm, sublayer, train_dropout


class CausalSelfAttention(HeadsAttention):
    """GPT's attention: one projection ``c_attn`` to queries, keys and values, the heads, then ``c_proj``."""

    def __init__(self, config: ModelConfig, layer: int):
        super().__init__(config, f"blocks.{layer}.attn.", rope=config.pos_encoding == "rope", fused_qkv=True,
                         declare_rot=True, grouped=True)
        self.d_kv = config.d_kv
        self.c_attn = Linear(config.n_embd, config.d_attn + 2 * config.d_kv, bias=config.qkv_bias)
        self.c_proj = Linear(config.d_attn, config.n_embd, bias=config.attn_proj_bias)

    def forward(self, x, mask, rope_cs, rec: Recorder = None, train: bool = False):
        # mask: (allowed (1|B, 1, T, T) keys each query may see, dead query rows that see none or None)
        B, T, _ = x.shape
        qkv = self.hook_qkv(self.c_attn(x), rec)  # (B, T, nh*hs + 2*nkv*hs)
        q, k, v = qkv.split([self.d_attn, self.d_kv, self.d_kv], dim=2)
        z = self.attend(q, k, v, mask, rope_cs, rec, train)  # (B, T, nh, hs)
        return self.c_proj(z.reshape(B, T, self.d_attn))  # (B, T, C)


class Block(nn.Module):
    """One GPT layer: causal self-attention and the MLP, each with its residual connection and norm.

    Parallel (``config.parallel_attn``, GPT-NeoX): both read the block's input, each through its own norm, and
    both outputs are added to it; ``hook_resid_mid`` is then the input plus attention's output, a partial sum
    nothing reads (so a residual view still adds up: resid_post = resid_mid + mlp_out)."""

    def __init__(self, config: ModelConfig, layer: int):
        super().__init__()
        self.pre_norm = config.norm_placement == "pre"
        self.dropout = config.dropout
        self.attn_only = config.attn_only
        self.parallel = config.parallel_attn
        before, after = config.sublayer_norms in ("before", "both"), config.sublayer_norms in ("both", "after")
        p = f"blocks.{layer}."
        self.moe = False  # a mixture of experts instead of the MLP (config.is_moe_layer)
        # Gemma 2 and 3 norm before and after each sublayer, OLMo 2 only after (ln1_post, ln2_post, as TransformerLens)
        self.ln_1 = Norm(config, p + "ln1") if before else None
        self.ln_1_post = Norm(config, p + "ln1_post") if after else None
        self.attn = CausalSelfAttention(config, layer)
        if not self.attn_only:  # an attention-only block has no second norm and no MLP
            self.ln_2 = Norm(config, p + "ln2") if before else None
            self.ln_2_post = Norm(config, p + "ln2_post") if after else None
            self.moe = config.is_moe_layer(layer)
            self.mlp = MixtureOfExperts(config, layer) if self.moe else MLP(config, layer)
        self.hook_resid_pre = HookPoint(p + "hook_resid_pre")  # (B, T, C)
        self.hook_attn_out = HookPoint(p + "hook_attn_out")  # (B, T, C)
        self.hook_resid_mid = HookPoint(p + "hook_resid_mid")  # (B, T, C)
        self.hook_mlp_out = HookPoint(p + "hook_mlp_out")  # (B, T, C)
        self.hook_resid_post = HookPoint(p + "hook_resid_post")  # (B, T, C)

    def forward(self, x, mask, rope_cs, rec: Recorder = None, train: bool = False):
        if self.parallel:
            return self.forward_parallel(x, mask, rope_cs, rec, train)
        x = self.hook_resid_pre(x, rec)  # (B, T, C)
        x = sublayer(self, x, lambda h: self.attn(h, mask, rope_cs, rec, train), self.ln_1,
                     self.hook_attn_out,  # (B, T, C)
                     self.hook_resid_mid,  # (B, T, C)
                     rec, train, self.ln_1_post)
        if self.attn_only:
            return self.hook_resid_post(x, rec)  # (B, T, C)
        return sublayer(self, x, lambda h: self.mlp(h, rec, train) if self.moe else self.mlp(h, rec), self.ln_2,
                        self.hook_mlp_out,  # (B, T, C)
                        self.hook_resid_post,  # (B, T, C)
                        rec, train, self.ln_2_post)

    def forward_parallel(self, x, mask, rope_cs, rec: Recorder = None, train: bool = False):
        """GPT-NeoX's block: attention and the MLP both read the block's input ``x``, each through its own norm."""
        x = self.hook_resid_pre(x, rec)  # (B, T, C)
        assert self.ln_1 is not None and self.ln_2 is not None  # a parallel block has its norms before (config)
        a = train_dropout(self.attn(self.ln_1(x, rec), mask, rope_cs, rec, train), self.dropout, train)
        a = self.hook_attn_out(a, rec)  # (B, T, C)
        mid = self.hook_resid_mid(x + a, rec)  # (B, T, C)
        m = train_dropout(self.mlp(self.ln_2(x, rec), rec), self.dropout, train)
        m = self.hook_mlp_out(m, rec)  # (B, T, C)
        return self.hook_resid_post(mid + m, rec)  # (B, T, C)


class GPT(TransformerBase):
    """A decoder-only transformer. ``forward(idx, targets, attention_mask) -> (logits, loss)``.

    Import Hugging Face GPT-2 weights with ``gptviz.model.hf_gpt2.from_hf_gpt2(hf_model)``."""

    family_note: Optional[str]  # only on a model loaded from a folder (gptviz.model.pretrained): read with getattr

    def __init__(self, config: ModelConfig):
        if config.n_enc_layer >= 0:
            raise ValueError(f"n_enc_layer={config.n_enc_layer} describes an encoder-decoder model: build it with "
                             "gptviz.model.build.build_model(config), not GPT")
        super().__init__(config)
        # Build on the meta device; set_up allocates and initialises from the config's seed.
        with torch.device("meta"):
            modules = dict(
                wte=Embedding(config.vocab_size, config.n_embd),
                h=nn.ModuleList(Block(config, i) for i in range(config.n_layer)),
            )
            if config.pos_encoding == "learned":
                modules["wpe"] = Embedding(config.block_size, config.n_embd)
            if config.norm_placement == "pre":
                modules["ln_f"] = Norm(config, "ln_final")
            self.transformer = nn.ModuleDict(modules)
            self.lm_head = Linear(config.n_embd, config.vocab_size, bias=config.head_bias)
        self.hook_embed = HookPoint("hook_embed")  # (B, T, C)
        self.hook_pos_embed = HookPoint("hook_pos_embed")  # (B, T, C)
        if config.final_softcap is not None:
            self.hook_logits_raw = HookPoint("hook_logits_raw")  # (B, T, V): the unembedding's output, before the cap
        self.hook_logits = HookPoint("hook_logits")  # (B, T, V)
        self.set_up(n_pos=config.block_size)

    def residual_branches(self) -> int:
        return 2 * self.config.n_layer

    # ------------------------------------------------------------------ forward
    def run(self, idx, attention_mask=None, rec: Recorder = None, train: bool = False):
        """The forward pass to the logits. ``rec`` sees (and may replace) every hooked tensor."""
        cfg = self.config
        B, T = idx.shape
        raw = getattr(rec, "raw", None)  # a trace that wants the unembedding's own inputs and outputs
        tok = self.transformer.wte(idx)
        if raw is not None:
            raw["wte_out"] = tok
        tok = self.hook_embed(tok, rec)  # (B, T, C)
        pos = self.position_vectors(B, T, self.transformer["wpe"] if "wpe" in self.transformer else None, idx.device)
        x = tok if pos is None else tok + self.hook_pos_embed(pos, rec)  # (B, T, C)
        x = train_dropout(x, cfg.dropout, train)
        masks = self.layer_masks(T, attention_mask)  # per layer: a sliding window may be on some layers only
        rope_cs = self.rope_tables(T)
        local_cs = self.rope_tables(T, local=True) if cfg.rope_local_base is not None else rope_cs
        for layer, (block, mask) in enumerate(zip(self.transformer.h, masks)):  # Gemma 3: sliding layers' own tables
            x = block(x, mask, local_cs if cfg.layer_window(layer) is not None else rope_cs, rec, train)
        if "ln_f" in self.transformer:
            x = self.transformer.ln_f(x, rec)
        logits = self.lm_head(x)
        if raw is not None:
            raw["lm_in"], raw["lm_out"] = x, logits
        if cfg.final_softcap is not None:  # Gemma 2 soft-caps the logits: c · tanh(logits / c), each within ±c
            logits = torch.tanh(self.hook_logits_raw(logits, rec) / cfg.final_softcap) * cfg.final_softcap  # (B, T, V)
        return self.hook_logits(logits, rec)  # (B, T, V)

    def forward(self, idx, targets=None, attention_mask=None):
        self.check_inputs(idx, targets, attention_mask)
        logits = self.run(idx, attention_mask, train=self.training)
        loss = None if targets is None else self.token_loss(logits, targets)
        if loss is not None and self.training and self.config.n_expert and self.config.router_aux_coef:
            aux = [b.mlp.aux_loss for b in self.transformer.h if getattr(b, "moe", False)]
            loss = loss + self.config.router_aux_coef * torch.stack(aux).mean()  # the experts' load balanced
        return logits, loss
