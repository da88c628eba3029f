"""The Initialisation page: the sweep, the first guesses, short trainings, saturation and the spread."""
import math
import re

import pytest
import torch
from apphelp import ROOT, chart, charts, messages, titles
from streamlit.testing.v1 import AppTest

from gptviz import GPT, encode_batch, get_tokenizer, preset
from gptviz.text.batches import DEFAULT_PROMPT

KEY = "gptviz.settings"


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models: a second thread only adds overhead on a busy machine
    yield
    torch.set_num_threads(n)


def init_page() -> AppTest:
    at = AppTest.from_file(str(ROOT / "app_pages/initialisation.py"), default_timeout=180)
    at.query_params["preset"] = "default"  # the configurable model, not the app's opening checkpoint
    return at.run()


def clean(at: AppTest) -> AppTest:
    assert not at.exception, [e.message for e in at.exception]
    assert not at.error, [str(e.value) for e in at.error]
    return at


def shown_vocab(at: AppTest) -> int:
    cap = " ".join(str(c.value) for c in at.sidebar.caption)
    return int(re.search(r"vocab_size = ([\d,]+)", cap).group(1).replace(",", ""))


def saturation_title(at: AppTest, layer: int) -> tuple[float, float]:
    """(init_std, % saturated) from the title of one layer's histograms."""
    for t in titles(at):
        m = re.match(rf"Layer {layer} · init_std ([\d.]+) · ([\d.]+)% of units saturated", t)
        if m:
            return float(m.group(1)), float(m.group(2))
    raise KeyError(layer)


@pytest.fixture(scope="module")
def at():
    return clean(init_page())


def test_every_fact_is_drawn(at):
    t = titles(at)
    for w in ("Initial loss against init_std", "init_std 0.02 · max p", "init_std 1 · max p", "Training loss",
              "Layer 0 · init_std", "Layer 1 · init_std", "The gradient either side", "saturation against init_std",
              "std of x after k multiplications", "std of the residual stream"):
        assert any(w in x for x in t), w
    assert len(at.latex) >= 4 and len(at.code) >= 4  # each fact has its formula and its line of code
    assert [h.value for h in at.header][:2] == ["1 · The first loss should be ln V",
                                                "2 · Large initial logits waste training"]
    assert titles(at)[0].startswith("Initial loss against init_std")  # the sweep comes first


def test_sweep_starts_at_ln_v_and_marks_the_sessions_init_std(at):
    V = shown_vocab(at)
    sweep = chart(at, "Initial loss against init_std")
    assert f"V = {V}" in sweep["layout"]["title"]["text"]
    first = sweep["data"][0]["y"][0]
    assert sweep["data"][0]["x"][0] == 0.002 and abs(first - math.log(V)) < 0.05
    assert sweep["layout"]["xaxis"]["type"] == "log"
    assert sweep["layout"]["shapes"][0]["y0"] == pytest.approx(math.log(V))
    marker = sweep["data"][1]
    assert marker["x"] == [at.session_state[KEY]["init_std"]] == [0.02]
    assert marker["y"][0] == pytest.approx(sweep["data"][0]["y"][4])  # 0.02 is on the grid: the same loss


def test_the_marker_follows_the_init_std():
    a = init_page()
    a.session_state[KEY]["init_std"] = 0.1
    clean(a.run())
    sweep = chart(a, "Initial loss against init_std")
    assert sweep["data"][1]["x"] == [0.1]
    assert sweep["data"][1]["y"][0] > 0 and not math.isclose(sweep["data"][1]["y"][0], sweep["data"][0]["y"][4])


def test_probabilities_are_on_a_fixed_axis_and_curves_share_a_chart(at):
    for c in charts(at):
        if c["layout"]["title"]["text"].startswith("init_std "):
            assert c["layout"]["yaxis"]["range"] == [0, 1]
    curves = chart(at, "Training loss")
    assert [d["name"] for d in curves["data"]] == ["init_std = 0.02", "init_std = 1"]
    small, large = curves["data"][0]["y"], curves["data"][1]["y"]
    assert large[0] > 2 * small[0] and large[-1] > small[-1]


def test_tanh_saturation_matches_an_independent_count():
    a = init_page()
    assert "tanh" in a.selectbox(key="w.activation").options
    a.session_state[KEY]["activation"] = "tanh"
    clean(a.run())
    assert a.session_state[KEY]["activation"] == "tanh"
    std, shown = saturation_title(a, 0)
    # independently: the default view's batch through a fresh tanh model, c_fc's output read by a forward hook
    tok = get_tokenizer("char-bpe", num_merges=20)
    cfg = preset("default").replace(vocab_size=tok.vocab_size, activation="tanh", init_std=std)
    b = encode_batch(tok, DEFAULT_PROMPT, block_size=cfg.block_size)
    model, pres = GPT(cfg), {}
    for i, blk in enumerate(model.transformer.h):
        blk.mlp.c_fc.register_forward_hook(lambda m, inp, out, i=i: pres.__setitem__(i, out.detach()))
    with torch.no_grad():
        model(b.x, attention_mask=b.attention_mask)
    for layer in range(cfg.n_layer):
        pre = pres[layer][b.attention_mask.bool()]
        frac = 100 * float((torch.tanh(pre).abs() > 0.97).float().mean())
        assert saturation_title(a, layer)[1] == pytest.approx(frac, abs=0.051), layer
    assert std == 1.0 and shown > 50  # measured 64.6% of layer 0's units at init_std 1


def test_attention_only_model_says_it_has_no_mlp():
    a = init_page()
    a.session_state[KEY]["attn_only"] = True
    clean(a.run())
    assert "no MLP" in messages(a)
    assert not any(t.startswith("Layer 0 · init_std") for t in titles(a))
    assert any(t.startswith("Initial loss against init_std") for t in titles(a))


def test_a_gpt2_sized_model_skips_the_sweep_without_a_traceback():
    a = AppTest.from_file(str(ROOT / "app_pages/initialisation.py"), default_timeout=180)
    a.query_params["preset"] = "gpt2-small"
    clean(a.run())
    assert "skipped above 5M" in messages(a)
    assert not any(t.startswith("Initial loss against") for t in titles(a))
    assert any(t.startswith("std of x after k multiplications by random 768×768") for t in titles(a))


def test_a_loaded_checkpoint_is_studied_as_fresh_models_of_its_shape():
    a = AppTest.from_file(str(ROOT / "app_pages/initialisation.py"), default_timeout=180)
    a.query_params["preset"] = "checkpoint: sort"
    clean(a.run())
    sweep = chart(a, "Initial loss against init_std")
    assert abs(sweep["data"][0]["y"][0] - math.log(shown_vocab(a))) < 0.05
    assert any("fresh" in str(c.value) for c in a.caption)
