"""Training-page section for the teaching material's own training loop: plain SGD on its decoder layer with
cross-attention to a fixed random encoder output, its code, and the loss it gives."""
from __future__ import annotations

import time

import streamlit as st

from ...model.hook_names import act_name
from ...present import figures
from ...run.loss import uniform_loss
from ...run.slots import TRAINING
from ...run.trace import trace
from ...training.reversal import MATERIAL_LOOP_CODE, material_recipe
from ..waiting import queued
from ..widgets import plot
from . import section
from .training import LR_MAX

MATERIAL_RUN = "gptviz.train.material"  # the last run of the material's loop: its losses and trained model


@section("training.material")
def material_loop(ctx, *, key: str = "train") -> None:
    """The material's loop: its settings, its code, and the session's last run of it (loss and cross-attention)."""
    st.markdown("The teaching material's own loop, on its decoder layer (preset *decoder-cross-attention*): **plain "
                "SGD at lr 0.01**, one step on the **whole batch** each iteration, a **fixed random encoder output** "
                "(10 × 8 × 32) and **fixed random targets** (10 × 8 tokens out of 12). The decoder reads the target "
                "sequence itself, so it can learn to copy it: the loss falls from about ln 12.")
    with st.form(f"{key}.material.form"):
        c1, c2, c3 = st.columns(3)
        steps = c1.number_input("Steps", 1, 5000, 200, key=f"{key}.steps.material")
        lr = c2.number_input("Learning rate", value=0.01, format="%.4f", key=f"{key}.lr.material",
                             help=f"Above 0 and at most {LR_MAX:g}.")
        seed = c3.number_input("Seed", 0, 2**31 - 1, 0, key=f"{key}.seed.material")
        shift = st.toggle("Predict the next token instead (the decoder reads the targets shifted right by one)",
                          key=f"{key}.shift.material")
        start = st.form_submit_button("▶ Run the material's loop", type="primary")
    st.code(MATERIAL_LOOP_CODE, language="python")
    if start:
        if not 0 < lr <= LR_MAX:
            st.error(f"Can't train with these settings: the learning rate {lr:g} is out of range: choose one above 0 "
                     f"and at most {LR_MAX:g} (the material's is 0.01)")
            return
        t0 = time.perf_counter()
        with queued(TRAINING, "training"), st.spinner(f"Running {int(steps)} SGD steps…"):
            res = material_recipe(int(steps), float(lr), seed=int(seed), shift=bool(shift))
        st.session_state[MATERIAL_RUN] = {"loss": res["loss"], "model": res["model"], "enc_out": res["enc_out"][:1],
                                          "inputs": res["inputs"][:1], "lr": float(lr), "shift": bool(shift),
                                          "seconds": time.perf_counter() - t0}
    run = st.session_state.get(MATERIAL_RUN)
    if run is None:
        return
    loss = run["loss"]
    V = run["model"].config.vocab_size
    plot(ctx, figures.line_chart({"loss (whole batch)": loss}, x=list(range(len(loss))),
                                       title="The material's training loop: loss", x_title="SGD step",
                                       y_title="cross-entropy", hlines={"uniform guess ln V": uniform_loss(V)}),
         key=f"{key}.material.loss")
    c1, c2, c3 = st.columns(3)
    c1.metric("Loss before training", f"{loss[0]:.3f}")
    c2.metric(f"Loss after {len(loss) - 1} steps", f"{loss[-1]:.3f}", delta=f"{loss[-1] - loss[0]:+.3f}",
              delta_color="inverse")
    c3.metric("Uniform guess ln V", f"{uniform_loss(V):.3f}")
    tr = trace(run["model"], run["inputs"], enc_out=run["enc_out"]).numpy()
    H = run["model"].config.n_head
    tiles = [[tr[act_name("pattern", 0, "cross_attn")][0, h] for h in range(H)]]
    plot(ctx, figures.tiled_heatmap(tiles, ["L0"], [f"H{h}" for h in range(H)],
                                          title="Cross-attention after the loop, batch row 0 (rows: decoder position, "
                                                "columns: encoder position)"), key=f"{key}.material.cross")
    st.caption(f"{len(loss) - 1} steps at lr {run['lr']:g} in {run['seconds']:.1f} s. The encoder output is random, "
               "so cross-attention has nothing to align with here: the loop is about the mechanics of training.")
