"""Widgets several pages share: a step shown as a heatmap with its words, downloads, tensor editors."""
from __future__ import annotations

import io
from typing import Optional

import numpy as np
import pandas as pd
import streamlit as st

from ..model.hook_names import act_name
from ..present import figures
from ..present.descriptions import StepInfo, step_info
from ..present.figures.heatmaps import BIG_CELLS
from ..present.markdown_text import plain_md
from ..present.matrices import MAX_COLS, page_count, step_matrix
from ..present.matrices import masked_cells as _masked_cells
from ..present.page_context import Ctx
from ..run import edits as edit_specs
from .cell_picker import pick_cell, zoomed


def masked(ctx: Ctx, name: Optional[str] = None) -> Optional[np.ndarray]:
    """The cells self-attention may not use in the selected batch row: for ``name``, a step of one layer's
    self-attention, that layer's own (a sliding window may be on some layers only); else the first layer's."""
    tr = ctx.trace() if name is None else ctx.trace_for_step(name)
    if name is not None and name.startswith("blocks.") and ".attn." in name:
        own = _masked_cells(tr, ctx.b, name)
        if own is not None:
            return own
    return _masked_cells(tr, ctx.b)


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


DOWNLOAD_POPOVER = "gptviz.download."  # every download popover's key starts so


def download_popover(label: str, key: str, help: str, where=st, **kw):
    """A popover for download buttons, in ``where`` (``st`` or ``st.sidebar``); the popover to put them in while it
    is open, else None. Its buttons are then made only while it is open: each element is a message to the browser on
    every run, and each deferred file a registration."""
    pop = where.popover(label, key=DOWNLOAD_POPOVER + key, on_change="rerun", help=help, **kw)
    return pop if pop.open else None


def downloads(name: str, full: np.ndarray, shown=None, key: str = "") -> None:
    """A "Download" popover (``download_popover``): the whole tensor as .npy, and the slice on screen as CSV, each
    file built only when clicked. One element on every run instead of three."""
    safe = name.replace(".", "_")
    pop = download_popover("⬇ Download", f"{key}{name}", "This step's numbers: the whole tensor (.npy)"
                           + (", or this view (CSV)" if shown is not None else ""))
    if pop is None:
        return
    pop.download_button("⬇ .npy (whole tensor)", data=lambda: _npy_bytes(full), file_name=f"{safe}.npy",
                        mime="application/octet-stream", key=f"dl.npy.{key}{name}", on_click="ignore")
    if shown is not None:
        pop.download_button("⬇ CSV (this view)", data=lambda: _csv_bytes(shown.values, shown.rows, shown.cols),
                            file_name=f"{safe}.csv", mime="text/csv", key=f"dl.csv.{key}{name}", on_click="ignore")


