"""Compare models: the same text on two models, any step side by side with B − A, and the heads that changed most."""
import streamlit as st

from gptviz.ui import page_setup
from gptviz.ui.sections import model_diff

ctx = page_setup("Compare models", ":material/compare:")
st.title("Compare models")
st.caption("Two models read the same text: trained against untrained weights, two seeds, two snapshots of a training "
           "run, or two checkpoints. Every recorded step can be set side by side, with B minus A.")

st.header("1 · Any step, side by side")
model_diff.diff(ctx, key="cmp")

st.header("2 · Which heads changed most?")
model_diff.heads(ctx, key="cmp")
