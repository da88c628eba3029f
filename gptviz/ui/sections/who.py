"""The "Who did it" page's sections: the logit lens, direct logit attribution, and two-prompt patching.

Each is ``f(ctx, *, key)``. The numbers come from ``gptviz.interp.lens`` and ``gptviz.interp.patching``; anything that
costs more than a few milliseconds is cached per model, text and choice, so the page reruns quickly.
"""
from __future__ import annotations

import json
import zlib
from typing import Optional

import numpy as np
import streamlit as st

from ...interp import lens, patching
from ...model.hook_names import act_name
from ...present.figures import lens as figs
from ...run import edits as edit_specs
from .. import resources
from ..widgets import plot
from . import section

BIG_PARAMS = resources.BIG_MODEL_PARAMS


# --------------------------------------------------------------------------- cached computations
def _tup(t) -> tuple:
    return tuple(map(tuple, t.tolist()))


def trace_key(ctx) -> tuple:
    """Everything the page's trace depends on (call after ``ctx.trace()``, which may drop bad edits)."""
    b = ctx.batch
    spec = None if ctx.edit_notice else (ctx.s.get("edits") or edit_specs.EMPTY)
    return (ctx.cfg_json, ctx.model_key, _tup(b.x), _tup(b.y), _tup(b.attention_mask), edit_specs.spec_key(spec))


@st.cache_data(max_entries=64, show_spinner=False)
def _lens_summary(key: tuple, b: int, k: int, start: int, stop: int, _tr, _model) -> lens.LensSummary:
    return lens.lens_summary(_tr, _model, b, k, start=start, stop=stop)


@st.cache_data(max_entries=64, show_spinner=False)
def _decompose(key: tuple, tokens, b: int, pos: int, _tr, _model):
    """Direct logit attribution at row b, position pos: (labels, contributions (n,), bias)."""
    labels, c, bias = lens.decompose(_tr, _model, tokens, at=(b, pos))
    return labels, np.asarray(c)[:, 0, 0], float(np.asarray(bias)[0, 0])


@st.cache_data(max_entries=32, show_spinner=False)
def _patch(cfg_json: str, model_key: Optional[str], clean: tuple, corrupt: tuple, answer: int, wrong: int):
    model = resources.get_model(cfg_json, model_key)
    return patching.activation_patching(model, [list(clean)], [list(corrupt)], answer, wrong)


def _prompt_logits(ctx, ids: list[int]) -> np.ndarray:
    return np.asarray(resources.traced_prompt(ctx.cfg_json, ctx.model_key, ids)[act_name("logits")])


# --------------------------------------------------------------------------- small helpers
def _default_pos(ctx) -> int:
    """The last position of the shown row that has a true next token (else the last position)."""
    y = np.asarray(ctx.batch.y)[ctx.b, : ctx.n_pos]
    has = np.nonzero(y >= 0)[0]
    return int(has[-1]) if has.size else ctx.n_pos - 1


def _pos_picker(ctx, label: str, key: str, lo: int = 0, hi: Optional[int] = None) -> int:
    """A position in lo..hi-1 (default: every position), labelled with its token."""
    labels = ctx.labels()
    hi = ctx.n_pos if hi is None else hi
    opts = list(range(lo, hi))
    return st.selectbox(label, opts, index=min(max(_default_pos(ctx), lo), hi - 1) - lo, key=f"{key}.{ctx.n_pos}.{lo}",
                        format_func=lambda t: f"{t}: '{labels[t]}'")


def _lens_positions(ctx, key: str) -> tuple[int, int]:
    """(start, stop) of the positions the lens decodes: all of them, or for a long text on a big model the window
    the reader slides to (``lens.lens_window``), the last one first."""
    T = ctx.n_pos
    W = lens.lens_window(ctx.cfg, T)
    if W >= T:
        return 0, T
    starts = lens.lens_window_starts(T, W)
    start = st.select_slider("Positions", starts, value=starts[-1], key=f"{key}.win.{T}.{W}",
                             format_func=lambda a: f"{a}–{a + W - 1}")
    st.caption(f"The lens reads this text {W} positions at a time: each position is decoded after every layer "
               f"through all {ctx.cfg.vocab_size:,} tokens of the vocabulary, and {T} positions of a model this "
               "size would keep you waiting. Slide to read another window.")
    return int(start), int(start) + W


