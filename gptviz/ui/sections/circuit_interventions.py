"""The Circuits page's interventions: scale a feature, the selection or a group (0 switches them off) and compare
each target logit's change as the graph predicts it with what the model computes, in one of circuit-tracer's three
ways of running the model (its ``feature_intervention``: attention held, nothing held, every layer held) or with the
transcoder spliced in (``gptviz.interp.graph_interventions``)."""
from __future__ import annotations

import streamlit as st

from ...present.figures.attribution_graph import intervention_bars
from ..widgets import plot
from . import section
from .circuits import _features_of, _groups, _view, chosen

MODE_WORDS = {
    "attention": "the model, attention held (circuit-tracer's default)",
    "free": "the model, nothing held",
    "direct": "the model, everything held: direct effects (the graph's own check)",
    "replacement": "the replacement model (transcoder and its errors in place of the MLPs)",
}
MODE_LEGEND = {"attention": "computed (attention held)", "free": "computed (nothing held)",
               "direct": "computed (everything held)", "replacement": "computed (replacement model)"}
MODE_CAPTIONS = {
    "attention": "The real model runs with its own MLPs; each chosen feature's decoder writes (new value − its "
                 "activation) into the MLP outputs it reaches, and every attention pattern is held at its value on "
                 "the prompt, as circuit-tracer's `feature_intervention` does by default. The norms and every later "
                 "feature respond, which the graph's straight lines leave out.",
    "free": "The real model with the feature's write changed and nothing held: the change also travels through "
            "where every later head looks.",
    "direct": "Attention patterns, every norm's divisor and every MLP output held: only the chosen features' own "
              "writes change. This is what the graph's edges claim, computed by a forward pass (circuit-tracer checks "
              "its graphs this way), so the two bars agree.",
    "replacement": "The transcoder and its fixed errors in place of every MLP, the features scaled where they are "
                   "encoded and everything after them run again.",
}


def _intervene_fn():
    try:
        from ...interp import graph_interventions
    except ImportError:
        return None
    return getattr(graph_interventions, "intervene", None)


@st.cache_data(max_entries=64, show_spinner="Scaling the features and running the model again…")
def _intervened(model_key: str, file: str, mtime: float, ids: tuple, features: tuple, scale: float,
                logit_ids: tuple, mode: str, _model, _tc) -> tuple[list, list]:
    out = _intervene_fn()(_model, _tc, list(ids), [tuple(f) for f in features], scale, list(logit_ids), mode=mode)
    return [float(v) for v in out["predicted"]], [float(v) for v in out["real"]]


@section("circuits.interventions")
def interventions(ctx, *, key: str = "circ.int", graph_key: str = "circ") -> None:
    """Scale a feature, the selection or a group (0: off), and compare each target logit's change as the graph
    predicts it with what the model computes."""
    view, why = _view(ctx, graph_key)
    if view is None:
        st.info(why, icon=":material/info:")
        return
    fn = _intervene_fn()
    if fn is None:
        st.info("Interventions are coming: the code that scales features in the replacement model is being written.",
                icon=":material/construction:")
        return
    groups = _groups()
    options = ["selected", *(f"group {i}" for i in range(len(groups)))]
    c1, c2 = st.columns([3, 2])
    what = c1.selectbox("Scale", options, key=f"{key}.what",
                        format_func=lambda o: "the selected nodes' features" if o == "selected"
                        else f"group: {groups[int(o.split()[1])][0]}")
    scale = c2.slider("by (0: switched off, 1: as they are)", 0.0, 2.0, 0.0, 0.1, key=f"{key}.scale")
    mode = st.radio("Computed in", list(MODE_WORDS), format_func=MODE_WORDS.get, key=f"{key}.mode",
                    help="How the model runs with the features changed. The first three are circuit-tracer's "
                         "`feature_intervention` (freeze_attention=True, freeze_attention=False, and every layer "
                         "constrained); the last is the local replacement model run again.")
    members = chosen(graph_key) if what == "selected" else groups[int(what.split()[1])][1:]
    if view.tc is None:
        st.info("This model has no MLPs, so its graph has no features to scale.", icon=":material/info:")
        return
    feats = _features_of(view, members)
    if not feats:
        st.info("No feature node of this graph is in it: select feature nodes on the graph (or make a group of them).")
        return
    mode = mode if mode in MODE_WORDS else "attention"
    try:
        pred, real = _intervened(str(ctx.model_key), view.file, view.mtime, view.ids, tuple(feats), float(scale),
                                 tuple(int(t) for t in view.graph.logit_ids), mode, ctx.model, view.tc)
    except Exception as exc:  # noqa: BLE001 - say what went wrong, never a traceback; the rest of the page goes on
        st.warning(f"The intervention could not be computed ({type(exc).__name__}: {exc}).")
        return
    plot(ctx, intervention_bars(view.logit_tokens, pred, real, f"{len(feats)} feature(s) × {scale:.1f}: the logits' "
                                "change", computed=MODE_LEGEND[mode]), key=f"{key}.bars")
    st.caption("Predicted: the graph's direct edges, linear, with attention and norms frozen. Computed: "
               + MODE_CAPTIONS[mode] + ("" if mode == "direct" else " Far apart: the effect is not the graph's "
                                        "straight lines."))
