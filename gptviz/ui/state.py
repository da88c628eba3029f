"""Shared settings: one dict in ``st.session_state`` that outlives Streamlit's page-scoped widget state,
kept in step with the URL so a link opens exactly the same view.
"""
from __future__ import annotations

import dataclasses
import json
from typing import Any

import streamlit as st

from ..config import PRESETS, ModelConfig
from ..data import DEFAULT_PROMPT
from ..tokenizers import TOKENIZER_NAMES

KEY = "gptviz.settings"
WIDGET = "w."  # prefix of the sidebar widgets' own keys

# Config fields the sidebar edits (vocab_size always comes from the tokenizer).
CONFIG_FIELDS = [f.name for f in dataclasses.fields(ModelConfig) if f.name != "vocab_size"]
INT_FIELDS = {"block_size", "n_layer", "n_head", "n_embd", "d_head", "d_mlp", "seed"}
FLOAT_FIELDS = {"dropout", "init_std", "ln_eps", "rope_base"}
BOOL_FIELDS = {"bias", "qkv_bias", "tie_weights"}


def _config_settings(cfg: ModelConfig) -> dict[str, Any]:
    d = cfg.to_dict()
    d.pop("vocab_size")
    # 0 means "work it out": so a preset's derived sizes follow n_embd / n_head when those change
    if cfg.d_head * cfg.n_head == cfg.n_embd:
        d["d_head"] = 0
    if cfg.d_mlp == 4 * cfg.n_embd:
        d["d_mlp"] = 0
    if cfg.qkv_bias == cfg.bias:
        d["qkv_bias"] = "same as bias"
    return d


def defaults() -> dict[str, Any]:
    d = {
        "preset": "default",
        "text": DEFAULT_PROMPT,
        "tokenizer": "char-bpe",
        "merges": 20,
        "lowercase": True,
        "batch": 0,
        "layer": 0,
        "head": 0,
        "show_values": False,
        "step": 0,
    }
    d.update(_config_settings(PRESETS["default"]))
    return d


URL_FIELDS = ["preset", "text", "tokenizer", "merges", "lowercase", *CONFIG_FIELDS]


def _coerce(field: str, raw: str, default: Any) -> Any:
    if field in INT_FIELDS or field == "merges":
        return int(raw)
    if field in FLOAT_FIELDS:
        return float(raw)
    if field in BOOL_FIELDS or field == "lowercase":
        if field == "qkv_bias" and raw == "same as bias":
            return raw
        if raw.lower() in ("1", "true", "yes"):
            return True
        if raw.lower() in ("0", "false", "no"):
            return False
        raise ValueError(raw)
    return raw


def settings() -> dict[str, Any]:
    """This session's settings. The first call in a session reads the URL (a shared link)."""
    if KEY not in st.session_state:
        s = defaults()
        problems = []
        try:
            params = st.query_params.to_dict()
        except Exception:  # noqa: BLE001 - no URL outside a browser
            params = {}
        if params.get("preset") in PRESETS:
            s.update(_config_settings(PRESETS[params["preset"]]))
        elif str(params.get("preset", "")).startswith("checkpoint: "):
            s["preset"] = params["preset"]
        for field in URL_FIELDS:
            if field in params:
                try:
                    s[field] = _coerce(field, params[field], s.get(field))
                except (ValueError, TypeError):
                    problems.append(field)
        if s["tokenizer"] not in TOKENIZER_NAMES:
            problems.append("tokenizer")
            s["tokenizer"] = "char-bpe"
        s["_url_problems"] = problems
        st.session_state[KEY] = s
    return st.session_state[KEY]


def write_url(s: dict[str, Any]) -> None:
    """Put the non-default settings in the address bar, so the link can be shared."""
    base = defaults()
    if s.get("preset") in PRESETS:
        base.update(_config_settings(PRESETS[s["preset"]]))
    want = {f: str(s[f]) for f in URL_FIELDS if f in s and (f == "preset" or s[f] != base.get(f))}
    if want.get("preset") == "default" and len(want) == 1:
        want = {}
    try:
        if st.query_params.to_dict() != want:
            st.query_params.from_dict(want)
    except Exception:  # noqa: BLE001
        pass


def apply_preset(s: dict[str, Any], name: str) -> None:
    s["preset"] = name
    s["model_key"] = None  # a preset replaces any loaded model; a checkpoint preset loads its own
    s["id_edits"] = {}
    s["edits"] = {"set": [], "heads_off": []}
    if name.startswith("checkpoint: "):
        s["text"] = ""  # a task model comes with an example in its own format, filled in when it loads
    if name in PRESETS:
        s.update(_config_settings(PRESETS[name]))
        for field in CONFIG_FIELDS:
            st.session_state.pop(WIDGET + field, None)


def reset() -> None:
    """Back to the defaults: settings, edits, the sidebar's widgets, and the URL."""
    for k in list(st.session_state.keys()):
        if k == KEY or str(k).startswith(WIDGET) or str(k).startswith("gptviz."):
            del st.session_state[k]
    try:
        st.query_params.clear()
    except Exception:  # noqa: BLE001
        pass


def config_from_settings(s: dict[str, Any], vocab_size: int) -> ModelConfig:
    """The ModelConfig the settings describe. Raises ValueError with the rule that is broken."""
    data = {f: s[f] for f in CONFIG_FIELDS}
    data["d_head"] = data["d_head"] or None
    data["d_mlp"] = data["d_mlp"] or None
    if data["qkv_bias"] == "same as bias":
        data["qkv_bias"] = None
    data["vocab_size"] = vocab_size
    return ModelConfig(**data)


def config_json(cfg: ModelConfig) -> str:
    return json.dumps(cfg.to_dict(), sort_keys=True)
