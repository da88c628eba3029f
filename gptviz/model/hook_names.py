"""Hook names in one place: ``act_name("pattern", 0)`` is ``"blocks.0.attn.hook_pattern"``, and back again.

A hook is named as in TransformerLens (``utils.get_act_name``): a *step* (``"pattern"``, ``"resid_pre"``,
``"embed"`` …), the *layer* it is in (none for the steps outside every block), the *part* of the block it
belongs to (``"attn"``, ``"cross_attn"``, ``"mlp"``, a norm ``"ln1"``, ``"ln2"``, ``"ln_cross"``, or
``"ln_final"``), and whether it is in the encoder stack of an encoder-decoder model::

    act_name("embed")                      -> "hook_embed"
    act_name("resid_pre", 2)               -> "blocks.2.hook_resid_pre"
    act_name("pattern", 0)                 -> "blocks.0.attn.hook_pattern"
    act_name("q_normed", 0)                -> "blocks.0.attn.hook_q_normed"   (QK-norm's normalised queries)
    act_name("pattern", 0, "cross_attn")   -> "blocks.0.cross_attn.hook_pattern"
    act_name("pre", 1)                     -> "blocks.1.mlp.hook_pre"
    act_name("scale", 0, "ln1")            -> "blocks.0.ln1.hook_scale"
    act_name("out", part="ln_final")       -> "ln_final.hook_out"
    act_name("z", 0, encoder=True)         -> "enc_blocks.0.attn.hook_z"
    act_name("enc_out")                    -> "hook_enc_out"

``parse_act_name`` reads a name back into its ``Place``; ``attention_steps`` and ``act_names`` say which
steps a model of a given config records, in the order it computes them.
"""
from __future__ import annotations

import operator
import re
from typing import NamedTuple, Optional

# Steps outside every block: the hook is "hook_" + step.
GLOBAL_STEPS = ("embed", "pos_embed", "logits_raw", "logits", "probs", "loss_per_token", "loss",
                "enc_embed", "enc_pos_embed", "enc_out")
# One block's residual stream and its sublayers' outputs: "blocks.{layer}.hook_" + step.
BLOCK_STEPS = ("resid_pre", "attn_out", "resid_mid", "cross_out", "resid_cross", "mlp_out", "resid_post")
# The steps inside one attention, in the order they are computed.
ATTENTION_STEPS = ("qkv", "q", "k", "v", "q_normed", "k_normed", "rot_q", "rot_k", "k_rep", "v_rep", "scores_raw",
                   "scores_scaled", "scores_capped", "attn_scores", "sink", "pattern", "z")
CROSS_ATTENTION_STEPS = tuple(s for s in ATTENTION_STEPS if s not in ("qkv", "q_normed", "k_normed", "rot_q", "rot_k",
                                                                      "k_rep", "v_rep", "scores_capped", "sink"))
DENSE_MLP_STEPS = ("pre", "pre_linear", "post")
# A mixture of experts' steps (gptviz.model.experts), in the order they are computed; the shared expert's two only
# with one (Qwen2-MoE).
EXPERT_STEPS = ("router_logits", "router_probs", "expert_weights", "expert_out", "shared_gate", "shared_out")
MLP_STEPS = DENSE_MLP_STEPS + EXPERT_STEPS
NORM_STEPS = ("scale", "normalized", "out")
ATTENTIONS = ("attn", "cross_attn")
BLOCK_NORMS = ("ln1", "ln2", "ln_cross", "ln1_post", "ln2_post")  # *_post: a norm of a sublayer's output
NORMS = BLOCK_NORMS + ("ln_final",)
PARTS = ATTENTIONS + ("mlp",) + NORMS
# What only a decoder block has (cross-attention); an encoder block is a GPT block without the causal mask.
DECODER_ONLY = ("cross_out", "resid_cross", "cross_attn", "ln_cross")

_STEPS_OF_PART = {"attn": ATTENTION_STEPS, "cross_attn": CROSS_ATTENTION_STEPS, "mlp": MLP_STEPS,
                  **{n: NORM_STEPS for n in NORMS}}


class Place(NamedTuple):
    """Where a hook is: ``act_name(p.step, p.layer, p.part, encoder=p.encoder)`` is its name."""
    step: str
    layer: Optional[int] = None
    part: Optional[str] = None
    encoder: bool = False


def _where(layer, part, encoder: bool) -> str:
    bits = (["the encoder"] if encoder else []) + ([f"layer {layer}"] if layer is not None else []) + \
           ([f"part {part!r}"] if part is not None else [])
    return " in " + ", ".join(bits) if bits else ""


