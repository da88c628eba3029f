"""The Attention page's sections: the head's pattern, the steps one at a time, heads off, a plain average
against the learned weights, every layer × head, and the head detector.

An encoder-decoder model (``gptviz.model.encoder_decoder``) has two attentions per decoder layer: its own masked
self-attention (``kind="self"``) and cross-attention to the encoder output (``kind="cross"``: a T × S grid,
decoder positions × encoder positions, with no causal mask)."""
from __future__ import annotations

from functools import partial

import numpy as np
import streamlit as st

from ...interp import head_detector
from ...model.hook_names import act_name, parse_act_name
from ...present import figures, matrices
from ...present.descriptions import step_info
from ...present.page_context import probe_rows
from .. import resources, state
from ..widgets import clear_edits_button, downloads, explain, head_step, heads_off_toggle, masked, plot, step_heatmap
from . import section

KINDS = {"self": "Self-attention", "cross": "Cross-attention"}


def _window_words(cfg) -> str:
    """", sliding-window" for a model with a sliding window on some layers (the step's text says which), else "".
    The same on every layer: the step picker keeps its choice by title when the layer changes."""
    return "" if cfg.sliding_window is None else ", sliding-window"


def attention_steps(cfg, layer: int, kind: str = "self") -> list[tuple[str, str]]:
    """(title, hook name) for every step of one attention layer, in order. ``kind="cross"``: the decoder's
    cross-attention (encoder-decoder models)."""
    if kind == "cross":
        return cross_attention_steps(cfg, layer)
    if cfg.n_enc_layer >= 0:
        return _seq2seq_self_steps(cfg, layer)
    a = partial(act_name, layer=layer)  # a("q"): this layer's attention step; a("attn_out"): its block's
    before = cfg.sublayer_norms != "after"  # OLMo 2's attention reads the raw stream; its norm comes after
    steps = [("1 · The norm", act_name("out", layer, "ln1")) if cfg.norm_placement == "pre" and before else
             ("1 · The input (post-norm: attention reads the raw residual stream)", a("resid_pre"))
             if before else ("1 · The input (norm after the sublayer: attention reads the raw stream)", a("resid_pre"))]
    steps += [("2 · One projection makes Q, K and V", a("qkv")),
              ("3 · Split into heads: Q", a("q")), ("3 · Split into heads: K", a("k")),
              ("3 · Split into heads: V", a("v"))]
    if cfg.n_kv_head != cfg.n_head:
        steps[-2:] = [(f"3 · Split into key/value heads: K ({cfg.n_kv_head} for {cfg.n_head} query heads)", a("k")),
                      (f"3 · Split into key/value heads: V ({cfg.n_kv_head})", a("v"))]
    if cfg.qk_norm_full:  # OLMo 2: one norm over all of a position's queries, one over its keys
        steps += [("3a · QK-norm: all the queries normalised together (shown per head)", a("q_normed")),
                  ("3a · QK-norm: all the keys normalised together (shown per head)", a("k_normed"))]
    elif cfg.qk_norm:  # QK-norm: each head's queries and keys through an RMSNorm of their own, before the rotation
        steps += [("3a · QK-norm: each head's Q normalised", a("q_normed")),
                  ("3a · QK-norm: each head's K normalised", a("k_normed"))]
    if cfg.pos_encoding == "rope":
        steps += [("3b · Rotate Q by position (RoPE)", a("rot_q")),
                  ("3b · Rotate K by position (RoPE)", a("rot_k"))]
    if cfg.n_kv_head != cfg.n_head:  # grouped-query attention: each key/value head copied for its query heads
        steps += [("3c · Repeat K to the query heads", a("k_rep")), ("3c · Repeat V to the query heads", a("v_rep"))]
    scale = "1/√d_head" if cfg.attn_scale_dim is None else f"1/√{cfg.attn_scale_dim:g} (query_pre_attn_scalar)"
    steps += [("4 · Scores: Q Kᵀ", a("scores_raw")), (f"5 · Scale by {scale}", a("scores_scaled"))]
    if cfg.attn_softcap is not None:  # Gemma 2: every score squashed into ±cap before the mask
        steps += [(f"5b · Soft-cap: {cfg.attn_softcap:g} · tanh(score / {cfg.attn_softcap:g})", a("scores_capped"))]
    steps += [(f"6 · The causal{_window_words(cfg)} and padding mask", a("attn_scores")),
              ("7 · Softmax: the attention weights", a("pattern")), ("8 · Weighted values: Z = A V", a("z")),
              ("9 · The heads side by side (concatenated)", "concat")]
    if cfg.sublayer_norms != "before":  # Gemma 2, 3 and OLMo 2: the projection's output normalised before the add
        post = partial(act_name, layer=layer, part="ln1_post")
        return steps + [("10 · The output projection, normalised: its RMS (ln1_post)", post("scale")),
                        ("10 · … divided by it", post("normalized")),
                        ("10 · … times the gain: attention's output", a("attn_out")),
                        ("11 · The residual add", a("resid_mid"))]
    steps += [("10 · The output projection", a("attn_out")), ("11 · The residual add", a("resid_mid"))]
    return steps


