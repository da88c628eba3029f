"""The Compare models page as a user opens it: trained against untrained weights (Shakespeare GPT, the induction-heads
model), two snapshots of the induction-heads run, two seeds of GPT-2 small's shape, and two checkpoints that do not
fit together. Where it shows numbers they are checked against plain forward passes of the two models with torch
forward hooks (and a hand-written total variation for the head ranking)."""
import numpy as np
import pytest
import torch
from apphelp import PAGES, array, chart, charts, messages, ok, page

from gptviz.model.build import build_model
from gptviz.model.checkpoint import load_checkpoint
from gptviz.model.hook_points import HookPoint
from gptviz.paths import CHECKPOINTS

COMPARE = "app_pages/compare_models.py"


@pytest.fixture(autouse=True)
def compare_page(monkeypatch):
    monkeypatch.setitem(PAGES, "compare", COMPARE)


def hooked(model, ids) -> dict:
    """Every hook point's tensor of a plain ``model(ids)``, caught by torch forward hooks."""
    seen, handles = {}, []
    for mod in model.modules():
        if isinstance(mod, HookPoint):
            handles.append(mod.register_forward_hook(
                lambda m, i, o: seen.__setitem__(m.name, o.detach().double().numpy().copy())))
    try:
        with torch.no_grad():
            model(torch.tensor([ids]))
    finally:
        for h in handles:
            h.remove()
    return seen


def _diff_z(at) -> np.ndarray:
    return array(chart(at, "B − A")["data"][0]["z"]).astype(float)


def _shown_ids(ck, at) -> list[int]:
    return ck.tokenizer.encode(at.session_state["gptviz.settings"]["text"].splitlines()[0])


def test_shakespeare_trained_against_untrained_is_b_minus_a_of_two_hooked_runs():
    at = ok(page("compare", opening=True))
    assert at.radio(key="cmp.mode").value.startswith("Trained vs untrained")
    ck = load_checkpoint(CHECKPOINTS / "shakespeare.safetensors")
    ids = _shown_ids(ck, at)
    untrained = build_model(ck.model.config)  # the same shape, freshly initialised with the config's seed
    a, b = hooked(untrained, ids), hooked(ck.model, ids)
    want = (b["blocks.0.attn.hook_pattern"] - a["blocks.0.attn.hook_pattern"])[0, 0]
    z = _diff_z(at)
    causal = np.tril(np.ones_like(want, dtype=bool))
    assert z.shape == want.shape
    assert np.allclose(z[causal], want[causal], atol=1e-5)
    assert np.isnan(z[~causal]).all()  # masked cells are grey, not "no change"
    # another step, picked from the trace's step list: the residual stream after block 2
    at.selectbox(key="cmp.step").set_value("blocks.2.hook_resid_post").run()
    ok(at)
    want = (b["blocks.2.hook_resid_post"] - a["blocks.2.hook_resid_post"])[0]
    assert np.allclose(_diff_z(at), want, atol=1e-5)


def test_two_snapshots_of_the_induction_heads_run():
    from gptviz.model.gpt import GPT
    from gptviz.training.recipes import load_snapshots

    at = page("compare", opening=True)
    at.radio(key="cmp.mode").set_value("Two snapshots of the induction-heads run").run()
    ok(at)
    step_a, step_b = at.select_slider(key="cmp.snap_a").value, at.select_slider(key="cmp.snap_b").value
    assert step_a < step_b
    snaps = dict(load_snapshots(CHECKPOINTS / "induction-heads.snapshots.safetensors"))
    ck = load_checkpoint(CHECKPOINTS / "induction-heads.safetensors")
    models = []
    for step in (step_a, step_b):
        m = GPT(ck.model.config)
        m.load_state_dict(snaps[step], strict=False)
        models.append(m.eval())
    ids = _shown_ids(ck, at)
    a, b = hooked(models[0], ids), hooked(models[1], ids)
    want = (b["blocks.0.attn.hook_pattern"] - a["blocks.0.attn.hook_pattern"])[0, 0]
    causal = np.tril(np.ones_like(want, dtype=bool))
    assert np.allclose(_diff_z(at)[causal], want[causal], atol=1e-5)