def step_heatmap(ctx: Ctx, name: str, head: Optional[int] = None, title: Optional[str] = None, key: str = "",
                 grad: bool = False, height: Optional[int] = None, with_downloads: bool = True,
                 plot_px: Optional[float] = None):
    """One recorded step (or its gradient) for the selected batch row, as a heatmap with a pager if wide.
    ``plot_px``: the plot's width on screen, to write every x label level or upright and apart
    (``figures.readable_x_labels``' rule) rather than at 45°."""
    tr = ctx.trace_for_step(name, grad)
    info = step_info(tr, name)
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
                    page, masked=masked(ctx, name), n_pos=ctx.n_pos)
    t = title or (("∂loss/∂ " if grad else "") + info.title)
    if head is not None and "head" in info.axes and f"head {head}" not in t:
        t += f" · head {head}"
    sel = ctx.selection
    pairwise = m.row_title == "query" and m.col_title == "key"
    by_pos = m.row_title in ("query", "position") and not m.note.startswith("rows")
    fig = figures.heatmap(m, t, show_values=ctx.s.get("show_values", False), height=height,
                          highlight_row=sel[0] if sel and by_pos else None,
                          highlight_col=sel[1] if sel and pairwise else None, clickable=pairwise, plot_px=plot_px)
    chart_key = f"fig.{key}{name}{'.g' if grad else ''}"
    if pairwise and m.values.size <= BIG_CELLS:  # click a cell: select that query and key on every chart
        # (a long text's map has no cells to click, a cell is a pixel: drag to zoom instead)
        ev = plot(ctx, fig, key=chart_key, on_select="rerun", selection_mode="points")
        picked = clicked_cell(ev)
        if picked is not None and picked != sel and picked[1] <= picked[0] < ctx.n_pos:
            ctx.s["sel"] = list(picked)
            st.rerun()
    elif pairwise:  # a long text's map: a cell is a pixel (drag to zoom), so the query and key are chosen below it
        chart = st.container()
        if pick_cell(ctx, m, chart_key):
            fig = zoomed(fig, sel, *m.values.shape)
        with chart:
            plot(ctx, fig, key=chart_key)
    else:
        plot(ctx, fig, key=chart_key)
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
    """Switch heads of one layer off and on (``heads_off`` in the session's edits, which every page reads); the
    trace is recomputed with their weights zeroed. One row of pills, one a head: one element on every rerun, where a
    toggle a head was a dozen for GPT-2 small (each element is a message to the browser on every rerun)."""
    spec = ctx.s.setdefault("edits", edit_specs.empty())
    k = f"gptviz.headoff.{key}.{layer}"  # the key keeps two of these on one page apart
    st.session_state[k] = [h for h in edit_specs.heads_off_in(spec, layer) if 0 <= h < ctx.cfg.n_head]
    st.pills(f"Heads of layer {layer} switched off (all-zero attention weights: a head that is off adds nothing, "
             "and every step after it is recomputed)", list(range(ctx.cfg.n_head)), selection_mode="multi", key=k,
             format_func=lambda h: f"H{h}", on_change=_set_heads, args=(ctx.s, layer, k))


def _set_heads(s: dict, layer: int, key: str) -> None:
    spec = s.setdefault("edits", edit_specs.empty())
    others = [tuple(h) for h in spec.get("heads_off", []) if h[0] != layer]
    spec["heads_off"] = sorted(others + [(layer, int(h)) for h in st.session_state[key] or []])


def experts_off_select(ctx: Ctx, layer: int, key: str = "") -> None:
    """Switch experts of one mixture-of-experts layer off and on (``experts_off`` in the session's edits, which
    every page reads); the trace is recomputed with their router logits at -inf."""
    spec = ctx.s.setdefault("edits", edit_specs.empty())
    k = f"gptviz.expertoff.{key}.{layer}"
    st.session_state[k] = sorted(e for l, e in spec.get("experts_off", []) if l == layer)
    st.multiselect(f"Experts switched off in layer {layer}", list(range(ctx.cfg.n_expert)), key=k,
                   format_func=lambda e: f"expert {e}", on_change=_set_experts, args=(ctx.s, layer, k),
                   help="A switched-off expert's router logit becomes −∞: its probability is 0 and each token goes "
                        "to the best experts left. Every page shows the model with it off until you clear the edits.")


def _set_experts(s: dict, layer: int, key: str) -> None:
    spec = s.setdefault("edits", edit_specs.empty())
    others = [tuple(e) for e in spec.get("experts_off", []) if e[0] != layer]
    spec["experts_off"] = sorted(others + [(layer, int(e)) for e in st.session_state[key]])


def clear_edits_button(ctx: Ctx, key: str = "") -> None:
    spec = ctx.s.get("edits") or {}
    n = len(spec.get("set", [])) + len(spec.get("heads_off", [])) + len(spec.get("experts_off", [])) \
        + len(ctx.s.get("id_edits") or {})
    if n:
        st.caption(f"{n} edit(s) active: everything below is recomputed with them.")
        if st.button("Clear all edits", key=f"clear.{key}"):
            ctx.s["edits"] = edit_specs.empty()
            ctx.s["id_edits"] = {}
            ctx.s["edit_gen"] = ctx.s.get("edit_gen", 0) + 1  # fresh editors: forget their typed values
            st.rerun()
    if ctx.edit_notice:
        st.warning(ctx.edit_notice)


