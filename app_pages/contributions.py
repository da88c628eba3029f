"""Contribution graph: the routes from the input tokens through heads and MLPs to one position's prediction."""
import streamlit as st

from gptviz.ui import page_setup
from gptviz.ui.nav import link
from gptviz.ui.sections import contributions

ctx = page_setup("Contribution graph", ":material/hub:")
st.title("Contribution graph")
st.caption("Which routes through the model carry the input tokens to a prediction: each head's and each MLP's share "
           "of the residual stream it writes to (Ferrando & Voita 2024, as in the LLM Transparency Tool).")
contributions.contribution_graph(ctx, key="cgraph")

st.caption("What this graph cannot show: a head's share is split by the token whose **value** it moved, with the "
           "attention pattern taken as given. Where a head looks is decided by its queries and keys, so a head that "
           "finds its place through what an earlier head wrote into the keys (K-composition: the induction circuit) "
           "shows here only as the token it copies. The Attention page's *How heads compose* view scores every "
           "earlier head into every later head's queries, keys and values from the weights.")
link("app_pages/attention.py", "How heads compose (Q-, K- and V-composition) on the Attention page",
     ":material/account_tree:")
