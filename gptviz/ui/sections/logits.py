"""The Logits & loss page's sections: the next-token probabilities, the final norm, the logits, the
target's probability and −log p, the loss next to F.cross_entropy and ln V, and the top predictions."""
from __future__ import annotations

import math
from typing import Optional

import numpy as np
import pandas as pd
import streamlit as st

from ...model.hook_names import act_name
from ...present import figures, matrices, readouts
from ...present.descriptions import step_info
from ...run.loss import uniform_loss
from ..widgets import downloads, explain, loss_metrics, plot, step_heatmap
from . import section
from .steps import mark_cell

FULL_VOCAB_LIMIT = 96


def _columns(ctx, key: str) -> tuple[np.ndarray, str]:
    """The vocabulary columns to show: all of a small vocabulary; for a big one the top-k at any position plus
    each target, k from a slider (drawn once per ``key`` and run, shared by the sections that use it)."""
    cfg, tr = ctx.cfg, ctx.trace()
    if cfg.vocab_size <= FULL_VOCAB_LIMIT:
        return np.arange(cfg.vocab_size), ""
    drawn = ctx.__dict__.setdefault("_top_k", {})
    if key not in drawn:
        drawn[key] = st.slider("Top-k columns", 3, 40, 10, key=f"{key}.k",
                               help="With a large vocabulary only the k most likely tokens at each position, plus "
                                    "each target, are shown.")
    k = drawn[key]
    logits = np.asarray(tr[act_name("logits")])[ctx.b, : ctx.n_pos]
    y = np.asarray(tr.targets)[ctx.b, : ctx.n_pos]
    ids = matrices.vocab_columns(logits, y, k)
    return ids, f" (top-{k} at any position + targets: {len(ids)} of {cfg.vocab_size:,} tokens)"


@section("logits.probs")
def probs(ctx, *, key: str = "logits", highlight: Optional[dict] = None) -> bool:
    """softmax(logits): the next-token distribution at every position. ``highlight`` {"pos", "token"} boxes
    that cell. Returns whether it did."""
    tr = ctx.trace()
    ids, note = _columns(ctx, key)
    p = np.asarray(tr[act_name("probs")])[ctx.b, : ctx.n_pos]
    mp = matrices.vocab_matrix(p, ids, ctx.vocab_labels(), ctx.labels(), "probability")
    fig = figures.heatmap(mp, "softmax(logits)" + note)
    drawn = False
    if highlight and "pos" in highlight and "token" in highlight and highlight["token"] in set(ids.tolist()):
        mark_cell(fig, highlight["pos"], int(np.searchsorted(ids, highlight["token"])), "#d62728")
        drawn = True
    plot(ctx, fig, key=f"{key}.probs")
    explain(step_info(tr, act_name("probs")))
    return drawn


@section("logits.final_norm")
def final_norm(ctx, *, key: str = "lf") -> None:
    """The final norm before the unembedding (pre-norm models)."""
    if ctx.cfg.norm_placement != "pre":
        st.info("A post-norm model has no final norm: the last block's output is already normalised.")
        return
    step_heatmap(ctx, act_name("out", part="ln_final"), key=key)
    explain(step_info(ctx.trace(), act_name("out", part="ln_final")))


@section("logits.logits")
def logits(ctx, *, key: str = "logits") -> None:
    """A score for every token at every position."""
    tr = ctx.trace()
    ids, note = _columns(ctx, key)
    lg = np.asarray(tr[act_name("logits")])[ctx.b, : ctx.n_pos]
    ml = matrices.vocab_matrix(lg, ids, ctx.vocab_labels(), ctx.labels(), "signed")
    plot(ctx, figures.heatmap(ml, "logits" + note), key=f"{key}.logits")
    downloads(act_name("logits"), np.asarray(tr[act_name("logits")]), ml, key=f"{key}.lg")
    explain(step_info(tr, act_name("logits")))


