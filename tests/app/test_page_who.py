"""The "Who did it" page: logit lens, direct logit attribution and two-prompt patching, checked against the
engine run independently on the same model and text."""
import numpy as np
import pytest
import torch
from apphelp import ROOT, TIMEOUT, array, chart, messages, metric, ok, set_sidebar, titles
from streamlit.testing.v1 import AppTest

from gptviz import GPT, encode_batch, get_tokenizer, preset, trace
from gptviz.text.batches import DEFAULT_PROMPT

PAGE = "app_pages/who_did_it.py"


def who(**query) -> AppTest:
    at = AppTest.from_file(str(ROOT / PAGE), default_timeout=TIMEOUT)
    query.setdefault("preset", "default")  # the configurable model unless a test names another
    for k, v in query.items():
        at.query_params[k] = str(v)
    return at.run()


@pytest.fixture(scope="module")
def page():
    return ok(who())


@pytest.fixture(scope="module")
def reference():
    """The default model and text, traced without the app."""
    tok = get_tokenizer("char-bpe", num_merges=20, lowercase=True)
    cfg = preset("default").replace(vocab_size=tok.vocab_size)
    model = GPT(cfg)
    batch = encode_batch(tok, DEFAULT_PROMPT, cfg.block_size)
    return tok, cfg, model, batch, trace(model, batch.x, batch.y, attention_mask=batch.attention_mask)


def text_input(at, label_start: str):
    return next(t for t in at.text_input if t.label.startswith(label_start))


def test_lens_last_row_is_the_models_probability_of_the_targets(page, reference):
    _, cfg, _, batch, tr = reference
    z = array(chart(page, "Logit lens")["data"][0]["z"]).astype(float)
    T = batch.lengths[0]
    assert z.shape == (cfg.n_layer + 1, T)
    y = batch.y[0, :T].numpy()
    valid = y >= 0
    probs = torch.softmax(tr["hook_logits"][0, :T].double(), -1).numpy()
    np.testing.assert_allclose(z[-1, valid], probs[np.arange(T)[valid], y[valid]], rtol=0, atol=1e-6)
    assert np.isnan(z[:, ~valid]).all()  # no true next token: no colour
    assert ((z[:, valid] >= 0) & (z[:, valid] <= 1)).all()
    top = chart(page, "Top 5 after")
    assert array(top["data"][0]["z"]).shape == (cfg.n_layer + 1, 5)


@torch.no_grad()
def heads_by_hand(cfg, model, tr, pos: int, tok: int) -> np.ndarray:
    """(n_layer, n_head): what each head wrote at row 0, position pos (``hook_z[..., h, :] @ W_O_h.T``, W_O_h its
    column block of c_proj's weight), through the final norm frozen at the recorded ``ln_final.hook_scale``
    (centred: a LayerNorm), its weight, and the unembedding row of tok."""
    hs = cfg.d_head
    scale = float(tr["ln_final.hook_scale"][0, pos, 0])
    read = model.transformer.ln_f.weight.double() * model.lm_head.weight[tok].double() / scale
    out = np.zeros((cfg.n_layer, cfg.n_head))
    for l in range(cfg.n_layer):
        W_O = model.transformer.h[l].attn.c_proj.weight.double()
        for h in range(cfg.n_head):
            wrote = tr[f"blocks.{l}.attn.hook_z"][0, pos, h].double() @ W_O[:, h * hs:(h + 1) * hs].T
            out[l, h] = float(((wrote - wrote.mean()) * read).sum())
    return out


