"""The Experts page's sections: where a mixture of experts' router sends each token (tokens × experts), each
expert's load over your text and the held-out plays, an expert's top-routed tokens, switching experts off, and how
the router works, with its formula and the lines of gptviz's source that compute it.

A dense model (no experts) gets one line saying so and a button that opens the shipped mixture-of-experts model."""
from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np
import pandas as pd
import streamlit as st

from ...interp import experts as moe
from ...model.experts import MixtureOfExperts
from ...model.hook_names import act_name
from ...present.descriptions import step_info
from ...present.figures import experts as fig
from ...present.markdown_text import plain_md
from ...present.settings import CKPT_PREFIX
from ...present.source_code import function_code
from ...run import edits as edit_specs
from ...text.tokenizers import token_labels
from .. import resources, state
from ..widgets import clear_edits_button, experts_off_select, plot
from . import section

SHIPPED_MOE = "shakespeare-moe"  # the shipped mixture-of-experts model a dense model's page offers
HELD_OUT_WINDOWS = 16  # windows of the held-out plays routed for the loads and top tokens (cached per model)


def layer_in_view(ctx) -> Optional[int]:
    """The layer shown: the sidebar's, if it has experts, else the first that has; None for a dense model."""
    layers = moe.moe_layers(ctx.cfg)
    if not layers:
        return None
    return ctx.layer if ctx.layer in layers else layers[0]


def _layer(ctx) -> Optional[int]:
    """``layer_in_view``, with a line when it is not the sidebar's layer or the model has no experts."""
    L = layer_in_view(ctx)
    if L is None:
        no_experts(ctx)
    elif L != ctx.layer:
        st.caption(f"Layer {ctx.layer} has a plain MLP (no experts): showing layer {L}, the first with experts.")
    return L


def _off(ctx, layer: int) -> list[int]:
    spec = ctx.s.get("edits") or {}
    return sorted(int(e) for l, e in spec.get("experts_off", []) if int(l) == layer)


@section("experts.no_experts")
def no_experts(ctx, *, key: str = "moe.dense") -> None:
    """One line for a dense model, and a button that opens the shipped mixture-of-experts model."""
    st.info("This model has no mixture of experts: every token goes through one dense MLP in every layer.",
            icon=":material/info:")
    if SHIPPED_MOE in resources.shipped_names():
        st.button(f"Open the shipped mixture-of-experts model ({SHIPPED_MOE})", key=key, type="primary",
                  on_click=state.apply_preset, args=(ctx.s, CKPT_PREFIX + SHIPPED_MOE))


@section("experts.routing")
def routing(ctx, *, key: str = "moe.route", height: int = 560) -> None:
    """The router's probabilities for the text's tokens (batch row in view), tokens × experts, chosen cells dotted."""
    L = _layer(ctx)
    if L is None:
        return
    tr, b, n = ctx.trace(), ctx.b, ctx.n_pos
    probs = np.asarray(tr[act_name("router_probs", L)])[b, :n]
    weights = np.asarray(tr[act_name("expert_weights", L)])[b, :n]
    k = ctx.cfg.n_expert_active
    title = f"L{L} router probabilities · dots: top {k}"
    plot(ctx, fig.routing_heatmap(probs, weights, ctx.labels(), _off(ctx, L), title, height=height),
         key=f"{key}.{L}")


def _held_out(ctx) -> Optional[tuple[dict[int, np.ndarray], np.ndarray]]:
    """(expert_weights per layer (N, T, E), windows (N, T)) over a few windows of the held-out plays, or None when
    this model's tokenizer cannot read them."""
    return _routed_plays(ctx.cfg_json, ctx.model_key, bool(ctx.untrained), _model=ctx.model, _tok=ctx.tok)


@st.cache_data(max_entries=8, show_spinner="Routing the held-out plays…")
def _routed_plays(cfg_json: str, model_key: Optional[str], untrained: bool, _model, _tok):
    try:
        windows = moe.held_out_windows(_tok, _model.config.block_size, HELD_OUT_WINDOWS)
        if int(windows.max()) >= _model.config.vocab_size:
            return None
        return moe.routing_weights(_model, windows), windows.numpy()
    except Exception:  # noqa: BLE001 - a tokenizer that cannot read the plays: the page shows your text only
        return None


