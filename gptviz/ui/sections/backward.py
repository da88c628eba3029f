"""The Backward pass page's sections: one step's forward value next to its gradient ∂loss/∂x, and the size of
the gradient on every parameter tensor."""
from __future__ import annotations

import numpy as np
import streamlit as st

from ...model.hook_names import act_name
from ...present import figures, matrices
from ...present.descriptions import step_info
from ...run import edits as edit_specs
from ..widgets import head_step, plot, step_heatmap
from . import section

# Each half's plot width on a 1280×720 screen (178 px measured in Chromium): the key labels stand upright and apart
# there (readable_x_labels), where at 45° eighteen tokens crossed each other.
HALF_PLOT_PX = 160


@section("backward.step")
def step(ctx, *, key: str = "bw") -> None:
    """A chosen step (default: the layer's attention weights) and its gradient side by side, with a sentence on
    the gradient (or on the switched-off head it belongs to), the formula and the line of PyTorch."""
    tr = ctx.trace(grads=True)
    names = [n for n in tr if tr.grad(n) is not None]
    default = act_name("pattern", ctx.layer)
    titles = {n: step_info(tr, n).title for n in names}  # not a closure over tr: the widget keeps its format_func
    choice = st.selectbox("Step", names, index=names.index(default) if default in names else 0, key=f"{key}.step",
                          format_func=lambda n: f"{titles[n]} · {n}")
    if ctx.grad_layer is not None:
        st.caption(f"This text is long, so the gradients kept are those of layer {ctx.grad_layer} (the layer chosen in "
                   "the sidebar) and of the steps outside every block: every layer's would not fit in memory. Choose "
                   "another layer to see its steps.")
    info = step_info(tr, choice)
    per_head = "head" in info.axes
    left, right = st.columns(2)
    with left:
        if per_head:
            head_step(ctx, choice, key=f"{key}.f", with_downloads=False, plot_px=HALF_PLOT_PX)
        else:
            step_heatmap(ctx, choice, key=f"{key}.f", with_downloads=False, plot_px=HALF_PLOT_PX)
    with right:
        if per_head:
            head_step(ctx, choice, key=f"{key}.g", grad=True, plot_px=HALF_PLOT_PX)
        else:
            step_heatmap(ctx, choice, key=f"{key}.g", grad=True, plot_px=HALF_PLOT_PX)
    # A switched-off head: its pattern is held at 0 but still has a gradient; what made it gets exactly none.
    off_note = None if ctx.edit_notice else edit_specs.switched_off_reading(
        tr, choice, ctx.s.get("edits"), ctx.head if per_head else None)
    st.info(off_note or matrices.gradient_reading(info, tr.grad(choice), ctx.labels(), ctx.b, ctx.head))
    st.latex(r"\frac{\partial \mathcal{L}}{\partial x} \quad\text{for } x = " + info.formula.split("=")[0])
    st.code("loss.backward()  # every x.grad now holds ∂loss/∂x", language="python")


@section("backward.param_grads")
def param_grads(ctx, *, key: str = "bw") -> None:
    """‖∂loss/∂W‖ of every parameter tensor as bars, the largest in red."""
    pg = ctx.trace(grads=True).param_grad_norms()
    names_p = list(pg)
    norms = [pg[n] for n in names_p]
    if norms:
        plot(ctx, figures.bar_chart([n.replace("transformer.", "") for n in names_p], norms,
                                          title="‖∂loss/∂W‖ for each weight", x_title="gradient norm",
                                          highlight=int(np.argmax(norms))), key=f"{key}.params")
        st.caption("The largest bar (red) is the weight the next training step would move most. "
                   "These are the gradients of the loss on your text, before any optimiser.")
