"""Every page on a model folder of each family (GPT-2, Llama with grouped-query attention, Qwen2, Qwen3 with QK-norm,
GPT-NeoX with the parallel block and partial rotary, Gemma with multi-query attention and GeGLU, Gemma 2 with norms
around each sublayer and soft caps, Gemma 3 with local rotary bases, OLMo 2 with norms after, Phi-3 with its fused
projections, partial rotary, a sliding window and longrope; Mixtral, Qwen2-MoE with a dense layer and a shared expert,
OLMoE, GPT-OSS with sinks and experts), opened as a class
would: a link naming a folder of the server's models directory (``?model=NAME``), never a path. Each page opens with
no exception and draws; the model it shows is the folder's, with the folder's own tokenizer."""
import os

import pytest
from apphelp import PAGES, charts, messages, page
from hf_models import build
from lazy_import import lazy

lazy("transformers", skip=True)
FOLDER_FAMILIES = ["gpt2", "llama", "qwen2", "qwen3", "gpt_neox", "gemma", "gemma2", "gemma3_text", "olmo2", "phi3",
                   "mixtral", "qwen2_moe", "olmoe", "gpt_oss"]
EXTRA = {"phi3": {"original_max_position_embeddings": 16, "sliding_window": 8,  # the text is short: short factors
                  "rope_parameters": {"rope_type": "longrope", "rope_theta": 500.0, "partial_rotary_factor": 0.5,
                                      "short_factor": [1.0, 1.5, 2.0, 3.0], "long_factor": [2.0, 4.0, 8.0, 16.0]}}}
MOE_FAMILIES = ("mixtral", "qwen2_moe", "olmoe", "gpt_oss")
ALL_PAGES = {**PAGES, "who": "app_pages/who_did_it.py", "init": "app_pages/initialisation.py"}


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    for family in FOLDER_FAMILIES:
        (root / family).mkdir()
        build(family, root / family, **EXTRA.get(family, {}))
    (root / "not-a-model").mkdir()  # no config.json: never listed
    before = os.environ.get("GPTVIZ_MODELS_DIR")
    os.environ["GPTVIZ_MODELS_DIR"] = str(root)
    yield root
    if before is None:
        os.environ.pop("GPTVIZ_MODELS_DIR", None)
    else:
        os.environ["GPTVIZ_MODELS_DIR"] = before


@pytest.mark.parametrize("family", FOLDER_FAMILIES)
@pytest.mark.parametrize("name", list(ALL_PAGES))
def test_every_page_opens_each_family(models_dir, family, name, monkeypatch):
    monkeypatch.setitem(PAGES, name, ALL_PAGES[name])
    if name == "init":  # the page trains fresh models of the folder's shape, 200 steps each (up to a minute a family
        from gptviz.ui.sections import init  # under load): 5 here, as opening the page is what this test is about

        monkeypatch.setattr(init, "TRAIN_STEPS", 5)
    at = page(name, opening=True, model=family, text="the cat sat on the mat")
    assert not at.exception, [e.message for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    assert f"model folder: {family}" in messages(at)  # the sidebar says which model the page shows
    if name == "features":  # the one sparse autoencoder shipped is the Shakespeare GPT's: a folder has none
        assert "No sparse autoencoder ships for this model" in messages(at)
    elif name == "neurons" and family in MOE_FAMILIES:  # no neuron every token passes through: the page says why
        assert "This model's MLPs are mixtures of experts" in messages(at)
    elif name == "contributions" and family in ("gemma2", "gemma3_text", "olmo2"):  # norms after the sublayers: the
        assert "The contribution graph could not be computed: the contribution graph splits each sublayer's " \
               "output" in messages(at)  # heads no longer add up to what attention wrote, and the page says so
    elif name not in ("training", "weights"):
        assert charts(at), name
    assert at.query_params.get("model") == [family] or at.query_params.get("model") == family
    if family == "gemma":  # its embedding scale is inside W_E, and the page says so
        assert any("W_E is that table times √64" in c.value for c in at.caption)
    if family in MOE_FAMILIES:  # the experts' shape, and where they are
        assert any("experts" in c.value and "each token routed to " in c.value for c in at.caption)
    if family == "phi3":  # how gptviz holds its fused projections, and its longrope
        assert any("gate_up_proj" in c.value and "short factors" in c.value for c in at.caption)
        if name == "embeddings":
            assert any("LongRoPE" in m.value and "so the short list applies" in m.value for m in at.markdown)
    if family in ("gemma2", "gemma3_text"):
        assert any("W_E is that table times √32" in c.value for c in at.caption)


def test_a_link_to_a_folder_that_is_not_there_or_a_path_opens_the_default_with_a_notice(models_dir):
    for bad in ("not-a-model", "../models/gpt2", "/etc", "nowhere"):
        at = page("attention", opening=True, model=bad)
        assert not at.exception
        assert "there is no model folder called" in messages(at), bad
        assert "model folder:" not in messages(at)


def test_gpt_oss_attention_shows_the_sink_as_a_key_column_and_rows_sum_to_1_with_it(models_dir):
    """The head's weights with one more column, "sink": its values are the recorded sink weights, 1 minus each row's
    token weights (computed here from the engine's trace of the same folder), and nothing in it is masked."""
    import numpy as np
    import torch
    from apphelp import array, chart

    import gptviz
    from gptviz.model.hook_names import act_name

    at = page("attention", opening=True, model="gpt_oss", text="the cat sat on the mat", layer="1", head="2")
    assert not at.exception, [e.message for e in at.exception]
    c = chart(at, "L1 attention weights · head 2 · with the sink")
    z = array(c["data"][0]["z"])
    ticks = [str(v) for v in c["layout"]["xaxis"].get("ticktext") or c["data"][0]["x"]]
    assert ticks[-1] == "sink" and z.shape[1] == z.shape[0] + 1, ticks
    model, tok = gptviz.from_pretrained(models_dir / "gpt_oss")
    tr = gptviz.trace(model, torch.tensor([tok.encode("the cat sat on the mat")]))
    pattern = np.asarray(tr[act_name("pattern", 1)])[0, 2]
    assert np.allclose(z[:, -1], 1 - pattern.sum(-1), atol=1e-5)
    assert np.allclose(np.nansum(z, axis=1), 1.0, atol=1e-5)
