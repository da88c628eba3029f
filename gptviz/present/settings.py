"""The settings a page is resolved from: which config fields the sidebar and a link carry, their defaults, the
ModelConfig they describe, and what choosing a preset resets. ``gptviz.present.page_context`` resolves them into a
page context.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from ..config import PRESETS, ModelConfig
from ..paths import CHECKPOINTS
from ..run import edits as edit_specs
from ..text.batches import DEFAULT_PROMPT

CKPT_PREFIX = "checkpoint: "
FOLDER_PREFIX = "folder: "  # a preset naming a model folder in the server's models directory (?model=NAME)

# Config fields the sidebar edits (vocab_size always comes from the tokenizer; a sliding window comes with a loaded
# model, a Mistral or Qwen2 folder, and is not a setting; nor is QK-norm, a Qwen3 folder's, nor Gemma 2, 3 and OLMo
# 2's norms, scale and caps, nor a rotary scaling, a Llama 3 folder's: every rope_* field but rope_base, Gemma 3's
# rope_local_base too; nor a mixture of experts, a shipped checkpoint's or a Mixtral,
# Qwen2-MoE or GPT-OSS folder's).
MOE_FIELDS = ("n_expert", "n_expert_active", "d_expert", "moe_layers", "expert_renorm", "d_shared_expert",
              "router_bias", "expert_bias", "router_aux_coef", "swiglu_limit", "swiglu_alpha", "attn_sinks")
CONFIG_FIELDS = [f.name for f in dataclasses.fields(ModelConfig)
                 if f.name not in ("vocab_size", "sliding_window", "sliding_layers", "qk_norm", "qk_norm_full",
                                   "sublayer_norms", "attn_scale_dim", "attn_softcap", "final_softcap", *MOE_FIELDS)
                 and (f.name == "rope_base" or not f.name.startswith("rope_"))]
INT_FIELDS = {"block_size", "n_layer", "n_head", "n_embd", "d_head", "d_mlp", "seed", "n_enc_layer", "enc_len",
              "n_kv_head"}
FLOAT_FIELDS = {"dropout", "init_std", "ln_eps", "rope_base", "rotary_pct"}
BOOL_FIELDS = {"bias", "qkv_bias", "tie_weights", "attn_only", "attn_proj_bias", "head_bias", "gated_mlp",
               "parallel_attn"}


def _config_settings(cfg: ModelConfig) -> dict[str, Any]:
    d = {k: v for k, v in cfg.to_dict().items() if k in CONFIG_FIELDS}
    # 0 means "work it out": so a preset's derived sizes follow n_embd / n_head when those change
    if cfg.d_head * cfg.n_head == cfg.n_embd:
        d["d_head"] = 0
    if cfg.d_mlp == 4 * cfg.n_embd:
        d["d_mlp"] = 0
    if cfg.qkv_bias == cfg.bias:
        d["qkv_bias"] = "same as bias"
    if cfg.n_kv_head == cfg.n_head:
        d["n_kv_head"] = 0
    return d


@dataclass
class Entry:
    """A model that is not built from a config alone (trained, uploaded or shipped), with the tokenizer it was
    made for, a label and its checkpoint's metadata: what a store's ``registered(key)`` returns."""

    model: Any
    tokenizer: object = None
    label: str = ""
    meta: dict = field(default_factory=dict)
# The app opens on the shipped Shakespeare model, so the first heatmap a class sees is a learned pattern
# (the small untrained model is the preset "default"; links that name it still open it).
OPENING_MODEL = "shakespeare"


def default_preset() -> str:
    return CKPT_PREFIX + OPENING_MODEL if (CHECKPOINTS / f"{OPENING_MODEL}.safetensors").is_file() else "default"


def defaults() -> dict[str, Any]:
    d = {
        "preset": default_preset(),
        "text": DEFAULT_PROMPT,
        "tokenizer": "char-bpe",
        "merges": 20,
        "lowercase": True,
        "batch": 0,
        "layer": 0,
        "head": 0,
        "show_values": False,
        "palette": "default",
        "lang": "en",
        "edit_shape": False,
        "step": 0,
        "untrained": False,
        "export_format": "png",
    }
    d.update(_config_settings(PRESETS["default"]))
    return d


# Settings key of the notices about the link a session was opened with (url_params.read), for resolve to show.
URL_NOTICES = "_url_notices"
# The settings a link carries: the model, the text, and the layer and head in view (so a link, or a reload after
# the server restarted, opens the same view).
URL_FIELDS = ["preset", "text", "source", "tokenizer", "merges", "lowercase", "untrained", "layer", "head",
              "palette", "lang", *CONFIG_FIELDS]


def config_from_settings(s: dict[str, Any], vocab_size: int) -> ModelConfig:
    """The ModelConfig the settings describe. Raises ValueError with the rule that is broken."""
    data = {f: s[f] for f in CONFIG_FIELDS}
    data["d_head"] = data["d_head"] or None
    data["d_mlp"] = data["d_mlp"] or None
    data["n_kv_head"] = data["n_kv_head"] or None
    if data["qkv_bias"] == "same as bias":
        data["qkv_bias"] = None
    data["vocab_size"] = vocab_size
    return ModelConfig(**data)


@lru_cache(maxsize=256)
def config_json(cfg: ModelConfig) -> str:
    """The config as sorted JSON, the key of every cache that depends on it; kept per config (a config is frozen and
    hashable), since every run of every page asks for it."""
    return json.dumps(cfg.to_dict(), sort_keys=True)


def apply_preset(s: dict[str, Any], name: str) -> None:
    s["preset"] = name
    s["model_key"] = None  # a preset replaces any loaded model; a checkpoint preset loads its own
    s["id_edits"] = {}
    s["edits"] = edit_specs.empty()
    if name.startswith(CKPT_PREFIX):
        s["text"] = ""  # a task model comes with an example in its own format, filled in when it loads
    if name in PRESETS:
        s.update(_config_settings(PRESETS[name]))
