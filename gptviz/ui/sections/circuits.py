"""The Circuits page: the attribution graph of the text's last prediction (Ameisen et al. 2025, "Circuit Tracing")
through a shipped model's shipped transcoder, pruned and drawn; a feature's activations and promoted tokens, named
groups of nodes (supernodes), interventions, and the graph as Neuronpedia's JSON. Only a shipped model with a shipped
transcoder (``checkpoints/NAME.clt.transcoder.safetensors`` or ``NAME.transcoder.safetensors``) has a graph; on any
other model the sections say so. The graph is computed once per (model, transcoder, prompt, target logits, feature
budget) and shared: thresholds and selections only redraw it.
"""
from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import streamlit as st

from ...config import ModelConfig
from ...interp.attribution_graph import attribute
from ...interp.graph_json import MAX_NAME_CHARS, MAX_SUPERNODES, graph_json, node_id
from ...interp.graph_pruning import EDGE_THRESHOLD, NODE_THRESHOLD, prune, scores
from ...interp.replacement import why_no_replacement
from ...interp.transcoder import Transcoder, load_transcoder, transcoder_path
from ...model.hook_names import act_name
from ...paths import CHECKPOINTS
from ...present import figures
from ...present.figures.attribution_graph import (
    DRAWN_EDGES,
    MAX_EDGES,
    NARROW_PX,
    PLOT_PX,
    attribution_figure,
    drawn,
    node_words,
)
from ...present.markdown_text import plain_md
from ...present.page_context import CKPT_PREFIX
from ...run import edits as edit_specs
from ...run.slots import BIG_LOAD
from .. import nav, resources
from ..page import preset_label
from ..waiting import queued
from ..widgets import plot
from . import section
from .circuit_words import words

MAX_PROMPT = 64  # tokens: the last 64 of the row are traced
FEATURE_BUDGETS = (128, 256, 512, 1024, 2048, 4096)
DEFAULT_BUDGET = 1024
GROUPS = "gptviz.circuits.groups"  # st.session_state: the supernodes, [name, node id, ...] each
SALIENT = -1  # the target-logit choice "the most likely, until 95 %"
SCAN = "gptviz-shakespeare"


@st.cache_resource(max_entries=4, show_spinner=False)
def _load(file: str, mtime: float) -> Transcoder:
    return load_transcoder(file)


def available() -> list[str]:
    """The shipped models that have a transcoder (cross-layer or per-layer)."""
    names = {p.name[: -len(".transcoder.safetensors")] for p in CHECKPOINTS.glob("*.transcoder.safetensors")}
    return sorted({n[:-4] if n.endswith(".clt") else n for n in names})


def _same_shape(stored, cfg_json: str) -> bool:
    try:
        stored = json.loads(stored) if isinstance(stored, str) else stored
        return ModelConfig.from_dict(stored) == ModelConfig.from_dict(json.loads(cfg_json))
    except (TypeError, ValueError):
        return False


def shipped_transcoder(ctx, key: str) -> tuple[Optional[Transcoder], str, str]:
    """(the transcoder shipped for the model in view, its file, "") or (None, "", why there is none, in words);
    (None, "", "") for an attention-only model, whose graph needs none. With both kinds shipped, ``{key}.kind`` in
    the session state chooses (cross-layer first)."""
    if ctx.cfg.attn_only and not why_no_replacement(ctx.cfg):
        return None, "", ""
    have = available()
    which = (f" A transcoder ships with: {', '.join(preset_label(CKPT_PREFIX + n) for n in have)}. Choose it in the "
             "sidebar's Model menu." if have else " None ships yet: `python -m gptviz.train_transcoder` makes one.")
    preset = str(ctx.s.get("preset", ""))
    if ctx.untrained:
        return None, "", ("This shows the model's shape with fresh, untrained weights: its transcoder was trained on "
                          "the trained weights, so there is no graph. Switch 'Untrained weights' off." + which)
    name = preset[len(CKPT_PREFIX):] if preset.startswith(CKPT_PREFIX) and ctx.model_key else None
    files = [p for p in (transcoder_path(name, True), transcoder_path(name, False)) if p.is_file()] if name else []
    if not files:
        return None, "", ("No transcoder ships for this model, so there is no attribution graph to draw." + which)
    path = files[1] if len(files) == 2 and st.session_state.get(f"{key}.kind") == "per-layer" else files[0]
    try:
        tc = _load(str(path), path.stat().st_mtime)
    except (OSError, ValueError) as exc:
        return None, "", f"The transcoder file for {name!r} could not be read ({exc})."
    if not _same_shape(tc.meta.get("model_config"), ctx.cfg_json):
        return None, "", f"The transcoder file for {name!r} was trained on a model of another shape: it is not used."
    why = why_no_replacement(ctx.cfg, tc)
    return (None, "", f"No attribution graph for this model: {why}.") if why else (tc, str(path), "")