def _quote(s: str) -> str:
    return f"'{s}'"


def _token_from_text(ctx, text: str) -> tuple[Optional[int], str]:
    """(token id, "") for text that is one token (typed as shown in the app, or as plain text), else
    (None, what to change)."""
    text = text or ""
    if not text:
        return None, "Type a token to attribute."
    vocab = ctx.vocab_labels()
    if text in vocab:
        return vocab.index(text), ""
    try:
        ids = ctx.tok.encode(text)
    except Exception as exc:  # noqa: BLE001 - a tokenizer's refusal becomes a message
        return None, f"{text!r} could not be tokenized ({exc}): type another token."
    if len(ids) != 1:
        shown = " · ".join(_quote(ctx.id_label(i)) for i in ids) or "nothing"
        return None, (f"{text!r} is {len(ids)} tokens here ({shown}), not one: type a single token, e.g. "
                      f"{_quote(vocab[ids[0]]) if ids else _quote(vocab[0])}.")
    return int(ids[0]), ""


# --------------------------------------------------------------------------- the logit lens
@section("who.lens")
def logit_lens(ctx, *, key: str = "lens", k: int = 5) -> None:
    """Layer × position heatmap of p(true next token) read through the final norm and unembedding after
    every layer, and one position's top-k tokens through the layers."""
    tr, model, b, T = ctx.trace(), ctx.model, ctx.b, ctx.n_pos
    chart = st.container()  # the heatmap first, the window's slider (if any) under it
    start, stop = _lens_positions(ctx, key)
    with st.spinner("Reading every layer through the unembedding…"):
        s = _lens_summary(trace_key(ctx), b, k, start, stop, tr, model)
    vocab = ctx.vocab_labels()
    labels = ctx.labels()
    y = np.asarray(tr.targets)[b, :T]
    targets = [vocab[t] if t >= 0 else "" for t in y]
    top1 = [[vocab[i] for i in row] for row in s.top_ids[:, :, 0]]
    fig = figs.lens_heatmap(s.target_prob, s.labels, labels[start:stop], targets[start:stop], top1,
                            s.top_probs[:, :, 0], "Logit lens: p(true next token) if the model stopped here"
                            + (f" · positions {start}–{stop - 1} of {T}" if stop - start < T else ""),
                            show_values=ctx.s.get("show_values", False), first_pos=start)
    with chart:
        plot(ctx, fig, key=f"{key}.heat")
    pre = ctx.cfg.norm_placement == "pre"
    st.markdown(
        "Each row reads the residual stream at one depth as if it were the last: "
        + ("through the final norm (with that row's own mean and scale) and the unembedding. " if pre else
           "straight through the unembedding (a post-norm model has no final norm; every block already ends "
           "in one). ")
        + "The last row is the model's real prediction; where a colour appears early, the early layers already "
          "knew. Hover a cell for the lens's favourite token there.")
    st.latex(r"\mathrm{logits}^{(\ell)} = " + (r"\mathrm{LN}_f\!\big(x^{(\ell)}\big)" if pre else r"x^{(\ell)}")
             + r"\,W_U,\qquad p^{(\ell)} = \mathrm{softmax}\big(\mathrm{logits}^{(\ell)}\big)[y_{t}]")
    st.code("logits_l = model.lm_head(model.transformer.ln_f(tr[act_name('resid_pre', l)]))"
            if pre else "logits_l = model.lm_head(tr[act_name('resid_pre', l)])", language="python")

    pos = _pos_picker(ctx, "Position for the top tokens", f"{key}.pos", start, stop)
    tops = [[vocab[i] for i in row] for row in s.top_ids[:, pos - start]]
    nxt = targets[pos] or None
    title = f"Top {s.top_ids.shape[-1]} after '{labels[pos]}' (position {pos}), layer by layer" + (
        f" · ★ = true next '{nxt}'" if nxt else "")
    plot(ctx, figs.lens_topk(s.labels, tops, s.top_probs[:, pos - start], title, highlight=nxt), key=f"{key}.top")