def vector_editor(ctx: Ctx, name: str, pos: int, key: str = "", head: Optional[int] = None) -> None:
    """Edit one row of a step (a position's vector, or one query's attention row for a head) in a table;
    every later step is recomputed from the edited values."""
    tr = ctx.trace()
    info = step_info(tr, name)
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
        spec = ctx.s.setdefault("edits", edit_specs.empty())
        items = [e for e in spec.get("set", []) if not (e["name"] == name and e["index"] == index)]
        items.append({"name": name, "index": index, "values": [float(v) for v in full]})
        spec["set"] = items
        st.rerun()


def head_step(ctx: Ctx, name: str, key: str = "", grad: bool = False, with_downloads: bool = True,
              plot_px: Optional[float] = None):
    """A per-head step for the selected head, or for every head at once when "all heads" is chosen. ``plot_px``:
    the one head's plot width on screen (``step_heatmap``)."""
    tr = ctx.trace_for_step(name, grad)
    info = step_info(tr, name)
    if ctx.head is not None or "query_pos" not in info.axes:
        return step_heatmap(ctx, name, head=ctx.head, key=key, grad=grad, with_downloads=with_downloads,
                            plot_px=plot_px)
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
    mk = masked(ctx, name)
    mk = None if mk is None else mk[: ctx.n_pos, : ctx.n_pos]
    if not grad and info.kind == "masked":
        mk = np.isneginf(v[0]) if mk is None else mk
    fig = figures.tiled_heatmap(tiles, [f"heads {r * per_row}–{min(H, (r + 1) * per_row) - 1}" for r in range(rows)],
                                [f"+{c}" for c in range(per_row)] if rows > 1
                                else [f"head {c}" for c in range(per_row)],
                                kind=kind, title=("∂loss/∂ " if grad else "") + info.title
                                                 + " · every head (rows: query, columns: key)",
                                masked=mk)
    plot(ctx, fig, key=f"fig.{key}{name}.all{'.g' if grad else ''}")
    if with_downloads:
        downloads(name + (".grad" if grad else ""), value, None, key=key)
    return None


def loss_metrics(ctx: Ctx, precision: int = 3, reference: Optional[float] = None, stacked: bool = False) -> None:
    """The loss on the text next to ln V. A model trained on a task shows its loss on the positions that
    task scores first, the all-positions loss beside it, and a sentence on the difference. ``stacked``: one
    under another (a narrow column) rather than side by side."""
    import math

    from ..run.loss import mean_over, uniform_loss

    tr = ctx.trace()
    loss = tr.loss
    uniform = uniform_loss(ctx.cfg.vocab_size)
    fmt = (lambda v: "—" if v is None or math.isnan(v) else f"{v:.{precision}f}")
    if ctx.scored_y is not None:
        scored = mean_over(tr[act_name("loss_per_token")], ctx.scored_y)
        c1, c2, c3 = (st.container(), st.container(), st.container()) if stacked else st.columns(3)
        c1.metric("Loss on the scored positions", fmt(scored),
                  help="The positions this model's task scores: the only ones it was trained to predict.")
        c2.metric("Loss on every position", fmt(loss),
                  help="Including positions that are random by design, which no model can predict.")
        c3.metric("Uniform guess ln V", fmt(uniform),
                  help=f"The loss of guessing all {ctx.cfg.vocab_size} tokens equally.")
        st.caption(ctx.task_rule + " The all-positions loss counts those random positions too, so it can be worse "
                   "than guessing uniformly while the model does its task well.")
        return
    c1, c2 = (st.container(), st.container()) if stacked else st.columns(2)
    c1.metric("Loss on your text", fmt(loss),
              help="Cross-entropy of the model's next-token guesses on the text in the sidebar.")
    c2.metric("Uniform guess ln V", fmt(uniform), help=f"The loss of guessing all {ctx.cfg.vocab_size} tokens equally.")
    if loss is not None and not math.isnan(loss) and abs(loss - uniform) < 0.5:
        st.caption("An untrained model scores close to ln V: it knows nothing yet.")


