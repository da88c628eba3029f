"""The head detector against scores worked out by hand: pure hand-made patterns, uniform attention, the
repeated-random probe on a real model, and ``detect`` on a padded batch (padding must not be scored)."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from gptviz import GPT, ModelConfig, trace
from gptviz.interp.head_detector import KINDS, best_labels, detect, head_scores, probe, repeated_probe, target_cells

T = 12
# a run of 6 distinct tokens, repeated: position t >= 6 repeats position t - 6
TOKENS = np.array([5, 9, 2, 7, 3, 8, 5, 9, 2, 7, 3, 8])


def pattern(kind: str) -> np.ndarray:
    """A causal (T, T) attention pattern that does exactly ``kind`` where it can, and looks at itself elsewhere."""
    p = np.zeros((T, T))
    for t in range(T):
        if kind == "previous" and t > 0:
            p[t, t - 1] = 1
        elif kind == "first":
            p[t, 0] = 1
        elif kind == "duplicate" and t >= 6:
            p[t, t - 6] = 1
        elif kind == "induction" and t >= 6:
            p[t, t - 5] = 1
        else:
            p[t, t] = 1
    return p


# Every pure pattern's five scores, worked out by hand on TOKENS. The queries each kind scores, and where it looks:
# previous t = 1..11 (11 queries) at t-1; current t = 0..11 (12) at t; first t = 1..11 (11) at 0 (query 0 is not
# scored: it can look nowhere else); duplicate t = 6..11 (6) at t-6; induction t = 6..11 (6) at t-5.
PURE = {
    # row 0 at itself (a hit for current), row t >= 1 at t-1: row 1 is on key 0 (a hit for first)
    "previous": {"previous": 1, "current": 1 / 12, "first": 1 / 11, "duplicate": 0, "induction": 0},
    # every row at key 0: row 0 is on itself, row 1 on its previous token, row 6 on its earlier copy (6 - 6 = 0)
    "first": {"previous": 1 / 11, "current": 1 / 12, "first": 1, "duplicate": 1 / 6, "induction": 0},
    # rows 0..5 at themselves, rows 6..11 at t-6: row 6 is on key 0
    "duplicate": {"previous": 0, "current": 6 / 12, "first": 1 / 11, "duplicate": 1, "induction": 0},
    # rows 0..5 at themselves, rows 6..11 at t-5 (keys 1..6: never 0, never t-1, never t-6)
    "induction": {"previous": 0, "current": 6 / 12, "first": 0, "duplicate": 0, "induction": 1},
    # the identity: query 0 sits on key 0, but first does not score query 0
    "current": {"previous": 0, "current": 1, "first": 0, "duplicate": 0, "induction": 0},
}


@pytest.mark.parametrize("kind", KINDS)
def test_a_pure_pattern_scores_one_on_its_kind_and_exactly_its_overlaps_on_the_rest(kind):
    scores = head_scores(pattern(kind)[None, None], TOKENS)
    assert {k: float(scores[k][0, 0]) for k in KINDS} == pytest.approx(PURE[kind], abs=1e-12)
    labels, best = best_labels(scores)
    assert labels[0, 0] == kind and best[0, 0] == pytest.approx(1.0)


def test_uniform_attention_scores_the_share_of_a_row():
    causal = np.tril(np.ones((T, T)))
    p = causal / causal.sum(1, keepdims=True)  # row t gives 1/(t+1) to each key 0..t
    s = {k: float(v[0, 0]) for k, v in head_scores(p[None, None], TOKENS).items()}
    share = [1 / (t + 1) for t in range(T)]
    assert s == pytest.approx({
        "previous": np.mean(share[1:]),  # queries t >= 1, one key each
        "current": np.mean(share),  # every query, itself
        "first": np.mean(share[1:]),  # queries t >= 1 (not query 0), key 0
        "duplicate": np.mean(share[6:]),  # queries 6..11, one earlier copy each (t-6)
        "induction": np.mean(share[6:]),  # queries 6..11, the key after that copy (t-5 < t)
    }, abs=1e-12)
    # one token over and over: query t has t earlier copies (keys 0..t-1) and t-1 keys after a copy (keys 1..t-1)
    s = {k: float(v[0, 0]) for k, v in head_scores(p[None, None], np.full(T, 4)).items()}
    assert s == pytest.approx({
        "previous": np.mean(share[1:]), "current": np.mean(share), "first": np.mean(share[1:]),
        "duplicate": np.mean([t / (t + 1) for t in range(1, T)]),
        # query 1's only copy is key 0, and the key after it is query 1 itself: induction scores queries 2..11
        "induction": np.mean([(t - 1) / (t + 1) for t in range(2, T)]),
    }, abs=1e-12)


def test_target_cells_follow_the_tokens():
    ind = target_cells(TOKENS, "induction")
    assert ind[6, 1] and ind[11, 6] and ind.sum() == 6
    assert target_cells(TOKENS, "duplicate")[7, 1] and not target_cells(TOKENS, "duplicate")[:6].any()
    with pytest.raises(ValueError, match="kind"):
        target_cells(TOKENS, "nonsense")


def _model():
    return GPT(ModelConfig(vocab_size=50, block_size=24, n_layer=2, n_head=2, n_embd=16))


def test_the_probe_repeats_a_run_of_distinct_tokens_and_scores_it_by_its_shape():
    n, B = 10, 3
    idx = repeated_probe(50, n=n, batch=B, seed=1)
    assert idx.shape == (B, 2 * n) and torch.equal(idx[:, :n], idx[:, n:])
    assert all(len(set(r[:n].tolist())) == n for r in idx)
    m = _model()
    out = probe(m, n=n, batch=B, seed=1)
    assert (out["n"], out["batch"]) == (n, B)
    tr = trace(m, idx)
    # (L, B, H, 2n, 2n)
    P = np.stack([tr[f"blocks.{l}.attn.hook_pattern"].numpy() for l in range(2)]).astype(np.float64)
    # every row has the same shape: position t >= n repeats t - n, and no token occurs twice within a run, so
    # (averaging over rows and queries) duplicate looks at t - n and induction at t - n + 1, for t = n..2n-1
    want = {"previous": np.mean([P[..., t, t - 1] for t in range(1, 2 * n)], axis=(0, 2)),
            "current": np.mean([P[..., t, t] for t in range(2 * n)], axis=(0, 2)),
            "first": np.mean([P[..., t, 0] for t in range(1, 2 * n)], axis=(0, 2)),
            "duplicate": np.mean([P[..., t, t - n] for t in range(n, 2 * n)], axis=(0, 2)),
            "induction": np.mean([P[..., t, t - n + 1] for t in range(n, 2 * n)], axis=(0, 2))}
    for k in KINDS:
        assert out["scores"][k].shape == (2, 2)
        assert np.allclose(out["scores"][k], want[k], rtol=0, atol=1e-6), k
    # the losses: predicting token t+1 from position t, within the first copy (t + 1 <= n - 1) and the second (t >= n)
    nll = F.cross_entropy(tr["hook_logits"][:, :-1].reshape(-1, 50), idx[:, 1:].reshape(-1), reduction="none")
    nll = nll.reshape(B, 2 * n - 1)
    assert out["loss_first"] == pytest.approx(float(nll[:, 0:n - 1].mean()), abs=1e-5)
    assert out["loss_second"] == pytest.approx(float(nll[:, n:2 * n - 1].mean()), abs=1e-5)


def by_hand(p: np.ndarray, toks) -> dict[str, float]:
    """One (n, n) pattern's scores on ``toks`` straight from the definitions: for every query, the set of keys each
    kind predicts; the score is the mean, over the queries with any such key, of the weight on those keys."""
    got: dict[str, list] = {k: [] for k in KINDS}
    for t in range(len(toks)):
        copies = [s for s in range(t) if toks[s] == toks[t]]
        keys = {"previous": {t - 1} if t > 0 else set(), "current": {t}, "first": {0} if t > 0 else set(),
                "duplicate": set(copies), "induction": {s + 1 for s in copies if s + 1 < t}}
        for k, ks in keys.items():
            if ks:
                got[k].append(sum(float(p[t, s]) for s in ks))
    return {k: float(np.mean(v)) if v else float("nan") for k, v in got.items()}


def test_detect_on_a_padded_batch_scores_only_each_rows_real_positions():
    idx = torch.tensor([[7, 3, 9, 7, 3, 9, 7, 3, 9, 1],
                        [4, 8, 6, 4, 8, 6, 0, 0, 0, 0]])  # row 1: 6 real tokens, then 4 of padding
    mask = torch.tensor([[1] * 10, [1] * 6 + [0] * 4])
    lengths = [10, 6]
    # layer 0 head 0 becomes a previous-token head on the real positions (query 0 on itself); a padded query spreads
    # its weight evenly over its row's real keys, as the model's own padded queries do
    prev = torch.zeros(2, 10, 10)
    for b, n in enumerate(lengths):
        prev[b, 0, 0] = 1
        for t in range(1, 10):
            if t < n:
                prev[b, t, t - 1] = 1
            else:
                prev[b, t, :n] = 1 / n

    def previous_head(x):
        x[:, 0] = prev
        return x

    m = _model()
    tr = trace(m, idx, attention_mask=mask, edits={"blocks.0.attn.hook_pattern": previous_head})
    assert np.array_equal(tr["blocks.0.attn.hook_pattern"][:, 0].numpy(), prev.numpy())
    d = [detect(tr, b) for b in range(2)]
    # the previous-token head, scored by hand: all its weight is on t-1 in both rows, and on its first token only at
    # query 0 (current) and query 1 (first); its previous token is never an earlier copy or the key after one
    assert {k: float(d[0][k][0, 0]) for k in KINDS} == pytest.approx(
        {"previous": 1, "current": 1 / 10, "first": 1 / 9, "duplicate": 0, "induction": 0}, abs=1e-6)
    assert {k: float(d[1][k][0, 0]) for k in KINDS} == pytest.approx(
        {"previous": 1, "current": 1 / 6, "first": 1 / 5, "duplicate": 0, "induction": 0}, abs=1e-6)
    # every head, the model's own ones included: each row's real block of the recorded pattern, scored by hand
    for b, n in enumerate(lengths):
        for l in range(2):
            P = tr[f"blocks.{l}.attn.hook_pattern"][b].numpy()
            for h in range(2):
                want = by_hand(P[h, :n, :n], idx[b, :n].tolist())
                assert {k: float(d[b][k][l, h]) for k in KINDS} == pytest.approx(want, abs=1e-6), (b, l, h)
    # a trace without any attention mask is scored on its whole length
    whole = trace(m, idx[:1])
    assert whole.attention_mask is None
    P = whole["blocks.1.attn.hook_pattern"][0].numpy()
    assert {k: float(detect(whole)[k][1, 1]) for k in KINDS} == pytest.approx(by_hand(P[1], idx[0].tolist()), abs=1e-6)


def test_the_clearest_head_is_the_best_telling_one_unless_none_reaches_the_bar():
    """Hand-made scores: a previous-token head at 0.6 beats a first-token head at 0.9 (a resting place, not a
    behaviour worth a first screen); with every telling score under 0.3 the overall best is shown."""
    from gptviz.interp.head_detector import clearest_head

    z = np.zeros((2, 3))
    scores = {k: z.copy() for k in ("previous", "induction", "duplicate", "first", "current")}
    scores["first"][0, 0] = 0.9
    scores["previous"][1, 2] = 0.6
    scores["induction"][0, 1] = 0.5
    assert clearest_head(scores) == (1, 2, "previous", 0.6)
    scores["previous"][1, 2] = scores["induction"][0, 1] = 0.2
    assert clearest_head(scores) == (0, 0, "first", 0.9)
