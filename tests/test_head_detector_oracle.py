"""The head detector (gptviz.interp.head_detector) against scores written out here from the definitions: a batch whose
rows repeat different tokens (the mean is over every scored query of every row), kinds no query can show (NaN), the
probe's tokens and defaults, ``detect`` on another row and with a probe model, the labels, the clearest head at its
bar, and the one-line summaries."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from gptviz import GPT, ModelConfig, trace
from gptviz.interp import head_detector as hd

KINDS = ("previous", "induction", "duplicate", "first", "current")


def keys_of(toks, t: int) -> dict[str, set]:
    """The keys each kind predicts for query t, from the module doc: t−1, t, 0 (for t > 0), the earlier copies of
    token t, and the key just after each earlier copy when that key is before t."""
    copies = [s for s in range(t) if toks[s] == toks[t]]
    return {"previous": {t - 1} if t > 0 else set(), "current": {t}, "first": {0} if t > 0 else set(),
            "duplicate": set(copies), "induction": {s + 1 for s in copies if s + 1 < t}}


def by_hand(p: np.ndarray, toks: np.ndarray) -> dict[str, np.ndarray]:
    """Scores of (L, H, B, T, T) patterns: for each kind, the weight on its keys summed per scored query, averaged
    over every scored query of every row together (NaN when no row has one)."""
    L, H = p.shape[:2]
    out = {}
    for kind in KINDS:
        weights = []
        for b in range(toks.shape[0]):
            for t in range(toks.shape[1]):
                ks = keys_of(toks[b], t)[kind]
                if ks:
                    weights.append(sum(p[:, :, b, t, s] for s in ks))
        out[kind] = np.mean(weights, axis=0) if weights else np.full((L, H), np.nan)
    return out


def random_patterns(L, H, B, T, seed=0):
    """Causal rows that sum to 1, float32 like a model's."""
    rng = np.random.default_rng(seed)
    p = rng.random((L, H, B, T, T)) * np.tril(np.ones((T, T)))
    return (p / p.sum(-1, keepdims=True)).astype(np.float32)


def test_a_batch_is_scored_over_every_scored_query_of_every_row_together():
    """Row 0 repeats nothing, row 1 repeats a token three times, row 2 two tokens: duplicate and induction come from
    rows 1 and 2 only, each query weighing the same whichever row it is in."""
    toks = np.array([[0, 1, 2, 3, 4, 5, 6],
                     [2, 2, 5, 2, 6, 1, 0],
                     [4, 3, 4, 3, 1, 4, 3]])
    p = random_patterns(2, 3, 3, 7)
    got = hd.head_scores(p, toks)
    want = by_hand(p.astype(np.float64), toks)
    assert set(got) == set(KINDS)
    for k in KINDS:
        assert got[k].shape == (2, 3) and got[k].dtype == np.float64
        assert np.allclose(got[k], want[k], atol=1e-12, rtol=0), k
    # one row alone, as (L, H, T, T) with (T,) tokens
    for b in range(3):
        one = hd.head_scores(p[:, :, b], toks[b], kinds=("duplicate", "induction", "previous"))
        assert set(one) == {"duplicate", "induction", "previous"}
        want = by_hand(p[:, :, b:b + 1].astype(np.float64), toks[b:b + 1])
        for k in one:
            assert np.allclose(one[k], want[k], atol=1e-12, rtol=0, equal_nan=True), (b, k)


def test_a_kind_no_query_can_show_is_nan_for_every_head():
    """Distinct tokens: no duplicate, no induction; a single token: no previous, no first, and current its weight."""
    p = random_patterns(2, 2, 1, 5)[:, :, 0]
    s = hd.head_scores(p, np.arange(5))
    assert np.isnan(s["duplicate"]).all() and np.isnan(s["induction"]).all() and s["duplicate"].shape == (2, 2)
    s = hd.head_scores(np.ones((1, 3, 1, 1)), [7])
    assert np.isnan(s["previous"]).all() and np.isnan(s["first"]).all() and s["previous"].shape == (1, 3)
    assert np.array_equal(s["current"], np.ones((1, 3)))
    # a token seen once before, right before: a duplicate, but the key after that copy is the query itself
    s = hd.head_scores(np.eye(2)[None, None], [4, 4])
    assert s["duplicate"][0, 0] == 0.0 and np.isnan(s["induction"][0, 0])


