"""Neurons: one MLP neuron at a time, what makes it fire over the held-out plays and what it writes."""
import streamlit as st

from gptviz.ui import page_setup
from gptviz.ui.sections import neurons as sec

ctx = page_setup("Neurons", ":material/neurology:")
st.title("Neurons")
st.caption("Every MLP has d_mlp neurons at each position. Pick one (or one of the most active at a position of your "
           "text) and see where it fires in Hamlet and Julius Caesar, how often, and which tokens it promotes.")
sec.browser(ctx, key="neurons")
