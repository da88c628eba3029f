"""The Neurons page's section: choose one MLP neuron, see what makes it fire over the held-out plays (top snippets,
histogram), what it does on the user's text, and which tokens it pushes up and down."""
from __future__ import annotations

import re
import weakref
from typing import Optional

import numpy as np
import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from ...interp import neuron_jobs, neuron_store
from ...interp.neurons import NeuronStats, logit_effect, most_active, why_no_neurons
from ...model.hook_names import act_name
from ...present import figures, source_code
from .. import resources
from ..widgets import plot
from . import section

KEY_PREFIX = "ckpt-"  # how a shipped checkpoint is registered (resources.shipped_checkpoint)

SENTENCE = (
    "A **neuron** is one of the MLP's `d_mlp` hidden numbers: at every position it reads the (normalised) residual "
    "stream through its own input row, passes it through the activation (for a gated MLP, times a second, linear "
    "reading), and then adds *activation × its output row* W_out[:, n] back into the stream. The snippets show "
    "where it fires most over the held-out plays; the bars at the end read its output row straight through the "
    "final norm and the unembedding: the tokens it pushes up or down *directly*, before any later layer reads "
    "what it wrote.")


def formulas(cfg) -> list[str]:
    """The neuron's two equations (LaTeX): what it computes, and what one unit of it writes to a logit directly."""
    read = (r"a_n(t) = \mathrm{act}\big(\tilde x_t W_{\mathrm{gate}}[:, n]\big)\,\big(\tilde x_t W_{\mathrm{in}}"
            r"[:, n]\big)" if cfg.gated_mlp else r"a_n(t) = \mathrm{act}\big(\tilde x_t W_{\mathrm{in}}[:, n] + "
            r"b_{\mathrm{in}}[n]\big)")
    if cfg.norm_placement != "pre":
        write = r"\Delta\mathrm{logit}_v = a_n(t)\; W_{\mathrm{out}}[:, n] \cdot W_U[v]\quad(\text{no final norm})"
    elif cfg.norm == "layernorm":
        write = (r"\Delta\mathrm{logit}_v = \frac{a_n(t)}{\sigma_t}\,\Big(\gamma_f \odot \big(W_{\mathrm{out}}"
                 r"[:, n] - \overline{W_{\mathrm{out}}[:, n]}\big)\Big)\cdot W_U[v]")
    else:
        write = (r"\Delta\mathrm{logit}_v = \frac{a_n(t)}{\sigma_t}\,\big(\gamma_f \odot W_{\mathrm{out}}[:, n]\big)"
                 r"\cdot W_U[v]")
    return [read, write]


def _shipped_name(ctx) -> Optional[str]:
    key = ctx.model_key or ""
    return key[len(KEY_PREFIX):] if key.startswith(KEY_PREFIX) and not ctx.untrained else None


@st.cache_resource(max_entries=8, show_spinner=False)
def _shipped_stats(name: str, cfg_json: str, model_key: str) -> tuple[Optional[NeuronStats], str]:
    """(the shipped summary of checkpoint ``name`` if it matches the loaded weights, else None; why not). Shared
    by every session and never changed (its arrays are read-only)."""
    try:
        return neuron_store.shipped(name, resources.get_model(cfg_json, model_key)), ""
    except (OSError, ValueError) as exc:
        return None, str(exc)


def _job_key(ctx) -> tuple:
    s = ctx.s
    if ctx.model_key:
        return ctx.cfg_json, ctx.model_key
    return ctx.cfg_json, None, s.get("tokenizer"), s.get("merges"), s.get("lowercase")


def _progress(job, box) -> None:
    """Poll the background job every second (a fragment: the rest of the page is not rerun), then rerun the page."""
    @st.fragment(run_every=1.0)
    def poll() -> None:
        if job.finished:
            st.rerun()
        if job.state == "waiting":
            st.info(f"Waiting for the big-computation slot ({job.ahead} ahead): this server reads one big model at "
                    "a time. It starts by itself; the rest of the page works meanwhile.",
                    icon=":material/hourglass_top:")
        st.progress(job.progress, text=f"Reading the held-out plays through every neuron… {job.progress:.0%} "
                                       "(computed once for this model, shared by everyone)")
    with box:
        poll()


