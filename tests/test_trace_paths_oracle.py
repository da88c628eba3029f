"""The trace's less travelled paths (gptviz.run.trace.trace), each against an independent computation: the model's
own forward pass, plain autograd, the documented messages, and what autograd is asked for.

- an encoder-decoder with no encoder layers (``n_enc_layer=0``: cross-attention to a fixed or given encoder output)
  takes ``enc_out``, is never slim and refuses ``layers``, as every encoder-decoder does;
- targets or a mask of the wrong shape are refused with the message naming them, before anything runs;
- an edit of the per-token losses is what the loss averages;
- ``weight_grads="norms"`` works the embedding and unembedding norms out from their inputs' and outputs' gradients
  (it never asks autograd for those vocab × n_embd matrices), in float64;
- a slim trace with gradients asks autograd for no (T × T) pattern gradient where it can work it out from ∂loss/∂z,
  and where a query row has no key to look at (left padding) it keeps them, equal to the full trace's.
"""
import pytest
import torch
from conftest import CONFIGS, random_ids

from gptviz import GPT, ModelConfig, trace
from gptviz.model.build import build_model
from gptviz.run import trace as trace_module

PLAIN = CONFIGS["gpt2-like"]  # 2 layers, 2 heads, n_embd 8, learned positions, tied embeddings
UNTIED = CONFIGS["rms-post-sin-gelu"]
NO_ENCODER = ModelConfig(vocab_size=12, block_size=8, n_layer=1, n_head=2, n_embd=8, n_enc_layer=0, enc_len=5)


def next_tokens(idx):
    y = torch.full_like(idx, -100)
    y[:, :-1] = idx[:, 1:]
    return y


def test_an_encoder_decoder_without_encoder_layers_takes_enc_out_and_is_never_slim():
    m = build_model(NO_ENCODER).eval()
    x = random_ids(NO_ENCODER, B=2, T=6)
    enc = torch.randn(2, NO_ENCODER.enc_len, NO_ENCODER.n_embd, generator=torch.Generator().manual_seed(1))
    tr = trace(m, x, enc_out=enc, slim=True)
    with torch.no_grad():
        want = m(x, enc_out=enc)[0]
    assert torch.allclose(tr["hook_logits"], want, atol=1e-6)
    assert not torch.allclose(tr["hook_logits"], trace(m, x)["hook_logits"], atol=1e-3)  # enc_out was read
    assert not tr.slim and isinstance(tr._acts["blocks.0.attn.hook_scores_raw"], torch.Tensor)
    with pytest.raises(ValueError) as e:
        trace(m, x, layers=[0])
    assert str(e.value) == "layers=[0] must be layers of a decoder-only model (0 to 0)"


def test_targets_or_a_mask_of_the_wrong_shape_are_refused_by_name():
    m = GPT(PLAIN)
    x = random_ids(PLAIN, B=2, T=6)
    with pytest.raises(ValueError) as e:
        trace(m, x, targets=x[:, :5])
    assert str(e.value) == "targets must have the shape of idx (2, 6), not (2, 5)"
    with pytest.raises(ValueError) as e:
        trace(m, x, attention_mask=torch.ones(2, 5, dtype=torch.long))
    assert str(e.value) == "attention_mask must have the shape of idx (2, 6), not (2, 5)"
    with pytest.raises(ValueError) as e:
        trace(m, x, targets=x, attention_mask=torch.ones(1, 6, dtype=torch.long))
    assert str(e.value) == "attention_mask must have the shape of idx (2, 6), not (1, 6)"


