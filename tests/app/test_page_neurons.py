"""The Neurons page: it opens on the Shakespeare GPT with the shipped summary (the promoted tokens checked against a
hand-written W_out[:, n] @ W_U through the final norm), says plainly that the attention-only induction-heads model
has no MLP, and on GPT-2 small's shape computes in the background behind a progress bar without blocking the page."""
import numpy as np
import pytest
import torch
from apphelp import PAGES, array, chart, messages, page, titles

from gptviz.model.checkpoint import load_checkpoint
from gptviz.paths import CHECKPOINTS

NEURONS = "app_pages/neurons.py"


@pytest.fixture(autouse=True)
def neurons_page(monkeypatch):
    monkeypatch.setitem(PAGES, "neurons", NEURONS)


def test_opens_on_the_shakespeare_gpt_with_the_shipped_summary():
    at = page("neurons", opening=True)
    assert not at.exception, [e.message for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    assert any(t.endswith("over 16,384 tokens") for t in titles(at)), titles(at)  # the shipped histogram
    assert not at.get("progress")  # nothing to compute: it ships
    snippets = [h.proto.body for h in at.get("html") if "outline:2px solid" in h.proto.body]
    assert snippets and snippets[0].count("outline:2px solid") == 12
    layer, n = int(at.selectbox(key="neurons.layer").value), int(at.number_input(key="neurons.n").value)
    model = load_checkpoint(CHECKPOINTS / "shakespeare.safetensors").model
    with torch.no_grad():
        w = model.transformer.h[layer].mlp.c_proj.weight[:, n].double()
        w = (w - w.mean()) * model.transformer.ln_f.weight.double()
        want = (model.lm_head.weight.double() @ w).numpy()
    np.testing.assert_allclose(array(chart(at, "Promoted")["data"][0]["x"]), np.sort(want)[::-1][:10], atol=1e-4)
    np.testing.assert_allclose(array(chart(at, "Suppressed")["data"][0]["x"]), np.sort(want)[:10], atol=1e-4)


def test_the_ranked_list_chooses_a_neuron():
    at = page("neurons", opening=True)
    ranked = at.selectbox(key="neurons.ranked")
    pick = ranked.options[2]
    at = ranked.select(pick).run()
    assert not at.exception
    layer, n = (int(x) for x in pick.removeprefix("L").split("(")[0].replace("N", "").split())
    assert int(at.selectbox(key="neurons.layer").value) == layer and int(at.number_input(key="neurons.n").value) == n
    assert any(t.startswith(f"L{layer} N{n} at each position") for t in titles(at))


def test_the_attention_only_model_says_it_has_no_mlp():
    at = page("neurons", preset="checkpoint: induction-heads")
    assert not at.exception, [e.message for e in at.exception]
    assert not at.error
    assert "This model has no MLP" in messages(at)


def test_gpt2_small_shape_computes_in_the_background():
    at = page("neurons", preset="gpt2-small")
    assert not at.exception, [e.message for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    # the page is drawn at once: the neuron on the user's text and what it writes, with the summary on its way
    assert any(t.startswith("L0 N") and "each position" in t for t in titles(at))
    assert "Promoted" in titles(at)
    bars = at.get("progress")
    assert bars or any("over" in t and "tokens" in t for t in titles(at))
