"""Training-page sections for the decoder-only task runs: what to see, which task, and a live run with Stop.

A run trains a fresh ``GPT`` on one task of ``gptviz.training.tasks`` with ``gptviz.training.loop.train``,
drawing its loss as it goes. The finished (or stopped) model is registered and every page shows it. The
session-state keys below are shared with the replay (``training_replay``) and the encoder-decoder runs
(``training_reverse``, ``training_material``).
"""
from __future__ import annotations

import copy
import time

import streamlit as st

from ...model.gpt import GPT
from ...present import figures
from ...run import edits as edit_specs
from ...run.loss import uniform_loss
from ...run.slots import TRAINING
from ...training.loop import DEFAULTS, TrainConfig, model_config_for, snapshot, train
from ...training.tasks import make_task
from .. import resources
from ..waiting import queued
from . import section

RUN = "gptviz.train.run"  # the last run of this session: model key, history, task
LIVE = "gptviz.train.live"  # a run in progress (kept if the user stops it)
DONE = "gptviz.train.done"  # the message about the last run, shown once on the next run of the page
LR_MAX = 1.0  # larger steps only make the loss blow up on these tasks

TRAIN_HERE = "Train a model here"
REPLAY = "Replay: induction heads forming"
TASKS = {"sort": "Sort letters (dbca|abcd)", "induction": "Copy a repeated run (induction)",
         "text": "Next token of the built-in text", "mytext": "Next token of my text (sidebar)",
         "reverse": "Reverse letters with an encoder-decoder (fbdacbeg → gebcadbf)",
         "material": "The material's training loop (decoder with cross-attention, plain SGD)"}


@section("training.mode")
def mode(ctx, *, key: str = "train") -> str:
    """What the Training page shows: a run here (``TRAIN_HERE``) or the shipped run's replay (``REPLAY``)."""
    return st.segmented_control("What to see", [TRAIN_HERE, REPLAY], default=TRAIN_HERE, key=f"{key}.mode",
                                label_visibility="collapsed")


def finish(ctx, model, hist, task, task_name, stopped=False):
    """Freeze the trained model, register it, and make it the model every page shows."""
    s = ctx.s
    frozen = copy.deepcopy(model).eval()
    last = hist.steps[-1] if hist.steps else 0
    if not hist.snapshots or hist.snapshots[-1][0] != last:  # a stopped run: keep where it got to
        hist.snapshots.append((last, snapshot(frozen)))
    key = resources.register_model(frozen, task.tokenizer,
                                   f"trained on {task_name} ({hist.steps[-1] if hist.steps else 0} steps)",
                                   {"task": task_name, "example": task.example()})
    st.session_state[RUN] = {"key": key, "hist": hist, "task": task_name, "example": task.example(), "stopped": stopped}
    s["model_key"] = key
    s["text"] = task.example()
    s["edits"], s["id_edits"] = edit_specs.empty(), {}
    s["layer"] = min(s["layer"], frozen.config.n_layer - 1)


@section("training.notices")
def notices(ctx, *, key: str = "train") -> None:
    """The message about the last run (once); a run the Stop button interrupted (or leaving the page) is
    finished here, with the model it got to."""
    done = st.session_state.pop(DONE, None)
    if done:
        (st.warning if done.startswith("Training stopped") else st.success)(done)
    live = st.session_state.pop(LIVE, None)
    if live is not None:  # the last run was interrupted by the Stop button (or by leaving the page)
        if live["hist"] is not None and live["hist"].steps:
            finish(ctx, live["model"], live["hist"], live["task"], live["task_name"], stopped=True)
            st.session_state[DONE] = (f"Training stopped at step {live['hist'].steps[-1]}; "
                                      "the model so far is kept and every page now shows it.")
        else:
            st.session_state[DONE] = "Training stopped before its first progress report; nothing changed."
        st.rerun()


@section("training.task")
def choose_task(ctx, *, key: str = "train") -> str:
    """The task to train on, one of ``TASKS``."""
    return st.selectbox("Task", list(TASKS), format_func=TASKS.get, key=f"{key}.task")