# --------------------------------------------------------------------------- direct logit attribution
def _open_head(s: dict, layer: int, head: int) -> None:
    s["layer"], s["head"] = int(layer), int(head)


@section("who.dla")
def direct_logit_attribution(ctx, *, key: str = "dla") -> None:
    """One token's logit at one position split into what each head, MLP and embedding wrote."""
    tr, model, cfg, b = ctx.trace(), ctx.model, ctx.cfg, ctx.b
    if cfg.norm_placement != "pre":
        st.info("Direct logit attribution needs a pre-norm model: in this post-norm model every block renormalises "
                "the stream, so the logit is not a sum of what each part wrote. Choose *pre* under Architecture → "
                "Norm placement to see it.")
        return
    vocab, labels = ctx.vocab_labels(), ctx.labels()
    c1, c2, c3 = st.columns([2, 2, 2])
    with c1:
        pos = _pos_picker(ctx, "Position", f"{key}.pos")
    with c2:
        mode = st.radio("Token", ["the true next token", "a token I type"], key=f"{key}.mode", horizontal=True)
    y = np.asarray(tr.targets)[b]
    if mode == "the true next token":
        if y[pos] < 0:
            st.warning(f"Position {pos} ({_quote(labels[pos])}) has no true next token (it is the last one, or "
                       "padding): pick an earlier position, or choose *a token I type*.")
            return
        tok_id, tokens = int(y[pos]), "target"
    else:
        with c3:
            text = st.text_input("Token", value=vocab[int(y[pos])] if y[pos] >= 0 else vocab[0], key=f"{key}.tok",
                                 help="A token as the app shows it (e.g. 'the␣'), or plain text that is one token.")
        tok_id, why = _token_from_text(ctx, text)
        if tok_id is None:
            st.warning(why)
            return
        tokens = tok_id
    try:
        comp_labels, contrib, bias_v = _decompose(trace_key(ctx), tokens, b, pos, tr, model)
    except ValueError as exc:
        st.warning(f"Direct logit attribution could not be computed: {exc}")
        return
    values = contrib.astype(float)
    bar_labels, bar_values = list(comp_labels), list(values)
    if bias_v != 0.0:
        bar_labels.append("final norm shift β")
        bar_values.append(bias_v)
    name = vocab[tok_id]
    logit = float(np.asarray(tr[act_name("logits")])[b, pos, tok_id])
    plot(ctx, figs.dla_bars(bar_labels, bar_values, f"Who pushes the logit of '{name}' after '{labels[pos]}' "
                                                    f"(position {pos})"), key=f"{key}.bars")
    m1, m2, m3 = st.columns(3)
    m1.metric(f"logit of '{name}'", f"{logit:.4f}", help=f"From the model's own forward pass ({act_name('logits')}).")
    m2.metric("sum of the bars", f"{float(np.sum(bar_values)):.4f}",
              help="Every component's contribution plus the final norm's shift: the same number, up to rounding.")
    m3.metric("largest single push", f"{bar_labels[int(np.argmax(np.abs(bar_values)))]}")
    st.markdown(lens.describe_top(comp_labels, values, name))
    if lens.REST_LABEL in comp_labels:
        st.caption("Your edits changed the residual stream itself, so part of it was written by no component: "
                   f"that part is the bar *{lens.REST_LABEL}*.")
    st.latex(r"\mathrm{logit}_y = \sum_{c} \frac{\gamma \odot (c - \bar c)}{\sigma}\cdot W_U[y] \;+\; "
             r"\beta\cdot W_U[y],\quad c \in \{\text{tok}, \text{pos}, \text{heads}, \text{MLPs}\}"
             if cfg.norm == "layernorm" else
             r"\mathrm{logit}_y = \sum_{c} \frac{\gamma \odot c}{\mathrm{rms}}\cdot W_U[y]"
             + (r" + \beta\cdot W_U[y]" if cfg.bias else "")
             + r",\quad c \in \{\text{tok}, \text{pos}, \text{heads}, \text{MLPs}\}")
    st.code("head_out = z[:, :, h] @ attn.c_proj.weight[:, h*hs:(h+1)*hs].T   # what head h wrote\n"
            "contribution = ((head_out - head_out.mean(-1, keepdim=True)) / tr[act_name('scale', part='ln_final')]"
            " * ln_f.weight) @ W_U[y]", language="python")
    st.caption("σ is the final norm's divisor from the real forward pass, frozen: with it fixed, the norm is linear, "
               "so the logit splits exactly into one term per component.")

    grid = lens.head_grid(contrib, cfg).astype(float)  # (L, H)
    plot(ctx, figs.layer_head_heatmap(grid, f"Each head's direct contribution to '{name}'", "logit"),
         key=f"{key}.heads")
    order = sorted(((l, h) for l in range(cfg.n_layer) for h in range(cfg.n_head)), key=lambda lh: -abs(grid[lh]))
    h1, h2 = st.columns([2, 1])
    lh = h1.selectbox("Look at a head", order, key=f"{key}.head.{pos}.{tok_id}",
                      format_func=lambda lh: f"L{lh[0]} H{lh[1]}: {grid[lh]:+.3f}")
    h2.write("")
    if h2.button(f"Open L{lh[0]} H{lh[1]} on the Attention page", key=f"{key}.open"):
        _open_head(ctx.s, *lh)
        try:
            st.switch_page("app_pages/attention.py")
        except Exception:  # noqa: BLE001 - outside the multipage app (a lone script, a test)
            st.success(f"Layer {lh[0]}, head {lh[1]} is now the selected head: open the Attention page to see it.")


