"""Step sections: any recorded step by its hook name (``step``), and the Step-through page's walk through
every step in order."""
from __future__ import annotations

from typing import Optional

import streamlit as st

from ...model.hook_names import act_name
from ...present import figures, matrices
from ...present.descriptions import step_info
from ..widgets import clear_edits_button, explain, head_step, masked, plot, step_heatmap, vector_editor
from . import section

EDITABLE_WIDTH = 64


def mark_cell(fig, row: int, col: int, color: str = figures.HIGHLIGHT) -> None:
    """Outline one cell (row, col) of a heatmap whose cells sit at integer positions (category axes too)."""
    shapes = list(fig.layout.shapes or ())
    shapes.append(dict(type="rect", xref="x", yref="y", x0=col - 0.5, x1=col + 0.5, y0=row - 0.5, y1=row + 0.5,
                       line=dict(color=color, width=4), fillcolor="rgba(0,0,0,0)", name="answer"))
    fig.update_layout(shapes=shapes)


def _marked_heatmap(ctx, name: str, head: Optional[int], key: str, highlight: dict) -> None:
    """The step's heatmap with the highlighted query row outlined and its answer cell boxed."""
    tr = ctx.trace()
    info = step_info(tr, name)
    m = matrices.step_matrix(tr[name], info, ctx.labels(), ctx.b, head, masked=masked(ctx, name), n_pos=ctx.n_pos)
    row, col = highlight.get("row"), highlight.get("col")
    title = info.title + (f" · head {head}" if head is not None and "head" in info.axes else "")
    fig = figures.heatmap(m, title, show_values=ctx.s.get("show_values", False), highlight_row=row)
    if row is not None and col is not None:
        mark_cell(fig, row, col, "#d62728")
    plot(ctx, fig, key=f"fig.{key}{name}.hl")


@section("step")
def step(ctx, *, key: str = "one", hook: str = act_name("embed"), all_heads: bool = False, formula: bool = True,
         code: bool = True, highlight: Optional[dict] = None) -> bool:
    """Any recorded step by its hook name ("{layer}" is the chosen layer): its heatmap (the chosen head, or
    every head with ``all_heads``; a head-by-head step shows every head when "all heads" is chosen), then its
    sentence, formula and PyTorch line. ``highlight`` {"hook", "row", "col"} boxes one cell of that step.
    Returns whether the highlight was drawn."""
    name = hook.replace("{layer}", str(ctx.layer))
    tr = ctx.trace()
    if name not in tr:
        st.info(f"This model has no step `{name}` ({ctx.cfg.n_layer} layer(s), positions: "
                f"{ctx.cfg.pos_encoding}). Choose another model, or another step.")
        return False
    info = step_info(tr, name)
    per_head = "head" in info.axes
    files = not (ctx.style or {}).get("font_scale")  # no download buttons on a projector
    drawn = False
    if highlight and highlight.get("hook") == name and per_head:
        head = highlight.get("head", ctx.head or 0)
        _marked_heatmap(ctx, name, head, key, highlight)
        drawn = True
    elif all_heads and per_head and "query_pos" not in info.axes:
        step_heatmap(ctx, name, head=None, key=key + ".all", with_downloads=files,
                     title=f"{info.title} · heads concatenated")
    elif per_head:
        head_step(ctx, name, key=key, with_downloads=files)
    else:
        step_heatmap(ctx, name, key=key, head=None, with_downloads=files)
    explain(info, formula=formula, code=code)
    return drawn


def _shape_text(info, shape) -> str:
    return " × ".join(f"{ax} = {n}" for ax, n in zip(info.axes, shape)) or "a single number"


@section("steps.walk")
def walk(ctx, *, key: str = "step") -> None:
    """Every recorded step in order, with Previous / Next and a picker; its heatmap, shape, formula, code and
    sentence, and an editor for one row of any small step. The position is the shared setting "step"."""
    tr = ctx.trace()
    names = list(tr)
    s = ctx.s
    s["step"] = max(0, min(int(s.get("step", 0)), len(names) - 1))
    jump_key = f"{key}.jump"

    def go(delta: int) -> None:
        s["step"] = max(0, min(s["step"] + delta, len(names) - 1))
        st.session_state[jump_key] = s["step"]

    def jump() -> None:
        s["step"] = st.session_state[jump_key]

    st.session_state[jump_key] = s["step"]
    c1, c2, c3 = st.columns([1, 4, 1])
    c1.button("◀ Previous", on_click=go, args=(-1,), disabled=s["step"] == 0, width="stretch", key=f"{key}.prev")
    shown = [f"{i + 1}/{len(names)} · {step_info(tr, n).title} · {n}" for i, n in enumerate(names)]
    c2.selectbox("Step", list(range(len(names))), key=jump_key, on_change=jump, label_visibility="collapsed",
                 format_func=shown.__getitem__)  # not a closure over tr: the session keeps a widget's format_func
    c3.button("Next ▶", on_click=go, args=(1,), disabled=s["step"] == len(names) - 1, width="stretch",
              key=f"{key}.next")

    name = names[s["step"]]
    info = step_info(tr, name)
    st.title(f"{s['step'] + 1}. {info.title}")
    if "head" in info.axes:
        head_step(ctx, name, key=key)
    else:
        step_heatmap(ctx, name, key=key, head=None)
    left, right = st.columns([3, 2])
    with left:
        st.markdown(f"### {info.explanation}")
        st.latex(info.formula)
        st.code(info.code, language="python")
    shape = tr.shape(name)
    with right:
        st.markdown(f"**Hook name** `{name}`")
        st.markdown("**Shape** " + _shape_text(info, shape))
        st.markdown(f"**Values** {info.kind}" + (" (grey = masked)" if info.kind in ("masked", "probability")
                                                 and info.layer is not None else ""))

    width = shape[-1] if shape else 0
    if info.kind != "masked" and len(shape) >= 3 and width <= EDITABLE_WIDTH and name != act_name("probs"):
        # a toggle, not an expander: a collapsed expander still builds its table editor on every rerun
        if st.toggle("Edit this step: change one row and watch everything after it change", key=f"{key}.edit.on"):
            what = "query" if "query_pos" in info.axes else "position"
            labels = ctx.labels()
            pos = st.selectbox(what.capitalize(), list(range(ctx.n_pos)), format_func=lambda t: f"{t}: '{labels[t]}'",
                               key=f"{key}.edit.pos")
            if "head" in info.axes and ctx.head is None:
                st.caption("Editing head 0; choose a head in the sidebar to edit another.")
            vector_editor(ctx, name, pos, key=key, head=ctx.head)
            clear_edits_button(ctx, key=key)
