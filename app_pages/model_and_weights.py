"""Which model the pages show: the configurable one, a shipped checkpoint, an upload, or GPT-2 itself."""
import streamlit as st

from gptviz.ui import page_setup
from gptviz.ui.sections import weights as sec

ctx = page_setup("Model & weights", ":material/inventory_2:")
st.title("Model & weights")
sec.current(ctx, key="wt")

st.subheader("Shipped checkpoints")
sec.shipped(ctx, key="wt")

st.subheader("A model folder: GPT-2, Llama, Qwen2, Pythia …")
sec.folder(ctx, key="wt")

st.subheader("Upload weights")
sec.upload(ctx, key="wt")

st.subheader("GPT-2 small from the Hugging Face hub")
sec.hub(ctx, key="wt")

st.subheader("Download")
sec.download(ctx, key="wt")
