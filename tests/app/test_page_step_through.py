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


def test_a_step_can_be_edited_and_later_steps_follow():
    from apphelp import array, chart

    at = page("step")
    sel = at.selectbox(key="step.jump")
    i = [k for k, o in enumerate(sel.options) if "blocks.1.hook_resid_pre" in o][0]
    at = sel.set_value(i).run()
    assert any("Edit this step" in e.label for e in at.expander)
    before = array(chart(at, "L1 residual stream in")["data"][0]["z"])
    s = at.session_state["gptviz.settings"]
    s["edits"] = {"set": [{"name": "blocks.1.hook_resid_pre", "index": [0, 2], "values": [3.0] * 16}], "heads_off": []}
    at.run()
    ok(at)
    after = array(chart(at, "L1 residual stream in")["data"][0]["z"])
    assert (after[2] == 3.0).all() and (after[:2] == before[:2]).all()
    at = at.selectbox(key="step.jump").set_value(len(sel.options) - 1).run()  # the loss, downstream of the edit
    assert at.title[0].value.endswith("loss")
