"""Train a small model on a task and save it as a checkpoint.

    python -m gptviz.train --task sort --out checkpoints/sort.safetensors
    python -m gptviz.train --task induction --out checkpoints/induction.safetensors
    python -m gptviz.train --task text --out checkpoints/text.safetensors
    python -m gptviz.train --task shakespeare --out checkpoints/shakespeare.safetensors
    python -m gptviz.train --task shakespeare-induction --out checkpoints/induction-heads.safetensors
    python -m gptviz.train --task shakespeare-moe --out checkpoints/shakespeare-moe.safetensors --threads 1
    python -m gptviz.train --task reverse --out checkpoints/reverse.safetensors --threads 1

Seeded: the same command gives the same weights on the same machine and library versions.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Optional

import numpy as np
import safetensors.torch
import torch

from ..config import ModelConfig
from ..interp import head_detector
from ..interp.experts import expert_load, held_out_windows
from ..model.checkpoint import save_checkpoint
from ..model.gpt import GPT
from ..text import corpus
from .loop import DEFAULTS, TrainConfig, model_config_for, train
from .reversal import reverse_cli
from .tasks import ShakespeareTask, make_task

# The Shakespeare models. Model fields go to ModelConfig, the rest to TrainConfig / the task.
CORPUS_RECIPES = {
    # the app's default model: a small GPT (nanoGPT's CPU shape: 4 layers, 4 heads, 128 dims)
    "shakespeare": dict(model=dict(n_layer=4, n_head=4, n_embd=128, init_std=0.02),
                        steps=3000, batch_size=32, lr=1e-3, warmup=100, schedule="cosine", weight_decay=0.1,
                        induction_share=0.0, eval_every=250),
    # the Shakespeare GPT with a mixture of experts in every layer: 8 experts of 256 (GELU, as the GPT's MLP), each
    # token routed to 2, so a token runs through as many MLP weights as in the GPT (2 x 256 = its 512) while the
    # model holds four times as many; the Switch Transformer's load-balancing loss at 0.01 keeps every expert used
    "shakespeare-moe": dict(model=dict(n_layer=4, n_head=4, n_embd=128, init_std=0.02, n_expert=8, n_expert_active=2,
                                       d_expert=256, router_aux_coef=0.01),
                            steps=3000, batch_size=32, lr=1e-3, warmup=100, schedule="cosine", weight_decay=0.1,
                            induction_share=0.0, eval_every=250),
    # two attention-only layers, 8 heads of 32: induction heads, and held-out loss within 0.1 nats/char of the GPT.
    # Rotary positions make a previous-token head easy to express. For the first 600 steps every row starts
    # with a random run repeated twice: the induction circuit gets a strong signal and forms within ~400
    # steps (on this data, without that phase, the score stayed at 0.02 after 1,500 steps). After it, a tenth
    # of the rows repeat, so the heads stay, and the rest is Shakespeare.
    "shakespeare-induction": dict(model=dict(n_layer=2, n_head=8, n_embd=256, init_std=0.02, attn_only=True,
                                             pos_encoding="rope"),
                                  steps=5000, batch_size=64, lr=2e-3, warmup=100, schedule="cosine",
                                  weight_decay=0.1, induction_share=0.1, warmup_share=1.0, warmup_steps=600,
                                  block_size=64, run_len=(8, 32), eval_every=50),
}


def run_recipe(name: str, seed: int = 0, overrides: Optional[dict] = None, stop_after: Optional[int] = None,
               verbose: bool = True) -> dict:
    """Train one of the CORPUS_RECIPES as ``python -m gptviz.train --task name`` does, scoring the held-out
    plays and the repeated-random probe at every evaluation (the ``curve``). ``stop_after`` ends the run
    after that many steps (the schedule is still the whole run's): the start of a shipped run can be
    re-made and compared with the curve its checkpoint recorded.

    Returns ``model, hist, curve, task, cfg, tc, seconds``."""
    r = dict(CORPUS_RECIPES[name])
    r.update({k: v for k, v in (overrides or {}).items() if v is not None})
    task = ShakespeareTask(block_size=r.get("block_size", 128), induction_share=r["induction_share"],
                           run_len=r.get("run_len", (8, 48)), warmup_share=r.get("warmup_share", 0.0),
                           warmup_steps=r.get("warmup_steps", 0))
    cfg = ModelConfig(vocab_size=task.vocab_size, block_size=task.block_size, seed=seed, **r["model"])
    tc = TrainConfig(steps=r["steps"], batch_size=r["batch_size"], lr=r["lr"], optimizer="adamw", seed=seed,
                     weight_decay=r["weight_decay"], warmup=r["warmup"], schedule=r["schedule"],
                     eval_every=r["eval_every"], snapshot_every=r["eval_every"])
    t0 = time.perf_counter()
    curve = []  # one row per evaluation: step, seconds, val nats/char, probe scores, probe losses

    def progress(step, h):
        model = progress.model
        v = task.validation(model, max_windows=64)
        pr = head_detector.probe(model, n=32, batch=8, seed=1)
        ind = pr["scores"]["induction"]
        prev = pr["scores"]["previous"]
        row = {"step": step, "seconds": round(time.perf_counter() - t0, 1), "train_loss": h.eval_loss[-1],
               "val_nats_per_char": v["nats_per_char"], "induction_max": float(ind[-1].max()),
               "previous_max_layer0": float(prev[0].max()), "probe_loss_first": pr["loss_first"],
               "probe_loss_second": pr["loss_second"]}
        curve.append(row)
        if verbose:
            print(f"step {step:6d}  train {row['train_loss']:.3f}  val {v['nats_per_char']:.3f} nats/char  "
                  f"induction(L{cfg.n_layer - 1}) {row['induction_max']:.2f}  "
                  f"prev(L0) {row['previous_max_layer0']:.2f}  "
                  f"probe loss 1st {pr['loss_first']:.2f} 2nd {pr['loss_second']:.2f}  {row['seconds']:7.1f}s",
                  flush=True)

    done = [0]

    def stop() -> bool:  # asked before every step
        done[0] += 1
        return stop_after is not None and done[0] > stop_after

    # the progress hook scores the live model, so train this one in place rather than a copy
    progress.model = model0 = GPT(cfg)
    model, hist = train(model0, task, tc, on_progress=progress, should_stop=stop, copy_model=False)
    return dict(model=model, hist=hist, curve=curve, task=task, cfg=cfg, tc=tc, seconds=time.perf_counter() - t0)


def _train_corpus(a, argv) -> int:
    """Train a Shakespeare model, reporting held-out loss per character and the probe's head scores."""
    run = run_recipe(a.task, a.seed, {k: getattr(a, k) for k in ("steps", "batch_size", "lr")})
    model, hist, curve, task, tc = run["model"], run["hist"], run["curve"], run["task"], run["tc"]
    seconds = run["seconds"]
    val = task.validation(model)
    base = corpus.baselines(task.tokenizer)
    pr = head_detector.probe(model, n=32, batch=16, seed=1)
    jump = next((row["step"] for row in curve if row["induction_max"] >= 0.4), None)
    meta = dict(task=a.task, steps=tc.steps, seed=a.seed, threads=a.threads, train_seconds=round(seconds, 1),
                train_config=dict(batch_size=tc.batch_size, lr=tc.lr, warmup=tc.warmup, schedule=tc.schedule,
                                  weight_decay=tc.weight_decay, induction_share=task.induction_share,
                                  warmup_share=task.warmup_share, warmup_steps=task.warmup_steps,
                                  run_len=list(task.run_len), block_size=task.block_size),
                validation=dict(val, plays=corpus.manifest()["val"]["plays"]), baselines=base,
                probe={k: np.round(v, 4).tolist() for k, v in pr["scores"].items()},
                probe_loss_first=pr["loss_first"], probe_loss_second=pr["loss_second"],
                induction_step=jump, curve=curve, example=task.example(), scoring="all",
                command="python -m gptviz.train " + " ".join(argv if argv is not None else sys.argv[1:]))
    if model.config.n_expert:  # each layer's share of routing choices per expert, over the held-out plays
        load = expert_load(model, held_out_windows(task.tokenizer, task.block_size, max_windows=256))
        meta["expert_load"] = {str(layer): np.round(v, 4).tolist() for layer, v in load.items()}
        meta["expert_load_windows"] = 256
    save_checkpoint(a.out, model, task.tokenizer, **meta)
    if a.task == "shakespeare-induction":
        # snapshots for the Training page's replay: every 1000 steps, and every evaluation (50 steps) within
        # 200 steps of the jump
        keep = [(s, sd) for s, sd in hist.snapshots
                if s % 1000 == 0 or s == hist.snapshots[-1][0] or (jump is not None and abs(s - jump) <= 200)]
        save_snapshots(Path(a.out).with_suffix(".snapshots.safetensors"), keep)
    print(f"saved {a.out}: val {val['nats_per_char']:.4f} nats/char ({val['bits_per_char']:.4f} bits/char), "
          f"bigram {base['bigram']['nats_per_char']:.4f}, unigram {base['unigram']['nats_per_char']:.4f}, "
          f"{seconds:.1f}s, induction step {jump}")
    return 0


def save_snapshots(path, snapshots) -> None:
    """Weights at several steps of a run, in float16, as one safetensors file (``step{N}.{name}``)."""
    flat = {f"step{s}.{k}": v.detach().to(torch.float16).contiguous() for s, sd in snapshots for k, v in sd.items()
            if not k.endswith("attn.bias")}
    safetensors.torch.save_file(flat, str(path), metadata={"steps": json.dumps([s for s, _ in snapshots])})


def load_snapshots(path) -> list[tuple[int, dict]]:
    """``save_snapshots``'s file back as ``[(step, state_dict)]`` (float32)."""
    flat = safetensors.torch.load_file(str(path))
    out: dict[int, dict] = {}
    for k, v in flat.items():
        step, name = k.split(".", 1)
        out.setdefault(int(step[4:]), {})[name] = v.float()
    return sorted(out.items())


def main(argv=None, prog: str = "python -m gptviz.train") -> int:
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    p.add_argument("--task", choices=sorted(DEFAULTS) + sorted(CORPUS_RECIPES) + ["reverse"], required=True)
    p.add_argument("--out", required=True, help="where to write the .safetensors checkpoint")
    p.add_argument("--steps", type=int)
    p.add_argument("--batch-size", type=int)
    p.add_argument("--lr", type=float)
    p.add_argument("--optimizer", choices=["adamw", "adam", "sgd"])
    p.add_argument("--n-layer", type=int)
    p.add_argument("--n-head", type=int)
    p.add_argument("--n-embd", type=int)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2, help="CPU threads for torch (default 2)")
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    if a.task in CORPUS_RECIPES:
        return _train_corpus(a, argv)
    if a.task == "reverse":  # an encoder-decoder model: its own loop in gptviz.training.reversal
        return reverse_cli(a, argv)
    d = dict(DEFAULTS[a.task])
    for k in ("steps", "batch_size", "lr", "optimizer", "n_layer", "n_head", "n_embd"):
        if getattr(a, k) is not None:
            d[k] = getattr(a, k)
    task = make_task(a.task)
    cfg = model_config_for(task, d["n_layer"], d["n_head"], d["n_embd"], seed=a.seed)
    tc = TrainConfig(steps=d["steps"], batch_size=d["batch_size"], lr=d["lr"], optimizer=d["optimizer"], seed=a.seed,
                     eval_every=max(1, d["steps"] // 20), snapshot_every=max(1, d["steps"] // 20))
    t0 = time.perf_counter()

    def progress(step, h):
        print(f"step {step:5d}  loss {h.eval_loss[-1]:.4f}  accuracy {h.accuracy[-1]:.4f}  "
              f"{time.perf_counter() - t0:6.1f}s", flush=True)

    model, hist = train(GPT(cfg), task, tc, on_progress=progress)
    acc = hist.accuracy[-1]
    save_checkpoint(a.out, model, task.tokenizer, task=a.task, steps=tc.steps, seed=a.seed, accuracy=acc,
                    final_loss=hist.eval_loss[-1], example=task.example(),
                    command="python -m gptviz.train " + " ".join(argv if argv is not None else sys.argv[1:]))
    print(f"saved {a.out}: accuracy {acc:.4f}, loss {hist.eval_loss[-1]:.4f}, {hist.seconds:.1f}s")
    target = d.get("target")
    if target is not None and acc < target:
        print(f"warning: accuracy {acc:.4f} is below the target {target}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