def _seq2seq_self_steps(cfg, layer: int) -> list[tuple[str, str]]:
    """An encoder-decoder model's decoder self-attention: separate Q, K and V projections (no combined ``qkv``)."""
    a = partial(act_name, layer=layer)  # a("q"): this layer's attention step; a("attn_out"): its block's
    post = cfg.norm_placement == "post"
    steps = [("1 · The norm", act_name("out", layer, "ln1")) if not post else
             ("1 · The input (post-norm: attention reads the raw residual stream)", a("resid_pre"))]
    steps += [("2 · Three projections: Q, split into heads", a("q")),
              ("2 · Three projections: K, split into heads", a("k")),
              ("2 · Three projections: V, split into heads", a("v"))]
    if cfg.pos_encoding == "rope":
        steps += [("2b · Rotate Q by position (RoPE)", a("rot_q")),
                  ("2b · Rotate K by position (RoPE)", a("rot_k"))]
    steps += [("3 · Scores: Q Kᵀ", a("scores_raw")), ("4 · Scale by 1/√d_head", a("scores_scaled")),
              (f"5 · The causal{_window_words(cfg)} and padding mask", a("attn_scores")),
              ("6 · Softmax: the attention weights", a("pattern")), ("7 · Weighted values: Z = A V", a("z")),
              ("8 · The heads side by side (concatenated)", "concat"),
              ("9 · The output projection", a("attn_out")),
              ("10 · The residual add" + (" and LN₁ (post-norm)" if post else ""), a("resid_mid"))]
    return steps


def cross_attention_steps(cfg, layer: int) -> list[tuple[str, str]]:
    """(title, hook name) for every step of one decoder layer's cross-attention, in order."""
    c = partial(act_name, layer=layer, part="cross_attn")  # c("q"): this layer's cross-attention step
    blk = partial(act_name, layer=layer)  # blk("cross_out"): the block's
    post = cfg.norm_placement == "post"
    src = "the encoder output" if cfg.n_enc_layer > 0 else "the fixed random encoder output"
    steps = [("1 · The decoder's stream after self-attention (post-norm: read as it is)", blk("resid_mid"))
             if post else ("1 · The norm (LN cross)", act_name("out", layer, "ln_cross")),
             (f"2 · What it reads from: {src}", act_name("enc_out")),
             ("3 · Q from the decoder, split into heads", c("q")),
             ("3 · K from the encoder output, split into heads", c("k")),
             ("3 · V from the encoder output, split into heads", c("v")),
             ("4 · Scores: Q Kᵀ (decoder × encoder positions)", c("scores_raw")),
             ("5 · Scale by 1/√d_head", c("scores_scaled")),
             ("6 · The padding mask (no causal mask)", c("attn_scores")),
             ("7 · Softmax over encoder positions: the cross-attention weights", c("pattern")),
             ("8 · Weighted values: Z = A V", c("z")),
             ("9 · The heads side by side (concatenated)", "cross_concat"),
             ("10 · The output projection", blk("cross_out")),
             ("11 · The residual add" + (" and LN cross (post-norm)" if post else ""), blk("resid_cross"))]
    return steps


