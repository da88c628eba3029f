"""Train the model live and watch its loss fall and its attention patterns form."""
import copy
import time

import streamlit as st

from gptviz.loss import uniform_loss
import torch

from gptviz import GPT, figures, trace, views
from gptviz.tasks import make_task
from gptviz.training import DEFAULTS, TrainConfig, model_at, model_config_for, snapshot, train
from gptviz.ui import page_setup, resources

RUN = "gptviz.train.run"  # the last run of this session: model key, history, task
LIVE = "gptviz.train.live"  # a run in progress (kept if the user stops it)

ctx = page_setup("Training", "🏋️")
s = ctx.s
st.title("Training")

TASKS = {"sort": "Sort letters (dbca|abcd)", "induction": "Copy a repeated run (induction)",
         "text": "Next token of the built-in text", "mytext": "Next token of my text (sidebar)"}


def finish(model, hist, task, task_name, stopped=False):
    """Freeze the trained model, register it, and make it the model every page shows."""
    frozen = copy.deepcopy(model).eval()
    last = hist.steps[-1] if hist.steps else 0
    if not hist.snapshots or hist.snapshots[-1][0] != last:  # a stopped run: keep where it got to
        hist.snapshots.append((last, snapshot(frozen)))
    key = resources.register_model(frozen, task.tokenizer, f"trained on {task_name} ({hist.steps[-1] if hist.steps else 0} steps)",
                                   {"task": task_name, "example": task.example()})
    st.session_state[RUN] = {"key": key, "hist": hist, "task": task_name, "example": task.example(), "stopped": stopped}
    s["model_key"] = key
    s["text"] = task.example()
    s["edits"], s["id_edits"] = {"set": [], "heads_off": []}, {}
    s["layer"] = min(s["layer"], frozen.config.n_layer - 1)


done = st.session_state.pop("gptviz.train.done", None)
if done:
    (st.warning if done.startswith("Training stopped") else st.success)(done)
live = st.session_state.pop(LIVE, None)
if live is not None:  # the last run was interrupted by the Stop button (or by leaving the page)
    if live["hist"] is not None and live["hist"].steps:
        finish(live["model"], live["hist"], live["task"], live["task_name"], stopped=True)
        st.session_state["gptviz.train.done"] = (f"Training stopped at step {live['hist'].steps[-1]}; "
                                                 "the model so far is kept and every page now shows it.")
    else:
        st.session_state["gptviz.train.done"] = "Training stopped before its first progress report; nothing changed."
    st.rerun()



def show_current():
    """Before any training: the current model's attention, to compare with after."""
    tr = ctx.trace()
    name = f"blocks.{ctx.layer}.attn.hook_pattern"
    mk = views.masked_cells(tr, ctx.b)
    m = views.step_matrix(tr[name], tr.info(name), ctx.labels(), ctx.b, ctx.head or 0, masked=mk, n_pos=ctx.n_pos)
    st.plotly_chart(figures.heatmap(m, f"Now: layer {ctx.layer} head {ctx.head or 0} attention, before training"),
                    width="stretch", key="train.now")
    st.info("Press **Start training** below. The loss curve draws itself as it goes, and afterwards every page shows "
            "the trained model. Try *induction* and replay the attention pattern forming, snapshot by snapshot.")


def show_replay(run):
    hist = run["hist"]
    entry = resources.registered(run["key"])
    st.subheader("Watch it learn")
    if entry is None:
        st.warning("This training run's model is no longer in memory; train again to replay it.")
        return
    model = entry.model
    tok = entry.tokenizer
    ids = tok.encode(run["example"])
    labels = [tok.token_str(i) for i in ids]
    snaps = hist.snapshots
    i = st.select_slider("Snapshot (training step)", options=list(range(len(snaps))), value=len(snaps) - 1,
                         format_func=lambda k: str(snaps[k][0]), key="train.snap")
    L = min(ctx.layer, model.config.n_layer - 1)
    H = ctx.head if ctx.head is not None else 0
    H = min(H, model.config.n_head - 1)
    snap_model = model_at(model, snaps[i][1])
    tr = trace(snap_model, torch.tensor([ids])).numpy()
    mk = views.masked_cells(tr, 0)
    default = f"blocks.{L}.attn.hook_pattern"
    name = st.selectbox("Step to replay", list(tr), index=list(tr).index(default), key="train.replay.step",
                        format_func=lambda n: f"{tr.info(n).title} · {n}")
    m = views.step_matrix(tr[name], tr.info(name), labels, 0, H if "head" in tr.info(name).axes else None, masked=mk)
    who = f"head {H} · " if "head" in tr.info(name).axes else ""
    st.plotly_chart(figures.heatmap(m, f"{tr.info(name).title} · {who}step {snaps[i][0]} on “{run['example']}”"),
                    width="stretch", key="train.replay")
    tiles = [[tr[f"blocks.{l}.attn.hook_pattern"][0, h] for h in range(model.config.n_head)] for l in range(model.config.n_layer)]
    st.plotly_chart(figures.tiled_heatmap(tiles, [f"L{l}" for l in range(model.config.n_layer)],
                                          [f"H{h}" for h in range(model.config.n_head)], title=f"Every head at step {snaps[i][0]}",
                                          masked=mk), width="stretch", key="train.replay.all")
    series = {"training loss": hist.loss}
    st.plotly_chart(figures.line_chart(series, x=hist.steps, title="Loss during training", x_title="step",
                                       y_title="cross-entropy", hlines={"uniform guess ln V": uniform_loss(model.config.vocab_size)}),
                    width="stretch", key="train.loss")
    if run["task"] in ("sort", "induction"):
        st.plotly_chart(figures.line_chart({"held-out accuracy": hist.accuracy}, x=hist.eval_steps, title="Accuracy",
                                           x_title="step", y_title="share of tokens right"), width="stretch", key="train.acc")
    st.caption(f"{'Stopped' if run['stopped'] else 'Finished'} at step {hist.steps[-1] if hist.steps else 0}, "
               f"{hist.seconds:.1f} s, final held-out loss {hist.eval_loss[-1]:.3f}.")