@dataclass
class View:  # a computed graph and what the sections show with it
    graph: object
    pruned: object
    tc: Optional[Transcoder]  # None: an attention-only model, attributed as it is (no features)
    ids: tuple
    tokens: list
    logit_tokens: list
    cut: int  # tokens of the row left out before the prompt
    seconds: float
    scores: dict
    file: str
    mtime: float


@st.cache_resource(max_entries=8, show_spinner="Tracing the graph: one row of edges per feature…")
def _graph(model_key: str, file: str, mtime: float, ids: tuple, logit_ids: Optional[tuple], budget: int,
           _model, _tc) -> tuple:
    t0 = time.perf_counter()
    g = attribute(_model, _tc, list(ids), logit_ids=None if logit_ids is None else list(logit_ids),
                  max_feature_nodes=budget)
    return g, time.perf_counter() - t0, scores(g)


@st.cache_resource(max_entries=32, show_spinner=False)
def _pruned(model_key: str, file: str, mtime: float, ids: tuple, logit_ids: Optional[tuple], budget: int,
            node_thr: float, edge_thr: float, _graph_obj):
    return prune(_graph_obj, node_thr, edge_thr)


def _prompt(ctx) -> tuple[tuple, int]:
    row = [int(t) for t in np.asarray(ctx.batch.x)[ctx.b, : ctx.n_pos]]
    return tuple(row[-MAX_PROMPT:]), max(0, len(row) - MAX_PROMPT)


def _last_probs(ctx, ids: tuple) -> np.ndarray:
    logits = np.asarray(resources.traced_prompt(ctx.cfg_json, ctx.model_key, ids)[act_name("logits")])[0, -1]
    p = np.exp(logits - logits.max())
    return p / p.sum()


def _view(ctx, key: str) -> tuple[Optional[View], str]:
    """The graph for the settings in the session state (drawn by ``graph``), or None and why not."""
    tc, file, why = shipped_transcoder(ctx, key)
    if why:
        return None, why
    ids, cut = _prompt(ctx)
    if not ids:
        return None, "The text has no tokens: type some text in the sidebar."
    target = st.session_state.get(f"{key}.target", SALIENT)
    logit_ids = None if target == SALIENT else (int(target),)
    budget = int(st.session_state.get(f"{key}.budget", DEFAULT_BUDGET))
    mtime = Path(file).stat().st_mtime if file else 0.0
    args = (str(ctx.model_key), file, mtime, ids, logit_ids, budget)
    try:
        if ctx.cfg.num_params() > resources.BIG_MODEL_PARAMS:
            with queued(BIG_LOAD, "big computation"):  # one big computation at a time on this server
                g, seconds, sc = _graph(*args, ctx.model, tc)
        else:
            g, seconds, sc = _graph(*args, ctx.model, tc)
        pr = _pruned(*args, float(st.session_state.get(f"{key}.nodes", NODE_THRESHOLD)),
                     float(st.session_state.get(f"{key}.edges", EDGE_THRESHOLD)), g)
    except Exception as exc:  # noqa: BLE001 - a clear message naming what to change, never a traceback
        return None, (f"The attribution graph could not be computed ({type(exc).__name__}: {exc}). Try fewer "
                      "feature nodes, a shorter text, or the Shakespeare GPT with its shipped transcoder.")
    vocab = ctx.vocab_labels()
    tokens = [vocab[t] if 0 <= t < len(vocab) else "?" for t in ids]
    logit_tokens = [vocab[int(t)] if 0 <= int(t) < len(vocab) else "?" for t in g.logit_ids]
    return View(g, pr, tc, ids, tokens, logit_tokens, cut, seconds, sc, file, mtime), ""


def _picked(event) -> list[str]:
    """The node ids of a click or a box or lasso selection on the graph, in order, once each."""
    try:
        points = event["selection"]["points"]
    except (KeyError, TypeError):
        return []
    out = []
    for p in points or []:
        data = p.get("customdata")
        data = data[0] if isinstance(data, (list, tuple)) and data else data
        if isinstance(data, str) and data and data not in out:
            out.append(data)
    return out


