"""Every page on a model folder of each family (GPT-2, Llama with grouped-query attention, Qwen2, Qwen3 with QK-norm,
GPT-NeoX with the parallel block and partial rotary, Gemma with multi-query attention and GeGLU), opened as a class
would: a link naming a folder of the server's models directory (``?model=NAME``), never a path. Each page opens with
no exception and draws; the model it shows is the folder's, with the folder's own tokenizer."""
import pytest
from apphelp import messages, page
from folder_walk import ALL_PAGES, folders, walk
from lazy_import import lazy

lazy("transformers", skip=True)
FOLDER_FAMILIES = ["gpt2", "llama", "qwen2", "qwen3", "gpt_neox", "gemma"]


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory):
    yield from folders(tmp_path_factory, FOLDER_FAMILIES)


@pytest.mark.parametrize("family", FOLDER_FAMILIES)
@pytest.mark.parametrize("name", list(ALL_PAGES))
def test_every_page_opens_each_family(models_dir, family, name, monkeypatch):
    walk(family, name, monkeypatch)


def test_a_link_to_a_folder_that_is_not_there_or_a_path_opens_the_default_with_a_notice(models_dir):
    for bad in ("not-a-model", "../models/gpt2", "/etc", "nowhere"):
        at = page("attention", opening=True, model=bad)
        assert not at.exception
        assert "there is no model folder called" in messages(at), bad
        assert "model folder:" not in messages(at)
