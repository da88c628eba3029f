"""The Generation page's branching section: pick a generated token, force another one there, and see the two
continuations side by side with every token's probability and the step where they part.

It shares the prompt and the sampling settings of the Generation sections drawn with the same ``key`` (and their
choice, token count and seed, when those widgets are on the page); greedy by default."""
from __future__ import annotations

from dataclasses import asdict
from typing import Optional

import streamlit as st

from ...perf import BIG_MODEL_PARAMS
from ...present import figures, source_code
from ...present.markdown_text import plain_md
from ...run.branching import MAX_NEW, Path, branch, continuation, parting_point
from ...run.slots import BIG_LOAD
from .. import resources
from ..waiting import queued
from ..widgets import plot
from . import section
from .generation import _inputs

DEFAULT_TOKENS = 12


@st.cache_data(max_entries=64, show_spinner=False)
def _continuation(cfg_json: str, model_key: Optional[str], ids: tuple, n: int, temperature: float,
                  top_k: Optional[int], top_p: float, greedy: bool, seed: int,
                  force: Optional[tuple[int, int]] = None) -> dict:
    model = resources.get_model(cfg_json, model_key)
    return asdict(continuation(model, list(ids), n, temperature, top_k, top_p, greedy, seed, force=force))


def _path(d: dict) -> Path:
    return Path(list(d["tokens"]), list(d["probs"]), [[tuple(t) for t in step] for step in d["top"]])


def _settings(key: str, mode: Optional[str], tokens: Optional[int], seed: Optional[int]) -> tuple[bool, int, int]:
    """(greedy, how many tokens, seed): the options given, else the page's generation widgets of this ``key``."""
    ss = st.session_state
    mode = mode or ss.get(f"{key}.mode") or "greedy"
    n = int(tokens if tokens is not None else ss.get(f"{key}.n") or DEFAULT_TOKENS)
    seed = int(seed if seed is not None else ss.get(f"{key}.seed") or 0)
    return mode != "sampled", max(1, min(n, MAX_NEW)), max(0, seed)


@section("generation.branching")
def branching(ctx, *, key: str = "gen", prompt: Optional[str] = None, temperature: Optional[float] = None,
              top_k: Optional[int] = None, top_p: Optional[float] = None, mode: Optional[str] = None,
              tokens: Optional[int] = None, seed: Optional[int] = None, forced_at: Optional[int] = None,
              forced_id: Optional[int] = None) -> None:
    """The continuation of the prompt as clickable tokens; pick one, pick the token to force there (the step's most
    likely alternatives, with their probabilities), and both continuations are shown with their probabilities
    and where they part. ``forced_at`` (0 = the first generated token) and ``forced_id`` pin the fork."""
    inp = _inputs(ctx, key, prompt, temperature, top_k, top_p)
    if inp is None:
        return
    greedy, n, seed = _settings(key, mode, tokens, seed)
    vocab = ctx.vocab_labels()
    args = (ctx.cfg_json, ctx.model_key, tuple(inp.ids), n, inp.temperature, inp.top_k or None, inp.top_p, greedy,
            seed)
    big = ctx.cfg.num_params() > BIG_MODEL_PARAMS
    asked = f"{key}.branch.asked"
    if big and st.session_state.get(asked) != args:
        st.caption(f"On a model this big ({ctx.cfg.num_params() / 1e6:.0f}M parameters) each continuation is {n} "
                   "forward passes, seconds each on a shared server: branching waits for the button.")
        if not st.button("Generate and branch", key=f"{key}.branch.go", icon=":material/call_split:"):
            return
        st.session_state[asked] = args
    try:
        if big:
            with queued(BIG_LOAD, "generation"):  # one big computation at a time on this server
                original = _path(_continuation(*args))
        else:
            original = _path(_continuation(*args))
    except ValueError as exc:
        st.warning(f"Can't generate from this prompt: {exc}.")
        return
    how = "greedy: the most likely token each time" if greedy else f"sampled with seed {seed}"
    st.caption(f"{n} tokens, {how} (the settings above). Click a generated token to fork there.")
    at = forced_at
    if at is None:
        at = st.pills("Fork at", list(range(n)), default=0, key=f"{key}.branch.at",
                      format_func=lambda k: plain_md(vocab[original.tokens[k]]) or "␣")
        at = 0 if at is None else int(at)
    at = max(0, min(int(at), n - 1))
    chosen = original.tokens[at]
    alts = [(i, p) for i, p in original.top[at] if i != chosen]
    if forced_id is None:
        if not alts:
            st.info("At this step the model has no other token to offer.")
            return
        labels = {i: f"“{vocab[i]}”  (p = {p:.3f})" for i, p in alts}
        forced_id = st.selectbox(f"Force instead of “{plain_md(vocab[chosen])}” (p = {original.probs[at]:.3f}) at "
                                 f"step {at + 1}",
                                 [i for i, _ in alts], key=f"{key}.branch.force.{at}", format_func=labels.get)
    forced_id = int(forced_id)
    if not 0 <= forced_id < ctx.cfg.vocab_size:
        st.warning(f"Token id {forced_id} is not in this model's vocabulary (0 to {ctx.cfg.vocab_size - 1}).")
        return
    try:
        if big:
            with queued(BIG_LOAD, "generation"):
                forced = _path(_continuation(*args, force=(at, forced_id)))
        else:
            forced = _path(_continuation(*args, force=(at, forced_id)))
    except ValueError as exc:
        st.warning(f"Can't force that token: {exc}.")
        return
    _show(ctx, key, inp, vocab, original, forced, at)


