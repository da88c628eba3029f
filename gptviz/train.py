"""Train a small model on a task and save it as a checkpoint.

    python -m gptviz.train --task sort --out checkpoints/sort.safetensors
    python -m gptviz.train --task induction --out checkpoints/induction.safetensors
    python -m gptviz.train --task text --out checkpoints/text.safetensors

Seeded: the same command gives the same weights on the same machine and library versions.
"""
from __future__ import annotations

import argparse
import sys
import time

import torch

from .checkpoint import save_checkpoint
from .model import GPT
from .tasks import make_task
from .training import DEFAULTS, TrainConfig, model_config_for, train


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m gptviz.train", description=__doc__.split("\n\n")[0])
    p.add_argument("--task", choices=sorted(DEFAULTS), required=True)
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
        print(f"step {step:5d}  loss {h.eval_loss[-1]:.4f}  accuracy {h.accuracy[-1]:.4f}  {time.perf_counter() - t0:6.1f}s",
              flush=True)

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
