"""What each recorded step is, read from its hook name: its stage, layer, axes, kind of values and stack.

The words for a step (title, formula, sentence, the line of code) are presentation and live in
``gptviz.present.descriptions``; a trace needs only these facts, to slice, edit and colour its tensors.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Iterable, Optional

from ..config import ModelConfig

# How a step's values should be coloured.
SIGNED = "signed"  # any real number: a diverging scale centred on 0
NONNEGATIVE = "nonnegative"  # 0 and up (a norm's divisor, a loss)
PROBABILITY = "probability"  # 0 to 1
MASKED = "masked"  # signed, with -inf where attention may not look

BTC = ("batch", "pos", "d_model")
BTHD = ("batch", "pos", "head", "d_head")
BHQK = ("batch", "head", "query_pos", "key_pos")
# encoder-decoder models: cross-attention's keys and values run over the encoder's positions
BSHD = ("batch", "enc_pos", "head", "d_head")
BHQS = ("batch", "head", "query_pos", "enc_pos")
BTM = ("batch", "pos", "d_mlp")
BTV = ("batch", "pos", "vocab")
BT1 = ("batch", "pos", "scale")
BTE = ("batch", "pos", "expert")  # a mixture of experts: one value per token and expert

_ATTENTION = {
    "hook_qkv": (("batch", "pos", "qkv"), SIGNED),
    "hook_q": (BTHD, SIGNED), "hook_k": (BTHD, SIGNED), "hook_v": (BTHD, SIGNED),
    "hook_q_normed": (BTHD, SIGNED), "hook_k_normed": (BTHD, SIGNED),  # QK-norm: q and k through each head's norm
    "hook_rot_q": (BTHD, SIGNED), "hook_rot_k": (BTHD, SIGNED),
    "hook_k_rep": (BTHD, SIGNED), "hook_v_rep": (BTHD, SIGNED),  # grouped-query attention: k, v per query head
    "hook_scores_raw": (BHQK, SIGNED), "hook_scores_scaled": (BHQK, SIGNED),
    "hook_scores_capped": (BHQK, SIGNED),  # soft-capped scores (Gemma 2): within ±attn_softcap, centred on 0
    "hook_attn_scores": (BHQK, MASKED), "hook_pattern": (BHQK, PROBABILITY), "hook_z": (BTHD, SIGNED),
    "hook_sink": (("batch", "head", "query_pos", "sink"), PROBABILITY),  # GPT-OSS: the weight the sink takes
}
_NORM = {"hook_scale": (BT1, NONNEGATIVE), "hook_normalized": (BTC, SIGNED), "hook_out": (BTC, SIGNED)}
# every step of a decoder-only GPT: name without "blocks.{l}." -> (stage, axes, kind)
STEPS = {
    "hook_embed": ("embed", BTC, SIGNED),
    "hook_pos_embed": ("embed", BTC, SIGNED),
    "hook_resid_pre": ("residual", BTC, SIGNED),
    **{f"{n}.{part}": ("norm", axes, kind) for n in ("ln1", "ln2", "ln1_post", "ln2_post", "ln_final")
       for part, (axes, kind) in _NORM.items()},
    **{f"attn.{part}": ("attention", axes, kind) for part, (axes, kind) in _ATTENTION.items()},
    "hook_attn_out": ("attention", BTC, SIGNED),
    "hook_resid_mid": ("residual", BTC, SIGNED),
    "mlp.hook_pre": ("mlp", BTM, SIGNED),
    "mlp.hook_pre_linear": ("mlp", BTM, SIGNED),  # a gated MLP's second projection
    "mlp.hook_post": ("mlp", BTM, SIGNED),
    # a mixture of experts (gptviz.model.experts); the router's logits are -inf for an expert switched off
    "mlp.hook_router_logits": ("mlp", BTE, MASKED),
    "mlp.hook_router_probs": ("mlp", BTE, PROBABILITY),
    "mlp.hook_expert_weights": ("mlp", BTE, PROBABILITY),
    "mlp.hook_expert_out": ("mlp", ("batch", "pos", "expert", "d_model"), SIGNED),
    "mlp.hook_shared_gate": ("mlp", ("batch", "pos", "gate"), PROBABILITY),
    "mlp.hook_shared_out": ("mlp", BTC, SIGNED),
    "hook_mlp_out": ("mlp", BTC, SIGNED),
    "hook_resid_post": ("residual", BTC, SIGNED),
    "hook_logits_raw": ("output", BTV, SIGNED),  # before final_softcap's cap (Gemma 2)
    "hook_logits": ("output", BTV, SIGNED),
    "hook_probs": ("loss", BTV, PROBABILITY),
    "hook_loss_per_token": ("loss", ("batch", "pos"), NONNEGATIVE),
    "hook_loss": ("loss", (), NONNEGATIVE),
}
# the steps only an encoder-decoder model has
SEQ2SEQ_STEPS = {
    "hook_enc_embed": ("embed", BTC, SIGNED),
    "hook_enc_pos_embed": ("embed", BTC, SIGNED),
    "hook_enc_out": ("encoder", BTC, SIGNED),
    **{f"{n}.{part}": ("norm", axes, kind) for n in ("ln_cross", "enc_ln_final")
       for part, (axes, kind) in _NORM.items()},
    **{f"cross_attn.{part}": ("cross_attention", axes, kind) for part, (axes, kind) in _ATTENTION.items()
       if part not in ("hook_qkv", "hook_q_normed", "hook_k_normed", "hook_rot_q", "hook_rot_k", "hook_k_rep",
                       "hook_v_rep", "hook_sink", "hook_scores_capped")},
    "hook_cross_out": ("cross_attention", BTC, SIGNED),
    "hook_resid_cross": ("residual", BTC, SIGNED),
}
# cross-attention's keys and values run over the encoder's positions
_CROSS_AXES = {"cross_attn.hook_k": BSHD, "cross_attn.hook_v": BSHD, "cross_attn.hook_scores_raw": BHQS,
               "cross_attn.hook_scores_scaled": BHQS, "cross_attn.hook_attn_scores": BHQS,
               "cross_attn.hook_pattern": BHQS}

_LAYER = re.compile(r"^blocks\.(\d+)\.(.+)$")
_ENC_LAYER = re.compile(r"^enc_blocks\.(\d+)\.(.+)$")


@dataclass(frozen=True)
class StepMeta:
    name: str  # the hook name, e.g. "blocks.0.attn.hook_pattern"
    stage: str  # embed | attention | cross_attention | mlp | residual | norm | encoder | output | loss
    layer: Optional[int]
    axes: tuple[str, ...]
    kind: str  # SIGNED | NONNEGATIVE | PROBABILITY | MASKED
    stack: str = "decoder"  # "encoder" for an encoder-decoder model's encoder steps (enc_blocks.*, hook_enc_*)
    # grouped-query attention: query heads per head of this tensor (keys and values have fewer heads), and the
    # widths of q, k and v in the fused projection (empty when they are equal thirds)
    head_group: int = 1
    qkv_split: tuple[int, ...] = ()

    @property
    def signed(self) -> bool:
        return self.kind in (SIGNED, MASKED)

    @property
    def probability(self) -> bool:
        return self.kind == PROBABILITY

    @property
    def masked(self) -> bool:
        return self.kind == MASKED


def split_name(name: str, cfg: ModelConfig) -> tuple[Optional[int], str, str]:
    """``(layer, rest, stack)``: "blocks.2.attn.hook_q" -> (2, "attn.hook_q", "decoder")."""
    stack = "decoder"
    m = _LAYER.match(name)
    if m is None and cfg.n_enc_layer > 0:
        m = _ENC_LAYER.match(name)
        stack = "encoder" if m else stack
    layer, rest = (int(m.group(1)), m.group(2)) if m else (None, name)
    if layer is None and (rest.startswith("hook_enc_") or rest.startswith("enc_ln_final.")):
        stack = "encoder"
    return layer, rest, stack


def step_meta(name: str, cfg: ModelConfig) -> StepMeta:
    """The facts of one hook name in a model of this config. A name the model cannot have raises ValueError."""
    layer, rest, stack = split_name(name, cfg)
    seq2seq = cfg.n_enc_layer >= 0
    found = STEPS.get(rest) or (SEQ2SEQ_STEPS.get(rest) if seq2seq else None)
    if found is None or (seq2seq and rest == "attn.hook_qkv"):
        raise ValueError(f"{name!r} is not a step gptviz knows")
    stage, axes, kind = found
    axes = _CROSS_AXES.get(rest, axes)
    if stack == "encoder":  # the encoder's steps run over source positions
        axes = tuple("enc_pos" if a == "pos" else a for a in axes)
    group = 1
    split: tuple[int, ...] = ()
    if getattr(cfg, "n_kv_head", cfg.n_head) != cfg.n_head:
        if rest in ("attn.hook_k", "attn.hook_v", "attn.hook_k_normed", "attn.hook_rot_k"):
            group = cfg.n_head // cfg.n_kv_head
        if rest == "attn.hook_qkv":
            split = (cfg.d_attn, cfg.d_kv, cfg.d_kv)
    return StepMeta(name, stage, layer, axes, kind, stack, group, split)


@lru_cache(maxsize=32)
def _known(cfg: ModelConfig) -> dict[str, StepMeta]:
    """This config's step facts found so far (filled by ``step_metas``): a config is hashable and frozen."""
    return {}


def step_metas(names: Iterable[str], cfg: ModelConfig) -> dict[str, StepMeta]:
    """``step_meta`` of each name, kept per config: a trace asks for its ~100 steps' facts on every run, and they
    depend on the name and the config only (a name the model cannot have still raises ValueError)."""
    known = _known(cfg)
    out = {}
    for name in names:
        meta = known.get(name)
        if meta is None:
            meta = known[name] = step_meta(name, cfg)
        out[name] = meta
    return out