def attention_kind(ctx, key: str = "att.kind") -> str:
    """"self" or "cross": a toggle for an encoder-decoder model (cross first), always "self" for GPT."""
    if ctx.cfg.n_enc_layer < 0:
        return "self"
    choice = st.segmented_control("Attention", list(KINDS.values()), default=KINDS["cross"], key=key,
                                  label_visibility="collapsed",
                                  help="Self-attention: the decoder's positions look at earlier decoder positions. "
                                       "Cross-attention: each decoder position looks at the encoder's positions.")
    return "self" if choice == KINDS["self"] else "cross"


def _reads_enc(info) -> bool:
    return "enc_pos" in info.axes


def cross_step(ctx, name: str, *, key: str = "", head="chosen", title: str | None = None):
    """One step over encoder positions as a heatmap: cross-attention's T × S scores and weights (rows decoder
    tokens, columns encoder positions labelled by the source), its keys and values, the encoder output.
    ``head``: "chosen" (the sidebar's head; every head with "all heads"), a head, or None (every head)."""
    tr = ctx.trace()
    info = step_info(tr, name)
    keys, pad = state.source_keys(ctx)
    per_head = "head" in info.axes
    h = (ctx.head if head == "chosen" else head) if per_head else None
    if per_head and "query_pos" in info.axes and h is None:  # every head at once, tiled
        v = np.asarray(tr[name])[ctx.b, :, : ctx.n_pos]
        H, T, S = v.shape
        mk = None if pad is None else np.broadcast_to(pad[:S], (T, S))
        if info.kind == "masked":
            inf = np.isneginf(v[0])
            mk = inf if mk is None else (mk | inf)
        per_row = min(H, 4)
        rows = (H + per_row - 1) // per_row
        tiles = [[v[r * per_row + c] if r * per_row + c < H else np.full_like(v[0], np.nan) for c in range(per_row)]
                 for r in range(rows)]
        fig = figures.tiled_heatmap(tiles,
                                    [f"heads {r * per_row}–{min(H, (r + 1) * per_row) - 1}" for r in range(rows)],
                                    [f"+{c}" for c in range(per_row)] if rows > 1
                                    else [f"head {c}" for c in range(per_row)],
                                    kind="signed" if info.kind == "masked" else info.kind, masked=mk,
                                    title=(title or info.title) + " · every head (rows: decoder position, "
                                                                  "columns: encoder position)")
        plot(ctx, fig, key=f"fig.{key}{name}.all")
        downloads(name, tr[name], None, key=key)
        return None
    m = matrices.step_matrix(tr[name], info, ctx.labels(), ctx.b, h, n_pos=ctx.n_pos, key_tokens=keys, key_mask=pad)
    t = title or info.title
    if h is not None:
        t += f" · head {h}"
    plot(ctx, figures.heatmap(m, t, show_values=ctx.s.get("show_values", False)), key=f"fig.{key}{name}")
    downloads(name, tr[name], m, key=key)
    return m


def _draw_step(ctx, title: str, name: str, key: str) -> None:
    L, tr = ctx.layer, ctx.trace()
    if name == "cross_concat":
        cross_step(ctx, act_name("z", L, "cross_attn"), key=key + ".concat", head=None,
                   title=f"concat(Z₀ … Z{ctx.cfg.n_head - 1}) of cross-attention · (T × n_head·d_head)")
        st.markdown("Each cross-attention head's weighted values are laid next to each other: one row of width "
                    "n_head × d_head per decoder position.")
        st.code("y = y.transpose(1, 2).reshape(B, T, nh * hs)  # (B, T, nh*hs)", language="python")
        return
    if name == "concat":
        step_heatmap(ctx, act_name("z", L), head=None, key=key + ".concat",
                     title=f"concat(Z₀ … Z{ctx.cfg.n_head - 1}) · (T × n_head·d_head)")
        st.markdown("Each head's weighted values are laid next to each other: one row of width n_head × d_head "
                    "per position.")
        st.code("y = y.transpose(1, 2).reshape(B, T, nh * hs)  # (B, T, nh*hs)", language="python")
        return
    place = parse_act_name(name)
    if _reads_enc(step_info(tr, name)) or place.part == "cross_attn":
        cross_step(ctx, name, key=key)
    elif "query_pos" in step_info(tr, name).axes or place.part == "attn" and place.step != "qkv":
        head_step(ctx, name, key=key)
    else:
        step_heatmap(ctx, name, key=key)
    explain(step_info(tr, name))


