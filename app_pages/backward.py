"""The backward pass: d loss / d every recorded step, next to its forward value."""
import streamlit as st

from gptviz.ui import page_setup
from gptviz.ui.sections import backward as sec

ctx = page_setup("Backward pass", ":material/undo:", passes=3)  # a backward pass costs about two forward
st.title("Backward pass")
st.markdown("The loss is a single number. Backpropagation works out, for every number in every step, how much "
            "the loss would change if that number changed a little: **∂loss/∂x**. Gradients are signed, so "
            "they use the same blue–white–red scale, centred on 0.")
sec.step(ctx, key="bw")

st.subheader("Gradient size of every parameter tensor")
sec.param_grads(ctx, key="bw")
