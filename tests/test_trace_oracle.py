"""The trace's mapping and its bookkeeping (gptviz.run.trace), against values worked out independently: plain PyTorch
autograd on the model itself, the step names and counts written out by hand, and the documented messages.

What test_trace.py leaves open: the step count and ``repr``, filtering by layer and stage, the parameter gradients'
norms against autograd's (a parameter off the loss path gets zeros), a fixed position table's gradient, the numpy
copy and the frozen trace of every part (loss breakdown, mask, targets, an encoder-decoder model's source, a slim
trace's notes), the edits' conversions and messages, and every refusal with the message a user reads."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import CONFIGS, random_ids

from gptviz import GPT, ModelConfig, trace
from gptviz.model.build import build_model
from gptviz.run.on_demand import OnDemand

PLAIN = CONFIGS["gpt2-like"]  # 2 layers, 2 heads, n_embd 8, learned positions, tied embeddings
SIN_UNTIED = CONFIGS["rms-post-sin-gelu"]  # sinusoidal positions (a fixed table), untied unembedding
GQA = CONFIGS["gqa-swiglu"]
SEQ2SEQ = ModelConfig(vocab_size=12, block_size=8, n_layer=1, n_head=2, n_embd=8, n_enc_layer=1)


def test_a_missing_step_is_a_key_error_naming_it():
    tr = trace(GPT(PLAIN), random_ids(PLAIN))
    with pytest.raises(KeyError) as e:
        tr["blocks.7.attn.hook_q"]
    assert e.value.args[0] == "'blocks.7.attn.hook_q' was not recorded in this trace"
    assert "blocks.7.attn.hook_q" not in tr and "hook_logits" in tr
    assert isinstance(tr["hook_logits"], torch.Tensor)


def test_the_step_count_repr_and_filters_by_layer_and_stage():
    """Counted by hand for a pre-norm GPT-2-like block: resid_pre, 3 norm steps, 9 attention steps (qkv, q, k, v,
    raw, scaled, masked scores, pattern, z), attn_out, resid_mid, 3 norm steps, pre, post, mlp_out, resid_post:
    22 a layer; 2 layers + embed + pos_embed + 3 final-norm steps + logits = 50, and 3 loss steps with targets."""
    m = GPT(PLAIN)
    x = random_ids(PLAIN, B=3, T=5)
    tr = trace(m, x)
    assert len(tr) == len(list(tr)) == 50
    assert repr(tr) == "Trace(50 steps, idx shape (3, 5))"
    with_targets = trace(m, x, targets=x)
    assert len(with_targets) == 53 and list(with_targets)[-3:] == ["hook_probs", "hook_loss_per_token", "hook_loss"]
    names = list(tr)
    assert tr.names() == names
    assert tr.names(layer=1) == [n for n in names if n.startswith("blocks.1.")]
    assert len(tr.names(layer=1)) == 22
    assert tr.names(stage="norm") == [n for n in names if ".ln1." in n or ".ln2." in n or n.startswith("ln_final.")]
    assert tr.names(layer=0, stage="attention") == [n for n in names if n.startswith("blocks.0.attn.")] + [
        "blocks.0.hook_attn_out"]
    assert tr.names(layer=None, stage="output") == ["hook_logits"]
    assert [s.name for s in tr.steps] == names
    assert tr.info("blocks.1.attn.hook_pattern").layer == 1 and tr.info("hook_embed").stage == "embed"


def test_logits_loss_and_the_kind_of_values():
    m = GPT(PLAIN)
    x = random_ids(PLAIN)
    y = random_ids(PLAIN, seed=4)
    plain = trace(m, x)
    assert plain.loss is None and plain.breakdown is None and plain.grad("hook_logits") is None
    assert plain.config is m.config and torch.equal(plain.idx, x)
    assert plain.param_grads is None and plain.param_grad_norms() == {}
    assert not plain.is_numpy and plain.numpy().is_numpy
    tr = trace(m, x, targets=y)
    ref = F.cross_entropy(tr.logits.reshape(-1, PLAIN.vocab_size), y.reshape(-1))
    assert isinstance(tr.loss, float) and tr.loss == pytest.approx(ref.item(), rel=1e-6)
    assert tr.logits is tr["hook_logits"]
    assert tr.breakdown["loss"] is tr["hook_loss"] and tr.breakdown["loss_per_token"] is tr["hook_loss_per_token"]


def _autograd(m, x, y):
    """Plain torch autograd on the model itself: its loss's gradient for every parameter."""
    m.zero_grad(set_to_none=True)
    _, loss = m(x, y)
    loss.backward()
    out = {n: p.grad.clone() if p.grad is not None else torch.zeros_like(p) for n, p in m.named_parameters()}
    m.zero_grad(set_to_none=True)
    return out