if st.session_state.get(RUN) is None:
    show_current()
else:
    show_replay(st.session_state[RUN])

task_name = st.selectbox("Task", list(TASKS), format_func=TASKS.get, key="train.task")
d = DEFAULTS["text" if task_name == "mytext" else task_name]
with st.form("train.form"):
    c1, c2, c3 = st.columns(3)
    k = f".{task_name}"  # each task keeps its own settings (and defaults)
    optimizer = c1.selectbox("Optimizer", ["adamw", "adam", "sgd"], index=["adamw", "adam", "sgd"].index(d["optimizer"]),
                             key="train.opt" + k)
    lr = c2.number_input("Learning rate", 1e-5, 1.0, float(d["lr"]), format="%.4f", key="train.lr" + k)
    steps = c3.number_input("Steps", 1, 20000, int(d["steps"]), key="train.steps" + k)
    batch_size = c1.number_input("Batch size", 1, 512, int(d["batch_size"]), key="train.bs" + k)
    seed = c2.number_input("Seed", 0, 2**31 - 1, 0, key="train.seed" + k)
    n_layer = c3.number_input("Layers", 1, 8, int(d["n_layer"]), key="train.nl" + k)
    n_head = c1.number_input("Heads", 1, 16, int(d["n_head"]), key="train.nh" + k)
    n_embd = c2.number_input("Width (n_embd)", 4, 512, int(d["n_embd"]), key="train.ne" + k)
    start = st.form_submit_button("▶ Start training", type="primary")
target = d.get("target")
st.caption("The defaults reach " + (f"{target:.0%} accuracy" if target else "a low loss") +
           " on two CPU cores in under a minute. A run can be stopped at any time; the model so far is kept.")

if start:
    try:
        if task_name == "mytext":
            task = make_task("text", text=s["text"] + "\n", num_merges=int(s["merges"]))
        else:
            task = make_task(task_name)
        tc = TrainConfig(steps=int(steps), batch_size=int(batch_size), lr=float(lr), optimizer=optimizer, seed=int(seed),
                         eval_every=max(1, min(int(steps) // 40, 50)), snapshot_every=max(1, int(steps) // 20))
        cfg = model_config_for(task, int(n_layer), int(n_head), int(n_embd), seed=int(seed))
        cfg.check_limits(batch=int(batch_size), seq_len=cfg.block_size, grads=True)
    except ValueError as exc:
        st.error(f"Can't train with these settings: {exc}")
        st.stop()
    model = GPT(cfg)
    st.session_state[LIVE] = {"model": model, "hist": None, "task": task, "task_name": task_name}
    st.button("■ Stop", key="train.stop", help="Stops after the current step and keeps the model so far.")
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
                           width="stretch", key=f"train.live.{step}")
        if task_name in ("sort", "induction"):
            acc_box.metric("Accuracy (held-out)", f"{hist.accuracy[-1]:.1%}")
        else:
            acc_box.metric("Held-out loss", f"{hist.eval_loss[-1]:.3f}")

    model, hist = train(model, task, tc, on_progress=progress, copy_model=False)
    st.session_state.pop(LIVE, None)
    finish(model, hist, task, task_name)
    st.session_state["gptviz.train.done"] = (f"Trained for {hist.steps[-1]} steps in {hist.seconds:.1f} s. Every page now "
                                             "shows this model; “Reset to defaults” in the sidebar goes back to the untrained one.")
    st.rerun()

