"""The model diff (gptviz.interp.model_diff) on hand-made traces and tokenizers, against values written out here: the
tokenizer fingerprints of every kind, the refusals word for word, B − A with every kind of non-finite value, the two
distances by loops over keys (negative and zero weights included), each head's change over the asked rows, query
positions and keys, and the ranking with NaN and ties."""
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from gptviz.interp import model_diff as md


class Saved:
    """A tokenizer with a saved form (like the char BPE)."""

    def __init__(self, merges, vocab_size=5):
        self.merges, self.vocab_size = merges, vocab_size

    def to_dict(self):
        return {"merges": self.merges, "lowercase": True}


class Named:
    def __init__(self, name, vocab_size):
        self.name, self.vocab_size = name, vocab_size

    def token_str(self, i):
        raise AssertionError("a named tokenizer is known by its name and size")


class Listed:
    """A tokenizer known only by its tokens' strings."""

    def __init__(self, tokens, name=None):
        self.tokens, self.vocab_size = list(tokens), len(tokens)
        if name is not None:
            self.name = name

    def token_str(self, i):
        return self.tokens[i]


class Unreadable:
    vocab_size = 3

    def token_str(self, i):
        raise AssertionError("not to be read")


def test_tokenizers_are_the_same_by_saved_form_else_by_name_and_size_else_token_by_token(monkeypatch):
    assert md.same_tokenizer(Saved([["a", "b"]]), Saved([["a", "b"]]))
    assert not md.same_tokenizer(Saved([["a", "b"]]), Saved([["a", "c"]]))
    assert md.same_tokenizer(Saved([["a", "b"]], vocab_size=5), Saved([["a", "b"]], vocab_size=9))  # the form alone
    assert md.same_tokenizer(Named("gpt2", 50257), Named("gpt2", 50257))
    assert not md.same_tokenizer(Named("gpt2", 50257), Named("gpt2", 50256))
    assert not md.same_tokenizer(Named("gpt2", 50257), Named("r50k", 50257))
    # the same name on another kind of tokenizer: the class counts
    assert not md.same_tokenizer(Named("x", 3), Listed(["a", "b", "c"], name="x"))
    # an empty name is no name: the tokens decide
    assert md.same_tokenizer(Listed(["a", "b", "c"], name=""), Listed(["a", "b", "c"]))
    assert not md.same_tokenizer(Listed(["a", "b", "c"]), Listed(["a", "b", "d"]))
    assert not md.same_tokenizer(Listed(["a", "b", "c"]), Listed(["a", "b"]))
    # the same object is the same tokenizer without reading it
    u = Unreadable()
    assert md.same_tokenizer(u, u)
    # past MAX_VOCAB_COMPARED tokens only the first ones are compared (and the size)
    monkeypatch.setattr(md, "MAX_VOCAB_COMPARED", 2)
    assert md.same_tokenizer(Listed(["a", "b", "c"]), Listed(["a", "b", "z"]))
    assert not md.same_tokenizer(Listed(["a", "b", "c"]), Listed(["a", "y", "c"]))
    assert md.MAX_VOCAB_COMPARED == 2


def test_a_saved_form_is_the_same_whatever_its_key_order_and_values_json_cannot_write_count_by_their_text():
    assert md.same_tokenizer(Saved({"x": 1, "y": Path("v")}), Saved({"y": Path("v"), "x": 1}))
    assert not md.same_tokenizer(Saved({"x": 1, "y": Path("v")}), Saved({"y": Path("w"), "x": 1}))


def test_the_default_token_by_token_limit_is_300_000():
    assert md.MAX_VOCAB_COMPARED == 300_000
    fp = md.tokenizer_fingerprint(Listed([str(i) for i in range(7)]))
    assert fp[-1] == tuple(str(i) for i in range(7))


def test_traces_of_other_steps_or_shapes_are_refused_word_for_word():
    a = {"x": np.zeros((1, 2)), "y": np.zeros(3)}
    assert md.shape_mismatch(a, {"x": np.ones((1, 2)), "y": torch.ones(3)}) is None
    assert md.shape_mismatch(a, {"x": np.zeros((1, 2))}) == (
        "the two models record different steps (only model A has `y`, and 0 more differ): they are not the same "
        "architecture")
    assert md.shape_mismatch({"x": 0, "p": 0, "q": 0}, {"x": 0, "r": 0}) == (
        "the two models record different steps (only model A has `p`, and 2 more differ): they are not the same "
        "architecture")
    assert md.shape_mismatch({"x": 0}, {"x": 0, "r": 0, "s": 0}) == (
        "the two models record different steps (only model B has `r`, and 1 more differ): they are not the same "
        "architecture")
    assert md.shape_mismatch(a, {"x": np.zeros((1, 2)), "y": np.zeros(4)}) == (
        "the step `y` has shape (3,) in model A but (4,) in model B: they are not the same shape")
    t = Listed(["a"])
    assert md.mismatch(t, Listed(["b"]), a, a) == (
        "the two models use different tokenizers, so the same text is not the same token ids: compare models made "
        "with one tokenizer")
    assert md.mismatch(t, Listed(["a"]), a, {"x": np.zeros((1, 2))}).startswith("the two models record different")
    assert md.mismatch(t, Listed(["a"]), a, dict(a)) is None


