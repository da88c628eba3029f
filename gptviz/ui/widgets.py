"""Widgets several pages share: a step shown as a heatmap with its words, downloads, tensor editors."""
from __future__ import annotations

import io
from typing import Optional

import numpy as np
import pandas as pd
import streamlit as st

from .. import figures
from ..steps import StepInfo
from ..views import MAX_COLS, page_count, step_matrix
from ..views import masked_cells as _masked_cells
from .page import Ctx


def masked(ctx: Ctx) -> Optional[np.ndarray]:
    return _masked_cells(ctx.trace(), ctx.b)


def explain(info: StepInfo, formula: bool = True, code: bool = True) -> None:
    """The step's sentence, formula and PyTorch line."""
    st.markdown(info.explanation)
    if formula:
        st.latex(info.formula)
    if code:
        st.code(info.code, language="python")


def _csv_bytes(values: np.ndarray, rows, cols) -> bytes:
    df = pd.DataFrame(np.asarray(values), index=list(rows), columns=list(cols))
    return df.to_csv().encode("utf-8")


def _npy_bytes(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.asarray(arr), allow_pickle=False)
    return buf.getvalue()


def downloads(name: str, full: np.ndarray, shown=None, key: str = "") -> None:
    """Download buttons: the whole tensor as .npy, and the slice on screen as CSV. Built only when clicked."""
    safe = name.replace(".", "_")
    c1, c2 = st.columns(2)
    c1.download_button("⬇ .npy (whole tensor)", data=lambda: _npy_bytes(full), file_name=f"{safe}.npy",
                       mime="application/octet-stream", key=f"dl.npy.{key}{name}", on_click="ignore")
    if shown is not None:
        c2.download_button("⬇ CSV (this view)", data=lambda: _csv_bytes(shown.values, shown.rows, shown.cols),
                           file_name=f"{safe}.csv", mime="text/csv", key=f"dl.csv.{key}{name}", on_click="ignore")


def step_heatmap(ctx: Ctx, name: str, head: Optional[int] = None, title: Optional[str] = None, key: str = "",
                 grad: bool = False, height: Optional[int] = None, with_downloads: bool = True):
    """One recorded step (or its gradient) for the selected batch row, as a heatmap with a pager if wide."""
    tr = ctx.trace(grads=grad)
    info = tr.info(name)
    value = tr.grad(name) if grad else tr[name]
    if value is None:
        st.info(f"{info.title}: the loss does not depend on this step, so it has no gradient.")
        return None
    kind = "signed" if grad else info.kind
    if grad and info.kind == "masked":
        kind = "signed"
    labels = ctx.labels()
    width = _width(np.asarray(value), info, head)
    page = 0
    if width > MAX_COLS:
        pages = page_count(width)
        page = st.number_input(f"Columns page (of {pages})", 1, pages, 1, key=f"page.{key}{name}") - 1
    from dataclasses import replace as dc_replace

    m = step_matrix(value, dc_replace(info, kind=kind) if kind != info.kind else info, labels, ctx.b, head,
                    page, masked=masked(ctx), n_pos=ctx.n_pos)
    t = title or (("∂loss/∂ " if grad else "") + info.title)
    if head is not None and "head" in info.axes:
        t += f" · head {head}"
    fig = figures.heatmap(m, t, show_values=ctx.s.get("show_values", False), height=height)
    st.plotly_chart(fig, width="stretch", key=f"fig.{key}{name}{'.g' if grad else ''}")
    if with_downloads:
        downloads(name + (".grad" if grad else ""), value, m, key=key)
    return m


def _width(v: np.ndarray, info: StepInfo, head: Optional[int]) -> int:
    axes = info.axes
    if "query_pos" in axes or len(axes) <= 2:
        return 1
    if len(axes) == 4 and axes[2] == "head":
        return v.shape[3] if head is not None else v.shape[2] * v.shape[3]
    return v.shape[-1]


def heads_off_toggle(ctx: Ctx, layer: int, key: str = "") -> None:
    """Switch heads of one layer off and on; the trace is recomputed with their weights zeroed."""
    spec = ctx.s.setdefault("edits", {"set": [], "heads_off": []})
    off = {tuple(h) for h in spec.get("heads_off", [])}
    cols = st.columns(min(ctx.cfg.n_head, 8))
    for h in range(ctx.cfg.n_head):
        k = f"gptviz.headoff.{layer}.{h}"
        st.session_state[k] = (layer, h) in off
        cols[h % len(cols)].toggle(f"L{layer} H{h} off", key=k, on_change=_flip_head, args=(ctx.s, layer, h))


