"""Compare-models sections: two models read the same text; any recorded step side by side with B − A, and the heads
ranked by how much their attention changed.

What is compared (model A, model B) is picked once per ``key`` and shared by the sections drawn with that key:
trained against untrained weights of the same shape, two seeds of one shape, two snapshots of the shipped
induction-heads run, or any two checkpoints of one shape and tokenizer."""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
import streamlit as st

from ...config import ModelConfig
from ...interp import model_diff
from ...model.hook_names import act_name
from ...perf import BIG_MODEL_PARAMS
from ...present import figures, matrices, source_code
from ...present.descriptions import step_info
from ...present.markdown_text import plain_md
from ...present.page_context import COMPARE_PASSES, COMPARE_SAID, big_model_t, config_json, why_cut
from ...run import edits as edit_specs
from ...text.tokenizers import token_labels
from .. import resources
from ..widgets import plot
from . import section

TRAINED = "Trained vs untrained (same shape)"
SEEDS = "Two seeds of this shape"
SNAPSHOTS = "Two snapshots of the induction-heads run"
CHECKPOINTS = "Two checkpoints"
SNAPSHOT_RUN = "induction-heads"
SHOWN = "__shown__"


@dataclass
class Side:
    label: str
    cfg_json: str
    model_key: Optional[str]
    tok: Any


@dataclass
class Compared:
    a: Side
    b: Side
    what: str  # one sentence: what is compared
    ids: list[int]
    labels: list[str]
    tr_a: Any = None
    tr_b: Any = None
    problem: Optional[str] = None


# --------------------------------------------------------------------------- the two models
def _snapshot_steps() -> list[int]:
    from .training_replay import _snapshots

    return [s for s, _ in _snapshots(SNAPSHOT_RUN)]


def _snapshot_side(step: int) -> Side:
    """The induction-heads run's weights at ``step``, registered once for every session under a fixed key."""
    from .training_replay import _snapshots

    key = f"snap-{SNAPSHOT_RUN}-{int(step)}"
    ship = resources.registered(resources.shipped_checkpoint(SNAPSHOT_RUN))
    if resources.registered(key) is None:
        from ...model.gpt import GPT

        model = GPT(ship.model.config)
        model.load_state_dict(dict(_snapshots(SNAPSHOT_RUN))[int(step)], strict=False)
        resources.register_model(model, ship.tokenizer, f"induction-heads run, step {step}", dict(ship.meta), key=key,
                                 own=False)
    return Side(f"step {step}", config_json(ship.model.config), key, ship.tokenizer)


def _candidates(ctx) -> dict[str, Side]:
    """Models a user may pick for "two checkpoints": the one shown, the shipped decoder-only checkpoints and this
    session's own (trained or uploaded) models."""
    out = {SHOWN: Side(f"the model shown ({ctx.label})", ctx.cfg_json, ctx.model_key, ctx.tok)}
    for name in resources.shipped_names(decoder_only=True):
        out[f"ckpt:{name}"] = None  # loaded only when picked
    for k, e in (st.session_state.get(resources.OWN_MODELS) or {}).items():
        out[f"own:{k}"] = Side(e.label or k, config_json(e.model.config), k, e.tokenizer)
    return out


def _candidate(ctx, cands: dict, choice: str) -> Side:
    if cands.get(choice) is None and choice.startswith("ckpt:"):
        key = resources.shipped_checkpoint(choice[5:])
        e = resources.registered(key)
        return Side(f"shipped checkpoint: {choice[5:]}", config_json(e.model.config), key, e.tokenizer)
    return cands[choice]


def _shape_of(ctx, cands: dict, choice: str) -> dict:
    """A candidate's config without its seed, read without loading a shipped checkpoint's weights."""
    if choice.startswith("ckpt:"):
        d = ModelConfig.from_dict(dict(resources._shipped_config(choice[5:]))).to_dict()
    else:
        d = json.loads(cands[choice].cfg_json)
    d.pop("seed", None)
    return d


