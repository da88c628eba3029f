"""Training: a plain, seeded loop with snapshots, stoppable between steps.

The loop never touches a model it did not make: ``train`` copies the model it is given, so a model
shared by other sessions stays as it was.
"""
from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch

from ..model.gpt import GPT
from .tasks import Task

OPTIMIZERS = ("adamw", "adam", "sgd")

# What the tasks are trained with unless told otherwise: each reaches its accuracy target on two CPU
# cores within a minute (measured numbers are in the README).
DEFAULTS = {
    "sort": dict(n_layer=2, n_head=2, n_embd=48, steps=600, batch_size=64, lr=3e-3, optimizer="adamw", target=0.99),
    "induction": dict(n_layer=2, n_head=4, n_embd=64, steps=1500, batch_size=64, lr=1e-2, optimizer="adamw",
                      target=0.95),
    "text": dict(n_layer=2, n_head=2, n_embd=48, steps=800, batch_size=32, lr=3e-3, optimizer="adamw", target=None),
}


def model_config_for(task, n_layer: int, n_head: int, n_embd: int, seed: int = 0, **overrides):
    """A ModelConfig sized for a task: its vocabulary and context, the given shape."""
    from ..config import ModelConfig

    return ModelConfig(vocab_size=task.vocab_size, block_size=task.block_size, n_layer=n_layer, n_head=n_head,
                       n_embd=n_embd, seed=seed, **overrides)


@dataclass
class TrainConfig:
    steps: int = 300
    batch_size: int = 32
    lr: float = 3e-3
    optimizer: str = "adamw"
    weight_decay: float = 0.01
    seed: int = 0
    snapshot_every: int = 25
    eval_every: int = 25
    grad_clip: float = 1.0
    schedule: str = "cosine"  # "cosine": decay to a tenth of lr over the run; "constant": lr throughout
    warmup: int = 0  # steps of linear warm-up from 0 to lr

    def __post_init__(self):
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer={self.optimizer!r} must be one of {', '.join(OPTIMIZERS)}")
        for name in ("steps", "batch_size", "snapshot_every", "eval_every"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name}={v!r} must be a whole number of at least 1")
        if self.schedule not in ("cosine", "constant"):
            raise ValueError(f"schedule={self.schedule!r} must be 'cosine' or 'constant'")
        if isinstance(self.warmup, bool) or not isinstance(self.warmup, int) or self.warmup < 0:
            raise ValueError(f"warmup={self.warmup!r} must be a whole number of at least 0")
        if not (isinstance(self.lr, (int, float)) and math.isfinite(self.lr) and 0 < self.lr <= 10):
            raise ValueError(f"lr={self.lr!r} must be above 0 and at most 10")


@dataclass
class History:
    steps: list[int] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    eval_steps: list[int] = field(default_factory=list)
    eval_loss: list[float] = field(default_factory=list)
    accuracy: list[float] = field(default_factory=list)
    snapshots: list[tuple[int, dict]] = field(default_factory=list)  # (step, state_dict)
    seconds: float = 0.0
    stopped: bool = False


def lr_factor(cfg: TrainConfig, i: int) -> float:
    """The learning rate at step ``i`` as a share of ``cfg.lr``: linear warm-up, then constant or a cosine
    decay to a tenth (big steps first, fine ones at the end). A constant schedule does not depend on the
    length of the run, so a shorter run is exactly the start of a longer one."""
    if cfg.warmup and i < cfg.warmup:
        return (i + 1) / cfg.warmup
    if cfg.schedule == "constant":
        return 1.0
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(i, cfg.steps) / cfg.steps))


def make_optimizer(model: GPT, cfg: TrainConfig) -> torch.optim.Optimizer:
    params = [p for p in model.parameters() if p.requires_grad]
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(params, lr=cfg.lr, momentum=0.9)
    if cfg.optimizer == "adam":
        return torch.optim.Adam(params, lr=cfg.lr)
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr)


def snapshot(model: GPT) -> dict:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


@torch.no_grad()
def evaluate(model: GPT, task: Task, batch, ) -> tuple[float, float]:
    logits, loss = model(batch.x, batch.y)
    return float(loss), task.accuracy(logits, batch.y)


def train(model: GPT, task: Task, cfg: TrainConfig, on_progress: Optional[Callable[[int, History], None]] = None,
          should_stop: Optional[Callable[[], bool]] = None, copy_model: bool = True) -> tuple[GPT, History]:
    """Train (a copy of) ``model`` on ``task``. Returns the trained model and its history.

    ``on_progress(step, history)`` is called after every evaluation; ``should_stop()`` is asked before
    every step. Snapshots (step 0 included) are kept every ``snapshot_every`` steps and at the end.
    Seeded: the same model, task and config give the same result.
    """
    if task.vocab_size > model.config.vocab_size:
        raise ValueError(f"the task needs vocab_size ≥ {task.vocab_size}, the model has {model.config.vocab_size}")
    model = copy.deepcopy(model) if copy_model else model
    g = torch.Generator().manual_seed(cfg.seed)
    eval_batch = task.batch(256, torch.Generator().manual_seed(10_000 + cfg.seed))
    opt = make_optimizer(model, cfg)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: lr_factor(cfg, i))
    hist = History()
    hist.snapshots.append((0, snapshot(model)))
    el, acc = evaluate(model.eval(), task, eval_batch)
    hist.eval_steps.append(0), hist.eval_loss.append(el), hist.accuracy.append(acc)
    t0 = time.perf_counter()
    # dropout is the only thing train() mode changes; the module's flag is set on our own copy
    for step in range(1, cfg.steps + 1):
        if should_stop is not None and should_stop():
            hist.stopped = True
            break
        model.train()
        if hasattr(task, "step"):
            task.step = step  # a task with a curriculum changes its batches with the step
        b = task.batch(cfg.batch_size, g)
        _, loss = model(b.x, b.y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.grad_clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        sched.step()
        hist.steps.append(step)
        hist.loss.append(loss.item())
        if step % cfg.eval_every == 0 or step == cfg.steps:
            el, acc = evaluate(model.eval(), task, eval_batch)
            hist.eval_steps.append(step), hist.eval_loss.append(el), hist.accuracy.append(acc)
            if on_progress is not None:
                on_progress(step, hist)
        if step % cfg.snapshot_every == 0:
            hist.snapshots.append((step, snapshot(model)))
    last = hist.steps[-1] if hist.steps else 0
    if hist.snapshots[-1][0] != last:
        hist.snapshots.append((last, snapshot(model)))
    hist.seconds = time.perf_counter() - t0
    model.eval()
    model.zero_grad(set_to_none=True)
    return model, hist


def model_at(model: GPT, state: dict) -> GPT:
    """A new model with ``model``'s config and the weights of one snapshot."""
    m = GPT(model.config)
    m.load_state_dict(state)
    return m
