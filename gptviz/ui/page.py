"""What every page does first: page config, the shared sidebar, and the model, batch and trace it shows.

A page calls ``ctx = page_setup("Title")`` and then only lays out figures. Every problem with the
settings becomes a message here, and the page carries on with the last settings that worked.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import streamlit as st

from .. import edits as edit_specs
from ..config import PRESET_DESCRIPTIONS, PRESETS, ModelConfig
from ..data import DEFAULT_PROMPT, Batch, encode_batch
from ..model import GPT
from ..tokenizers import TOKENIZER_NAMES
from ..trace import Trace
from . import resources, state

CSS = """
<style>
.block-container { padding-top: 2.2rem; }
</style>
"""

TOKENIZER_LABELS = {
    "char-bpe": "char BPE (built in, offline)",
    "gpt2": "GPT-2 (tiktoken r50k_base)",
    "cl100k_base": "cl100k_base (GPT-4)",
    "o200k_base": "o200k_base (GPT-4o)",
}

CKPT_PREFIX = "checkpoint: "

PAGES = [
    ("app.py", "Home", "🏠"),
    ("pages/1_Tokens_and_batch.py", "Tokens & batch", "🔤"),
    ("pages/2_Embeddings.py", "Embeddings", "🧭"),
    ("pages/3_Attention.py", "Attention", "👀"),
    ("pages/4_MLP_and_residual.py", "MLP & residual stream", "🧮"),
    ("pages/5_Logits_and_loss.py", "Logits & loss", "🎯"),
    ("pages/6_Step_through.py", "Step-through", "⏯️"),
    ("pages/7_Backward.py", "Backward pass", "↩️"),
    ("pages/8_Training.py", "Training", "🏋️"),
    ("pages/9_Generation.py", "Generation", "✍️"),
    ("pages/10_Model_and_weights.py", "Model & weights", "📦"),
]


@dataclass
class Ctx:
    """Everything a page needs, worked out once per rerun."""

    s: dict[str, Any]
    cfg: ModelConfig
    cfg_json: str
    tok: Any
    batch: Batch
    model_key: Optional[str] = None
    entry: Any = None  # the loaded model's registry entry, if a loaded model is shown
    edit_notice: str = ""
    _traces: dict = field(default_factory=dict)

    @property
    def model(self) -> GPT:
        return resources.get_model(self.cfg_json, self.model_key)

    @property
    def b(self) -> int:
        return min(self.s["batch"], self.batch.x.shape[0] - 1)

    @property
    def n_pos(self) -> int:
        return self.batch.lengths[self.b]

    @property
    def layer(self) -> int:
        return min(self.s["layer"], self.cfg.n_layer - 1)

    @property
    def head(self) -> Optional[int]:
        h = self.s["head"]
        return None if h is None or h < 0 else min(h, self.cfg.n_head - 1)

    def labels(self, b: Optional[int] = None) -> list[str]:
        b = self.b if b is None else b
        return [self.tok.token_str(int(i)) for i in self.batch.x[b, : self.batch.lengths[b]]]

    def id_label(self, i: int) -> str:
        return self.tok.token_str(int(i))

    def vocab_labels(self) -> list[str]:
        return resources.vocab_labels(self.tok)

    def trace(self, grads: bool = False) -> Trace:
        """The (cached) trace of this batch, with the session's edits."""
        if not grads and True in self._traces:
            return self._traces[True]  # a trace with gradients holds every forward value too: don't trace twice
        if grads not in self._traces:
            b = self.batch
            args = (self.cfg_json, self.model_key, _tup(b.x), _tup(b.y), _tup(b.attention_mask))
            spec = self.s.get("edits") or edit_specs.EMPTY
            try:
                self._traces[grads] = resources.traced(*args, edit_specs.spec_key(spec), grads)
            except ValueError as exc:
                self.edit_notice = f"Your edits could not be applied ({exc}), so this shows the model without them."
                self._traces[grads] = resources.traced(*args, edit_specs.spec_key(None), grads)
        return self._traces[grads]


def _tup(t) -> tuple:
    return tuple(map(tuple, t.tolist()))


