"""The Contribution graph page: it opens with no exception on the opening (Shakespeare) model, the induction-heads
checkpoint and GPT-2 small's shape; the threshold slider changes how many edges are drawn (counted in the chart the
browser gets, and in the page's own sentence); a block picked from the graph becomes the head or layer in view.
The shares themselves are checked against a hand-written oracle in tests/test_contributions.py."""
import re

import pytest
from apphelp import PAGES, ROOT, chart, charts, messages, page

PAGE = "app_pages/contributions.py"
TITLE = "Routes into the prediction"


@pytest.fixture(autouse=True)
def contributions_page(monkeypatch):
    monkeypatch.setitem(PAGES, "contrib", PAGE)


def drawn_edges(at) -> int:
    """The line segments of the graph's chart: each edge is one segment, ended by a gap (None)."""
    spec = chart(at, TITLE)
    return sum(list(t["x"]).count(None) for t in spec["data"] if t.get("mode") == "lines")


def said_edges(at) -> int:
    text = next(c.value for c in at.caption if "edges above" in c.value)
    return int(re.match(r"(\d+) edges above", text).group(1))


def test_opens_on_the_opening_model():
    at = page("contrib", opening=True)
    assert not at.exception, [e.message for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    assert drawn_edges(at) == said_edges(at) > 0
    assert any("w(c_k" in l.value for l in at.latex)  # the formula, the code line and the sentence
    engine = (ROOT / "gptviz" / "interp" / "contributions.py").read_text(encoding="utf-8")
    shown = next(c.value for c in at.code if "def shares(" in c.value)  # the code is the engine's, as it runs
    assert all(line.strip() in engine for line in shown.splitlines() if line.strip())


def test_the_threshold_slider_changes_the_edges_drawn_on_the_induction_heads_model():
    at = page("contrib", preset="checkpoint: induction-heads")
    assert not at.exception, [e.message for e in at.exception]
    assert "induction-heads" in messages(at)
    first = drawn_edges(at)
    assert first == said_edges(at) > 0
    at.slider(key="cgraph.thr").set_value(0.01).run()
    assert not at.exception
    low = drawn_edges(at)
    at.slider(key="cgraph.thr").set_value(0.3).run()
    high = drawn_edges(at)
    assert low > first > high, (low, first, high)
    assert high == said_edges(at)


def test_picking_a_block_makes_it_the_one_in_view():
    at = page("contrib", preset="checkpoint: induction-heads")
    pick = at.selectbox(key=next(s.key for s in at.selectbox if s.key.startswith("cgraph.pick")))
    block = pick.value  # the graph's heaviest block, e.g. ("head", 1, 2, 17)
    at.button(key="cgraph.open").click().run()
    assert not at.exception, [e.message for e in at.exception]
    s = at.session_state["gptviz.settings"]
    assert s["layer"] == block[1]
    if block[0] == "head":
        assert s["head"] == block[2]
    assert any("now in view" in m.value for m in at.success)


def test_opens_on_gpt2_small_shape_with_a_short_text():
    """GPT-2 small's shape (124M, random weights): the graph asks only for the (layer, position) sums its routes
    reach, so a short text draws in seconds."""
    at = page("contrib", preset="gpt2-small", tokenizer="gpt2", text="the cat sat on the mat")
    assert not at.exception, [e.message for e in at.exception]
    assert charts(at)
    assert drawn_edges(at) == said_edges(at) > 0


def test_an_encoder_decoder_model_gets_a_note_not_a_graph():
    at = page("contrib", preset="decoder-cross-attention")
    assert not at.exception, [e.message for e in at.exception]
    assert "decoder-only" in messages(at)
    with pytest.raises(KeyError):
        chart(at, TITLE)


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory):
    """A models directory holding a random Llama (grouped-query attention, gated MLP, rotary) and GPT-NeoX
    (parallel block, partial rotary), as tests/app/test_model_folders.py builds them."""
    import os

    pytest.importorskip("transformers")
    from hf_models import build

    root = tmp_path_factory.mktemp("models")
    for family in ("llama", "gpt_neox"):
        (root / family).mkdir()
        build(family, root / family)
    before = os.environ.get("GPTVIZ_MODELS_DIR")
    os.environ["GPTVIZ_MODELS_DIR"] = str(root)
    yield root
    if before is None:
        os.environ.pop("GPTVIZ_MODELS_DIR", None)
    else:
        os.environ["GPTVIZ_MODELS_DIR"] = before


@pytest.mark.parametrize("family", ["llama", "gpt_neox"])
def test_opens_on_grouped_query_gated_and_parallel_models(models_dir, family):
    at = page("contrib", opening=True, model=family, text="the cat sat on the mat")
    assert not at.exception, [e.message for e in at.exception]
    assert f"model folder: {family}" in messages(at)
    assert drawn_edges(at) == said_edges(at) > 0


@pytest.mark.parametrize("name", ["original-transformer", "llama-like"])
def test_opens_on_post_norm_and_rotary_presets(name):
    at = page("contrib", preset=name)
    assert not at.exception, [e.message for e in at.exception]
    assert drawn_edges(at) == said_edges(at) > 0


def test_ltts_token_graph_and_the_labelled_value_bias_variant_on_the_page():
    """Summed per token, the page draws the LLM Transparency Tool's graph: its edges are those of ``token_graph`` on
    the page's own trace (worked out here from the model and text the page names), no head nodes. The value bias
    kept per token is a toggle, and the chart's title then says it is a variant."""
    import json

    import torch

    from gptviz import load_checkpoint, trace
    from gptviz.interp.contributions import Contributions, token_graph

    at = page("contrib", preset="checkpoint: induction-heads")
    at.selectbox(key="cgraph.heads").set_value("summed per token (LTT)").run()
    assert not at.exception, [e.message for e in at.exception]
    spec = chart(at, TITLE)
    assert drawn_edges(at) == said_edges(at) > 0
    assert not any(t.get("name") == "head" for t in spec["data"])
    # the same graph, from the checkpoint and the page's own token ids
    ck = load_checkpoint(ROOT / "checkpoints" / "induction-heads.safetensors")
    ids = ck.tokenizer.encode(at.session_state["gptviz.settings"]["text"].splitlines()[0])
    tr = trace(ck.model.eval(), torch.tensor([ids]))
    g = token_graph(Contributions(ck.model, tr, 0), len(ids) - 1, at.slider(key="cgraph.thr").value)
    assert len(g.edges) == drawn_edges(at), json.dumps([e.kind for e in g.edges])


def test_the_value_bias_variant_is_offered_and_labelled_when_the_model_has_one():
    at = page("contrib", preset="default")  # GPT-2's choices: q/k/v biases
    assert not at.exception, [e.message for e in at.exception]
    assert "variant" not in chart(at, TITLE)["layout"]["title"]["text"]
    folded = drawn_edges(at)
    at.toggle(key="cgraph.vbias").set_value(True).run()
    assert not at.exception, [e.message for e in at.exception]
    assert "value bias per token (a variant, not LTT's)" in chart(at, TITLE)["layout"]["title"]["text"]
    assert drawn_edges(at) == said_edges(at) > 0
    assert folded > 0
    no_bias = page("contrib", preset="llama-like")  # no biases: nothing to fold, no toggle
    assert not [t for t in no_bias.toggle if t.key == "cgraph.vbias"]
