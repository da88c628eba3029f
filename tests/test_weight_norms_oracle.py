"""``weight_grads="norms"``: every Linear layer's ‖∂loss/∂W‖ and ‖∂loss/∂b‖ come from its outputs' gradients
(``gptviz.run.weight_norms``), never from the weight's gradient, which autograd is not even asked for.

The oracle is plain autograd on the model's own forward pass and loss (``model(idx, targets)``): the gradient of
every parameter, built in full, and its norm in float64."""
import threading

import pytest
import torch

from gptviz import GPT, ModelConfig
from gptviz.config import preset
from gptviz.model.build import build_model
from gptviz.model.layers import LINEAR_TAP, Linear
from gptviz.run import trace as trace_module
from gptviz.run.trace import trace
from gptviz.run.weight_norms import LinearTaps, weight_grad_norm

# n_embd 32 and a few rows: N·(in + out) < in·out for every projection, so the Gram path is the one taken
SMALL = dict(vocab_size=40, block_size=16, n_layer=2, n_head=2, n_embd=32, seed=1)
CONFIGS = {
    "gpt2": dict(SMALL),
    "untied-bias-free": dict(SMALL, tie_weights=False, bias=False),
    "llama": dict(SMALL, pos_encoding="rope", norm="rmsnorm", gated_mlp=True, bias=False, n_kv_head=1),
    "moe": dict(SMALL, n_expert=4, n_expert_active=2, d_expert=16),
}