# --------------------------------------------------------------------------- sidebar widgets
def _sync(field: str, s: dict) -> None:
    s[field] = st.session_state[state.WIDGET + field]
    if field in state.CONFIG_FIELDS:
        s["preset"] = "custom"


def _w(fn, field: str, label: str, s: dict, container=None, **kw):
    """A sidebar widget bound to a shared setting (seeded from it, writes back on change)."""
    key = state.WIDGET + field
    # A value from a hand-edited link may be out of range: clamp it rather than let the widget fail.
    if "options" in kw and s[field] not in kw["options"]:
        s[field] = kw["options"][0]
    if "min_value" in kw and isinstance(s[field], (int, float)) and s[field] < kw["min_value"]:
        s[field] = kw["min_value"]
    if "max_value" in kw and isinstance(s[field], (int, float)) and s[field] > kw["max_value"]:
        s[field] = kw["max_value"]
    if key not in st.session_state or st.session_state[key] != s[field]:
        st.session_state[key] = s[field]
    (container or st.sidebar).__getattribute__(fn)(label, key=key, on_change=_sync, args=(field, s), **kw)


def _unload(s: dict) -> None:
    s["model_key"] = None
    if str(s.get("preset", "")).startswith(CKPT_PREFIX):
        s["preset"] = "default"
    s["edits"], s["id_edits"] = {"set": [], "heads_off": []}, {}


def _on_preset(s: dict) -> None:
    state.apply_preset(s, st.session_state[state.WIDGET + "preset"])


def sidebar(s: dict) -> None:
    sb = st.sidebar
    sb.markdown("### Input")
    _w("text_area", "text", "Text (each line is one row of the batch)", s, height=110,
       help="Type anything. Several lines make a batch; shorter lines are padded.")
    tok_key = state.WIDGET + "tokenizer"
    if st.session_state.get(tok_key) != s["tokenizer"]:
        st.session_state[tok_key] = s["tokenizer"]
    sb.selectbox("Tokenizer", TOKENIZER_NAMES, key=tok_key, format_func=TOKENIZER_LABELS.get,
                 on_change=_sync, args=("tokenizer", s))
    if s["tokenizer"] == "char-bpe":
        _w("slider", "merges", "BPE merges", s, min_value=0, max_value=200, step=1,
           help="How many merges the character BPE learns from the built-in text.")
        _w("checkbox", "lowercase", "Lower-case the text", s)

    sb.markdown("### Model")
    loaded = resources.registered(s.get("model_key"))
    if loaded is not None:
        sb.info(f"Showing **{loaded.label}**. Its shape and tokenizer are its own; the settings below apply to "
                "the configurable model.")
        sb.button("Back to the configurable model", on_click=_unload, args=(s,), width="stretch")
    pkey = state.WIDGET + "preset"
    options = list(PRESETS) + [CKPT_PREFIX + n for n in resources.shipped_names()] + ["custom"]
    if st.session_state.get(pkey) != s["preset"]:
        st.session_state[pkey] = s["preset"] if s["preset"] in options else "custom"
    sb.selectbox("Preset", options, key=pkey, on_change=_on_preset, args=(s,),
                 help="\n".join(f"- **{k}**: {v}" for k, v in PRESET_DESCRIPTIONS.items()))
    with sb.expander("Shape", expanded=False):
        c = st.container()
        _w("number_input", "n_layer", "n_layer (layers)", s, c, min_value=1, max_value=48, step=1)
        _w("number_input", "n_head", "n_head (heads per layer)", s, c, min_value=1, max_value=64, step=1)
        _w("number_input", "n_embd", "n_embd (residual width)", s, c, min_value=1, max_value=4096, step=1)
        _w("number_input", "d_head", "d_head (0 = n_embd / n_head)", s, c, min_value=0, max_value=1024, step=1)
        _w("number_input", "d_mlp", "d_mlp (0 = 4 × n_embd)", s, c, min_value=0, max_value=16384, step=1)
        _w("number_input", "block_size", "block_size (longest context)", s, c, min_value=1, max_value=2048, step=1)
    with sb.expander("Architecture", expanded=False):
        c = st.container()
        _w("selectbox", "norm", "Norm", s, c, options=["layernorm", "rmsnorm"])
        _w("selectbox", "norm_placement", "Norm placement", s, c, options=["pre", "post"],
           format_func={"pre": "pre (GPT-2)", "post": "post (2017 Transformer)"}.get)
        _w("selectbox", "pos_encoding", "Positions", s, c, options=["learned", "sinusoidal", "rope", "none"])
        _w("selectbox", "activation", "Activation", s, c, options=["gelu", "gelu_tanh", "relu"])
        _w("checkbox", "bias", "Biases (linear layers and norm shift)", s, c)
        _w("selectbox", "qkv_bias", "Q/K/V bias", s, c, options=["same as bias", True, False])
        _w("checkbox", "tie_weights", "Tie output head to token embedding", s, c)
        _w("number_input", "dropout", "Dropout (training only)", s, c, min_value=0.0, max_value=0.9, step=0.05)
        _w("number_input", "init_std", "Init std", s, c, min_value=0.0001, max_value=1.0, step=0.01, format="%.4f")
        _w("number_input", "ln_eps", "Norm epsilon", s, c, min_value=1e-12, max_value=1e-1, format="%.1e")
        _w("number_input", "rope_base", "RoPE base (rotary positions)", s, c, min_value=2.0, max_value=1e7, step=1000.0)
        _w("number_input", "seed", "Seed", s, c, min_value=0, max_value=2**31 - 1, step=1)

    sb.markdown("### View")
    _w("checkbox", "show_values", "Numbers in cells (small tensors)", s)


