"""How each Hugging Face model family maps onto gptviz: its ``config.json`` onto a ``ModelConfig`` (every size
read, never guessed), the tensors it needs with their shapes, and their renaming (and regrouping) into gptviz's
GPT-2 names. ``gptviz.model.pretrained`` reads the files; this module only knows the families.

Families: ``gpt2``; ``llama`` and ``mistral`` (RMSNorm, rotary, grouped-query attention, SwiGLU); ``qwen2`` (as
Llama, with q/k/v biases and none on the output projection); ``qwen3`` (as Llama, with QK-norm: an RMSNorm over
each head's queries and keys before rotary, its own ``head_dim``, and Qwen2's sliding window); ``gpt_neox``
(Pythia: parallel attention and MLP, partial rotary, a fused projection laid out head by head); ``gemma`` (Gemma 1:
Llama's blocks with GeGLU, its own ``head_dim``, RMSNorm gains stored as ``w`` and applied as ``1 + w``, and the
embedding multiplied by √hidden_size, held untied as explained at ``_gemma_convert``); ``phi3`` (Phi-3: Llama's
blocks with fused projections, in a file of its own, ``gptviz.model.hf_phi3``). Gemma 2, Gemma 3's text model and
OLMo 2 are in ``gptviz.model.hf_gemma_olmo``, registered here at the end; the mixtures of experts in
``gptviz.model.hf_moe`` (``gptviz.model.hf_registry`` has them all).
"""
from __future__ import annotations

from typing import Callable, Optional

import torch

from ..config import ModelConfig
from .hf_config_fields import _bad, _flag, _float, _int, _text, heads
from .hf_family_base import MAX_CONTEXT as MAX_CONTEXT  # re-exported: where the tests look for it
from .hf_family_base import Family, _activation, _build, _context
from .hf_family_base import in_config_terms as in_config_terms  # re-exported: the loader's
from .hf_gemma_olmo import FAMILIES as _GEMMA_OLMO
from .hf_gpt2 import gpt2_state_dict_to_gptviz
from .hf_phi3 import PHI3_NAMES, phi3_config, phi3_convert, phi3_note, phi3_shapes
from .hf_rope import NAMES as _ROPE_NAMES
from .hf_rope import reach, read_rope


def _mistral_window(d: dict, n_layer: int) -> dict:
    """Mistral's sliding window, on every layer, as transformers 5 runs it: ``MistralConfig.sliding_window`` (4096
    where config.json names none, none where it says null), one sliding-window mask for every layer
    (``MistralModel.forward``); Mistral reads neither ``use_sliding_window`` nor ``layer_types``."""
    return {"sliding_window": _int(d, "sliding_window", default=None if "sliding_window" in d else 4096, high=None)}


_LAYER_TYPES = {"full_attention": False, "attention": False, "sliding_attention": True}  # "attention": a legacy name


def _qwen2_window(d: dict, n_layer: int) -> dict:
    """Qwen2's sliding window, as transformers 5's ``Qwen2Config`` and ``Qwen2Model`` have it: a window only with
    ``use_sliding_window`` true (``sliding_window``: 4096 where config.json names none, none where it says null), on
    the layers ``layer_types`` calls "sliding_attention", by default the layers i >= ``max_window_layers`` (28 by
    default)."""
    window = None
    if _flag(d, "use_sliding_window", False):  # Qwen2Config: sliding_window = sliding_window if use_sliding_window
        window = _int(d, "sliding_window", default=None if "sliding_window" in d else 4096, high=None)
    types = d.get("layer_types")
    if types is None:
        first = _int(d, "max_window_layers", default=28, low=0, high=None) if window is not None else n_layer
        layers = tuple(range(first, n_layer))
    else:
        if not isinstance(types, list) or len(types) != n_layer or not all(isinstance(t, str) and t in _LAYER_TYPES
                                                                           for t in types):
            raise _bad("layer_types", types, f"must be a list of {n_layer} (num_hidden_layers) layer types, each "
                                             "'full_attention' or 'sliding_attention'")
        layers = tuple(i for i, t in enumerate(types) if _LAYER_TYPES[t])
        if layers and window is None:
            raise ValueError("config.json's layer_types has sliding_attention layers but no sliding window (it needs "
                             "use_sliding_window=true and a sliding_window): transformers would refuse it too")
    if window is None or not layers:
        return {}
    return {"sliding_window": window, "sliding_layers": None if len(layers) == n_layer else layers}


