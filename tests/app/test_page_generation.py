import numpy as np

from apphelp import chart, ok, page


def bars(at, title):
    return np.asarray(chart(at, title)["data"][0]["x"], dtype=float)


def test_distribution_stages_and_controls():
    at = ok(page("generation"))
    raw = bars(at, "softmax(logits)")
    assert abs(bars(at, "The distribution").sum() - raw.sum()) < 1e-6  # nothing reshaped by default
    at.number_input(key="gen.topk").set_value(3).run()
    final = bars(at, "The distribution")
    assert (final > 0).sum() == 3 and abs(final.sum() - 1) < 1e-6
    at.slider(key="gen.temp").set_value(0.0).run()
    assert (bars(at, "The distribution") > 0).sum() == 1


def test_generate_greedy_and_sampled():
    at = page("generation")
    at = [b for b in at.button if b.label == "Generate"][0].click().run()
    ok(at)
    g = at.session_state["gptviz.gen"]
    assert len(g["tokens"]) == 12
    at.radio(key="gen.mode").set_value("sampled").run()
    at = [b for b in at.button if b.label == "Generate"][0].click().run()
    assert len(at.session_state["gptviz.gen"]["tokens"]) == 12
    at.slider(key="gen.step").set_value(3).run()
    assert chart(at, "Step 3: drew")


def test_empty_prompt_is_a_message():
    at = page("generation")
    at.text_input(key="gen.prompt").input("€€€").run()
    ok(at) if at.get("plotly_chart") else None
    assert not at.exception
    assert any("no tokens" in w.value for w in at.warning)