def chosen(graph_key: str) -> list:
    """The nodes selected on the graph drawn under ``graph_key``. Kept under a key of its own (not the multiselect's,
    which Streamlit drops on a run that does not draw it), so a section drawn without the graph, as a lesson's next
    step draws it, still reads the selection."""
    return list(st.session_state.get(f"{graph_key}.chosen", st.session_state.get(f"{graph_key}.kept", [])))


def _groups() -> list:
    return groups if isinstance(groups := st.session_state.get(GROUPS), list) else []


ATTENTION_ONLY = ("This model has no MLPs, so no transcoder stands in for anything: with its attention patterns and "
                  "norm divisors frozen it is already linear from its tokens to its logits, and the graph has no "
                  "features and no errors. Each edge is what a token's embedding adds to a logit through every "
                  "attention path. How its heads compose (the induction circuit's K-composition) is on the "
                  "Attention page.")


def _figures_line(tc: Transcoder) -> str:
    f = tc.meta.get("figures") or {}
    try:
        fvu, l0, dead = ", ".join(f"{v:.0%}" for v in f["fvu"]), sum(f["l0"]) / len(f["l0"]), max(f["dead_fraction"])
        return (f"Measured on the held-out plays: the transcoder leaves {fvu} of each layer's MLP output variance "
                f"unexplained (layers 0 to {len(f['fvu']) - 1}), about {l0:.0f} features are active per token, at "
                f"most {dead:.1%} of a layer's features never fire, and with it in place of every MLP the loss is "
                f"**{f['replaced_nats_per_char']:.3f}** nats/char instead of {f['loss_nats_per_char']:.3f} "
                f"(+{f['delta_nats_per_char']:.3f}).")
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return "The transcoder's file records no held-out figures."


def _controls(ctx, key: str, ids: tuple, choices: int) -> None:
    """The graph's settings: the target logit(s), the thresholds, the feature budget (and the transcoder's kind
    when both ship)."""
    probs = _last_probs(ctx, ids)
    vocab = ctx.vocab_labels()
    top = [int(t) for t in np.argsort(-probs)[:20]]
    options = [SALIENT, *top]
    if st.session_state.get(f"{key}.target") not in options:
        st.session_state.pop(f"{key}.target", None)
    c1, c2, c3, c4 = st.columns([3, 2, 2, 2])
    c1.selectbox("Target logit(s) at the last position", options, key=f"{key}.target",
                 format_func=lambda t: "the most likely, until 95 % (at most 10)" if t == SALIENT
                 else f"'{vocab[t]}' (p = {probs[t]:.3f})",
                 help="The graph explains these logits (each minus the mean logit), weighted by their probability.")
    c2.slider("Node threshold", 0.5, 1.0, NODE_THRESHOLD, 0.01, key=f"{key}.nodes",
              help="Keep the nodes that together carry this share of the influence on the logits (tokens and logits "
                   "always). Higher keeps more.")
    c3.slider("Edge threshold", 0.8, 1.0, EDGE_THRESHOLD, 0.005, key=f"{key}.edges",
              help="Then keep the edges that together carry this share of the kept nodes' influence. Higher keeps "
                   "more.")
    c4.select_slider("Max feature nodes", FEATURE_BUDGETS, DEFAULT_BUDGET, key=f"{key}.budget",
                     help="How many active features get a row of edges, chosen by their estimated influence. "
                          "circuit-tracer's command line uses 7500; fewer rows make the graph faster to compute.")
    if choices == 2:
        st.radio("Transcoder", ("cross-layer", "per-layer"), key=f"{key}.kind", horizontal=True,
                 help="Cross-layer: a feature writes to its MLP's output and every later one's; per-layer: its own.")


