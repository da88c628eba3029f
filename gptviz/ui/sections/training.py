"""Training-page sections: the replay of the shipped induction-heads run."""
from __future__ import annotations

import numpy as np
import streamlit as st

from ...present import figures, matrices
from ...interp import head_detector
from .. import resources
from ..widgets import plot
from . import section

SHIPPED_RUN = "induction-heads"


@st.cache_resource(max_entries=4, show_spinner="Loading the run's snapshots…")
def _snapshots(name: str) -> tuple:
    """((step, state_dict), ...) of a shipped run, shared read-only by every session."""
    from ...training.recipes import load_snapshots

    path = resources.CHECKPOINTS / f"{name}.snapshots.safetensors"
    return tuple(load_snapshots(path)) if path.is_file() else ()


@st.cache_data(max_entries=64, show_spinner=False)
def _probe_at(name: str, step: int) -> dict:
    """The repeated-random probe on the run's weights at ``step``: scores, losses and one row's patterns."""
    from ...model.gpt import GPT

    key = resources.shipped_checkpoint(name)
    cfg = resources.registered(key).model.config
    state = dict(_snapshots(name))[step]
    model = GPT(cfg)
    model.load_state_dict(state, strict=False)
    model.eval()
    out = head_detector.probe(model, n=min(24, cfg.block_size // 2), batch=4, seed=3)
    from ...run.trace import trace

    idx = head_detector.repeated_probe(cfg.vocab_size, out["n"], 1, seed=3)
    tr = trace(model, idx)
    out["patterns"] = np.stack([tr[f"blocks.{l}.attn.hook_pattern"][0].numpy() for l in range(cfg.n_layer)])
    out["tokens"] = idx[0].tolist()
    return out


@section("training.induction_replay")
def induction_replay(ctx, *, key: str = "replay") -> None:
    """Replay the shipped attention-only run: the second copy's loss collapsing as the layer-1 head snaps to
    the token after the previous occurrence."""
    snaps = _snapshots(SHIPPED_RUN)
    if not snaps:
        st.info("The shipped induction-heads run is not in checkpoints/ on this machine.")
        return
    entry = resources.registered(resources.shipped_checkpoint(SHIPPED_RUN))
    meta = entry.meta
    curve = meta.get("curve", [])
    steps = [s for s, _ in snaps]
    jump = meta.get("induction_step")
    default = min(steps, key=lambda s: abs(s - (jump or steps[-1])))
    step = st.select_slider("Training step", steps, value=default, key=f"{key}.step",
                            help="Snapshots of the run, closer together around the jump.")
    xs = [r["step"] for r in curve]
    fig = figures.line_chart({"loss on the 2nd copy": [r["probe_loss_second"] for r in curve],
                              "loss on the 1st copy": [r["probe_loss_first"] for r in curve]}, x=xs,
                             title="The probe: a random run of tokens, repeated", x_title="step",
                             y_title="cross-entropy (nats/token)", vline=step,
                             y2={"induction score (best layer-1 head)": [r["induction_max"] for r in curve],
                                 "previous-token score (best layer-0 head)": [r["previous_max_layer0"] for r in curve]})
    plot(ctx, fig, key=f"{key}.curve")
    pr = _probe_at(SHIPPED_RUN, int(step))
    L = pr["patterns"].shape[0]
    ind = pr["scores"]["induction"][L - 1]
    h = int(np.argmax(ind))
    n = pr["n"]
    labels = [f"{i}" if i < n else f"{i} (copy)" for i in range(2 * n)]
    pat = pr["patterns"][L - 1, h]
    mk = np.triu(np.ones_like(pat, dtype=bool), 1)
    m = matrices.Matrix(np.where(mk, np.nan, pat), labels, labels, "query", "key", "probability", mk)
    c1, c2 = st.columns([3, 2])
    with c1:
        plot(ctx, figures.heatmap(m, f"Step {step}: layer {L - 1} head {h} on the probe"), key=f"{key}.pat")
    c2.metric("Induction score", f"{ind[h]:.2f}", help=head_detector.HOW["induction"])
    c2.metric("Loss on the 2nd copy", f"{pr['loss_second']:.2f}", help="Mean cross-entropy predicting the repeat.")
    c2.metric("Loss on the 1st copy", f"{pr['loss_first']:.2f}", help="Random tokens: no model can predict them.")
    c2.caption(f"An induction head's weights sit on the off-diagonal {n - 1} cells left of the diagonal: from each "
               "token of the copy, the token after its first occurrence."
               + (f" The score first passed 0.4 at step {jump}." if jump else ""))
