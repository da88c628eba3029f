"""Contribution graph: the routes from the input tokens through heads and MLPs to one position's prediction."""
import streamlit as st

from gptviz.ui import page_setup
from gptviz.ui.sections import contributions

ctx = page_setup("Contribution graph", ":material/hub:")
st.title("Contribution graph")
st.caption("Which routes through the model carry the input tokens to a prediction: each head's and each MLP's share "
           "of the residual stream it writes to (Ferrando & Voita 2024, as in the LLM Transparency Tool).")
contributions.contribution_graph(ctx, key="cgraph")
