"""What every page does first: page config, the shared sidebar, and the model, batch and trace it shows.

A page calls ``ctx = page_setup("Title")`` and then only lays out figures. Every problem with the
settings becomes a message here, and the page carries on with the last settings that worked.
"""
from __future__ import annotations

from typing import Optional

import streamlit as st

from ..config import PRESET_DESCRIPTIONS, PRESETS
from ..perf import refreeze_after_imports, threads_for, use_threads
from ..present import url_params
from ..present.lessons.wording import languages as lesson_languages
from ..present.markdown_text import plain_md
from ..present.notebook import notebook_bytes
from ..present.page_context import CKPT_PREFIX, FOLDER_PREFIX, Ctx, Notice, resolve
from ..run import edits as edit_specs
from . import resources, state
from .nav import PAGES, page_links  # noqa: F401 - re-exported
from .widgets import EXPORT_FORMATS, download_popover, selection_note

# The page's own style rule, written with the sidebar's first heading (a style applies to the whole page wherever
# it stands): one element fewer on every run than a markdown element of its own.
CSS = "<style>.block-container { padding-top: 2.2rem; }</style>"

TOKENIZER_LABELS = {
    "char-bpe": "char BPE (built in, offline)",
    "gpt2": "GPT-2 (tiktoken r50k_base)",
    "cl100k_base": "cl100k_base (GPT-4)",
    "o200k_base": "o200k_base (GPT-4o)",
}

# --------------------------------------------------------------------------- sidebar widgets
def _sync(field: str, s: dict) -> None:
    value = st.session_state[state.WIDGET + field]
    if field == "text":  # a paste of any size arrives here: cut it before anything reads it, and say so
        value, note = url_params.typed_text(field, value)
        if note is not None:
            s[state.URL_NOTICES] = [*s.get(state.URL_NOTICES, []), note]
            st.session_state[state.WIDGET + field] = value
    s[field] = value
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
    if str(s.get("preset", "")).startswith((CKPT_PREFIX, FOLDER_PREFIX)):
        s["preset"] = "default"
    s["edits"], s["id_edits"] = edit_specs.empty(), {}
    s["untrained"] = False


# What a user gets, by preset value. Values stay as they were, so links from before still open.
SHIPPED_LABELS = {
    "shakespeare": "Shakespeare GPT (trained)",
    "induction-heads": "Induction heads (2-layer attention-only, trained)",
    "reverse": "Reverser (encoder-decoder, trained)",
    "sort": "Sorter (trained on a toy task)",
    "induction": "Letter copier (trained on a toy task)",
    "text": "Paragraph memoriser (trained on the built-in text)",
}
PRESET_LABELS = {
    "default": "Tiny GPT, untrained (2 layers, 16 wide)",
    "explainer": "Explainer: 1 layer, n_embd 4 (untrained)",
    "gpt2-small": "GPT-2 small's shape (124M, random weights)",
    "llama-like": "LLaMA-like, untrained (RMSNorm, rotary)",
    "original-transformer": "2017 Transformer decoder, untrained (post-norm)",
    "decoder-cross-attention": "The material's decoder with cross-attention (untrained)",
    "custom": "Custom shape (set below)",
}


def preset_options() -> list[str]:
    shipped = resources.shipped_names()
    first = [n for n in SHIPPED_LABELS if n in shipped] + [n for n in shipped if n not in SHIPPED_LABELS]
    shapes = list(PRESETS)
    folders = [FOLDER_PREFIX + n for n in resources.model_folder_names()]
    return [CKPT_PREFIX + n for n in first] + folders + shapes + ["custom"]


def preset_label(value: str) -> str:
    if value.startswith(CKPT_PREFIX):
        name = value[len(CKPT_PREFIX):]
        return SHIPPED_LABELS.get(name, f"Shipped: {name}")
    if value.startswith(FOLDER_PREFIX):
        return f"Model folder: {value[len(FOLDER_PREFIX):]}"
    return PRESET_LABELS.get(value, value)


def _on_preset(s: dict) -> None:
    state.apply_preset(s, st.session_state[state.WIDGET + "preset"])


