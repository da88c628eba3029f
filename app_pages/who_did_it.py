"""Who did it: which layers, heads and MLPs made the prediction (logit lens, attribution, patching)."""
import streamlit as st

from gptviz.ui import page_setup
from gptviz.ui.sections import attribution, who

# the logit lens unembeds (layers + 1) × up to 128 positions through the whole vocabulary: about a pass more
ctx = page_setup("Who did it", ":material/insights:", passes=2,
                 passes_said="one pass over {n} tokens and the logit lens's unembedding (about {p} passes)")
st.title("Who did it?")
st.caption("Three ways to find the parts of the model behind a prediction: read every layer as if it were the "
           "last, split one logit into what each part wrote, and swap activations between two prompts.")

st.header("1 · The logit lens: when does the answer appear?")
who.logit_lens(ctx, key="lens")

st.header("2 · Direct logit attribution: who wrote the logit?")
who.direct_logit_attribution(ctx, key="dla")

st.header("3 · Compare two prompts: activation patching")
who.compare_prompts(ctx, key="cmp")

st.header("4 · Which input tokens? Attention, rollout and integrated gradients")
attribution.token_attribution(ctx, key="attr")