# The pattern's plot width on a 1280×720 screen, in the Attention page's left column (three fifths of the main
# column, less the query labels and the colour bar: 257 px measured in Chromium) and across the page (641 px at
# 1280): it decides whether the key labels stand level or upright (readable_x_labels), never crossed at 45°.
PATTERN_PLOT_PX, WIDE_PATTERN_PLOT_PX = 240, 600


@section("attention.pattern")
def pattern(ctx, *, key: str = "pat", kind: str = "self", plot_px: float | None = None) -> None:
    """The chosen head's attention weights (every head's, with "all heads"); ``kind="cross"``: its
    cross-attention weights, decoder positions × encoder positions. ``plot_px``: the one head's plot width on
    screen, for readable key labels."""
    if kind == "cross":
        name = act_name("pattern", ctx.layer, "cross_attn")
        cross_step(ctx, name, key=key)
    else:
        name = act_name("pattern", ctx.layer)
        if getattr(ctx.cfg, "attn_sinks", False) and ctx.head is not None:
            _pattern_with_sink(ctx, name, key)
        else:
            head_step(ctx, name, key=key, plot_px=plot_px)
    explain(step_info(ctx.trace(), name), code=False)


def _pattern_with_sink(ctx, name: str, key: str) -> None:
    """GPT-OSS: the head's weights with the sink as one more key column, named "sink"."""
    tr, T, h = ctx.trace(), ctx.n_pos, ctx.head
    pat = np.asarray(tr[name])[ctx.b, h, :T, :T]
    sink = np.asarray(tr[act_name("sink", ctx.layer)])[ctx.b, h, :T, 0]
    mk = masked(ctx, name)
    m = matrices.pattern_with_sink(pat, sink, ctx.labels(), None if mk is None else mk[:T, :T])
    plot(ctx, figures.heatmap(m, f"{step_info(tr, name).title} · head {h} · with the sink (rows sum to 1 with it)"),
         key=f"fig.{key}{name}.sink")
    st.caption(f"The sink column is the weight no token gets: this head gives it {sink.mean():.0%} of each row on "
               "average, so its token weights sum to less than 1.")


@section("attention.steps")
def steps(ctx, *, key: str = "steps", step: int | None = None, every: bool | None = None, kind: str = "self") -> None:
    """The layer's steps, one at a time (a picker), or all at once. Steps the trace does not have are skipped."""
    tr = ctx.trace()
    all_steps = [(t, n) for t, n in attention_steps(ctx.cfg, ctx.layer, kind)
                 if n in ("concat", "cross_concat") or n in tr]
    if kind == "cross":
        key = f"{key}.cross"  # its own picker: the two lists differ
    titles = [t for t, _ in all_steps]
    if every is None:
        every = st.toggle("Show every step at once", key=f"{key}.every",
                          help=f"All {len(all_steps)} steps one under the other (slower to draw).")
    if every:
        for title, name in all_steps:
            st.subheader(title)
            _draw_step(ctx, title, name, key=f"{key}.{name}")
        return
    if step is None:
        # none drawn until one is picked: a third chart would cost the page a third of its drawing time
        choice = st.radio("Step", titles, key=f"{key}.pick", horizontal=True, label_visibility="collapsed", index=None)
    else:
        choice = titles[min(step, len(titles) - 1)]
    if choice is None:
        st.caption(f"Pick one of the {len(all_steps)} steps to draw it, in the order the model computes them. "
                   "(One chart at a time keeps the page quick on a projector; the Step-through page walks every "
                   "step of the model.)")
        return
    title, name = all_steps[titles.index(choice)]
    st.subheader(title)
    _draw_step(ctx, title, name, key=key)