def test_parameter_gradient_norms_against_autograd_for_rows_with_padding():
    m = GPT(SIN_UNTIED).eval()
    x = random_ids(SIN_UNTIED, B=3, seed=2)
    y = random_ids(SIN_UNTIED, B=3, seed=6)
    y[2, 4:] = -100
    ref = _autograd(m, x, y)
    for weight_grads in ("tensors", "norms"):
        tr = trace(m, x, targets=y, grads=True, weight_grads=weight_grads)
        norms = tr.param_grad_norms()
        assert list(norms) == list(ref)
        for n, g in ref.items():
            assert isinstance(norms[n], float)
            assert norms[n] == pytest.approx(float(g.norm()), rel=1e-5, abs=1e-9), (weight_grads, n)
        as_np = tr.numpy()
        assert as_np.param_grad_norms() == pytest.approx(norms, rel=1e-6)
        if weight_grads == "tensors":
            for n, g in ref.items():
                torch.testing.assert_close(tr.param_grads[n], g, atol=1e-6, rtol=1e-5)
                assert isinstance(as_np.param_grads[n], np.ndarray)
            dropped = tr.numpy().without_param_grads()
            assert dropped.param_grads is None and dropped.param_grad_norms() == pytest.approx(norms, rel=1e-6)
            assert dropped.numpy().param_grad_norms() == dropped.param_grad_norms()


def test_a_parameter_off_the_loss_path_gets_a_zero_gradient():
    """The token embedding replaced by a fixed tensor: the (untied) embedding matrix no longer reaches the loss, so
    its gradient is zero (as autograd leaves it: no gradient at all), with the matrix's shape."""
    m = GPT(SIN_UNTIED)
    x = random_ids(SIN_UNTIED)
    fixed = torch.randn(2, SIN_UNTIED.block_size, SIN_UNTIED.n_embd, generator=torch.Generator().manual_seed(1))
    tr = trace(m, x, targets=x, grads=True, edits={"hook_embed": fixed})
    g = tr.param_grads["transformer.wte.weight"]
    assert g.shape == m.transformer.wte.weight.shape and not g.any()
    assert tr.param_grad_norms()["transformer.wte.weight"] == 0.0
    assert tr.param_grad_norms()["lm_head.weight"] > 0
    fast = trace(m, x, targets=x, grads=True, edits={"hook_embed": fixed}, weight_grads="norms")
    assert fast.param_grad_norms()["transformer.wte.weight"] == 0.0


def test_a_fixed_position_tables_gradient_is_recorded():
    """The sinusoidal table needs no gradient itself, but the trace makes it a leaf: embed and pos_embed are added,
    so ∂loss/∂pos_embed equals ∂loss/∂embed, and both equal ∂loss/∂(their sum) from autograd on a copy of the sum."""
    m = GPT(SIN_UNTIED)
    x = random_ids(SIN_UNTIED)
    tr = trace(m, x, targets=x, grads=True)
    g_pos, g_tok = tr.grad("hook_pos_embed"), tr.grad("hook_embed")
    assert g_pos is not None and torch.equal(g_pos, g_tok)
    assert not tr["hook_pos_embed"].requires_grad
    # the gradient at the first block's input, where the sum enters (post-norm: resid_pre is the sum itself)
    torch.testing.assert_close(g_pos, tr.grad("blocks.0.hook_resid_pre"))
    assert g_pos.abs().sum() > 0


