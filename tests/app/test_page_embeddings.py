import numpy as np
import pytest

from apphelp import array, chart, charts, messages, ok, page, set_sidebar, titles


def test_renders_lookup_onehot_positions_and_sum():
    at = ok(page("embeddings"))
    t = titles(at)
    assert any("Token embedding" in x for x in t) and any("one-hot" in x for x in t)
    assert any("Position embedding" in x for x in t) and any("residual stream in" in x for x in t)
    assert any("equals the lookup" in s.value for s in at.success)


def test_position_kind_changes_what_is_shown():
    at = set_sidebar(page("embeddings"), "pos_encoding", "rope")
    ok(at)
    assert any("Rotary angles" in x for x in titles(at))
    at = set_sidebar(at, "pos_encoding", "none")
    ok(at)
    assert "no position encoding" in messages(at)
    at = set_sidebar(at, "pos_encoding", "sinusoidal")
    z = array(chart(at, "Position embedding")["data"][0]["z"])
    assert z[3, 0] == pytest.approx(np.sin(3.0), abs=1e-6) and z[3, 1] == pytest.approx(np.cos(3.0), abs=1e-6)


def test_editing_an_embedding_recomputes_downstream():
    at = page("embeddings")
    s = at.session_state["gptviz.settings"]
    s["edits"] = {"set": [{"name": "hook_embed", "index": [0, 0], "values": [1.0] * 16}], "heads_off": []}
    at.run()
    ok(at)
    assert any("edit(s) active" in c.value for c in at.caption)
    emb = [c for c in charts(at) if c["layout"]["title"]["text"].startswith("Token embedding")][0]
    assert emb["data"][0]["zmax"] == 1.0  # the edited row (all ones) now sets the colour range
