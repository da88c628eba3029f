"""Attention, step by step, for one layer and one head (or all heads). An encoder-decoder model also has
cross-attention: each decoder position looks at the encoder's positions."""
import streamlit as st

from gptviz.ui import page_setup, state
from gptviz.ui.nav import link
from gptviz.ui.sections import attention as sec
from gptviz.ui.sections import composition, source

ctx = page_setup("Attention", ":material/visibility:")
seq2seq = ctx.cfg.n_enc_layer >= 0
state.use_source(ctx)  # the encoder's input, for a model with an encoder (None otherwise)
st.title(f"Attention · layer {ctx.layer} · " + ("all heads" if ctx.head is None else f"head {ctx.head}"))
st.caption("Choose the layer and head in the sidebar" + ("" if seq2seq else ", or click a head in the grid") +
           ". Grey cells are masked: attention may not look there.")

kind = "self"
if seq2seq:
    source.source_input(ctx, key="att")
    kind = sec.attention_kind(ctx, key="att.kind")
    st.caption("**Self-attention**: each decoder position looks at itself and earlier decoder positions (T × T). "
               "**Cross-attention**: each decoder position looks at every encoder position (T × S): keys and values "
               "come from the encoder output, no causal mask, only the source's padding is grey.")

if not seq2seq and ctx.cfg.n_head >= sec.WIDE_GRID_HEADS:  # many heads: the pattern, then the grid, each page-wide
    sec.pattern(ctx, key="top", kind=kind, plot_px=sec.WIDE_PATTERN_PLOT_PX)
    sec.head_detector_grid(ctx, key="det", cells_px=700)
else:
    left, right = st.columns([3, 2])
    with left:
        sec.pattern(ctx, key="top", kind=kind, plot_px=sec.PATTERN_PLOT_PX)
    with right:
        if seq2seq:
            st.markdown("**Where each decoder position looks most** (head " + str(ctx.head or 0) + ")")
            sec.where_it_looks(ctx, key="where", kind=kind)
        else:
            sec.head_detector_grid(ctx, key="det")

st.header("Step by step" + (f": {sec.KINDS[kind].lower()}" if seq2seq else ""))
sec.steps(ctx, key="s", kind=kind)

link("app_pages/who_did_it.py", "Which heads made the prediction? Logit lens, attribution and patching",
     ":material/insights:")

st.header("Switch heads off")
if kind == "cross":
    st.caption("Switching heads off works on self-attention's heads: choose *Self-attention* above.")
else:
    sec.heads_off(ctx, key="att")

st.header("More views")
views = ["Every layer × every head"] + ([] if kind == "cross" else ["Against a plain average", "How heads compose"])
view = st.segmented_control("View", views, default=None, key="att.more" if kind == "self" else "att.more.cross",
                            label_visibility="collapsed")
if view == "Against a plain average":
    st.subheader("Why attention? Against a plain average")
    sec.average_vs_learned(ctx, key="avg")
elif view == "How heads compose":
    st.subheader("How heads compose: Q, K and V")
    composition.composition_view(ctx, key="comp")
elif view == "Every layer × every head":
    st.subheader("Every layer × every head")
    sec.all_heads(ctx, key="overview", kind=kind)
else:
    st.caption("Pick a view to draw it: every head of every layer at once, a plain average against the learned "
               "weights, or how heads compose (which earlier head each later head reads, from the weights). (Drawn "
               "on request, so the page stays quick on a projector.)")
