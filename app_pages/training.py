"""Train the model live and watch its loss fall and its attention patterns form."""
import copy
import time

import streamlit as st

from gptviz.run import edits as edit_specs

from gptviz.run.loss import uniform_loss
import torch

import numpy as np

from gptviz import GPT
from gptviz.present import figures, matrices
from gptviz import trace
from gptviz.training.tasks import make_task
from gptviz.training.loop import DEFAULTS, TrainConfig, model_at, model_config_for, snapshot, train
from gptviz.ui import page_setup, resources, state

RUN = "gptviz.train.run"  # the last run of this session: model key, history, task
LIVE = "gptviz.train.live"  # a run in progress (kept if the user stops it)
LR_MAX = 1.0  # larger steps only make the loss blow up on these tasks

ctx = page_setup("Training", ":material/fitness_center:")
s = ctx.s
state.use_source(ctx)  # a model with an encoder reads the session's source
st.title("Training")
mode = st.segmented_control("What to see", ["Train a model here", "Replay: induction heads forming"],
                            default="Train a model here", key="train.mode", label_visibility="collapsed")
if mode == "Replay: induction heads forming":
    from gptviz.ui.sections.training import induction_replay

    st.markdown("The shipped **Induction heads** model (two attention-only layers, trained on Shakespeare with "
                "repeated random runs mixed in) was saved at many steps. Move the slider across the jump: the loss "
                "on the repeated copy collapses as a layer-1 head learns to look at the token after the previous "
                "occurrence of the current one.")
    induction_replay(ctx, key="replay")
    st.stop()

TASKS = {"sort": "Sort letters (dbca|abcd)", "induction": "Copy a repeated run (induction)",
         "text": "Next token of the built-in text", "mytext": "Next token of my text (sidebar)",
         "reverse": "Reverse letters with an encoder-decoder (fbdacbeg → gebcadbf)",
         "material": "The material's training loop (decoder with cross-attention, plain SGD)"}
