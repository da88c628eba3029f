"""The source an encoder-decoder model's encoder reads: a text box for it (or, for a model with no encoder, a
note on the fixed random encoder output its cross-attention reads instead)."""
from __future__ import annotations

import streamlit as st

from ...present import url_params
from .. import state
from . import section


@section("source.input")
def source_input(ctx, *, key: str = "att") -> None:
    """The encoder's source, one batch row a line, kept in the session's settings; with what was changed on
    the way in. Draws nothing for a decoder-only model."""
    if ctx.cfg.n_enc_layer < 0:
        return
    s = ctx.s
    if ctx.cfg.n_enc_layer > 0:
        wkey = f"{key}.source"
        if st.session_state.get(wkey) != s.get(state.SOURCE):
            st.session_state[wkey] = s.get(state.SOURCE, "")
        reverse = state.model_task(ctx) == "reverse"
        st.text_area("Source: what the encoder reads (each line is one row of the batch)", key=wkey, height=68,
                     max_chars=url_params.MAX_TEXT_CHARS,
                     # the session keeps a widget's args: a copy of ctx without this run's traces
                     on_change=state.set_source, args=(s, wkey, ctx.without_traces()),
                     help="The decoder's text is in the sidebar" + (
                         ": for the reverser it follows from the source, `^` then the letters backwards so far "
                         "(teacher forcing)." if reverse else "."))
        for note in state.source_notes(ctx):
            st.info(note, icon="✂️")
    else:
        st.caption(f"This model has no encoder: cross-attention reads a fixed random tensor of {ctx.cfg.enc_len} "
                   f"positions × {ctx.cfg.n_embd} (seed {ctx.cfg.seed}), as in the teaching material. Its columns are "
                   f"encoder positions enc 0 … enc {ctx.cfg.enc_len - 1}.")