def test_the_numpy_copy_and_the_frozen_trace_cover_every_part():
    m = GPT(PLAIN)
    x = random_ids(PLAIN)
    mask = torch.ones_like(x)
    mask[1, 5:] = 0
    y = x.clone()
    y[1, 5:] = -100
    tr = trace(m, x, targets=y, attention_mask=mask, grads=True)
    npt = tr.numpy()
    assert npt is not tr and tr.to_numpy().is_numpy
    for v in (npt.idx, npt.targets, npt.attention_mask, npt.breakdown["loss_per_token"], npt.breakdown["probs"]):
        assert isinstance(v, np.ndarray)
    assert np.array_equal(npt.attention_mask, mask.numpy()) and np.array_equal(npt.targets, y.numpy())
    assert npt.breakdown["n_valid"] == tr.breakdown["n_valid"]
    assert npt.source == {} and npt.config is tr.config
    frozen = npt.freeze()
    assert frozen is npt
    for v in (npt.idx, npt.targets, npt.attention_mask, npt.breakdown["probs"], npt["hook_embed"],
              npt.grad("hook_embed"), npt.param_grads["transformer.wte.weight"]):
        assert not v.flags.writeable
    assert tr["hook_embed"].numpy().flags.writeable  # the torch trace is left as it was
    plain = trace(m, x).numpy()
    assert plain.targets is None and plain.attention_mask is None and plain.grads is None
    assert plain.param_grads is None and plain.breakdown is None
    plain.freeze()  # nothing optional to freeze: no error


def test_a_slim_traces_notes_survive_numpy_and_are_frozen():
    m = GPT(PLAIN)
    x = random_ids(PLAIN)
    mask = torch.ones_like(x)
    mask[0, 6:] = 0
    tr = trace(m, x, attention_mask=mask, slim=True)
    note = tr._acts["blocks.1.attn.hook_attn_scores"]
    assert isinstance(note, OnDemand) and isinstance(note.masked, torch.Tensor)
    npt = tr.numpy().freeze()
    np_note = npt._acts["blocks.1.attn.hook_attn_scores"]
    assert isinstance(np_note, OnDemand) and isinstance(np_note.masked, np.ndarray)
    assert not np_note.masked.flags.writeable
    assert np.array_equal(np_note.masked, note.masked.numpy())
    # the masked scores, worked out when read: the scaled scores with −∞ where the mask (padding, future) says
    scores = npt["blocks.1.attn.hook_attn_scores"]
    assert isinstance(scores, np.ndarray) and not scores.flags.writeable
    assert np.isneginf(scores[0, :, :, 6:]).all() and np.isneginf(scores[1][:, 0, 1:]).all()


def test_a_slim_trace_remembers_its_last_four_worked_out_values():
    """Reading a worked-out step twice gives the very same tensor; the memo holds only the last four."""
    m = GPT(PLAIN)
    tr = trace(m, random_ids(PLAIN), slim=True)
    assert tr.slim and not trace(m, random_ids(PLAIN)).slim
    a = tr["blocks.0.attn.hook_scores_raw"]
    assert tr["blocks.0.attn.hook_scores_raw"] is a
    for n in ("blocks.0.attn.hook_scores_scaled", "blocks.1.attn.hook_scores_raw", "blocks.1.attn.hook_scores_scaled",
              "blocks.1.attn.hook_attn_scores", "blocks.0.attn.hook_attn_scores"):
        tr[n]
    assert len(tr._memo) == 4
    again = tr["blocks.0.attn.hook_scores_raw"]
    assert again is not a and torch.equal(again, a)  # pushed out of the memo, worked out again
    # a step and its gradient are remembered apart
    g = trace(m, random_ids(PLAIN), targets=random_ids(PLAIN, seed=2), grads=True, slim=True)
    fwd, grad = g["blocks.0.attn.hook_scores_raw"], g.grad("blocks.0.attn.hook_scores_raw")
    assert fwd.shape == grad.shape and not torch.equal(fwd, grad)
    assert g.grad("blocks.0.attn.hook_scores_raw") is grad and g["blocks.0.attn.hook_scores_raw"] is fwd


def test_slim_shapes_of_worked_out_steps():
    """Every step of a slim trace of a GQA model with a gated MLP has the shape the hook-name scheme gives it."""
    B, T = 2, 6
    tr = trace(GPT(GQA), random_ids(GQA, B=B, T=T), targets=random_ids(GQA, B=B, T=T), slim=True)
    c = GQA
    assert isinstance(tr._acts["blocks.0.attn.hook_k_rep"], OnDemand)
    assert isinstance(tr._acts["blocks.1.mlp.hook_post"], OnDemand) and isinstance(tr._acts["hook_probs"], OnDemand)
    assert "probs" not in tr.breakdown
    assert tr.shape("blocks.0.attn.hook_k_rep") == tr.shape("blocks.1.attn.hook_v_rep") == (B, T, c.n_head, c.d_head)
    assert tr.shape("blocks.1.attn.hook_scores_raw") == (B, c.n_head, T, T)
    assert tr.shape("blocks.1.mlp.hook_post") == (B, T, c.d_mlp)
    assert tr.shape("hook_probs") == (B, T, c.vocab_size)
    assert tr.shape("blocks.0.attn.hook_k") == (B, T, c.n_kv_head, c.d_head)
    for n in ("blocks.0.attn.hook_k_rep", "blocks.1.mlp.hook_post", "hook_probs", "blocks.1.attn.hook_scores_raw"):
        assert tuple(tr[n].shape) == tr.shape(n), n
    torch.testing.assert_close(tr["hook_probs"], torch.softmax(tr["hook_logits"], -1))


