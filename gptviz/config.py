"""Model configuration: one frozen dataclass, validated on construction, plus named presets.

Field names follow nanoGPT. Defaults are GPT-2's architectural choices at a small size.
A config is hashable, so it can key a cache of built models.
"""
from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from typing import Any, Optional

from . import config_sizes
from .config_gemma import check_gemma_fields
from .config_moe import GLU_OSS, check_moe, is_moe_layer
from .config_rope import ROPE_TYPES as ROPE_TYPES  # re-exported: where the other choices are
from .config_rope import check_rope_scaling

NORMS = ("layernorm", "rmsnorm")
NORM_PLACEMENTS = ("pre", "post")
POS_ENCODINGS = ("learned", "sinusoidal", "rope", "none")
ACTIVATIONS = ("gelu", "gelu_tanh", "relu", "tanh", "silu", GLU_OSS)

# Hard limits, checked before anything is allocated. A visualiser that tries to build a
# 10-billion-parameter model on a laptop should say no, not freeze.
MAX_PARAMS = 600_000_000  # Qwen2.5-0.5B (494M, 1.9 GB of float32 weights) fits; built one at a time (run.slots)
MAX_TRACE_BYTES = 1_500_000_000  # one trace; as much as the app's trace cache holds (issue 21: 512 tokens)
MAX_TABLE_BYTES = 1_000_000_000  # the position tables a model builds (sin/cos, rotary), at their peak while built


