import pytest
from apphelp import engine_run, ok, page, set_sidebar


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


def _show(at, hook):
    sel = at.selectbox(key="step.jump")
    return sel.set_value([k for k, o in enumerate(sel.options) if o.endswith(" · " + hook)][0]).run()


def _z(at, title):
    from apphelp import array, chart

    return array(chart(at, title)["data"][0]["z"])


def test_a_step_can_be_edited_and_later_steps_follow():
    import numpy as np

    plain, loss_plain = engine_run()
    edited, loss_edited = engine_run("blocks.1.hook_resid_pre", (0, 2), [3.0] * 16)
    assert abs(loss_edited - loss_plain) > 1e-3  # the edit matters to the loss, so the comparison can fail

    at = _show(page("step"), "blocks.1.hook_resid_pre")
    edit = [t for t in at.toggle if "Edit this step" in t.label]
    assert len(edit) == 1 and not at.dataframe  # the table editor is built only when asked for
    at = edit[0].set_value(True).run()
    assert len(at.dataframe) == 1
    before = _z(at, "L1 residual stream in")
    post_before = _z(_show(at, "blocks.1.hook_resid_post"), "L1 residual after MLP")
    loss_before = _z(_show(at, "hook_loss"), "loss").item()
    assert np.allclose(post_before, plain["blocks.1.hook_resid_post"][0], atol=1e-5)
    assert loss_before == pytest.approx(loss_plain, abs=1e-5)

    s = at.session_state["gptviz.settings"]
    s["edits"] = {"set": [{"name": "blocks.1.hook_resid_pre", "index": [0, 2], "values": [3.0] * 16}], "heads_off": []}
    at = _show(at, "blocks.1.hook_resid_pre")
    ok(at)
    after = _z(at, "L1 residual stream in")
    assert (after[2] == 3.0).all()  # the edit itself, exactly
    # the other positions are untouched; the edited run is a new forward pass, which may split its work differently
    # (threads, a slim or a full trace), so "untouched" is to float rounding: an edit that leaked would move them by ~3
    assert np.allclose(after[:2], before[:2], rtol=0, atol=1e-6) and np.allclose(after[3:], before[3:], rtol=0,
                                                                                  atol=1e-6)
    # later steps: the layer's output and the loss, as the model computes them with the same edit
    post_after = _z(_show(at, "blocks.1.hook_resid_post"), "L1 residual after MLP")
    assert np.allclose(post_after, edited["blocks.1.hook_resid_post"][0], atol=1e-5)
    assert np.allclose(post_after[:2], post_before[:2], atol=1e-6)  # earlier positions cannot see position 2
    assert not np.allclose(post_after[2:], post_before[2:], atol=1e-3)
    at = _show(at, "hook_loss")
    assert at.title[0].value.endswith("loss")
    assert _z(at, "loss").item() == pytest.approx(loss_edited, abs=1e-5)