_GPT2_NAMES = {"block_size": "n_positions", "d_mlp": "n_inner", "ln_eps": "layer_norm_epsilon",
               "init_std": "initializer_range", "d_head": "n_embd / n_head"}
_LLAMA_NAMES = {"block_size": "max_position_embeddings", "n_layer": "num_hidden_layers",
                "n_head": "num_attention_heads", "n_kv_head": "num_key_value_heads", "n_embd": "hidden_size",
                "d_mlp": "intermediate_size", "d_head": "head_dim (or hidden_size / num_attention_heads)",
                "rope_base": "rope_theta", "rotary_pct": "partial_rotary_factor", "ln_eps": "rms_norm_eps",
                "init_std": "initializer_range", "sliding_layers": "layer_types (or max_window_layers)",
                **_ROPE_NAMES}
_NEOX_NAMES = {**_LLAMA_NAMES, "d_head": "hidden_size / num_attention_heads", "ln_eps": "layer_norm_eps",
               "rotary_pct": "rotary_pct (or partial_rotary_factor)"}
_GEMMA_NAMES = {**_LLAMA_NAMES, "d_head": "head_dim"}
_QWEN3_NAMES = _GEMMA_NAMES  # head_dim read, never worked out


def _gpt2_config(d: dict) -> ModelConfig:
    for flag in ("scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn", "add_cross_attention"):
        if _flag(d, flag, False):
            raise ValueError(f"{flag}=true is not supported: gptviz computes attention as GPT-2 does")
    if not _flag(d, "scale_attn_weights", True):
        raise ValueError("scale_attn_weights=false is not supported: gptviz always divides by √d_head")
    C = _int(d, "n_embd")
    return _build(_GPT2_NAMES, vocab_size=_int(d, "vocab_size"), block_size=_context(d, "n_positions", "n_ctx"),
                  n_layer=_int(d, "n_layer"), n_head=_int(d, "n_head"), n_embd=C,
                  d_mlp=_int(d, "n_inner", default=None) or 4 * C,
                  activation=_activation(d, "activation_function", "gelu_new"),
                  ln_eps=_float(d, "layer_norm_epsilon", default=1e-5, above=0.0), bias=True, qkv_bias=True,
                  tie_weights=_flag(d, "tie_word_embeddings", True),
                  init_std=_float(d, "initializer_range", default=0.02, above=0.0))


def _llama_config(d: dict, qwen: bool = False, names: dict[str, str] = _LLAMA_NAMES,
                  window: Optional[Callable[[dict, int], dict]] = None, qk_norm: bool = False) -> ModelConfig:
    """Llama, and Mistral, Qwen2 and Qwen3 (``window``: the family's reader of its sliding window, a mask on some or
    all layers; ``qwen``: biases on q, k and v, none on the output projection; ``qk_norm``: Qwen3's QK-norm)."""
    if _flag(d, "mlp_bias", False):
        raise ValueError("mlp_bias=true is not supported: gptviz's Llama-family MLP has no biases")
    rope = read_rope(d)
    C, nh, nkv, d_head = heads(d)
    attn_bias = True if qwen else _flag(d, "attention_bias", False)
    n_layer = _int(d, "num_hidden_layers")
    return _build(
        names, vocab_size=_int(d, "vocab_size"), block_size=reach(_context(d, "max_position_embeddings"), rope,
                                                                  MAX_CONTEXT),
        **(window(d, n_layer) if window else {}), n_layer=n_layer, n_head=nh, n_kv_head=nkv, n_embd=C,
        d_head=d_head or C // nh, d_mlp=_int(d, "intermediate_size"), norm="rmsnorm", pos_encoding="rope",
        **rope, activation=_activation(d, default="silu"), gated_mlp=True, bias=False,
        qkv_bias=attn_bias, attn_proj_bias=False if qwen else attn_bias,
        tie_weights=_flag(d, "tie_word_embeddings", False), ln_eps=_float(d, "rms_norm_eps", default=1e-6, above=0.0),
        init_std=_float(d, "initializer_range", default=0.02, above=0.0), qk_norm=qk_norm)


