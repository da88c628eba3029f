
from apphelp import array, chart, ok, page, set_sidebar, titles


def test_renders_mlp_steps_and_residual_growth():
    at = ok(page("mlp"))
    t = titles(at)
    for w in ("LN₂ output", "MLP pre-activation", "MLP activation", "MLP output", "residual after MLP", "‖x‖"):
        assert any(w.lower() in x.lower() for x in t), w
    norms = array(chart(at, "‖x‖ of each position")["data"][0]["z"])
    assert norms.shape[0] == 2 * 2 + 1 and (norms > 0).all()


def test_activation_choice_changes_the_values():
    at = set_sidebar(page("mlp"), "activation", "relu")
    ok(at)
    post = array(chart(at, "L0 MLP activation")["data"][0]["z"])
    assert (post >= 0).all() and (post == 0).any()
    at = set_sidebar(at, "layer", 1)
    assert any(x.startswith("L1 MLP activation") for x in titles(at))


def test_post_norm_model():
    at = set_sidebar(page("mlp"), "norm_placement", "post")
    ok(at)
    assert any("post-norm" in s.value for s in at.subheader)