def _flip_head(s: dict, layer: int, head: int) -> None:
    spec = s.setdefault("edits", {"set": [], "heads_off": []})
    off = {tuple(h) for h in spec.get("heads_off", [])}
    off ^= {(layer, head)}
    spec["heads_off"] = sorted(off)


def clear_edits_button(ctx: Ctx, key: str = "") -> None:
    spec = ctx.s.get("edits") or {}
    n = len(spec.get("set", [])) + len(spec.get("heads_off", [])) + len(ctx.s.get("id_edits") or {})
    if n:
        st.caption(f"{n} edit(s) active: everything below is recomputed with them.")
        if st.button("Clear all edits", key=f"clear.{key}"):
            ctx.s["edits"] = {"set": [], "heads_off": []}
            ctx.s["id_edits"] = {}
            ctx.s["edit_gen"] = ctx.s.get("edit_gen", 0) + 1  # fresh editors: forget their typed values
            st.rerun()
    if ctx.edit_notice:
        st.warning(ctx.edit_notice)


def vector_editor(ctx: Ctx, name: str, pos: int, key: str = "", head: Optional[int] = None) -> None:
    """Edit one row of a step (a position's vector, or one query's attention row for a head) in a table;
    every later step is recomputed from the edited values."""
    tr = ctx.trace()
    info = tr.info(name)
    value = np.asarray(tr[name])
    if info.axes[:2] == ("batch", "head"):
        index = [ctx.b, head or 0, pos]
    elif len(info.axes) == 4:
        index = [ctx.b, pos, head or 0]
    else:
        index = [ctx.b, pos]
    vec = value[tuple(index)]
    if vec.ndim != 1:
        st.info("This step has no row of numbers to edit.")
        return
    if "key_pos" in info.axes:
        vec = vec[: ctx.n_pos]
    df = pd.DataFrame({"index": np.arange(vec.shape[-1]), "value": vec.astype(float)})
    gen = ctx.s.get("edit_gen", 0)
    edited = st.data_editor(df, key=f"edit.{key}{name}.{'.'.join(map(str, index))}.{gen}", hide_index=True,
                            disabled=["index"], width="stretch", height=min(400, 38 + 35 * len(df)))
    new = edited["value"].to_numpy(dtype=float)
    if not np.all(np.isfinite(new)):
        st.warning("Every value must be a number; the empty or invalid cells were not applied.")
        return
    if not np.allclose(new, vec, atol=1e-7, rtol=0):
        full = value[tuple(index)].astype(float).copy()
        full[: len(new)] = new
        spec = ctx.s.setdefault("edits", {"set": [], "heads_off": []})
        items = [e for e in spec.get("set", []) if not (e["name"] == name and e["index"] == index)]
        items.append({"name": name, "index": index, "values": [float(v) for v in full]})
        spec["set"] = items
        st.rerun()


def head_step(ctx: Ctx, name: str, key: str = "", grad: bool = False, with_downloads: bool = True):
    """A per-head step for the selected head, or for every head at once when "all heads" is chosen."""
    tr = ctx.trace(grads=grad)
    info = tr.info(name)
    if ctx.head is not None or "query_pos" not in info.axes:
        return step_heatmap(ctx, name, head=ctx.head, key=key, grad=grad, with_downloads=with_downloads)
    value = tr.grad(name) if grad else tr[name]
    if value is None:
        st.info(f"{info.title}: the loss does not depend on this step, so it has no gradient.")
        return None
    v = np.asarray(value)[ctx.b, :, : ctx.n_pos, : ctx.n_pos]
    H = v.shape[0]
    per_row = min(H, 4)
    rows = (H + per_row - 1) // per_row
    tiles = [[v[r * per_row + c] if r * per_row + c < H else np.full_like(v[0], np.nan) for c in range(per_row)]
             for r in range(rows)]
    kind = "signed" if grad or info.kind == "masked" else info.kind
    mk = masked(ctx)
    mk = None if mk is None else mk[: ctx.n_pos, : ctx.n_pos]
    if not grad and info.kind == "masked":
        mk = np.isneginf(v[0]) if mk is None else mk
    fig = figures.tiled_heatmap(tiles, [f"heads {r * per_row}–{min(H, (r + 1) * per_row) - 1}" for r in range(rows)],
                                [f"+{c}" for c in range(per_row)] if rows > 1 else [f"head {c}" for c in range(per_row)],
                                kind=kind, title=("∂loss/∂ " if grad else "") + info.title + " · every head (rows: query, columns: key)",
                                masked=mk)
    st.plotly_chart(fig, width="stretch", key=f"fig.{key}{name}.all{'.g' if grad else ''}")
    if with_downloads:
        downloads(name + (".grad" if grad else ""), value, None, key=key)
    return None
