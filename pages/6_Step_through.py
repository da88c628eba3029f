"""Every recorded step, one at a time, in the order the model computes them."""
import streamlit as st

from gptviz.ui import clear_edits_button, head_step, page_setup, step_heatmap, vector_editor

ctx = page_setup("Step-through", "⏯️")
tr = ctx.trace()
names = list(tr)
s = ctx.s
s["step"] = max(0, min(int(s.get("step", 0)), len(names) - 1))


def go(delta: int) -> None:
    s["step"] = max(0, min(s["step"] + delta, len(names) - 1))
    st.session_state["step.jump"] = s["step"]


def jump() -> None:
    s["step"] = st.session_state["step.jump"]


st.session_state["step.jump"] = s["step"]
c1, c2, c3 = st.columns([1, 4, 1])
c1.button("◀ Previous", on_click=go, args=(-1,), disabled=s["step"] == 0, width="stretch")
c2.selectbox("Step", list(range(len(names))), key="step.jump", on_change=jump, label_visibility="collapsed",
             format_func=lambda i: f"{i + 1}/{len(names)} · {tr.info(names[i]).title} · {names[i]}")
c3.button("Next ▶", on_click=go, args=(1,), disabled=s["step"] == len(names) - 1, width="stretch")

name = names[s["step"]]
info = tr.info(name)
st.title(f"{s['step'] + 1}. {info.title}")
if "head" in info.axes:
    head_step(ctx, name, key="step")
else:
    step_heatmap(ctx, name, key="step", head=None)
left, right = st.columns([3, 2])
with left:
    st.markdown(f"### {info.explanation}")
    st.latex(info.formula)
    st.code(info.code, language="python")
with right:
    shape = tr.shape(name)
    st.markdown(f"**Hook name** `{name}`")
    st.markdown("**Shape** " + (" × ".join(f"{ax} = {n}" for ax, n in zip(info.axes, shape)) or "a single number"))
    st.markdown(f"**Values** {info.kind}" + (" (grey = masked)" if info.kind in ("masked", "probability") and info.layer is not None else ""))

EDITABLE_WIDTH = 64
width = shape[-1] if shape else 0
if info.kind != "masked" and len(shape) >= 3 and width <= EDITABLE_WIDTH and not name.startswith("hook_probs"):
    with st.expander("Edit this step: change one row and watch everything after it change"):
        what = "query" if "query_pos" in info.axes else "position"
        labels = ctx.labels()
        pos = st.selectbox(what.capitalize(), list(range(ctx.n_pos)), format_func=lambda t: f"{t}: '{labels[t]}'",
                           key="step.edit.pos")
        if "head" in info.axes and ctx.head is None:
            st.caption("Editing head 0; choose a head in the sidebar to edit another.")
        vector_editor(ctx, name, pos, key="step", head=ctx.head)
        clear_edits_button(ctx, key="step")
