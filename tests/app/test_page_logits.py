import math

from apphelp import array, chart, messages, metric, ok, page, set_sidebar


def test_loss_equals_cross_entropy_and_baseline():
    at = ok(page("logits"))
    mean = metric(at, "mean of −log p")
    assert mean == metric(at, "F.cross_entropy")
    V = array(chart(at, "logits")["data"][0]["z"]).shape[1]
    assert metric(at, "uniform guess ln V") == round(math.log(V), 5)
    probs = array(chart(at, "softmax(logits)")["data"][0]["z"])
    assert abs(probs.sum(axis=1) - 1).max() < 1e-5
    assert len(at.table) == 1


def test_large_vocabulary_shows_top_k_and_targets():
    at = set_sidebar(page("logits"), "tokenizer", "gpt2")
    ok(at)
    c = chart(at, "softmax(logits) (top-10")
    z10 = array(c["data"][0]["z"])
    T = z10.shape[0]
    assert T < z10.shape[1] <= 11 * T  # the top 10 of each position plus its target, not 50,257 columns
    at.slider(key="logits.k").set_value(3).run()
    z3 = array(chart(at, "softmax(logits) (top-3")["data"][0]["z"])
    assert z3.shape[1] <= 4 * T and z3.shape[1] < z10.shape[1]


def test_single_token_has_no_target():
    at = set_sidebar(page("logits"), "text", "t")
    ok(at)
    assert "No position has a target" in messages(at)