def test_target_cells_mark_exactly_the_keys_of_the_definitions():
    toks = np.array([1, 2, 1, 1, 3, 2, 1])
    for kind in KINDS:
        cells = hd.target_cells(toks, kind)
        want = np.zeros((7, 7), dtype=bool)
        for t in range(7):
            for s in keys_of(toks, t)[kind]:
                want[t, s] = True
        assert cells.dtype == bool and np.array_equal(cells, want), kind
    with pytest.raises(ValueError) as e:
        hd.target_cells(toks, "copy")
    assert str(e.value) == "kind='copy' must be one of previous, induction, duplicate, first, current"


def _model(block_size=16, vocab=20):
    return GPT(ModelConfig(vocab_size=vocab, block_size=block_size, n_layer=2, n_head=2, n_embd=8))


def test_patterns_from_trace_stack_every_layers_pattern_of_the_asked_row():
    m = _model()
    idx = torch.tensor([[1, 2, 3, 4, 5], [5, 4, 3, 3, 9]])
    tr = trace(m, idx)
    seen = {}
    hooks = [m.transformer.h[i].attn.hook_pattern.register_forward_hook(
        lambda mod, args, out, i=i: seen.__setitem__(i, out.detach().numpy().copy())) for i in range(2)]
    with torch.no_grad():
        m(idx)
    for h in hooks:
        h.remove()
    for b in (0, 1):
        got = hd.patterns_from_trace(tr, b)
        assert got.shape == (2, 2, 5, 5)
        assert np.allclose(got, np.stack([seen[0][b], seen[1][b]]), atol=1e-6)
    assert np.array_equal(hd.patterns_from_trace(tr), hd.patterns_from_trace(tr, 0))


def test_the_probe_tokens_are_runs_of_distinct_allowed_tokens_repeated_and_the_vocabulary_must_be_large_enough():
    idx = hd.repeated_probe(10, n=7, batch=4, seed=2, avoid=(0, 3, 9))
    assert idx.shape == (4, 14) and idx.dtype == torch.long
    assert torch.equal(idx[:, :7], idx[:, 7:])
    for row in idx[:, :7].tolist():  # exactly the 7 allowed tokens, each once
        assert sorted(row) == [1, 2, 4, 5, 6, 7, 8]
    assert len({tuple(r) for r in idx[:, :7].tolist()}) > 1  # the rows are not all one order
    assert torch.equal(idx, hd.repeated_probe(10, n=7, batch=4, seed=2, avoid=(0, 3, 9)))
    assert not torch.equal(idx, hd.repeated_probe(10, n=7, batch=4, seed=3, avoid=(0, 3, 9)))
    with pytest.raises(ValueError) as e:
        hd.repeated_probe(10, n=8, avoid=(0, 3, 9))
    assert str(e.value) == "a probe of 8 distinct tokens needs a vocabulary of at least 8"
    d = hd.repeated_probe(40)  # the defaults: 8 rows of 32 tokens twice
    assert d.shape == (8, 64) and torch.equal(d, hd.repeated_probe(40, 32, 8, 0))
    assert all(len(set(r)) == 32 for r in d[:, :32].tolist())


def _probe_by_hand(m, idx, n):
    """Scores from the definitions on the model's own patterns, and the mean loss predicting token t+1 at t, within
    the first copy (t + 1 < n) and within the second (t >= n)."""
    tr = trace(m, idx)
    P = np.stack([tr[f"blocks.{l}.attn.hook_pattern"].numpy() for l in range(2)]).transpose(0, 2, 1, 3, 4)
    V = m.config.vocab_size
    nll = F.cross_entropy(tr["hook_logits"][:, :-1].reshape(-1, V).float(), idx[:, 1:].reshape(-1), reduction="none")
    nll = nll.reshape(idx.shape[0], -1)
    return by_hand(P.astype(np.float64), idx.numpy()), float(nll[:, :n - 1].mean()), float(nll[:, n:].mean())


