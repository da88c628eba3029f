"""The Home page's sections: what the app is with the model's loss and one attention pattern, the model's
diagram with the batch's shapes, its parameter table, and the downloads."""
from __future__ import annotations

import pandas as pd
import streamlit as st

from ...model.hook_names import act_name
from ...present import figures
from ..widgets import loss_metrics, step_heatmap
from . import section
from .report import download as report_download


@section("home.welcome")
def welcome(ctx, *, key: str = "home") -> None:
    """What the app does, the loss and parameter count of the model shown, and its attention weights."""
    left, right = st.columns([2, 3])
    with left:
        st.markdown(
            "Type a sentence in the sidebar, pick a tokenizer and the model's shape, then walk the forward pass "
            "page by page. **Every tensor is a heatmap** with its formula, its line of PyTorch and a sentence on "
            "what it means. Change anything and everything after it is computed again."
        )
        loss_metrics(ctx)
        st.metric("Parameters", f"{ctx.model.num_params():,}")
    with right:
        step_heatmap(ctx, act_name("pattern", ctx.layer), head=ctx.head if ctx.head is not None else 0,
                     title=f"Attention weights, layer {ctx.layer}", key=key, height=380, with_downloads=False)


@section("home.architecture")
def architecture(ctx, *, key: str = "home") -> None:
    """The model as a diagram of boxes, with the shapes of this batch, and its sizes in one line."""
    cfg = ctx.cfg
    B, T = ctx.batch.x.shape
    st.markdown(figures.architecture_html(cfg, B, T), unsafe_allow_html=True)
    st.caption(
        f"B={B} rows · T={T} positions · n_embd={cfg.n_embd} · n_head={cfg.n_head} · d_head={cfg.d_head} · "
        f"d_mlp={cfg.d_mlp} · vocab={cfg.vocab_size} · {cfg.n_layer} layer(s) · "
        f"{cfg.norm}, {cfg.norm_placement}-norm · "
        f"{cfg.pos_encoding} positions · {cfg.activation}"
    )


@section("home.parameters")
def parameters(ctx, *, key: str = "home") -> None:
    """Every parameter tensor with its shape and count, in an expander (open for a small model)."""
    rows = ctx.model.parameter_table()
    df = pd.DataFrame([{"tensor": r["name"], "shape": " × ".join(map(str, r["shape"])), "count": r["count"]}
                       for r in rows])
    with st.expander(f"All {len(df)} tensors", expanded=len(df) <= 16):
        st.table(df.set_index("tensor"))


@section("home.downloads")
def downloads(ctx, *, key: str = "home") -> None:
    """The config as JSON, and the HTML report of this view."""
    c1, c2 = st.columns(2)
    with c2:
        report_download(ctx, key=f"{key}.report")
    c1.download_button("⬇ Config (JSON)", ctx.cfg.to_json(), file_name="gptviz-config.json", mime="application/json")