S2S_RUN = "gptviz.train.reverse"  # the last reversal run of this session: model key, history, alignment
MATERIAL_RUN = "gptviz.train.material"  # the last run of the material's loop: its losses and trained model


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
    s["edits"], s["id_edits"] = edit_specs.empty(), {}
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
    mk = matrices.masked_cells(tr, ctx.b)
    m = matrices.step_matrix(tr[name], tr.info(name), ctx.labels(), ctx.b, ctx.head or 0, masked=mk, n_pos=ctx.n_pos)
    when = " of the model shown (decoder self-attention)" if ctx.cfg.n_enc_layer >= 0 else ", before training"
    st.plotly_chart(figures.heatmap(m, f"Now: layer {ctx.layer} head {ctx.head or 0} attention{when}"),
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
    mk = matrices.masked_cells(tr, 0)
    default = f"blocks.{L}.attn.hook_pattern"
    name = st.selectbox("Step to replay", list(tr), index=list(tr).index(default), key="train.replay.step",
                        format_func=lambda n: f"{tr.info(n).title} · {n}")
    m = matrices.step_matrix(tr[name], tr.info(name), labels, 0, H if "head" in tr.info(name).axes else None, masked=mk)
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


# --------------------------------------------------------------------------- encoder-decoder: the reversal task
def cross_heatmap(model, tok, source: str, decoder: str, head: int, title: str, key: str):
    """The model's cross-attention (layer 0, one head) on one source and its teacher-forced decoder text:
    rows decoder tokens, columns the source's letters."""
    src, dec = tok.encode(source), tok.encode(decoder)
    tr = trace(model, torch.tensor([dec]), enc_input=torch.tensor([src])).numpy()
    name = "blocks.0.cross_attn.hook_pattern"
    m = matrices.step_matrix(tr[name], tr.info(name), [tok.token_str(i) for i in dec], 0, head,
                          key_tokens=[tok.token_str(i) for i in src])
    st.plotly_chart(figures.heatmap(m, title), width="stretch", key=key)


def reverse_section():
    from gptviz.model.encoder_decoder import REVERSE_RECIPE, alignment, train_reverse
    from gptviz.training.tasks import ReverseTask

    r = REVERSE_RECIPE
    st.markdown("An **encoder-decoder** model: the encoder reads 8 letters, the decoder writes them backwards after "
                "a start token `^`. Each decoder layer has self-attention, then **cross-attention** to the encoder's "
                "output, then an MLP. To write position t the decoder must read source position 7 − t, so the "
                "cross-attention weights should form an anti-diagonal.")
    with st.form("train.reverse.form"):
        c1, c2, c3 = st.columns(3)
        steps = c1.number_input("Steps", 1, 20000, int(r["steps"]), key="train.steps.reverse")
        lr = c2.number_input("Learning rate", value=float(r["lr"]), format="%.4f", key="train.lr.reverse",
                             help=f"Above 0 and at most {LR_MAX:g}.")
        batch_size = c3.number_input("Batch size", 1, 512, int(r["batch_size"]), key="train.bs.reverse")
        seed = c1.number_input("Seed", 0, 2**31 - 1, 0, key="train.seed.reverse")
        n_head = c2.number_input("Heads", 1, 8, int(r["model"]["n_head"]), key="train.nh.reverse")
        n_embd = c3.number_input("Width (n_embd)", 4, 256, int(r["model"]["n_embd"]), key="train.ne.reverse")
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
            st.stop()
        task = ReverseTask()
        st.button("■ Stop", key="train.stop.reverse", help="Stops training; the model is kept only when a run finishes.")
        bar = st.progress(0.0, text="Starting…")
        c1, c2 = st.columns([3, 1])
        chart, acc_box = c1.empty(), c2.empty()
        t0 = time.perf_counter()

        def progress(step, hist):
            bar.progress(step / int(steps), text=f"step {step} of {int(steps)} · {time.perf_counter() - t0:.1f} s")
            chart.plotly_chart(figures.line_chart({"training loss": hist["loss"]}, x=hist["steps"], title="Loss",
                                                  x_title="step", y_title="cross-entropy",
                                                  hlines={"uniform guess ln V": uniform_loss(task.vocab_size)}),
                               width="stretch", key=f"train.reverse.live.{step}")
            acc_box.metric("Accuracy (held-out)", f"{hist['accuracy'][-1]:.1%}")

        model, hist = train_reverse(int(steps), int(batch_size), float(lr), int(seed), task, progress,
                                    n_head=int(n_head), n_embd=int(n_embd))
        example = task.example()
        decoder = task.decoder_text(example)
        align = alignment(model, task).numpy()
        key = resources.register_model(model, task.tokenizer, f"trained on reverse ({hist['steps'][-1]} steps, "
                                       "encoder-decoder)", {"task": "reverse", "example": example,
                                                            "decoder_example": decoder,
                                                            "accuracy": hist["accuracy"][-1]})
        st.session_state[S2S_RUN] = {"key": key, "hist": hist, "align": align}
        s["model_key"] = key
        s["text"], s[state.SOURCE] = decoder, example
        s["edits"], s["id_edits"] = edit_specs.empty(), {}
        s["layer"], s["head"] = 0, 0
        st.session_state["gptviz.train.done"] = (
            f"Trained for {hist['steps'][-1]} steps in {hist['seconds']:.1f} s: held-out accuracy "
            f"{hist['accuracy'][-1]:.1%}. Every page now shows this model (the Attention page's cross-attention "
            "first); “Reset to defaults” in the sidebar goes back to the untrained one.")
        st.rerun()
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
        st.plotly_chart(figures.line_chart({"training loss": hist["loss"]}, x=hist["steps"],
                                           title="Loss during training (reverse)", x_title="step", y_title="cross-entropy",
                                           hlines={"uniform guess ln V": uniform_loss(entry.model.config.vocab_size)}),
                        width="stretch", key="train.reverse.loss")
    with c2:
        st.plotly_chart(figures.line_chart({"held-out accuracy": hist["accuracy"]}, x=hist["eval_steps"],
                                           title="Accuracy (reverse)", x_title="step", y_title="share of letters right"),
                        width="stretch", key="train.reverse.acc")
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
                  f"Cross-attention after training · layer 0 head {head} on “{meta['example']}”", "train.reverse.cross")
    st.caption(f"Finished at step {hist['steps'][-1]}, {hist['seconds']:.1f} s. Rows: what the "
               "decoder reads; columns: the source letters the encoder read.")


# --------------------------------------------------------------------------- the material's own training loop
from gptviz.model.encoder_decoder import MATERIAL_LOOP_CODE as MATERIAL_LOOP  # noqa: E402 - shown with st.code



