"""Training-page section for the reversal task: train an encoder-decoder live, then show its loss, accuracy,
alignment scores and cross-attention (which should form an anti-diagonal)."""
from __future__ import annotations

import time

import numpy as np
import streamlit as st
import torch

from ...model.hook_names import act_name
from ...present import figures, matrices
from ...present.descriptions import step_info
from ...run import edits as edit_specs
from ...run.loss import uniform_loss
from ...run.slots import TRAINING
from ...run.trace import trace
from ...training.reversal import REVERSE_RECIPE, alignment, train_reverse
from ...training.tasks import ReverseTask
from .. import resources, state
from ..waiting import queued
from ..widgets import plot
from . import section
from .training import DONE, LR_MAX

S2S_RUN = "gptviz.train.reverse"  # the last reversal run of this session: model key, history, alignment


def cross_heatmap(model, tok, source: str, decoder: str, head: int, title: str, key: str, ctx=None):
    """The model's cross-attention (layer 0, one head) on one source and its teacher-forced decoder text:
    rows decoder tokens, columns the source's letters."""
    src, dec = tok.encode(source), tok.encode(decoder)
    tr = trace(model, torch.tensor([dec]), enc_input=torch.tensor([src])).numpy()
    name = act_name("pattern", 0, "cross_attn")
    m = matrices.step_matrix(tr[name], step_info(tr, name), [tok.token_str(i) for i in dec], 0, head,
                          key_tokens=[tok.token_str(i) for i in src])
    plot(ctx, figures.heatmap(m, title), key=key)


@section("training.reverse")
def reverse(ctx, *, key: str = "train") -> None:
    """The reversal task's settings and live run; then the session's last reversal run."""
    s = ctx.s
    r = REVERSE_RECIPE
    st.markdown("An **encoder-decoder** model: the encoder reads 8 letters, the decoder writes them backwards after "
                "a start token `^`. Each decoder layer has self-attention, then **cross-attention** to the encoder's "
                "output, then an MLP. To write position t the decoder must read source position 7 − t, so the "
                "cross-attention weights should form an anti-diagonal.")
    with st.form(f"{key}.reverse.form"):
        c1, c2, c3 = st.columns(3)
        steps = c1.number_input("Steps", 1, 20000, int(r["steps"]), key=f"{key}.steps.reverse")
        lr = c2.number_input("Learning rate", value=float(r["lr"]), format="%.4f", key=f"{key}.lr.reverse",
                             help=f"Above 0 and at most {LR_MAX:g}.")
        batch_size = c3.number_input("Batch size", 1, 512, int(r["batch_size"]), key=f"{key}.bs.reverse")
        seed = c1.number_input("Seed", 0, 2**31 - 1, 0, key=f"{key}.seed.reverse")
        n_head = c2.number_input("Heads", 1, 8, int(r["model"]["n_head"]), key=f"{key}.nh.reverse")
        n_embd = c3.number_input("Width (n_embd)", 4, 256, int(r["model"]["n_embd"]), key=f"{key}.ne.reverse")
        start = st.form_submit_button("▶ Start training", type="primary")
    st.caption("AdamW with a cosine decay, one encoder layer and one decoder layer, learned positions. The defaults "
               "reach 100% held-out accuracy in about 30 s on two CPU cores (progress is reported every "
               f"{r['eval_every']} steps).")
    if start:
        try:
            if not 0 < lr <= LR_MAX:
                raise ValueError(f"the learning rate {lr:g} is out of range: choose one above 0 and at most {LR_MAX:g} "
                                 f"(this task's default is {r['lr']:g})")
            if n_embd % n_head:
                raise ValueError(f"n_embd={n_embd} must be a multiple of n_head={n_head}")
        except ValueError as exc:
            st.error(f"Can't train with these settings: {exc}")
            return
        task = ReverseTask()
        st.button("■ Stop", key=f"{key}.stop.reverse",
                  help="Stops training; the model is kept only when a run finishes.")
        wait_box = st.empty()  # the place in the queue, if the server's training slots are all taken
        bar = st.progress(0.0, text="Starting…")
        c1, c2 = st.columns([3, 1])
        chart, acc_box = c1.empty(), c2.empty()
        t0 = time.perf_counter()

        def progress(step, hist):
            bar.progress(step / int(steps), text=f"step {step} of {int(steps)} · {time.perf_counter() - t0:.1f} s")
            chart.plotly_chart(figures.line_chart({"training loss": hist["loss"]}, x=hist["steps"], title="Loss",
                                                  x_title="step", y_title="cross-entropy",
                                                  hlines={"uniform guess ln V": uniform_loss(task.vocab_size)}),
                               width="stretch", key=f"{key}.reverse.live.{step}")
            acc_box.metric("Accuracy (held-out)", f"{hist['accuracy'][-1]:.1%}")

        with queued(TRAINING, "training", wait_box):
            model, hist = train_reverse(int(steps), int(batch_size), float(lr), int(seed), task, progress,
                                        n_head=int(n_head), n_embd=int(n_embd))
        example = task.example()
        decoder = task.decoder_text(example)
        align = alignment(model, task).numpy()
        model_key = resources.register_model(model, task.tokenizer, f"trained on reverse ({hist['steps'][-1]} steps, "
                                             "encoder-decoder)", {"task": "reverse", "example": example,
                                                                  "decoder_example": decoder,
                                                                  "accuracy": hist["accuracy"][-1]})
        st.session_state[S2S_RUN] = {"key": model_key, "hist": hist, "align": align}
        s["model_key"] = model_key
        s["text"], s[state.SOURCE] = decoder, example
        s["edits"], s["id_edits"] = edit_specs.empty(), {}
        s["layer"], s["head"] = 0, 0
        st.session_state[DONE] = (
            f"Trained for {hist['steps'][-1]} steps in {hist['seconds']:.1f} s: held-out accuracy "
            f"{hist['accuracy'][-1]:.1%}. Every page now shows this model (the Attention page's cross-attention "
            "first); “Reset to defaults” in the sidebar goes back to the untrained one.")
        st.rerun()
    _last_reverse_run(ctx, key)