def _view_selectors(ctx: Ctx) -> None:
    s = ctx.s
    B = ctx.batch.x.shape[0]
    for name, n in (("batch", B), ("layer", ctx.cfg.n_layer)):
        s[name] = min(max(0, int(s[name])), n - 1)
    s["head"] = -1 if s["head"] is None or s["head"] < 0 else min(int(s["head"]), ctx.cfg.n_head - 1)
    if B > 1:
        _w("selectbox", "batch", "Batch row", s, options=list(range(B)),
           format_func=lambda b: f"{b}: {ctx.tok.decode(ctx.batch.x[b, :ctx.batch.lengths[b]].tolist())[:30]!r}")
    _w("selectbox", "layer", "Layer", s, options=list(range(ctx.cfg.n_layer)))
    _w("selectbox", "head", "Head", s, options=[-1, *range(ctx.cfg.n_head)],
       format_func=lambda h: "all heads" if h < 0 else f"head {h}")


# --------------------------------------------------------------------------- page set-up
def page_setup(title: str, icon: str = "🔎") -> Ctx:
    st.set_page_config(page_title=f"{title} · gptviz", page_icon=icon, layout="wide")
    st.markdown(CSS, unsafe_allow_html=True)
    s = state.settings()
    if s.pop("_url_problems", None):
        st.warning("Some settings in the link were not understood and were left at their defaults.")
    sidebar(s)
    ctx = _build(s)
    _view_selectors(ctx)
    st.sidebar.caption(f"vocab_size = {ctx.cfg.vocab_size:,}, set by the tokenizer · "
                       f"{ctx.cfg.num_params():,} parameters")
    st.sidebar.button("Reset to defaults", on_click=state.reset, width="stretch",
                      help="Forget every setting and edit of this session and start again from the default model.")
    state.write_url(s)
    return ctx


BIG_MODEL_PARAMS = resources.BIG_MODEL_PARAMS
BIG_MODEL_T = 64