# --------------------------------------------------------------------------- two prompts: activation patching
def _token_list(ctx, ids: list[int]) -> str:
    return " · ".join(_quote(ctx.id_label(i)) for i in ids)


@section("who.compare")
def compare_prompts(ctx, *, key: str = "cmp") -> None:
    """Patch the clean prompt's activations into the corrupted run, one at a time: residual stream × position,
    every head, every MLP."""
    cfg, tok = ctx.cfg, ctx.tok
    if getattr(cfg, "n_enc_layer", -1) > 0:
        st.info("Two-prompt patching runs decoder prompts only, and this encoder-decoder model also reads a source "
                "sequence: choose a decoder-only model (a GPT preset) to compare two prompts.")
        return
    task = (ctx.entry.meta.get("task") if ctx.entry is not None else "") or ""
    clean_default, corrupt_default = patching.default_pair(tok, task, cfg.block_size)
    # fresh text boxes for another model or tokenizer: their prompts would not fit it
    tag = f"{task}.{ctx.model_key or ''}.{ctx.s.get('tokenizer')}.{ctx.s.get('merges')}.{ctx.s.get('lowercase')}"
    c1, c2 = st.columns(2)
    clean = c1.text_input("Clean prompt", clean_default, key=f"{key}.clean.{tag}")
    corrupt = c2.text_input("Corrupted prompt (change what the answer depends on)", corrupt_default,
                            key=f"{key}.corrupt.{tag}")
    try:
        ids_c, ids_k = tok.encode(clean), tok.encode(corrupt)
    except Exception as exc:  # noqa: BLE001 - a tokenizer's refusal becomes a message
        st.error(f"The prompts could not be tokenized ({exc}): change them.")
        return
    if not ids_c or not ids_k:
        which = "clean" if not ids_c else "corrupted"
        st.warning(f"The {which} prompt has no tokens this tokenizer knows: type some text.")
        return
    if len(ids_c) != len(ids_k):
        st.warning(f"The two prompts tokenize to different lengths ({len(ids_c)} and {len(ids_k)} tokens). Patching "
                   "swaps activations position by position, so they must match: change a word so both have the "
                   "same number of tokens.")
        st.markdown(f"**Clean** ({len(ids_c)}): {_token_list(ctx, ids_c)}  \n"
                    f"**Corrupted** ({len(ids_k)}): {_token_list(ctx, ids_k)}")
        return
    if len(ids_c) > cfg.block_size:
        st.warning(f"The prompts are {len(ids_c)} tokens long, more than this model's context "
                   f"(block_size={cfg.block_size}): shorten them.")
        return
    st.caption(f"{len(ids_c)} tokens each. Clean: {_token_list(ctx, ids_c)}  ·  Corrupted: {_token_list(ctx, ids_k)}")
    if ids_c == ids_k:
        st.warning("The two prompts are the same tokens: change a word in the corrupted one.")
        return

    opts = patching.answer_options(_prompt_logits(ctx, ids_c), _prompt_logits(ctx, ids_k))
    vocab = ctx.vocab_labels()

    def fmt(i: int) -> str:
        return f"'{vocab[i]}'  (clean p={opts.p_clean[i]:.2f}, corrupted p={opts.p_corrupt[i]:.2f})"

    sig = zlib.crc32(json.dumps([ids_c, ids_k]).encode())
    a1, a2 = st.columns(2)
    answer = a1.selectbox("Answer (what the clean prompt should predict)", opts.ids, index=opts.ids.index(opts.answer),
                          format_func=fmt, key=f"{key}.ans.{sig}")
    wrong = a2.selectbox("Wrong token (what the corrupted prompt predicts)", opts.ids,
                         index=opts.ids.index(opts.wrong), format_func=fmt, key=f"{key}.wrong.{sig}")
    if answer == wrong:
        st.warning("The answer and the wrong token are the same token, so their difference is always 0: choose two "
                   "different tokens.")
        return
    n = patching.n_forward_needed(cfg, len(ids_c))
    args = (ctx.cfg_json, ctx.model_key, tuple(ids_c), tuple(ids_k), int(answer), int(wrong))
    run_key = f"{key}.run.{zlib.crc32(json.dumps(args).encode())}"
    if cfg.num_params() > BIG_PARAMS and not st.session_state.get(run_key):
        st.info(f"Patching this model takes {n} forward passes of a {cfg.num_params() / 1e6:.0f}M-parameter model.")
        if not st.button(f"Run patching ({n} forward passes)", key=f"{key}.go"):
            return
        st.session_state[run_key] = True
    try:
        with st.spinner(f"Patching: {n} forward passes…"):
            r = _patch(*args)
    except ValueError as exc:
        st.warning(f"Patching could not be scored: {exc}.")
        return

    m1, m2, m3 = st.columns(3)
    m1.metric("clean logit difference", f"{r.clean_diff:+.4f}")
    m2.metric("corrupted logit difference", f"{r.corrupt_diff:+.4f}")
    m3.metric("forward passes", f"{r.n_forward}")
    gap = abs(r.clean_diff - r.corrupt_diff)
    if gap < 0.1:
        st.info(f"The two prompts give almost the same logit difference (they differ by {gap:.3g}): this model hardly "
                "tells them apart, so every score below divides by a small number and may look large. A trained model "
                "(a *checkpoint* preset) shows clearer patterns.")
    st.caption(f"Patching took {r.n_forward} forward passes: the clean and corrupted runs, then one run of the "
               "corrupted prompt per patched activation. They are cached, so changing anything else does not "
               "run them again. Your edits from other pages are not applied here.")
    toks = [ctx.id_label(i) if i == j else f"{ctx.id_label(j)}→{ctx.id_label(i)}" for i, j in zip(ids_k, ids_c)]
    plot(ctx, figs.patch_resid_heatmap(r.resid, r.resid_labels, toks,
                                       "Patch the residual stream at one position (1 = as clean, 0 = as corrupted)",
                                       show_values=True), key=f"{key}.resid")
    plot(ctx, figs.layer_head_heatmap(r.heads, "Patch one head's output at every position", "score", at_least=1.0),
         key=f"{key}.heads")
    if r.mlp.size:
        plot(ctx, figs.mlp_bars(r.mlp, "Patch one MLP's output at every position"), key=f"{key}.mlp")
    st.markdown("Each cell reruns the corrupted prompt with one activation copied from the clean run. A score near 1 "
                "means that activation alone carries what makes the clean prompt's answer win; near 0, it does not "
                "matter here. Scores can go below 0 or above 1.")
    st.latex(r"\mathrm{score} = \frac{\Delta_{\text{patched}} - \Delta_{\text{corrupt}}}"
             r"{\Delta_{\text{clean}} - \Delta_{\text{corrupt}}},\qquad"
             r"\Delta = \mathrm{logit}[\text{answer}] - \mathrm{logit}[\text{wrong}]\ \text{at the last position}")
    st.code("tr = trace(model, x_corrupt, edits={act_name('resid_pre', l): "
            "put_at(t, clean[act_name('resid_pre', l)])})",
            language="python")
