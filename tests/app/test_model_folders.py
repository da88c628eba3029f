"""Every page on a model folder of each family (GPT-2, Llama with grouped-query attention, Mistral with a sliding
window shorter than the text, Qwen2, Qwen3 with QK-norm,
GPT-NeoX with the parallel block and partial rotary, Gemma with multi-query attention and GeGLU), opened as a class
would: a link naming a folder of the server's models directory (``?model=NAME``), never a path. Each page opens with
no exception and draws; the model it shows is the folder's, with the folder's own tokenizer."""
import pytest
from apphelp import messages, page
from folder_walk import ALL_PAGES, folders, walk
from lazy_import import lazy

lazy("transformers", skip=True)
FOLDER_FAMILIES = ["gpt2", "llama", "mistral", "qwen2", "qwen3", "gpt_neox", "gemma"]


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


def test_a_folder_model_the_store_let_go_is_opened_again_not_swapped_for_the_default(models_dir):
    """The registry forgets the least recently used models past its budget; a folder (or shipped) model can be read
    from disk again, so its page reopens it rather than falling back to the configurable model with a warning."""
    from gptviz.ui import resources

    at = page("attention", opening=True, model="llama", text="the cat sat on the mat")
    assert "model folder: llama" in messages(at)
    resources._REGISTERED.clear()  # as if other models had filled the store since
    at.run()
    assert not at.exception and not at.warning, [w.value for w in at.warning]
    assert "model folder: llama" in messages(at)
