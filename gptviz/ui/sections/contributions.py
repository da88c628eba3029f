"""The contribution graph: for one position, the routes from the input tokens through heads and MLPs to the
prediction (Ferrando and Voita 2024, as the LLM Transparency Tool draws it). The shares come from
``gptviz.interp.contributions``; clicking a head or an MLP (or the middle of its edge) opens it on its page."""
from __future__ import annotations

import time
from typing import Optional

import numpy as np
import streamlit as st

from ...interp.contributions import Contributions, best_routes, head_sources, route_graph, shares
from ...model.hook_names import act_name
from ...present import figures, source_code
from ...present.markdown_text import plain_md
from ...run import edits as edit_specs
from ...run.slots import BIG_LOAD
from .. import nav, resources
from ..waiting import queued
from ..widgets import plot
from . import section
from .who import trace_key

ATTENTION_PAGE = "app_pages/attention.py"
MLP_PAGE = "app_pages/neurons.py"  # an MLP opens on its neurons: the ones firing most there
THRESHOLD = (0.01, 0.5, 0.04)  # the slider: lowest, highest, first (the LLM Transparency Tool starts at 0.04)
HEADS_DRAWN = ("each head a node", "summed per token (LTT)")  # the first: gptviz's graph; the second: LTT's own

FORMULA = (r"w(c_k \to y) = \frac{\max\big(\varepsilon,\ \lVert y\rVert_1 - \lVert y - c_k\rVert_1\big)}"
           r"{\sum_{m} \max\big(\varepsilon,\ \lVert y\rVert_1 - \lVert y - c_m\rVert_1\big)},\qquad "
           r"y = x + \sum_{h,\,j} \underbrace{a^h_{ij}\, (v^h_j - b^h_V) W_O^h}_{c_{ijh}} + b_O + \sum_h b^h_V W_O^h")
SENTENCE = ("Every layer adds to the residual stream: the stream it got (the *skip*), each head's output (which is a "
            "sum over the tokens it read from) and the MLP's. A term's share is how much closer it alone brings the "
            "stream to the new stream than nothing would, in L1 distance, cut at 0 and divided by the sum over the "
            "terms. Starting from the prediction at the top, the graph keeps every edge whose share is above the "
            "threshold and follows it down, layer by layer, to the input tokens; a route's weight is the product of "
            "its shares. It follows what is moved (values), not what decides where to look (queries and keys).")


@st.cache_data(max_entries=128, show_spinner=False)
def _graph(key: tuple, b: int, n_pos: int, position: int, threshold: float, heads: bool, value_bias: str, _tr,
           _model):
    t0 = time.perf_counter()
    c = Contributions(_model, _tr, b, n_pos, value_bias)
    g = route_graph(c, position, threshold, heads=heads)
    return g, best_routes(g, 5), c.rows_computed, time.perf_counter() - t0


def _has_value_bias(model) -> bool:
    return any(blk.attn.c_attn.bias is not None for blk in model.transformer.h)


def open_block(s: dict, block: str) -> Optional[str]:
    """Make the clicked block the one in view (settings ``layer``, ``head``, and for an edge from a key token the
    attention cell ``sel``); the page to open it on, or None for something that is not a block."""
    parts = block.split(":") if isinstance(block, str) else []
    try:
        nums = [int(p) for p in parts[1:]]
    except ValueError:
        return None
    if parts[:1] == ["head"] and len(nums) in (3, 4):
        s["layer"], s["head"] = nums[0], nums[1]
        if len(nums) == 4:
            s["sel"] = [nums[2], nums[3]]
        return ATTENTION_PAGE
    if parts[:1] == ["mlp"] and len(nums) == 2:
        s["layer"] = nums[0]
        return MLP_PAGE
    return None


def _go(s: dict, block: str) -> None:
    page = open_block(s, block)
    if page is None:
        return
    what = "head" if page == ATTENTION_PAGE else "MLP"
    try:
        st.switch_page(page)
    except Exception:  # noqa: BLE001 - outside the multipage app (a lone script, a test)
        st.success(f"Layer {s['layer']}" + (f", head {s['head']}" if what == "head" else "'s MLP")
                   + f" is now in view: open the {'Attention' if what == 'head' else 'Neurons'} page.")


def _clicked(ev) -> Optional[str]:
    try:
        points = ev["selection"]["points"]
    except (KeyError, TypeError):
        return None
    for p in points or []:
        data = p.get("customdata")
        data = data[0] if isinstance(data, (list, tuple)) and data else data
        if isinstance(data, str) and data:
            return data
    return None


def _block_name(node: tuple) -> str:
    return f"L{node[1]} H{node[2]} at {node[3]}" if node[0] == "head" else f"L{node[1]} MLP at {node[2]}"


def _node_words(node: tuple, labels: list[str]) -> str:
    if node[0] == "x":
        return f"'{plain_md(labels[node[2]])}' ({node[2]})"
    return f"**{_block_name(node)}**"


def _route_words(path: list[tuple], labels: list[str]) -> str:
    hops = [_node_words(n, labels) for n in path if n[0] in ("head", "mlp")]
    return " → ".join([_node_words(path[0], labels), *(hops or ["the residual stream only"])])


