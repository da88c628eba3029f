"""Tokens & batch: how text becomes the (B, T) grid of ids the model reads."""
import streamlit as st

from gptviz.ui import page_setup
from gptviz.ui.sections import tokens as sec

ctx = page_setup("Tokens & batch", ":material/text_fields:")
st.title("Tokens & batch")
sec.grids(ctx, key="grid")

st.subheader("Tokens")
sec.chips(ctx, key="chips")

st.subheader("Edit the token ids")
sec.edit_ids(ctx, key="tok")

if ctx.batch.padded:
    sec.padding(ctx, key="pad")
sec.merges(ctx, key="merges")
