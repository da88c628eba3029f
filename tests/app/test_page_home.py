import math

import pytest
from apphelp import charts, messages, metric, ok, page, set_sidebar


def diagrams(at) -> list[str]:
    """The model pipeline diagram(s) on the page (HTML boxes with the live shapes)."""
    return [m.value for m in at.markdown if "token ids x" in m.value]


def test_renders_by_default_with_diagram_params_and_loss():
    at = ok(page("home"))
    assert len(diagrams(at)) == 1
    v = metric(at, "Uniform guess ln V")
    loss = metric(at, "Loss on your text")
    assert abs(loss - v) < 0.5  # an untrained model is close to guessing uniformly
    assert metric(at, "Parameters") > 1000
    assert len(at.table) == 1
    # the attention heatmap above the fold is a probability map with grey masked cells
    pattern = charts(at)[0]["data"]
    assert (pattern[0]["zmin"] == 0 and pattern[0]["zmax"] == 1
            and [t.get("name") for t in pattern[1:]] == ["masked", "cells", "cells"])


def test_changing_the_shape_changes_params_and_diagram():
    at = page("home")
    before = metric(at, "Parameters")
    dot_before = diagrams(at)[0]
    at = set_sidebar(at, "n_layer", 3)
    ok(at)
    assert metric(at, "Parameters") > before
    assert "× 3 blocks" in diagrams(at)[0] and dot_before != diagrams(at)[0]


def test_invalid_shape_is_a_message_and_the_page_keeps_working():
    at = page("home")
    params = metric(at, "Parameters")
    at = set_sidebar(at, "n_head", 3)
    ok(at)
    assert "n_embd=16 must be divisible by n_head=3" in messages(at)
    assert metric(at, "Parameters") == params  # still the last good model
    assert at.number_input(key="w.n_head").value == 3  # the user's input is kept


def test_a_link_opens_exactly_that_view():
    at = ok(page("home", n_layer=3, n_embd=24, text="hello there"))
    assert "× 3 blocks" in diagrams(at)[0] and "C=24" in diagrams(at)[0]
    assert at.text_area(key="w.text").value == "hello there"
    assert at.query_params["n_layer"] == "3"


def test_reset_to_defaults():
    at = page("home", n_layer=3)
    at.button[-1].click().run() if at.button[-1].label == "Reset to defaults" else None
    at = [b for b in at.button if b.label == "Reset to defaults"][0].click().run()
    ok(at)
    assert at.session_state["gptviz.settings"]["n_layer"] == 2
    assert any("Showing **shipped checkpoint: shakespeare**" in i.value for i in at.sidebar.info)  # the opening model
    assert not math.isnan(metric(at, "Loss on your text"))
    at = ok([b for b in at.button if b.label == "Back to the configurable model"][0].click().run())
    assert any(c.value.startswith("Configurable model: 2 layers") for c in at.sidebar.caption)  # what the user reads


def test_a_task_model_is_scored_on_the_positions_its_task_scores():
    import torch
    import torch.nn.functional as F

    from gptviz import load_checkpoint
    from gptviz.ui.resources import CHECKPOINTS

    at = ok(page("home", preset="checkpoint: induction"))
    ck = load_checkpoint(CHECKPOINTS / "induction.safetensors")
    text = ck.meta["example"]
    assert at.text_area(key="w.text").value == text
    ids = torch.tensor([ck.tokenizer.encode(text)])
    with torch.no_grad():
        logits, _ = ck.model(ids)
    n = len(text) // 2  # the example is a run of letters, then the same run again
    nll = F.cross_entropy(logits[0, :-1], ids[0, 1:], reduction="none")
    scored, every = float(nll[n:].mean()), float(nll.mean())  # from the first repeated letter on
    assert metric(at, "Loss on the scored positions") == pytest.approx(scored, abs=2e-3)
    assert metric(at, "Loss on every position") == pytest.approx(every, abs=2e-3)
    uniform = metric(at, "Uniform guess ln V")
    assert scored < uniform < every  # the task is done well; the random first half is what looks worse
    assert any("scored only from the first repeated token" in c.value for c in at.caption)


def test_the_app_opens_on_the_trained_shakespeare_model_and_can_show_it_untrained():
    from gptviz import load_checkpoint, trace
    from gptviz.text import corpus
    from gptviz.ui.resources import CHECKPOINTS

    at = ok(page("home", opening=True))
    assert not at.error and not at.warning, messages(at)
    ck = load_checkpoint(CHECKPOINTS / "shakespeare.safetensors")
    assert at.text_area(key="w.text").value == corpus.HELD_OUT_LINE  # a line from a play it never saw
    cap = " ".join(c.value for c in at.sidebar.caption)
    assert f"{ck.model.num_params():,} parameters" in cap and f"vocab_size = {ck.config.vocab_size:,}" in cap
    import torch

    ids = torch.tensor([ck.tokenizer.encode(corpus.HELD_OUT_LINE)])
    want = float(trace(ck.model, ids[:, :-1], targets=ids[:, 1:]).loss)
    trained = metric(at, "Loss on your text")
    assert trained == pytest.approx(want, abs=2e-3) and trained < metric(at, "Uniform guess ln V") - 2
    # one switch: the same shape, freshly initialised, guesses about uniformly
    at.toggle(key="w.untrained").set_value(True).run()
    ok(at)
    assert f"{ck.model.num_params():,} parameters" in " ".join(c.value for c in at.sidebar.caption)
    assert metric(at, "Loss on your text") == pytest.approx(metric(at, "Uniform guess ln V"), abs=0.3)
    assert at.query_params["untrained"] == "True"


def test_the_shape_widgets_are_drawn_on_demand():
    """Folded by default (19 fewer widgets on every rerun, for every student), the shape reads as one line; the
    toggle draws the widgets, seeded from the settings, and a change there rebuilds the model."""
    at = ok(page("home", preset="default"))
    assert not [w for w in at.number_input if w.key == "w.n_layer"]
    line = [c.value for c in at.sidebar.caption if c.value.startswith("Configurable model:")]
    assert line == ["Configurable model: 2 layers · 2 heads of 8 · n_embd 16 · layernorm (pre) · learned positions · "
                    "gelu_tanh · seed 0"]
    at = ok(set_sidebar(at, "edit_shape", True))
    assert (at.number_input(key="w.n_layer").value, at.number_input(key="w.n_embd").value) == (2, 16)
    assert at.selectbox(key="w.norm").value == "layernorm"