def test_an_encoder_decoder_traces_source_is_kept_converted_and_frozen_and_never_slim():
    m = build_model(SEQ2SEQ)
    x = random_ids(SEQ2SEQ, B=2, T=5)
    src = random_ids(SEQ2SEQ, B=2, T=SEQ2SEQ.enc_len, seed=3)
    pad = torch.ones_like(src)
    pad[1, 3:] = 0
    tr = trace(m, x, enc_input=src, enc_mask=pad.tolist(), slim=True)
    assert not tr.slim and "blocks.0.attn.hook_scores_raw" in tr._acts
    assert set(tr.source) == {"enc_input", "enc_mask"}
    assert torch.equal(tr.source["enc_input"], src) and torch.equal(tr.source["enc_mask"], pad)
    npt = tr.numpy().freeze()
    assert isinstance(npt.source["enc_mask"], np.ndarray) and not npt.source["enc_mask"].flags.writeable
    assert np.array_equal(npt.source["enc_input"], src.numpy())
    with pytest.raises(ValueError, match="layers"):
        trace(m, x, enc_input=src, layers=[0])


def test_inputs_given_as_lists_are_made_tensors():
    m = GPT(PLAIN)
    x = random_ids(PLAIN, B=2, T=4)
    mask = torch.ones_like(x)
    mask[0, 3] = 0
    tr = trace(m, x.tolist(), targets=x.tolist(), attention_mask=mask.tolist())
    ref = trace(m, x, targets=x, attention_mask=mask)
    assert torch.equal(tr.idx, x) and torch.equal(tr.targets, x) and torch.equal(tr.attention_mask, mask)
    assert torch.equal(tr.logits, ref.logits) and tr.loss == ref.loss


# ------------------------------------------------------------------------------------------------ edits
def test_a_numpy_edit_of_another_dtype_is_used_as_the_steps_dtype():
    m = GPT(PLAIN)
    x = random_ids(PLAIN)
    base = trace(m, x)
    new = base["hook_embed"].double().numpy() * 0.5
    tr = trace(m, x, edits={"hook_embed": new})
    assert tr["hook_embed"].dtype == torch.float32
    torch.testing.assert_close(tr["hook_embed"], torch.from_numpy(new).float())
    assert tr["blocks.0.hook_resid_pre"].dtype == torch.float32


def test_an_edit_function_that_writes_in_place_gets_a_copy():
    """A head switched off by writing into the pattern it is given, with gradients: softmax's backward needs the
    pattern as computed, so the edit must get a copy. The trace equals that of the same edit made out of place."""
    m = GPT(PLAIN)
    x = random_ids(PLAIN)

    def in_place(p):
        p[:, 1] = 0
        return p

    out_of_place = {"blocks.1.attn.hook_pattern": lambda p: p.index_fill(1, torch.tensor([1]), 0.0)}
    tr = trace(m, x, targets=x, grads=True, edits={"blocks.1.attn.hook_pattern": in_place})
    ref = trace(m, x, targets=x, grads=True, edits=out_of_place)
    assert not tr["blocks.1.attn.hook_pattern"][:, 1].any() and tr.loss == ref.loss
    for n in ("blocks.1.attn.hook_scores_raw", "blocks.0.hook_resid_pre", "hook_embed"):
        assert torch.equal(tr.grad(n), ref.grad(n)), n