def test_an_edit_of_the_per_token_losses_is_what_the_loss_averages():
    m = GPT(PLAIN)
    x = random_ids(PLAIN, B=2, T=6)
    y = next_tokens(x)
    y[1, 2] = -100  # ignored: not counted

    def halve_row_1(t):
        t[1] = t[1] / 2
        return t

    tr = trace(m, x, targets=y, edits={"hook_loss_per_token": halve_row_1})
    with torch.no_grad():
        logits = m(x)[0]
    per = torch.nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="none",
                                            ignore_index=-100).view(2, 6)
    per[1] = per[1] / 2
    want = per.sum() / (y != -100).sum()
    assert torch.allclose(tr["hook_loss_per_token"], per, atol=1e-6)
    assert torch.allclose(tr.breakdown["loss_per_token"], per, atol=1e-6)
    assert float(tr.breakdown["loss"]) == pytest.approx(float(want), rel=1e-6)
    assert float(tr["hook_loss"]) == pytest.approx(float(want), rel=1e-6)


@pytest.mark.parametrize("cfg", [PLAIN, UNTIED], ids=["tied", "untied"])
def test_norms_of_the_embedding_gradients_are_worked_out_without_their_matrices(cfg, monkeypatch):
    """The norms equal autograd's full gradients' norms; autograd is never asked for the (vocab × n_embd) matrices:
    the norms come from ``_embedding_grad_norms``, once, for each embedding matrix."""
    m = GPT(cfg)
    x = random_ids(cfg, B=2, T=6)
    y = next_tokens(x)
    loss = m(x, y)[1]
    want = dict(zip([n for n, _ in m.named_parameters()],
                    torch.autograd.grad(loss, [p for _, p in m.named_parameters()])))
    calls, asked = [], []
    real_norms, real_grad = trace_module._embedding_grad_norms, torch.autograd.grad
    monkeypatch.setattr(trace_module, "_embedding_grad_norms", lambda *a: calls.append(a[-1]) or real_norms(*a))
    monkeypatch.setattr(torch.autograd, "grad", lambda out, inputs, **kw: asked.extend(inputs) or
                        real_grad(out, inputs, **kw))
    tr = trace(m, x, targets=y, grads=True, weight_grads="norms")
    embed = {n for n, p in m.named_parameters() if p is m.transformer.wte.weight or p is m.lm_head.weight}
    assert len(calls) == 1 and set(calls[0]) == embed
    assert not any(a is m.transformer.wte.weight or a is m.lm_head.weight for a in asked)
    got = tr.param_grad_norms()
    assert set(got) == set(want)
    for n, g in want.items():
        assert got[n] == pytest.approx(float(g.double().norm()), rel=1e-5), n


def test_the_embedding_norms_are_worked_in_float64():
    """A float64 model's norms agree with autograd's to float64 rounding, not float32's."""
    torch.manual_seed(0)
    m = GPT(UNTIED).double()
    x = random_ids(UNTIED, B=2, T=6)
    y = next_tokens(x)
    loss = m(x, y)[1]
    want = dict(zip([n for n, _ in m.named_parameters()],
                    torch.autograd.grad(loss, [p for _, p in m.named_parameters()])))
    got = trace(m, x, targets=y, grads=True, weight_grads="norms").param_grad_norms()
    for n in ("transformer.wte.weight", "lm_head.weight"):
        assert got[n] == pytest.approx(float(want[n].norm()), rel=1e-12), n


LONGER = ModelConfig(vocab_size=32, block_size=16, n_layer=2, n_head=2, n_embd=8)


def _shapes_asked(monkeypatch, *args, **kw):
    asked = []
    real_grad = torch.autograd.grad
    monkeypatch.setattr(torch.autograd, "grad", lambda out, inputs, **k: asked.extend(tuple(t.shape) for t in inputs)
                        or real_grad(out, inputs, **k))
    tr = trace(*args, **kw)
    monkeypatch.setattr(torch.autograd, "grad", real_grad)
    return tr, asked


