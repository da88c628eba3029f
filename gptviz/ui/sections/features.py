"""Sparse-autoencoder features of the model in view: browse them (top held-out snippets, promoted tokens, labels)
and steer with one (add its direction at every position of its hook, see the next token and a greedy generation
change).

Only a shipped model with a shipped SAE (``checkpoints/NAME.sae.safetensors``, made by ``python -m
gptviz.train_sae``) has features; on any other model both sections say so and draw nothing else.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import streamlit as st
import torch

from ...config import ModelConfig
from ...interp.sae import (
    SparseAutoencoder,
    direction_logits,
    greedy,
    labels_path,
    load_sae,
    load_snippets,
    read_labels,
    sae_path,
    snippets_path,
    steering_edit,
)
from ...paths import CHECKPOINTS
from ...present import figures, source_code
from ...present.figures.features import activation_html, before_after_bars
from ...present.markdown_text import plain_md
from ...present.page_context import CKPT_PREFIX
from ...run.trace import trace
from .. import resources
from ..page import preset_label
from ..widgets import plot
from . import section

FEATURE = "gptviz.features.feature"  # st.session_state: the feature in view, shared by both sections
SHOW = 10  # tokens per chart
GEN_TOKENS = 24


@dataclass
class Shipped:
    """A shipped model's SAE with what was precomputed for it."""

    name: str
    file: str
    sae: SparseAutoencoder
    snippets: Optional[dict] = None  # numpy arrays (see gptviz.training.sae.top_snippets), None if missing
    labels: dict = field(default_factory=dict)


@st.cache_resource(max_entries=8, show_spinner=False)
def _load(file: str, mtime: float) -> Shipped:
    """The SAE file and the snippets and labels beside it, read once per file version (never changed after)."""
    sae = load_sae(file)
    name = str(sae.meta.get("model", ""))
    snips = None
    try:
        tensors, _ = load_snippets(snippets_path(name))
        snips = {k: v.float().numpy() if v.is_floating_point() else v.numpy() for k, v in tensors.items()}
        if snips["ids"].shape[0] != sae.n_features:
            snips = None
    except (OSError, ValueError, KeyError, RuntimeError):
        snips = None
    return Shipped(name, file, sae, snips, read_labels(labels_path(name), sae.n_features))


def available() -> list[str]:
    """The shipped models that have an SAE."""
    return sorted(p.name[: -len(".sae.safetensors")] for p in CHECKPOINTS.glob("*.sae.safetensors"))


def shipped_sae(ctx) -> tuple[Optional[Shipped], str]:
    """The SAE shipped for the model in view, or None and, in words, why there is none."""
    have = available()
    names = [preset_label(CKPT_PREFIX + n) for n in have]
    which = (f" An SAE ships with: {', '.join(names)}. Choose it in the sidebar's Model menu." if have else "")
    preset = str(ctx.s.get("preset", ""))
    if ctx.untrained:
        return None, ("This shows the model's shape with fresh, untrained weights: its SAE was trained on the trained "
                      "weights, so there are no features to show. Switch 'Untrained weights' off." + which)
    if not preset.startswith(CKPT_PREFIX) or ctx.model_key is None:
        return None, ("No sparse autoencoder ships for this model, so there are no features to browse or steer with."
                      + which)
    name = preset[len(CKPT_PREFIX):]
    path = sae_path(name)
    if not path.is_file():
        return None, (f"No sparse autoencoder ships for this model (the shipped {name!r} model), so there are no "
                      "features to browse or steer with." + which)
    try:
        got = _load(str(path), path.stat().st_mtime)
    except (OSError, ValueError) as exc:
        return None, f"The SAE file for {name!r} could not be read ({exc})."
    if not _same_shape(got.sae.meta.get("model_config"), ctx.cfg_json):
        return None, f"The SAE file for {name!r} was trained on a model of another shape: it is not used."
    if got.sae.hook not in ctx.trace():
        return None, f"The SAE for {name!r} reads a step this model does not have."
    return got, ""


