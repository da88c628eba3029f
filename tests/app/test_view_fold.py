"""The sidebar's view settings (numbers in cells, colours, lesson language, chart download) sit in a fold whose
widgets are made only while it is open: each element is a message to the browser on every run (issue 37). Closed,
the settings keep their values and every chart still follows them."""
import numpy as np

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
