"""The Circuits page's feature in view: the first selected feature node of the attribution graph (or its most
influential one): its activation on each token of your text, its strongest windows of the held-out plays (shipped
beside the transcoder, ``python -m gptviz.transcoder_snippets``), and the tokens its decoder promotes and suppresses.
"""
from __future__ import annotations

import numpy as np
import streamlit as st
import torch

from ...interp.sae import direction_logits
from ...interp.transcoder import input_hook
from ...present import figures
from ...present.figures.features import activation_html
from ...present.markdown_text import plain_md
from .. import resources
from ..widgets import plot
from . import section
from .circuit_words import snippet_arrays, words
from .circuits import View, _features_of, _view, chosen

SNIPPETS_SHOWN = 5


def _snippets(view: View, layer: int, feat: int, vocab) -> None:
    per_layer = snippet_arrays(view.file, view.graph.n_layer)
    st.markdown("**Its strongest windows of the held-out plays** (Hamlet and Julius Caesar; the outlined token is "
                "the strongest in its window):")
    if per_layer is None or feat >= per_layer[layer]["peak"].shape[0]:
        st.info("No snippets ship with this transcoder: `python -m gptviz.transcoder_snippets` makes them.")
        return
    sn = per_layer[layer]
    if sn["peak"][feat, 0] <= 0:
        st.info("This feature never fires on the held-out plays: nothing to show.")
        return
    scale = float(sn["peak"][feat, 0])
    for j in range(min(SNIPPETS_SHOWN, sn["ids"].shape[1])):
        if sn["peak"][feat, j] <= 0:
            break
        ids = [int(t) for t in sn["ids"][feat, j] if t >= 0]
        acts = sn["acts"][feat, j, :len(ids)]
        toks = [vocab[t] if 0 <= t < len(vocab) else "?" for t in ids]
        st.markdown(activation_html(toks, acts, scale, int(np.argmax(acts))), unsafe_allow_html=True)
    st.caption(f"It fires on {float(sn['density'][feat]):.2%} of the held-out tokens.")


@section("circuits.feature")
def feature(ctx, *, key: str = "circ.feat", graph_key: str = "circ") -> None:
    """The first selected feature (or the most influential): its activation on each token of the prompt, its
    strongest held-out snippets, and the tokens its decoder to the last layer promotes and suppresses."""
    view, why = _view(ctx, graph_key)
    if view is None:
        st.info(why, icon=":material/info:")
        return
    g, tc = view.graph, view.tc
    if tc is None:
        st.info("This model has no MLPs, so its graph has no features: its edges go from the tokens, through "
                "attention, to the logits.", icon=":material/info:")
        return
    picked = _features_of(view, chosen(graph_key))
    if not picked:
        kept = [i for i in range(g.n_features) if bool(view.pruned.node_mask[i])]
        if not kept:
            st.info("No feature node is kept at these thresholds: raise the node threshold.")
            return
        best = max(kept, key=lambda i: float(view.pruned.node_influence[i]))
        picked = [tuple(g.node(best)[1:4])]
        st.caption("Nothing selected yet: this is the graph's most influential feature. Click one on the graph.")
    layer, pos, feat = picked[0]
    st.subheader(f"Feature L{layer} #{feat} at '{plain_md(view.tokens[pos])}' (position {pos})")
    label = words(ctx, view.file, view.mtime, tc)[0].get((layer, feat))
    if label:
        st.caption(f"**{plain_md(label)}**: its label, made from its held-out snippets and its decoder (the graph's "
                   "hover shows it too).")
    tr = resources.traced_prompt(ctx.cfg_json, ctx.model_key, view.ids)
    x = torch.from_numpy(np.ascontiguousarray(np.asarray(tr[input_hook(layer)])[0])).float()
    with torch.no_grad():
        acts = tc.encode(layer, x)[:, feat].numpy()
    st.markdown(f"**Its activation on each token of the prompt** (the outlined token is this node's; largest "
                f"{acts.max():.2f}):")
    st.markdown(activation_html(view.tokens, acts, float(acts.max()) or 1.0, pos), unsafe_allow_html=True)
    model, vocab = ctx.model, ctx.vocab_labels()
    _snippets(view, layer, feat, vocab)
    logit = direction_logits(model, tc.decoder_row(layer, feat)[-1]).numpy()
    up, down = np.argsort(-logit)[:10], np.argsort(logit)[:10]
    left, right = st.columns(2)
    with left:
        plot(ctx, figures.bar_chart([vocab[t] for t in up], logit[up].tolist(), title=f"L{layer} #{feat} promotes",
                                    x_title="logit per unit of activation"), key=f"{key}.up")
    with right:
        plot(ctx, figures.bar_chart([vocab[t] for t in down], logit[down].tolist(),
                                    title=f"L{layer} #{feat} suppresses", x_title="logit per unit of activation"),
             key=f"{key}.down")
    st.caption("Its decoder to the last MLP output it writes, read through the final norm's linear part "
               "and the unembedding, as the SAE features page reads a feature: what it pushes for directly if nothing "
               "after it changed it (the norm's divisor left out).")


