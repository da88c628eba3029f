"""The every-family page walk (tests/app/folder_walk.py), for the families of 2024-26 with new steps of their own:
Gemma 2 with norms around each sublayer and soft caps, Gemma 3 with local rotary bases, OLMo 2 with norms after, Phi-3
with its fused projections, partial rotary, a sliding window and longrope."""
import pytest
from folder_walk import ALL_PAGES, folders, walk
from lazy_import import lazy

lazy("transformers", skip=True)
FOLDER_FAMILIES = ["gemma2", "gemma3_text", "olmo2", "phi3"]


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory):
    yield from folders(tmp_path_factory, FOLDER_FAMILIES)


@pytest.mark.parametrize("family", FOLDER_FAMILIES)
@pytest.mark.parametrize("name", list(ALL_PAGES))
def test_every_page_opens_each_family(models_dir, family, name, monkeypatch):
    walk(family, name, monkeypatch)
