"""The SAE features page: it opens on the Shakespeare GPT with its shipped SAE, says plainly that other models have
none, and its steering slider changes the shown next-token distribution to what a hand-applied hook gives."""
import pytest
import safetensors.torch
import torch
from apphelp import ROOT, TIMEOUT, array, chart, messages
from streamlit.testing.v1 import AppTest

from gptviz.interp.sae import sae_path
from gptviz.model.checkpoint import load_checkpoint
from gptviz.paths import CHECKPOINTS

PAGE = "app_pages/features.py"
NONE = "No sparse autoencoder ships for this model"


def features(**query) -> AppTest:
    at = AppTest.from_file(str(ROOT / PAGE), default_timeout=TIMEOUT)
    for k, v in query.items():
        at.query_params[k] = str(v)
    return at.run()


def no_exception(at):
    assert not at.exception, [e.message for e in at.exception]
    return at


@pytest.fixture(scope="module")
def opened():
    return no_exception(features())  # the opening model: the Shakespeare GPT


def test_it_opens_on_the_shakespeare_gpt_with_its_features(opened):
    assert NONE not in messages(opened)
    assert any(h.value.startswith("Feature #") for h in opened.subheader)
    titles = [c.proto.spec for c in opened.get("plotly_chart")]
    assert len(titles) >= 3  # promotes, suppresses, before/after
    chart(opened, "Feature #")
    chart(opened, "Next token after your text")
    html = " ".join(str(m.value) for m in opened.markdown)
    assert "activation" in html  # the shaded snippets


@pytest.mark.parametrize("query", [{"preset": "checkpoint: induction-heads"},
                                   {"preset": "gpt2-small", "tokenizer": "gpt2", "text": "the cat sat"},
                                   {"preset": "default"}])
def test_a_model_without_an_sae_gets_a_plain_message(query):
    at = no_exception(features(**query))
    assert NONE in messages(at)
    assert "Shakespeare GPT" in messages(at)  # where to find one
    assert not at.get("plotly_chart") and not [s for s in at.slider if (s.key or "").startswith("steer.")]


def test_moving_the_steering_slider_changes_the_distribution_as_a_hand_hook_does(opened):
    at = opened
    slider = next(s for s in at.slider if (s.key or "").startswith("steer.alpha."))
    feature = int(slider.key.rsplit(".", 1)[1])
    before = chart(at, "Next token after your text")["data"]
    assert (array(before[0]["x"]) == array(before[1]["x"])).all()  # α = 0: nothing changes
    alpha = float(slider.max) / 2
    at = no_exception(slider.set_value(alpha).run())
    after = chart(at, "Next token after your text")
    shown_after = array(after["data"][1]["x"])
    assert not (array(after["data"][0]["x"]) == shown_after).all()
    # the same numbers from the model with a torch forward hook adding α·d at the SAE's hook
    ck = load_checkpoint(CHECKPOINTS / "shakespeare.safetensors")
    model, tok = ck.model.eval(), ck.tokenizer
    W = safetensors.torch.load_file(str(sae_path("shakespeare")))
    d = W["W_dec"][feature].float()
    text = ck.meta["example"]
    ids = torch.tensor([tok.encode(text)[: model.config.block_size]])
    h = model.transformer.h[2].hook_resid_pre.register_forward_hook(lambda m, i, o: o + alpha * d)
    try:
        with torch.no_grad():
            p = torch.softmax(model(ids)[0][0, -1], -1)
    finally:
        h.remove()
    labels = after["layout"]["yaxis"]["ticktext"]
    vocab = [tok.token_str(i) for i in range(tok.vocab_size)]
    want = [float(p[vocab.index(lab)]) for lab in labels]
    assert torch.allclose(torch.tensor(shown_after, dtype=torch.float32), torch.tensor(want), atol=1e-4)


def test_a_feature_button_opens_that_feature(opened):
    picks = [b for b in opened.button if (b.key or "").startswith("feat.pick.")]
    assert len(picks) >= 2
    second = int(picks[1].key.rsplit(".", 1)[1])
    at = no_exception(picks[1].click().run())
    assert any(h.value.startswith(f"Feature #{second}") for h in at.subheader)
    assert at.number_input(key="feat.feature").value == second
    assert any(s.key == f"steer.alpha.{second}" for s in at.slider)  # the steering section follows


@pytest.mark.parametrize("text", ["", "   \n ", "<script>alert(1)</script> **bold** [x](http://e.com)", "x" * 5000,
                                  "\n".join(["a b"] * 200), "ünïcode 😀 \x00\x1b"],
                         ids=["empty", "blank", "markup", "long", "many-lines", "unicode"])
def test_hostile_texts_leave_the_page_working(text):
    at = features()
    at = no_exception(at.text_area(key="w.text").set_value(text).run())
    assert any(h.value.startswith("Feature #") for h in at.subheader)
    assert "<script>" not in " ".join(str(m.value) for m in at.markdown)
