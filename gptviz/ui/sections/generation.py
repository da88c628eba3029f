"""The Generation page's sections: what the prompt attends to, how temperature, top-k and top-p reshape the
next-token distribution, and generating token by token (greedy or seeded sampling).

Every section takes the prompt and the sampling settings as options; those not given are widgets (drawn
once per ``key`` and run, and shared by the sections drawn with that key), so a lesson can pin them."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np
import streamlit as st
import torch

from ...model.hook_names import act_name
from ...present import figures, matrices, readouts
from ...present.descriptions import step_info
from ...present.markdown_text import plain_md
from ...present.page_context import BIG_MODEL_PARAMS, big_model_t, why_cut
from ...run.generation import distribution as run_distribution
from ...run.generation import generate as run_generate
from .. import resources
from ..widgets import plot
from . import section

SHOW = 12  # bars per chart


@dataclass
class Inputs:
    prompt: str
    ids: list
    temperature: float
    top_k: int
    top_p: float


def _inputs(ctx, key: str, prompt: Optional[str], temperature: Optional[float], top_k: Optional[int],
            top_p: Optional[float]) -> Optional[Inputs]:
    """The prompt and sampling settings: the options given, widgets for the others. None (after a warning)
    if the prompt has no tokens."""
    drawn = ctx.__dict__.setdefault("_gen_inputs", {})
    if key in drawn:
        return drawn[key]
    tok = ctx.tok
    if prompt is None:
        first = ctx.s["text"].splitlines()[0] if ctx.s["text"].strip() else "the"
        prompt = st.text_input("Prompt", value=first, key=f"{key}.prompt")
    if None in (temperature, top_k, top_p):
        c1, c2, c3 = st.columns(3)
        if temperature is None:
            temperature = c1.slider("Temperature", 0.0, 2.0, 1.0, 0.05, key=f"{key}.temp",
                                    help="Divides the logits: below 1 sharpens the distribution, above 1 flattens "
                                         "it, 0 is greedy.")
        if top_k is None:
            top_k = c2.number_input("Top-k (0 = off)", 0, tok.vocab_size, 0, key=f"{key}.topk",
                                    help="Keep only the k most likely tokens.")
        if top_p is None:
            top_p = c3.slider("Top-p (1 = off)", 0.05, 1.0, 1.0, 0.05, key=f"{key}.topp",
                              help="Keep the smallest set of most likely tokens whose probability adds up to p.")
    ids = tok.encode(prompt)
    out = None
    if not ids:
        st.warning("The prompt has no tokens this tokenizer knows: type something else.")
    else:
        cap = ctx.model.config.block_size
        if ctx.cfg.num_params() > BIG_MODEL_PARAMS and len(ids) > big_model_t(ctx.cfg):  # as every page reads it
            cap = big_model_t(ctx.cfg)
            st.caption(f"The prompt's last {cap} tokens are read. " + why_cut(ctx.cfg, cap))
        out = Inputs(prompt, ids[-cap:], float(temperature), int(top_k), float(top_p))
    drawn[key] = out
    return out


def _prompt_trace(ctx, ids: list):
    """The trace of one prompt (its last ``block_size`` tokens) on the model's own weights, from the app's trace cache:
    the same prompt on the next rerun, or in another section, is not traced again."""
    return resources.traced_prompt(ctx.cfg_json, ctx.model_key, ids[-ctx.model.config.block_size:])


def _generated(key: str, ids: list) -> Optional[dict]:
    g = st.session_state.get(f"gptviz.{key}")
    return g if g and g["ids"] == ids else None  # generated from another prompt: not this one's


# A row of the pattern, in pixels: one line of the 14-px tick font (1.2 × 14 = 16.8) and a little air. At 340 px,
# 18 rows had 10.5 px each and their query labels sat on one another (looked at in Chromium, 1280×720).
ROW_PX = 18


@section("generation.pattern")
def pattern(ctx, *, key: str = "gen", prompt: Optional[str] = None, temperature: Optional[float] = None,
            top_k: Optional[int] = None, top_p: Optional[float] = None) -> None:
    """What each token of the prompt (and of the generated text) looks at, for the chosen layer and head."""
    inp = _inputs(ctx, key, prompt, temperature, top_k, top_p)
    if inp is None:
        return
    vocab = ctx.vocab_labels()
    g = _generated(key, inp.ids)
    shown = (inp.ids + (g["tokens"] if g else []))[-ctx.model.config.block_size:]
    tr = _prompt_trace(ctx, shown)
    L, H = ctx.layer, ctx.head or 0
    name = act_name("pattern", L)
    m = matrices.step_matrix(tr[name], step_info(tr, name), [vocab[i] for i in shown], 0, H,
                             masked=matrices.masked_cells(tr, 0))
    height = max(340, min(720, ROW_PX * len(shown) + 150))  # every query label a line of its own, up to 31 rows
    plot(ctx, figures.heatmap(m, f"What each token looks at: layer {L} head {H}"
                              + (" (prompt + generated)" if len(shown) > len(inp.ids) else " (prompt)"), height=height),
         key=f"{key}.pattern")


@section("generation.distribution")
def distribution(ctx, *, key: str = "gen", prompt: Optional[str] = None, temperature: Optional[float] = None,
                 top_k: Optional[int] = None, top_p: Optional[float] = None, highlight: Optional[dict] = None) -> bool:
    """The next-token distribution after the prompt: softmax, ÷ temperature, top-k, top-p, and the result a
    token is drawn from. ``highlight`` {"token"} colours that token's bar; {"kept", "top_p"} states how many
    tokens top-p keeps (when this chart uses that top-p). Returns whether the highlight was drawn."""
    inp = _inputs(ctx, key, prompt, temperature, top_k, top_p)
    if inp is None:
        return False
    vocab = ctx.vocab_labels()
    # the distribution after the prompt is the last row of the prompt's own trace (which the pattern above read too:
    # one forward pass a prompt, cached, not one more here)
    logits = torch.from_numpy(np.array(_prompt_trace(ctx, inp.ids)[act_name("logits")][0, -1]))
    d = run_distribution(logits, inp.temperature, inp.top_k or None, inp.top_p)
    order = torch.argsort(d.raw, descending=True, stable=True)[:SHOW].tolist()
    labels = [vocab[i] for i in order]
    hl = highlight or {}
    mark = order.index(hl["token"]) if "token" in hl and hl["token"] in order else None
    final = [float(v) for v in d.final[order]]
    if mark is None and not hl and final and final[0] > 0:
        mark = 0
    st.subheader(f"What comes after “{plain_md(inp.prompt[-40:])}”?")
    plot(ctx, figures.bar_chart(labels, final, title="The distribution a token is drawn from", x_title="probability",
                                prob=True, highlight=mark), key=f"{key}.final")
    stages = [("softmax(logits)", d.raw), (f"÷ temperature {inp.temperature:g}", d.tempered),
              (f"top-k {inp.top_k or 'off'}", d.after_top_k), (f"top-p {inp.top_p:g}", d.final)]
    cols = st.columns(4)
    for c, (title, p) in zip(cols, stages):
        with c:
            plot(ctx, figures.bar_chart(labels, [float(v) for v in p[order]], title=title, prob=True),
                 key=f"{key}.{title}")
    kept = int(d.kept.sum())
    st.caption(f"{kept:,} of {ctx.tok.vocab_size:,} tokens can still be drawn. Bars show the {SHOW} most likely "
               "tokens before any reshaping; a bar at 0 has been cut.")
    drawn = "token" in hl and mark is not None
    if "kept" in hl and abs(hl.get("top_p", -1) - inp.top_p) < 1e-9 and \
            abs(hl.get("temperature", 1.0) - inp.temperature) < 1e-9 and int(hl.get("top_k", 0)) == inp.top_k:
        st.success(f"With these settings **{kept}** token(s) can still be drawn.")
        drawn = True
    return drawn


@section("generation.generate")
def generate(ctx, *, key: str = "gen", prompt: Optional[str] = None, temperature: Optional[float] = None,
             top_k: Optional[int] = None, top_p: Optional[float] = None, mode: Optional[str] = None,
             tokens: Optional[int] = None) -> None:
    """Generate token by token, greedy or sampled with a seed, then look at any step's distribution."""
    inp = _inputs(ctx, key, prompt, temperature, top_k, top_p)
    if inp is None:
        return
    tok, vocab = ctx.tok, ctx.vocab_labels()
    c1, c2, c3 = st.columns(3)
    if mode is None:
        mode = c1.radio("Choice", ["greedy", "sampled"], horizontal=True, key=f"{key}.mode")
    else:
        c1.markdown(f"**Choice:** {plain_md(mode)}")
    n = c2.slider("Tokens", 1, 50, 12, key=f"{key}.n") if tokens is None else int(tokens)
    seed = c3.number_input("Seed", 0, 2**31 - 1, 0, key=f"{key}.seed")
    state = f"gptviz.{key}"
    if st.button("Generate", type="primary", key=f"{key}.go"):
        steps = run_generate(ctx.model, inp.ids, int(n), inp.temperature, inp.top_k or None, inp.top_p,
                             greedy=mode == "greedy", seed=int(seed))
        st.session_state[state] = {"prompt": inp.prompt, "ids": inp.ids, "tokens": [s_.token for s_ in steps],
                                   "dists": [s_.dist.final.numpy() for s_ in steps], "mode": mode}
    g = _generated(key, inp.ids)
    if not g:
        return
    toks = g["tokens"]
    st.markdown(figures.token_chips_html([vocab[i] for i in g["ids"]] + [vocab[i] for i in toks], g["ids"] + toks,
                                         pad_from=None), unsafe_allow_html=True)
    st.markdown(f"**Text:** {plain_md(repr(tok.decode(g['ids'] + toks)))}")
    k = (st.slider("Step", 1, len(toks), 1, key=f"{key}.step") if len(toks) > 1 else 1) - 1
    p = np.asarray(g["dists"][k])
    chosen = int(toks[k])
    top = readouts.top_with(p, chosen, SHOW)
    lab = [vocab[i] for i in top]
    plot(ctx, figures.bar_chart(lab, p[top].tolist(), title=f"Step {k + 1}: drew “{vocab[chosen]}” (red)", prob=True,
                                highlight=int(np.where(top == chosen)[0][0])), key=f"{key}.stepchart")