@section("logits.target")
def target(ctx, *, key: str = "tp", highlight: Optional[dict] = None) -> bool:
    """p of the true next token and −log p at every position. ``highlight`` {"pos"} outlines one position."""
    tr = ctx.trace()
    vocab, labels = ctx.vocab_labels(), ctx.labels()
    tp, nll, y = readouts.target_table(tr, ctx.b, ctx.n_pos)
    target_labels = [f"→ {vocab[t]}" if t >= 0 else "(none)" for t in y]
    hover = [f"{l} {tl}" for l, tl in zip(matrices.token_hover(labels), target_labels)]
    row = highlight.get("pos") if highlight else None
    c1, c2 = st.columns(2)
    with c1:
        mt = matrices.Matrix(tp[:, None], labels, ["p(target)"], "position", "", "probability", hover_rows=hover)
        plot(ctx, figures.heatmap(mt, "p of the true next token", show_values=True, highlight_row=row), key=f"{key}.p")
    with c2:
        mn = matrices.Matrix(nll[:, None], labels, ["−log p"], "position", "", "nonnegative", hover_rows=hover)
        plot(ctx, figures.heatmap(mn, "loss per token: −log p", show_values=True, highlight_row=row), key=f"{key}.nll")
    explain(step_info(tr, act_name("loss_per_token")))
    return row is not None


@section("logits.loss")
def loss(ctx, *, key: str = "loss", highlight: Optional[dict] = None) -> bool:
    """The mean of −log p next to PyTorch's F.cross_entropy and ln V. ``highlight`` {"metric": "uniform" |
    "loss"} points at that number."""
    cfg, tr = ctx.cfg, ctx.trace()
    value = tr.loss
    ref = matrices.loss_check(np.asarray(tr[act_name("logits")]), np.asarray(tr.targets))
    uniform = uniform_loss(cfg.vocab_size)
    which = (highlight or {}).get("metric")
    c1, c2, c3 = st.columns(3)
    c1.metric("mean of −log p", "—" if math.isnan(value) else f"{value:.5f}",
              delta="← the answer" if which == "loss" else None, delta_color="off")
    c2.metric("F.cross_entropy", "—" if math.isnan(ref) else f"{ref:.5f}",
              help="PyTorch's own cross_entropy on the same logits and targets, with ignore_index=-100.")
    c3.metric("uniform guess ln V", f"{uniform:.5f}", delta="← the answer" if which == "uniform" else None,
              delta_color="off")
    bd = tr.breakdown
    if math.isnan(value):
        st.info("No position has a target yet: type at least two tokens.")
    else:
        st.caption(f"Mean over {bd['n_valid']} positions with a target, all rows of the batch. "
                   f"The two agree to {abs(value - ref):.1e}. ln V = ln {cfg.vocab_size:,}.")
    if ctx.scored_y is not None:
        loss_metrics(ctx, precision=5)
    explain(step_info(tr, act_name("loss")))
    return which in ("loss", "uniform")


@section("logits.top")
def top(ctx, *, key: str = "top") -> None:
    """The five most likely next tokens at each position, next to the true one."""
    tr, cfg = ctx.trace(), ctx.cfg
    vocab, labels = ctx.vocab_labels(), ctx.labels()
    T = ctx.n_pos
    p = np.asarray(tr[act_name("probs")])[ctx.b, :T]
    y = np.asarray(tr.targets)[ctx.b, :T]
    k2 = min(5, cfg.vocab_size)
    best = matrices.top_predictions(p, k2, vocab)
    df = pd.DataFrame({"position": range(T), "token": labels, "true next": [vocab[t] if t >= 0 else "—" for t in y],
                       **{f"#{j + 1}": [f"{best[t][j][0]}  ({best[t][j][1]:.2f})" for t in range(T)]
                          for j in range(k2)}})
    st.table(df.set_index("position"))  # a plain table: a browser draws it far faster than a data grid