def test_a_slim_backward_asks_autograd_for_no_pattern_gradient(monkeypatch):
    m = GPT(LONGER)
    x = random_ids(LONGER, B=2, T=12)
    y = next_tokens(x)
    tr, asked = _shapes_asked(monkeypatch, m, x, targets=y, grads=True, slim=True)
    assert (2, LONGER.n_head, 12, 12) not in asked, asked
    full = trace(m, x, targets=y, grads=True)
    for layer in range(LONGER.n_layer):
        n = f"blocks.{layer}.attn.hook_pattern"
        assert torch.allclose(torch.as_tensor(tr.grad(n)), full.grad(n), atol=1e-7), n


def test_with_a_query_row_that_sees_no_key_the_slim_backward_keeps_its_gradients(monkeypatch):
    """Left padding: query 0 of row 1 may look at no key. The pattern's and the masked scores' gradients are then
    asked of autograd and kept, and every gradient equals the full trace's."""
    m = GPT(LONGER)
    x = random_ids(LONGER, B=2, T=12)
    y = next_tokens(x)
    mask = torch.ones_like(x)
    mask[1, :3] = 0
    y[1, :3] = -100
    tr, asked = _shapes_asked(monkeypatch, m, x, targets=y, attention_mask=mask, grads=True, slim=True)
    assert asked.count((2, LONGER.n_head, 12, 12)) == 2 * LONGER.n_layer  # pattern and attn_scores, each layer
    full = trace(m, x, targets=y, attention_mask=mask, grads=True)
    for n in full:
        g_full, g_slim = full.grad(n), tr.grad(n)
        assert (g_full is None) == (g_slim is None), n
        if g_full is not None:
            assert torch.allclose(torch.as_tensor(g_slim), g_full, atol=1e-7, equal_nan=True), n


def test_a_backward_trace_holds_no_autograd_graph():
    """After a trace with gradients, nothing it returns keeps the graph alive: no step, gradient or loss term."""
    m = GPT(PLAIN)
    x = random_ids(PLAIN, B=2, T=6)
    tr = trace(m, x, targets=next_tokens(x), grads=True)
    tensors = [tr._acts[n] for n in tr] + [g for g in tr.grads.values() if isinstance(g, torch.Tensor)]
    tensors += [v for v in tr.breakdown.values() if isinstance(v, torch.Tensor)]
    assert tensors and not [t for t in tensors if t.requires_grad or t.grad_fn is not None]


def test_a_model_with_dropout_is_traced_as_it_runs_in_eval_mode():
    """trace never trains: with dropout 0.5 its logits are a plain forward's in eval mode, whatever mode the model is
    left in."""
    model = GPT(ModelConfig(vocab_size=13, block_size=6, n_layer=2, n_head=2, n_embd=8, dropout=0.5, seed=0))
    idx = torch.tensor([[1, 5, 2, 7, 3], [4, 4, 9, 0, 12]])
    model.eval()
    with torch.no_grad():
        want = model(idx)[0]
    model.train()
    torch.manual_seed(0)
    assert torch.equal(torch.as_tensor((trace(model, idx)["hook_logits"])), want)


def test_a_slim_trace_divides_by_the_square_root_of_attn_scale_dim_where_the_config_sets_one():
    """Gemma's query_pre_attn_scalar (attn_scale_dim 20, not d_head 4): the slim trace's worked-out scaled scores are
    the raw ones over √20, as the full trace's."""
    cfg = ModelConfig(vocab_size=13, block_size=6, n_layer=2, n_head=2, n_embd=8, attn_scale_dim=20.0, seed=2)
    model = GPT(cfg).eval()
    idx = torch.tensor([[1, 5, 2, 7, 3], [4, 4, 9, 0, 12]])
    full, slim = trace(model, idx), trace(model, idx, slim=True)
    for layer in range(2):
        raw = torch.as_tensor((full[f"blocks.{layer}.attn.hook_scores_raw"]))
        got = torch.as_tensor((slim[f"blocks.{layer}.attn.hook_scores_scaled"]))
        assert torch.allclose(got, raw / 20.0 ** 0.5, atol=1e-6)
        assert torch.equal(got, torch.as_tensor((full[f"blocks.{layer}.attn.hook_scores_scaled"])))
