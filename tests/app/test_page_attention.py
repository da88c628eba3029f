import numpy as np

from apphelp import array, chart, ok, page, set_sidebar, titles


def test_every_step_in_order():
    at = ok(page("attention"))
    heads = [s.value for s in at.subheader]
    for i, word in enumerate(["norm", "Q, K and V", "Q", "K", "V", "Q Kᵀ", "1/√d_head", "mask", "Softmax",
                              "Weighted values", "side by side", "output projection", "residual add"]):
        assert any(word in h for h in heads), word
    assert len(at.latex) >= 10 and len(at.code) >= 10
    t = titles(at)
    assert any("masked scores" in x for x in t) and any("Every layer" in x or "every head" in x for x in t)


def test_pattern_rows_sum_to_one_and_masked_cells_are_marked():
    at = page("attention")
    c = chart(at, "L0 attention weights")
    z = array(c["data"][0]["z"])
    mask = np.isfinite(array(c["data"][1]["z"]))
    assert np.array_equal(mask, np.triu(np.ones_like(mask), 1))
    assert np.allclose(np.nansum(z, axis=1), 1.0, atol=1e-5)


def test_layer_and_head_selectors_change_the_view():
    at = page("attention")
    z0 = array(chart(at, "L0 attention weights")["data"][0]["z"])
    at = set_sidebar(at, "head", 1)
    z1 = array(chart(at, "L0 attention weights")["data"][0]["z"])
    assert not np.allclose(np.nan_to_num(z0), np.nan_to_num(z1))
    at = set_sidebar(at, "layer", 1)
    assert at.title[0].value.startswith("Attention · layer 1 · head 1")
    at = set_sidebar(at, "head", -1)
    ok(at)
    assert any("every head" in t for t in titles(at))


def test_switching_a_head_off_zeroes_it_and_recomputes():
    at = page("attention")
    out_before = array(chart(at, "L0 attention output")["data"][0]["z"])
    at.toggle(key="gptviz.headoff.0.0").set_value(True).run()
    ok(at)
    z = array(chart(at, "L0 attention weights")["data"][0]["z"])
    assert np.nansum(np.abs(z)) == 0
    assert not np.allclose(array(chart(at, "L0 attention output")["data"][0]["z"]), out_before)
    at = [b for b in at.button if b.label == "Clear all edits"][0].click().run()
    assert np.allclose(array(chart(at, "L0 attention output")["data"][0]["z"]), out_before)


def test_rope_model_shows_rotated_steps_and_bad_shape_keeps_page():
    at = set_sidebar(page("attention"), "pos_encoding", "rope")
    ok(at)
    assert any("RoPE" in s.value for s in at.subheader)
    at = set_sidebar(at, "n_embd", 15)
    ok(at)
    assert any("n_embd=15" in e.value for e in at.error)
