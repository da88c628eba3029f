"""The local replacement (gptviz/interp/replacement.py): the models it refuses, each with its reason, and its
read-back used directly (every position, and seeds that already are residual-stream gradients) against autograd."""
import pytest
import torch

import gptviz
from gptviz.config import preset
from gptviz.interp.replacement import freeze, read_back, weights_of, why_no_replacement
from gptviz.interp.transcoder import Transcoder

BASE = preset("default").replace(vocab_size=40, block_size=16, n_layer=2, n_head=2, n_embd=16, d_mlp=32)


@pytest.mark.parametrize("change,reason", [
    ({"n_enc_layer": 1}, "attribution graphs are for decoder-only models; this one also has an encoder and "
                         "cross-attention"),
    ({"n_enc_layer": 0}, "attribution graphs are for decoder-only models; this one also has an encoder and "
                         "cross-attention"),
    ({"attn_only": True}, "this model has no MLPs for a transcoder to replace"),
    ({"norm_placement": "post"}, "the replacement is written for blocks that normalise before each sublayer "
                                 "(GPT-2, Llama); this model normalises after them"),
    ({"sublayer_norms": "both"}, "the replacement is written for blocks that normalise before each sublayer "
                                 "(GPT-2, Llama); this model normalises after them"),
    ({"parallel_attn": True}, "in this model attention and the MLP read the same normalised input in parallel; not "
                              "supported yet"),
    ({"n_expert": 4}, "a mixture of experts has no single MLP for a transcoder to replace"),
])
def test_each_model_the_replacement_cannot_read_is_refused_with_its_reason(change, reason):
    try:
        cfg = BASE.replace(**change)
    except ValueError:
        pytest.skip(f"{change} is not a valid config on its own")
    assert why_no_replacement(cfg, Transcoder(2, 16, 8, 2, True)) == reason  # a transcoder for these MLPs
    assert why_no_replacement(BASE) == ""
    # without a transcoder: an attention-only model is read as it is, one with MLPs needs one
    assert why_no_replacement(cfg, None, need_tc=True) == ("" if change == {"attn_only": True} else reason)
    assert why_no_replacement(BASE, None, need_tc=True) == "this model has MLPs: its graph needs a transcoder in "\
        "their place"


@pytest.mark.parametrize("n_layer,d_model", [(3, 16), (2, 24)])
def test_a_transcoder_of_another_shape_is_refused_by_why_and_by_freeze(n_layer, d_model):
    model = gptviz.build_model(BASE).eval()
    tc = Transcoder(n_layer, d_model, 8, 2, True)
    want = f"this transcoder was made for {n_layer} layers of {d_model} numbers, not this model's 2 of 16"
    assert why_no_replacement(BASE, tc) == want
    with pytest.raises(ValueError, match=want):
        freeze(model, tc, [1, 2, 3])
    assert why_no_replacement(BASE, Transcoder(2, 16, 8, 2, False)) == ""


def test_read_back_on_every_position_and_from_residual_gradients_equals_autograd():
    model = gptviz.build_model(BASE.replace(seed=2)).eval()
    tc = Transcoder(2, 16, 8, 2, True)
    ids = [5, 9, 1, 30, 7, 2]
    fz, w = freeze(model, tc, ids), weights_of(model)
    g = torch.Generator().manual_seed(0)
    seeds = torch.randn(3, 16, generator=g)
    positions = torch.tensor([5, 2, 4])
    full = read_back(fz, w, 1, seeds, positions)  # no upto: every position carried
    cut = read_back(fz, w, 1, seeds, positions, upto=6)
    for a, b in zip(full, cut):
        torch.testing.assert_close(a, b)
    assert full[0].shape == (3, 6, 16)
    # seeds given as gradients of the residual stream at resid_mid of layer 1: autograd through the frozen model
    raw = read_back(fz, w, 1, seeds, positions, through_norm=False)
    x = torch.tensor([ids])
    tr = gptviz.trace(model, x)
    inj = torch.zeros(1, 6, 16, requires_grad=True)

    def rec(name, t):
        if name.endswith("hook_scale") or name.endswith("hook_pattern"):
            return tr[name]
        if name == "hook_embed":
            return tr[name] + inj
        if name == "blocks.0.hook_mlp_out":
            return tr[name]  # the MLP is a constant in the replacement
        return t

    seen = {}

    def keep(name, t):
        t = rec(name, t)
        seen[name] = t
        return t

    with torch.enable_grad():
        model.run(x, rec=keep)
        for j in range(3):
            q = seen["blocks.1.hook_resid_mid"][0, positions[j]] @ seeds[j]
            (grad,) = torch.autograd.grad(q, inj, retain_graph=True)
            torch.testing.assert_close(raw[0][j], grad[0], atol=1e-5, rtol=1e-4)
    with pytest.raises(ValueError, match="a target at position 5 is past upto=5"):
        read_back(fz, w, 1, seeds, positions, upto=5)
