import numpy as np

from apphelp import array, chart, charts, ok, page, set_sidebar


def test_forward_and_gradient_side_by_side_with_param_norms():
    at = ok(page("backward"))
    c = chart(at, "∂loss/∂ L0 attention weights")
    g = array(c["data"][0]["z"])
    assert c["data"][0]["zmid"] == 0 and np.isfinite(g[~np.isnan(g)]).all()
    assert any("strongest is at" in i.value for i in at.info)
    bars = chart(at, "‖∂loss/∂W‖")
    assert len(bars["data"][0]["x"]) > 5 and min(bars["data"][0]["x"]) >= 0


def test_choosing_another_step():
    at = page("backward")
    sel = at.selectbox(key="bw.step")
    at = sel.set_value("hook_embed").run()
    ok(at)
    assert any(t["layout"]["title"]["text"] == "∂loss/∂ Token embedding" for t in charts(at))
    at = at.selectbox(key="bw.step").set_value("hook_logits").run()
    g = array(chart(at, "∂loss/∂ logits")["data"][0]["z"])
    assert abs(g.sum()) < 1e-4  # softmax - onehot sums to zero in every row


def test_a_head_switched_off_has_no_gradient_through_its_pattern():
    at = page("backward")
    at.session_state["gptviz.settings"]["edits"] = {"set": [], "heads_off": [[0, 0]]}
    at = set_sidebar(at, "head", 0)
    ok(at)
    assert any("Every entry is 0" in i.value or "strongest" in i.value for i in at.info)
