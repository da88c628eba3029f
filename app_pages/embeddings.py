"""Embeddings: token lookup (rows of a table, the same as one-hot × W_E), positions, and their sum."""
import streamlit as st

from gptviz.ui import page_setup
from gptviz.ui.sections import embeddings as sec

ctx = page_setup("Embeddings", ":material/scatter_plot:")
st.title("Embeddings")

st.subheader("1 · Token embedding: pick a row of W_E for each token")
sec.token(ctx, key="emb")
sec.onehot(ctx, key="onehot")

st.subheader("2 · Positions")
sec.positions(ctx, key="pos")

st.subheader("3 · Their sum: the residual stream that enters layer 0")
sec.total(ctx, key="sum")

st.subheader("Edit a token's embedding")
sec.edit(ctx, key="emb")
