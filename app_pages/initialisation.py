"""Initialisation: why the initial scale of the weights matters, on fresh models of the configured shape."""
import streamlit as st

from gptviz.ui import page_setup
from gptviz.ui.nav import decoder_only
from gptviz.ui.sections import init as sec

ctx = page_setup("Initialisation", ":material/tune:")
if not decoder_only(ctx, "The Initialisation page"):
    st.stop()
st.title("Initialisation")
st.caption("Every chart here builds fresh, untrained models of your shape (same seed) at different weight scales "
           "(init_std) and runs them on your text. Change the shape or the text in the sidebar and watch the "
           "facts hold.")

st.header("1 · The first loss should be ln V")
sec.loss_sweep(ctx, key="sweep")

st.header("2 · Large initial logits waste training")
large = sec.first_guess(ctx, key="guess")
sec.training(ctx, key="train", large=large)

st.header("3 · Saturated activations learn nothing")
sec.saturation(ctx, key="sat")

st.header("4 · Keeping the spread: why 1/√n")
sec.spread(ctx, key="spread")