def test_dla_bars_add_up_to_the_logit_and_each_head_is_its_own_output(page, reference):
    _, cfg, model, batch, tr = reference
    assert cfg.norm == "layernorm" and cfg.norm_placement == "pre"  # what heads_by_hand writes out
    y = batch.y[0]
    pos = int(torch.nonzero(y >= 0)[-1])  # the page's default position: the last with a true next token
    tok = int(y[pos])
    logit = float(tr["hook_logits"][0, pos, tok])
    bar_chart = chart(page, "Who pushes the logit")["data"][0]
    bars = array(bar_chart["x"]).astype(float)
    assert abs(bars.sum() - logit) < 1e-4
    assert abs(metric(page, "sum of the bars") - logit) < 1e-4
    by_hand = heads_by_hand(cfg, model, tr, pos, tok)
    # (an untrained model: small numbers, but every two heads differ by far more than the tolerance below, so no
    # two cells could be swapped unseen)
    assert np.diff(np.sort(by_hand.ravel())).min() > 1e-5
    hm = chart(page, "Each head's direct contribution")["data"][0]
    assert list(hm["y"]) == [f"L{l}" for l in range(cfg.n_layer)] and list(hm["x"]) == [f"H{h}" for h in
                                                                                         range(cfg.n_head)]
    heads = array(hm["z"]).astype(float)
    assert heads.shape == (cfg.n_layer, cfg.n_head)
    np.testing.assert_allclose(heads, by_hand, rtol=1e-5, atol=1e-6)
    # the bar named after each head carries the same number
    named = dict(zip(bar_chart["customdata"], bars))
    got = np.array([[named[f"L{l}.H{h}"] for h in range(cfg.n_head)] for l in range(cfg.n_layer)])
    np.testing.assert_allclose(got, by_hand, rtol=1e-5, atol=1e-6)


def test_patching_grids_and_exact_end_points(page):
    r = array(chart(page, "Patch the residual stream")["data"][0]["z"]).astype(float)
    T = 10  # "the cat sat on the mat" / "the rat sat on the mat" with the default tokenizer
    assert r.shape == (3, T)
    assert r[-1, -1] == 1.0 and (r[-1, :-1] == 0.0).all()  # the final stream only matters at the last position
    assert r[0, 1] == 1.0 and (r[0, 2:] == 0.0).all()  # the embeddings differ only at 'c' / 'r'
    assert array(chart(page, "Patch one head's output")["data"][0]["z"]).shape == (2, 2)
    assert len(array(chart(page, "Patch one MLP's output")["data"][0]["y"])) == 2
    assert metric(page, "forward passes") == 2 + 3 * T + 2 * 2 + 2


def test_prompts_of_different_lengths_are_explained():
    at = who()
    text_input(at, "Corrupted prompt").input("the dog sat on the mat").run()
    assert not at.exception
    msg = messages(at)
    assert "different lengths (10 and 11 tokens)" in msg
    shown = " ".join(m.value for m in at.markdown)
    assert "**Clean** (10)" in shown and "**Corrupted** (11)" in shown and "'d' · 'o' · 'g'" in shown
    assert not any(t.startswith("Patch") for t in titles(at))  # nothing is patched


def test_bad_choices_become_messages_not_tracebacks():
    at = who()
    # the same token twice
    wrong = next(s for s in at.selectbox if s.label.startswith("Wrong token"))
    answer = next(s for s in at.selectbox if s.label.startswith("Answer"))
    wrong.set_value(answer.value).run()
    assert not at.exception and "same token" in messages(at)
    # a typed token that is several tokens, then one that is a single token
    at.radio(key="dla.mode").set_value("a token I type").run()
    text_input(at, "Token").input("zebra crossing").run()
    assert not at.exception and "not one" in messages(at)
    text_input(at, "Token").input("m").run()
    assert not at.exception
    bars = array(chart(at, "Who pushes the logit of 'm'")["data"][0]["x"]).astype(float)
    assert abs(bars.sum() - metric(at, "logit of 'm'")) < 1e-3  # the metric is rounded to 4 decimals
    # an empty prompt
    text_input(at, "Clean prompt").input("").run()
    assert not at.exception and "no tokens" in messages(at)


def test_open_a_head_sets_the_shared_layer_and_head():
    at = who()
    pick = next(s for s in at.selectbox if s.label == "Look at a head")
    pick.set_value((1, 1)).run()
    next(b for b in at.button if b.label.startswith("Open L1 H1")).click().run()
    assert not at.exception
    s = at.session_state["gptviz.settings"]
    assert (s["layer"], s["head"]) == (1, 1)
    assert any("Layer 1, head 1" in m.value for m in at.success)


def test_post_norm_model_explains_attribution_and_still_shows_the_lens():
    at = set_sidebar(who(), "norm_placement", "post")
    ok(at)
    assert "needs a pre-norm model" in messages(at)
    chart(at, "Logit lens")
    chart(at, "Patch the residual stream")


