"""Edit specs (gptviz.run.edits) against oracles written here: the edit functions on tensors filled by hand, token-id
edits at every boundary of the batch and the vocabulary with their notices word for word, a traced edit against the
unedited trace, and the Backward page's sentence about switched-off heads with each number taken by hand (numpy
slicing of the trace's gradients, per head and per column of the fused q/k/v projection)."""
import numpy as np
import pytest
import torch

from gptviz import GPT, ModelConfig, trace
from gptviz.run import edits

CFG = ModelConfig(vocab_size=13, block_size=6, n_layer=2, n_head=2, n_embd=8, seed=3)
ROPE = ModelConfig(vocab_size=13, block_size=6, n_layer=1, n_head=3, n_embd=12, d_head=4, pos_encoding="rope",
                   seed=5)
IDX = torch.tensor([[1, 5, 2, 7, 3], [4, 4, 9, 0, 12]])
TGT = torch.tensor([[5, 2, 7, 3, 8], [4, 9, 0, 12, 6]])


@pytest.fixture(scope="module")
def model():
    return GPT(CFG).eval()


# ----------------------------------------------------------------------------------------------------- specs and keys
def test_normalise_dedupes_and_sorts_heads_and_copies_the_set_list():
    items = [{"name": "hook_embed", "index": [0, 1], "values": [1.0]}]
    spec = {"set": items, "heads_off": [[1, 0], [0, 1], [1, 0]]}
    n = edits.normalise(spec)
    assert n == {"set": items, "heads_off": [(0, 1), (1, 0)]} and n["set"] is not items
    assert edits.normalise(None) == edits.normalise({}) == {"set": [], "heads_off": []} == edits.empty()
    assert edits.empty() is not edits.empty()  # a new spec each time, safe to fill in


def test_equal_specs_have_equal_keys_and_different_specs_different_ones():
    a = {"heads_off": [[1, 0], [0, 1]], "set": []}
    b = {"set": [], "heads_off": [[0, 1], [1, 0], [0, 1]]}
    assert edits.spec_key(a) == edits.spec_key(b) == '{"heads_off": [[0, 1], [1, 0]], "set": []}'
    assert edits.spec_key(None) == edits.spec_key(edits.EMPTY) == '{"heads_off": [], "set": []}'
    assert edits.spec_key({"heads_off": [[0, 0]]}) != edits.spec_key(a)


def test_a_spec_is_empty_only_without_sets_and_without_heads():
    assert edits.is_empty(None) and edits.is_empty(edits.EMPTY) and edits.is_empty({})
    assert not edits.is_empty({"heads_off": [[0, 0]]})
    assert not edits.is_empty({"set": [{"name": "hook_embed", "index": [0], "values": [0.0]}]})
    assert edits.heads_off_in({"heads_off": [[1, 1], [0, 1], [1, 0]]}, 1) == [0, 1]
    assert edits.heads_off_in({"heads_off": [[1, 1]]}, 0) == [] and edits.heads_off_in(None, 0) == []


# ------------------------------------------------------------------------------------------------ the edit functions
@pytest.mark.parametrize("layer,head", [(2, 0), (0, 2), (-1, 0), (0, -1)])
def test_a_head_outside_the_model_is_refused_by_name(layer, head):
    with pytest.raises(ValueError) as e:
        edits.from_spec({"heads_off": [[layer, head]]}, n_layer=2, n_head=2)
    assert str(e.value) == f"there is no head {head} in layer {layer} of this model"


def test_the_last_head_of_the_last_layer_is_accepted_and_only_its_weights_are_zeroed():
    out = edits.from_spec({"heads_off": [[1, 1]]}, n_layer=2, n_head=2)
    assert list(out) == ["blocks.1.attn.hook_pattern"]
    t = torch.arange(2 * 2 * 3 * 3, dtype=torch.float32).reshape(2, 2, 3, 3) + 1  # (batch, head, q, k), no zeros
    want = t.clone()
    want[:, 1] = 0
    assert torch.equal(out["blocks.1.attn.hook_pattern"](t.clone()), want)


def test_every_head_switched_off_in_one_layer_is_zeroed_not_only_the_first():
    out = edits.from_spec({"heads_off": [[0, 2], [0, 0]]}, n_layer=1, n_head=3)
    t = torch.arange(2 * 3 * 3 * 3, dtype=torch.float32).reshape(2, 3, 3, 3) + 1  # (batch, head, q, k), no zeros
    want = t.clone()
    want[:, 0] = 0
    want[:, 2] = 0
    assert torch.equal(out["blocks.0.attn.hook_pattern"](t.clone()), want)


