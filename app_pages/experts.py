"""Experts: where a mixture of experts' router sends each token, each expert's load, and switching experts off."""
import streamlit as st

from gptviz.ui import page_setup
from gptviz.ui.sections import experts as sec

ctx = page_setup("Experts", ":material/alt_route:")
st.title(sec.title(ctx))
if sec.layer_in_view(ctx) is None:
    sec.no_experts(ctx)
else:
    left, right = st.columns([3, 2])
    with left:
        sec.routing(ctx)
    with right:
        sec.load(ctx)
        sec.switch_off(ctx)
    st.subheader("An expert's top-routed tokens")
    sec.top_tokens(ctx)
    st.subheader("How the router chooses")
    sec.how(ctx)