def held_out_load(ctx, layer: int) -> tuple[Optional[np.ndarray], str]:
    """(load, where it comes from) over the held-out plays: the shipped checkpoint's own (``expert_load`` in its
    metadata, many windows), else counted over ``HELD_OUT_WINDOWS`` windows; (None, why) if neither is there."""
    meta = getattr(ctx.entry, "meta", None) or {}
    saved = (meta.get("expert_load") or {}).get(str(layer))
    if saved is not None and not ctx.untrained and len(saved) == ctx.cfg.n_expert:
        n = meta.get("expert_load_windows")
        return np.asarray(saved, dtype=float), "held-out plays" + (f" ({n} windows)" if n else "")
    got = _held_out(ctx)
    if got is None:
        return None, "this model's tokenizer cannot read the held-out plays"
    weights, windows = got
    return moe.load_from_weights(weights[layer]), f"held-out plays ({len(windows)} windows)"


@section("experts.load")
def load(ctx, *, key: str = "moe.load") -> None:
    """Each expert's share of the routing choices over your text (every batch row, padding left out) and over the
    held-out plays, against the even share 1/E."""
    L = layer_in_view(ctx)
    if L is None:
        return
    E = ctx.cfg.n_expert
    w = np.asarray(ctx.trace()[act_name("expert_weights", L)])
    real = np.asarray(ctx.batch.attention_mask, dtype=bool)
    loads = {"your text": moe.load_from_weights(w, real)}
    plays, source = held_out_load(ctx, L)
    if plays is not None:
        loads[source] = plays
    plot(ctx, fig.load_bars(loads, E, _off(ctx, L), f"L{L} each expert's load"), key=f"{key}.{L}")
    st.markdown(f"An expert's **load** is its share of all routing choices (each token makes "
                f"{ctx.cfg.n_expert_active}): a balanced router gives each of the {E} experts 1/{E}.")
    if plays is None:
        st.caption(f"Your text only: {source}.")
    elif getattr(ctx.entry, "meta", None) and (ctx.entry.meta.get("expert_load") or {}).get(str(L)) \
            and not ctx.untrained:
        st.caption("The held-out loads were counted when the model was saved, with every expert on.")


@section("experts.top_tokens")
def top_tokens(ctx, *, key: str = "moe.top", k: int = 10) -> None:
    """An expert's top-routed tokens: those of your text (batch row in view) that gave it the largest weight, and
    those of a few held-out windows."""
    L = layer_in_view(ctx)
    if L is None:
        return
    E = ctx.cfg.n_expert
    e = st.selectbox("Expert", list(range(E)), key=f"{key}.expert", format_func=lambda i: f"expert {i}")
    w = np.asarray(ctx.trace()[act_name("expert_weights", L)])[ctx.b, : ctx.n_pos]
    rows = moe.top_routed(w, ctx.labels(), e, k)
    c1, c2 = st.columns(2)
    with c1:
        st.markdown(f"**Your text** (row {ctx.b}): the tokens that gave expert {e} the most weight")
        if rows:
            st.dataframe(pd.DataFrame(rows, columns=["position", "token", "weight"]), hide_index=True,
                         width="stretch", key=f"{key}.text",
                         column_config={"weight": st.column_config.ProgressColumn(
                             "weight", min_value=0.0, max_value=1.0, format="%.3f")})
        else:
            st.caption(f"No token of this row went to expert {e}.")
    got = _held_out(ctx)
    with c2:
        if got is None:
            st.caption("This model's tokenizer cannot read the held-out plays.")
            return
        weights, windows = got
        st.markdown(f"**Held-out plays** ({len(windows)} windows): the same, with the tokens before it")
        picks = moe.top_routed_windows(weights[L], windows, e, k)
        table = []
        for n, t, weight in picks:
            labels = token_labels(ctx.tok, windows[n, max(0, t - 4): t + 1].tolist())
            table.append((f"…{''.join(labels[:-1])}", labels[-1], weight))
        st.dataframe(pd.DataFrame(table, columns=["before", "token", "weight"]), hide_index=True,
                     width="stretch", key=f"{key}.plays",
                     column_config={"weight": st.column_config.ProgressColumn(
                         "weight", min_value=0.0, max_value=1.0, format="%.3f")})


