"""Training-page sections that replay training: the session's last run snapshot by snapshot (or, before any
run, the current model's attention), and the shipped induction-heads run."""
from __future__ import annotations

import numpy as np
import streamlit as st
import torch

from ...interp import head_detector
from ...model.hook_names import act_name
from ...present import figures, matrices
from ...present.descriptions import step_info
from ...run.loss import uniform_loss
from ...run.trace import trace
from ...text.tokenizers import token_labels
from ...training.loop import model_at
from .. import resources
from ..widgets import plot
from . import section
from .training import RUN

SHIPPED_RUN = "induction-heads"


# --------------------------------------------------------------------------- the session's last run
@section("training.last_run")
def last_run(ctx, *, key: str = "train") -> None:
    """The session's last run, snapshot by snapshot; before any run, the current model's attention."""
    run = st.session_state.get(RUN)
    if run is None:
        _show_current(ctx, key)
    else:
        _show_replay(ctx, key, run)


def _show_current(ctx, key: str) -> None:
    """Before any training: the current model's attention, to compare with after."""
    tr = ctx.trace()
    name = act_name("pattern", ctx.layer)
    mk = matrices.masked_cells(tr, ctx.b)
    m = matrices.step_matrix(tr[name], step_info(tr, name), ctx.labels(), ctx.b, ctx.head or 0, masked=mk,
                             n_pos=ctx.n_pos)
    when = " of the model shown (decoder self-attention)" if ctx.cfg.n_enc_layer >= 0 else ", before training"
    plot(ctx, figures.heatmap(m, f"Now: layer {ctx.layer} head {ctx.head or 0} attention{when}"), key=f"{key}.now")
    st.info("Press **Start training** below. The loss curve draws itself as it goes, and afterwards every page shows "
            "the trained model. Try *induction* and replay the attention pattern forming, snapshot by snapshot.")


def _show_replay(ctx, key: str, run: dict) -> None:
    """One snapshot of the run: any recorded step, every head's pattern, the loss and accuracy curves."""
    hist = run["hist"]
    entry = resources.registered(run["key"])
    st.subheader("Watch it learn")
    if entry is None:
        st.warning("This training run's model is no longer in memory; train again to replay it.")
        return
    model = entry.model
    tok = entry.tokenizer
    ids = tok.encode(run["example"])
    labels = token_labels(tok, ids)
    snaps = hist.snapshots
    i = st.select_slider("Snapshot (training step)", options=list(range(len(snaps))), value=len(snaps) - 1,
                         format_func=lambda k: str(snaps[k][0]), key=f"{key}.snap")
    L = min(ctx.layer, model.config.n_layer - 1)
    H = ctx.head if ctx.head is not None else 0
    H = min(H, model.config.n_head - 1)
    snap_model = model_at(model, snaps[i][1])
    tr = trace(snap_model, torch.tensor([ids])).numpy()
    mk = matrices.masked_cells(tr, 0)
    default = act_name("pattern", L)
    shown = {n: f"{step_info(tr, n).title} · {n}" for n in tr}  # not a closure over tr: the session keeps format_func
    name = st.selectbox("Step to replay", list(tr), index=list(tr).index(default), key=f"{key}.replay.step",
                        format_func=shown.__getitem__)
    info = step_info(tr, name)
    m = matrices.step_matrix(tr[name], info, labels, 0, H if "head" in info.axes else None, masked=mk)
    who = f"head {H} · " if "head" in info.axes else ""
    plot(ctx, figures.heatmap(m, f"{info.title} · {who}step {snaps[i][0]} on “{run['example']}”"), key=f"{key}.replay")
    tiles = [[tr[act_name("pattern", l)][0, h] for h in range(model.config.n_head)]
             for l in range(model.config.n_layer)]
    plot(ctx, figures.tiled_heatmap(tiles, [f"L{l}" for l in range(model.config.n_layer)],
                                          [f"H{h}" for h in range(model.config.n_head)],
                                          title=f"Every head at step {snaps[i][0]}", masked=mk),
         key=f"{key}.replay.all")
    series = {"training loss": hist.loss}
    plot(ctx, figures.line_chart(series, x=hist.steps, title="Loss during training", x_title="step",
                                       y_title="cross-entropy",
                                       hlines={"uniform guess ln V": uniform_loss(model.config.vocab_size)}),
         key=f"{key}.loss")
    if run["task"] in ("sort", "induction"):
        plot(ctx, figures.line_chart({"held-out accuracy": hist.accuracy}, x=hist.eval_steps, title="Accuracy",
                                           x_title="step", y_title="share of tokens right"), key=f"{key}.acc")
    st.caption(f"{'Stopped' if run['stopped'] else 'Finished'} at step {hist.steps[-1] if hist.steps else 0}, "
               f"{hist.seconds:.1f} s, final held-out loss {hist.eval_loss[-1]:.3f}.")


# --------------------------------------------------------------------------- the shipped induction-heads run
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
    idx = head_detector.repeated_probe(cfg.vocab_size, out["n"], 1, seed=3)
    tr = trace(model, idx)
    out["patterns"] = np.stack([tr[act_name("pattern", l)][0].numpy() for l in range(cfg.n_layer)])
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