def test_the_probe_is_cut_to_half_the_context_and_runs_eight_rows_by_default():
    """block_size 9: at most 4 tokens repeated (not 32); the tokens to avoid never appear."""
    m = _model(block_size=9)
    out = hd.probe(m, avoid=(1, 2))
    assert (out["n"], out["batch"]) == (4, 8)
    idx = hd.repeated_probe(20, 4, 8, 0, avoid=(1, 2))
    scores, first, second = _probe_by_hand(m, idx, 4)
    for k in KINDS:
        assert np.allclose(out["scores"][k], scores[k], atol=1e-6, rtol=0), k
    assert out["loss_first"] == pytest.approx(first, abs=1e-5)
    assert out["loss_second"] == pytest.approx(second, abs=1e-5)
    # n exactly half the context: kept; the seed is the one asked for
    out = hd.probe(m, n=4, batch=2, seed=5)
    scores, first, _ = _probe_by_hand(m, hd.repeated_probe(20, 4, 2, 5), 4)
    assert out["n"] == 4 and np.allclose(out["scores"]["induction"], scores["induction"], atol=1e-6, rtol=0)
    assert out["loss_first"] == pytest.approx(first, abs=1e-5)


def test_detect_scores_the_asked_row_and_takes_induction_and_duplicate_from_a_probe_model():
    m = _model()
    idx = torch.tensor([[3, 4, 5, 3, 4, 5, 6], [7, 8, 7, 8, 7, 9, 9]])
    tr = trace(m, idx)
    P = hd.patterns_from_trace(tr, 1).astype(np.float64)[:, :, None]
    want = by_hand(P, idx[1:].numpy())
    got = hd.detect(tr, 1)
    for k in KINDS:
        assert np.allclose(got[k], want[k], atol=1e-6, rtol=0), k
    pm = _model(block_size=10)
    got = hd.detect(tr, 1, probe_model=pm, probe_seed=4)
    pr, _, _ = _probe_by_hand(pm, hd.repeated_probe(20, 5, 8, 4), 5)
    for k in ("induction", "duplicate"):
        assert np.allclose(got[k], pr[k], atol=1e-6, rtol=0), k
    for k in ("previous", "first", "current"):
        assert np.allclose(got[k], want[k], atol=1e-6, rtol=0), k
    # the default seed is 0
    pr0, _, _ = _probe_by_hand(pm, hd.repeated_probe(20, 5, 8, 0), 5)
    assert np.allclose(hd.detect(tr, 1, probe_model=pm)["induction"], pr0["induction"], atol=1e-6, rtol=0)


def test_best_labels_treat_nan_as_below_every_score():
    scores = {"previous": np.array([[np.nan, 0.2, np.nan]]), "first": np.array([[0.1, np.nan, np.nan]]),
              "current": np.array([[0.05, 0.3, np.nan]])}
    labels, best = hd.best_labels(scores)
    assert labels.tolist() == [["first", "current", "previous"]]
    assert best.tolist() == [[0.1, 0.3, -1.0]]


def test_the_clearest_head_needs_a_telling_score_of_at_least_the_bar_and_ties_go_to_the_earliest_head():
    z = np.zeros((2, 2))
    scores = {k: z.copy() for k in KINDS}
    scores["first"][0, 0] = 0.95
    scores["duplicate"][1, 1] = hd.TELLING_MIN  # exactly the bar: enough
    assert hd.clearest_head(scores) == (1, 1, "duplicate", 0.3)
    scores["duplicate"][1, 1] = np.nextafter(hd.TELLING_MIN, 0)  # just under: the overall best
    assert hd.clearest_head(scores) == (0, 0, "first", 0.95)
    scores["induction"][0, 1] = scores["previous"][1, 0] = 0.7  # a tie: the earlier layer
    assert hd.clearest_head(scores) == (0, 1, "induction", 0.7)
    only_rest = {"first": np.array([[0.2, 0.6]]), "current": np.array([[0.6, 0.1]])}
    assert hd.clearest_head(only_rest) == (0, 0, "current", 0.6)  # no telling kind at all; a tie: head 0
    assert hd.TELLING_MIN == 0.3


def test_summarise_writes_one_line_per_head_with_every_kind_at_the_precision_asked():
    scores = {"previous": np.array([[0.5, 0.125], [1.0, 0.0]]), "first": np.array([[0.25, 0.0], [0.0, 0.875]])}
    assert hd.summarise(scores) == ["L0H0  previous 0.50 · first 0.25", "L0H1  previous 0.12 · first 0.00",
                                    "L1H0  previous 1.00 · first 0.00", "L1H1  previous 0.00 · first 0.88"]
    assert hd.summarise(scores, precision=3)[1] == "L0H1  previous 0.125 · first 0.000"