def _figures_line(sae: SparseAutoencoder) -> str:
    f, t = sae.meta.get("figures") or {}, sae.meta.get("training") or {}
    if not f:
        return ""
    return (f"Measured on the held-out plays ({f.get('tokens', 0):,} tokens): the reconstruction leaves "
            f"**{f['fvu']:.1%}** of the variance unexplained, **{f['l0']:.0f}** features are active per token, "
            f"**{f['dead_fraction']:.1%}** never fire, and with the reconstruction in place of the stream the loss "
            f"is **{f['spliced_nats_per_char']:.3f}** nats/char instead of {f['loss_nats_per_char']:.3f}. Trained in "
            f"{t.get('seconds', 0):.0f} s on {t.get('threads', '?')} CPU thread(s).")


def _feature_name(got: Shipped, i: int) -> str:
    lab = got.labels.get(int(i))
    return f"#{i}" + (f" · {lab}" if lab else "")


def _set_feature(i: int, keys: tuple[str, ...]) -> None:
    st.session_state[FEATURE] = int(i)
    for k in keys:
        st.session_state[k] = int(i)


def _feature_input(got: Shipped, key: str, default: int) -> int:
    """A number box for the feature in view, shared (FEATURE) with the other section."""
    n = got.sae.n_features
    cur = min(max(0, int(st.session_state.get(FEATURE, default))), n - 1)
    st.session_state[FEATURE] = cur
    wkey = f"{key}.feature"
    if st.session_state.get(wkey) != cur:
        st.session_state[wkey] = cur
    box, _ = st.columns([1, 3])
    box.number_input(f"Feature (0 to {n - 1})", 0, n - 1, key=wkey, step=1,
                     on_change=lambda: _set_feature(st.session_state[wkey], ()))
    return int(st.session_state[FEATURE])


def _text_features(ctx, sae: SparseAutoencoder) -> np.ndarray:
    """``(T, n_features)``: the features of the shown row of the text (the page's trace, with its edits)."""
    x = np.asarray(ctx.trace()[sae.hook])[ctx.b, : ctx.n_pos]
    with torch.no_grad():
        return sae.encode(torch.from_numpy(np.ascontiguousarray(x)).float()).numpy()


def _firing(got: Shipped, peak: np.ndarray, n: int = 8, dense: float = 0.2) -> list[int]:
    """The ``n`` features firing most on the text, each measured against its own strongest held-out activation (a
    feature at its usual strength is not news); features that fire on more than ``dense`` of all held-out tokens
    (the stream's common background) last."""
    sn = got.snippets
    if sn is None:
        return [int(i) for i in np.argsort(-peak)[:n] if peak[i] > 0]
    rel = peak / np.maximum(sn["peak"][:, 0], 1e-6) - (sn["density"] > dense)
    return [int(i) for i in np.argsort(-rel)[:n] if peak[i] > 0]


def tex_name(hook: str) -> str:
    """The hook's name as LaTeX text (underscores escaped)."""
    return r"\texttt{" + hook.replace("_", r"\_") + "}"


def _same_shape(stored, cfg_json: str) -> bool:
    """Whether the SAE's recorded model config is the model in view: compared as configs, so a field added to
    ``ModelConfig`` after the file was written (at its default) does not make a shipped SAE look foreign."""
    try:
        stored = json.loads(stored) if isinstance(stored, str) else stored
        return ModelConfig.from_dict(stored) == ModelConfig.from_dict(json.loads(cfg_json))
    except (TypeError, ValueError):
        return False


