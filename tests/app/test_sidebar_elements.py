"""Widgets made only where they do something: each element is a message to the browser on every run (issue 37).

The sidebar's view settings (numbers in cells, colours, lesson language, chart download) sit in a fold whose widgets
are made only while it is open; closed, the settings keep their values and every chart still follows them. While a
loaded model is shown, the configurable model's tokenizer and shape widgets are not made: they would change nothing
on screen."""
import numpy as np

from gptviz.present.settings import CKPT_PREFIX
from gptviz.ui.page import VIEW_FOLD
from tests.apphelp import array, charts, ok, page, set_sidebar

VIEW_KEYS = {"w.show_values", "w.palette", "w.lang", "w.export_format"}


def _widget_keys(at) -> set:
    return {w.key for kind in (at.checkbox, at.radio, at.selectbox, at.toggle) for w in kind}


def _pattern(at) -> dict:
    """The pattern heatmap's main trace (the first chart, a small model's T × T heatmap)."""
    return next(t for t in charts(at)[0]["data"] if t.get("type") == "heatmap")


def test_closed_the_fold_makes_none_of_the_view_widgets_and_open_it_makes_all_four():
    at = ok(page("attention"))
    assert not VIEW_KEYS & _widget_keys(at)
    assert any(e.key == VIEW_FOLD for e in at.expander)
    at.session_state[VIEW_FOLD] = True
    at = ok(at.run())
    assert VIEW_KEYS <= _widget_keys(at)
    at.session_state[VIEW_FOLD] = False
    at = ok(at.run())
    assert not VIEW_KEYS & _widget_keys(at)


def test_settings_made_in_the_fold_outlive_closing_it_and_every_chart_still_follows_them():
    at = ok(page("attention"))
    assert "texttemplate" not in _pattern(at)
    before = _pattern(at)["colorscale"]
    at = set_sidebar(at, "show_values", True)
    at = set_sidebar(at, "palette", "colour-blind safe")
    at.session_state[VIEW_FOLD] = False
    at = ok(at.run())
    assert not VIEW_KEYS & _widget_keys(at)
    heat = _pattern(at)
    assert heat.get("texttemplate") == "%{z:.2f}"  # the numbers, drawn in the cells
    assert heat["colorscale"] != before  # the colour-blind-safe scale
    z = array(heat["z"])
    assert np.allclose(np.nansum(z, axis=1), 1.0, atol=1e-5)  # still the pattern (masked cells empty): rows sum to 1
    at.text_area(key="w.text").input("a dog sat.").run()
    assert _pattern(ok(at)).get("texttemplate") == "%{z:.2f}"  # a later run keeps them too
    at.session_state[VIEW_FOLD] = True
    at = ok(at.run())
    assert at.checkbox(key="w.show_values").value is True  # reopened, the widgets show the kept values
    assert at.radio(key="w.palette").value == "colour-blind safe"


def test_the_head_kinds_legend_is_written_only_while_its_fold_is_open():
    at = ok(page("attention"))
    legend = "Scores come from your text"
    assert not any(legend in m.value for m in at.markdown)
    at.session_state["det.legend"] = True
    at = ok(at.run())
    assert sum(legend in m.value for m in at.markdown) == 1


CONFIGURABLE_ONLY = {"w.tokenizer", "w.merges", "w.lowercase", "w.edit_shape"}


def _all_keys(at) -> set:
    return _widget_keys(at) | {w.key for w in at.slider}


def test_while_a_loaded_model_is_shown_the_configurable_models_widgets_are_not_made_and_their_values_wait():
    at = ok(page("attention", tokenizer="gpt2"))  # the configurable model with a tokenizer of its own choosing
    assert CONFIGURABLE_ONLY - {"w.merges", "w.lowercase"} <= _all_keys(at)  # (those two are char-bpe's)
    at = ok(set_sidebar(at, "preset", CKPT_PREFIX + "shakespeare"))  # then the Shakespeare GPT
    assert not CONFIGURABLE_ONLY & _all_keys(at)
    assert not any(c.value.startswith("Configurable model:") for c in at.sidebar.caption)
    assert any("Showing **shipped checkpoint: shakespeare**, with its own shape and tokenizer" in i.value
               for i in at.sidebar.info)
    assert "853,248 parameters" in " ".join(c.value for c in at.sidebar.caption)  # the checkpoint is what is shown
    at = ok([b for b in at.button if b.label == "Back to the configurable model"][0].click().run())
    assert {"w.tokenizer", "w.edit_shape"} <= _all_keys(at)
    assert at.selectbox(key="w.tokenizer").value == "gpt2"  # the link's settings, kept while the widgets were not
    assert any(c.value.startswith("Configurable model: 2 layers") for c in at.sidebar.caption)


def test_the_pages_style_rule_rides_on_the_sidebars_first_heading():
    """Checked in Chromium too (the block container's top padding reads 37.4 px, 2.2 rem at 17 px)."""
    at = ok(page("attention"))
    first = at.sidebar.markdown[0]
    assert first.value.startswith("<style>.block-container { padding-top: 2.2rem; }</style>") and first.allow_html
    assert first.value.endswith("### Input")
    assert sum("<style>" in m.value for m in at.markdown) == 1  # no element of its own
