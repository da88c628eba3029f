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