@section("training.run")
def train_task(ctx, *, key: str = "train", task_name: str = "sort") -> None:
    """The settings of a decoder-only run on ``task_name`` (each task keeps its own), and the run itself: a
    live loss curve and a Stop button that keeps the model so far."""
    s = ctx.s
    d = DEFAULTS["text" if task_name == "mytext" else task_name]
    with st.form(f"{key}.form"):
        c1, c2, c3 = st.columns(3)
        k = f".{task_name}"  # each task keeps its own settings (and defaults)
        optimizer = c1.selectbox("Optimizer", ["adamw", "adam", "sgd"],
                                 index=["adamw", "adam", "sgd"].index(d["optimizer"]), key=f"{key}.opt" + k)
        # No widget range: a value outside it would be dropped silently; it is refused with a message below instead.
        lr = c2.number_input("Learning rate", value=float(d["lr"]), format="%.4f", key=f"{key}.lr" + k,
                             help=f"Above 0 and at most {LR_MAX:g}.")
        steps = c3.number_input("Steps", 1, 20000, int(d["steps"]), key=f"{key}.steps" + k)
        batch_size = c1.number_input("Batch size", 1, 512, int(d["batch_size"]), key=f"{key}.bs" + k)
        seed = c2.number_input("Seed", 0, 2**31 - 1, 0, key=f"{key}.seed" + k)
        n_layer = c3.number_input("Layers", 1, 8, int(d["n_layer"]), key=f"{key}.nl" + k)
        n_head = c1.number_input("Heads", 1, 16, int(d["n_head"]), key=f"{key}.nh" + k)
        n_embd = c2.number_input("Width (n_embd)", 4, 512, int(d["n_embd"]), key=f"{key}.ne" + k)
        start = st.form_submit_button("▶ Start training", type="primary")
    target = d.get("target")
    st.caption("The defaults reach " + (f"{target:.0%} accuracy" if target else "a low loss") +
               " on two CPU cores in under a minute. A run can be stopped at any time; the model so far is kept.")
    if not start:
        return
    try:
        if not 0 < lr <= LR_MAX:
            raise ValueError(f"the learning rate {lr:g} is out of range: choose one above 0 and at most {LR_MAX:g} "
                             f"(this task's default is {d['lr']:g})")
        if task_name == "mytext":
            task = make_task("text", text=s["text"] + "\n", num_merges=int(s["merges"]))
        else:
            task = make_task(task_name)
        tc = TrainConfig(steps=int(steps), batch_size=int(batch_size), lr=float(lr), optimizer=optimizer,
                         seed=int(seed), eval_every=max(1, min(int(steps) // 40, 50)),
                         snapshot_every=max(1, int(steps) // 20))
        cfg = model_config_for(task, int(n_layer), int(n_head), int(n_embd), seed=int(seed))
        cfg.check_limits(batch=int(batch_size), seq_len=cfg.block_size, grads=True)
    except ValueError as exc:
        st.error(f"Can't train with these settings: {exc}")
        return
    model = GPT(cfg)
    st.session_state[LIVE] = {"model": model, "hist": None, "task": task, "task_name": task_name}
    st.button("■ Stop", key=f"{key}.stop", help="Stops after the current step and keeps the model so far.")
    wait_box = st.empty()  # the place in the queue, if the server's training slots are all taken
    bar = st.progress(0.0, text="Starting…")
    c1, c2 = st.columns([3, 1])
    chart = c1.empty()
    acc_box = c2.empty()
    t0 = time.perf_counter()

    def progress(step, hist):
        st.session_state[LIVE]["hist"] = hist
        bar.progress(step / tc.steps, text=f"step {step} of {tc.steps} · {time.perf_counter() - t0:.1f} s")
        chart.plotly_chart(figures.line_chart({"training loss": hist.loss}, x=hist.steps,
                                              title="Loss", x_title="step", y_title="cross-entropy",
                                              hlines={"uniform guess ln V": uniform_loss(cfg.vocab_size)}),
                           width="stretch", key=f"{key}.live.{step}")
        if task_name in ("sort", "induction"):
            acc_box.metric("Accuracy (held-out)", f"{hist.accuracy[-1]:.1%}")
        else:
            acc_box.metric("Held-out loss", f"{hist.eval_loss[-1]:.3f}")

    with queued(TRAINING, "training", wait_box):  # at most TRAINING.capacity runs train at once on this server
        model, hist = train(model, task, tc, on_progress=progress, copy_model=False)
    st.session_state.pop(LIVE, None)
    finish(ctx, model, hist, task, task_name)
    st.session_state[DONE] = (f"Trained for {hist.steps[-1]} steps in {hist.seconds:.1f} s. Every page now "
                              "shows this model; “Reset to defaults” in the sidebar goes back to the untrained one.")
    st.rerun()