def test_set_items_write_their_values_at_their_index_and_several_go_to_one_step():
    spec = {"set": [{"name": "hook_embed", "index": [1, 2], "values": [9.0, 8.0, 7.0]},
                    {"name": "hook_embed", "index": ["0", 0, 1], "values": -5},
                    {"name": "blocks.0.hook_resid_pre", "index": [0], "values": [[1.5] * 3] * 4}],
            "heads_off": [[0, 0]]}
    out = edits.from_spec(spec, n_layer=1, n_head=2)
    assert sorted(out) == ["blocks.0.attn.hook_pattern", "blocks.0.hook_resid_pre", "hook_embed"]
    t = torch.zeros(2, 4, 3)
    want = torch.zeros(2, 4, 3)
    want[1, 2] = torch.tensor([9.0, 8.0, 7.0])
    want[0, 0, 1] = -5
    assert torch.equal(out["hook_embed"](t), want)
    want2 = torch.zeros(2, 4, 3)
    want2[0] = 1.5
    assert torch.equal(out["blocks.0.hook_resid_pre"](torch.zeros(2, 4, 3)), want2)


def test_an_edit_that_no_longer_fits_says_where_and_which_shape():
    f = edits.from_spec({"set": [{"name": "hook_embed", "index": [3, 0], "values": [1.0, 2.0]}]}, 1, 1)["hook_embed"]
    with pytest.raises(ValueError) as e:
        f(torch.zeros(2, 4, 2))
    assert str(e.value) == "the edit of hook_embed at [3, 0] no longer fits its shape (2, 4, 2)"
    g = edits.from_spec({"set": [{"name": "hook_embed", "index": [1, 0], "values": [1.0, 2.0]}]}, 1, 1)["hook_embed"]
    with pytest.raises(ValueError) as e:
        g(torch.zeros(2, 4, 3))
    assert str(e.value) == "the edit of hook_embed at [1, 0] has (2,) values, not (3,)"


def test_a_traced_spec_changes_exactly_what_it_names(model):
    """Traced with a spec (one position of the embedding set, head 1 of layer 0 off) against the unedited trace: the
    embedding differs at that cell only, layer 0's head 1 weights are 0 and its head 0 weights are the plain ones."""
    vals = np.linspace(-1, 1, 8).astype(np.float32)
    spec = {"set": [{"name": "hook_embed", "index": [1, 3], "values": vals.tolist()}], "heads_off": [[0, 1]]}
    plain = trace(model, IDX)
    tr = trace(model, IDX, edits=edits.from_spec(spec, CFG.n_layer, CFG.n_head))
    want = plain["hook_embed"].clone()
    want[1, 3] = torch.from_numpy(vals)
    assert torch.equal(tr["hook_embed"], want)
    assert (tr["blocks.0.attn.hook_pattern"][:, 1] == 0).all()
    # head 0 of layer 0 sees the same embedding in row 0 only (row 1's position 3 changed)
    assert torch.equal(tr["blocks.0.attn.hook_pattern"][0, 0], plain["blocks.0.attn.hook_pattern"][0, 0])


# ------------------------------------------------------------------------------------------------------ token id edits
def test_token_edits_replace_the_id_and_the_target_before_it_and_leave_the_inputs_alone():
    x = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 0]])
    y = torch.tensor([[2, 3, 4, 9], [6, 7, -100, -100]])
    x0, y0 = x.clone(), y.clone()
    nx, ny, notices = edits.apply_id_edits(x, y, [4, 3], {"1,2": 11, "0,0": "12", "0,3": 0, "1,1": 10},
                                           vocab_size=13)
    assert torch.equal(nx, torch.tensor([[12, 2, 3, 0], [5, 10, 11, 0]]))
    assert torch.equal(ny, torch.tensor([[2, 3, 0, 9], [10, 11, -100, -100]]))  # position 0 has no target before it
    assert notices == [] and torch.equal(x, x0) and torch.equal(y, y0)