@section("attention.heads_off")
def heads_off(ctx, *, key: str = "att") -> None:
    heads_off_toggle(ctx, ctx.layer, key=key)
    clear_edits_button(ctx, key=key)


@section("attention.average_vs_learned")
def average_vs_learned(ctx, *, key: str = "avg") -> None:
    tr, L, H = ctx.trace(), ctx.layer, ctx.head or 0
    pat = np.asarray(tr[act_name("pattern", L)])[ctx.b, H, : ctx.n_pos, : ctx.n_pos]
    mk = masked(ctx)[: ctx.n_pos, : ctx.n_pos]
    labels = ctx.labels()
    avg = matrices.averaging_matrix(ctx.n_pos)
    left = matrices.Matrix(np.where(mk, np.nan, avg), labels, labels, "query", "key", "probability", mk)
    right = matrices.Matrix(np.where(mk, np.nan, pat), labels, labels, "query", "key", "probability", mk)
    plot(ctx, figures.side_by_side(left, right, "Plain average: row t gives 1/(t+1) to each earlier token",
                                   f"Learned weights, layer {L} head {H}"), key=key)
    st.markdown("The simplest way to let a token use what came before is to average everything before it. "
                "Attention learns *which* earlier tokens deserve the weight, separately in every head.")


@section("attention.all_heads")
def all_heads(ctx, *, key: str = "overview", kind: str = "self") -> None:
    tr, cfg = ctx.trace(), ctx.cfg
    if kind == "cross":
        _, pad = state.source_keys(ctx)
        tiles = [[np.asarray(tr[act_name("pattern", l, "cross_attn")])[ctx.b, h, : ctx.n_pos]
                  for h in range(cfg.n_head)] for l in range(cfg.n_layer)]
        T, S = tiles[0][0].shape
        mk = None if pad is None else np.broadcast_to(pad[:S], (T, S))
        plot(ctx, figures.tiled_heatmap(tiles, [f"L{l}" for l in range(cfg.n_layer)],
                                        [f"H{h}" for h in range(cfg.n_head)], masked=mk,
                                        title="Cross-attention weights of every head (rows: decoder position, "
                                              "columns: encoder position)"), key=key + ".cross")
        return
    mk = masked(ctx)[: ctx.n_pos, : ctx.n_pos]
    tiles = [[np.asarray(tr[act_name("pattern", l)])[ctx.b, h, : ctx.n_pos, : ctx.n_pos]
              for h in range(cfg.n_head)] for l in range(cfg.n_layer)]
    plot(ctx, figures.tiled_heatmap(tiles, [f"L{l}" for l in range(cfg.n_layer)], [f"H{h}" for h in range(cfg.n_head)],
                                    title="Attention weights of every head", masked=mk), key=key)


@section("attention.where_it_looks")
def where_it_looks(ctx, *, key: str = "where", kind: str = "cross") -> None:
    """For each decoder position, the position the chosen head weights most (and how much): a table."""
    import pandas as pd

    tr, L, H = ctx.trace(), ctx.layer, ctx.head or 0
    name = act_name("pattern", L, "cross_attn" if kind == "cross" else "attn")
    p = np.asarray(tr[name])[ctx.b, H, : ctx.n_pos]
    labels = ctx.labels()
    if kind == "cross":
        keys, pad = state.source_keys(ctx)
        keys = keys or matrices.enc_labels(p.shape[1])
        if pad is not None:
            p = np.where(pad[: p.shape[1]], -1.0, p)
        col = "reads source position"
    else:
        keys, col = labels, "reads position"
    best = p.argmax(-1)
    df = pd.DataFrame({"decoder": [f"{t}: '{labels[t]}'" for t in range(len(best))],
                       col: [f"{int(j)}: '{keys[j]}'" if j < len(keys) else str(int(j)) for j in best],
                       "weight": [float(p[t, j]) for t, j in enumerate(best)]})
    st.dataframe(df, hide_index=True, width="stretch", key=key,
                 column_config={"weight": st.column_config.ProgressColumn("weight", min_value=0.0, max_value=1.0,
                                                                          format="%.2f")})
    if kind == "cross" and state.model_task(ctx) == "reverse":
        n, S = len(best), p.shape[1] - (0 if pad is None else int(pad[: p.shape[1]].sum()))
        hits = sum(int(best[t]) == S - 1 - t for t in range(min(n, S)))
        st.caption(f"Reversal: decoder position t writes source letter L−1−t, so the weights should sit on the "
                   f"anti-diagonal. Here {hits} of {n} positions read that letter most (head {H}).")