def _build(s: dict) -> Ctx:
    # 0. a loaded model (trained, uploaded, shipped) replaces the configurable one until reset
    entry = None
    if str(s.get("preset", "")).startswith(CKPT_PREFIX) and not s.get("model_key"):
        name = s["preset"][len(CKPT_PREFIX):]
        try:
            s["model_key"] = resources.shipped_checkpoint(name)
            entry = resources.registered(s["model_key"])
            if entry and entry.meta.get("example") and s.get("text") in (None, "", DEFAULT_PROMPT):
                s["text"] = entry.meta["example"]
                st.rerun()  # so the sidebar shows the example too
        except (ValueError, OSError) as exc:
            st.error(f"The shipped checkpoint {name!r} could not be loaded: {exc}")
            s["preset"] = "default"
    model_key = s.get("model_key")
    entry = resources.registered(model_key)
    if model_key and entry is None:
        st.warning("The loaded model is no longer in memory (the server was restarted or it was replaced); "
                   "showing the configurable model again.")
        s["model_key"] = model_key = None
    # 1. tokenizer: the loaded model's own, else the chosen one (the built-in one if it cannot load offline)
    tok = entry.tokenizer if entry is not None and entry.tokenizer is not None else None
    if tok is None:
        tok, err = resources.tokenizer_for(s["tokenizer"], int(s["merges"]), bool(s["lowercase"]))
        if tok is None:
            st.warning(f"{err} Showing the built-in char BPE tokenizer instead.", icon="📴")
            tok, _ = resources.tokenizer_for("char-bpe", int(s["merges"]), bool(s["lowercase"]))
    # 2. config: on a bad setting, say which and keep the last one that worked
    if entry is not None:
        cfg = entry.model.config
        if tok.vocab_size > cfg.vocab_size:
            st.error(f"The tokenizer has {tok.vocab_size:,} tokens but the loaded model only {cfg.vocab_size:,}: "
                     "choose a tokenizer that fits it.")
            tok, _ = resources.tokenizer_for("char-bpe", 0, True)
    else:
        try:
            cfg = state.config_from_settings(s, tok.vocab_size)
            cfg.check_limits(batch=1)
            s["_last_good"] = cfg.to_dict()
        except ValueError as exc:
            st.error(f"**This model setting can't be used:** {exc}. Still showing the last model that worked.", icon="⚠️")
            last = s.get("_last_good")
            cfg = ModelConfig.from_dict(last) if last else PRESETS["default"]
            if cfg.vocab_size != tok.vocab_size:
                cfg = cfg.replace(vocab_size=tok.vocab_size)
    # 3. batch: a big model reads fewer tokens, so that every page stays quick
    T = cfg.block_size
    if cfg.num_params() > BIG_MODEL_PARAMS and T > BIG_MODEL_T:
        T = BIG_MODEL_T
        st.caption(f"This model has {cfg.num_params() / 1e6:.0f}M parameters: each line is cut to {T} tokens "
                   "to keep the pages responsive.")
    try:
        batch = encode_batch(tok, s["text"], T)
    except ValueError as exc:
        st.warning(f"{str(exc)[0].upper() + str(exc)[1:]}. Showing the example sentence instead.", icon="✏️")
        try:
            batch = encode_batch(tok, DEFAULT_PROMPT, T)
        except ValueError:
            batch = encode_batch(tok, tok.decode([0, 0]), T)
    if s.get("id_edits"):
        x, y, notes = edit_specs.apply_id_edits(batch.x, batch.y, batch.lengths, s["id_edits"], cfg.vocab_size)
        batch = Batch(x, y, batch.attention_mask, batch.lengths, batch.notices + notes)
    for n in batch.notices:
        st.info(n, icon="✂️" if "cut" in n else "ℹ️")
    try:
        cfg.check_limits(batch=batch.x.shape[0], seq_len=batch.x.shape[1])
    except ValueError as exc:
        st.error(str(exc))
        st.sidebar.button("Reset to defaults", on_click=state.reset, width="stretch", key="reset.stopped")
        st.stop()
    ctx = Ctx(s, cfg, state.config_json(cfg), tok, batch, model_key)
    ctx.entry = entry
    return ctx


def page_links() -> None:
    """A link to every page. (Run as a lone script, as in a test, the links are plain text.)"""
    cols = st.columns(4)
    for i, (path, label, icon) in enumerate(PAGES):
        try:
            cols[i % 4].page_link(path, label=label, icon=icon)
        except Exception:  # noqa: BLE001 - StreamlitPageNotFoundError outside the multipage app
            cols[i % 4].markdown(f"{icon} {label}")