@section("circuits.graph")
def graph(ctx, *, key: str = "circ", narrow: bool = False) -> bool:
    """The pruned attribution graph of the text's last prediction, with its settings; a click, box or lasso on it
    selects nodes. ``narrow``: drawn in a narrower column than the page's (a lesson's step): the figure is laid out
    for it. True when a graph is drawn."""
    if not nav.decoder_only(ctx, "The attribution graph"):
        return False
    tc, _, why = shipped_transcoder(ctx, key)
    if why:
        st.info(why, icon=":material/info:")
        return False
    ids, cut = _prompt(ctx)
    name = str(ctx.s.get("preset", ""))[len(CKPT_PREFIX):]
    kinds = sum(transcoder_path(name, c).is_file() for c in (True, False))
    area = st.container()  # the graph first, its settings under it: the graph is what fits on the first screen
    if ids:
        _controls(ctx, key, ids, kinds)
    view, why = _view(ctx, key)
    if view is None:
        area.warning(why, icon=":material/warning:")
        return False
    g, pr = view.graph, view.pruned
    chosen_key = f"{key}.chosen"
    if chosen_key not in st.session_state and f"{key}.kept" in st.session_state:  # back on the graph: as it was
        st.session_state[chosen_key] = list(st.session_state[f"{key}.kept"])
    clicked = _picked(st.session_state.get(f"{key}.fig"))
    if clicked != st.session_state.get(f"{key}.seen"):  # a new click or selection (not a stale one)
        st.session_state[f"{key}.seen"] = clicked
        if clicked:
            st.session_state[chosen_key] = clicked
    limit = MAX_EDGES if st.session_state.get(f"{key}.all_edges") else DRAWN_EDGES  # the toggle, below
    nodes, edges, total = drawn(g, pr, limit)
    ids_drawn = [node_id(g, i) for i in nodes]
    st.session_state[chosen_key] = [c for c in st.session_state.get(chosen_key, []) if c in ids_drawn]
    says = "the most likely next tokens" if g.logit_ids.numel() > 1 else f"'{view.logit_tokens[0]}'"
    # two lines, each short enough for a lesson's column and for presenter mode's larger title
    title = (figures.escape_label(f"Attribution graph of {says}") + "<br>"
             + figures.escape_label(f"after '{view.tokens[-1]}' · {len(nodes)} nodes, {len(edges)} edges"))
    labels, snippets = words(ctx, view.file, view.mtime, view.tc) if view.tc is not None else ({}, {})
    fig = attribution_figure(g, pr, view.tokens, view.logit_tokens, title, labels=labels,
                             snippets=snippets, groups=_groups(), picked=st.session_state[chosen_key],
                             max_edges=limit, legend=not ctx.style,  # presenter mode: the lesson's text says it
                             plot_px=NARROW_PX if narrow else PLOT_PX)
    with area:
        plot(ctx, fig, key=f"{key}.fig", on_select="rerun", selection_mode=("points", "box", "lasso"))
    names = {node_id(g, i): node_words(g.node(i), view.tokens, view.logit_tokens) for i in nodes}
    st.multiselect("Selected nodes (click one on the graph; for several, its box or lasso tool, top right)",
                   ids_drawn, key=chosen_key, format_func=lambda n: names.get(n, n))
    st.session_state[f"{key}.kept"] = list(st.session_state[chosen_key])
    kept_f = int(pr.node_mask[: g.n_features].sum())
    st.caption(f"{kept_f} of {g.n_features} feature nodes ({g.meta.get('n_active', '?')} features were active) and "
               f"{total} edges kept"
               + (f" (the {limit:,} heaviest drawn; the JSON has them all)" if total > limit else "")
               + f"; traced in {view.seconds:.2f} s over the last {len(ids)} tokens"
               + (f" (the row's first {cut} are left out: a graph reads at most {MAX_PROMPT})" if cut else "")
               + ". Circles: features, sized by their influence on the logits; grey squares: error nodes; boxes: "
                 "the tokens; diamonds: the target logits. Blue edges excite, vermillion ones inhibit; wider is "
                 "stronger."
               + (" The graph is traced on the model's own weights: your edits are not applied here."
                  if not edit_specs.is_empty(ctx.s.get("edits") or edit_specs.EMPTY) else ""))
    if total > DRAWN_EDGES:
        st.toggle(f"Draw every kept edge (up to {MAX_EDGES:,}; slower to draw)", key=f"{key}.all_edges",
                  help="The graph draws the heaviest edges by default: a browser draws a few hundred lines at once "
                       "far faster than thousands. Pruning is the same either way.")
    sc = view.scores
    m1, m2 = st.columns(2)
    m1.metric("Replacement score", f"{sc['replacement']:.1%}")
    m1.caption("Of the influence on the logits, along every path, the share that starts at the tokens rather than at "
               "error nodes: how much the features explain.")
    m2.metric("Completeness score", f"{sc['completeness']:.1%}")
    m2.caption("The share of each node's direct inputs that are features or tokens rather than error nodes, averaged "
               "by the node's influence.")
    st.caption(_figures_line(view.tc) if view.tc is not None else ATTENTION_ONLY)
    return True


