"""Part 4, training: steps per second of the training loop alone and of a whole ``train()`` call ÷ forwards/s."""
from __future__ import annotations

import time

import torch

from tools.bench.report import row


def bench_training(quick: bool) -> list[dict]:
    from gptviz.config import preset
    from gptviz.model.gpt import GPT
    from gptviz.training.loop import DEFAULTS, TrainConfig, model_config_for, train
    from gptviz.training.tasks import make_task

    rows = []
    steps = 30 if quick else 150
    for label, task_name in (("text", "text"), ("sort", "sort")):
        task = make_task(task_name)
        if task_name == "text":
            cfg = preset("default", vocab_size=task.vocab_size)
            bs = 32
        else:
            d = DEFAULTS["sort"]
            cfg = model_config_for(task, d["n_layer"], d["n_head"], d["n_embd"])
            bs = d["batch_size"]
        model = GPT(cfg)
        tc = TrainConfig(steps=steps, batch_size=bs, eval_every=steps, snapshot_every=steps)
        stamps: list[float] = []

        def stamp(stamps: list[float] = stamps) -> bool:  # train() asks this before every step: the loop's clock
            stamps.append(time.perf_counter())
            return False

        t = time.perf_counter()
        train(model, task, tc, should_stop=stamp)
        whole = steps / (time.perf_counter() - t)
        loop = (len(stamps) - 1) / (stamps[-1] - stamps[0])  # steps 1 … N-1, nothing but the loop between
        b = task.batch(bs, torch.Generator().manual_seed(0))
        t = time.perf_counter()
        with torch.no_grad():
            for _ in range(steps):
                model(b.x)
        fps = steps / (time.perf_counter() - t)
        T = b.x.shape[1]
        rows.append(row(f"training steps/s · {label} task · the loop alone", f"{cfg.num_params():,} params · "
                        f"B={bs} T={T}", f"{loop:.0f} steps/s vs {fps:.0f} forwards/s", loop / fps))
        rows.append(row(f"training steps/s · {label} task · whole train() call",
                        f"{cfg.num_params():,} params · B={bs} T={T}",
                        f"{whole:.0f} steps/s (with copy, 2 evaluations, snapshots) vs {fps:.0f} forwards/s",
                        whole / fps))
    return rows
