"""The every-family page walk's parts, shared by tests/app/test_model_folders*.py (three files, so the suite's
workers open them side by side): the families and their folders' extras, a fixture that builds a module's folders,
and what a page opened on a family's folder must show (``walk``)."""
import os

from apphelp import PAGES, charts, messages, page
from hf_models import build

EXTRA = {"mistral": {"sliding_window": 4},  # shorter than the walk's text: the band is on every attention page
         "phi3": {"original_max_position_embeddings": 16, "sliding_window": 8,  # the text is short: short factors
                  "rope_parameters": {"rope_type": "longrope", "rope_theta": 500.0, "partial_rotary_factor": 0.5,
                                      "short_factor": [1.0, 1.5, 2.0, 3.0], "long_factor": [2.0, 4.0, 8.0, 16.0]}}}
MOE_FAMILIES = ("mixtral", "qwen2_moe", "olmoe", "gpt_oss")
ALL_PAGES = {**PAGES, "who": "app_pages/who_did_it.py", "init": "app_pages/initialisation.py"}


def folders(tmp_path_factory, families):
    """Each family's folder (random weights, a tokenizer trained here) in a models directory the app reads
    (``GPTVIZ_MODELS_DIR``), and a folder with no config.json; yields the directory, then puts the variable back."""
    root = tmp_path_factory.mktemp("models")
    for family in families:
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


def walk(family, name, monkeypatch):
    """Page ``name`` opened on ``family``'s folder by a link (?model=NAME): no exception or error, it draws, and it
    says what it must of the family."""
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
    elif name == "experts" and family not in MOE_FAMILIES:  # one line says so, and offers the shipped MoE model
        assert "This model has no mixture of experts" in messages(at)
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