def _qwen3_config(d: dict) -> ModelConfig:
    """Qwen3 (``model_type`` "qwen3", transformers' ``Qwen3ForCausalLM``): Llama's blocks with QK-norm (``q_norm`` and
    ``k_norm``, RMSNorms of head_dim with rms_norm_eps, on each head's queries and keys before rotary), its own
    ``head_dim`` (read, never worked out: Qwen3Config's default, 128, is not hidden_size / heads),
    ``attention_bias`` on q, k, v and o alike (off by default; Qwen2's q/k/v biases are always on), and Qwen2's
    sliding window. Its MLP never has biases: an ``mlp_bias`` key is ignored, as Qwen3MLP ignores it."""
    d = {k: v for k, v in d.items() if k != "mlp_bias"} | {"head_dim": _int(d, "head_dim")}
    return _llama_config(d, names=_QWEN3_NAMES, window=_qwen2_window, qk_norm=True)


def _gemma_activation(d: dict) -> str:
    """Gemma's MLP activation, as the ``hidden_act`` name transformers runs. transformers reads ``hidden_act``,
    where "gelu" stands for its tanh approximation (Gemma's first configs said "gelu" for the approximation they
    were trained with); transformers 4.38-4.4x read ``hidden_activation`` instead when it is set. Where the two
    keys name different functions, gptviz refuses rather than pick one."""
    act = _text(d, "hidden_act") or "gelu_pytorch_tanh"
    act = "gelu_pytorch_tanh" if act == "gelu" else act  # the name transformers runs, as hidden_act
    named = _text(d, "hidden_activation")
    if named is not None and _activation(d, "hidden_activation") != _activation({"hidden_act": act}):
        raise ValueError(f"hidden_act={d.get('hidden_act')!r} and hidden_activation={named!r} name different "
                         "activations (transformers' versions differ on which one Gemma uses): keep one of them")
    return act


def _gemma_config(d: dict) -> ModelConfig:
    """Gemma 1 (``model_type`` "gemma"; Gemma 2 and 3 are other model types: ``gptviz.model.hf_gemma_olmo``)."""
    if _flag(d, "use_bidirectional_attention", False):
        raise ValueError("use_bidirectional_attention=true is not supported: gptviz computes causal attention")
    for key in ("query_pre_attn_scalar", "attn_logit_softcapping", "final_logit_softcapping"):
        if d.get(key) is not None:
            raise ValueError(f"{key} is Gemma 2's: this config says model_type 'gemma' (Gemma 1), which has none "
                             "(a Gemma 2 folder's config.json says model_type 'gemma2')")
    if not _flag(d, "tie_word_embeddings", True):
        raise ValueError("tie_word_embeddings=false is not supported for gemma: gptviz opens Gemma with its "
                         "unembedding tied to its embedding table, as every Gemma 1 model is")
    # head_dim is read, never worked out: Gemma's is its own (256 in the released models, not hidden/heads)
    d = {**d, "head_dim": _int(d, "head_dim"), "hidden_act": _gemma_activation(d), "tie_word_embeddings": False}
    return _llama_config(d, names=_GEMMA_NAMES)