def test_token_edits_outside_the_rows_the_lengths_or_the_vocabulary_are_skipped_with_a_notice():
    x = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 0]])
    y = torch.tensor([[2, 3, 4, 9], [6, 7, -100, -100]])
    id_edits = {"2,0": 1, "-1,0": 1, "1,3": 1, "0,-1": 1, "0,4": 1,  # rows 0..1; row 1 is 3 long, row 0 4 long
                "0,1": 13, "0,2": -1,  # ids 0..12
                "one": 1, "0,x": 1, "0,1,2": 1, "1,0": "zz",  # not row,position (or not an id)
                "1,2": 12}  # the one that fits: the last position of row 1, the last id
    nx, ny, notices = edits.apply_id_edits(x, y, [4, 3], id_edits, vocab_size=13)
    assert torch.equal(nx, torch.tensor([[1, 2, 3, 4], [5, 6, 12, 0]]))
    assert torch.equal(ny, torch.tensor([[2, 3, 4, 9], [6, 12, -100, -100]]))
    assert notices == [  # in the sorted order of the keys
        "Token edit at row -1, position 0 no longer fits the text: ignored.",
        "Token edit at row 0, position -1 no longer fits the text: ignored.",
        "Token id 13 is outside the vocabulary (0 to 12): ignored.",
        "Ignored a token edit '0,1,2': not of the form row,position.",
        "Token id -1 is outside the vocabulary (0 to 12): ignored.",
        "Token edit at row 0, position 4 no longer fits the text: ignored.",
        "Ignored a token edit '0,x': not of the form row,position.",
        "Ignored a token edit '1,0': not of the form row,position.",
        "Token edit at row 1, position 3 no longer fits the text: ignored.",
        "Token edit at row 2, position 0 no longer fits the text: ignored.",
        "Ignored a token edit 'one': not of the form row,position.",
    ]


# ------------------------------------------------------------------------------- the sentence about switched-off heads
def _z(v):
    """The sentence's wording of a number: exactly 0, or not 0 with its largest size to 3 significant digits."""
    return "exactly 0" if v == 0 else f"not 0 (up to {v:.3g})"


def _np(a):
    return a.detach().numpy() if isinstance(a, torch.Tensor) else np.asarray(a)


def _head_grad(tr, name, h, axis):
    return float(np.abs(np.take(_np(tr.grad(name)), h, axis=axis)).max())


def _upstream(tr, layer, h, shorts):
    """max |∂loss/∂·| of head h over the steps before its pattern, each sliced on its own head axis by hand."""
    return max(_head_grad(tr, f"blocks.{layer}.attn.{s}", h, 1 if "scores" in s else 2) for s in shorts)


def test_lists_of_words_read_as_a_sentence():
    assert edits._and(["queries"]) == "queries"
    assert edits._and(["queries", "keys"]) == "queries and keys"
    assert edits._and(["a", "b", "c"]) == "a, b and c"


GPT_UP = ("hook_attn_scores", "hook_scores_scaled", "hook_scores_raw", "hook_q", "hook_k")
GPT_WORDS = "masked scores, scaled scores, raw scores, queries and keys"


@pytest.fixture(scope="module")
def traces(model):
    spec = {"heads_off": [[1, 0], [1, 1], [0, 1]]}
    fx = edits.from_spec(spec, CFG.n_layer, CFG.n_head)
    return spec, trace(model, IDX, TGT, edits=fx, grads=True), trace(model, IDX, TGT, grads=True)


@pytest.mark.parametrize("numpy", [False, True])
def test_the_pattern_sentence_for_a_head_really_switched_off(traces, numpy):
    spec, tr, _ = traces
    tr = tr.numpy() if numpy else tr
    name = "blocks.0.attn.hook_pattern"
    allowed = np.isfinite(_np(tr["blocks.0.attn.hook_attn_scores"])[:, 1])
    g = float(np.abs(_np(tr.grad(name))[:, 1][allowed]).max())
    assert g > 0 and _upstream(tr, 0, 1, GPT_UP) == 0
    assert edits.switched_off_reading(tr, name, spec) == (
        "Head 1 of layer 0 is switched off: your edit replaces its attention weights with 0, so their forward value "
        f"is exactly 0. Their gradient is {_z(g)} on the cells attention may use: it says how the loss would change "
        "if those weights were nudged up from 0. Upstream of the edit, the gradient on this head's "
        f"{GPT_WORDS} is exactly 0: the edit cut them off from the loss.")


