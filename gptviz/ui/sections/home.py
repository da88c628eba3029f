"""The Home page's sections: what the app is with the model's loss and one attention pattern, the model's
diagram with the batch's shapes, its parameter table, and the downloads."""
from __future__ import annotations

import pandas as pd
import streamlit as st

from ...interp import head_detector
from ...interp.head_detector import DESCRIPTIONS
from ...model.hook_names import act_name
from ...present import figures
from ..widgets import loss_metrics, step_heatmap
from . import section
from .attention import detector_scores
from .report import download as report_download


@section("home.welcome")
def welcome(ctx, *, key: str = "home") -> None:
    """What the app does, and the model's clearest attention head, named with its kind and score, large enough
    to read every token on a projector; beside it the loss and the parameter count."""
    layer, head, kind, score = _clearest(ctx)
    left, right = st.columns([4, 1])
    with left:
        title = f"Layer {layer}, head {head}: a {kind} head (score {score:.2f})" if kind else \
            f"Attention weights, layer {layer}"
        step_heatmap(ctx, act_name("pattern", layer), head=head, title=title, key=key, height=HOME_CHART_PX,
                     with_downloads=False, plot_px=HOME_PLOT_PX)
    with right:
        st.markdown("Type a sentence in the sidebar, then walk the forward pass: **every tensor is a heatmap** with "
                    "its formula, its PyTorch and a sentence.")
        loss_metrics(ctx, stacked=True)
        st.metric("Parameters", f"{ctx.model.num_params():,}")
        if kind:
            st.caption(f"The head the detector finds clearest on your text: {DESCRIPTIONS[kind]}")
            if st.button("Open it on Attention", key=f"{key}.open", icon=":material/visibility:"):
                ctx.s["layer"], ctx.s["head"] = layer, head
                st.switch_page(ATTENTION_PAGE)


# The chart's height, and its plot's width on a 1280×720 screen (four fifths of the main column, less the row
# labels and the colour bar): the width decides whether key labels stand level or upright (readable_x_labels).
HOME_CHART_PX = 560
HOME_PLOT_PX = 390
ATTENTION_PAGE = "app_pages/attention.py"


def _clearest(ctx) -> tuple[int, int, str, float]:
    """(layer, head, kind, score) of the model's clearest head (``head_detector.clearest_head``); the sidebar's
    layer and head with no kind when the detector can't score this model."""
    try:
        return head_detector.clearest_head(detector_scores(ctx))
    except Exception:  # noqa: BLE001 - the first screen draws whatever the detector makes of an odd model
        return ctx.layer, ctx.head if ctx.head is not None else 0, "", 0.0


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