def detector_scores(ctx) -> dict:
    """Every head's scores: on the user's text, with induction and duplicate-token from the probe."""
    scores = head_detector.detect(ctx.trace(), ctx.b)
    pr = resources.probe_scores(ctx.cfg_json, ctx.model_key, batch=probe_rows(ctx.cfg))
    scores["induction"], scores["duplicate"] = pr["scores"]["induction"], pr["scores"]["duplicate"]
    return {k: scores[k] for k in head_detector.KINDS}


def _open_head(s: dict, layer: int, head: int) -> None:
    s["layer"], s["head"] = int(layer), int(head)


def _picked(s: dict, key: str, n_head: int) -> None:
    i = int(st.session_state[key])
    _open_head(s, i // n_head, i % n_head)


WIDE_GRID_HEADS = 9  # from this many heads a layer, the grid takes the page's width (its words need the room)


@section("attention.head_detector")
def head_detector_grid(ctx, *, key: str = "det", cells_px: int = 300) -> None:
    """Layer × head grid of the head detector's best label and score; clicking a head opens it. ``cells_px``: about
    how wide its cells are drawn (300 in two fifths of a page, 700 across it)."""
    scores = detector_scores(ctx)
    best_kind, best = head_detector.best_labels(scores)
    L, H = best.shape
    hover = np.array([["<br>".join(f"{k}: {scores[k][l, h]:.2f}" for k in scores) for h in range(H)] for l in range(L)],
                     dtype=object)
    fig = figures.head_grid(best, best_kind, "What each head does", hover, cells_px=cells_px)
    ev = plot(ctx, fig, key=key, on_select="rerun", selection_mode="points")
    pts = (ev or {}).get("selection", {}).get("points", []) if ev else []
    clicked = (int(str(pts[0]["y"]).lstrip("L")), int(str(pts[0]["x"]).lstrip("H"))) if pts else None
    if clicked != st.session_state.get(f"{key}.clicked"):  # a new click (a stale one must not undo the sidebar)
        st.session_state[f"{key}.clicked"] = clicked
        if clicked is not None and clicked != (ctx.layer, ctx.head):
            _open_head(ctx.s, *clicked)
            st.rerun()
    st.caption("Each cell: the head's best-scoring kind and its score (0 to 1). Click a cell to open that head.")
    pick = f"{key}.pick"
    st.session_state[pick] = ctx.layer * H + (ctx.head or 0)  # follows the sidebar and clicks
    # one under the other, not in two columns: each block is a message to the browser on every rerun
    st.selectbox("Open a head", list(range(L * H)), key=pick, on_change=_picked, args=(ctx.s, pick, H),
                 format_func=lambda i: f"L{i // H} H{i % H}: {best_kind[i // H, i % H]} ({best[i // H, i % H]:.2f})")
    legend = st.expander("How each kind is scored", key=f"{key}.legend", on_change="rerun")
    if legend.open:  # written only while open: one message fewer on every run
        legend.markdown(kinds_legend(probe_rows(ctx.cfg)))


# One element, not one per kind: every element is a message to the browser on every rerun.
def kinds_legend(rows: int) -> str:
    """What each kind of head does and how it is scored, and where the scores come from (the probe's ``rows``)."""
    return "\n".join(f"- **{k}** head {head_detector.DESCRIPTIONS[k]} Score: {head_detector.HOW[k]}."
                     for k in head_detector.KINDS) + (
        "\n\nScores come from your text; **induction** and **duplicate** come from a probe: a run of "
        f"{head_detector.PROBE_N} random tokens repeated twice ({rows} row{'s' if rows != 1 else ''}), since your "
        "text may repeat nothing.")
