"""The Circuits page's feature in view: the first selected feature node of the attribution graph (or its most
influential one): its activation on each token of your text, its strongest windows of the held-out plays (shipped
beside the transcoder, ``python -m gptviz.transcoder_snippets``), and the tokens its decoder promotes and suppresses.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np
import streamlit as st
import torch

from ...interp.transcoder import input_hook, load_snippets
from ...present import figures
from ...present.figures.features import activation_html
from ...present.markdown_text import plain_md
from .. import resources
from ..widgets import plot
from . import section
from .circuits import View, _features_of, _view

SNIPPETS_SHOWN = 5


@st.cache_resource(max_entries=4, show_spinner=False)
def _snippet_file(file: str, mtime: float, n_layer: int) -> Optional[list]:
    """Each layer's snippets as numpy arrays, read once per file version; None when the file is missing or bad."""
    try:
        per_layer, _ = load_snippets(file, n_layer)
        return [{k: v.float().numpy() if v.is_floating_point() else v.numpy() for k, v in d.items()}
                for d in per_layer]
    except (OSError, ValueError, KeyError, RuntimeError):
        return None


def _snippets(view: View, layer: int, feat: int, vocab) -> None:
    path = Path(view.file.replace(".transcoder.safetensors", ".transcoder.snippets.safetensors"))
    per_layer = _snippet_file(str(path), path.stat().st_mtime, view.tc.n_layer) if path.is_file() else None
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
    g = view.graph
    picked = _features_of(view, st.session_state.get(f"{graph_key}.chosen", []))
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
    tr = resources.traced_prompt(ctx.cfg_json, ctx.model_key, view.ids)
    x = torch.from_numpy(np.ascontiguousarray(np.asarray(tr[input_hook(layer)])[0])).float()
    with torch.no_grad():
        acts = view.tc.encode(layer, x)[:, feat].numpy()
    st.markdown(f"**Its activation on each token of the prompt** (the outlined token is this node's; largest "
                f"{acts.max():.2f}):")
    st.markdown(activation_html(view.tokens, acts, float(acts.max()) or 1.0, pos), unsafe_allow_html=True)
    model, vocab = ctx.model, ctx.vocab_labels()
    _snippets(view, layer, feat, vocab)
    with torch.no_grad():
        row = view.tc.decoder_row(layer, feat)[-1] * model.transformer.ln_f.weight.detach().float()
        logit = (row @ model.lm_head.weight.detach().float().T).numpy()
    up, down = np.argsort(-logit)[:10], np.argsort(logit)[:10]
    left, right = st.columns(2)
    with left:
        plot(ctx, figures.bar_chart([vocab[t] for t in up], logit[up].tolist(), title=f"L{layer} #{feat} promotes",
                                    x_title="logit per unit of activation"), key=f"{key}.up")
    with right:
        plot(ctx, figures.bar_chart([vocab[t] for t in down], logit[down].tolist(),
                                    title=f"L{layer} #{feat} suppresses", x_title="logit per unit of activation"),
             key=f"{key}.down")
    st.caption("Its decoder to the last MLP output it writes, times the final norm's gain, through the unembedding: "
               "what it pushes for directly if nothing after it changed it (the norm's divisor left out).")


