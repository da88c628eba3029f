"""The backward pass: d loss / d every recorded step, next to its forward value."""
import numpy as np
import streamlit as st

from gptviz.run import edits as edit_specs
from gptviz.present import figures, matrices
from gptviz.ui import head_step, page_setup, step_heatmap

ctx = page_setup("Backward pass", ":material/undo:")
tr = ctx.trace(grads=True)
st.title("Backward pass")
st.markdown("The loss is a single number. Backpropagation works out, for every number in every step, how much "
            "the loss would change if that number changed a little: **∂loss/∂x**. Gradients are signed, so "
            "they use the same blue–white–red scale, centred on 0.")

names = [n for n in tr if tr.grad(n) is not None]
default = f"blocks.{ctx.layer}.attn.hook_pattern"
choice = st.selectbox("Step", names, index=names.index(default) if default in names else 0, key="bw.step",
                      format_func=lambda n: f"{tr.info(n).title} · {n}")
info = tr.info(choice)
per_head = "head" in info.axes
left, right = st.columns(2)
with left:
    if per_head:
        head_step(ctx, choice, key="bw.f", with_downloads=False)
    else:
        step_heatmap(ctx, choice, key="bw.f", with_downloads=False)
with right:
    if per_head:
        head_step(ctx, choice, key="bw.g", grad=True)
    else:
        step_heatmap(ctx, choice, key="bw.g", grad=True)
# A switched-off head: its pattern is held at 0 but still has a gradient; what made it gets exactly none.
off_note = None if ctx.edit_notice else edit_specs.switched_off_reading(
    tr, choice, ctx.s.get("edits"), ctx.head if per_head else None)
st.info(off_note or matrices.gradient_reading(info, tr.grad(choice), ctx.labels(), ctx.b, ctx.head))
st.latex(r"\frac{\partial \mathcal{L}}{\partial x} \quad\text{for } x = " + info.formula.split("=")[0])
st.code("loss.backward()  # every x.grad now holds ∂loss/∂x", language="python")

st.subheader("Gradient size of every parameter tensor")
pg = tr.param_grad_norms()
names_p = list(pg)
norms = [pg[n] for n in names_p]
if norms:
    st.plotly_chart(figures.bar_chart([n.replace("transformer.", "") for n in names_p], norms,
                                      title="‖∂loss/∂W‖ for each weight", x_title="gradient norm",
                                      highlight=int(np.argmax(norms))),
                    width="stretch", key="bw.params")
    st.caption("The largest bar (red) is the weight the next training step would move most. "
               "These are the gradients of the loss on your text, before any optimiser.")