@section("who.contribution_graph")
def contribution_graph(ctx, *, key: str = "cgraph") -> None:
    """The routes into one position's prediction, with a threshold slider; a click on a head or an MLP opens it."""
    if not nav.decoder_only(ctx, "The contribution graph"):
        return
    tr, b, T, cfg = ctx.trace(), ctx.b, ctx.n_pos, ctx.cfg
    labels, vocab = ctx.labels(), ctx.vocab_labels()
    c1, c2, c3 = st.columns([2, 3, 2])
    pos = c1.selectbox("The prediction made at position", list(range(T)), index=T - 1, key=f"{key}.pos.{T}",
                       format_func=lambda i: f"{i}: {labels[i]}")
    lo, hi, first = THRESHOLD
    threshold = c2.slider("Threshold: draw the edges whose share is above", lo, hi, first, 0.01, key=f"{key}.thr",
                          help="Lower shows more routes (and takes longer on a big model); higher, only the main ones.")
    heads = c3.selectbox("Attention drawn", HEADS_DRAWN, key=f"{key}.heads",
                         help="Summed per token: the LLM Transparency Tool's graph, one edge from each token a query "
                              "read, its heads added up.") == HEADS_DRAWN[0]
    per_token = st.session_state.get(f"{key}.vbias", False) and _has_value_bias(ctx.model)  # the toggle, below
    value_bias = "per_token" if per_token else "folded"
    logits = np.asarray(tr[act_name("logits")])[b, pos]
    predicted = vocab[int(np.argmax(logits))]
    args = (trace_key(ctx), b, T, int(pos), round(float(threshold), 4), heads, value_bias, tr, ctx.model)
    try:
        if cfg.num_params() > resources.BIG_MODEL_PARAMS:
            with queued(BIG_LOAD, "big computation"):  # one big computation at a time on this server
                with st.spinner("Following the routes down the layers…"):
                    g, routes, rows, seconds = _graph(*args)
        else:
            g, routes, rows, seconds = _graph(*args)
    except ValueError as exc:
        st.warning(f"The contribution graph could not be computed: {exc}")
        return
    title = (f"Routes into the prediction at '{figures.escape_label(labels[pos])}' (position {pos}): shares above "
             f"{threshold:.2f}" + (" · value bias per token (a variant, not LTT's)" if per_token else ""))
    fig = figures.contribution_figure(g, labels, title, prediction=predicted)
    ev = plot(ctx, fig, key=f"{key}.fig", on_select="rerun", selection_mode="points")
    clicked = _clicked(ev)
    if clicked != st.session_state.get(f"{key}.clicked"):  # a new click (a stale one must not reopen a page)
        st.session_state[f"{key}.clicked"] = clicked
        if clicked:
            _go(ctx.s, clicked)
    n_heads = len({n[:3] for n in g.nodes if n[0] == "head"})
    n_mlps = sum(1 for n in g.nodes if n[0] == "mlp")
    through = f"{n_heads} head(s)" if heads else "attention"
    st.caption(f"{len(g.edges)} edges above {threshold:.2f}, through {through} and {n_mlps} MLP(s), from "
               f"{len(g.sources())} input token(s). Width and darkness grow with the share; blue: through a head, "
               f"red: through an MLP, grey: the residual stream's skip. Click a head or an MLP, or the middle of its "
               f"edge, to open it (an MLP opens on its neurons). Shares of {rows} (layer, position) sums, worked out "
               f"in {seconds:.2f} s"
               + (", on the trace with your edits." if not edit_specs.is_empty(ctx.s.get("edits") or edit_specs.EMPTY)
                  else "."))
    if _has_value_bias(ctx.model):
        st.toggle("Variant: count the value bias with each token (not LTT's definition)", key=f"{key}.vbias",
                  help="LTT (through TransformerLens's defaults) folds the value bias b_V into the output bias, which "
                       "is no term. Here it stays inside every head × token term instead.")
    if routes:
        lines = [f"{k}. {_route_words(p, labels)} — weight {w:.3f}" for k, (w, p) in enumerate(routes, 1)]
        st.markdown(f"**The heaviest routes to '{plain_md(predicted)}'** (product of the shares along each):  \n"
                    + "  \n".join(lines))
    else:
        st.info("No route reaches an input token above this threshold: lower it to see more.")
    # every head and MLP of the graph, by its share, for those who would rather pick than click
    blocks = {(e.src if e.kind == "head_out" else e.dst): e.weight for e in g.edges if e.kind in ("head_out", "mlp_in")}
    if blocks:
        o1, o2 = st.columns([3, 2])
        order = sorted(blocks, key=lambda n: -blocks[n])
        pick = o1.selectbox("Open a block of the graph", order, key=f"{key}.pick.{pos}",
                            format_func=lambda n: f"{_block_name(n)} (share {blocks[n]:.2f})")
        o2.write("")
        if o2.button("Open it on its page", key=f"{key}.open", icon=":material/open_in_new:"):
            _go(ctx.s, ":".join(str(v) for v in pick))
    st.markdown(SENTENCE)
    st.latex(FORMULA)
    st.code(source_code.function_code(shares, head_sources), language="python")  # as it runs, from the source
    st.caption("The MLP's share is the same rule with two terms, y = resid_mid + mlp_out; in a parallel block "
               "(GPT-NeoX) the heads, the MLP and the skip share one sum. The output bias b_O, with the value bias "
               "b_V folded into it, is in y but is no term; a post-norm block is split before each norm. These are "
               "the LLM Transparency Tool's definitions, its 10⁻⁵ floor on each score included, checked share by "
               "share in tests/test_contributions_ltt.py.")
