"""The every-family page walk (tests/app/folder_walk.py), for the mixtures of experts: Mixtral, Qwen2-MoE with a dense
layer and a shared expert, OLMoE, and GPT-OSS with its attention sinks (drawn as a key column of their own)."""
import pytest
from apphelp import page
from folder_walk import ALL_PAGES, folders, walk
from lazy_import import lazy

lazy("transformers", skip=True)
FOLDER_FAMILIES = ["mixtral", "qwen2_moe", "olmoe", "gpt_oss"]


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory):
    yield from folders(tmp_path_factory, FOLDER_FAMILIES)


@pytest.mark.parametrize("family", FOLDER_FAMILIES)
@pytest.mark.parametrize("name", list(ALL_PAGES))
def test_every_page_opens_each_family(models_dir, family, name, monkeypatch):
    walk(family, name, monkeypatch)


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
