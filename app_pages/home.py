"""gptviz: home page."""
import streamlit as st

from gptviz.ui import page_links, page_setup
from gptviz.ui.sections import home as sec

ctx = page_setup("Home", ":material/home:")

st.title("gptviz: watch a GPT work")
sec.welcome(ctx, key="home")

st.subheader("Pages")
page_links()

st.subheader("The model, with the shapes of your batch")
sec.architecture(ctx, key="home")

st.subheader("Parameters")
sec.parameters(ctx, key="home")
sec.downloads(ctx, key="home")
