"""Training the encoder-decoder model: the reversal task's recipe and command, and the teaching material's own loop.

``train_reverse`` (run by ``python -m gptviz.train --task reverse``, through ``reverse_cli``) trains a one-layer
encoder and decoder to reverse a sequence; ``alignment`` measures how much its cross-attention looks at the
aligned source position. ``material_recipe`` is the material's loop on the ``decoder-cross-attention`` preset,
and ``MATERIAL_LOOP_CODE`` the same loop as it would be written by hand.
"""
from __future__ import annotations

import sys
import time
from typing import Optional

import torch

from ..config import ModelConfig, preset
from ..model.checkpoint import save_checkpoint
from ..model.encoder_decoder import Seq2Seq
from ..run.trace import trace
from .loop import TrainConfig, lr_factor
from .tasks import ReverseTask

# --------------------------------------------------------------------------- the reversal task
# A one-layer encoder and a one-layer decoder; learned positions (a reversal is all about positions).
REVERSE_RECIPE = dict(model=dict(n_layer=1, n_enc_layer=1, n_head=1, n_embd=32, pos_encoding="learned"),
                      steps=1000, batch_size=64, lr=3e-3, eval_size=1000, eval_every=100)


def reverse_config(task, seed: int = 0, **overrides) -> ModelConfig:
    """The reversal recipe's model config for ``task`` (its vocabulary and lengths), with ``overrides``."""
    m = dict(REVERSE_RECIPE["model"], **overrides)
    return ModelConfig(vocab_size=task.vocab_size, block_size=task.block_size, enc_len=task.enc_len, seed=seed, **m)


@torch.no_grad()
def evaluate_reverse(model: Seq2Seq, task, n: int = 1000, seed: int = 10_000) -> tuple[float, float]:
    """(loss, token accuracy) of the teacher-forced decoder on ``n`` fresh sequences from a seeded generator."""
    b = task.batch(n, torch.Generator().manual_seed(seed))
    logits, loss = model.eval()(b.x, b.y, enc_input=b.src)
    return float(loss), task.accuracy(logits, b.y)


def train_reverse(steps: Optional[int] = None, batch_size: Optional[int] = None, lr: Optional[float] = None,
                  seed: int = 0, task=None, on_progress=None, **model_overrides):
    """Train an encoder-decoder model on ``ReverseTask`` with AdamW (cosine decay to a tenth). Seeded.

    Returns ``(model, history)``; history has ``steps``, ``loss`` (training, per step), ``eval_steps``,
    ``eval_loss``, ``accuracy`` (on 1000 held-out sequences) and ``seconds``."""
    r = REVERSE_RECIPE
    task = task or ReverseTask()
    steps = steps or r["steps"]
    batch_size = batch_size or r["batch_size"]
    lr = lr or r["lr"]
    model = Seq2Seq(reverse_config(task, seed, **model_overrides))
    tc = TrainConfig(steps=steps, batch_size=batch_size, lr=lr, seed=seed)
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": tc.weight_decay},
                             {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}], lr=lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: lr_factor(tc, i))
    g = torch.Generator().manual_seed(seed)
    hist = dict(steps=[], loss=[], eval_steps=[], eval_loss=[], accuracy=[], seconds=0.0)
    t0 = time.perf_counter()
    for step in range(1, steps + 1):
        model.train()
        b = task.batch(batch_size, g)
        _, loss = model(b.x, b.y, enc_input=b.src)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, tc.grad_clip)
        opt.step()
        sched.step()
        hist["steps"].append(step)
        hist["loss"].append(loss.item())
        if step % r["eval_every"] == 0 or step == steps:
            el, acc = evaluate_reverse(model, task, r["eval_size"], 10_000 + seed)
            hist["eval_steps"].append(step), hist["eval_loss"].append(el), hist["accuracy"].append(acc)
            if on_progress is not None:
                on_progress(step, hist)
    hist["seconds"] = time.perf_counter() - t0
    model.eval()
    model.zero_grad(set_to_none=True)
    return model, hist


