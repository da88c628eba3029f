"""Activation patching (gptviz.interp.patching): exact end points, an ablated head, and a check against PyTorch's own
forward hooks (an independent way to patch)."""
import copy

import numpy as np
import pytest
import torch

from gptviz import GPT, ModelConfig, trace
from gptviz.interp.patching import Patcher, activation_patching, n_forward_needed, put_at
from gptviz.model.build import build_model

CFG = ModelConfig(vocab_size=23, block_size=10, n_layer=2, n_head=3, n_embd=12, init_std=0.3)
CLEAN = torch.tensor([[3, 7, 1, 9, 4, 2]])
CORRUPT = torch.tensor([[3, 8, 1, 9, 4, 2]])  # one token differs, at position 1


def answers(model):
    """The clean run's favourite token and the corrupted run's (a contrast that is not 0)."""
    a = int(model(CLEAN)[0][0, -1].argmax())
    lc = model(CORRUPT)[0][0, -1].clone()
    lc[a] = -1e9
    return a, int(lc.argmax())


@pytest.fixture(scope="module")
def model():
    return GPT(CFG)


@pytest.fixture(scope="module")
def result(model):
    return activation_patching(model, CLEAN, CORRUPT, *answers(model))


def test_shapes_and_forward_count(result):
    T = CLEAN.shape[1]
    assert result.resid.shape == (CFG.n_layer + 1, T)
    assert result.heads.shape == (CFG.n_layer, CFG.n_head)
    assert result.mlp.shape == (CFG.n_layer,)
    assert len(result.resid_labels) == CFG.n_layer + 1
    assert result.n_forward == n_forward_needed(CFG, T) == 2 + 3 * 6 + 2 * 3 + 2
    assert np.isfinite(result.resid).all() and np.isfinite(result.heads).all()
    assert result.clean_diff != result.corrupt_diff


def test_end_points_are_exact(model, result):
    p = Patcher(model, CLEAN, CORRUPT, *answers(model))
    assert p.score({}) == 0.0  # patching nothing: the corrupted run itself
    L = CFG.n_layer
    final = f"blocks.{L - 1}.hook_resid_post"
    assert p.score({final: put_at(None, p.clean_value(final))}) == 1.0  # the whole final stream: the clean run
    assert p.score({"blocks.0.hook_resid_pre": put_at(None, p.clean_value("blocks.0.hook_resid_pre"))}) == 1.0
    # in the grid: the final stream matters only at the last position; positions before the one that
    # differs carry the same values in both runs, so patching them does nothing
    assert result.resid[-1, -1] == 1.0 and (result.resid[-1, :-1] == 0.0).all()
    assert result.resid[0, 0] == 0.0
    # the first point differs only at the changed token: patching it there restores everything
    assert result.resid[0, 1] == 1.0 and (result.resid[0, 2:] == 0.0).all()


def test_an_ablated_head_scores_zero(model):
    ablated = copy.deepcopy(model)
    l, h, hs = 1, 2, CFG.d_head
    with torch.no_grad():
        ablated.transformer.h[l].attn.c_proj.weight[:, h * hs:(h + 1) * hs] = 0.0
    r = activation_patching(ablated, CLEAN, CORRUPT, *answers(ablated), what=("heads",))
    assert abs(r.heads[l, h]) < 1e-6
    assert np.abs(np.delete(r.heads.ravel(), l * CFG.n_head + h)).max() > 1e-3  # the others do something
    assert np.isnan(r.resid).all()  # not asked for


def _hooked_score(model, a, w, patch_fn, module, clean_act):
    """Patch with torch's own forward hooks on a copy of the model (no gptviz trace involved)."""
    def diff(logits):
        return float(logits[0, -1, a].double() - logits[0, -1, w].double())

    with torch.no_grad():
        clean = diff(model(CLEAN)[0])
        corrupt = diff(model(CORRUPT)[0])
    handle = module.register_forward_pre_hook(lambda mod, args: (patch_fn(args[0].clone(), clean_act), *args[1:]))
    try:
        with torch.no_grad():
            patched = diff(model(CORRUPT)[0])
    finally:
        handle.remove()
    return (patched - corrupt) / (clean - corrupt)