def test_the_pattern_sentence_counts_only_the_cells_attention_may_use(traces):
    """With the head on (the spec names it, the trace has no edit) every number is not 0; the gradient is the
    largest over the causal cells only (the masked cells' gradient, which the model never uses, is left out)."""
    spec, _, tr = traces
    name = "blocks.1.attn.hook_pattern"
    out = edits.switched_off_reading(tr, name, spec, head=1)
    pat, grad = _np(tr[name])[:, 1], _np(tr.grad(name))[:, 1]
    causal = np.tril(np.ones((5, 5), dtype=bool))
    fwd, g = float(np.abs(pat).max()), float(np.abs(grad[:, causal]).max())
    up = _upstream(tr, 1, 1, GPT_UP)
    assert out == (
        f"Head 1 of layer 1 is switched off: your edit replaces its attention weights with 0, so their forward value "
        f"is {_z(fwd)}. Their gradient is {_z(g)} on the cells attention may use: it says how the loss would change "
        f"if those weights were nudged up from 0. Upstream of the edit, the gradient on this head's {GPT_WORDS} is "
        f"{_z(up)}.")


class HandTrace:
    """A trace made by hand: one layer of one head over two positions, with the pattern, the masked scores (the
    second key is masked for the first query) and their gradients; the masked cell's gradient is the largest."""

    class _Info:
        axes = ("batch", "head", "query_pos", "key_pos")

    def __init__(self):
        self.acts = {"blocks.0.attn.hook_attn_scores": np.array([[[[0.3, -np.inf], [0.1, 0.2]]]]),
                     "blocks.0.attn.hook_pattern": np.array([[[[1.0, 0.0], [0.5, 0.5]]]])}
        self.grads = {"blocks.0.attn.hook_attn_scores": np.zeros((1, 1, 2, 2)),
                      "blocks.0.attn.hook_pattern": np.array([[[[0.25, 100.0], [-0.5, 0.125]]]])}

    def __contains__(self, name):
        return name in self.acts

    def __getitem__(self, name):
        return self.acts[name]

    def grad(self, name):
        return self.grads.get(name)

    def info(self, name):
        return self._Info()


def test_a_masked_cells_gradient_is_left_out_even_when_it_is_the_largest():
    """By hand: the allowed cells' gradients are 0.25, −0.5 and 0.125 (largest size 0.5); the masked cell's 100 is
    not counted. The only upstream step recorded is the masked scores."""
    assert edits.switched_off_reading(HandTrace(), "blocks.0.attn.hook_pattern", {"heads_off": [[0, 0]]}) == (
        "Head 0 of layer 0 is switched off: your edit replaces its attention weights with 0, so their forward value "
        "is not 0 (up to 1). Their gradient is not 0 (up to 0.5) on the cells attention may use: it says how the loss "
        "would change if those weights were nudged up from 0. Upstream of the edit, the gradient on this head's "
        "masked scores is exactly 0: the edit cut them off from the loss.")


def test_an_upstream_step_names_each_head_switched_off_in_its_layer(traces):
    spec, tr, plain = traces
    name = "blocks.1.attn.hook_q"
    tail = f"and so is the gradient on all of its {GPT_WORDS}: the edit cut them off from the loss."
    assert edits.switched_off_reading(tr, name, spec) == " ".join(
        f"Head {h} of layer 1 is switched off after this step: its attention weights are replaced with 0, so this step "
        f"no longer reaches the loss through head {h}. Head {h}'s gradient here is exactly 0, {tail}" for h in (0, 1))
    g, up = _head_grad(plain, "blocks.1.attn.hook_scores_raw", 0, 1), _upstream(plain, 1, 0, GPT_UP)
    assert edits.switched_off_reading(plain, "blocks.1.attn.hook_scores_raw", spec, head=0) == (
        "Head 0 of layer 1 is switched off after this step: its attention weights are replaced with 0, so this step "
        f"no longer reaches the loss through head 0. Head 0's gradient here is {_z(g)}, and on its {GPT_WORDS} it is "
        f"{_z(up)}.")


