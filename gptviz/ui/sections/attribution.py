"""Which input tokens a prediction rests on, three ways side by side: one head's attention, attention rollout, and
integrated gradients (Captum), with the sentence on why attention weights are not an explanation."""
from __future__ import annotations

from typing import Optional

import numpy as np
import streamlit as st

from ...interp.attribution import attention_rollout, integrated_gradients
from ...model.hook_names import act_name
from ...perf import BIG_MODEL_PARAMS
from ...present import figures
from ...run import edits as edit_specs
from ...run.slots import BIG_LOAD
from .. import resources
from ..waiting import queued
from ..widgets import plot
from . import section

WHY = ("**Attention weights are not an explanation.** A weight says where a head looks, not what it takes from "
       "there: the value vectors, the output projection, the other heads, the MLPs and the residual stream all come "
       "between a weight and the prediction. Rollout follows attention through every layer but still ignores all "
       "of that. Integrated gradients asks the model itself: how much does the logit move as each token's "
       "embedding is brought in from zero? Its numbers add up to the logit's change (completeness), which "
       "attention's never promise to. When the three disagree, trust the one that measured the output.")


@st.cache_data(max_entries=64, show_spinner="Integrated gradients: 64 forward and backward passes…")
def _ig(cfg_json: str, model_key: Optional[str], ids: tuple, position: int, target: int) -> tuple[list, float]:
    model = resources.get_model(cfg_json, model_key)
    big = model.config.num_params() > BIG_MODEL_PARAMS  # 8 points a pass bounds a big model's memory
    attr, delta = integrated_gradients(model, list(ids), position, target, batch=8 if big else None)
    return attr.tolist(), delta


@section("who.token_attribution")
def token_attribution(ctx, *, key: str = "attr") -> None:
    """For one position's prediction of one token: the chosen head's attention row, the rollout row, and each
    token's integrated-gradients attribution, as three bar charts over the same tokens (short titles: three fit
    side by side on a projector)."""
    if ctx.cfg.n_enc_layer >= 0:
        st.info("Token attribution is for decoder-only models; this one reads a source through cross-attention.")
        return
    tr, b, T = ctx.trace(), ctx.b, ctx.n_pos
    labels, vocab = ctx.labels(), ctx.vocab_labels()
    ids = tuple(int(i) for i in np.asarray(ctx.batch.x)[b, :T])
    c1, c2 = st.columns(2)
    pos = c1.selectbox("The prediction made at position", list(range(T)), index=T - 1, key=f"{key}.pos",
                       format_func=lambda i: f"{i}: {labels[i]}")
    logits = np.asarray(tr[act_name("logits")])[b, pos]
    top = [int(i) for i in np.argsort(-logits)[:10]]
    target = c2.selectbox("of the token", top, key=f"{key}.target.{pos}",
                          format_func=lambda i: f"{vocab[i]} (logit {logits[i]:.2f})")
    shown = [labels[j] for j in range(pos + 1)]
    head = ctx.head if ctx.head is not None else None
    pattern = np.asarray(tr[act_name("pattern", ctx.layer)])[b]
    att = pattern[head, pos, : pos + 1] if head is not None else pattern[:, pos, : pos + 1].mean(0)
    roll = attention_rollout(tr)[b, pos, : pos + 1]
    args = (ctx.cfg_json, ctx.model_key, ids, int(pos), int(target))
    # On a big model integrated gradients take seconds to tens of seconds (GPT-2 small, 64 tokens: 17.7 s measured),
    # so there they wait for a click and queue behind any other big computation on the server.
    big, asked = ctx.cfg.num_params() > BIG_MODEL_PARAMS, f"{key}.ig.asked"
    if big and st.session_state.get(asked) != args[2:]:
        if st.button("Compute integrated gradients", key=f"{key}.ig.go", icon=":material/calculate:",
                     help="64 forward and backward passes of this big model: seconds to a minute, one at a time on "
                          "this server."):
            st.session_state[asked] = args[2:]
    ig, delta = None, 0.0
    if not big:
        ig, delta = _ig(*args)
    elif st.session_state.get(asked) == args[2:]:
        with queued(BIG_LOAD, "big computation"):  # one big computation at a time on this server
            ig, delta = _ig(*args)
    else:
        st.caption("Attention and rollout are read from the trace; integrated gradients wait for the button on a "
                   "model this big.")
    ig = None if ig is None else np.asarray(ig)[: pos + 1]
    who = f"L{ctx.layer} H{head}" if head is not None else f"L{ctx.layer}, heads averaged"
    a, r, g = st.columns(3)
    with a:
        plot(ctx, figures.bar_chart(shown, att.tolist(), title=f"Attention {who}", x_title="weight",
                                    highlight=int(np.argmax(att)), prob=True), key=f"{key}.att")
    with r:
        plot(ctx, figures.bar_chart(shown, roll.tolist(), title="Rollout (all layers)", x_title="share",
                                    highlight=int(np.argmax(roll)), prob=True), key=f"{key}.roll")
    with g:
        if ig is not None:
            plot(ctx, figures.bar_chart(shown, ig.tolist(), title="Int. gradients",
                                        x_title="attribution to the logit", highlight=int(np.argmax(np.abs(ig)))),
                 key=f"{key}.ig")
    edits = not edit_specs.is_empty(ctx.s.get("edits") or edit_specs.EMPTY)
    if ig is None:
        st.markdown(WHY)
        return
    st.caption(f"Integrated gradients of the logit of {vocab[target]!r} at position {pos}, from all-zero token "
               f"embeddings (positions kept), 64 Gauss–Legendre points (Captum). The attributions add up to "
               f"{ig.sum():+.4f}; the convergence gap is {delta:+.1e}."
               + (" Computed on the model's own weights, without your edits." if edits else ""))
    st.markdown(WHY)
