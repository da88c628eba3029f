"""The MLP block and the residual stream."""
import streamlit as st

from gptviz.ui import page_setup
from gptviz.ui.sections import mlp as sec

ctx = page_setup("MLP & residual stream", ":material/account_tree:")
st.title(f"MLP & residual stream · layer {ctx.layer}")
sec.steps(ctx, key="mlp")

st.subheader("How the residual stream grows across layers")
sec.residual_growth(ctx, key="norms")
