"""Attention, step by step, for one layer and one head (or all heads)."""
import numpy as np
import streamlit as st

from gptviz import figures, views
from gptviz.ui import clear_edits_button, explain, head_step, heads_off_toggle, masked, page_setup, step_heatmap

ctx = page_setup("Attention", "👀")
cfg, tr, L, H = ctx.cfg, ctx.trace(), ctx.layer, ctx.head
a, blk = f"blocks.{L}.attn.", f"blocks.{L}."
pre = cfg.norm_placement == "pre"
st.title(f"Attention · layer {L} · " + ("all heads" if H is None else f"head {H}"))
st.caption("Choose the layer and head in the sidebar. Grey cells are masked: attention may not look there.")

head_step(ctx, a + "hook_pattern", key="top")
explain(tr.info(a + "hook_pattern"), code=False)

steps = []
if pre:
    steps.append(("1 · The norm", blk + "ln1.hook_out"))
else:
    steps.append(("1 · The norm (post-norm: attention reads the raw residual stream)", blk + "hook_resid_pre"))
steps += [("2 · One projection makes Q, K and V", a + "hook_qkv"),
          ("3 · Split into heads: Q", a + "hook_q"), ("3 · Split into heads: K", a + "hook_k"),
          ("3 · Split into heads: V", a + "hook_v")]
if cfg.pos_encoding == "rope":
    steps += [("3b · Rotate Q by position (RoPE)", a + "hook_rot_q"), ("3b · Rotate K by position (RoPE)", a + "hook_rot_k")]
steps += [("4 · Scores: Q Kᵀ", a + "hook_scores_raw"), ("5 · Scale by 1/√d_head", a + "hook_scores_scaled"),
          ("6 · The causal and padding mask", a + "hook_attn_scores"), ("7 · Softmax: the attention weights", a + "hook_pattern"),
          ("8 · Weighted values: Z = A V", a + "hook_z")]
for title, name in steps:
    st.subheader(title)
    if name.endswith("hook_qkv") or name.startswith(blk + "ln1") or name.endswith("hook_resid_pre"):
        step_heatmap(ctx, name, key="s")
    else:
        head_step(ctx, name, key="s")
    explain(tr.info(name))

st.subheader("9 · The heads side by side (concatenated)")
step_heatmap(ctx, a + "hook_z", head=None, key="concat", title=f"concat(Z₀ … Z{cfg.n_head - 1}) · (T × n_head·d_head)")
st.markdown("Each head's weighted values are laid next to each other: one row of width n_head × d_head per position.")
st.code("y = y.transpose(1, 2).reshape(B, T, nh * hs)  # (B, T, nh*hs)", language="python")

st.subheader("10 · The output projection")
step_heatmap(ctx, blk + "hook_attn_out", key="s")
explain(tr.info(blk + "hook_attn_out"))

st.subheader("11 · The residual add")
step_heatmap(ctx, blk + "hook_resid_mid", key="s")
explain(tr.info(blk + "hook_resid_mid"))

st.subheader("Switch heads off")
st.markdown("A head that is off gets all-zero attention weights, so it adds nothing; every step after it is recomputed.")
heads_off_toggle(ctx, L, key="att")
clear_edits_button(ctx, key="att")

st.subheader("Why attention? Against a plain average")
pat = np.asarray(tr[a + "hook_pattern"])[ctx.b, H or 0, : ctx.n_pos, : ctx.n_pos]
mk = masked(ctx)[: ctx.n_pos, : ctx.n_pos]
labels = ctx.labels()
avg = views.averaging_matrix(ctx.n_pos)
left = views.Matrix(np.where(mk, np.nan, avg), labels, labels, "query", "key", "probability", mk)
right = views.Matrix(np.where(mk, np.nan, pat), labels, labels, "query", "key", "probability", mk)
st.plotly_chart(figures.side_by_side(left, right, "Plain average: row t gives 1/(t+1) to each earlier token",
                                     f"Learned weights, layer {L} head {H or 0}"), width="stretch", key="avg")
st.markdown("The simplest way to let a token use what came before is to average everything before it. "
            "Attention learns *which* earlier tokens deserve the weight, separately in every head.")

st.subheader("Every layer × every head")
tiles = [[np.asarray(tr[f"blocks.{l}.attn.hook_pattern"])[ctx.b, h, : ctx.n_pos, : ctx.n_pos] for h in range(cfg.n_head)]
         for l in range(cfg.n_layer)]
st.plotly_chart(figures.tiled_heatmap(tiles, [f"L{l}" for l in range(cfg.n_layer)], [f"H{h}" for h in range(cfg.n_head)],
                                      title="Attention weights of every head", masked=mk), width="stretch", key="overview")
