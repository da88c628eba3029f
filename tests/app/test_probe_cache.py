"""The head detector's probe is kept once per model and shared by every session (``resources.probe_scores``, a
``st.cache_resource``): so it must be read-only. Its numbers equal a probe run here on the same weights."""
import numpy as np
import pytest

from gptviz.config import PRESETS
from gptviz.interp import head_detector
from gptviz.ui.resources import get_model, probe_scores


def test_the_probe_is_one_read_only_object_with_the_probes_own_numbers():
    cfg_json = PRESETS["default"].to_json()
    a = probe_scores(cfg_json, None, batch=2)
    assert probe_scores(cfg_json, None, batch=2) is a  # one object, not a copy per call
    fresh = head_detector.probe(get_model(cfg_json, None), batch=2)
    assert set(a["scores"]) == set(fresh["scores"]) and a["n"] == fresh["n"] and a["batch"] == 2
    for kind, scores in fresh["scores"].items():
        np.testing.assert_array_equal(a["scores"][kind], scores)
    assert a["loss_first"] == pytest.approx(fresh["loss_first"]) and a["loss_second"] == pytest.approx(
        fresh["loss_second"])
    with pytest.raises(ValueError):
        a["scores"]["induction"][0, 0] = 1.0  # an array can't be written
    with pytest.raises(TypeError):
        a["scores"]["induction"] = np.zeros(1)  # nor a key assigned
    with pytest.raises(TypeError):
        a["n"] = 0
    np.testing.assert_array_equal(probe_scores(cfg_json, None, batch=2)["scores"]["induction"],
                                  fresh["scores"]["induction"])  # and the next session reads the same numbers