def as_text(tok, vocab: list[str], ids: list[int]) -> str:
    """The ids as text: runs of the tokenizer's own ids decoded together, and an id past the tokenizer's vocabulary
    (a row a model pads its vocabulary with, which an untrained model may pick) as its label, ``<unused N>``."""
    out, run = [], []
    for i in ids:
        if 0 <= i < tok.vocab_size:
            run.append(i)
            continue
        out.append(tok.decode(run) if run else "")
        out.append(vocab[i] if 0 <= i < len(vocab) else f"<unused {i}>")
        run = []
    out.append(tok.decode(run) if run else "")
    return "".join(out)


def _show(ctx, key: str, inp, vocab: list[str], original: Path, forced: Path, at: int) -> None:
    part = parting_point(original.tokens, forced.tokens)
    tok = ctx.tok
    for name, path in (("Original", original), ("Forced", forced)):
        common = as_text(tok, vocab, inp.ids + (path.tokens[:at] if part is not None else path.tokens))
        rest = as_text(tok, vocab, path.tokens[at:]) if part is not None else ""
        after = f" ▸ **{plain_md(rest.strip())}**" if rest.strip() else (f" ▸ {plain_md(repr(rest))}" if rest else "")
        st.markdown(f"**{name}:** {plain_md(common)}{after}")  # bold: from the fork on (white space at its ends cut)
    plot(ctx, figures.branch_paths(["original", "forced"], [[vocab[i] for i in original.tokens],
                                                          [vocab[i] for i in forced.tokens]],
                                   [original.probs, forced.probs], part, clickable=False,
                                   title="Two continuations, each token coloured by its probability"),
         key=f"{key}.branch.paths")
    plot(ctx, figures.branch_probs({"original": original.probs, "forced": forced.probs}, part),
         key=f"{key}.branch.probs")
    if part is None:
        st.info("The forced token is the one the model chose: the two continuations are the same.")
        return
    st.caption(f"They part at step {part + 1}: “{plain_md(vocab[original.tokens[part]])}” (p = "
               f"{original.probs[part]:.3f}) against the forced “{plain_md(vocab[forced.tokens[part]])}” (p = "
               f"{forced.probs[part]:.3f}). From there on, the "
               f"original continuation has probability {original.joint(part):.3g} and the forced one "
               f"{forced.joint(part):.3g} (each the product of its tokens' probabilities, softmax of the logits at "
               "temperature 1). Before the fork both are the same tokens.")
    st.latex(r"p(\text{continuation from step } s) = \prod_{t \ge s} \mathrm{softmax}(\ell_t)[x_t]")
    with st.expander("The code", icon=":material/code:"):
        st.code(source_code.function_code(branch, parting_point), language="python")
