"""Choosing a query and a key by position under a long text's attention map, where a cell is a pixel too small to
click: two lists of the positions with their tokens ("37: '␣the'"), the chosen cell's value, and a toggle that
zooms the map onto it. The choice is the session's selection (``ctx.s["sel"]``), outlined on every chart."""
from __future__ import annotations

from typing import Optional

import numpy as np
import streamlit as st

from ..present.markdown_text import plain_md
from ..present.matrices import Matrix
from ..present.page_context import Ctx

ZOOM_HALF = 24  # "Zoom to the selection" shows this many positions either side of the chosen query and key
def _strongest_key(values: np.ndarray, q: int, signed: bool = False) -> int:
    """The key query ``q`` weights most: the largest value in its row among keys 0..q (masked cells are NaN), the
    largest in size for a ``signed`` map (a gradient)."""
    row = np.asarray(values[q, : q + 1], dtype=float)
    row = np.abs(row) if signed else row
    return int(np.nanargmax(row)) if np.isfinite(row).any() else q


def _query_chosen(s: dict, wkey: str, values: np.ndarray, signed: bool) -> None:
    q = st.session_state.get(wkey + ".q")
    if q is None:
        return
    q = int(q)
    old = s.get("sel") if isinstance(s.get("sel"), (list, tuple)) and len(s.get("sel")) == 2 else None
    k = int(old[1]) if old is not None else None
    if k is None or k > q:
        strongest = _strongest_key(values, q, signed)
        if k is not None:  # the kept key would be in this query's future: refused, and said so
            st.session_state[wkey + ".note"] = (
                f"Key {k} comes after query {q}: a query may only look at itself and earlier positions (the causal "
                f"mask), so the key is now query {q}'s strongest key, {strongest}.")
        k = strongest
    s["sel"] = [q, k]


def _key_chosen(s: dict, wkey: str) -> None:
    q, k = st.session_state.get(wkey + ".q"), st.session_state.get(wkey + ".k")
    if q is None or k is None:
        return
    if not 0 <= int(k) <= int(q):
        st.session_state[wkey + ".note"] = f"Key {int(k)} comes after query {int(q)}: a query cannot look ahead."
        return
    s["sel"] = [int(q), int(k)]


def pick_cell(ctx: Ctx, m: Matrix, wkey: str) -> bool:
    """Under a big query × key map ``m``: the query and key as two lists of positions labelled with their tokens,
    keys only up to the query (the click path's rule: ``key <= query < n_pos``), the chosen cell's value, and a
    "Zoom to the selection" toggle. Choosing writes ``ctx.s["sel"]``. Returns whether to zoom onto the selection.
    A selection that does not fit this text (the text shrank) shows as none and is replaced on the next choice."""
    n = int(min(ctx.n_pos, m.values.shape[0], m.values.shape[1]))
    if n < 1:
        return False
    labels = ctx.labels()
    name = (lambda i: f"{i}: '{labels[i]}'" if i < len(labels) else str(i))
    sel = ctx.selection
    if sel is not None and sel[0] >= n:
        sel = None
    qkey, kkey = wkey + ".q", wkey + ".k"
    # the lists follow the selection, however it was made (a click on a short text, another chart, "Clear")
    st.session_state[qkey] = None if sel is None else sel[0]
    st.session_state[kkey] = None if sel is None else sel[1]
    c1, c2 = st.columns(2)
    c1.selectbox("Query (row)", list(range(n)), key=qkey, format_func=name, placeholder="Choose a query…",
                 on_change=_query_chosen, args=(ctx.s, wkey, np.array(m.values), m.kind == "signed"),  # a copy: the
                 # session keeps a widget's args, and m.values may be a view of the trace's tensor
                 help="A cell of this long text's map is a pixel: choose its query here (type a position or a "
                      "token to find it). The key stays if it is not after the new query; otherwise "
                      "the query's strongest key is chosen with it.")
    top = n - 1 if sel is None else sel[0]
    c2.selectbox("Key (column)", list(range(top + 1)), key=kkey, format_func=name, disabled=sel is None,
                 placeholder="Choose a query first" if sel is None else "Choose a key…",
                 on_change=_key_chosen, args=(ctx.s, wkey),
                 help="Only the query itself and earlier positions: a query cannot look ahead (the causal mask).")
    note = st.session_state.pop(wkey + ".note", None)
    if note:
        st.warning(note, icon=":material/block:")
    if sel is None:
        st.caption("Choose a query and a key to outline them on every chart (a cell here is too small to click).")
        return False
    q, k = sel
    masked = m.masked is not None and bool(m.masked[q, k])
    value = m.values[q, k]
    shown = "masked (this query may not use this key)" if masked or not np.isfinite(value) else f"**{value:.4g}**"
    st.caption(f"Query {q} '{plain_md(labels[q])}' → key {k} '{plain_md(labels[k])}': {shown} "
               "(outlined on every chart).")
    zoom = st.toggle("Zoom to the selection", key=wkey + ".zoom",
                     help=f"Show {2 * ZOOM_HALF + 1} positions around the chosen query and key, with their tokens "
                          "(double-click the chart to see all of it).")
    return bool(zoom)


def zoomed(fig, sel: Optional[tuple[int, int]], n_rows: int, n_cols: int, half: int = ZOOM_HALF):
    """``fig`` (a big heatmap, first row at the top) with its axes set to ``half`` positions either side of the
    selected (query, key), kept inside the map. Double-click the chart to see all of it again."""
    if sel is None:
        return fig

    def window(centre: int, size: int) -> tuple[float, float]:
        lo = max(0, min(centre - half, size - 1 - 2 * half))
        hi = min(size - 1, lo + 2 * half)
        return lo - 0.5, hi + 0.5

    x0, x1 = window(sel[1], n_cols)
    y0, y1 = window(sel[0], n_rows)
    fig.layout.xaxis.range = [x0, x1]
    fig.layout.xaxis.autorange = False
    fig.layout.yaxis.range = [y1, y0]  # reversed: the first row stays at the top
    fig.layout.yaxis.autorange = False
    return fig
