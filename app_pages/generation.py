"""Generation: the next-token distribution, how temperature, top-k and top-p reshape it, token by token."""
import streamlit as st

from gptviz.ui import page_setup
from gptviz.ui.nav import decoder_only
from gptviz.ui.sections import branching
from gptviz.ui.sections import generation as sec

ctx = page_setup("Generation", ":material/edit_note:")
st.title("Generation")
if not decoder_only(ctx, "Step-by-step generation"):
    st.stop()
sec.pattern(ctx, key="gen")
sec.distribution(ctx, key="gen")

st.subheader("Generate token by token")
sec.generate(ctx, key="gen")

st.subheader("Branch: force another token and see where the text goes")
branching.branching(ctx, key="gen")
