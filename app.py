"""gptviz home page (placeholder until the app lands)."""
import streamlit as st

st.title("gptviz")
st.write("Watch a small GPT work. The pages arrive with the app.")
