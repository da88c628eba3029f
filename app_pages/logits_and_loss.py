"""From the last residual stream to logits, probabilities and the cross-entropy loss."""
import streamlit as st

from gptviz.ui import page_setup
from gptviz.ui.nav import link
from gptviz.ui.sections import logits as sec

ctx = page_setup("Logits & loss", ":material/bar_chart:")
st.title("Logits & loss")

st.subheader("Probabilities of the next token")
sec.probs(ctx, key="logits")

st.header("Step by step")
STEPS = (["1 · The final norm"] if ctx.cfg.norm_placement == "pre" else []) + [
    "2 · Logits: a score for every token", "3 · The target's probability, −log p, and the loss per token"]
step = st.radio("Step", STEPS, index=STEPS.index("2 · Logits: a score for every token"), horizontal=True,
                key="logits.step", label_visibility="collapsed",
                help="One step at a time keeps the page quick to draw; every step is here.")
st.subheader(step)
if step.startswith("1"):
    sec.final_norm(ctx, key="lf")
elif step.startswith("2"):
    sec.logits(ctx, key="logits")
else:
    sec.target(ctx, key="tp")

st.subheader("4 · The loss: their mean")
sec.loss(ctx, key="loss")

link("app_pages/who_did_it.py", "Which layers and heads made these predictions? Logit lens, attribution and patching",
     ":material/insights:")

st.subheader("Top predictions at each position")
sec.top(ctx, key="top")