def _neox_config(d: dict) -> ModelConfig:
    rope = read_rope(d, pct_default=0.25)  # GPT-NeoX's default, as transformers has it (Pythia's rotary_pct)
    attn_bias = _flag(d, "attention_bias", True)
    return _build(
        _NEOX_NAMES, vocab_size=_int(d, "vocab_size"),
        block_size=reach(_context(d, "max_position_embeddings"), rope, MAX_CONTEXT),
        n_layer=_int(d, "num_hidden_layers"), n_head=_int(d, "num_attention_heads"), n_embd=_int(d, "hidden_size"),
        d_mlp=_int(d, "intermediate_size"), norm="layernorm", pos_encoding="rope", **rope,
        parallel_attn=_flag(d, "use_parallel_residual", True), activation=_activation(d), bias=True,
        qkv_bias=attn_bias, attn_proj_bias=attn_bias, tie_weights=_flag(d, "tie_word_embeddings", False),
        ln_eps=_float(d, "layer_norm_eps", default=1e-5, above=0.0),
        init_std=_float(d, "initializer_range", default=0.02, above=0.0))


# --------------------------------------------------------------------------- the tensors each family needs
def _gpt2_shapes(c: ModelConfig) -> dict[str, tuple]:
    C, V = c.n_embd, c.vocab_size
    s = {"wte.weight": (V, C), "wpe.weight": (c.block_size, C), "ln_f.weight": (C,), "ln_f.bias": (C,)}
    for i in range(c.n_layer):
        p = f"h.{i}."
        s.update({p + "ln_1.weight": (C,), p + "ln_1.bias": (C,), p + "ln_2.weight": (C,), p + "ln_2.bias": (C,),
                  p + "attn.c_attn.weight": (C, 3 * C), p + "attn.c_attn.bias": (3 * C,),
                  p + "attn.c_proj.weight": (C, C), p + "attn.c_proj.bias": (C,),
                  p + "mlp.c_fc.weight": (C, c.d_mlp), p + "mlp.c_fc.bias": (c.d_mlp,),
                  p + "mlp.c_proj.weight": (c.d_mlp, C), p + "mlp.c_proj.bias": (C,)})
    if not c.tie_weights:
        s["lm_head.weight"] = (V, C)
    return s


def _gpt2_convert(get, c: ModelConfig) -> dict:
    names = _gpt2_shapes(c)
    return gpt2_state_dict_to_gptviz({n: get(n) for n in names}, c.n_layer)


def _llama_shapes(c: ModelConfig) -> dict[str, tuple]:
    C, V, hs = c.n_embd, c.vocab_size, c.d_head
    s = {"model.embed_tokens.weight": (V, C), "model.norm.weight": (C,)}
    for i in range(c.n_layer):
        p = f"model.layers.{i}."
        s.update({p + "input_layernorm.weight": (C,), p + "post_attention_layernorm.weight": (C,),
                  p + "self_attn.q_proj.weight": (c.n_head * hs, C), p + "self_attn.k_proj.weight": (c.d_kv, C),
                  p + "self_attn.v_proj.weight": (c.d_kv, C), p + "self_attn.o_proj.weight": (C, c.d_attn),
                  p + "mlp.gate_proj.weight": (c.d_mlp, C), p + "mlp.up_proj.weight": (c.d_mlp, C),
                  p + "mlp.down_proj.weight": (C, c.d_mlp)})
        if c.qkv_bias:
            s.update({p + "self_attn.q_proj.bias": (c.d_attn,), p + "self_attn.k_proj.bias": (c.d_kv,),
                      p + "self_attn.v_proj.bias": (c.d_kv,)})
        if c.attn_proj_bias:
            s[p + "self_attn.o_proj.bias"] = (C,)
        if c.qk_norm:  # Qwen3: one gain of head_dim for every head's queries, one for its keys
            s.update({p + "self_attn.q_norm.weight": (hs,), p + "self_attn.k_norm.weight": (hs,)})
    if not c.tie_weights:
        s["lm_head.weight"] = (V, C)
    return s