def summary(ctx, key: str) -> tuple[Optional[NeuronStats], str]:
    """The neuron summary of the model shown, and where it comes from; draws a progress bar while it is being
    computed (and returns None then)."""
    name = _shipped_name(ctx)
    if name:
        stats, why = _shipped_stats(name, ctx.cfg_json, ctx.model_key)
        if stats is not None:
            return stats, (f"precomputed by `{stats.meta.get('command', 'python -m gptviz.neurons')}` over "
                           f"{stats.n_tokens:,} tokens of the held-out plays")
        if why:
            st.caption(f"The shipped summary could not be read ({why}); computing it here instead.")
    jk = _job_key(ctx)
    run_ctx = get_script_run_ctx(suppress_warning=True)
    try:  # a weak reference: the job holds no model while it waits (the registry or the session keeps it alive)
        job = neuron_jobs.job_for(jk, weakref.ref(ctx.model), ctx.tok, params=ctx.cfg.num_params(),
                                  owner=run_ctx.session_id if run_ctx is not None else None)
    except neuron_jobs.QueueFull as e:
        st.info(f"The neurons' summary over the held-out plays waits: {e}.", icon=":material/hourglass_top:")
        return None, ""
    if job.state in ("failed", "cancelled"):
        st.warning(f"The neurons could not be read over the held-out plays: {job.error}")
        if st.button("Try again", key=f"{key}.retry"):
            neuron_jobs.forget(jk)
            st.rerun()
        return None, ""
    if not job.finished:
        _progress(job, st.container())
        return None, ""
    st_ = job.result
    return st_, (f"computed on this server over {st_.n_tokens:,} tokens of the held-out plays "
                 f"({st_.meta.get('seconds', 0):.1f} s, once for this model)")


# The callbacks get the settings (ctx.s), not ctx: the session keeps a widget's args, and ctx holds this run's traces.
def _set_layer(s: dict, key: str) -> None:
    s["layer"] = int(st.session_state[f"{key}.layer"])


def _pick_ranked(s: dict, key: str) -> None:
    choice = st.session_state.get(f"{key}.ranked")
    if choice:
        layer, n = (int(v) for v in choice.split(":")[:2])
        s["layer"] = layer
        st.session_state[f"{key}.layer"] = layer
        st.session_state[f"{key}.n"] = n
    st.session_state[f"{key}.ranked"] = None


def choose(ctx, key: str) -> tuple[int, int, int]:
    """The layer and neuron selectors and the ranked list of the neurons most active at a position of the
    user's text: returns (layer, neuron, position)."""
    cfg, labels, T = ctx.cfg, ctx.labels(), ctx.n_pos
    c1, c2, c3 = st.columns([1, 1, 2])
    pos = c3.selectbox("Position in your text", list(range(T)), index=T - 1, key=f"{key}.pos.{T}",
                       format_func=lambda i: f"{i}: {labels[i]}")
    ranked = most_active(ctx.trace(), ctx.b, int(pos), k=12)
    if f"{key}.n" not in st.session_state:  # first visit: the layer's most active neuron at that position
        mine = [r for r in ranked if r[0] == ctx.layer] or most_active_in(ctx, ctx.layer, int(pos))
        st.session_state[f"{key}.n"] = mine[0][1]
    st.session_state[f"{key}.layer"] = ctx.layer
    layer = c1.selectbox("Layer", list(range(cfg.n_layer)), key=f"{key}.layer", on_change=_set_layer,
                         args=(ctx.s, key))
    st.session_state[f"{key}.n"] = min(max(0, int(st.session_state[f"{key}.n"])), cfg.d_mlp - 1)
    n = c2.number_input(f"Neuron (0–{cfg.d_mlp - 1})", min_value=0, max_value=cfg.d_mlp - 1, step=1,
                        key=f"{key}.n")
    opts = [f"{lay}:{nn}:{v:+.3f}" for lay, nn, v in ranked]
    c3.selectbox(f"Most active neurons at position {pos} (every layer)", opts, index=None, key=f"{key}.ranked",
                 placeholder="pick one to show it…", on_change=_pick_ranked, args=(ctx.s, key),
                 format_func=lambda o: "L{} N{}  (activation {})".format(*o.split(":")))
    return int(layer), int(n), int(pos)


def most_active_in(ctx, layer: int, pos: int) -> list[tuple[int, int, float]]:
    a = np.asarray(ctx.trace()[act_name("post", layer)])[ctx.b, pos]
    n = int(np.argmax(a))
    return [(layer, n, float(a[n]))]


def _snippet_rows(ctx, stats: NeuronStats, layer: int, n: int, limit: int) -> list[dict]:
    rows = []
    for s in stats.snippets(layer, n)[:limit]:
        toks = [ctx.id_label(i) for i in s["ids"]]
        rows.append({"tokens": toks, "at": s["at"], "value": s["value"],
                     "where": f"window {s['window']}, token {s['pos']}"})
    return rows


