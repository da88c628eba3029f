"""The head detector on hand-made patterns: each pure behaviour scores 1 on its own kind and low on the rest."""
import numpy as np
import pytest
import torch

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


@pytest.mark.parametrize("kind", KINDS)
def test_a_pure_pattern_scores_one_on_its_kind(kind):
    scores = head_scores(pattern(kind)[None, None], TOKENS)
    assert scores[kind][0, 0] == pytest.approx(1.0)
    for other in KINDS:
        if other != kind and not (kind == "current" and other == "first"):
            assert scores[other][0, 0] <= 0.5, (kind, other, scores[other][0, 0])  # half the rows look at themselves
    labels, best = best_labels(scores)
    assert labels[0, 0] == kind and best[0, 0] == pytest.approx(1.0)


def test_uniform_attention_scores_the_share_of_a_row():
    causal = np.tril(np.ones((T, T)))
    p = causal / causal.sum(1, keepdims=True)
    s = head_scores(p[None, None], TOKENS)
    # previous: mean over t >= 1 of 1/(t+1)
    assert s["previous"][0, 0] == pytest.approx(np.mean([1 / (t + 1) for t in range(1, T)]))
    # induction: queries 6..11, each has one earlier occurrence at t-6, whose successor t-5 is allowed
    assert s["induction"][0, 0] == pytest.approx(np.mean([1 / (t + 1) for t in range(6, T)]))


def test_target_cells_follow_the_tokens():
    ind = target_cells(TOKENS, "induction")
    assert ind[6, 1] and ind[11, 6] and ind.sum() == 6
    assert target_cells(TOKENS, "duplicate")[7, 1] and not target_cells(TOKENS, "duplicate")[:6].any()
    with pytest.raises(ValueError, match="kind"):
        target_cells(TOKENS, "nonsense")


def test_probe_repeats_a_run_of_distinct_tokens_and_detect_reads_a_trace():
    idx = repeated_probe(50, n=10, batch=3, seed=1)
    assert idx.shape == (3, 20) and torch.equal(idx[:, :10], idx[:, 10:])
    assert all(len(set(r[:10].tolist())) == 10 for r in idx)
    m = GPT(ModelConfig(vocab_size=50, block_size=24, n_layer=2, n_head=2, n_embd=16))
    out = probe(m, n=10, batch=3, seed=1)
    tr = trace(m, idx)
    pats = np.stack([tr[f"blocks.{l}.attn.hook_pattern"].numpy() for l in range(2)]).transpose(0, 2, 1, 3, 4)
    want = head_scores(pats, idx.numpy())
    for k in KINDS:
        assert np.allclose(out["scores"][k], want[k])
    d = detect(trace(m, idx[:1]))
    assert set(d) == set(KINDS) and d["previous"].shape == (2, 2)
