"""The loss's log-softmax, a few rows at a time (``gptviz.run.loss.target_log_probs``), and a slim trace's loss without
its (B, T, V) softmax. The oracle: PyTorch's own ``F.log_softmax`` over the whole table and ``F.cross_entropy``."""
import pytest
import torch
import torch.nn.functional as F

from gptviz import GPT, ModelConfig
from gptviz.run import loss as loss_module
from gptviz.run.loss import loss_breakdown, target_log_probs
from gptviz.run.trace import trace


@pytest.mark.parametrize("rows", [1, 3, 4, 100])
def test_the_targets_log_probabilities_in_chunks_equal_the_whole_tables_and_so_do_their_gradients(rows, monkeypatch):
    V = 37
    monkeypatch.setattr(loss_module, "LOG_SOFTMAX_CHUNK", rows * V)  # rows at a time: 10 rows in 10, 4, 3 or 1 chunks
    g = torch.Generator().manual_seed(rows)
    logits = (4 * torch.randn(2, 5, V, generator=g)).requires_grad_(True)
    ids = torch.randint(0, V, (2, 5), generator=g)
    got = target_log_probs(logits, ids)
    want = F.log_softmax(logits, dim=-1).gather(-1, ids[..., None])[..., 0]
    assert got.shape == (2, 5) and torch.equal(got, want)
    w = torch.randn(2, 5, generator=g)
    (ga,) = torch.autograd.grad((got * w).sum(), logits)
    (gb,) = torch.autograd.grad((want * w).sum(), logits)
    torch.testing.assert_close(ga, gb, rtol=0, atol=0)


def test_the_loss_of_a_big_vocabulary_in_chunks_is_cross_entropy():
    """151,936 logits a row (Qwen's vocabulary): 13 rows a chunk, so 40 rows take 4 chunks, the last of 1 row."""
    V = 151_936
    assert loss_module.LOG_SOFTMAX_CHUNK // V == 13
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 20, V, generator=g)
    y = torch.randint(0, V, (2, 20), generator=g)
    y[1, 15:] = -100
    out = loss_breakdown(logits, y, with_probs=False)
    assert "probs" not in out
    want = F.cross_entropy(logits.reshape(-1, V), y.reshape(-1), ignore_index=-100, reduction="none").reshape(2, 20)
    torch.testing.assert_close(out["loss_per_token"], want, rtol=1e-6, atol=1e-6)
    assert float(out["loss"]) == pytest.approx(float(want[y != -100].mean()), rel=1e-6)
    assert torch.equal(loss_breakdown(logits, y)["probs"], F.softmax(logits, dim=-1))


def test_a_slim_trace_computes_no_vocabulary_sized_softmax_and_still_reads_the_probabilities(monkeypatch):
    cfg = ModelConfig(vocab_size=53, block_size=32, n_layer=1, n_head=2, n_embd=16)
    m = GPT(cfg)
    x = torch.randint(0, 53, (2, 12), generator=torch.Generator().manual_seed(1))
    tables = []
    real = F.softmax
    monkeypatch.setattr(loss_module.F, "softmax",
                        lambda t, dim=None, **kw: tables.append(tuple(t.shape)) or real(t, dim=dim, **kw))
    slim = trace(m, x, targets=x, slim=True)
    assert (2, 12, 53) not in tables
    full = trace(m, x, targets=x)
    assert (2, 12, 53) in tables
    monkeypatch.setattr(loss_module.F, "softmax", real)
    torch.testing.assert_close(torch.as_tensor(slim["hook_probs"]), F.softmax(full.logits, dim=-1),
                               rtol=1e-6, atol=1e-7)
    assert float(slim.loss) == pytest.approx(float(F.cross_entropy(full.logits.reshape(-1, 53), x.reshape(-1))),
                                             rel=1e-6)
    edited = trace(m, x, targets=x, slim=True, edits={"hook_probs": lambda p: p * 0.5})  # an edit keeps the table
    torch.testing.assert_close(torch.as_tensor(edited["hook_probs"]), 0.5 * F.softmax(full.logits, dim=-1))