def _same_shape(ctx, cands: dict, names: list[str], first: str) -> int:
    """Model B's first choice: another candidate of model A's shape if there is one, else the next in the list."""
    want = _shape_of(ctx, cands, first)
    for i, c in enumerate(names):
        if c != first and _shape_of(ctx, cands, c) == want:
            return i
    return min(1, len(names) - 1)


def _sides(ctx, key: str) -> tuple[Side, Side, str]:
    """The mode picker and its settings; (model A, model B, a sentence on what is compared)."""
    modes = ([TRAINED] if ctx.entry is not None else []) + [SEEDS]
    steps = _snapshot_steps()
    if steps:
        modes.append(SNAPSHOTS)
    modes.append(CHECKPOINTS)
    mode = st.radio("Compare", modes, horizontal=True, key=f"{key}.mode")
    s = ctx.s
    if mode == TRAINED:
        cfg = config_json(ctx.entry.model.config)
        a = Side(f"untrained (seed {ctx.entry.model.config.seed})", cfg, None, ctx.tok)
        b = Side(f"trained: {ctx.entry.label}", cfg, s.get("model_key"), ctx.tok)
        return a, b, (f"**A** is {plain_md(ctx.entry.label)}'s shape freshly initialised (what training started "
                      f"from, seed {ctx.entry.model.config.seed}); **B** is the trained model. B − A is what training "
                      "changed.")
    if mode == SEEDS:
        c1, c2 = st.columns(2)
        seed_a = int(ctx.cfg.seed)
        c1.markdown(f"**Seed A:** {seed_a} (the sidebar's)")
        seed_b = int(c2.number_input("Seed B", 0, 2**31 - 1, (seed_a + 1) % 2**31, key=f"{key}.seed_b"))
        cfg_a, cfg_b = ctx.cfg.replace(seed=seed_a), ctx.cfg.replace(seed=seed_b)
        a = Side(f"seed {seed_a}", config_json(cfg_a), None, ctx.tok)
        b = Side(f"seed {seed_b}", config_json(cfg_b), None, ctx.tok)
        return a, b, (f"Two **untrained** models of this shape ({ctx.cfg.num_params():,} parameters), freshly "
                      f"initialised with seeds {seed_a} and {seed_b}: neither has learned anything, so B − A is "
                      "only the luck of the draw.")
    if mode == SNAPSHOTS:
        c1, c2 = st.columns(2)
        ship = resources.registered(resources.shipped_checkpoint(SNAPSHOT_RUN))
        jump = ship.meta.get("induction_step")
        jump = int(jump) if str(jump).isdigit() else steps[len(steps) // 2]
        before = max([t for t in steps if t < jump] or steps[:1])
        after = min([t for t in steps if t > jump] or steps[-1:])
        step_a = c1.select_slider("Snapshot A (training step)", steps, value=before, key=f"{key}.snap_a")
        step_b = c2.select_slider("Snapshot B (training step)", steps, value=after, key=f"{key}.snap_b")
        return _snapshot_side(step_a), _snapshot_side(step_b), (
            f"The shipped induction-heads run (2 layers, attention only) at step **{step_a}** (A) and step "
            f"**{step_b}** (B). Its induction heads form around step {jump}: compare a snapshot before with one after.")
    cands = _candidates(ctx)
    names = list(cands)

    def name_of(c: str) -> str:
        if c.startswith("ckpt:"):
            return f"shipped checkpoint: {c[5:]}"
        return cands[c].label

    c1, c2 = st.columns(2)
    ca = c1.selectbox("Model A", names, index=0, key=f"{key}.ck_a", format_func=name_of)
    cb = c2.selectbox("Model B", names, index=_same_shape(ctx, cands, names, ca), key=f"{key}.ck_b",
                      format_func=name_of)
    return _candidate(ctx, cands, ca), _candidate(ctx, cands, cb), (
        "Two checkpoints read the same text. They must have the same shape and tokenizer.")


def _text_ids(ctx, side: Side, cap: int) -> list[int]:
    """The text to compare on: the row shown, if the models read it with the same tokenizer; else the first line of
    the sidebar's text in theirs (the model's example if that gives no tokens)."""
    if model_diff.same_tokenizer(side.tok, ctx.tok):
        ids = [int(i) for i in np.asarray(ctx.batch.x)[ctx.b, :ctx.n_pos]]
    else:
        line = (ctx.s.get("text") or "").splitlines()[0] if (ctx.s.get("text") or "").strip() else ""
        ids = list(side.tok.encode(line)) if line else []
    return ids[:cap]


def compared(ctx, key: str = "cmp") -> Optional[Compared]:
    """Model A and model B with their traces of the same text (drawn once per ``key`` and run), or None after a
    message saying why the two cannot be compared."""
    done = ctx.__dict__.setdefault("_compared", {})
    if key in done:
        return done[key]
    done[key] = None
    try:
        a, b, what = _sides(ctx, key)
    except (ValueError, OSError) as exc:
        st.error(f"That model could not be loaded: {exc}")
        return None
    st.markdown(what)
    if not model_diff.same_tokenizer(a.tok, b.tok):
        st.warning(f"**{plain_md(a.label)}** and **{plain_md(b.label)}** can't be compared: "
                   + model_diff.mismatch(a.tok, b.tok, {}, {}) + ".", icon=":material/block:")
        return None
    cfg_a, cfg_b = resources.get_model(a.cfg_json, a.model_key).config, resources.get_model(b.cfg_json,
                                                                                              b.model_key).config
    big = max(cfg_a.num_params(), cfg_b.num_params()) > BIG_MODEL_PARAMS
    # a model past 20M parameters reads at most 512 tokens, fewer if a trace won't fit or the two models' passes and
    # traces would cost more than the page's arithmetic budget (big_model_t with COMPARE_PASSES)
    cap = (min(big_model_t(cfg_a, COMPARE_PASSES), big_model_t(cfg_b, COMPARE_PASSES)) if big
           else min(cfg_a.block_size, cfg_b.block_size))
    if big and len(_text_ids(ctx, a, cap + 1)) > cap:
        bigger = cfg_a if cfg_a.num_params() >= cfg_b.num_params() else cfg_b
        st.caption(why_cut(bigger, cap, COMPARE_PASSES, COMPARE_SAID).replace("each line is cut",
                                                                              "here each model reads its line cut"))
    ids = [i for i in _text_ids(ctx, a, cap) if 0 <= i < min(cfg_a.vocab_size, cfg_b.vocab_size)]
    if not ids:
        st.warning("The text has no tokens these models know: type another text in the sidebar.")
        return None
    out = Compared(a, b, what, ids, token_labels(a.tok, ids))
    x = (tuple(ids),)
    src = resources.default_source(b.model_key, x, cfg_b) if cfg_b.n_enc_layer > 0 else (None, None)
    none = edit_specs.spec_key(None)
    out.tr_a = resources.traced(a.cfg_json, a.model_key, x, None, None, none, False, *src)
    out.tr_b = resources.traced(b.cfg_json, b.model_key, x, None, None, none, False, *src)
    problem = model_diff.shape_mismatch(out.tr_a, out.tr_b)
    if problem:
        st.warning(f"**{plain_md(a.label)}** and **{plain_md(b.label)}** can't be compared step by step: {problem}. "
                   "Pick two models of "
                   "the same shape.", icon=":material/block:")
        return None
    done[key] = out
    return out


# --------------------------------------------------------------------------- sections
@section("compare.diff")
def diff(ctx, *, key: str = "cmp", hook: Optional[str] = None) -> None:
    """Any recorded step of model A and model B side by side, and B − A on a scale diverging around 0. ``hook``
    pins the step ("{layer}" is the chosen layer); otherwise a picker lists every step of the trace in order."""
    c = compared(ctx, key)
    if c is None:
        return
    names = list(c.tr_a)
    default = (hook or act_name("pattern", ctx.layer)).replace("{layer}", str(ctx.layer))
    if hook is None:
        shown = {n: f"{i + 1}/{len(names)} · {step_info(c.tr_a, n).title} · {n}" for i, n in enumerate(names)}
        name = st.selectbox("Step", names, index=names.index(default) if default in names else 0, key=f"{key}.step",
                            format_func=shown.__getitem__)  # not a closure over c: the session keeps format_func
    elif default in names:
        name = default
    else:
        st.info(f"These models have no step `{default}`.")
        return
    info = step_info(c.tr_a, name)
    head = (ctx.head or 0) if "head" in info.axes else None
    mk = matrices.masked_cells(c.tr_a, 0)
    ma = matrices.step_matrix(c.tr_a[name], info, c.labels, 0, head, masked=mk)
    mb = matrices.step_matrix(c.tr_b[name], info, c.labels, 0, head, masked=mk)
    d = model_diff.step_difference(c.tr_a[name], c.tr_b[name])
    md = matrices.step_matrix(d, info, c.labels, 0, head, masked=mk)
    who = f" · head {head}" if head is not None else ""
    plot(ctx, figures.pair_heatmaps(ma, mb, f"A: {c.a.label}", f"B: {c.b.label}", title=f"{info.title}{who}"),
         key=f"{key}.pair")
    plot(ctx, figures.difference_heatmap(md, f"B − A: {info.title}{who}",
                                         show_values=ctx.s.get("show_values", False)), key=f"{key}.diff")
    finite = np.abs(d[np.isfinite(d)])
    biggest = float(finite.max()) if finite.size else 0.0
    st.caption(f"Above 0: B is larger; below 0: A is larger; white: no change. Over the whole step (every head and "
               f"position): largest |B − A| = {biggest:.4g}, mean |B − A| = "
               f"{float(finite.mean()) if finite.size else 0.0:.4g}."
               + (" The two are identical here." if biggest == 0 else "")
               + (" Choose the head in the sidebar." if head is not None else ""))


@section("compare.heads")
def heads(ctx, *, key: str = "cmp", measure: Optional[str] = None, top: int = 12) -> None:
    """Every head ranked by how much its attention pattern on this text changed from model A to model B (the mean,
    over query positions, of the total-variation or Jensen–Shannon distance between the two rows), as a layer ×
    head grid and as bars, most changed first."""
    c = compared(ctx, key)
    if c is None:
        return
    if measure not in model_diff.MEASURES:
        measure = st.radio("Distance between two attention rows", list(model_diff.MEASURES), horizontal=True,
                           key=f"{key}.measure")
    st.latex(model_diff.FORMULAS[measure])
    change = model_diff.head_changes(c.tr_a, c.tr_b, 0, len(c.ids), measure)
    if change.size == 0:
        st.info("These models have no attention patterns to compare.")
        return
    ranked = model_diff.ranked_heads(change)
    L, H, v = ranked[0]
    plot(ctx, figures.head_change_grid(change, f"How much each head's attention changed ({measure})", measure),
         key=f"{key}.grid")
    plot(ctx, figures.head_change_bars(ranked, top, f"The {min(top, len(ranked))} most changed heads", measure),
         key=f"{key}.bars")
    st.caption(f"A's and B's attention rows for query i are probabilities over the keys k ≤ i; the text has "
               f"T = {len(c.ids)} tokens. Both measures are 0 for the same row and 1 for rows with no key in "
               f"common. Most changed: layer {L} head {H} ({v:.3f}).")
    st.button(f"Show layer {L} head {H} side by side above", key=f"{key}.show_top", on_click=_show_head,
              args=(ctx.s, key, L, H), icon=":material/arrow_upward:")
    with st.expander("The code", icon=":material/code:"):
        st.code(source_code.function_code(model_diff.DISTANCES[measure]), language="python")


def _show_head(s: dict, key: str, layer: int, head: int) -> None:
    """Make a head the shared layer and head in view, and its attention pattern the step compared above."""
    s["layer"], s["head"] = int(layer), int(head)
    st.session_state[f"{key}.step"] = act_name("pattern", layer)
