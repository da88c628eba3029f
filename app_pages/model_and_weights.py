"""Which model the pages show: the configurable one, a shipped checkpoint, an upload, or GPT-2 itself."""
import streamlit as st

from gptviz.run import edits as edit_specs

from gptviz.model.checkpoint import checkpoint_bytes, load_checkpoint
from gptviz.ui import page_setup, resources, step_heatmap
from gptviz.ui.page import CKPT_PREFIX

ctx = page_setup("Model & weights", ":material/inventory_2:")
s = ctx.s
st.title("Model & weights")
label = ctx.entry.label if ctx.entry is not None else f"the configurable model (preset: {s['preset']}, seed {ctx.cfg.seed})"
st.markdown(f"The pages now show **{label}**: {ctx.model.num_params():,} parameters, "
            f"{ctx.cfg.n_layer} layer(s) × {ctx.cfg.n_head} head(s), n_embd={ctx.cfg.n_embd}, vocabulary {ctx.cfg.vocab_size:,}.")
step_heatmap(ctx, f"blocks.{ctx.layer}.attn.hook_pattern", head=ctx.head or 0, key="wt", height=360, with_downloads=False)


def use(key: str, text: str = "") -> None:
    s["model_key"] = key
    s["edits"], s["id_edits"] = edit_specs.empty(), {}
    if text:
        s["text"] = text
    st.rerun()


if ctx.entry is not None and st.button("Back to the configurable model"):
    s["model_key"] = None
    s["preset"] = "default" if str(s["preset"]).startswith(CKPT_PREFIX) else s["preset"]
    st.rerun()

st.subheader("Shipped checkpoints")
st.markdown("Small models trained by `python -m gptviz.train` and saved with gptviz. They load offline in a moment.")
for name in resources.shipped_names():
    try:
        key = resources.shipped_checkpoint(name)
    except ValueError as exc:
        st.warning(f"The shipped checkpoint {name!r} could not be loaded: {exc}")
        continue
    e = resources.registered(key)
    meta = e.meta
    c1, c2 = st.columns([3, 1])
    acc = meta.get("accuracy")
    c1.markdown(f"**{name}** · {e.model.num_params():,} parameters · "
                + (f"held-out accuracy {acc:.1%} · " if isinstance(acc, float) else "")
                + f"example `{meta.get('example', '')}`  \n`{meta.get('command', '')}`")
    if c2.button(f"Use {name}", key=f"wt.use.{name}"):
        s["preset"] = CKPT_PREFIX + name
        use(key, meta.get("example", ""))

st.subheader("Upload weights")
st.markdown("A gptviz or Hugging Face GPT-2 `.safetensors` file, or a nanoGPT `ckpt.pt`. Files are read as data "
            "only: a `.pt` file holding anything but tensors and plain values is refused without being run.")
up = st.file_uploader("Weights file", type=["safetensors", "pt", "pth", "ckpt", "bin"], key="wt.upload")
n_head = st.number_input("Heads (for Hugging Face GPT-2 files only; 0 = n_embd / 64, as in GPT-2)", 0, 128, 0, key="wt.nh")
if up is not None and st.button("Load this file", type="primary", key="wt.load"):
    try:
        ck = load_checkpoint(up.getvalue(), name=up.name, n_head=n_head or None)
    except ValueError as exc:
        st.error(f"**{up.name} was not loaded:** {exc}")
    else:
        key = resources.register_model(ck.model, ck.tokenizer, f"uploaded {up.name}", ck.meta)
        st.success(f"Loaded {up.name}: {ck.model.num_params():,} parameters.")
        use(key, ck.meta.get("example", ""))

st.subheader("GPT-2 small from the Hugging Face hub")
st.markdown("Needs the optional `transformers` package and a network connection (548 MB download the first time).")
if st.button("Load GPT-2 small", key="wt.hf"):
    try:
        import transformers  # noqa: F401
    except ImportError:
        st.error("GPT-2 from the hub needs the `transformers` package: `pip install transformers`. "
                 "You can also upload GPT-2's model.safetensors above.")
    else:
        try:
            with st.spinner("Downloading GPT-2 small…"):
                hf = transformers.GPT2LMHeadModel.from_pretrained("gpt2")
        except Exception as exc:  # noqa: BLE001 - offline, DNS, proxy, cache: all say the same to a user
            st.error("GPT-2 could not be downloaded: the Hugging Face hub is not reachable from this machine "
                     f"(offline?) and it is not in the local cache. ({type(exc).__name__})")
        else:
            from gptviz import GPT, TiktokenTokenizer

            model = GPT.from_hf_gpt2(hf)
            try:
                tok = TiktokenTokenizer("gpt2")
            except ValueError:
                tok = None
            use(resources.register_model(model, tok, "GPT-2 small (Hugging Face)", {}))

st.subheader("Download")
c1, c2 = st.columns(2)
c1.download_button("⬇ This model (.safetensors)", data=lambda: checkpoint_bytes(ctx.model, ctx.tok),
                   file_name="gptviz-model.safetensors", mime="application/octet-stream", on_click="ignore")
c2.download_button("⬇ Config (JSON)", ctx.cfg.to_json(), file_name="gptviz-config.json", mime="application/json",
                   on_click="ignore")