def test_step_difference_is_b_minus_a_in_float64_and_nan_where_either_is_not_finite():
    a = torch.tensor([1.5, -np.inf, 2.0, np.inf, np.nan, 0.1], dtype=torch.float32)
    b = np.array([4.0, -np.inf, np.inf, 3.0, 1.0, 0.3], dtype=np.float32)
    d = md.step_difference(a, b)
    assert d.dtype == np.float64
    assert d[0] == 2.5 and d[5] == float(np.float32(0.3)) - float(np.float32(0.1))
    assert np.isnan(d[1:5]).all()
    with pytest.raises(ValueError) as e:
        md.step_difference(np.zeros((2, 3)), np.zeros((3, 2)))
    assert str(e.value) == "the two steps have shapes (2, 3) and (3, 2)"


def _tv(p, q):
    return 0.5 * sum(abs(x - y) for x, y in zip(p, q))


def _js(p, q):
    """In bits, from the definition, after clipping negative weights to 0: ½ KL(p‖m) + ½ KL(q‖m), m = (p + q) / 2,
    a term with zero weight counting 0."""
    p, q = [max(x, 0.0) for x in p], [max(y, 0.0) for y in q]
    total = 0.0
    for x, y in zip(p, q):
        m = (x + y) / 2
        if x > 0:
            total += 0.5 * x * math.log2(x / m)
        if y > 0:
            total += 0.5 * y * math.log2(y / m)
    return min(max(total, 0.0), 1.0)


def test_the_distances_match_loops_over_the_keys_with_zero_and_negative_weights():
    rng = np.random.default_rng(1)
    p = rng.random((3, 5))
    q = rng.random((3, 5))
    p[0, :2] = 0.0  # keys only one side weighs
    q[1, 3] = 0.0
    p[2, 4] = q[2, 4] = 0.0  # a key neither weighs
    p /= p.sum(-1, keepdims=True)
    q /= q.sum(-1, keepdims=True)
    tv, js = md.total_variation(p, q), md.jensen_shannon(p, q)
    assert tv.shape == js.shape == (3,)
    for i in range(3):
        assert tv[i] == pytest.approx(_tv(p[i], q[i]), abs=1e-12)
        assert js[i] == pytest.approx(_js(p[i], q[i]), abs=1e-12)
    # a weight a hair below 0 (float error) counts as 0
    neg = np.array([0.6, 0.4 + 1e-9, -1e-9])
    assert float(md.jensen_shannon(neg, np.array([0.2, 0.3, 0.5]))) == pytest.approx(
        _js(neg, [0.2, 0.3, 0.5]), abs=1e-12)
    # disjoint distributions: exactly 1, never above
    assert float(md.jensen_shannon(np.array([1 / 3, 2 / 3, 0.0]), np.array([0.0, 0.0, 1.0]))) == 1.0
    assert float(md.total_variation(torch.tensor([0.25, 0.75]), torch.tensor([0.75, 0.25]))) == 0.5


def test_jensen_shannon_is_kept_within_0_and_1_when_float_rounding_steps_outside():
    """Two rows found by search whose divergence, summed in float64, comes out a hair outside [0, 1]: the
    definition's bounds are returned instead."""
    p = np.array([0.15738899588328842, 0.46978175027169045, 0.37282925384502125, 0.0, 0.0])
    q = np.array([0.0, 0.0, 0.0, 0.17446523650353377, 0.8255347634964664])  # disjoint: 1.0000000000000002 raw
    assert float(md.jensen_shannon(p, q)) == 1.0
    p = np.array([0.10419879140898707, 0.16317415926788364, 0.29874612234462955, 0.3137107307345011,
                  0.12017019624399862])
    q = p.copy()
    q[0] += 1e-17  # one ulp apart: -8.3e-18 raw
    assert float(md.jensen_shannon(p, q)) == 0.0