def _last_reverse_run(ctx, key: str) -> None:
    """The session's last reversal run: loss, accuracy, each head's alignment score and its cross-attention."""
    run = st.session_state.get(S2S_RUN)
    if run is None:
        return
    entry = resources.registered(run["key"])
    hist = run["hist"]
    st.subheader("The last reversal run")
    if entry is None:
        st.warning("This training run's model is no longer in memory; train again to see it.")
        return
    c1, c2 = st.columns(2)
    with c1:
        plot(ctx, figures.line_chart({"training loss": hist["loss"]}, x=hist["steps"],
                                           title="Loss during training (reverse)", x_title="step",
                                           y_title="cross-entropy",
                                           hlines={"uniform guess ln V": uniform_loss(entry.model.config.vocab_size)}),
             key=f"{key}.reverse.loss")
    with c2:
        plot(ctx, figures.line_chart({"held-out accuracy": hist["accuracy"]}, x=hist["eval_steps"],
                                           title="Accuracy (reverse)", x_title="step",
                                           y_title="share of letters right"), key=f"{key}.reverse.acc")
    align = np.asarray(run["align"])
    L, H = align.shape
    st.markdown("**Alignment**: the cross-attention weight on the aligned source letter (7 − t for output position t), "
                "averaged over 200 fresh sequences and every position. 1 is a perfect anti-diagonal; a head that "
                f"ignores positions scores 1/{entry.model.config.enc_len} = {1 / entry.model.config.enc_len:.3f}.")
    cols = st.columns(min(H, 8))
    for l in range(L):
        for h in range(H):
            cols[h % len(cols)].metric(f"Layer {l} head {h}", f"{align[l, h]:.3f}")
    head = int(align[0].argmax())
    meta = entry.meta
    cross_heatmap(entry.model, entry.tokenizer, meta["example"], meta["decoder_example"], head,
                  f"Cross-attention after training · layer 0 head {head} on “{meta['example']}”",
                  f"{key}.reverse.cross", ctx)
    st.caption(f"Finished at step {hist['steps'][-1]}, {hist['seconds']:.1f} s. Rows: what the "
               "decoder reads; columns: the source letters the encoder read.")
