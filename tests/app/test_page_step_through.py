from apphelp import ok, page, set_sidebar


def test_walks_every_step_with_its_words():
    at = ok(page("step"))
    assert at.title[0].value == "1. Token embedding"
    assert len(at.latex) == 1 and len(at.code) == 1
    assert any("Shape" in m.value and "d_model = 16" in m.value for m in at.markdown)
    at = [b for b in at.button if b.label == "Next ▶"][0].click().run()
    assert at.title[0].value == "2. Position embedding"
    at = [b for b in at.button if b.label == "◀ Previous"][0].click().run()
    assert at.title[0].value == "1. Token embedding"


def test_jump_to_any_step_and_state_survives_a_config_change():
    at = page("step")
    sel = at.selectbox(key="step.jump")
    pattern = [i for i, o in enumerate(sel.options) if "attention weights" in o][0]
    at = sel.set_value(pattern).run()
    ok(at)
    assert "attention weights" in at.title[0].value
    at = set_sidebar(at, "n_layer", 1)
    ok(at)
    assert at.title[0].value  # the step index is clamped to the new, shorter list
    last = at.selectbox(key="step.jump").options[-1]
    at = at.selectbox(key="step.jump").set_value(len(at.selectbox(key="step.jump").options) - 1).run()
    assert at.title[0].value.endswith("loss")
    assert "loss" in last