@section("neurons.browser")
def browser(ctx, *, key: str = "neurons", snippets: int = 12) -> None:
    """One MLP neuron: top-activating snippets over the held-out plays, its activation histogram, its activation
    over the user's text, and the tokens it promotes and suppresses directly (W_out · W_U)."""
    reason = why_no_neurons(ctx.cfg)
    if reason:
        st.info(reason, icon=":material/info:")
        return
    layer, n, pos = choose(ctx, key)
    tr, labels = ctx.trace(), ctx.labels()
    on_text = np.asarray(tr[act_name("post", layer)])[ctx.b, : ctx.n_pos, n]
    scale = figures.PALETTES.get(str(ctx.s.get("palette", "default")), figures.PALETTES["default"])["signed"]
    task = str((ctx.entry.meta.get("task") if ctx.entry is not None else "") or "")
    task = re.sub(r"[^A-Za-z0-9 _.-]", "", task)[:40]  # a checkpoint's own words: shown as plain text only

    st.subheader(f"L{layer} N{n} · where it fires most in the held-out plays")
    if task and not task.startswith("shakespeare"):
        st.caption(f"This model was trained on the {task!r} task, not on the plays: it reads them through its own "
                   "tokenizer, which leaves out every character it does not know.")
    stats, source = summary(ctx, key)
    if stats is not None and (stats.n_layer != ctx.cfg.n_layer or stats.d_mlp != ctx.cfg.d_mlp):
        stats = None
        st.warning("The neuron summary does not fit this model's shape; it is not shown.")
    if stats is not None:
        left, right = st.columns([3, 2])
        with left:
            st.html(figures.snippets_html(_snippet_rows(ctx, stats, layer, n, snippets)))
            st.caption(f"The {min(snippets, stats.top_val.shape[-1])} largest activations, {source}. The framed "
                       "token is where the neuron fired; before it, what the model saw in that window; after it, a "
                       "few tokens it had not seen yet.")
        with right:
            plot(ctx, figures.activation_histogram(
                stats.edges(layer, n), stats.hist[layer, n], title=f"L{layer} N{n} over {stats.n_tokens:,} tokens",
                marker=float(on_text[pos]), marker_label=f"your position {pos}"), key=f"{key}.hist")

    st.subheader("On your text")
    plot(ctx, figures.activation_over_text(labels, on_text.tolist(), title=f"L{layer} N{n} at each position of "
                                           "your text", highlight=pos, scale=scale), key=f"{key}.text")
    if ctx.edit_notice or ctx.s.get("edits"):
        st.caption("Your text is read with your edits, if any; the held-out summary always uses the model's own "
                   "weights.")

    st.subheader("What it writes: the tokens it pushes up and down")
    try:
        effect = logit_effect(ctx.model, layer, n)
    except ValueError as exc:
        st.warning(str(exc))
        return
    vocab = ctx.vocab_labels()
    k = min(10, effect.size)
    up, down = np.argsort(-effect, kind="stable")[:k], np.argsort(effect, kind="stable")[:k]
    a, b = st.columns(2)
    with a:
        plot(ctx, figures.logit_effect_chart([vocab[i] for i in up], effect[up].tolist(), title="Promoted",
                                             scale=scale), key=f"{key}.up")
    with b:
        plot(ctx, figures.logit_effect_chart([vocab[i] for i in down], effect[down].tolist(), title="Suppressed",
                                             scale=scale), key=f"{key}.down")
    norm = ("through the final norm's weight γ (centred, as LayerNorm centres), as on *Who did it?*"
            if ctx.cfg.norm_placement == "pre" else "straight into the unembedding (a post-norm model has no final "
            "norm, and every later block renormalises: a rougher reading)")
    if ctx.cfg.sublayer_norms != "before":  # Gemma 2 and 3, OLMo 2: the MLP's output is normalised before the add
        norm += (" — a rougher reading here: the MLP's output first goes through its own norm (ln2_post), which "
                 "rescales every neuron's write together")
    st.caption(f"Logit change per unit of activation, W_out[:, {n}] read {norm}. At a real position it is also "
               "divided by the final norm's scale σ there, a positive number that changes no ranking.")
    st.markdown(SENTENCE)
    for tex in formulas(ctx.cfg):
        st.latex(tex)
    st.code(source_code.function_code(logit_effect), language="python")  # as it runs, from the source

