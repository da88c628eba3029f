"""The model diff against computations written here: every tensor of two models caught by torch forward hooks on a
plain forward pass (no trace), B − A and the figures' values compared with them, and each head's change worked out
by hand from the hooked attention patterns (total variation and Jensen–Shannon, loops over rows and keys)."""
import math

import numpy as np
import pytest
import torch
from conftest import CONFIGS, random_ids

from gptviz import GPT, trace
from gptviz.interp import model_diff
from gptviz.model.hook_points import HookPoint
from gptviz.present import figures, matrices
from gptviz.present.descriptions import step_info
from gptviz.text.tokenizers import get_tokenizer


def hooked_run(model, idx) -> dict:
    """Every hook point's tensor from ``model(idx)``, caught by torch forward hooks on the HookPoint modules."""
    seen, handles = {}, []
    for mod in model.modules():
        if isinstance(mod, HookPoint):
            handles.append(mod.register_forward_hook(
                lambda m, i, o: seen.__setitem__(m.name, o.detach().double().numpy().copy())))
    try:
        with torch.no_grad():
            model(idx)
    finally:
        for h in handles:
            h.remove()
    return seen


def _pair(name="gpt2-like", seed_b=1):
    c = CONFIGS[name]
    return GPT(c), GPT(c.replace(seed=seed_b)), c


def _z(fig, i=0):
    return np.asarray(fig.data[i].z, dtype=float)


@pytest.mark.parametrize("name", ["gpt2-like", "rms-post-sin-gelu"])
def test_difference_heatmap_is_b_minus_a_from_two_hooked_forward_passes(name):
    a, b, c = _pair(name)
    idx = random_ids(c, B=1, T=7)
    ha, hb = hooked_run(a, idx), hooked_run(b, idx)
    ta, tb = trace(a, idx).numpy(), trace(b, idx).numpy()
    assert model_diff.shape_mismatch(ta, tb) is None
    labels = [f"t{i}" for i in range(7)]
    checked = 0
    for hook in ("blocks.1.attn.hook_pattern", "blocks.0.hook_resid_post", "blocks.0.attn.hook_attn_scores",
                 "hook_logits", "blocks.1.mlp.hook_post", "blocks.0.attn.hook_q"):
        if hook not in ha:
            continue
        with np.errstate(invalid="ignore"):  # -inf - -inf at masked scores
            want = hb[hook] - ha[hook]
        d = model_diff.step_difference(ta[hook], tb[hook])
        finite = np.isfinite(ha[hook]) & np.isfinite(hb[hook])
        assert np.allclose(d[finite], want[finite], atol=1e-5), hook
        assert np.isnan(d[~finite]).all()  # a masked score is no change, not a number
        info = step_info(ta, hook)
        head = 1 if "head" in info.axes else None
        m = matrices.step_matrix(d, info, labels, 0, head, masked=matrices.masked_cells(ta, 0))
        z = _z(figures.difference_heatmap(m, "B − A"))
        if info.axes == ("batch", "head", "query_pos", "key_pos"):
            expect = want[0, head]
            causal = np.tril(np.ones((7, 7), dtype=bool))
            assert np.allclose(z[causal], expect[causal], atol=1e-5), hook
            assert np.isnan(z[~causal]).all()
        elif info.axes == ("batch", "pos", "head", "d_head"):
            assert np.allclose(z, want[0, :, head], atol=1e-5), hook
        else:
            assert np.allclose(z, want[0], atol=1e-5), hook
        fig = figures.difference_heatmap(m, "B − A")
        tr0 = fig.data[0]
        assert tr0.zmid == 0 and tr0.zmin == -tr0.zmax  # diverging around 0
        pair = figures.pair_heatmaps(matrices.step_matrix(ta[hook], info, labels, 0, head),
                                     matrices.step_matrix(tb[hook], info, labels, 0, head), "A", "B")
        za, zb = _z(pair, 0), _z(pair, 1)
        keep = np.isfinite(za) & np.isfinite(zb) & np.isfinite(z)
        assert np.allclose((zb - za)[keep], z[keep], atol=1e-5), hook
        checked += 1
    assert checked >= 5


def _tv(p, q):
    return 0.5 * sum(abs(x - y) for x, y in zip(p, q))


def _js_bits(p, q):
    total = 0.0
    for x, y in zip(p, q):
        m = (x + y) / 2
        if x > 0:
            total += 0.5 * x * math.log2(x / m)
        if y > 0:
            total += 0.5 * y * math.log2(y / m)
    return total


