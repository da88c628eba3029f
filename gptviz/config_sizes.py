"""What a ``ModelConfig`` comes to, worked out from its shape alone: its parameter count, an upper estimate of a
trace's memory and the arithmetic of one forward pass. Kept apart so that ``gptviz.config`` stays one readable
dataclass; its ``num_params``, ``trace_bytes`` and ``forward_flops`` call these."""
from __future__ import annotations

from typing import Any, Optional

from .config_moe import is_moe_layer, mlp_params, moe_layer_params, moe_trace_floats, n_moe_layers


def num_params(self: Any) -> int:  # self: the ModelConfig
    """Parameter count, computed from the shape alone (nothing is allocated)."""
    C, V, L = self.n_embd, self.vocab_size, self.n_layer
    lin = lambda i, o, b: i * o + (o if b else 0)
    norm = C + (C if self.bias else 0)
    qk = (self.d_attn + self.d_kv if self.qk_norm_full else 2 * self.d_head) if self.qk_norm else 0
    norms = 2 if self.sublayer_norms == "both" else 1  # per sublayer
    per_block = (norms * norm + lin(C, self.d_attn + 2 * self.d_kv, self.qkv_bias)
                 + lin(self.d_attn, C, self.attn_proj_bias) + qk)
    per_block += self.n_head if self.attn_sinks else 0
    if not self.attn_only:
        per_block += norms * norm + mlp_params(self, self.d_mlp, self.bias)
    moe = n_moe_layers(self)  # those layers have experts instead of the MLP
    total = V * C + L * per_block + moe * (moe_layer_params(self) - mlp_params(self, self.d_mlp, self.bias))
    total += V if self.head_bias else 0
    if self.n_enc_layer >= 0:  # each decoder block also has a norm and cross-attention (q, k, v, o)
        total += L * (norm + 3 * lin(C, self.d_attn, self.qkv_bias) + lin(self.d_attn, C, self.attn_proj_bias))
    if self.n_enc_layer > 0:  # the encoder: blocks like the decoder's without cross-attention
        total += self.n_enc_layer * per_block + (norm if self.norm_placement == "pre" else 0)
        total += self.enc_len * C if self.pos_encoding == "learned" else 0
    if self.pos_encoding == "learned":
        total += self.block_size * C
    if self.norm_placement == "pre":
        total += norm
    if not self.tie_weights:
        total += V * C
    return total


def forward_flops(self: Any, batch: int, seq_len: int) -> int:
    """The floating-point operations of one forward pass over (batch, seq_len) tokens, counting a multiply-add as 2:
    every weight matrix a token passes through (its parameters; a mixture of experts' chosen experts only, an
    embedding table only where it is the unembedding), and each layer's two T × T products, scores and weighted
    values, computed whole as the eager pass does. Norms, activations and softmax are left out (a few percent); an
    encoder-decoder's encoder and cross-attention too (only big decoder-only models are budgeted by it)."""
    B, T, C, V = batch, seq_len, self.n_embd, self.vocab_size
    matmul = num_params(self) - (0 if self.tie_weights else V * C)  # the input table is a lookup, not a product
    matmul -= self.block_size * C if self.pos_encoding == "learned" else 0
    idle = self.n_expert - self.n_expert_active  # experts a token skips, in each layer that has them
    matmul -= sum(is_moe_layer(self, i) for i in range(self.n_layer)) * idle * mlp_params(
        self, self.d_expert, self.expert_bias) if self.n_expert else 0
    attention = self.n_layer * 2 * (2 * self.n_head * T * T * self.d_head)  # q·k and pattern·v, each T × T × d_head
    return 2 * B * T * matmul + B * attention


def trace_bytes(self: Any, batch: int, seq_len: int, grads: bool = False, slim: bool = False,
                layers: Optional[int] = None) -> int:
    """An upper estimate of the memory a trace of (batch, seq_len) tokens keeps (float32). ``slim``: a decoder-only
    model's slim trace (``gptviz.run.on_demand``): one of the four score/pattern tensors a layer (two with
    gradients), and without gradients no probabilities, repeated keys and values or MLP output. ``layers``: how
    many layers' steps it keeps (``trace(..., layers=...)``; default all)."""
    B, T, C = batch, seq_len, self.n_embd
    slim = slim and self.n_enc_layer < 0 and self.attn_softcap is None  # capped scores are never slimmed
    lean = slim and not grads  # the extra steps are worked out when read too
    per_layer = (
        B * T * (12 * C + 2) * (2 if self.sublayer_norms == "both" else 1)  # residuals, norms, outputs
        + B * T * 3 * self.d_attn * (3 if self.qk_norm else 2)  # qkv and q/k/v (+ rotated, + normalised)
        + (B * T * 2 * self.d_attn if self.n_kv_head != self.n_head and not lean else 0)  # k, v repeated
        + B * self.n_head * T * T * ((1 if lean else 2) if slim else 4 + (self.attn_softcap is not None))
        + B * T * self.d_attn  # z
        + (0 if self.attn_only else B * T * self.d_mlp * ((3 if self.gated_mlp else 2) - lean))  # mlp
    )
    per_layer += moe_trace_floats(self, B, T) if self.n_expert else 0  # the worst case: every layer routes
    kept = self.n_layer if layers is None else layers
    total = (kept * per_layer + B * T * (4 * C)
             + B * T * self.vocab_size * ((1 if lean else 2) + (self.final_softcap is not None))
             + T * T * (1 if self.sliding_window is None else 2))  # + the causal mask (and the windowed one)
    if self.n_enc_layer >= 0:
        S = self.enc_len
        cross = (B * T * (6 * C + 1) + B * T * self.d_attn * 2 + B * S * self.d_attn * 2
                 + B * self.n_head * T * S * 4)  # norm, q, z, k and v, four score/pattern tensors
        total += self.n_layer * cross + B * S * C  # + the encoder output
        if self.n_enc_layer > 0:  # encoder blocks, as the decoder's blocks over S positions
            enc_layer = (B * S * (12 * C + 2) + B * S * 3 * self.d_attn * 2 + B * self.n_head * S * S * 4
                         + B * S * self.d_attn + (0 if self.attn_only else B * S * self.d_mlp * 2))
            total += self.n_enc_layer * enc_layer + B * S * (4 * C)
    return 4 * total * (2 if grads else 1)

