"""Training, snapshots, tasks and the shipped checkpoints."""
from pathlib import Path

import numpy as np
import pytest
import torch

from gptviz import GPT, load_checkpoint, trace
from gptviz.run.generation import generate
from gptviz.training.loop import TrainConfig, model_at, model_config_for, train
from gptviz.training.tasks import IGNORE_INDEX, InductionTask, SortTask, TextTask, make_task

CKPT = Path(__file__).resolve().parents[1] / "checkpoints"


def test_sort_batches_are_what_they_say():
    t = SortTask()
    b = t.batch(4, torch.Generator().manual_seed(0))
    for row_x, row_y in zip(b.x, b.y):
        letters = row_x[: t.length]
        assert row_x[t.length] == t.sep_id
        scored = row_y[row_y != IGNORE_INDEX]
        assert torch.equal(scored, letters.sort().values)


def test_induction_batches_repeat_a_run_of_distinct_letters():
    t = InductionTask()
    b = t.batch(8, torch.Generator().manual_seed(1))
    for x, y in zip(b.x, b.y):
        pos = (y != IGNORE_INDEX).nonzero().flatten()
        n = int(pos[0])
        assert torch.equal(x[n:2 * n], x[:n]) and len(set(x[:n].tolist())) == n
        assert torch.equal(y[pos], x[pos + 1])


@pytest.mark.parametrize("name,layers,steps,drop", [("sort", 1, 60, 0.5), ("induction", 2, 150, 0.3),
                                                    ("text", 1, 60, 1.0)])
def test_training_lowers_the_loss(name, layers, steps, drop):
    task = make_task(name)
    cfg = model_config_for(task, n_layer=layers, n_head=2, n_embd=32, seed=0)
    model = GPT(cfg)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    trained, h = train(model, task, TrainConfig(steps=steps, batch_size=32, lr=1e-2, eval_every=20, snapshot_every=20))
    assert h.eval_loss[-1] < h.eval_loss[0] - drop, (h.eval_loss[0], h.eval_loss[-1])
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # the original is untouched
    assert trained is not model and not trained.training
    if name == "sort":  # seeded: the same run again gives the same numbers (once is enough: it is the same loop)
        _, h2 = train(model, task, TrainConfig(steps=steps, batch_size=32, lr=1e-2, eval_every=20, snapshot_every=20))
        assert h2.loss == h.loss


def test_snapshots_replay_the_pattern_forming():
    task = make_task("sort")
    cfg = model_config_for(task, n_layer=1, n_head=2, n_embd=32)
    trained, h = train(GPT(cfg), task, TrainConfig(steps=40, batch_size=16, lr=1e-2, snapshot_every=10, eval_every=10))
    assert [s for s, _ in h.snapshots] == [0, 10, 20, 30, 40]
    b = task.batch(1, torch.Generator().manual_seed(3))
    first = trace(model_at(trained, h.snapshots[0][1]), b.x)["blocks.0.attn.hook_pattern"]
    assert torch.equal(first, trace(GPT(cfg), b.x)["blocks.0.attn.hook_pattern"])  # step 0 = the untrained model
    last = trace(model_at(trained, h.snapshots[-1][1]), b.x)["blocks.0.attn.hook_pattern"]
    assert torch.equal(last, trace(trained, b.x)["blocks.0.attn.hook_pattern"])  # last = the trained model
    assert not torch.allclose(first, last)


def test_training_can_be_stopped():
    task = make_task("sort")
    cfg = model_config_for(task, n_layer=1, n_head=1, n_embd=16)
    calls = []
    _, h = train(GPT(cfg), task, TrainConfig(steps=100, batch_size=8),
                 should_stop=lambda: len(calls.append(1) or calls) > 7)
    assert h.stopped and h.steps[-1] == 7 and h.snapshots[-1][0] == 7


def test_bad_training_settings():
    with pytest.raises(ValueError, match="optimizer"):
        TrainConfig(optimizer="lion")
    with pytest.raises(ValueError, match="lr"):
        TrainConfig(lr=0)
    with pytest.raises(ValueError, match="too short"):
        TextTask(text="hi")


def test_shipped_sort_checkpoint_sorts_unseen_sequences():
    ck = load_checkpoint(CKPT / "sort.safetensors")
    task = SortTask()
    assert ck.meta["task"] == "sort" and ck.tokenizer.vocab == task.tokenizer.vocab
    b = task.batch(500, torch.Generator().manual_seed(12345))  # a seed training never used
    L = task.length
    # greedy decoding of all 500 prompts at once: L forward passes of the whole batch (every row has the same
    # length, so nothing is padded) in place of 500 × L passes of one row
    x = b.x[:, : L + 1]
    with torch.no_grad():
        for _ in range(L):
            x = torch.cat([x, ck.model.run(x)[:, -1].argmax(-1, keepdim=True)], dim=1)
    out, want = x[:, L + 1:], b.x[:, :L].sort(dim=1).values
    assert (out == want).float().mean() >= 0.99, float((out == want).float().mean())
    for row in range(0, 500, 125):  # and the app's own generate() gives the same tokens, one row at a time
        assert [s.token for s in generate(ck.model, b.x[row, : L + 1].tolist(), L, greedy=True)] == out[row].tolist()


def test_shipped_induction_checkpoint_has_an_induction_head():
    ck = load_checkpoint(CKPT / "induction.safetensors")
    task = InductionTask()
    b = task.batch(64, torch.Generator().manual_seed(777))
    tr = trace(ck.model, b.x)
    scores = {}
    for l in range(ck.config.n_layer):
        p = tr[f"blocks.{l}.attn.hook_pattern"]  # (B, H, T, T)
        for h in range(ck.config.n_head):
            vals = []
            for i in range(b.x.shape[0]):
                xs = b.x[i].tolist()
                for t in (b.y[i] != IGNORE_INDEX).nonzero().flatten().tolist():
                    prev = max(j for j in range(t) if xs[j] == xs[t])  # the previous occurrence of this token
                    vals.append(float(p[i, h, t, prev + 1]))  # weight on the token that followed it
            scores[(l, h)] = float(np.mean(vals))
    best = max(scores, key=scores.get)
    # a uniform causal head would put about 1/t ≈ 0.07 there
    assert scores[best] > 0.5, scores