def _llama_convert(get, c: ModelConfig) -> dict:
    """Llama, Mistral, Qwen2 and Qwen3 names -> gptviz's: q, k and v stacked into ``c_attn`` (in that order, which
    is how gptviz splits them), the gate, up and down projections into ``c_gate``, ``c_fc`` and ``c_proj``, and
    Qwen3's QK-norm gains kept by their own names (``attn.q_norm``, ``attn.k_norm``)."""
    out = {"transformer.wte.weight": get("model.embed_tokens.weight"),
           "transformer.ln_f.weight": get("model.norm.weight")}
    for i in range(c.n_layer):
        p, q = f"model.layers.{i}.", f"transformer.h.{i}."
        a = p + "self_attn."
        out[q + "ln_1.weight"] = get(p + "input_layernorm.weight")
        out[q + "ln_2.weight"] = get(p + "post_attention_layernorm.weight")
        out[q + "attn.c_attn.weight"] = torch.cat([get(a + f"{w}_proj.weight") for w in "qkv"])
        if c.qkv_bias:
            out[q + "attn.c_attn.bias"] = torch.cat([get(a + f"{w}_proj.bias") for w in "qkv"])
        out[q + "attn.c_proj.weight"] = get(a + "o_proj.weight")
        if c.attn_proj_bias:
            out[q + "attn.c_proj.bias"] = get(a + "o_proj.bias")
        if c.qk_norm:
            out[q + "attn.q_norm.weight"] = get(a + "q_norm.weight")
            out[q + "attn.k_norm.weight"] = get(a + "k_norm.weight")
        out[q + "mlp.c_gate.weight"] = get(p + "mlp.gate_proj.weight")
        out[q + "mlp.c_fc.weight"] = get(p + "mlp.up_proj.weight")
        out[q + "mlp.c_proj.weight"] = get(p + "mlp.down_proj.weight")
    out["lm_head.weight"] = out["transformer.wte.weight"] if c.tie_weights else get("lm_head.weight")
    return out


def _gemma_shapes(c: ModelConfig) -> dict[str, tuple]:
    """Llama's tensors without ``lm_head.weight``: Gemma's unembedding is its embedding table."""
    return {k: v for k, v in _llama_shapes(c).items() if k != "lm_head.weight"}


_GEMMA_NORMS = ("input_layernorm.weight", "post_attention_layernorm.weight")


def _gemma_convert(get, c: ModelConfig) -> dict:
    """Gemma names -> gptviz's, as Llama's, with Gemma's two differences made exact in float32:

    - its RMSNorm multiplies by ``1 + w`` (worked in float32): the stored ``w`` becomes the gain ``1 + w``;
    - it multiplies the looked-up embeddings by √hidden_size (a float32 scalar here, as transformers makes it for
      float32 weights) while its unembedding is the unscaled table. gptviz's model holds the two apart: ``wte`` is
      the table times √hidden_size, so the embedding step is still a plain lookup of the rows the residual stream
      receives (every value equal to transformers' ``table[x] * √hidden_size``), and ``lm_head`` is the stored
      table itself; hence ``tie_weights=False`` and one more V × C matrix held in memory."""
    table = get("model.embed_tokens.weight")

    def read(name: str) -> torch.Tensor:
        if name == "model.embed_tokens.weight":
            return table
        t = get(name)
        return 1.0 + t if name == "model.norm.weight" or name.endswith(_GEMMA_NORMS) else t

    out = _llama_convert(read, c.replace(tie_weights=True))  # tied here only so it reads no lm_head.weight
    out["transformer.wte.weight"] = table * torch.tensor(c.n_embd ** 0.5, dtype=table.dtype)
    out["lm_head.weight"] = table
    return out


def _neox_shapes(c: ModelConfig) -> dict[str, tuple]:
    C, V = c.n_embd, c.vocab_size
    s = {"gpt_neox.embed_in.weight": (V, C), "gpt_neox.final_layer_norm.weight": (C,),
         "gpt_neox.final_layer_norm.bias": (C,)}
    for i in range(c.n_layer):
        p = f"gpt_neox.layers.{i}."
        for n in ("input_layernorm", "post_attention_layernorm"):
            s.update({p + n + ".weight": (C,), p + n + ".bias": (C,)})
        s.update({p + "attention.query_key_value.weight": (3 * c.d_attn, C),
                  p + "attention.dense.weight": (C, c.d_attn),
                  p + "mlp.dense_h_to_4h.weight": (c.d_mlp, C), p + "mlp.dense_h_to_4h.bias": (c.d_mlp,),
                  p + "mlp.dense_4h_to_h.weight": (C, c.d_mlp), p + "mlp.dense_4h_to_h.bias": (C,)})
        if c.qkv_bias:
            s[p + "attention.query_key_value.bias"] = (3 * c.d_attn,)
        if c.attn_proj_bias:
            s[p + "attention.dense.bias"] = (C,)
    if not c.tie_weights:
        s["embed_out.weight"] = (V, C)
    return s


