"""The MLP & residual stream page's sections: the MLP's steps for one layer, and how the residual stream
grows through the network."""
from __future__ import annotations

from typing import Optional

import streamlit as st

from ...model.hook_names import act_name
from ...present import figures, matrices
from ...present.descriptions import step_info
from ..widgets import explain, plot, step_heatmap
from . import section


def mlp_steps(cfg, layer: int) -> list[tuple[str, str]]:
    """(title, hook name) for every step of one layer's MLP, in order (empty for an attention-only model)."""
    if cfg.attn_only:
        return []
    steps = ([("1 · The norm", act_name("out", layer, "ln2"))] if cfg.norm_placement == "pre"
             and cfg.sublayer_norms != "after" else
             [("1 · The input (post-norm: the MLP reads the normalised stream)", act_name("resid_mid", layer))]
             if cfg.norm_placement != "pre" else
             [("1 · The input (norm after the sublayer: the MLP reads the raw stream)", act_name("resid_mid", layer))])
    if getattr(cfg, "n_expert", 0) and cfg.is_moe_layer(layer):  # a mixture of experts (the Experts page has more)
        shared = [("4b · The shared expert's gate", act_name("shared_gate", layer)),
                  ("4c · The shared expert's output, gated", act_name("shared_out", layer))] \
            if cfg.d_shared_expert else []
        return steps + [("2 · The router's logits, one per expert", act_name("router_logits", layer)),
                        ("3 · The router's probabilities (softmax)", act_name("router_probs", layer)),
                        (f"4 · The chosen experts' weights (top {cfg.n_expert_active})",
                         act_name("expert_weights", layer))] + shared + [
            ("5 · The chosen experts' outputs, weighted and added", act_name("mlp_out", layer)),
            ("6 · The residual add", act_name("resid_post", layer))]
    steps += [("2 · Widen: the fc layer", act_name("pre", layer)), ("3 · The activation", act_name("post", layer))]
    if cfg.sublayer_norms != "before":  # Gemma 2, 3 and OLMo 2: the projection's output normalised before the add
        steps += [("4 · Narrow again, then normalise: the RMS (ln2_post)", act_name("scale", layer, "ln2_post")),
                  ("4 · … divided by it", act_name("normalized", layer, "ln2_post"))]
    return steps + [("4 · Narrow again: the projection" + (" (normalised, times the gain)"
                                                           if cfg.sublayer_norms != "before" else ""),
                     act_name("mlp_out", layer)),
                    ("5 · The residual add", act_name("resid_post", layer))]


@section("mlp.steps")
def steps(ctx, *, key: str = "mlp", step: Optional[int] = None) -> None:
    """The chosen layer's MLP, step by step (or only step ``step``, counted from 0)."""
    tr = ctx.trace()
    all_steps = mlp_steps(ctx.cfg, ctx.layer)
    if not all_steps:
        st.info("This model is **attention only**: its blocks have no MLP, so each layer's output is the residual "
                "stream after attention. The residual stream's growth is below.")
        return
    if step is not None:
        all_steps = [all_steps[max(0, min(step, len(all_steps) - 1))]]
    for title, name in all_steps:
        st.subheader(title)
        step_heatmap(ctx, name, key=key)
        explain(step_info(tr, name))


@section("mlp.residual_growth")
def residual_growth(ctx, *, key: str = "norms") -> None:
    """‖x‖ of every position at every point of the residual stream, and its mean."""
    norms, stages = matrices.residual_norms(ctx.trace(), ctx.b, ctx.n_pos)
    labels = ctx.labels()
    m = matrices.Matrix(norms, stages, labels, "point in the stream", "position", "nonnegative",
                     hover_rows=stages, hover_cols=matrices.token_hover(labels))
    plot(ctx, figures.heatmap(m, "‖x‖ of each position at each point of the residual stream"), key=key)
    plot(ctx, figures.line_chart({"mean over positions": norms.mean(axis=1).tolist()}, x=list(range(len(stages))),
                                 title="Mean ‖x‖ through the network", x_title="point in the stream (0 = embeddings)",
                                 y_title="‖x‖"), key=f"{key}.line")
    st.markdown("Every attention and MLP block *adds* to the stream, so its size tends to grow layer by layer. "
                "The norm before each block rescales what that block reads, not the stream itself.")