def act_name(step: str, layer: Optional[int] = None, part: Optional[str] = None, *, encoder: bool = False) -> str:
    """The hook name of ``step`` in ``layer`` (and ``part`` of it; attention and MLP steps find their own part,
    a norm's ``scale``/``normalized``/``out`` need the norm). ``encoder=True``: in the encoder stack.
    Raises ``ValueError`` naming the place when there is no such hook."""
    where = _where(layer, part, encoder)
    if not isinstance(step, str):
        raise ValueError(f"a hook step is a string such as 'pattern', not {step!r}{where}")
    if step in GLOBAL_STEPS:
        if layer is not None or part is not None or encoder:
            raise ValueError(f"hook {step!r} is outside every layer: give it no layer, part or encoder{where}")
        return "hook_" + step
    if part is None:
        part = "attn" if step in ATTENTION_STEPS else "mlp" if step in MLP_STEPS else None
        if part is None and step in NORM_STEPS:
            raise ValueError(f"hook step {step!r}{where} belongs to a norm: say which, part="
                             + ", ".join(map(repr, NORMS)))
    if part is not None and part not in PARTS:
        raise ValueError(f"no part {part!r} of a block{_where(layer, None, encoder)} (hook step {step!r}): "
                         f"the parts are {', '.join(PARTS)}")
    if encoder and (step in DECODER_ONLY or part in DECODER_ONLY):
        raise ValueError(f"an encoder block has no cross-attention: no hook {step!r}{where}")
    if part is None and step not in BLOCK_STEPS:
        raise ValueError(f"no hook step {step!r}{where}: the steps are {', '.join(GLOBAL_STEPS + BLOCK_STEPS)}, "
                         f"and those of a part ({', '.join(PARTS)})")
    if part is not None and step not in _STEPS_OF_PART[part]:
        raise ValueError(f"no hook step {step!r}{where}: {part} has {', '.join(_STEPS_OF_PART[part])}")
    if encoder and step == "qkv":
        raise ValueError(f"the encoder's attention has separate Q, K and V projections: no hook 'qkv'{where}")
    prefix = "enc_" if encoder else ""
    if part == "ln_final":
        if layer is not None:
            raise ValueError(f"the final norm is outside every layer: no layer for hook {step!r}{where}")
        return f"{prefix}ln_final.hook_{step}"
    if layer is None:
        raise ValueError(f"hook step {step!r}{where} is in a block: give its layer")
    try:
        if isinstance(layer, bool):
            raise TypeError
        layer = operator.index(layer)
    except TypeError:
        raise ValueError(f"a layer is a whole number, not {layer!r} (hook step {step!r})") from None
    if layer < 0:
        raise ValueError(f"no layer {layer}: layers count from 0 (hook step {step!r})")
    block = f"{prefix}blocks.{layer}"
    return f"{block}.hook_{step}" if part is None else f"{block}.{part}.hook_{step}"


_NAME = re.compile(r"(?:(?P<enc_block>enc_)?blocks\.(?P<layer>\d+)\.)?(?:(?P<enc_part>enc_)?(?P<part>\w+)\.)?"
                   r"hook_(?P<step>\w+)")


def parse_act_name(name: str) -> Place:
    """The ``Place`` of a hook name: ``parse_act_name("blocks.0.ln1.hook_out") == Place("out", 0, "ln1", False)``.
    Raises ``ValueError`` for a name no model here records."""
    m = _NAME.fullmatch(name) if isinstance(name, str) else None
    if m is None:
        raise ValueError(f"{name!r} is not a hook name (such as 'blocks.0.attn.hook_pattern')")
    layer = None if m["layer"] is None else int(m["layer"])
    if m["enc_part"] and layer is not None:
        raise ValueError(f"{name!r} is not a hook name")
    place = Place(m["step"], layer, m["part"], bool(m["enc_block"] or m["enc_part"]))
    try:
        made = act_name(place.step, place.layer, place.part, encoder=place.encoder)
    except ValueError as exc:
        raise ValueError(f"{name!r} is not a hook name: {exc}") from None
    if made != name:
        raise ValueError(f"{name!r} is not a hook name (did you mean {made!r}?)")
    return place