def material_section():
    from gptviz.model.encoder_decoder import material_recipe

    st.markdown("The teaching material's own loop, on its decoder layer (preset *decoder-cross-attention*): **plain "
                "SGD at lr 0.01**, one step on the **whole batch** each iteration, a **fixed random encoder output** "
                "(10 × 8 × 32) and **fixed random targets** (10 × 8 tokens out of 12). The decoder reads the target "
                "sequence itself, so it can learn to copy it: the loss falls from about ln 12.")
    with st.form("train.material.form"):
        c1, c2, c3 = st.columns(3)
        steps = c1.number_input("Steps", 1, 5000, 200, key="train.steps.material")
        lr = c2.number_input("Learning rate", value=0.01, format="%.4f", key="train.lr.material",
                             help=f"Above 0 and at most {LR_MAX:g}.")
        seed = c3.number_input("Seed", 0, 2**31 - 1, 0, key="train.seed.material")
        shift = st.toggle("Predict the next token instead (the decoder reads the targets shifted right by one)",
                          key="train.shift.material")
        start = st.form_submit_button("▶ Run the material's loop", type="primary")
    st.code(MATERIAL_LOOP, language="python")
    if start:
        if not 0 < lr <= LR_MAX:
            st.error(f"Can't train with these settings: the learning rate {lr:g} is out of range: choose one above 0 "
                     f"and at most {LR_MAX:g} (the material's is 0.01)")
            st.stop()
        t0 = time.perf_counter()
        with st.spinner(f"Running {int(steps)} SGD steps…"):
            res = material_recipe(int(steps), float(lr), seed=int(seed), shift=bool(shift))
        st.session_state[MATERIAL_RUN] = {"loss": res["loss"], "model": res["model"], "enc_out": res["enc_out"][:1],
                                          "inputs": res["inputs"][:1], "lr": float(lr), "shift": bool(shift),
                                          "seconds": time.perf_counter() - t0}
    run = st.session_state.get(MATERIAL_RUN)
    if run is None:
        return
    loss = run["loss"]
    V = run["model"].config.vocab_size
    st.plotly_chart(figures.line_chart({"loss (whole batch)": loss}, x=list(range(len(loss))),
                                       title="The material's training loop: loss", x_title="SGD step",
                                       y_title="cross-entropy", hlines={"uniform guess ln V": uniform_loss(V)}),
                    width="stretch", key="train.material.loss")
    c1, c2, c3 = st.columns(3)
    c1.metric("Loss before training", f"{loss[0]:.3f}")
    c2.metric(f"Loss after {len(loss) - 1} steps", f"{loss[-1]:.3f}", delta=f"{loss[-1] - loss[0]:+.3f}",
              delta_color="inverse")
    c3.metric("Uniform guess ln V", f"{uniform_loss(V):.3f}")
    tr = trace(run["model"], run["inputs"], enc_out=run["enc_out"]).numpy()
    H = run["model"].config.n_head
    tiles = [[tr["blocks.0.cross_attn.hook_pattern"][0, h] for h in range(H)]]
    st.plotly_chart(figures.tiled_heatmap(tiles, ["L0"], [f"H{h}" for h in range(H)],
                                          title="Cross-attention after the loop, batch row 0 (rows: decoder position, "
                                                "columns: encoder position)"), width="stretch", key="train.material.cross")
    st.caption(f"{len(loss) - 1} steps at lr {run['lr']:g} in {run['seconds']:.1f} s. The encoder output is random, "
               "so cross-attention has nothing to align with here: the loop is about the mechanics of training.")


if task_name == "reverse":
    reverse_section()
    st.stop()
if task_name == "material":
    material_section()
    st.stop()
d = DEFAULTS["text" if task_name == "mytext" else task_name]
with st.form("train.form"):
    c1, c2, c3 = st.columns(3)
    k = f".{task_name}"  # each task keeps its own settings (and defaults)
    optimizer = c1.selectbox("Optimizer", ["adamw", "adam", "sgd"], index=["adamw", "adam", "sgd"].index(d["optimizer"]),
                             key="train.opt" + k)
    # No widget range: a value outside it would be dropped silently; it is refused with a message below instead.
    lr = c2.number_input("Learning rate", value=float(d["lr"]), format="%.4f", key="train.lr" + k,
                         help=f"Above 0 and at most {LR_MAX:g}.")
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
        if not 0 < lr <= LR_MAX:
            raise ValueError(f"the learning rate {lr:g} is out of range: choose one above 0 and at most {LR_MAX:g} "
                             f"(this task's default is {d['lr']:g})")
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