@section("features.browser")
def browser(ctx, *, key: str = "feat") -> None:
    """Pick a feature (from those firing on your text, or by number); see where it fires on your text, its
    strongest held-out snippets, and the tokens its direction promotes and suppresses."""
    got, why = shipped_sae(ctx)
    if got is None:
        st.info(why, icon=":material/info:")
        return
    sae, vocab = got.sae, ctx.vocab_labels()
    st.caption(f"A TopK sparse autoencoder with {sae.n_features:,} features reads the residual stream at "
               f"`{sae.hook}` ({sae.d_model} numbers) and rewrites it as at most {sae.k} active features. "
               + _figures_line(sae))
    f = _text_features(ctx, sae)
    peak = f.max(0)
    top = _firing(got, peak)
    # the first visit opens on the feature that fires most on the text
    i = _feature_input(got, key, top[0] if top else 0)
    if top:
        st.markdown("**Features firing most on your text**, each against its own strongest held-out activation "
                    "(click one):")
        per_row = 4  # four to a row, so each button keeps its number readable in a lesson's narrow column too
        cols = [c for r in range(0, len(top), per_row) for c in st.columns(per_row)]
        for c, j in zip(cols, top):
            c.button(_feature_name(got, j)[:28], key=f"{key}.pick.{j}", help=f"strongest activation {peak[j]:.2f}",
                     on_click=_set_feature, args=(j, (f"{key}.feature",)), width="stretch")
    lab = got.labels.get(i)
    st.subheader(f"Feature #{i}" + (f": {plain_md(lab)}" if lab else ""))
    if not lab:
        st.caption("No label: nobody has written one for this feature. Read its snippets and decide for yourself.")
    sn = got.snippets
    scale = float(sn["peak"][i, 0]) if sn is not None and sn["peak"][i, 0] > 0 else max(float(peak[i]), 1e-6)
    m1, m2, m3 = st.columns(3)
    m1.metric("Strongest on your text", f"{peak[i]:.2f}")
    if sn is not None:
        m2.metric("Strongest on the held-out plays", f"{sn['peak'][i, 0]:.2f}")
        m3.metric("Fires on held-out tokens", f"{sn['density'][i]:.2%}")
    labels = ctx.labels()
    st.markdown("**On your text** (shaded by this feature's activation; hover a token for the number):")
    st.markdown(activation_html(labels, f[:, i], scale, int(np.argmax(f[:, i])) if peak[i] > 0 else None),
                unsafe_allow_html=True)
    left, right = st.columns([3, 2])
    with left:
        st.markdown("**Top snippets from the held-out plays** (Hamlet and Julius Caesar; the outlined token is the "
                    "strongest in its window):")
        if sn is None:
            st.info("The precomputed snippets are missing for this SAE: run `python -m gptviz.train_sae` again.")
        elif sn["peak"][i, 0] <= 0:
            st.info("This feature never fires on the held-out plays (a dead feature): nothing to show.")
        else:
            for j in range(sn["ids"].shape[1]):
                if sn["peak"][i, j] <= 0:
                    break
                ids = [int(t) for t in sn["ids"][i, j] if t >= 0]
                acts = sn["acts"][i, j, : len(ids)]
                toks = [vocab[t] if 0 <= t < len(vocab) else "?" for t in ids]
                st.markdown(activation_html(toks, acts, scale, int(np.argmax(acts))), unsafe_allow_html=True)
    with right:
        logit = direction_logits(ctx.model, sae.direction(i)).numpy()
        up, down = np.argsort(-logit)[:SHOW], np.argsort(logit)[:SHOW]
        plot(ctx, figures.bar_chart([vocab[t] for t in up], logit[up].tolist(), title=f"Feature #{i} promotes",
                                    x_title="logit change per unit of activation"), key=f"{key}.up")
        plot(ctx, figures.bar_chart([vocab[t] for t in down], logit[down].tolist(), title=f"Feature #{i} suppresses",
                                    x_title="logit change per unit of activation"), key=f"{key}.down")
        st.caption("Its direction read straight through the final norm and the unembedding, as the logit lens reads "
                   "the stream: what it would push for if nothing after its layer changed it.")
    st.markdown(f"A **feature** is one of {sae.n_features:,} directions the autoencoder learned to rewrite the stream "
                f"with: each vector x is encoded as the {sae.k} largest scores (the rest set to 0), and decoded as the "
                "sum of those features' directions. Trained to rebuild x with few features on at once, each tends to "
                "stand for one thing.")
    st.latex(r"f = \mathrm{TopK}_k\big(\mathrm{ReLU}((x - b_{dec})\,W_{enc} + b_{enc})\big),\qquad "
             r"\hat x = f\,W_{dec} + b_{dec}")
    st.code(source_code.function_code(SparseAutoencoder.pre_acts, SparseAutoencoder.encode, SparseAutoencoder.decode),
            language="python")


