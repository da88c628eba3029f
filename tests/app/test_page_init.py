"""The Initialisation page: the sweep, the first guesses, short trainings, saturation and the spread."""
import math
import re

import pytest
import torch
import torch.nn.functional as F
from apphelp import ROOT, array, chart, charts, messages, titles
from streamlit.testing.v1 import AppTest

from gptviz import GPT, encode_batch, get_tokenizer, preset

KEY = "gptviz.settings"
PADDED_TEXT = "the cat sat on the mat.\na dog."  # two rows, 11 tokens and 6: row 1 has 5 padded positions


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


@pytest.fixture(scope="module")
def padded():
    """One session opened by a link: the two-line text (a padded batch), tanh, and init_std 0.1 (off the grid)."""
    a = AppTest.from_file(str(ROOT / "app_pages/initialisation.py"), default_timeout=180)
    for k, v in dict(preset="default", text=PADDED_TEXT, activation="tanh", init_std="0.1").items():
        a.query_params[k] = v
    clean(a.run())
    s = a.session_state[KEY]
    assert (s["text"], s["activation"], s["init_std"]) == (PADDED_TEXT, "tanh", 0.1)
    assert any("tanh" in c.value for c in a.sidebar.caption)  # the sidebar's shape line names the link's activation
    return a


def by_hand(activation: str, init_std: float):
    """The page's model and batch built here: the default preset on the char BPE tokenizer (20 merges, lower case,
    as the page's defaults), a fresh GPT at this activation and scale, and the two-line text's padded batch."""
    tok = get_tokenizer("char-bpe", num_merges=20, lowercase=True)
    cfg = preset("default").replace(vocab_size=tok.vocab_size, activation=activation, init_std=init_std)
    b = encode_batch(tok, PADDED_TEXT, block_size=cfg.block_size)
    assert b.attention_mask.sum(1).tolist() == [11, 6]
    return cfg, GPT(cfg), b


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


def test_the_marker_follows_the_init_std(padded):
    sweep = chart(padded, "Initial loss against init_std")
    assert sweep["layout"]["title"]["text"].endswith("T = 11")  # the longest line; row 1 is padded
    assert sweep["data"][1]["x"] == [0.1]
    # independently: a fresh model at init_std 0.1, and the cross-entropy over the batch's targets (-100 at the
    # padded positions and at each row's last token)
    _, model, b = by_hand("tanh", 0.1)
    with torch.no_grad():
        logits = model.run(b.x, b.attention_mask)
    loss = float(F.cross_entropy(logits.flatten(0, 1), b.y.flatten(), ignore_index=-100))
    assert sweep["data"][1]["y"][0] == pytest.approx(loss, abs=1e-5)
    assert not math.isclose(loss, sweep["data"][0]["y"][4])  # not the grid's 0.02 point


def test_probabilities_are_on_a_fixed_axis_and_curves_share_a_chart(at):
    for c in charts(at):
        if c["layout"]["title"]["text"].startswith("init_std "):
            assert c["layout"]["yaxis"]["range"] == [0, 1]
    curves = chart(at, "Training loss")
    assert [d["name"] for d in curves["data"]] == ["init_std = 0.02", "init_std = 1"]
    small, large = curves["data"][0]["y"], curves["data"][1]["y"]
    assert large[0] > 2 * small[0] and large[-1] > small[-1]


def test_tanh_saturation_matches_an_independent_count(padded):
    std, shown = saturation_title(padded, 0)
    # independently: the padded batch through a fresh tanh model, c_fc's output read by a forward hook, and only
    # the real positions (attention_mask == 1) counted
    cfg, model, b = by_hand("tanh", std)
    pres = {}
    for i, blk in enumerate(model.transformer.h):
        blk.mlp.c_fc.register_forward_hook(lambda m, inp, out, i=i: pres.__setitem__(i, out.detach()))
    with torch.no_grad():
        model(b.x, attention_mask=b.attention_mask)
    real = b.attention_mask == 1
    for layer in range(cfg.n_layer):
        pre = pres[layer][real]
        assert pre.numel() == 17 * cfg.d_mlp  # 1,088 units: the 5 padded positions are not among them
        frac = 100 * float((torch.tanh(pre).abs() > 0.97).float().mean())
        assert saturation_title(padded, layer)[1] == pytest.approx(frac, abs=0.051), layer
        hist = chart(padded, f"Layer {layer} · init_std")
        assert [int(array(d["y"]).sum()) for d in hist["data"]] == [pre.numel()] * 2, layer  # both panes
    assert std == 1.0 and shown > 50  # measured 62.8% of layer 0's units at init_std 1


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


def test_the_training_runs_are_cached_under_a_digest_of_their_token_ids():
    """The training curves are cached by a digest of the ids (Streamlit does not hash the ids themselves, which took
    about 30 ms a rerun): equal ids give one key, whatever their container; any change of a value or of the length
    gives another (checked against hashlib on the int64 bytes, written out here)."""
    import hashlib

    import numpy as np

    from gptviz.ui.sections.init import _ids_key

    ids = tuple(range(300, 0, -1))
    assert _ids_key(ids) == _ids_key(list(ids)) == hashlib.blake2b(np.array(ids, np.int64).tobytes(),
                                                                     digest_size=16).hexdigest()
    assert len({_ids_key(ids), _ids_key(ids[:-1]), _ids_key(ids[:-1] + (2,)), _ids_key(ids + (0,))}) == 4
