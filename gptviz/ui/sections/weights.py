"""The Model & weights page's sections: which model the pages show, and the ways to change it (a shipped
checkpoint, an uploaded file, GPT-2 from the hub), and to download it."""
from __future__ import annotations

import streamlit as st

from ...model.checkpoint import checkpoint_bytes, load_checkpoint
from ...model.hook_names import act_name
from ...present.page_context import CKPT_PREFIX, FOLDER_PREFIX
from ...run import edits as edit_specs
from ...run.slots import BIG_LOAD
from .. import resources
from ..waiting import queued
from ..widgets import step_heatmap
from . import section


def _use(ctx, model_key: str, text: str = "") -> None:
    """Make the registered model ``model_key`` the one every page shows (with its example text, if any)."""
    s = ctx.s
    s["model_key"] = model_key
    s["edits"], s["id_edits"] = edit_specs.empty(), {}
    if text:
        s["text"] = text
    st.rerun()


@section("weights.current")
def current(ctx, *, key: str = "wt") -> None:
    """The model the pages show: its name and shape, its attention, and the way back to the configurable one."""
    s = ctx.s
    label = (ctx.entry.label if ctx.entry is not None
             else f"the configurable model (preset: {s['preset']}, seed {ctx.cfg.seed})")
    st.markdown(f"The pages now show **{label}**: {ctx.model.num_params():,} parameters, "
                f"{ctx.cfg.n_layer} layer(s) × {ctx.cfg.n_head} head(s), n_embd={ctx.cfg.n_embd}, "
                f"vocabulary {ctx.cfg.vocab_size:,}.")
    step_heatmap(ctx, act_name("pattern", ctx.layer), head=ctx.head or 0, key=key, height=360,
                 with_downloads=False)
    if ctx.entry is not None and st.button("Back to the configurable model"):
        s["model_key"] = None
        s["preset"] = "default" if str(s["preset"]).startswith((CKPT_PREFIX, FOLDER_PREFIX)) else s["preset"]
        st.rerun()


@section("weights.shipped")
def shipped(ctx, *, key: str = "wt") -> None:
    """Every shipped checkpoint with its size, accuracy, example and training command, and a button to use it."""
    st.markdown("Small models trained by `python -m gptviz.train` and saved with gptviz. "
                "They load offline in a moment.")
    for name in resources.shipped_names():
        try:
            model_key = resources.shipped_checkpoint(name)
        except ValueError as exc:
            st.warning(f"The shipped checkpoint {name!r} could not be loaded: {exc}")
            continue
        e = resources.registered(model_key)
        meta = e.meta
        c1, c2 = st.columns([3, 1])
        acc = meta.get("accuracy")
        c1.markdown(f"**{name}** · {e.model.num_params():,} parameters · "
                    + (f"held-out accuracy {acc:.1%} · " if isinstance(acc, float) else "")
                    + f"example `{meta.get('example', '')}`  \n`{meta.get('command', '')}`")
        if c2.button(f"Use {name}", key=f"{key}.use.{name}"):
            ctx.s["preset"] = CKPT_PREFIX + name
            _use(ctx, model_key, meta.get("example", ""))


@section("weights.upload")
def upload(ctx, *, key: str = "wt") -> None:
    """Load a weights file (gptviz or Hugging Face safetensors, nanoGPT ckpt.pt) as data only."""
    st.markdown("A gptviz or Hugging Face GPT-2 `.safetensors` file, or a nanoGPT `ckpt.pt`. Files are read as data "
                "only: a `.pt` file holding anything but tensors and plain values is refused without being run.")
    up = st.file_uploader("Weights file", type=["safetensors", "pt", "pth", "ckpt", "bin"], key=f"{key}.upload")
    n_head = st.number_input("Heads (Hugging Face GPT-2 files only; 0 = the released GPT-2 sizes, known by shape)",
                             0, 128, 0, key=f"{key}.nh",
                             help="A GPT-2 weights file alone does not say how many heads it has. Open its folder "
                                  "below (config.json with the weights) to have them read, or give the number here.")
    if up is not None and st.button("Load this file", type="primary", key=f"{key}.load"):
        try:
            with queued(BIG_LOAD, "big-model load"):  # one file read and built at a time on this server
                ck = load_checkpoint(up.getvalue(), name=up.name, n_head=n_head or None)
        except ValueError as exc:
            st.error(f"**{up.name} was not loaded:** {exc}")
        else:
            meta = ck.meta if isinstance(ck.meta, dict) else {}
            model_key = resources.register_model(ck.model, ck.tokenizer, f"uploaded {up.name}", meta)
            st.success(f"Loaded {up.name}: {ck.model.num_params():,} parameters.")
            example = meta.get("example")
            _use(ctx, model_key, example if isinstance(example, str) else "")


