"""The Embeddings page's sections: the token lookup (and the same as one-hot × W_E), the positions, their
sum, and editing a token's embedding."""
from __future__ import annotations

import streamlit as st

from ...model.hook_names import act_name
from ...model.layers import rope_angles
from ...present import figures, matrices, readouts
from ...present.descriptions import step_info
from ..widgets import clear_edits_button, explain, plot, step_heatmap, vector_editor
from . import section


@section("embeddings.token")
def token(ctx, *, key: str = "emb") -> None:
    """Pick a row of W_E for each token."""
    step_heatmap(ctx, act_name("embed"), key=key)
    explain(step_info(ctx.trace(), act_name("embed")))


@section("embeddings.onehot")
def onehot(ctx, *, key: str = "onehot", expanded: bool | None = None) -> None:
    """The lookup as a matrix product one-hot(x) × W_E, checked against the lookup itself."""
    cfg, tr = ctx.cfg, ctx.trace()
    labels = ctx.labels()
    ids = ctx.batch.x[ctx.b, : ctx.n_pos].tolist()
    wte = ctx.model.transformer.wte.weight.detach().numpy()
    oh, rows, product, cols = matrices.embedding_lookup(wte, ids)
    col_labels = [ctx.id_label(i) for i in cols]
    with st.expander("The same thing as a matrix product: one-hot(x) × W_E",
                     expanded=cfg.vocab_size <= 64 if expanded is None else expanded):
        c1, c2 = st.columns(2)
        m1 = matrices.Matrix(oh, labels, col_labels, "position", "vocabulary", "probability",
                          hover_rows=matrices.token_hover(labels),
                          hover_cols=[f"id {i}: '{l}'" for i, l in zip(cols, col_labels)])
        with c1:
            plot(ctx, figures.heatmap(m1, "one-hot(x)" + ("" if len(cols) == cfg.vocab_size else
                                                         " (only the ids in the text)")), key=f"{key}.onehot")
        m2 = matrices.Matrix(rows, col_labels, [str(d) for d in range(cfg.n_embd)], "token", "d_model dim", "signed",
                          hover_rows=[f"id {i}: '{l}'" for i, l in zip(cols, col_labels)])
        with c2:
            plot(ctx, figures.heatmap(m2, "W_E (rows of the embedding table)"), key=f"{key}.wte")
        diff = readouts.lookup_difference(product, tr[act_name("embed")][ctx.b, : ctx.n_pos])
        st.success(f"one-hot(x) × W_E equals the lookup W_E[x]: largest difference {diff:.1e}.")


@section("embeddings.positions")
def positions(ctx, *, key: str = "pos") -> None:
    """The position table: learned, sin/cos, rotary angles, or none."""
    cfg, tr = ctx.cfg, ctx.trace()
    if cfg.pos_encoding in ("learned", "sinusoidal"):
        step_heatmap(ctx, act_name("pos_embed"), key=key)
        explain(step_info(tr, act_name("pos_embed")))
    elif cfg.pos_encoding == "rope":
        labels = ctx.labels()
        ang = rope_angles(ctx.n_pos, cfg.d_rot, cfg.rope_base).numpy()
        m = matrices.Matrix(ang, labels, [f"pair {i}" for i in range(ang.shape[1])], "position", "dimension pair",
                         "nonnegative", hover_rows=matrices.token_hover(labels))
        d = "d_head" if cfg.d_rot == cfg.d_head else "d_rot"
        plot(ctx, figures.heatmap(m, f"Rotary angles θ[t, i] = t · base^(−2i/{d}) (radians)"), key=f"{key}.rope")
        st.markdown("With rotary positions nothing is added to the token embedding. Inside attention each query and "
                    "key is turned pair by pair by these angles, so a score depends on how far apart two tokens are."
                    + ("" if cfg.d_rot == cfg.d_head else f" This model turns only the first d_rot = {cfg.d_rot} of "
                       f"each head's {cfg.d_head} dimensions (rotary_pct = {cfg.rotary_pct:g}); the rest pass "
                       "through unturned."))
        st.latex(r"\theta_{t,i} = t \cdot b^{-2i/d_{" + d[2:] + r"}},\quad b = " + f"{cfg.rope_base:g}")
    else:
        st.info("This model has no position encoding (pos_encoding='none'): only the causal mask tells it about "
                "order.")


@section("embeddings.sum")
def total(ctx, *, key: str = "sum") -> None:
    """Token plus position: the residual stream that enters layer 0."""
    step_heatmap(ctx, act_name("resid_pre", 0), key=key)
    explain(step_info(ctx.trace(), act_name("resid_pre", 0)))


@section("embeddings.edit")
def edit(ctx, *, key: str = "emb") -> None:
    """Edit one position's token embedding; every later step is recomputed (the weights are not touched)."""
    labels = ctx.labels()
    st.markdown("Change the numbers and every later step, on every page, is recomputed from them. The weights are "
                "not touched.")
    pos = st.selectbox("Position", list(range(ctx.n_pos)), format_func=lambda t: f"{t}: '{labels[t]}'",
                       key=f"{key}.pos")
    vector_editor(ctx, act_name("embed"), pos, key=key)
    clear_edits_button(ctx, key=key)