# --------------------------------------------------------------------------- what a config records
def attention_steps(cfg, part: str = "attn", *, encoder: bool = False) -> tuple[str, ...]:
    """The steps one attention of a model with config ``cfg`` records, in order: GPT's self-attention has one
    ``qkv`` projection, an encoder-decoder model's attentions separate ones; only self-attention rotates (RoPE),
    only grouped-query attention (fewer key/value heads than query heads) repeats keys and values, and only a
    model with QK-norm (``qk_norm``) normalises each head's queries and keys, and only one with ``attn_softcap``
    soft-caps its scores."""
    if part not in ATTENTIONS:
        raise ValueError(f"no attention {part!r}: the attentions are {', '.join(ATTENTIONS)}")
    if part == "cross_attn" and (encoder or cfg.n_enc_layer < 0):
        raise ValueError("only an encoder-decoder model's decoder blocks have cross-attention")
    if encoder and cfg.n_enc_layer < 1:
        raise ValueError(f"this model has no encoder blocks (n_enc_layer={cfg.n_enc_layer})")
    if part == "cross_attn":
        return CROSS_ATTENTION_STEPS
    skip = {"rot_q", "rot_k"} if cfg.pos_encoding != "rope" else set()
    if not getattr(cfg, "qk_norm", False):
        skip |= {"q_normed", "k_normed"}
    if getattr(cfg, "attn_softcap", None) is None:
        skip.add("scores_capped")
    if cfg.n_enc_layer >= 0:
        skip.add("qkv")
    if getattr(cfg, "n_kv_head", cfg.n_head) == cfg.n_head:
        skip |= {"k_rep", "v_rep"}
    if not getattr(cfg, "attn_sinks", False):
        skip.add("sink")
    return tuple(s for s in ATTENTION_STEPS if s not in skip)


def mlp_steps(cfg, layer: Optional[int] = None) -> tuple[str, ...]:
    """The steps one MLP of a model with config ``cfg`` records, in order (``pre_linear`` only when it is gated). A
    layer whose MLP is a mixture of experts (``cfg.is_moe_layer(layer)``) records the router's and the experts'
    steps instead (the shared expert's only when it has one); without a ``layer``, a dense layer's."""
    if layer is not None and getattr(cfg, "n_expert", 0) > 0 and cfg.is_moe_layer(layer):
        shared = {"shared_gate", "shared_out"} if cfg.d_shared_expert else set()
        return tuple(s for s in EXPERT_STEPS if s not in {"shared_gate", "shared_out"} - shared)
    return DENSE_MLP_STEPS if getattr(cfg, "gated_mlp", False) else ("pre", "post")


def _block_act_names(cfg, layer: int, encoder: bool) -> list[str]:
    pre = cfg.norm_placement == "pre"
    name = lambda step, part=None: act_name(step, layer, part, encoder=encoder)
    out = [name("resid_pre")]
    sublayers = [("ln1", [name(s, "attn") for s in attention_steps(cfg, "attn", encoder=encoder)],
                  "attn_out", "resid_mid")]
    if cfg.n_enc_layer >= 0 and not encoder:
        sublayers.append(("ln_cross", [name(s, "cross_attn") for s in CROSS_ATTENTION_STEPS],
                          "cross_out", "resid_cross"))
    if not cfg.attn_only:
        sublayers.append(("ln2", [name(s, "mlp") for s in mlp_steps(cfg, None if encoder else layer)], "mlp_out",
                          "resid_post"))
    where = getattr(cfg, "sublayer_norms", "before")  # Gemma 2 and 3: "both" (ln1, ln1_post …); OLMo 2: "after"
    for norm, inner, sub_out, resid in sublayers:
        norm_names = [name(s, norm) for s in NORM_STEPS]
        if pre and norm != "ln_cross" and where != "before":
            post_names = [name(s, norm + "_post") for s in NORM_STEPS]
            out += (norm_names if where == "both" else []) + inner + post_names + [name(sub_out)]
        else:
            out += (norm_names + inner + [name(sub_out)]) if pre else (inner + [name(sub_out)] + norm_names)
        out.append(name(resid))
    if cfg.attn_only:
        out.append(name("resid_post"))
    return out


def act_names(cfg, *, targets: bool = False) -> list[str]:
    """Every hook name a trace of a model with config ``cfg`` records, in the order they are computed
    (``targets=True``: with the loss's steps)."""
    positions = cfg.pos_encoding in ("learned", "sinusoidal")
    final = [act_name(s, part="ln_final") for s in NORM_STEPS] if cfg.norm_placement == "pre" else []
    out = []
    if cfg.n_enc_layer == 0:
        out.append(act_name("enc_out"))
    elif cfg.n_enc_layer > 0:
        out += [act_name("enc_embed")] + ([act_name("enc_pos_embed")] if positions else [])
        for layer in range(cfg.n_enc_layer):
            out += _block_act_names(cfg, layer, encoder=True)
        if final:
            out += [act_name(s, part="ln_final", encoder=True) for s in NORM_STEPS]
        out.append(act_name("enc_out"))
    out += [act_name("embed")] + ([act_name("pos_embed")] if positions else [])
    for layer in range(cfg.n_layer):
        out += _block_act_names(cfg, layer, encoder=False)
    capped = getattr(cfg, "final_softcap", None) is not None  # Gemma 2: the unembedding's output, then capped
    out += final + ([act_name("logits_raw")] if capped else []) + [act_name("logits")]
    if targets:
        out += [act_name(s) for s in ("probs", "loss_per_token", "loss")]
    return out