def _capture(model, module, idx):
    got = {}

    def keep(mod, args):
        got["x"] = args[0].detach().clone()  # returns None: the input is left as it is

    h = module.register_forward_pre_hook(keep)
    try:
        with torch.no_grad():
            model(idx)
    finally:
        h.remove()
    return got["x"]


def test_grid_values_match_patching_with_torch_forward_hooks(model, result):
    a, w = answers(model)
    m = copy.deepcopy(model)
    # a head: the input of c_proj is the heads' outputs side by side (B, T, nh*hs)
    l, h, hs = 0, 1, CFG.d_head
    proj = m.transformer.h[l].attn.c_proj
    clean_z = _capture(m, proj, CLEAN)

    def put_head(x, c):
        x[..., h * hs:(h + 1) * hs] = c[..., h * hs:(h + 1) * hs]
        return x

    assert abs(_hooked_score(m, a, w, put_head, proj, clean_z) - result.heads[l, h]) < 1e-5
    # the residual stream entering block 1, at position 1
    blk = m.transformer.h[1]
    clean_x = _capture(m, blk, CLEAN)

    def put_pos(x, c):
        x[:, 1] = c[:, 1]
        return x

    assert abs(_hooked_score(m, a, w, put_pos, blk, clean_x) - result.resid[1, 1]) < 1e-5
    # an MLP's output: patch the input of its c_proj (the whole projection, bias included, follows)
    mproj = m.transformer.h[0].mlp.c_proj
    clean_h = _capture(m, mproj, CLEAN)
    assert abs(_hooked_score(m, a, w, lambda x, c: c.clone(), mproj, clean_h) - result.mlp[0]) < 1e-5


def test_attention_only_and_several_rows():
    cfg = CFG.replace(attn_only=True)
    m = GPT(cfg)
    clean = torch.cat([CLEAN, CLEAN.flip(1)])
    corrupt = torch.cat([CORRUPT, CORRUPT.flip(1)])
    r = activation_patching(m, clean, corrupt, [1, 2], [3, 4])
    assert r.mlp.shape == (0,) and r.heads.shape == (2, 3) and r.resid.shape == (3, 6)
    assert r.resid[-1, -1] == 1.0
    # the metric is the mean over rows
    lg = trace(m, clean).logits[:, -1].double()
    assert abs(r.clean_diff - float(((lg[0, 1] - lg[0, 3]) + (lg[1, 2] - lg[1, 4])) / 2)) < 1e-9


def test_refusals_say_what_to_change(model):
    a, w = answers(model)
    with pytest.raises(ValueError, match="same number of tokens"):
        activation_patching(model, CLEAN, CORRUPT[:, :-1], a, w)
    with pytest.raises(ValueError, match="same token"):
        activation_patching(model, CLEAN, CORRUPT, a, a)
    with pytest.raises(ValueError, match="same logit difference"):
        activation_patching(model, CLEAN, CLEAN, a, w)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        activation_patching(model, CLEAN, CORRUPT, CFG.vocab_size, w)


def test_an_encoder_decoder_with_a_real_encoder_is_refused():
    m = build_model(CFG.replace(n_enc_layer=1))
    with pytest.raises(ValueError, match="source sequence"):
        activation_patching(m, CLEAN, CORRUPT, 1, 2)


def test_default_pairs_have_equal_lengths_and_fit_the_context():
    from gptviz import get_tokenizer
    from gptviz.interp.patching import answer_options, default_pair

    tok = get_tokenizer("char-bpe", num_merges=20, lowercase=True)
    a, b = default_pair(tok)
    assert len(tok.encode(a)) == len(tok.encode(b)) and tok.encode(a) != tok.encode(b)
    a, b = default_pair(tok, max_len=8)
    assert len(tok.encode(a)) == len(tok.encode(b)) <= 8
    # answer options: the clean favourite, and the corrupted favourite as the wrong token
    lc, lk = torch.zeros(1, 3, 5), torch.zeros(1, 3, 5)
    lc[0, -1, 2], lk[0, -1, 4] = 5.0, 5.0
    o = answer_options(lc, lk)
    assert (o.answer, o.wrong) == (2, 4) and o.ids[0] == 2 and len(o.ids) == 5
    assert abs(sum(o.p_clean.values()) - 1) < 1e-9