def sidebar(s: dict) -> None:
    sb = st.sidebar
    loaded = resources.registered(s.get("model_key"))
    sb.markdown(CSS + "\n\n### Input", unsafe_allow_html=True)  # a constant: no user text in it
    _w("text_area", "text", "Text (each line is one row of the batch)", s, height=110,
       max_chars=url_params.MAX_TEXT_CHARS,
       help="Type anything. Several lines make a batch; shorter lines are padded.")
    if loaded is None:  # a loaded model reads with its own tokenizer: these set the configurable model's
        tok_key = state.WIDGET + "tokenizer"
        if st.session_state.get(tok_key) != s["tokenizer"]:
            st.session_state[tok_key] = s["tokenizer"]
        sb.selectbox("Tokenizer", url_params.widget("tokenizer")["options"], key=tok_key,
                     format_func=TOKENIZER_LABELS.get, on_change=_sync, args=("tokenizer", s))
        if s["tokenizer"] == "char-bpe":
            _w("slider", "merges", "BPE merges", s, **url_params.widget("merges"), step=1,
               help="How many merges the character BPE learns from the built-in text.")
            _w("checkbox", "lowercase", "Lower-case the text", s)

    sb.markdown("### Model")
    if loaded is not None:
        # Its shape and tokenizer are its own, so the configurable model's widgets are not made while it is shown:
        # they would change nothing on screen (and each is a message to the browser on every run).
        sb.info(f"Showing **{loaded.label}**, with its own shape and tokenizer. *Back to the configurable model* "
                "brings back the tokenizer's and the shape's settings.")
        sb.button("Back to the configurable model", on_click=_unload, args=(s,), width="stretch")
    pkey = state.WIDGET + "preset"
    options = preset_options()
    if st.session_state.get(pkey) != s["preset"]:
        st.session_state[pkey] = s["preset"] if s["preset"] in options else "custom"
    sb.selectbox("Model", options, key=pkey, on_change=_on_preset, args=(s,), format_func=preset_label,
                 help="Trained models first (they learned something), then shapes with fresh random weights.\n\n"
                      + "\n".join(f"- **{preset_label(k)}**: {v}" for k, v in PRESET_DESCRIPTIONS.items()))
    if loaded is not None:
        return _view_settings(s)
    _w("toggle", "edit_shape", "Edit the shape and architecture", s,
       help="Layers, heads, widths, norm, positions, activation, biases, init and seed of the configurable model. "
            "Off, the sidebar shows them in one line (and draws faster).")
    if not s.get("edit_shape"):
        sb.caption(shape_line(s))
        return _view_settings(s)
    with sb.expander("Shape", expanded=True):
        c = st.container()
        _w("number_input", "n_layer", "n_layer (layers)", s, c, **url_params.widget("n_layer"), step=1)
        _w("number_input", "n_head", "n_head (heads per layer)", s, c, **url_params.widget("n_head"), step=1)
        _w("number_input", "n_embd", "n_embd (residual width)", s, c, **url_params.widget("n_embd"), step=1)
        _w("number_input", "d_head", "d_head (0 = n_embd / n_head)", s, c, **url_params.widget("d_head"), step=1)
        _w("number_input", "d_mlp", "d_mlp (0 = 4 × n_embd)", s, c, **url_params.widget("d_mlp"), step=1)
        _w("number_input", "block_size", "block_size (longest context)", s, c, **url_params.widget("block_size"),
           step=1)
    with sb.expander("Architecture", expanded=True):
        c = st.container()
        _w("selectbox", "norm", "Norm", s, c, **url_params.widget("norm"))
        _w("selectbox", "norm_placement", "Norm placement", s, c, **url_params.widget("norm_placement"),
           format_func={"pre": "pre (GPT-2)", "post": "post (2017 Transformer)"}.get)
        _w("selectbox", "pos_encoding", "Positions", s, c, **url_params.widget("pos_encoding"))
        _w("selectbox", "activation", "Activation", s, c, **url_params.widget("activation"))
        _w("checkbox", "attn_only", "Attention only (no MLP)", s, c)
        _w("checkbox", "bias", "Biases (linear layers and norm shift)", s, c)
        _w("selectbox", "qkv_bias", "Q/K/V bias", s, c, **url_params.widget("qkv_bias"))
        _w("checkbox", "tie_weights", "Tie output head to token embedding", s, c)
        _w("number_input", "dropout", "Dropout (training only)", s, c, **url_params.widget("dropout"), step=0.05)
        _w("number_input", "init_std", "Init std", s, c, **url_params.widget("init_std"), step=0.01, format="%.4f")
        _w("number_input", "ln_eps", "Norm epsilon", s, c, **url_params.widget("ln_eps"), format="%.1e")
        _w("number_input", "rope_base", "RoPE base (rotary positions)", s, c, **url_params.widget("rope_base"),
           step=1000.0)
        _w("number_input", "seed", "Seed", s, c, **url_params.widget("seed"), step=1)
    _view_settings(s)