def _traces(L, H, B, T, seed):
    """Two hand-made traces: (B, H, T, T) patterns whose every row (keys past the query too) is a distribution."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(2):
        tr = {}
        for layer in range(L):
            p = rng.random((B, H, T, T))
            tr[f"blocks.{layer}.attn.hook_pattern"] = p / p.sum(-1, keepdims=True)
        tr["hook_logits"] = np.zeros((B, T, 4))
        out.append(tr)
    return out


def _changes_by_hand(ta, tb, batch, n, dist):
    """Per layer and head, the mean over queries 0..n−1 of the distance between the rows cut to keys 0..n−1."""
    L = sum(1 for k in ta if k.endswith("hook_pattern"))
    H = ta["blocks.0.attn.hook_pattern"].shape[1]
    out = np.zeros((L, H))
    for layer in range(L):
        pa, pb = ta[f"blocks.{layer}.attn.hook_pattern"], tb[f"blocks.{layer}.attn.hook_pattern"]
        for h in range(H):
            out[layer, h] = sum(dist(pa[batch, h, i, :n], pb[batch, h, i, :n]) for i in range(n)) / n
    return out


@pytest.mark.parametrize("measure", md.MEASURES)
def test_each_heads_change_is_the_mean_distance_over_the_asked_row_and_positions(measure):
    ta, tb = _traces(L=3, H=2, B=2, T=5, seed=4)
    dist = _tv if measure == md.TOTAL_VARIATION else _js
    for n_pos, n in ((None, 5), (5, 5), (9, 5), (3, 3), (1, 1), (0, 1), (-2, 1)):
        got = md.head_changes(ta, tb, batch=1, n_pos=n_pos, measure=measure)
        assert got.shape == (3, 2)
        assert np.allclose(got, _changes_by_hand(ta, tb, 1, n, dist), atol=1e-12, rtol=0), n_pos
    assert np.allclose(md.head_changes(ta, tb, measure=measure), _changes_by_hand(ta, tb, 0, 5, dist), atol=1e-12)


def test_head_changes_default_to_total_variation_and_stop_at_the_first_layer_a_trace_lacks():
    ta, tb = _traces(L=3, H=2, B=1, T=4, seed=6)
    assert np.allclose(md.head_changes(ta, tb), _changes_by_hand(ta, tb, 0, 4, _tv), atol=1e-12)
    del ta["blocks.1.attn.hook_pattern"]  # A has layers 0 and 2: it stops after layer 0
    got = md.head_changes(ta, tb)
    first = {"blocks.0.attn.hook_pattern": ta["blocks.0.attn.hook_pattern"]}
    assert got.shape == (1, 2) and np.allclose(got, _changes_by_hand(first, tb, 0, 4, _tv), atol=1e-12)
    none = md.head_changes({"hook_logits": 0}, tb)
    assert none.shape == (0, 0)
    with pytest.raises(ValueError) as e:
        md.head_changes(ta, tb, measure="cosine")
    assert str(e.value) == "unknown measure 'cosine': choose one of total variation, Jensen–Shannon"


def test_ranked_heads_put_the_most_changed_first_ties_by_layer_then_head_and_nan_last():
    c = np.array([[0.2, np.nan, 0.5], [0.5, 0.1, 0.2]])
    got = md.ranked_heads(c)
    assert [(l, h) for l, h, _ in got] == [(0, 2), (1, 0), (0, 0), (1, 2), (1, 1), (0, 1)]
    assert [v for _, _, v in got][:5] == [0.5, 0.5, 0.2, 0.2, 0.1] and math.isnan(got[-1][2])
    assert all(isinstance(v, float) for _, _, v in got)
    assert md.ranked_heads([[0.0, 0.3]]) == [(0, 1, 0.3), (0, 0, 0.0)]


def test_a_weight_a_hair_below_zero_counts_as_zero_in_either_row():
    """The hand-written divergence clips both rows at 0 first; a row with a negative weight on either side."""
    neg = np.array([0.6, 0.4 + 1e-9, -1e-9])
    other = np.array([0.2, 0.3, 0.5])
    assert float(md.jensen_shannon(other, neg)) == pytest.approx(_js(other, neg), abs=1e-13)
    assert float(md.jensen_shannon(neg, other)) == pytest.approx(_js(neg, other), abs=1e-13)
    unclipped = 0.5 * md._kl2(other, 0.5 * (other + neg)) + 0.5 * md._kl2(neg, 0.5 * (other + neg))
    assert abs(unclipped - _js(other, neg)) > 1e-10  # the clipping does change the value


class OtherSaved(Saved):
    """Another kind of tokenizer whose saved form reads the same."""


def test_two_kinds_of_tokenizer_with_the_same_saved_form_are_not_the_same():
    assert md.same_tokenizer(Saved([["a", "b"]]), Saved([["a", "b"]]))
    assert not md.same_tokenizer(Saved([["a", "b"]]), OtherSaved([["a", "b"]]))


class OtherListed(Listed):
    """Another kind of tokenizer with the same token strings."""


def test_two_kinds_of_tokenizer_with_the_same_token_strings_are_not_the_same():
    assert md.same_tokenizer(Listed(["a", "b"]), Listed(["a", "b"]))
    assert not md.same_tokenizer(Listed(["a", "b"]), OtherListed(["a", "b"]))


def test_step_difference_reads_tensors_that_need_grad_and_warns_of_nothing_at_masked_scores():
    """Values by hand; a masked score on both sides (−inf − −inf) is NaN without a numpy warning."""
    import warnings

    a = torch.tensor([1.0, 2.0], requires_grad=True)
    b = torch.tensor([0.5, 4.0], requires_grad=True)
    assert md.step_difference(a, b).tolist() == [-0.5, 2.0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        d = md.step_difference(np.array([-np.inf, 1.0]), np.array([-np.inf, 3.0]))
    assert np.isnan(d[0]) and d[1] == 2.0