def loss_without_experts_off(ctx) -> Optional[float]:
    """The loss of the text with the session's other edits but every expert on."""
    spec = dict(edit_specs.normalise(ctx.s.get("edits")))
    spec.pop("experts_off", None)
    on = dataclasses.replace(ctx, s={**ctx.s, "edits": spec}, _traces={})
    return on.trace().loss


@section("experts.switch_off")
def switch_off(ctx, *, key: str = "moe.off") -> None:
    """Switch experts of the layer in view off (an edit every page sees), with the loss before and after."""
    L = layer_in_view(ctx)
    if L is None:
        return
    experts_off_select(ctx, L, key=key)
    after = ctx.trace().loss
    if edit_specs.normalise(ctx.s.get("edits")).get("experts_off") and after is not None:
        before = loss_without_experts_off(ctx)
        c1, c2 = st.columns(2)
        c1.metric("Loss, every expert on", f"{before:.4f}")
        c2.metric("Loss with the experts off", f"{after:.4f}", delta=f"{after - before:+.4f}", delta_color="inverse")
    elif after is not None:
        st.metric("Loss on your text", f"{after:.4f}")
    clear_edits_button(ctx, key=key)


@section("experts.how")
def how(ctx, *, key: str = "moe.how") -> None:
    """The router in a formula and in gptviz's own source."""
    L = layer_in_view(ctx)
    if L is None:
        return
    cfg, tr = ctx.cfg, ctx.trace()
    renorm = (r"w_e = \frac{p_e}{\sum_{j \in S} p_j}" if cfg.expert_renorm else r"w_e = p_e")
    shared = r" + g\,\mathrm{shared}(x)" if cfg.d_shared_expert else ""
    st.latex(r"\begin{gathered} r = x\,W_r^{\top},\quad p = \mathrm{softmax}(r),\quad S = \mathrm{top}"
             + str(cfg.n_expert_active) + r"(p) \\ " + renorm
             + r"\ (e \in S),\quad y = \sum_{e \in S} w_e\,\mathrm{expert}_e(x)" + shared + r" \end{gathered}")
    st.markdown(f"The router is one linear map from a token's vector to {cfg.n_expert} logits. Their softmax "
                f"ranks the experts; the token goes to the top {cfg.n_expert_active}, weighted by their "
                + ("probabilities renormalised to sum to 1" if cfg.expert_renorm else "probabilities as they are")
                + (", plus a shared expert every token goes through" if cfg.d_shared_expert else "")
                + ". Only the chosen experts run, so the layer holds "
                f"{cfg.n_expert} MLPs' worth of weights but spends {cfg.n_expert_active} MLPs' worth of work.")
    steps = [act_name(s, L) for s in ("router_logits", "router_probs", "expert_weights")]
    st.code("\n".join(step_info(tr, n).code for n in steps), language="python")
    with st.expander("The whole mixture of experts, as it stands in gptviz/model/experts.py"):
        st.code(function_code(MixtureOfExperts.forward), language="python")


def title(ctx) -> str:
    """The page's title: the layer shown, and the model's experts in words."""
    L = layer_in_view(ctx)
    if L is None:
        return "Experts"
    c = ctx.cfg
    return (f"Experts · layer {L} · {c.n_expert} experts, top {c.n_expert_active}"
            + (" + a shared expert" if c.d_shared_expert else ""))


def model_line(ctx) -> str:
    """A caption naming the model (escaped: its name may come from a file)."""
    return f"Model: {plain_md(ctx.label)}"