def shape_line(s: dict) -> str:
    """The configurable model's shape in one line, for the sidebar when its widgets are folded away."""
    d_head = s["d_head"] or (s["n_embd"] // max(1, s["n_head"]))
    parts = [f"{s['n_layer']} layers", f"{s['n_head']} heads of {d_head}", f"n_embd {s['n_embd']}",
             f"{s['norm']} ({s['norm_placement']})", f"{s['pos_encoding']} positions",
             "attention only" if s["attn_only"] else str(s["activation"]), f"seed {s['seed']}"]
    return "Configurable model: " + " · ".join(parts)  # every value was checked against its options on reading


# The view's settings are folded away, and their widgets are made only while the fold is open: each element is a
# message to the browser on every run (about 0.1 ms of a server's CPU each), and these four are set once a lesson,
# not on every change. Their values live in the shared settings, so a closed fold changes nothing.
VIEW_FOLD = "gptviz.view.fold"
VIEW_FOLD_LABEL = "View: numbers in cells, colours, language, downloads"


def _view_settings(s: dict) -> None:
    fold = st.sidebar.expander(VIEW_FOLD_LABEL, icon=":material/tune:", key=VIEW_FOLD, on_change="rerun")
    if not fold.open:
        return
    _w("checkbox", "show_values", "Numbers in cells (small tensors)", s, fold)
    _w("radio", "palette", "Colours", s, fold, options=list(url_params.widget("palette")["options"]), horizontal=True,
       help="Every chart's colours, here and in the HTML report. Colour-blind safe: purple–white–orange for signed "
            "values and yellow–green–blue for probabilities, which read the same with red–green colour blindness.")
    langs = lesson_languages()
    _w("selectbox", "lang", "Lesson language", s, fold, options=list(url_params.widget("lang")["options"]),
       format_func=lambda c: langs.get(c, c), help="The lessons' language (?lang=es in the address). A lesson with no "
       "translation yet is shown in English.")
    _w("radio", "export_format", "Chart download (camera button)", s, fold, options=list(EXPORT_FORMATS),
       format_func=EXPORT_FORMATS.get, horizontal=True,
       help="What every chart's camera button saves. The HTML report (Home) has both on every chart.")


def _view_selectors(ctx: Ctx) -> None:
    s = ctx.s
    B = ctx.batch.x.shape[0]
    for name, n in (("batch", B), ("layer", ctx.cfg.n_layer), ("head", ctx.cfg.n_head)):
        try:
            v = int(s[name]) if s[name] is not None else -1
        except (TypeError, ValueError):  # a widget label this run does not offer (a stale one, or a hostile client's)
            v = -1 if name == "head" else 0
        s[name] = -1 if name == "head" and v < 0 else min(max(0, v), n - 1)
    if B > 1:
        rows = [f"{b}: {ctx.tok.decode(ctx.batch.x[b, :ctx.batch.lengths[b]].tolist())[:30]!r}" for b in range(B)]
        # not a closure over ctx: the session keeps a widget's format_func, and ctx holds this run's traces
        _w("selectbox", "batch", "Batch row", s, options=list(range(B)), format_func=rows.__getitem__)
    _w("selectbox", "layer", "Layer", s, options=list(range(ctx.cfg.n_layer)))
    _w("selectbox", "head", "Head", s, options=[-1, *range(ctx.cfg.n_head)],
       format_func=lambda h: "all heads" if h < 0 else f"head {h}")


# --------------------------------------------------------------------------- page set-up
_SHOW = {"error": st.error, "warning": st.warning, "info": st.info}


def show_notices(notes: list[Notice]) -> None:
    for n in notes:
        if n.level == "caption":
            st.caption(n.text)
        else:
            _SHOW[n.level](n.text, icon=n.icon)


def page_setup(title: str, icon: str = ":material/search:", passes: int = 1,
               passes_said: Optional[str] = None) -> Ctx:
    """The page's configuration, its context (``passes``: its arithmetic in forward passes of the text, which a big
    model's line is cut to fit: the Backward page's 3; ``passes_said``: what they are, as ``why_cut`` says it), the
    sidebar and the notices."""
    refreeze_after_imports()  # the last run's first-time imports (a model's first build: torch._dynamo) frozen too
    st.set_page_config(page_title=f"{title} · gptviz", page_icon=icon, layout="wide")
    s = state.settings()
    ctx, notes = resolve(s, resources, passes, passes_said)
    use_threads(threads_for(ctx.cfg.num_params()))  # 1 for a small model: see gptviz.perf
    sidebar(s)
    show_notices(notes)
    let_go = st.session_state.pop(resources.LET_GO, None)
    if let_go:
        st.info(f"This session's own models are kept up to {resources.session_model_bytes() / 1e9:.1f} GB; to make "
                f"room, the least recently used were let go: {', '.join(plain_md(n) for n in let_go)}. Train, upload "
                "or load one again to bring it back.", icon=":material/memory:")
    if ctx.entry is not None:
        _w("toggle", "untrained", "Untrained weights (same shape)", s,
           help="Show this model's shape freshly initialised: trained against untrained is a lesson in itself.")
    _view_selectors(ctx)
    selection_note(ctx)
    st.sidebar.caption(f"vocab_size = {ctx.cfg.vocab_size:,}, set by the tokenizer · "
                       f"{ctx.cfg.num_params():,} parameters")
    # The notebook's button is made only while its popover is open: a deferred file and a copy of the context
    # less on every run. The notebook reads no trace: Streamlit keeps the callable after the run, so it gets a copy
    # of ctx without this run's traces (ctx itself would keep them alive as long as the session, past the trace
    # cache's bound).
    pop = download_popover("⬇ This view as a notebook", "notebook", "A Jupyter notebook that rebuilds this model, "
                           "text, edits and the attention pattern in view with gptviz's own API.", st.sidebar,
                           width="stretch")
    if pop is not None:
        view = ctx.without_traces()
        pop.download_button("⬇ gptviz-view.ipynb", data=lambda: notebook_bytes(view), file_name="gptviz-view.ipynb",
                            mime="application/x-ipynb+json", on_click="ignore", width="stretch")
    st.sidebar.button("Reset to defaults", on_click=state.reset, width="stretch",
                      help="Forget every setting and edit of this session and start again from the default model.")
    state.write_url(s)
    return ctx