def test_induction_heads_model_ranks_heads_by_a_hand_written_total_variation():
    at = ok(page("compare", preset="checkpoint: induction-heads"))
    ck = load_checkpoint(CHECKPOINTS / "induction-heads.safetensors")
    ids = _shown_ids(ck, at)
    a, b = hooked(build_model(ck.model.config), ids), hooked(ck.model, ids)
    T, cfg = len(ids), ck.model.config
    hand = {}
    for layer in range(cfg.n_layer):
        pa, pb = a[f"blocks.{layer}.attn.hook_pattern"][0], b[f"blocks.{layer}.attn.hook_pattern"][0]
        for h in range(cfg.n_head):
            hand[f"L{layer} H{h}"] = sum(0.5 * np.abs(pa[h, i, :i + 1] - pb[h, i, :i + 1]).sum()
                                         for i in range(T)) / T
    bars = chart(at, "The 12 most changed heads")["data"][0]
    shown = dict(zip(bars["customdata"], array(bars["x"])))
    top = sorted(hand, key=hand.get, reverse=True)[:12]
    assert list(shown) == top
    assert all(abs(shown[k] - hand[k]) < 1e-5 for k in top)
    grid = array(chart(at, "How much each head's attention changed")["data"][0]["z"])
    assert grid.shape == (cfg.n_layer, cfg.n_head)


def test_gpt2_small_shape_compares_two_seeds_and_says_so():
    at = ok(page("compare", preset="gpt2-small", tokenizer="gpt2", text="the cat sat on the mat"))
    assert at.radio(key="cmp.mode").value == "Two seeds of this shape"  # no trained model here
    words = " ".join(m.value for m in at.markdown)
    assert "untrained" in words and "seeds 0 and 1" in words
    assert "124,4" in words  # GPT-2 small's parameter count (124,4xx,xxx with this tokenizer's vocabulary)
    assert len(charts(at)) == 4


def test_checkpoints_that_do_not_fit_together_get_a_clear_message():
    at = page("compare", opening=True)
    at.radio(key="cmp.mode").set_value("Two checkpoints").run()
    at.selectbox(key="cmp.ck_b").set_value("ckpt:induction").run()  # another tokenizer
    assert not at.exception and "different tokenizers" in messages(at)
    at.selectbox(key="cmp.ck_b").set_value("ckpt:induction-heads").run()  # one tokenizer, another shape
    assert not at.exception and "not the same architecture" in messages(at)
    at.selectbox(key="cmp.ck_b").set_value("ckpt:shakespeare").run()  # the model shown, again: no change at all
    ok(at)
    assert np.nanmax(np.abs(_diff_z(at))) == 0


def test_the_most_changed_head_is_one_click_away_and_hostile_text_stays_text():
    at = ok(page("compare", preset="checkpoint: induction-heads", text="<b>x</b> [a](javascript:alert(1)) **y**"))
    top = chart(at, "The 12 most changed heads")["data"][0]["customdata"][0]  # e.g. "L1 H6"
    layer, head = (int(part[1:]) for part in top.split())
    [b for b in at.button if b.key == "cmp.show_top"][0].click().run()
    ok(at)
    assert at.selectbox(key="cmp.step").value == f"blocks.{layer}.attn.hook_pattern"
    assert chart(at, "B − A")["layout"]["title"]["text"].endswith(f"head {head}")


def test_a_big_model_compares_on_what_two_models_may_cost_and_says_so(monkeypatch):
    """A server budget of 40 GFLOP a text (GPTVIZ_PAGE_GFLOP): GPT-2 small's pass over 128 tokens costs about 32 GFLOP
    (2 × 124M × 128 and the 12 layers' 128 × 128 products), so its line is cut to 128; Compare models runs two models
    and keeps both traces, about 3 passes' work (3 × 16 GFLOP at 64 is over 40), so it reads 32 and says so; the step it
    draws has 32 positions, not the 156 typed."""
    from gptviz.text.tokenizers import get_tokenizer

    monkeypatch.setenv("GPTVIZ_PAGE_GFLOP", "40")
    text = " ".join(["the cat sat on the mat and the dog ran to the hill"] * 12)
    assert len(get_tokenizer("gpt2").encode(text)) == 156
    at = ok(page("compare", preset="gpt2-small", tokenizer="gpt2", text=text))
    said = " ".join(c.value for c in at.caption)
    assert ("each line is cut to 128 tokens because one pass over 256 tokens would cost about 66 GFLOP, over this "
            "server's budget of 40 GFLOP a text") in said
    assert ("here each model reads its line cut to 32 tokens because the work of about 3 passes over 64 tokens (one "
            "pass for each model, and one for keeping the second model's trace) would cost about 48 GFLOP, over this "
            "server's budget of 40 GFLOP") in said
    assert _diff_z(at).shape[-1] == 32
