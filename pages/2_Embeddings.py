"""Embeddings: token lookup (rows of a table, the same as one-hot × W_E), positions, and their sum."""
import numpy as np
import streamlit as st

from gptviz import figures, views
from gptviz.model import rope_angles
from gptviz.ui import clear_edits_button, explain, page_setup, step_heatmap, vector_editor

ctx = page_setup("Embeddings", "🧭")
cfg, tr = ctx.cfg, ctx.trace()
labels = ctx.labels()
st.title("Embeddings")

st.subheader("1 · Token embedding: pick a row of W_E for each token")
step_heatmap(ctx, "hook_embed", key="emb")
explain(tr.info("hook_embed"))

ids = ctx.batch.x[ctx.b, : ctx.n_pos].tolist()
wte = ctx.model.transformer.wte.weight.detach().numpy()
onehot, rows, product, cols = views.embedding_lookup(wte, ids)
col_labels = [ctx.id_label(i) for i in cols]
with st.expander("The same thing as a matrix product: one-hot(x) × W_E", expanded=cfg.vocab_size <= 64):
    c1, c2 = st.columns(2)
    m1 = views.Matrix(onehot, labels, col_labels, "position", "vocabulary", "probability",
                      hover_rows=views.token_hover(labels), hover_cols=[f"id {i}: '{l}'" for i, l in zip(cols, col_labels)])
    c1.plotly_chart(figures.heatmap(m1, "one-hot(x)" + ("" if len(cols) == cfg.vocab_size else " (only the ids in the text)")),
                    width="stretch", key="onehot")
    m2 = views.Matrix(rows, col_labels, [str(d) for d in range(cfg.n_embd)], "token", "d_model dim", "signed",
                      hover_rows=[f"id {i}: '{l}'" for i, l in zip(cols, col_labels)])
    c2.plotly_chart(figures.heatmap(m2, "W_E (rows of the embedding table)"), width="stretch", key="wte")
    diff = float(np.abs(product - np.asarray(tr["hook_embed"])[ctx.b, : ctx.n_pos]).max())
    st.success(f"one-hot(x) × W_E equals the lookup W_E[x]: largest difference {diff:.1e}.")

st.subheader("2 · Positions")
if cfg.pos_encoding in ("learned", "sinusoidal"):
    step_heatmap(ctx, "hook_pos_embed", key="pos")
    explain(tr.info("hook_pos_embed"))
elif cfg.pos_encoding == "rope":
    ang = rope_angles(ctx.n_pos, cfg.d_head, cfg.rope_base).numpy()
    m = views.Matrix(ang, labels, [f"pair {i}" for i in range(ang.shape[1])], "position", "dimension pair", "nonnegative",
                     hover_rows=views.token_hover(labels))
    st.plotly_chart(figures.heatmap(m, "Rotary angles θ[t, i] = t · base^(−2i/d_head) (radians)"), width="stretch", key="rope")
    st.markdown("With rotary positions nothing is added to the token embedding. Inside attention each query and key "
                "is turned pair by pair by these angles, so a score depends on how far apart two tokens are.")
    st.latex(r"\theta_{t,i} = t \cdot b^{-2i/d_{head}},\quad b = " + f"{cfg.rope_base:g}")
else:
    st.info("This model has no position encoding (pos_encoding='none'): only the causal mask tells it about order.")

st.subheader("3 · Their sum: the residual stream that enters layer 0")
step_heatmap(ctx, "blocks.0.hook_resid_pre", key="sum")
explain(tr.info("blocks.0.hook_resid_pre"))

st.subheader("Edit a token's embedding")
st.markdown("Change the numbers and every later step, on every page, is recomputed from them. The weights are not touched.")
pos = st.selectbox("Position", list(range(ctx.n_pos)), format_func=lambda t: f"{t}: '{labels[t]}'", key="emb.pos")
vector_editor(ctx, "hook_embed", pos, key="emb")
clear_edits_button(ctx, key="emb")