def _features_of(view: View, members) -> list[tuple[int, int, int]]:
    """(layer, position, feature) of the feature nodes among the node ids ``members`` that are in the graph."""
    by_id = {node_id(view.graph, i): view.graph.node(i) for i in range(view.graph.n_features)}
    return [tuple(by_id[m][1:4]) for m in members if m in by_id]


def _add_group(name_key: str, graph_key: str) -> None:
    name = str(st.session_state.get(name_key) or "").strip()[:MAX_NAME_CHARS]
    members = [str(m) for m in chosen(graph_key)]
    groups = _groups()
    if name and members and len(groups) < MAX_SUPERNODES:
        st.session_state[GROUPS] = [*groups, [name, *members]]
        st.session_state[name_key] = ""


def _remove_group(i: int) -> None:
    groups = _groups()
    if 0 <= i < len(groups):
        st.session_state[GROUPS] = groups[:i] + groups[i + 1:]


@section("circuits.supernodes")
def supernodes(ctx, *, key: str = "circ.groups", graph_key: str = "circ") -> None:
    """Name the selected nodes as a group (a supernode); the groups, each with a remove button."""
    picked = chosen(graph_key)
    # one row that gives the button its whole label and the name field the rest, at any width (fixed column
    # shares cut the button to "G…" in a lesson's narrower column)
    row = st.container(horizontal=True, vertical_alignment="bottom", gap="small")
    row.text_input("Name for the selected nodes", key=f"{key}.name", max_chars=MAX_NAME_CHARS,
                   placeholder="e.g. 'end of a word'", help="A group of nodes that do one job together (a supernode); "
                   "it is named in the graph's hover and goes into the JSON download.", width="stretch")
    full = len(_groups()) >= MAX_SUPERNODES
    row.button("Group", key=f"{key}.add", icon=":material/group_work:", disabled=not picked or full,
               on_click=_add_group, args=(f"{key}.name", graph_key), width="content",
               help=f"Select nodes first; at most {MAX_SUPERNODES} groups." if not picked or full else None)
    view, _ = _view(ctx, graph_key)
    here = {node_id(view.graph, i) for i in range(view.graph.n_nodes)} if view is not None else set()
    for i, g in enumerate(_groups()):
        line = st.container(horizontal=True, vertical_alignment="center", gap="small")
        inside = sum(1 for m in g[1:] if m in here)
        line.markdown(f"**{plain_md(g[0])}**: {len(g) - 1} node(s), {inside} in this graph", width="stretch")
        line.button("Remove", key=f"{key}.rm.{i}", on_click=_remove_group, args=(i,), icon=":material/delete:",
                    width="content")


def slug(prompt: str) -> str:
    """The prompt as a file name: lower case, [a-z0-9-], at most 60 characters."""
    return re.sub(r"[^a-z0-9]+", "-", prompt.lower()).strip("-")[:60].strip("-") or "prompt"


@section("circuits.download")
def download(ctx, *, key: str = "circ.json", graph_key: str = "circ") -> None:
    """The pruned graph as the JSON Neuronpedia's graph viewer and circuit-tracer read, with the selected nodes
    pinned and the groups as supernodes."""
    view, why = _view(ctx, graph_key)
    if view is None:
        st.info(why, icon=":material/info:")
        return
    prompt, tok = ctx.tok.decode(list(view.ids)), ctx.tok  # the JSON names tokens as they decode, not as labels
    args = (view.graph, view.pruned, prompt, [tok.decode([t]) for t in view.ids],
            [tok.decode([int(t)]) for t in view.graph.logit_ids], slug(prompt), SCAN,
            float(st.session_state.get(f"{graph_key}.nodes", NODE_THRESHOLD)))
    pinned, groups = chosen(graph_key), [list(g) for g in _groups()]
    st.download_button("Download the graph as JSON", lambda: json.dumps(graph_json(*args, pinned=pinned,
                       supernodes=groups)).encode("utf-8"), file_name=f"{slug(prompt)}.json", mime="application/json",
                       key=f"{key}.dl", icon=":material/download:", on_click="ignore",
                       help="Neuronpedia's graph format (circuit-tracer's): nodes, links, pinned ids, supernodes.")