@pytest.mark.parametrize("measure", model_diff.MEASURES)
def test_head_ranking_matches_a_hand_written_distance_on_hooked_patterns(measure):
    c = CONFIGS["gpt2-like"].replace(n_head=4, n_layer=3, block_size=10)
    a, b = GPT(c), GPT(c.replace(seed=5))
    idx = random_ids(c, B=2, T=9, seed=3)
    ha, hb = hooked_run(a, idx), hooked_run(b, idx)
    dist = _tv if measure == model_diff.TOTAL_VARIATION else _js_bits
    row, T = 1, 6  # the second batch row, its first 6 tokens
    hand = np.zeros((c.n_layer, c.n_head))
    for layer in range(c.n_layer):
        pa, pb = ha[f"blocks.{layer}.attn.hook_pattern"], hb[f"blocks.{layer}.attn.hook_pattern"]
        for h in range(c.n_head):
            hand[layer, h] = sum(dist(pa[row, h, i, :i + 1], pb[row, h, i, :i + 1]) for i in range(T)) / T
    got = model_diff.head_changes(trace(a, idx).numpy(), trace(b, idx).numpy(), batch=row, n_pos=T, measure=measure)
    assert got.shape == hand.shape
    assert np.allclose(got, hand, atol=1e-6)
    ranked = model_diff.ranked_heads(got)
    order = sorted(((l, h) for l in range(c.n_layer) for h in range(c.n_head)), key=lambda lh: -hand[lh])
    assert [(l, h) for l, h, _ in ranked] == order
    assert all(0.0 <= v <= 1.0 for _, _, v in ranked)
    same = model_diff.head_changes(trace(a, idx).numpy(), trace(a, idx).numpy(), batch=row, n_pos=T, measure=measure)
    assert np.allclose(same, 0.0, atol=1e-9)


def test_the_distances_are_0_for_the_same_row_and_1_for_disjoint_rows():
    p, q = np.array([0.5, 0.5, 0.0, 0.0]), np.array([0.0, 0.0, 0.25, 0.75])
    for f in (model_diff.total_variation, model_diff.jensen_shannon):
        assert abs(float(f(p, q)) - 1.0) < 1e-12 and abs(float(f(p, p))) < 1e-12


def test_models_of_another_shape_or_tokenizer_are_refused_with_a_reason():
    c = CONFIGS["gpt2-like"]
    idx = random_ids(c, B=1, T=5)
    ta = trace(GPT(c), idx).numpy()
    deeper = trace(GPT(c.replace(n_layer=3)), idx).numpy()
    wider = trace(GPT(c.replace(n_embd=16)), idx).numpy()
    assert "only model B has `blocks.2." in model_diff.shape_mismatch(ta, deeper)
    assert "has shape" in model_diff.shape_mismatch(ta, wider)
    t1, t2 = get_tokenizer("char-bpe", num_merges=5), get_tokenizer("char-bpe", num_merges=6)
    assert model_diff.same_tokenizer(t1, get_tokenizer("char-bpe", num_merges=5))
    assert "different tokenizers" in model_diff.mismatch(t1, t2, ta, ta)
    assert model_diff.mismatch(t1, t1, ta, trace(GPT(c.replace(seed=9)), idx).numpy()) is None
    with pytest.raises(ValueError):
        model_diff.head_changes(ta, ta, measure="cosine")


def test_slim_traces_are_checked_by_their_shapes_without_working_out_a_step():
    """Compare models checks a 600M-parameter pair's slim traces: reading each step to learn its shape worked out
    every layer's scores (0.1 s a text change there); the shapes must come from the notes, and still be right."""
    c = CONFIGS["gpt2-like"]
    idx = random_ids(c, B=1, T=6)
    ta, tb = trace(GPT(c), idx, slim=True).numpy(), trace(GPT(c.replace(seed=9)), idx, slim=True).numpy()
    wider = trace(GPT(c.replace(n_head=c.n_head * 2, n_embd=c.n_embd * 2)), idx, slim=True).numpy()
    assert ta.slim and wider.slim
    before = (ta.size_version, tb.size_version, wider.size_version)
    assert model_diff.shape_mismatch(ta, tb) is None
    problem = model_diff.shape_mismatch(ta, wider)
    assert "has shape" in problem
    assert (ta.size_version, tb.size_version, wider.size_version) == before, "a step was worked out"
    full = trace(GPT(c), idx).numpy()
    assert all(np.shape(full[n]) == np.shape(ta[n]) for n in full)  # the notes' shapes are the steps' own
