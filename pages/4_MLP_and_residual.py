"""The MLP block and the residual stream."""
import streamlit as st

from gptviz import figures, views
from gptviz.ui import explain, page_setup, step_heatmap

ctx = page_setup("MLP & residual stream", "🧮")
cfg, tr, L = ctx.cfg, ctx.trace(), ctx.layer
blk = f"blocks.{L}."
pre = cfg.norm_placement == "pre"
st.title(f"MLP & residual stream · layer {L}")

steps = ([("1 · The norm", blk + "ln2.hook_out")] if pre else
         [("1 · The input (post-norm: the MLP reads the normalised stream)", blk + "hook_resid_mid")])
steps += [("2 · Widen: the fc layer", blk + "mlp.hook_pre"),
          ("3 · The activation", blk + "mlp.hook_post"),
          ("4 · Narrow again: the projection", blk + "hook_mlp_out"),
          ("5 · The residual add", blk + "hook_resid_post")]
for title, name in steps:
    st.subheader(title)
    step_heatmap(ctx, name, key="mlp")
    explain(tr.info(name))

st.subheader("How the residual stream grows across layers")
norms, stages = views.residual_norms(tr, ctx.b, ctx.n_pos)
labels = ctx.labels()
m = views.Matrix(norms, stages, labels, "point in the stream", "position", "nonnegative",
                 hover_rows=stages, hover_cols=views.token_hover(labels))
st.plotly_chart(figures.heatmap(m, "‖x‖ of each position at each point of the residual stream"), width="stretch", key="norms")
st.plotly_chart(figures.line_chart({"mean over positions": norms.mean(axis=1).tolist()}, x=list(range(len(stages))),
                                   title="Mean ‖x‖ through the network", x_title="point in the stream (0 = embeddings)",
                                   y_title="‖x‖"), width="stretch", key="norms.line")
st.markdown("Every attention and MLP block *adds* to the stream, so its size tends to grow layer by layer. "
            "The norm before each block rescales what that block reads, not the stream itself.")