def _stirred(model):
    with torch.no_grad():  # biases and gains away from 0 and 1, so a bias's norm is not a zero by accident
        g = torch.Generator().manual_seed(7)
        for p in model.parameters():
            p.add_(0.2 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return model


def _autograd_norms(model, idx, targets, **src):
    loss = model(idx, targets, **src)[1] if not src else model(idx, targets=targets, **src)[1]
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    got = torch.autograd.grad(loss, [p for _, p in params], allow_unused=True)
    return {n: 0.0 if g is None else float(g.double().norm()) for (n, _), g in zip(params, got)}


def _asked(monkeypatch):
    asked, real_grad = [], torch.autograd.grad
    monkeypatch.setattr(torch.autograd, "grad", lambda out, inputs, **kw: asked.extend(inputs) or
                        real_grad(out, inputs, **kw))
    return asked


@pytest.mark.parametrize("name", list(CONFIGS))
def test_every_weight_norm_equals_autograds_full_gradient_and_no_linear_weight_is_asked_for(name, monkeypatch):
    m = _stirred(GPT(ModelConfig(**CONFIGS[name])))
    g = torch.Generator().manual_seed(5)
    idx = torch.randint(0, 40, (2, 3), generator=g)
    y = torch.randint(0, 40, (2, 3), generator=g)
    y[1, 1:] = -100  # row 1 has one target only: its other positions send no gradient
    want = _autograd_norms(m, idx, y)
    asked = _asked(monkeypatch)
    got = trace(m, idx, targets=y, grads=True, weight_grads="norms").param_grad_norms()
    assert list(got) == [n for n, _ in m.named_parameters()]
    for n, w in want.items():
        assert got[n] == pytest.approx(w, rel=1e-5, abs=1e-9), n
    linears = [mod for mod in m.modules() if isinstance(mod, Linear)]
    assert linears
    for mod in linears:
        for p in (mod.weight, mod.bias):
            assert p is None or not any(a is p for a in asked)
    if name == "moe":  # the experts' stacked weights are no Linear: autograd gives theirs, as before
        experts = [p for n, p in m.named_parameters() if ".c_fc.weight" in n and p.dim() == 3]
        assert experts and all(any(a is p for a in asked) for p in experts)
    if "bias" in name or name == "llama":
        assert not any(n.endswith(".bias") for n in got)
    else:
        assert got["transformer.h.1.attn.c_attn.bias"] > 0


def test_a_layer_run_on_more_rows_than_its_size_goes_the_direct_way_and_agrees():
    """Many rows (N·(in + out) ≥ in·out): Gᵀ X is built, one layer at a time; the norms still equal autograd's."""
    m = _stirred(GPT(ModelConfig(vocab_size=30, block_size=64, n_layer=1, n_head=2, n_embd=8, seed=2)))
    idx = torch.randint(0, 30, (3, 40), generator=torch.Generator().manual_seed(1))
    want = _autograd_norms(m, idx, idx)
    got = trace(m, idx, targets=idx, grads=True, weight_grads="norms").param_grad_norms()
    for n, w in want.items():
        assert got[n] == pytest.approx(w, rel=1e-5, abs=1e-9), n


def test_an_encoder_decoder_models_norms_equal_autograds():
    """Seq2Seq: the encoder's and cross-attention's projections are Linear layers run on the source's rows."""
    m = _stirred(build_model(preset("decoder-cross-attention", n_enc_layer=1, n_embd=32, n_head=2)))
    g = torch.Generator().manual_seed(3)
    src = torch.randint(0, m.config.vocab_size, (2, m.config.enc_len), generator=g)
    idx = torch.randint(0, m.config.vocab_size, (2, 4), generator=g)
    loss = m(idx, targets=idx, enc_input=src)[1]
    params = [(n, p) for n, p in m.named_parameters() if p.requires_grad]
    want = {n: float(gr.double().norm()) if gr is not None else 0.0
            for (n, _), gr in zip(params, torch.autograd.grad(loss, [p for _, p in params], allow_unused=True))}
    got = trace(m, idx, targets=idx, grads=True, weight_grads="norms", enc_input=src).param_grad_norms()
    for n, w in want.items():
        assert got[n] == pytest.approx(w, rel=1e-5, abs=1e-9), n


@pytest.mark.parametrize("n,d_in,d_out", [(1, 5, 7), (3, 16, 48), (40, 8, 8), (6, 32, 4)])
def test_the_norm_of_g_transposed_x_both_ways(n, d_in, d_out):
    g = torch.Generator().manual_seed(n + d_in)
    X = torch.randn(n, d_in, generator=g, dtype=torch.float64)
    G = torch.randn(n, d_out, generator=g, dtype=torch.float64)
    want = float(torch.linalg.matrix_norm(G.T @ X))  # the Frobenius norm, written from its definition below too
    assert want == pytest.approx(float(sum((sum(G[r, o] * X[r, i] for r in range(n))) ** 2
                                           for o in range(d_out) for i in range(d_in))) ** 0.5, rel=1e-12)
    assert weight_grad_norm(X, G) == pytest.approx(want, rel=1e-12)


def test_the_tap_is_this_threads_and_is_gone_after_the_trace_even_when_it_fails():
    m = GPT(ModelConfig(**SMALL))
    idx = torch.randint(0, 40, (1, 4), generator=torch.Generator().manual_seed(0))
    seen_elsewhere = []

    def other_thread():  # a thread running the same model meanwhile never sees the trace's tap
        seen_elsewhere.append(LINEAR_TAP.get())
        m(idx)

    taps = LinearTaps(m)
    with taps.tapping():
        t = threading.Thread(target=other_thread)
        t.start()
        t.join()
        m(idx)
    assert seen_elsewhere == [None] and LINEAR_TAP.get() is None
    assert len(taps.outputs()) == 2 * 4  # one pass: c_attn, c_proj, c_fc, c_proj in each of 2 layers (tied head)

    def boom(x):
        raise RuntimeError("an edit that fails")
    with pytest.raises(RuntimeError, match="fails"):
        trace(m, idx, targets=idx, grads=True, weight_grads="norms", edits={"blocks.0.hook_resid_mid": boom})
    assert LINEAR_TAP.get() is None
    with pytest.raises(ValueError, match="gradients for"):
        taps.norms([None])


def test_a_shared_linear_is_left_to_autograd(monkeypatch):
    """A Linear whose weight another module also holds is not tapped: its gradient has other paths."""
    m = GPT(ModelConfig(**SMALL, tie_weights=False))
    m.lm_head.weight = m.transformer.wte.weight  # the head's weight held twice
    taps = LinearTaps(m, skip=trace_module.embedding_matrices(m))
    assert not taps.covers(m.lm_head.weight)
    assert taps.covers(m.transformer.h[0].attn.c_attn.weight)


def test_a_layer_called_twice_sums_both_calls_gradients():
    """∂loss/∂W of a layer run twice is the sum over both calls: its rows are stacked, not read from one call."""
    torch.manual_seed(0)
    lin = Linear(24, 40)
    with torch.no_grad():
        lin.weight.normal_()
        lin.bias.normal_()
    model = torch.nn.Sequential(lin)
    a, b = torch.randn(2, 24), torch.randn(3, 24)
    taps = LinearTaps(model)
    with taps.tapping():
        loss = (lin(a) ** 2).sum() + lin(b).tanh().sum() + (lin(lin(a)[:, :24]) ** 3).mean()
    outs = taps.outputs()
    assert len(outs) == 4
    got = taps.norms(torch.autograd.grad(loss, outs, retain_graph=True))
    gw, gb = torch.autograd.grad(loss, [lin.weight, lin.bias])
    assert got["0.weight"] == pytest.approx(float(gw.double().norm()), rel=1e-5)
    assert got["0.bias"] == pytest.approx(float(gb.double().norm()), rel=1e-5)


def test_an_untied_head_is_left_to_the_embedding_norms_and_a_frozen_bias_to_nobody():
    """The token embedding and the unembedding get their norms from trace's own Gram sums, never from a tap; a layer
    whose bias needs no gradient is not tapped, and that bias gets no norm, as autograd gives it none."""
    m = _stirred(GPT(ModelConfig(**SMALL, tie_weights=False)))
    skip = trace_module.embedding_matrices(m)
    assert len(skip) == 2 and skip[0] is m.transformer.wte.weight and skip[1] is m.lm_head.weight
    taps = LinearTaps(m, skip=skip)
    assert not taps.covers(m.lm_head.weight) and taps.covers(m.transformer.h[1].mlp.c_proj.weight)
    frozen = m.transformer.h[0].attn.c_proj
    frozen.bias.requires_grad_(False)
    assert not LinearTaps(m, skip=skip).covers(frozen.weight)
    idx = torch.randint(0, 40, (2, 3), generator=torch.Generator().manual_seed(2))
    want = _autograd_norms(m, idx, idx)
    got = trace(m, idx, targets=idx, grads=True, weight_grads="norms").param_grad_norms()
    assert "transformer.h.0.attn.c_proj.bias" not in got and set(got) == set(want)
    for n, w in want.items():
        assert got[n] == pytest.approx(w, rel=1e-5, abs=1e-9), n


def test_layers_whose_outputs_never_reach_the_loss_get_norms_of_zero():
    """An edit that fixes the stream after block 0 cuts every later layer off the loss: their norms are exactly 0,
    as the gradients autograd builds for them are."""
    m = _stirred(GPT(ModelConfig(**SMALL)))
    idx = torch.randint(0, 40, (2, 3), generator=torch.Generator().manual_seed(4))
    fixed = torch.randn(2, 3, 32, generator=torch.Generator().manual_seed(5))
    edits = {"blocks.1.hook_resid_post": fixed}
    full = trace(m, idx, targets=idx, grads=True, edits=edits).param_grad_norms()
    got = trace(m, idx, targets=idx, grads=True, weight_grads="norms", edits=edits).param_grad_norms()
    for n in ("transformer.h.1.mlp.c_fc.weight", "transformer.h.1.mlp.c_fc.bias", "transformer.h.0.attn.c_attn.bias"):
        assert got[n] == 0.0 == full[n], n
    assert got["transformer.wte.weight"] > 0  # the head still reads the fixed stream: the unembedding has a gradient
