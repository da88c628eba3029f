import numpy as np
import pytest
from apphelp import array, chart, engine_run, messages, ok, page, set_sidebar, titles


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
    from apphelp import metric

    plain, loss_plain = engine_run()
    edited, loss_edited = engine_run("hook_embed", (0, 3), [1.0] * 16)
    assert abs(loss_edited - loss_plain) > 1e-3  # the edit matters to the loss, so the comparison can fail

    at = page("embeddings")
    stream_before = array(chart(at, "L0 residual stream in")["data"][0]["z"])
    assert np.allclose(stream_before, plain["blocks.0.hook_resid_pre"][0], atol=1e-6)
    s = at.session_state["gptviz.settings"]
    s["edits"] = {"set": [{"name": "hook_embed", "index": [0, 3], "values": [1.0] * 16}], "heads_off": []}
    at.run()
    ok(at)
    assert any("edit(s) active" in c.value for c in at.caption)
    emb = array(chart(at, "Token embedding")["data"][0]["z"])
    assert (emb[3] == 1.0).all()
    # downstream: the residual stream entering layer 0 is the edited row plus its position, the rest unchanged
    stream = array(chart(at, "L0 residual stream in")["data"][0]["z"])
    assert np.allclose(stream, edited["blocks.0.hook_resid_pre"][0], atol=1e-6)
    assert not np.allclose(stream[3], stream_before[3], atol=1e-3)
    assert np.allclose(np.delete(stream, 3, axis=0), np.delete(stream_before, 3, axis=0), atol=1e-7)
    # and further on: with this session's settings (and so its edit) the Logits page shows the edited model's loss
    import copy

    from apphelp import PAGES, ROOT, TIMEOUT
    from streamlit.testing.v1 import AppTest

    logits = AppTest.from_file(str(ROOT / PAGES["logits"]), default_timeout=TIMEOUT)
    logits.session_state["gptviz.settings"] = copy.deepcopy(at.session_state["gptviz.settings"])
    logits = ok(logits.run())
    assert metric(logits, "mean of −log p") == pytest.approx(loss_edited, abs=1e-5)
    assert abs(metric(logits, "mean of −log p") - loss_plain) > 1e-3


def test_a_scaled_llama_folder_draws_its_frequencies_plain_and_scaled(tmp_path, monkeypatch):
    """A Llama 3.1-style folder (rope_type llama3) opened by a link: the rotary view draws each pair's frequency,
    plain and scaled, equal to the engine's (``gptviz.model.rope_scaling``, checked against transformers in
    tests/test_rope_scaling_oracle.py), the angles heatmap is the scaled one, and the words say what the scaling does.
    A model with plain rotary positions has no such chart."""
    pytest.importorskip("transformers")
    from hf_models import build

    from gptviz.model.pretrained import model_config
    from gptviz.model.rope_scaling import inverse_frequencies, plain_frequencies

    folder = tmp_path / "llama3-scaled"
    folder.mkdir()
    build("llama", folder, rope_parameters={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                            "high_freq_factor": 4.0, "original_max_position_embeddings": 32,
                                            "rope_theta": 500.0})
    monkeypatch.setenv("GPTVIZ_MODELS_DIR", str(tmp_path))
    at = ok(page("embeddings", opening=True, model="llama3-scaled", text="the cat sat on the mat"))
    cfg = model_config(folder)[0]
    fig = chart(at, "Rotary frequencies")
    assert [t["name"] for t in fig["data"]] == ["plain", "llama3, factor 8"]
    assert fig["layout"]["yaxis"]["type"] == "log"
    assert np.allclose(array(fig["data"][0]["y"]), plain_frequencies(cfg.d_rot, cfg.rope_base).numpy())
    assert np.allclose(array(fig["data"][1]["y"]), inverse_frequencies(cfg).numpy())
    angles = array(chart(at, "Rotary angles")["data"][0]["z"])
    assert np.allclose(angles[3], 3 * inverse_frequencies(cfg).numpy(), atol=1e-6)
    assert any("turn 8 times slower" in m.value for m in at.markdown)
    plain = ok(set_sidebar(page("embeddings"), "pos_encoding", "rope"))
    assert not any(t.startswith("Rotary frequencies") for t in titles(plain))