@section("weights.folder")
def folder(ctx, *, key: str = "wt") -> None:
    """A Hugging Face model folder (GPT-2, Llama, Mistral, Qwen2, Qwen3, GPT-NeoX, Gemma 1, 2 and 3, OLMo 2): one of
    the server's, or uploaded."""
    st.markdown("A model folder as Hugging Face saves it: `config.json`, the `.safetensors` weights (sharded too) and "
                "`tokenizer.json`. GPT-2, Llama (SmolLM2, TinyLlama), Mistral, Qwen2, Qwen3, GPT-NeoX (Pythia), "
                "Gemma 1, 2 and 3 (text) and OLMo 2 open with their own tokenizer; every page then shows them, "
                "grouped-query attention, gated MLPs, QK-norm, Gemma's soft caps and norms after each sublayer "
                "included.")
    names = resources.model_folder_names()
    for name in names:
        c1, c2 = st.columns([3, 1])
        c1.markdown(f"**{name}** · link: `?model={name}`")
        if c2.button(f"Use {name}", key=f"{key}.folder.{name}"):
            try:
                with queued(BIG_LOAD, "big-model load"), st.spinner(f"Opening {name}…"):
                    model_key = resources.folder_model(name)
            except ValueError as exc:
                st.error(f"**{name} was not opened:** {exc}")
            else:
                ctx.s["preset"] = FOLDER_PREFIX + name
                _use(ctx, model_key)
    if not names:
        st.caption("This server has no models directory. Whoever runs it can set `GPTVIZ_MODELS_DIR` to a folder of "
                   "model folders: they are listed here, and a link can name one (`?model=NAME`).")
    files = st.file_uploader("Open a model folder from this computer", accept_multiple_files="directory",
                             key=f"{key}.folder.up")
    if files and st.button("Open this folder", type="primary", key=f"{key}.folder.open"):
        from ...model.pretrained import from_uploaded_files

        try:
            with queued(BIG_LOAD, "big-model load"), st.spinner("Opening the model folder…"):
                model, tok = from_uploaded_files([(f.name, f.getvalue()) for f in files])
        except ValueError as exc:
            st.error(f"**The folder was not opened:** {exc}")
        else:
            label = f"uploaded folder ({model.num_params():,} parameters)"
            _use(ctx, resources.register_model(model, tok, label, {"source": "an uploaded model folder"}))


@section("weights.hub")
def hub(ctx, *, key: str = "wt") -> None:
    """GPT-2 small from the Hugging Face hub (needs ``transformers`` and a network, or the local cache)."""
    st.markdown("Needs the optional `transformers` package and a network connection (548 MB download the first time).")
    if st.button("Load GPT-2 small", key=f"{key}.hf"):
        try:
            import transformers
        except ImportError:
            st.error("GPT-2 from the hub needs the `transformers` package: `pip install transformers`. "
                     "You can also upload GPT-2's model.safetensors above.")
            return
        try:
            # one big load at a time on this server; built once, then every session that asks shares it
            with queued(BIG_LOAD, "big-model load"), st.spinner("Loading GPT-2 small…"):
                model_key = resources.hub_gpt2(lambda: _gpt2_from_hub(transformers))
        except Exception as exc:  # noqa: BLE001 - offline, DNS, proxy, cache: all say the same to a user
            st.error("GPT-2 could not be downloaded: the Hugging Face hub is not reachable from this machine "
                     f"(offline?) and it is not in the local cache. ({type(exc).__name__})")
            return
        _use(ctx, model_key)


def _gpt2_from_hub(transformers):
    """(GPT-2 small as a gptviz GPT, its tokenizer or None) from the hub or the local cache."""
    from ...model.hf_gpt2 import from_hf_gpt2
    from ...text.tokenizers import TiktokenTokenizer

    model = from_hf_gpt2(transformers.GPT2LMHeadModel.from_pretrained("gpt2"))
    try:
        tok = TiktokenTokenizer("gpt2")
    except ValueError:
        tok = None
    return model, tok


@section("weights.download")
def download(ctx, *, key: str = "wt") -> None:
    """The model shown as a .safetensors file (built on click) and its config as JSON."""
    c1, c2 = st.columns(2)
    # not a closure over ctx (Streamlit keeps the callable after the run, and ctx holds this run's traces)
    get_model, cfg_json, model_key, tok = ctx.store.get_model, ctx.cfg_json, ctx.model_key, ctx.tok
    c1.download_button("⬇ This model (.safetensors)",
                       data=lambda: checkpoint_bytes(get_model(cfg_json, model_key), tok),
                       file_name="gptviz-model.safetensors", mime="application/octet-stream", on_click="ignore")
    c2.download_button("⬇ Config (JSON)", ctx.cfg.to_json(), file_name="gptviz-config.json", mime="application/json",
                       on_click="ignore")