# What each chart's camera button saves. plotly.js has one image button, in one format: a second button needs a
# JavaScript click function, which Streamlit's config (JSON) cannot carry. So the format is a choice (sidebar:
# the sidebar's "Chart download" setting); the HTML report (gptviz.present.report) has both buttons on every chart.
EXPORT_FORMATS = {"png": "PNG (3×, for a projector)", "svg": "SVG (vector)"}


def export_config(fmt: str = "png", filename: str = "") -> dict:
    opts = {"format": "svg"} if fmt == "svg" else {"format": "png", "scale": 3}
    if filename:
        opts["filename"] = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in filename)
    return {"toImageButtonOptions": opts, "displaylogo": False}


EXPORT_CONFIG = export_config("png")


def _thin_ticks(fig, most_x: int, most_y: int) -> None:
    """Keep at most ``most_x`` / ``most_y`` labelled ticks per axis, so that larger tick labels don't overlap."""
    import math

    lay = fig.layout
    for name in list(lay.to_plotly_json()):
        if not name.startswith(("xaxis", "yaxis")):
            continue
        ax = lay[name]
        vals, text = ax.tickvals, ax.ticktext
        most = most_x if name.startswith("x") else most_y
        if ax.nticks and ax.nticks > most:  # plotly.js picks the ticks (a long text's heatmap): fewer of them
            ax.nticks = most
        if vals is not None and len(vals) > most:
            step = math.ceil(len(vals) / most)
            ax.tickvals = list(vals)[::step]
            if text is not None:
                ax.ticktext = list(text)[::step]


def plot(ctx: Optional[Ctx], fig, key: str, **kw):
    """Draw a figure in the view's style (presenter mode's larger text); the toolbar saves PNG at 3× or SVG."""
    style = getattr(ctx, "style", None) or {}
    scale = style.get("font_scale", 1.0)
    if scale != 1.0:
        fig = figures.styled(fig, scale)
    top = style.get("max_height")  # presenter mode: every chart fits on a 720-pixel screen
    if top and (fig.layout.height or 0) > top:
        fig.layout.height = int(top)
    if scale != 1.0:  # larger labels: as many row labels as fit the plot's height, never overlapping
        rows_px = (fig.layout.height or 450) - 170
        _thin_ticks(fig, int(18 / scale), max(4, int(rows_px / (14 * scale * 1.3))))
    s = getattr(ctx, "s", None) or {}
    # fixed margins (automatic ones cost the browser a second drawing), the viewer's palette, sent as is
    fig = figures.finished(fig, palette=str(s.get("palette", "default")))
    fmt = str(s.get("export_format", "png"))
    kw.setdefault("alt", figures.in_words(fig.to_dict()) or None)  # the chart in words, for a screen reader
    return st.plotly_chart(fig, width="stretch", key=key, config=export_config(fmt, key), **kw)


def _pos(label) -> Optional[int]:
    try:
        return int(str(label).split(":", 1)[0])
    except ValueError:
        return None


def clicked_cell(event) -> Optional[tuple[int, int]]:
    """(query, key) of the heatmap cell a user clicked, from ``st.plotly_chart``'s selection event."""
    try:
        points = event["selection"]["points"]
    except (TypeError, KeyError):
        return None
    if not points:
        return None
    q, k = _pos(points[0].get("y")), _pos(points[0].get("x"))
    return None if q is None or k is None else (q, k)


def selection_note(ctx: Ctx) -> None:
    """The sidebar's line on the selected query and key, with a button to clear it."""
    sel = ctx.selection
    if sel is None:
        return
    labels = ctx.labels()
    q, k = sel
    st.sidebar.info(f"Selected: query {q} '{plain_md(labels[q])}' → key {k} '{plain_md(labels[k])}' (outlined on every "
                    "chart)",
                    icon=":material/ads_click:")
    st.sidebar.button("Clear the selection", key="sel.clear", on_click=lambda: ctx.s.pop("sel", None))