@dataclass(frozen=True)
class ModelConfig:
    """The shape and choices of a GPT-style decoder.

    ``d_head`` defaults to ``n_embd // n_head``, ``d_mlp`` to ``4 * n_embd``, ``n_kv_head`` to ``n_head`` and
    ``qkv_bias`` to ``bias``. After construction all four hold concrete values.

    The choices of later models, each off by default (GPT-2): ``n_kv_head`` below ``n_head`` is grouped-query
    attention (each key/value head serves ``n_head / n_kv_head`` query heads: Llama, Qwen2, Mistral);
    ``gated_mlp`` is a gated MLP, ``act(x W_gate) * (x W_in)`` then ``W_out`` (SwiGLU with ``activation="silu"``);
    ``parallel_attn`` adds attention and the MLP to the stream side by side, each reading the block's input
    through its own norm (GPT-NeoX, GPT-J); ``rotary_pct`` rotates only the first fraction of each head's
    dimensions (Pythia: 0.25); ``sliding_window`` lets each query see only the last ``sliding_window`` positions
    (itself included: key j for query i when i - sliding_window < j <= i), on the layers ``sliding_layers`` lists
    (None: every layer) while the others keep plain causal attention (Mistral, Qwen2). The window is a mask, never
    a cap on the context: a text longer than the window still fits up to ``block_size``. ``qk_norm`` (QK-norm,
    Qwen3) puts each head's query and key vectors through an RMSNorm of their own (a learned gain of ``d_head``,
    ``ln_eps``, whatever ``norm`` says) after the split into heads and before rotary positions; with ``qk_norm_full``
    (OLMo 2) one RMSNorm over all the queries of a position (n_head · d_head wide) and one over all its keys instead.
    Gemma 2 and 3 and OLMo 2 (``gptviz.config_gemma``): ``sublayer_norms`` ("before": x + f(norm(x)); "both":
    x + norm'(f(norm(x))); "after": x + norm'(f(x))), ``attn_scale_dim`` (scores divided by its square root instead
    of √d_head), ``attn_softcap`` and ``final_softcap`` (c · tanh(x / c) on the scaled scores, on the logits), and
    ``rope_local_base`` (the sliding layers' own rotary base, unscaled).
    """

    vocab_size: int = 64
    block_size: int = 32
    n_layer: int = 2
    n_head: int = 2
    n_embd: int = 32
    # d_head, d_mlp, qkv_bias, attn_proj_bias and n_kv_head: None (the default) asks for the derived value, which
    # __post_init__ fills in, so a constructed config always holds an int (a bool): typed as the value it holds
    d_head: int = None  # type: ignore[assignment]  # None until __post_init__, as above
    d_mlp: int = None  # type: ignore[assignment]  # None until __post_init__, as above
    norm: str = "layernorm"
    norm_placement: str = "pre"
    pos_encoding: str = "learned"
    activation: str = "gelu_tanh"
    bias: bool = True
    qkv_bias: bool = None  # type: ignore[assignment]  # None until __post_init__, as above
    tie_weights: bool = True
    dropout: float = 0.0
    init_std: float = 0.02
    ln_eps: float = 1e-5
    rope_base: float = 10000.0
    # Rotary scaling, as Hugging Face names it (ROPE_TYPES; the formulas are in gptviz.model.rope_scaling). Each
    # type reads only its own fields ("default", plain rotary positions, reads none); llama3 the freq factors, yarn
    # the betas and truncate, longrope its two factor lists; every scaled type multiplies cos and sin by
    # rope_attention_factor.
    rope_type: str = "default"
    rope_factor: float = 1.0
    rope_original_max_pos: int = None  # type: ignore[assignment]  # the context trained for; None = block_size
    rope_low_freq_factor: float = 1.0
    rope_high_freq_factor: float = 4.0
    rope_beta_fast: float = 32.0
    rope_beta_slow: float = 1.0
    rope_truncate: bool = True
    rope_attention_factor: float = None  # type: ignore[assignment]  # None = the type's own (rope_attention_default)
    # longrope (Phi-3): each pair's frequency divided by its own number, the short list for a text of at most
    # rope_original_max_pos positions, the long list for a longer one (tuples: the config stays hashable)
    rope_short_factor: Optional[tuple[float, ...]] = None
    rope_long_factor: Optional[tuple[float, ...]] = None
    seed: int = 0
    attn_only: bool = False  # blocks without an MLP: the setting where induction heads are studied
    # Encoder-decoder (gptviz.model.encoder_decoder): -1 = decoder only (GPT); 0 = a decoder with cross-attention whose
    # encoder output is a fixed, seeded random tensor; 1 or more = a real encoder of that many blocks.
    n_enc_layer: int = -1
    enc_len: int = 8  # encoder positions: the fixed encoder output's length, or the longest source
    attn_proj_bias: bool = None  # type: ignore[assignment]  # attention's output projection; None = same as bias
    head_bias: bool = False  # bias on the output layer (lm_head)
    n_kv_head: int = None  # type: ignore[assignment]  # key/value heads (grouped-query attention); None = n_head
    gated_mlp: bool = False  # act(x W_gate) * (x W_in), then W_out
    parallel_attn: bool = False  # x + attn(ln1(x)) + mlp(ln2(x))
    rotary_pct: float = 1.0  # the fraction of each head's dimensions that rotary positions turn
    sliding_window: Optional[int] = None  # None: plain causal attention; else query i sees keys i-w+1 .. i
    sliding_layers: Optional[tuple[int, ...]] = None  # the layers with the window (sorted); None: every layer
    qk_norm: bool = False  # an RMSNorm over each head's query and key (gains q_norm, k_norm), before rotary
    # Mixtures of experts (gptviz.config_moe says what each field means; gptviz.model.experts computes them)
    n_expert: int = 0  # 0: a plain MLP; else that many experts and a router on the moe_layers
    n_expert_active: int = 2  # the experts each token goes to (top-k)
    d_expert: int = None  # type: ignore[assignment]  # each expert's hidden width; None = d_mlp
    moe_layers: Optional[tuple[int, ...]] = None  # the layers whose MLP is a mixture (sorted); None: every layer
    expert_renorm: bool = True  # the chosen experts' probabilities rescaled to sum to 1
    d_shared_expert: int = 0  # a shared expert every token goes through (Qwen2-MoE), sigmoid-gated; 0: none
    router_bias: bool = False
    expert_bias: bool = False
    router_aux_coef: float = 0.01  # training only: the load-balancing loss's weight (Switch Transformer's)
    swiglu_limit: float = 7.0  # activation "gpt_oss_glu" only: the clamp
    swiglu_alpha: float = 1.702  # activation "gpt_oss_glu" only: the sigmoid's slope
    attn_sinks: bool = False  # GPT-OSS: a learned logit per head, a key every query sees that has no value
    qk_norm_full: bool = False  # with qk_norm: over the whole projection (n_head·d_head, n_kv_head·d_head), OLMo 2
    sublayer_norms: str = "before"  # "before" (pre-norm), "both" (Gemma 2, 3), "after" (OLMo 2): see config_gemma
    attn_scale_dim: Optional[float] = None  # scores / sqrt(attn_scale_dim); None = d_head (query_pre_attn_scalar)
    attn_softcap: Optional[float] = None  # c · tanh(scores / c) after scaling, before the mask; None = no cap
    final_softcap: Optional[float] = None  # c · tanh(logits / c); None = no cap
    rope_local_base: Optional[float] = None  # the sliding layers' rotary base (Gemma 3); None = rope_base everywhere

    def __post_init__(self) -> None:
        def bad(name: str, rule: str) -> ValueError:
            return ValueError(f"{name}={getattr(self, name)!r} {rule}")

        for name in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd", "seed"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise bad(name, "must be a whole number")
        for name in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd"):
            if getattr(self, name) < 1:
                raise bad(name, "must be at least 1")
        if self.seed < 0:
            raise bad("seed", "must be 0 or more")
        for name in ("d_head", "d_mlp"):
            value = getattr(self, name)
            if value is not None:
                if isinstance(value, bool) or not isinstance(value, int):
                    raise bad(name, "must be a whole number or None")
                if value < 1:
                    raise bad(name, "must be at least 1")
        if self.d_head is None:
            if self.n_embd % self.n_head:
                raise ValueError(
                    f"n_embd={self.n_embd} must be divisible by n_head={self.n_head} "
                    "when d_head is not given"
                )
            object.__setattr__(self, "d_head", self.n_embd // self.n_head)
        if self.d_mlp is None:
            object.__setattr__(self, "d_mlp", 4 * self.n_embd)
        if self.n_kv_head is None:
            object.__setattr__(self, "n_kv_head", self.n_head)
        if isinstance(self.n_kv_head, bool) or not isinstance(self.n_kv_head, int) or self.n_kv_head < 1:
            raise bad("n_kv_head", "must be a whole number of at least 1, or None (as many as n_head)")
        if self.n_head % self.n_kv_head:
            raise ValueError(f"n_head={self.n_head} must be divisible by n_kv_head={self.n_kv_head}: each key/value "
                             "head serves the same number of query heads")
        choices = {
            "norm": NORMS,
            "norm_placement": NORM_PLACEMENTS,
            "pos_encoding": POS_ENCODINGS,
            "activation": ACTIVATIONS,
        }
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise bad(name, "must be one of " + ", ".join(repr(a) for a in allowed))
        for name in ("bias", "tie_weights", "attn_only", "head_bias", "gated_mlp", "parallel_attn", "qk_norm"):
            if not isinstance(getattr(self, name), bool):
                raise bad(name, "must be True or False")
        for name in ("n_enc_layer", "enc_len"):
            if isinstance(getattr(self, name), bool) or not isinstance(getattr(self, name), int):
                raise bad(name, "must be a whole number")
        if self.n_enc_layer < -1:
            raise bad("n_enc_layer", "must be -1 (decoder only), 0 (a fixed random encoder output) or more")
        if self.enc_len < 1:
            raise bad("enc_len", "must be at least 1")
        if self.attn_proj_bias is None:
            object.__setattr__(self, "attn_proj_bias", self.bias)
        elif not isinstance(self.attn_proj_bias, bool):
            raise bad("attn_proj_bias", "must be True, False or None")
        if self.qkv_bias is None:
            object.__setattr__(self, "qkv_bias", self.bias)
        elif not isinstance(self.qkv_bias, bool):
            raise bad("qkv_bias", "must be True, False or None")
        for name in ("dropout", "init_std", "ln_eps", "rope_base", "rotary_pct"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise bad(name, "must be a finite number")
        if not 0.0 <= self.dropout < 1.0:
            raise bad("dropout", "must be at least 0 and below 1")
        if self.init_std <= 0:
            raise bad("init_std", "must be above 0")
        if self.ln_eps <= 0:
            raise bad("ln_eps", "must be above 0")
        if self.rope_base <= 1:
            raise bad("rope_base", "must be above 1")
        if not 0.0 < self.rotary_pct <= 1.0:
            raise bad("rotary_pct", "must be above 0 and at most 1")
        for name in ("dropout", "init_std", "ln_eps", "rope_base", "rotary_pct"):
            object.__setattr__(self, name, float(getattr(self, name)))
        if self.pos_encoding == "rope" and self.d_head % 2:
            raise ValueError(
                f"d_head={self.d_head} must be even when pos_encoding='rope': "
                "rotary embeddings turn pairs of dimensions"
            )
        if self.pos_encoding == "rope" and (self.d_rot % 2 or self.d_rot < 2):
            raise ValueError(f"rotary_pct={self.rotary_pct} of d_head={self.d_head} turns {self.d_rot} dimension(s): "
                             "rotary embeddings turn pairs, so it must come to an even number, at least 2")
        check_rope_scaling(self)
        if self.parallel_attn and (self.norm_placement != "pre" or self.attn_only or self.n_enc_layer >= 0):
            raise bad("parallel_attn", "needs a decoder-only model with pre-norm blocks that have an MLP")
        if (self.gated_mlp or self.n_kv_head != self.n_head or self.qk_norm) and self.n_enc_layer >= 0:
            raise ValueError("gated_mlp, n_kv_head and qk_norm are for decoder-only models (n_enc_layer=-1)")
        self._check_sliding_window()
        check_moe(self)
        check_gemma_fields(self)

    def _check_sliding_window(self) -> None:
        """``sliding_window``: None or a whole number of at least 1; ``sliding_layers``: None, or layer indices in
        range, sorted and each once (a list, as JSON gives it, is kept as a tuple so the config stays hashable)."""
        w, layers = self.sliding_window, self.sliding_layers
        if w is not None and (isinstance(w, bool) or not isinstance(w, int) or w < 1):
            raise ValueError(f"sliding_window={w!r} must be a whole number of at least 1, or None (no window)")
        if layers is None:
            return
        if not isinstance(layers, (list, tuple)) or not all(isinstance(i, int) and not isinstance(i, bool)
                                                             for i in layers):
            raise ValueError(f"sliding_layers={layers!r} must be a list of layer indices, or None (every layer)")
        layers = tuple(layers)
        object.__setattr__(self, "sliding_layers", layers)
        if w is None:
            raise ValueError(f"sliding_layers={layers!r} needs a sliding_window: it says which layers use it")
        if any(not 0 <= i < self.n_layer for i in layers):
            raise ValueError(f"sliding_layers={layers!r} must be layers of this model (0 to {self.n_layer - 1})")
        if any(a >= b for a, b in zip(layers, layers[1:])):
            raise ValueError(f"sliding_layers={layers!r} must be sorted, each layer once")

    def is_moe_layer(self, layer: int) -> bool:
        """Whether ``layer``'s MLP is a mixture of experts (``n_expert`` > 0, and the layer in ``moe_layers``)."""
        return is_moe_layer(self, layer)

    def layer_window(self, layer: int) -> Optional[int]:
        """The sliding window of ``layer``'s self-attention: ``sliding_window`` if that layer uses it, else None."""
        if self.sliding_window is None or (self.sliding_layers is not None and layer not in self.sliding_layers):
            return None
        return self.sliding_window

    # ----------------------------------------------------------------- derived sizes
    @property
    def d_attn(self) -> int:
        """Attention's inner width: all heads side by side."""
        return self.n_head * self.d_head

    @property
    def d_kv(self) -> int:
        """The keys' (and the values') width: all key/value heads side by side (``d_attn`` without grouping)."""
        return self.n_kv_head * self.d_head

    @property
    def d_rot(self) -> int:
        """How many of each head's dimensions rotary positions turn (``d_head`` unless ``rotary_pct`` < 1)."""
        return int(self.d_head * self.rotary_pct)

    def num_params(self) -> int:
        """Parameter count, computed from the shape alone (nothing is allocated): ``gptviz.config_sizes``."""
        return config_sizes.num_params(self)

    def forward_flops(self, batch: int, seq_len: int) -> int:
        """The arithmetic of one forward pass over (batch, seq_len) tokens, a multiply-add counted as 2:
        ``gptviz.config_sizes.forward_flops``, which says what it counts."""
        return config_sizes.forward_flops(self, batch, seq_len)

    def trace_bytes(self, batch: int, seq_len: int, grads: bool = False, slim: bool = False,
                    layers: Optional[int] = None) -> int:
        """An upper estimate of the memory a trace of (batch, seq_len) tokens keeps (float32):
        ``gptviz.config_sizes.trace_bytes``, which says what it counts."""
        return config_sizes.trace_bytes(self, batch, seq_len, grads, slim, layers)

    @property
    def n_pos(self) -> int:
        """How many positions the model's tables cover: the decoder's, and an encoder-decoder's source too."""
        return max(self.block_size, self.enc_len) if self.n_enc_layer >= 0 else self.block_size

    def table_bytes(self) -> int:
        """An upper estimate of the memory the fixed position tables take at their peak while they are built
        (float64 intermediates included): a sin/cos table is (n_pos, n_embd), rotary cos and sin (n_pos, d_head/2)
        each. Learned positions are parameters (``num_params``); the causal mask is built per forward pass, for
        the real sequence length only, and is counted in ``trace_bytes``."""
        if self.pos_encoding == "sinusoidal":
            return 24 * self.n_pos * self.n_embd  # float64 table, angles, sin and cos; the float32 copy
        if self.pos_encoding == "rope":
            tables = 2 if self.rope_local_base is not None else 1  # the sliding layers' own (rope_local_base)
            return 28 * self.n_pos * (self.d_rot // 2) * tables  # float64 angles, positions; float32 angles, cos, sin
        return 0

    def check_limits(self, batch: int = 1, seq_len: Optional[int] = None, grads: bool = False,
                     slim: bool = False) -> None:
        """Refuse, before allocating anything, a model or trace too big for this app: its parameters, the
        position tables it builds, and the trace."""
        n = self.num_params()
        if n > MAX_PARAMS:
            raise ValueError(
                f"this config has {n:,} parameters, over the limit of {MAX_PARAMS:,}: "
                + ("make n_layer, n_embd, n_expert, d_expert or vocab_size smaller" if self.n_expert else
                   "make n_layer, n_embd, d_mlp or vocab_size smaller")
            )
        t = self.table_bytes()
        if t > MAX_TABLE_BYTES:
            width = "n_embd" if self.pos_encoding == "sinusoidal" else "d_head"
            raise ValueError(
                f"this config's {self.pos_encoding} position tables ({self.n_pos:,} positions) would need about "
                f"{t / 1e9:.1f} GB, over the limit of {MAX_TABLE_BYTES / 1e9:.0f} GB: "
                f"make block_size or {width} smaller"
            )
        T = self.block_size if seq_len is None else seq_len
        b = self.trace_bytes(batch, T, grads, slim)
        if b > MAX_TRACE_BYTES:
            raise ValueError(
                f"a trace of {batch}×{T} tokens would need about {b / 1e9:.1f} GB, over the limit of "
                f"{MAX_TRACE_BYTES / 1e9:g} GB: use shorter text, fewer lines or a smaller model"
            )

    # ----------------------------------------------------------------- conversion
    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ModelConfig":
        if not isinstance(data, dict):
            raise ValueError("a config must be a JSON object of field names to values")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown config field(s): {', '.join(unknown)}")
        return cls(**data)

    def replace(self, **changes: Any) -> "ModelConfig":
        """A copy with some fields changed; derived defaults are worked out again unless given."""
        data = self.to_dict()
        for derived, source in (("d_head", ("n_embd", "n_head")), ("d_mlp", ("n_embd",)), ("qkv_bias", ("bias",)),
                                 ("attn_proj_bias", ("bias",)), ("n_kv_head", ("n_head",)),
                                 ("rope_original_max_pos", ("block_size",)),
                                 ("rope_attention_factor", ("rope_type", "rope_factor", "rope_original_max_pos"))):
            if derived not in changes and any(s in changes for s in source):
                data[derived] = None
        data.update(changes)
        return ModelConfig(**data)


def _preset_table() -> dict[str, ModelConfig]:
    return {
        # The app opens on this: small enough for every heatmap to be readable and instant.
        "default": ModelConfig(vocab_size=64, block_size=32, n_layer=2, n_head=2, n_embd=16),
        # The smallest model that still has every part: one layer, two heads of width two.
        "explainer": ModelConfig(vocab_size=64, block_size=8, n_layer=1, n_head=2, n_embd=4),
        # GPT-2 small (124M parameters): the real model's shape.
        "gpt2-small": ModelConfig(
            vocab_size=50257, block_size=1024, n_layer=12, n_head=12, n_embd=768, activation="gelu_tanh"
        ),
        # LLaMA's choices at a small size: RMSNorm, rotary positions, no biases, an untied head.
        "llama-like": ModelConfig(
            vocab_size=64, block_size=32, n_layer=2, n_head=4, n_embd=32, norm="rmsnorm",
            pos_encoding="rope", bias=False, tie_weights=False, ln_eps=1e-6,
        ),
        # "Attention Is All You Need" as a decoder: norm after each sublayer, ReLU, sin/cos positions.
        "original-transformer": ModelConfig(
            vocab_size=64, block_size=32, n_layer=2, n_head=2, n_embd=32, norm_placement="post",
            activation="relu", pos_encoding="sinusoidal",
        ),
        # The teaching material's hand-written decoder layer: masked self-attention, cross-attention to a
        # fixed random encoder output (batch, 8, 32), a ReLU feed-forward layer, LayerNorm(x + sublayer(x))
        # after each; Q/K/V/O without bias, feed-forward and output layer with bias, no positions.
        "decoder-cross-attention": ModelConfig(
            vocab_size=12, block_size=8, n_layer=1, n_head=8, n_embd=32, d_head=4, d_mlp=128,
            norm_placement="post", pos_encoding="none", activation="relu", bias=True, qkv_bias=False,
            attn_proj_bias=False, head_bias=True, tie_weights=False, n_enc_layer=0, enc_len=8,
        ),
    }


PRESETS: dict[str, ModelConfig] = _preset_table()

PRESET_DESCRIPTIONS: dict[str, str] = {
    "default": "The app's small default: 2 layers, 2 heads, 16-wide. Every heatmap fits on a slide.",
    "explainer": "One layer, two heads, n_embd=4, block_size=8: small enough to read every number.",
    "gpt2-small": "GPT-2 small's shape: 12 layers, 12 heads, 768-wide, 124M parameters.",
    "llama-like": "LLaMA's choices, small: RMSNorm, rotary positions, no biases, untied head.",
    "original-transformer": "The 2017 Transformer as a decoder: post-norm, ReLU, sin/cos positions.",
    "decoder-cross-attention": ("The teaching material's decoder layer: masked self-attention, cross-attention to a "
                                "fixed random encoder output, ReLU feed-forward, post-norm; 8 heads of 4, 17,516 "
                                "parameters."),
}


def preset(name: str, **overrides: Any) -> ModelConfig:
    """A named preset, optionally with some fields changed."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}: choose one of {', '.join(PRESETS)}")
    base = PRESETS[name]
    return base.replace(**overrides) if overrides else base
