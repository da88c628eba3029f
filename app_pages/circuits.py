"""Circuits: the attribution graph of the text's last prediction, traced through a transcoder (circuit tracing)."""
import streamlit as st

from gptviz.ui import page_setup
from gptviz.ui.nav import link
from gptviz.ui.sections import circuit_feature, circuit_interventions, circuits

ctx = page_setup("Circuits", ":material/schema:")
st.title("Circuits")
st.caption("Which features carry your text to its next token: an attribution graph (Ameisen et al. 2025), traced "
           "through a transcoder that stands in for the MLPs (a model of attention alone needs none).")
if circuits.graph(ctx, key="circ"):
    st.header("The feature in view")
    circuit_feature.feature(ctx, key="circ.feat", graph_key="circ")
    st.header("Group nodes")
    circuits.supernodes(ctx, key="circ.groups", graph_key="circ")
    st.header("Switch features off")
    circuit_interventions.interventions(ctx, key="circ.int", graph_key="circ")
    circuits.download(ctx, key="circ.json", graph_key="circ")

st.markdown("**What this graph is.** On your text, each MLP is replaced by the transcoder's features plus an *error "
            "node* per layer and position (what the features miss, so the replacement computes exactly what the model "
            "does), and every attention pattern and every norm's divisor is frozen at its value on this text. What is "
            "left is linear: an edge is the direct effect of one node on another through the residual stream and the "
            "heads' frozen value-output paths; the edges into a node add up to its input, but for biases and "
            "positions.")
st.caption("What it cannot show: with the patterns frozen, a feature that changes *where* a head looks (through its "
           "queries and keys, as in K-composition, the induction circuit) has no edge for that. The Attention page's "
           "*How heads compose* view scores every earlier head into every later head's queries, keys and values.")
link("app_pages/attention.py", "How heads compose (Q-, K- and V-composition) on the Attention page",
     ":material/account_tree:")