def test_bad_edits_name_the_step_and_the_shapes():
    m = GPT(PLAIN)
    x = random_ids(PLAIN)
    with pytest.raises(ValueError) as e:
        trace(m, x, edits={"hook_embed": lambda t: None})
    assert str(e.value) == "the edit function for 'hook_embed' returned None: return the new tensor"
    with pytest.raises(ValueError) as e:
        trace(m, x, edits={"hook_embed": torch.zeros(3)})
    assert str(e.value) == "the edit for 'hook_embed' has shape (3,), but the step has shape (2, 8, 8)"
    with pytest.raises(ValueError) as e:
        trace(m, x, edits={"blocks.9.hook_resid_pre": lambda t: t, "blocks.5.attn.hook_q": lambda t: t,
                           "hook_embed": lambda t: t})
    assert str(e.value) == "cannot edit 'blocks.5.attn.hook_q', 'blocks.9.hook_resid_pre': no such step in this model"


# ------------------------------------------------------------------------------------------------ refusals
def test_refusals_say_what_is_wrong():
    m = GPT(PLAIN)
    x = random_ids(PLAIN)
    with pytest.raises(ValueError) as e:
        trace(m, x, enc_input=x, enc_mask=torch.ones_like(x))
    assert str(e.value) == "enc_input, enc_mask is for an encoder-decoder model; this one is decoder-only"
    with pytest.raises(ValueError) as e:
        trace(m, x, enc_out=torch.zeros(2, 8, 8))
    assert str(e.value) == "enc_out is for an encoder-decoder model; this one is decoder-only"
    with pytest.raises(ValueError) as e:
        trace(m, x, grads=True)
    assert str(e.value) == "grads=True needs targets: the gradient is of the loss"
    with pytest.raises(ValueError) as e:
        trace(m, x, targets=x, grads=True, weight_grads="all")
    assert str(e.value) == "weight_grads='all' must be 'tensors' or 'norms'"
    for bad in ([2], [1, 2], [-1]):
        with pytest.raises(ValueError) as e:
            trace(m, x, targets=x, grads=True, layers=bad)
        assert str(e.value) == f"layers={sorted(bad)} must be layers of a decoder-only model (0 to 1)"


def test_the_layers_kept_are_exactly_those_asked_for():
    """layers=(1,) (the last layer, given as a tuple) keeps layer 1's steps and those outside every
    block; layers=[0, 1] keeps everything; the values are those of the whole trace."""
    m = GPT(PLAIN)
    x = random_ids(PLAIN)
    full = trace(m, x, targets=x)
    one = trace(m, x, targets=x, layers=(1,))
    assert list(one) == [n for n in full if not n.startswith("blocks.0.")]
    assert list(trace(m, x, targets=x, layers=[0, 1])) == list(full)
    assert list(trace(m, x, layers=[])) == [n for n in trace(m, x) if not n.startswith("blocks.")]
    for n in one:
        assert torch.equal(one[n], full[n]), n


def test_a_slim_traces_score_gradients_go_through_an_edited_pattern():
    """A pattern scaled by 0.5 (not a head switched off, where the gradient is zero either way): the gradient of the
    masked scores is the chain rule through the edit, worked out here by autograd on softmax alone, from the recorded
    scores and ∂loss/∂(edited pattern): s → 0.5 · softmax(s), then (· ∂loss/∂pattern) summed."""
    m = GPT(PLAIN)
    x = random_ids(PLAIN)
    half = {"blocks.1.attn.hook_pattern": lambda p: p * 0.5}
    tr = trace(m, x, targets=x, grads=True, slim=True, edits=half)
    s = tr["blocks.1.attn.hook_attn_scores"].clone().requires_grad_(True)
    g_pattern = tr.grad("blocks.1.attn.hook_pattern")
    (0.5 * torch.softmax(s, -1) * g_pattern).sum().backward()
    torch.testing.assert_close(tr.grad("blocks.1.attn.hook_attn_scores"), s.grad, atol=1e-7, rtol=1e-5)
    torch.testing.assert_close(tr.grad("blocks.1.attn.hook_scores_scaled"), s.grad.masked_fill(s.isinf(), 0.0),
                               atol=1e-7, rtol=1e-5)


def test_a_slim_trace_with_gradients_keeps_no_probabilities_either():
    """hook_probs is off the loss's path (the loss is computed from the logits), so even with gradients a slim trace
    works it out when read, as softmax of the logits, and has no gradient for it."""
    m = GPT(PLAIN)
    x = random_ids(PLAIN)
    tr = trace(m, x, targets=x, grads=True, slim=True)
    assert isinstance(tr._acts["hook_probs"], OnDemand) and "probs" not in tr.breakdown
    assert tr.grad("hook_probs") is None
    torch.testing.assert_close(tr["hook_probs"], torch.softmax(tr["hook_logits"], -1))