def _neox_convert(get, c: ModelConfig) -> dict:
    """GPT-NeoX names -> gptviz's. NeoX's fused projection is laid out head by head (q, k, v of head 0, then of
    head 1 …); gptviz's is all queries, then all keys, then all values, so the rows are regrouped."""
    nh, hs = c.n_head, c.d_head
    regroup = lambda t: t.reshape(nh, 3, hs, *t.shape[1:]).transpose(0, 1).reshape(3 * nh * hs, *t.shape[1:])
    out = {"transformer.wte.weight": get("gpt_neox.embed_in.weight"),
           "transformer.ln_f.weight": get("gpt_neox.final_layer_norm.weight"),
           "transformer.ln_f.bias": get("gpt_neox.final_layer_norm.bias")}
    for i in range(c.n_layer):
        p, q = f"gpt_neox.layers.{i}.", f"transformer.h.{i}."
        for src, dst in (("input_layernorm", "ln_1"), ("post_attention_layernorm", "ln_2")):
            out[q + dst + ".weight"], out[q + dst + ".bias"] = get(p + src + ".weight"), get(p + src + ".bias")
        out[q + "attn.c_attn.weight"] = regroup(get(p + "attention.query_key_value.weight"))
        if c.qkv_bias:
            out[q + "attn.c_attn.bias"] = regroup(get(p + "attention.query_key_value.bias"))
        out[q + "attn.c_proj.weight"] = get(p + "attention.dense.weight")
        if c.attn_proj_bias:
            out[q + "attn.c_proj.bias"] = get(p + "attention.dense.bias")
        for src, dst in (("dense_h_to_4h", "c_fc"), ("dense_4h_to_h", "c_proj")):
            out[q + f"mlp.{dst}.weight"] = get(p + f"mlp.{src}.weight")
            out[q + f"mlp.{dst}.bias"] = get(p + f"mlp.{src}.bias")
    out["lm_head.weight"] = out["transformer.wte.weight"] if c.tie_weights else get("embed_out.weight")
    return out


FAMILIES: dict[str, Family] = {
    "gpt2": Family(_gpt2_config, _gpt2_shapes, _gpt2_convert, names=_GPT2_NAMES),
    "llama": Family(_llama_config, _llama_shapes, _llama_convert, names=_LLAMA_NAMES),
    "mistral": Family(lambda d: _llama_config(d, window=_mistral_window), _llama_shapes, _llama_convert,
                      names=_LLAMA_NAMES),
    "qwen2": Family(lambda d: _llama_config(d, qwen=True, window=_qwen2_window), _llama_shapes, _llama_convert,
                    names=_LLAMA_NAMES),
    "qwen3": Family(_qwen3_config, _llama_shapes, _llama_convert, names=_QWEN3_NAMES),
    "gpt_neox": Family(_neox_config, _neox_shapes, _neox_convert, names=_NEOX_NAMES),
    "gemma": Family(_gemma_config, _gemma_shapes, _gemma_convert, lambda c: (
        f"Gemma multiplies each token's embedding by √{c.n_embd} before the first block and unembeds with its table "
        f"unscaled: here W_E is that table times √{c.n_embd} and W_U the table itself, so they are shown untied."),
        names=_GEMMA_NAMES),
    "phi3": Family(phi3_config, phi3_shapes, phi3_convert, phi3_note, names=PHI3_NAMES),  # gptviz.model.hf_phi3
}
# Gemma 2, Gemma 3's text model and OLMo 2: gptviz.model.hf_gemma_olmo
FAMILIES.update(_GEMMA_OLMO)