class _Recorded:
    """The little of a trace that ``patterns_from_trace`` reads: its config and its patterns by hook name."""

    def __init__(self, pats, n_layer):
        self.config = ModelConfig(vocab_size=20, block_size=16, n_layer=n_layer, n_head=2, n_embd=8)
        self.pats = pats

    def __getitem__(self, name):
        return self.pats[name]


def test_patterns_are_read_from_tensors_that_need_grad_and_from_plain_numpy_arrays():
    """Values written here: a pattern computed with autograd on is read as its values; a trace turned to numpy
    (``Trace.numpy``, the cached form) is scored like the tensor one, both against the definitions."""
    w = torch.rand(2, 2, 4, 4, requires_grad=True)
    p = torch.softmax(w * 2, -1)
    got = hd.patterns_from_trace(_Recorded({"blocks.0.attn.hook_pattern": p, "blocks.1.attn.hook_pattern": p * 0.5},
                                           2), 1)
    want = p.detach().numpy()[1]
    assert np.allclose(got, np.stack([want, want * 0.5]), atol=1e-7)
    m = _model()
    idx = torch.tensor([[3, 4, 5, 3, 4, 5, 6], [7, 8, 7, 8, 7, 9, 9]])
    tr = trace(m, idx).numpy()
    P = np.stack([tr[f"blocks.{l}.attn.hook_pattern"][1] for l in range(2)]).astype(np.float64)[:, :, None]
    want = by_hand(P, idx[1:].numpy())
    got = hd.detect(tr, 1)
    for k in KINDS:
        assert np.allclose(got[k], want[k], atol=1e-6, rtol=0), k


def test_tokens_of_any_shape_are_read_flat_and_a_trace_without_a_mask_field_is_scored_whole():
    """(1, T) tokens give the cells of the (T,) ones (by the definitions); an object with only the patterns, the
    config and the token ids (no ``attention_mask`` at all) is scored on its whole length."""
    toks = np.array([1, 2, 1, 1, 3])
    for kind in KINDS:
        want = np.zeros((5, 5), dtype=bool)
        for t in range(5):
            for s in keys_of(toks, t)[kind]:
                want[t, s] = True
        assert np.array_equal(hd.target_cells(toks[None], kind), want), kind
    p = torch.tensor(random_patterns(1, 2, 2, 5)[0]).transpose(0, 1)  # (B, H, T, T), both layers
    rec = _Recorded({"blocks.0.attn.hook_pattern": p, "blocks.1.attn.hook_pattern": p}, 2)
    rec.idx = torch.tensor(np.stack([toks, toks[::-1]]))
    got = hd.detect(rec, 1)
    P = np.stack([p[1].numpy(), p[1].numpy()]).astype(np.float64)[:, :, None]
    want = by_hand(P, rec.idx[1:].numpy())
    for k in KINDS:
        assert np.allclose(got[k], want[k], atol=1e-12, rtol=0), k


def test_detect_scores_a_padded_rows_real_tokens_only():
    """Row 1 of a padded batch (7 real tokens, 5 of padding): its scores are those of the hand-written scorer on its
    own 7 tokens' patterns, as if the padding were not there; row 0 (no padding) scores all 12."""
    model = _model()
    g = torch.Generator().manual_seed(4)
    idx = torch.randint(1, 20, (2, 12), generator=g)
    mask = torch.ones(2, 12, dtype=torch.long)
    mask[1, 7:] = 0
    with torch.no_grad():
        tr = trace(model, idx, attention_mask=mask).numpy()
    for b, T in ((1, 7), (0, 12)):
        got = hd.detect(tr, b=b)
        pats = hd.patterns_from_trace(tr, b)[:, :, :T, :T]
        want = by_hand(pats[:, :, None], np.asarray(idx[b:b + 1, :T]))
        for kind in want:
            np.testing.assert_allclose(got[kind], want[kind], atol=1e-6, equal_nan=True)
    with_padding = by_hand(hd.patterns_from_trace(tr, 1)[:, :, None], np.asarray(idx[1:2]))
    assert not all(np.allclose(hd.detect(tr, b=1)[k], with_padding[k], equal_nan=True) for k in with_padding)