def test_the_values_sentence_and_the_fused_projection_columns(traces):
    spec, tr, plain = traces
    assert edits.switched_off_reading(tr, "blocks.0.attn.hook_v", spec) == (
        "Head 1 of layer 0 is switched off: its values are multiplied by attention weights that are all 0, so head 1's "
        "gradient here is exactly 0.")
    gv = _head_grad(plain, "blocks.0.attn.hook_v", 1, 2)
    assert edits.switched_off_reading(plain, "blocks.0.attn.hook_v", spec) == (
        "Head 1 of layer 0 is switched off: its values are multiplied by attention weights that are all 0, so head 1's "
        f"gradient here is {_z(gv)}.")
    # hook_qkv is (batch, pos, 3 · n_head · d_head): q | k | v, each head's d_head columns side by side
    for t, h in ((tr, 1), (plain, 1), (plain, 0)):
        g = _np(t.grad("blocks.1.attn.hook_qkv")).reshape(2, 5, 3, 2, 4)[:, :, :, h]
        want = (f"Head {h} of layer 1 is switched off: the gradient on its query, key and value columns here is "
                f"{_z(float(np.abs(g).max()))}; the other columns feed the heads that are still on.")
        assert edits.switched_off_reading(t, "blocks.1.attn.hook_qkv", spec, head=h) == want
    assert edits.switched_off_reading(tr, "blocks.0.attn.hook_qkv", spec, head=1).count("exactly 0") == 1
    head0_cols = _np(tr.grad("blocks.0.attn.hook_qkv")).reshape(2, 5, 3, 2, 4)[:, :, :, 0]
    assert np.abs(head0_cols).max() > 0  # the head still on has a gradient: the columns picked are head 1's


def test_no_sentence_for_other_steps_other_layers_or_a_trace_without_gradients(model, traces):
    spec, tr, _ = traces
    for name in ("hook_embed", "blocks.0.attn.hook_z", "blocks.0.mlp.hook_pre", "blocks.0.hook_attn_out",
                 "blocks.0.attn.hook_q.x", "block.0.attn.hook_q", "blocks.0.attn2.hook_q", "blocks.x.attn.hook_q"):
        assert edits.switched_off_reading(tr, name, spec) is None, name
    assert edits.switched_off_reading(tr, "blocks.0.attn.hook_q", spec, head=0) is None  # head 0 of layer 0 is on
    assert edits.switched_off_reading(tr, "blocks.0.attn.hook_q", {"heads_off": [[1, 0]]}) is None
    assert edits.switched_off_reading(trace(model, IDX), "blocks.0.attn.hook_q", spec) is None


def test_an_encoders_and_cross_attentions_heads_get_no_sentence():
    """heads_off names the decoder's self-attention heads: the encoder's ``enc_blocks.0.attn.*`` and the decoder's
    ``blocks.0.cross_attn.*`` are other heads with the same numbers, and have a gradient here; no sentence is about
    them."""
    from gptviz.model.encoder_decoder import Seq2Seq

    cfg = ModelConfig(vocab_size=13, block_size=6, n_layer=1, n_head=2, n_embd=8, n_enc_layer=1, enc_len=5)
    spec = {"heads_off": [[0, 0]]}
    tr = trace(Seq2Seq(cfg).eval(), IDX[:, :4], TGT[:, :4], enc_input=torch.tensor([[3, 4, 5, 6, 7]] * 2),
               edits=edits.from_spec(spec, 1, 2), grads=True)
    for name in ("enc_blocks.0.attn.hook_q", "enc_blocks.0.attn.hook_pattern", "blocks.0.cross_attn.hook_q",
                 "blocks.0.cross_attn.hook_pattern"):
        assert tr.grad(name) is not None and edits.switched_off_reading(tr, name, spec) is None, name
    assert edits.switched_off_reading(tr, "blocks.0.attn.hook_q", spec).startswith("Head 0 of layer 0 is switched off")


def test_rotary_heads_name_their_rotated_queries_and_keys():
    m = GPT(ROPE).eval()
    spec = {"heads_off": [[0, 2]]}
    tr = trace(m, IDX, TGT, edits=edits.from_spec(spec, 1, 3), grads=True)
    words = "masked scores, scaled scores, raw scores, rotated queries, rotated keys, queries and keys"
    assert edits.switched_off_reading(tr, "blocks.0.attn.hook_rot_k", spec) == (
        "Head 2 of layer 0 is switched off after this step: its attention weights are replaced with 0, so this step "
        f"no longer reaches the loss through head 2. Head 2's gradient here is exactly 0, and so is the gradient on "
        f"all of its {words}: the edit cut them off from the loss.")
    # the fused projection's columns of head 1 of 3 (q, k and v of that head, not of the last one): exactly 0
    spec1 = {"heads_off": [[0, 1]]}
    tr1 = trace(m, IDX, TGT, edits=edits.from_spec(spec1, 1, 3), grads=True)
    assert edits.switched_off_reading(tr1, "blocks.0.attn.hook_qkv", spec1) == (
        "Head 1 of layer 0 is switched off: the gradient on its query, key and value columns here is exactly 0; the "
        "other columns feed the heads that are still on.")