@torch.no_grad()
def alignment(model: Seq2Seq, task, n: int = 200, seed: int = 1) -> torch.Tensor:
    """Cross-attention weight on the aligned source position (L-1-t for output position t), per layer and head,
    averaged over ``n`` seeded sequences and every output position: (n_layer, n_head)."""
    b = task.batch(n, torch.Generator().manual_seed(seed))
    tr = trace(model, b.x, enc_input=b.src)
    L = task.length
    rows = []
    for layer in range(model.config.n_layer):
        p = tr[f"blocks.{layer}.cross_attn.hook_pattern"]  # (B, nh, T, S)
        t = torch.arange(L)
        rows.append(p[:, :, t, L - 1 - t].mean(dim=(0, 2)))
    return torch.stack(rows)


def reverse_cli(a, argv=None) -> int:
    """``python -m gptviz.train --task reverse --out FILE``: train, report, save the checkpoint."""
    task = ReverseTask()
    t0 = time.perf_counter()

    def progress(step, h):
        print(f"step {step:5d}  loss {h['eval_loss'][-1]:.4f}  accuracy {h['accuracy'][-1]:.4f}  "
              f"{time.perf_counter() - t0:6.1f}s", flush=True)

    overrides = {k: getattr(a, k) for k in ("n_layer", "n_head", "n_embd") if getattr(a, k, None) is not None}
    model, hist = train_reverse(a.steps, a.batch_size, a.lr, a.seed, task, progress, **overrides)
    acc = hist["accuracy"][-1]
    align = alignment(model, task)
    save_checkpoint(a.out, model, task.tokenizer, task="reverse", steps=hist["steps"][-1], seed=a.seed,
                    threads=a.threads, accuracy=acc, final_loss=hist["eval_loss"][-1],
                    train_seconds=round(hist["seconds"], 1), example=task.example(),
                    decoder_example=task.decoder_text(task.example()), alignment=align.tolist(),
                    command="python -m gptviz.train " + " ".join(argv if argv is not None else sys.argv[1:]))
    print(f"saved {a.out}: accuracy {acc:.4f}, loss {hist['eval_loss'][-1]:.4f}, {hist['seconds']:.1f}s, "
          f"cross-attention on the aligned position per head {[round(v, 3) for v in align.flatten().tolist()]}")
    if acc < 0.99:
        print(f"warning: accuracy {acc:.4f} is below the target 0.99", file=sys.stderr)
        return 1
    return 0


# --------------------------------------------------------------------------- the material's training loop
def material_recipe(steps: int = 200, lr: float = 0.01, batch: int = 10, seed: int = 0, shift: bool = False,
                    config: Optional[ModelConfig] = None) -> dict:
    """The teaching material's loop on the ``decoder-cross-attention`` preset: plain SGD at ``lr``, one
    full-batch step per iteration, on a fixed seeded random encoder output (batch, 8, 32) and fixed seeded
    integer targets (batch, 8).

    The decoder reads the target sequence itself and is scored on it (``shift=False``, as the material's loop
    feeds ``tgt`` both ways); ``shift=True`` makes it next-token prediction instead (token 0 as the start).
    Returns ``{"loss": [loss before each step] + [final loss], "model": trained model, "enc_out", "targets"}``.
    """
    cfg = config or preset("decoder-cross-attention", seed=seed)
    model = Seq2Seq(cfg)
    g = torch.Generator().manual_seed(seed)
    enc_out = model.fixed_enc_out(batch)  # (batch, enc_len, n_embd)
    targets = torch.randint(0, cfg.vocab_size, (batch, cfg.block_size), generator=g)
    x = torch.cat([torch.zeros(batch, 1, dtype=torch.long), targets[:, :-1]], 1) if shift else targets
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    model.train()
    for _ in range(steps):
        _, loss = model(x, targets, enc_out=enc_out)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    model.eval()
    with torch.no_grad():
        losses.append(float(model(x, targets, enc_out=enc_out)[1]))
    model.zero_grad(set_to_none=True)
    return {"loss": losses, "model": model, "enc_out": enc_out, "targets": targets, "inputs": x}


# The material's loop as it would be written by hand (shown on the Training page next to material_recipe).
MATERIAL_LOOP_CODE = """model = Decoder(...)                     # 1 layer, d_model 32, 8 heads, post-norm, 17,516 parameters
enc_out = torch.randn(10, 8, 32)          # a fixed random encoder output
tgt = torch.randint(0, 12, (10, 8))       # fixed random targets
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(steps):
    logits = model(tgt, enc_out)          # the decoder reads the targets themselves
    loss = F.cross_entropy(logits.view(-1, 12), tgt.view(-1))
    opt.zero_grad(); loss.backward(); opt.step()"""  # noqa: E501 - code shown to students, as it would be written
