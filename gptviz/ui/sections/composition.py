"""How heads compose (Q-, K- and V-composition, Elhage et al. 2021): from the weights alone, how much of what each
earlier head writes each later head reads through its queries, keys or values."""
from __future__ import annotations

from typing import Optional

import numpy as np
import streamlit as st

from ...interp import composition, head_detector
from ...present.figures import composition as fig
from ...present.page_context import probe_rows
from .. import resources
from ..widgets import plot
from . import section

MODE_LABELS = {"K": "K: through its keys", "Q": "Q: through its queries", "V": "V: through its values"}


@st.cache_data(max_entries=16, show_spinner="Composing every pair of heads…")
def _scores(cfg_json: str, model_key: Optional[str], untrained: bool, mode: str, _model) -> np.ndarray:
    return composition.scores(_model, mode)


def _kind(scores: dict, layer: int, head: int) -> str:
    """The head detector's best kind for a head, with its score: "previous 0.86"."""
    best = max(scores, key=lambda k: np.nan_to_num(scores[k][layer, head], nan=-1.0))
    return f"{best} {scores[best][layer, head]:.2f}"


@section("attention.composition")
def composition_view(ctx, *, key: str = "comp", mode: Optional[str] = None) -> None:
    """Earlier heads (rows) × later heads (columns): the Q-, K- or V-composition score of each pair, and the
    strongest pairs named by what the head detector says each head does."""
    why = composition.why_not(ctx.cfg)
    if why:
        st.info(f"No composition scores here: {why}.")
        return
    if mode is None:
        mode = st.segmented_control("Which input of the later head", list(MODE_LABELS), default="K",
                                    format_func=MODE_LABELS.get, key=f"{key}.mode") or "K"
    s = _scores(ctx.cfg_json, ctx.model_key, bool(ctx.untrained), mode, _model=ctx.model)
    # the map first, where the first screen shows it; what its cells mean under it
    plot(ctx, fig.composition_heatmap(s, mode, f"{mode}-composition: earlier heads into later heads"), key=key)
    st.caption(f"**{mode}-composition**: {composition.MEANING[mode]}. Each cell is ‖W_A W_B‖ / (‖W_A‖ ‖W_B‖) for the "
               "earlier head's OV circuit W_A and the later head's "
               + {"Q": "QK circuit", "K": "QK circuit, transposed", "V": "OV circuit"}[mode]
               + ", from the weights alone (biases and your edits left out): 0 when B ignores everything A can "
               f"write, 1 at most; two random matrices give about 1/√d_model ≈ {1 / np.sqrt(ctx.cfg.n_embd):.2f}. "
               "As TransformerLens's `all_composition_scores`, without folding the norms' gains into the weights.")
    try:
        kinds = head_detector.detect(ctx.trace(), ctx.b)
        pr = resources.probe_scores(ctx.cfg_json, ctx.model_key, batch=probe_rows(ctx.cfg))
        kinds["induction"], kinds["duplicate"] = pr["scores"]["induction"], pr["scores"]["duplicate"]
    except Exception:  # noqa: BLE001 - the names are a help, the scores stand without them
        kinds = None
    lines = []
    for r in composition.strongest(s, top=5):
        (l1, h1), (l2, h2) = r["from"], r["to"]
        named = f" ({_kind(kinds, l1, h1)} → {_kind(kinds, l2, h2)})" if kinds else ""
        lines.append(f"- L{l1} H{h1} → L{l2} H{h2}: **{r['score']:.3f}**{named}")
    st.markdown("**The strongest pairs**" + (", with the head detector's best kind for each head" if kinds else "")
                + "\n" + "\n".join(lines))
    if mode == "K":
        st.caption("In an induction circuit a previous-token head (layer 0) writes 'the token before me' at every "
                   "position, and the induction head's keys read it: the strongest K-composition pair.")
