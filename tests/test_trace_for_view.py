"""``trace_for_view`` traces without gradients in torch's inference mode (issue 37: 8 % of a small model's trace).
The numbers must be those of a plain trace: every step, with edits written into the forward pass, and on a long text
whose slim steps are worked out later, outside inference mode."""
import numpy as np
import torch

from gptviz.config import ModelConfig
from gptviz.model.build import build_model
from gptviz.present.page_context import trace_for_view
from gptviz.run import edits as edit_specs
from gptviz.run.trace import trace

CFG = ModelConfig(vocab_size=64, block_size=160, n_layer=2, n_head=2, n_embd=16)


def _model():
    torch.manual_seed(0)
    return build_model(CFG).eval()


def _ids(B, T, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, CFG.vocab_size, (B, T), generator=g)
    return tuple(tuple(r) for r in x.tolist()), tuple(tuple(r[1:]) + (-100,) for r in x.tolist())


def _plain(model, x, y, spec, slim=False):
    with torch.no_grad():
        edits = edit_specs.from_spec(spec, CFG.n_layer, CFG.n_head, CFG) if spec else None
        return trace(model, torch.tensor(x), targets=torch.tensor(y), edits=edits, slim=slim)


def test_a_view_trace_equals_a_plain_trace_with_edits_and_in_every_batch_row():
    model = _model()
    x, y = _ids(3, 12)
    spec = {"set": [{"name": "blocks.0.hook_resid_mid", "index": [2, 4], "values": [0.5] * 16}], "heads_off": [[1, 1]]}
    got = trace_for_view(model, x, y, None, edit_specs.spec_key(spec), False)
    want = _plain(model, x, y, spec)
    assert set(got.names()) == set(want.names())
    for n in want.names():
        np.testing.assert_array_equal(np.asarray(got[n]), want[n].numpy(), err_msg=n)
    assert np.all(np.asarray(got["blocks.1.attn.hook_pattern"])[:, 1] == 0)  # the head is off in every row
    np.testing.assert_array_equal(np.asarray(got["blocks.0.hook_resid_mid"])[2, 4], 0.5)  # row 2, not only row 0
    assert float(got.breakdown["loss"]) == float(want.breakdown["loss"])
    assert not torch.is_inference_mode_enabled()  # left as it was


def test_a_long_texts_slim_steps_read_later_equal_the_plain_ones(monkeypatch):
    from gptviz.present import page_context

    monkeypatch.setattr(page_context, "SLIM_TRACE_BYTES", 0)  # this small model's trace counts as long
    model = _model()
    x, y = _ids(2, 150, seed=2)
    got = trace_for_view(model, x, y, None, edit_specs.spec_key(None), False)
    assert got.slim  # scores worked out when read, after the trace, outside inference mode
    want = _plain(model, x, y, None)
    for n in ("blocks.1.attn.hook_scores_raw", "blocks.1.attn.hook_attn_scores", "blocks.0.attn.hook_pattern",
              "hook_probs"):
        np.testing.assert_allclose(np.asarray(got[n]), want[n].numpy(), rtol=0, atol=0, err_msg=n)


def test_with_gradients_the_view_trace_still_takes_them():
    model = _model()
    x, y = _ids(2, 10)
    got = trace_for_view(model, x, y, None, edit_specs.spec_key(None), True)
    want = trace(model, torch.tensor(x), targets=torch.tensor(y), grads=True)
    name = "blocks.0.attn.hook_pattern"
    np.testing.assert_allclose(np.asarray(got.grad(name)), want.grad(name).numpy(), rtol=1e-5, atol=1e-7)