@st.cache_data(max_entries=128, show_spinner="Steering: two greedy generations…")
def _steer(cfg_json: str, model_key: Optional[str], file: str, mtime: float, ids: tuple, feature: int,
           alpha: float, steps: int) -> dict:
    model = resources.get_model(cfg_json, model_key)
    sae = _load(file, mtime).sae
    edits = {sae.hook: steering_edit(sae.direction(feature), alpha)}
    x = torch.tensor([list(ids)], dtype=torch.long)
    with torch.no_grad():
        before = torch.softmax(trace(model, x).logits[0, -1].float(), -1).numpy()
        after = torch.softmax(trace(model, x, edits=edits).logits[0, -1].float(), -1).numpy()
    return {"before": before, "after": after, "gen_before": greedy(model, list(ids), steps),
            "gen_after": greedy(model, list(ids), steps, edits)}


@section("features.steering")
def steering(ctx, *, key: str = "steer") -> None:
    """Add a feature's direction, times a strength α, to the residual stream at its hook at every position: the
    next-token distribution and a greedy generation, without and with it."""
    got, why = shipped_sae(ctx)
    if got is None:
        st.info(why, icon=":material/info:")
        return
    vocab = ctx.vocab_labels()
    i = _feature_input(got, key, 0)
    sn = got.snippets
    peak = float(sn["peak"][i, 0]) if sn is not None and sn["peak"][i, 0] > 0 else 1.0
    top = max(1, math.ceil(4 * peak))
    alpha = st.slider(f"Strength α (feature #{i}'s strongest held-out activation is {peak:.2f})", -float(top),
                      float(top), 0.0, step=top / 40, key=f"{key}.alpha.{i}",
                      help="The stream at every position gets α times the feature's unit direction added. 0 leaves "
                           "the model as it is; negative values push away from the feature.")
    ids = tuple(int(t) for t in np.asarray(ctx.batch.x)[ctx.b, : ctx.n_pos])
    path = sae_path(got.name)
    out = _steer(ctx.cfg_json, ctx.model_key, got.file, path.stat().st_mtime, ids, i, float(alpha), GEN_TOKENS)
    before, after = out["before"], out["after"]
    shown = np.argsort(-np.maximum(before, after))[:SHOW]
    name = _feature_name(got, i)
    plot(ctx, before_after_bars([vocab[t] for t in shown], before[shown].tolist(), after[shown].tolist(),
                                title=f"Next token after your text: α = 0 and α = {alpha:+.2f} × feature #{i}",
                                names=("without (α = 0)", f"with α = {alpha:+.2f}")), key=f"{key}.dist")
    a, b = st.columns(2)
    a.markdown("**Greedy generation, without steering:**")
    a.markdown(plain_md(repr(ctx.tok.decode(list(ids[-40:]))) + " → " + repr(ctx.tok.decode(out["gen_before"]))))
    b.markdown(f"**With α = {alpha:+.2f} × feature {plain_md(name)}:**")
    b.markdown(plain_md(repr(ctx.tok.decode(list(ids[-40:]))) + " → " + repr(ctx.tok.decode(out["gen_after"]))))
    st.caption(f"{GEN_TOKENS} tokens, each the most likely, on the model's own weights (the page's other edits are "
               "not applied here). The steering vector is added at every position of the context, at every step.")
    st.latex(r"x'_t = x_t + \alpha\, d_i \quad\text{at } " + tex_name(got.sae.hook) + r"\text{, every position } t")
    st.code(source_code.function_code(steering_edit), language="python")