def test_a_trained_sort_model_gets_its_own_pair_and_clear_scores():
    at = ok(who(preset="checkpoint: sort"))
    assert text_input(at, "Clean prompt").value == "fbdacb|abbcd"
    assert text_input(at, "Corrupted prompt").value == "ebdacb|abbcd"
    answer = next(s for s in at.selectbox if s.label.startswith("Answer"))
    wrong = next(s for s in at.selectbox if s.label.startswith("Wrong token"))
    assert "'f'" in answer.format_func(answer.value) and "'e'" in wrong.format_func(wrong.value)
    r = array(chart(at, "Patch the residual stream")["data"][0]["z"]).astype(float)
    assert r.shape == (3, 12)  # the sort model has 2 layers
    assert r[0, 0] == 1.0 and (r[0, 1:] == 0.0).all()  # the prompts differ only in their first token
    assert metric(at, "clean logit difference") > 5 > 0 > -5 > metric(at, "corrupted logit difference")
    assert "almost the same logit difference" not in messages(at)


def test_a_single_token_text_has_nothing_to_attribute():
    at = set_sidebar(who(), "text", "t")
    assert not at.exception
    assert "has no true next token" in messages(at)


def test_the_induction_model_gets_an_induction_pair_and_patching_finds_the_detectors_head():
    """On the shipped attention-only model the ready-made pair is an induction prompt ("the Prince of England and
    the Prince of E" → 'n'; with Egypt first → 'g'), and the head patching finds the head that the detector
    scores highest for induction on the repeated-random probe."""
    from gptviz import load_checkpoint
    from gptviz.interp import head_detector
    from gptviz.ui.resources import CHECKPOINTS

    at = ok(who(preset="checkpoint: induction-heads"))
    assert text_input(at, "Clean prompt").value == "the Prince of England and the Prince of E"
    answer = next(s for s in at.selectbox if s.label.startswith("Answer"))
    wrong = next(s for s in at.selectbox if s.label.startswith("Wrong token"))
    assert "'n'" in answer.format_func(answer.value) and "'g'" in wrong.format_func(wrong.value)
    grid = array(chart(at, "Patch one head")["data"][0]["z"]).astype(float)  # (layer, head)
    ck = load_checkpoint(CHECKPOINTS / "induction-heads.safetensors")
    ind = head_detector.probe(ck.model, n=32, batch=8, seed=7)["scores"]["induction"]
    assert grid.shape == ind.shape
    best = int(np.argmax(ind[1]))
    assert int(np.nanargmax(grid[1])) == best and grid[1, best] > 0.5  # layer 1: the detector's induction head


def test_a_long_text_is_read_one_window_of_positions_at_a_time(monkeypatch, reference):
    """With the lens's budget set so this model reads 8 positions a view, the heatmap holds the last 8 positions
    (3–10 of 11), labelled from 3, and sliding to the first window shows positions 0–7; each window's cells against
    the model's own probabilities at the last row, and the top-token picker offers only that window."""
    import gptviz.interp.lens as lens_module

    monkeypatch.setattr(lens_module, "LENS_BUDGET_MACS", 1)
    monkeypatch.setattr(lens_module, "LENS_WINDOWS", (8,))
    _, cfg, _, batch, tr = reference
    T = batch.lengths[0]
    y = batch.y[0, :T].numpy()
    probs = torch.softmax(tr["hook_logits"][0, :T].double(), -1).numpy()
    at = ok(who())
    for start in (3, 0):
        if start == 0:
            at.select_slider(key=f"lens.win.{T}.8").set_value(0)
            at = ok(at.run())
        fig = chart(at, "Logit lens")
        assert f"positions {start}–{start + 7} of {T}" in fig["layout"]["title"]["text"]
        z = array(fig["data"][0]["z"]).astype(float)
        assert z.shape == (cfg.n_layer + 1, 8)
        assert fig["data"][0]["x"][0].startswith(f"{start}: ")
        window = np.arange(start, start + 8)
        valid = y[window] >= 0
        np.testing.assert_allclose(z[-1, valid], probs[window[valid], y[window][valid]], rtol=0, atol=1e-6)
        picker = next(s for s in at.selectbox if s.label == "Position for the top tokens")
        assert list(picker.options)[0].startswith(f"{start}: ") and len(picker.options) == 8
