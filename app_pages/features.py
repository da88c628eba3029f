"""SAE features: a sparse autoencoder's features of the residual stream, browsed and used to steer the model."""
import streamlit as st

from gptviz.ui import page_setup
from gptviz.ui.nav import decoder_only
from gptviz.ui.sections import features

ctx = page_setup("SAE features", ":material/category:")
st.title("SAE features")
st.caption("A sparse autoencoder rewrites the residual stream at one layer as a handful of active features out of "
           "many, each a direction in the stream. Some of them turn out to mean something you can name; adding one "
           "to the stream on purpose shows what it does to the prediction.")

if decoder_only(ctx, "The SAE features page"):
    st.header("1 · Browse the features")
    features.browser(ctx, key="feat")
    st.header("2 · Steer with a feature")
    features.steering(ctx, key="steer")
