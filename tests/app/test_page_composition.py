"""The Attention page's "How heads compose" view, as a user opens it: on the shipped induction-heads model the chart's
cells are TransformerLens's composition scores (written out by hand in tests/test_composition_oracle.py), earlier
heads down, later heads across, grey where there is no composition; the strongest pair is named with what the head
detector says each head does; Q and V switch the chart; a one-layer model gets a sentence, not a chart."""
import numpy as np
from apphelp import array, chart, messages, ok, page
from test_composition_oracle import tl_scores

from gptviz.model.checkpoint import load_checkpoint
from gptviz.paths import CHECKPOINTS


def composed(at, mode=None):
    at.segmented_control(key="att.more").set_value("How heads compose").run()
    if mode:
        at.segmented_control(key="comp.mode").set_value(mode).run()
    return ok(at)


def test_the_induction_model_composes_as_transformerlens_says():
    at = composed(page("attention", preset="checkpoint: induction-heads"))
    ind = load_checkpoint(CHECKPOINTS / "induction-heads.safetensors")
    L, H = ind.config.n_layer, ind.config.n_head
    c = chart(at, "K-composition: earlier heads into later heads")
    z = array(c["data"][0]["z"]).astype(float)
    want = tl_scores(ind.model, "K")[: L - 1, :, 1:, :].reshape((L - 1) * H, (L - 1) * H)
    np.testing.assert_allclose(z, want, rtol=1e-6)
    assert c["data"][0]["y"][0] == "L0 H0" and c["data"][0]["x"][-1] == f"L{L - 1} H{H - 1}"
    words = " ".join(m.value for m in at.markdown)
    assert "L0 H2 → L1 H" in words and "(previous 0." in words and " → induction 0." in words
    assert "1/√d_model ≈ 0.06" in " ".join(c.value for c in at.caption)
    at.segmented_control(key="comp.mode").set_value("V").run()
    v = array(chart(ok(at), "V-composition: earlier heads into later heads")["data"][0]["z"]).astype(float)
    np.testing.assert_allclose(v, tl_scores(ind.model, "V")[: L - 1, :, 1:, :].reshape(z.shape), rtol=1e-6)


def test_three_layers_grey_the_pairs_that_do_not_compose():
    """The configurable model with 3 layers: rows L0, L1; columns L1, L2; a row of layer 1 into a column of layer 1
    is grey (no value in the score trace, a grey cell in the mask trace)."""
    at = composed(page("attention", n_layer=3))
    c = chart(at, "K-composition")
    z, grey = array(c["data"][0]["z"]).astype(float), array(c["data"][1]["z"]).astype(float)
    H = len(z) // 2
    assert np.isnan(z[H, 0]) and grey[H, 0] == 1  # L1 H0 → L1 H0: same layer
    assert z[0, 0] > 0 and np.isnan(grey[0, 0])  # L0 H0 → L1 H0
    assert np.isnan(z[H:, :H]).all() and not np.isnan(z[:H]).any() and not np.isnan(z[H:, H:]).any()


def test_one_layer_says_why_not():
    at = page("attention", n_layer=1)
    at.segmented_control(key="att.more").set_value("How heads compose").run()
    assert not at.exception
    assert "a one-layer model has no earlier head for a later one to read" in messages(at)
