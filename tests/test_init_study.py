"""gptviz.training.init_study: the three facts about the initial scale, checked on real values, and its figures."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from gptviz import GPT, ModelConfig, encode_batch, get_tokenizer, preset
from gptviz.present.figures import initialisation as fi
from gptviz.text.batches import BUILTIN_TEXT, DEFAULT_PROMPT
from gptviz.training import init_study as study


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    # tiny models: a second thread only adds overhead on a busy machine
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def setup():
    """The app's default view: the default preset, char BPE with 20 merges, the built-in prompt."""
    tok = get_tokenizer("char-bpe", num_merges=20)
    cfg = preset("default").replace(vocab_size=tok.vocab_size)
    b = encode_batch(tok, DEFAULT_PROMPT, block_size=cfg.block_size)
    return cfg, tok, b


PADDED_TEXT = "the cat sat on the mat.\na dog."  # two rows: 11 tokens and 6, so row 1 has 5 padded positions


@pytest.fixture(scope="module")
def padded(setup):
    """The default view's model on a two-line text: a batch with padding, whose padded positions must not count."""
    cfg, tok, _ = setup
    b = encode_batch(tok, PADDED_TEXT, block_size=cfg.block_size)
    assert b.x.shape == (2, 11) and b.attention_mask.sum(1).tolist() == [11, 6]
    return b


@pytest.fixture(scope="module")
def sweep(setup):
    cfg, _, b = setup
    return study.loss_sweep(cfg, b.x, b.y, b.attention_mask)


def _mlp_pre(cfg, b, init_std, activation):
    """Independently of trace: the output of each layer's c_fc (the pre-activation), by forward hooks, with
    gradients retained, after a plain forward/backward of the model's own loss."""
    model = GPT(cfg.replace(init_std=init_std, activation=activation))
    pres = {}

    def keep(layer):
        def hook(_mod, _inp, out):
            out.retain_grad()
            pres[layer] = out
        return hook

    handles = [blk.mlp.c_fc.register_forward_hook(keep(i)) for i, blk in enumerate(model.transformer.h)]
    _, loss = model(b.x, b.y, b.attention_mask)
    loss.backward()
    for h in handles:
        h.remove()
    return pres


# --------------------------------------------------------------------------- fact 1
def test_grid_runs_from_0002_to_2_and_holds_gpt2s_scale():
    assert len(study.GRID) == 13 and study.GRID[0] == 0.002 and study.GRID[-1] == 2.0
    assert 0.02 in study.GRID and 0.2 in study.GRID
    assert all(a < b for a, b in zip(study.GRID, study.GRID[1:]))


def test_small_init_starts_at_ln_v_and_a_large_one_far_above(setup, sweep):
    cfg, _, _ = setup
    assert cfg.vocab_size == 76 and sweep["ln_v"] == pytest.approx(math.log(76))
    assert abs(sweep["losses"][0] - sweep["ln_v"]) < 0.05  # measured 4.3258 against ln 76 = 4.3307
    assert sweep["losses"][-1] > 3 * sweep["ln_v"]  # measured 17.48 at init_std 2: 4.0 × ln V
    assert sweep["losses"][-1] > sweep["losses"][-2] > sweep["losses"][-3] > sweep["losses"][-4] > sweep["ln_v"]
    assert sweep["current_std"] == 0.02 and sweep["current_loss"] == sweep["losses"][study.GRID.index(0.02)]


def test_a_sweep_point_is_plain_cross_entropy(setup, sweep):
    cfg, _, b = setup
    for s in (0.2, 2.0):
        with torch.no_grad():
            logits = GPT(cfg.replace(init_std=s)).run(b.x, b.attention_mask)
        ref = F.cross_entropy(logits.reshape(-1, cfg.vocab_size), b.y.reshape(-1), ignore_index=-100)
        assert sweep["losses"][study.GRID.index(s)] == pytest.approx(float(ref), abs=1e-5)


def test_the_current_init_std_off_the_grid_is_computed(setup):
    cfg, _, b = setup
    sw = study.loss_sweep(cfg.replace(init_std=0.05), b.x, b.y, b.attention_mask, scales=(0.01, 0.1))
    assert sw["current_std"] == 0.05
    assert sw["current_loss"] == pytest.approx(study.initial_loss(cfg, b.x, b.y, b.attention_mask, 0.05))


# --------------------------------------------------------------------------- fact 2
def test_the_first_guess_is_uniform_when_small_and_confident_when_large(setup):
    cfg, _, b = setup
    small = study.initial_distribution(cfg, b.x, b.attention_mask, 0.02, y=b.y)
    large = study.initial_distribution(cfg, b.x, b.attention_mask, 1.0, y=b.y)
    V = cfg.vocab_size
    assert small["pos"] == large["pos"] == 9  # the last position that has a target
    assert small["target"] == int(b.y[0, 9]) and small["target_prob"] == pytest.approx(small["probs"][small["target"]])
    for d in (small, large):
        assert d["probs"].shape == (V,) and d["probs"].sum() == pytest.approx(1.0, abs=1e-5)
    assert small["max_prob"] < 2 / V and small["entropy"] > 0.99 * math.log(V)
    assert large["max_prob"] > 0.2 and large["entropy"] < 0.6 * math.log(V)


def test_training_from_a_large_init_starts_higher_and_stays_behind(setup):
    cfg, tok, _ = setup
    ids = tok.encode(BUILTIN_TEXT)
    tc = study.training_curves(cfg, ids, scales=(0.02, 1.0), steps=100)
    small, large = tc["curves"]
    assert len(small) == len(large) == 101
    assert abs(small[0] - tc["ln_v"]) < 0.1 and large[0] > 2 * tc["ln_v"]
    assert small[-1] < small[0] - 0.5 and large[-1] < large[0]  # both learn
    assert np.mean(large[-10:]) > np.mean(small[-10:]) + 0.3  # the large start is still behind
    again = study.training_curves(cfg, ids, scales=(1.0,), steps=100)  # seeded
    assert again["curves"][0] == large


def test_the_batch_or_any_token_stream_can_be_trained_on(setup):
    cfg, _, b = setup
    with pytest.raises(ValueError, match="too short"):
        study.training_curves(cfg, b.x[0].tolist()[:3], steps=2)
    tc = study.training_curves(cfg, b.x[0].tolist() * 6, scales=(0.02,), steps=3)
    assert len(tc["curves"][0]) == 4


# --------------------------------------------------------------------------- fact 3
@pytest.fixture(scope="module")
def tanh_stats(setup):
    cfg, _, b = setup
    return {s: study.activation_stats(cfg, b.x, b.y, b.attention_mask, s, "tanh") for s in (0.02, 0.2, 1.0)}


def test_tanh_saturation_rises_with_scale(tanh_stats):
    for layer in range(2):
        sat = [tanh_stats[s]["layers"][layer]["saturated"] for s in (0.02, 0.2, 1.0)]
        assert sat[0] == 0.0 and sat[0] < sat[1] < sat[2] and sat[2] > 0.5, sat  # measured 0, ~0.01, ~0.6


@pytest.fixture(scope="module")
def padded_tanh(setup, padded):
    cfg, _, _ = setup
    return study.activation_stats(cfg, padded.x, padded.y, padded.attention_mask, 1.0, "tanh")


def test_saturation_matches_an_independent_count(setup, padded, padded_tanh):
    """On a padded batch: the share of saturated units and the gradient at the pre-activation, over the real
    positions only (attention_mask == 1), from c_fc's output read by a forward hook."""
    cfg, _, _ = setup
    pres = _mlp_pre(cfg, padded, 1.0, "tanh")
    real = padded.attention_mask == 1
    for layer in range(cfg.n_layer):
        pre = pres[layer].detach()[real]
        assert pre.shape == (17, cfg.d_mlp)  # 11 + 6 real positions: the 5 padded ones are left out
        frac = float((torch.tanh(pre).abs() > 0.97).float().mean())
        assert padded_tanh["layers"][layer]["saturated"] == pytest.approx(frac, abs=1e-7)
        # and the gradient reaching the pre-activation is autograd's own, averaged over the real positions
        g = float(pres[layer].grad[real].abs().mean())
        assert padded_tanh["layers"][layer]["grad_pre"] == pytest.approx(g, rel=1e-5)


def test_less_of_the_gradient_gets_through_tanh_as_scale_grows(tanh_stats):
    # mean |dL/d pre| / mean |dL/d post|: what survives the activation's slope. (The raw mean |dL/d pre| does
    # not fall on this model: the gradient arriving at the activation grows with every other weight.)
    for layer in range(2):
        ratio = [tanh_stats[s]["layers"][layer]["pass_through"] for s in (0.02, 0.2, 1.0)]
        assert ratio[0] > 0.95 and ratio[0] > ratio[1] > ratio[2] and ratio[2] < 0.3, ratio


def test_histograms_count_every_unit_of_every_real_token(setup, padded, padded_tanh):
    cfg, _, _ = setup
    real = padded.attention_mask == 1
    n = int(real.sum()) * cfg.d_mlp
    assert n == 17 * 64  # real positions × d_mlp: 1,088 units a layer, not the 2 × 11 × 64 = 1,408 of the padded grid
    assert sum(sum(d["pre_counts"]) for d in padded_tanh["layers"]) == n * cfg.n_layer
    pres = _mlp_pre(cfg, padded, 1.0, "tanh")
    for layer, d in enumerate(padded_tanh["layers"]):
        for which in ("pre", "post"):
            assert sum(d[f"{which}_counts"]) == n and len(d[f"{which}_edges"]) == 41
        assert d["post_edges"][0] == -1.0 and d["post_edges"][-1] == 1.0
        # the bins by hand: the real positions' pre-activations, in 40 bins over ±max|pre|, and tanh of them
        pre = pres[layer].detach()[real].flatten().numpy()
        r = float(np.abs(pre).max())
        assert d["pre_edges"][0] == pytest.approx(-r) and d["pre_edges"][-1] == pytest.approx(r)
        assert d["pre_counts"] == np.histogram(pre, bins=40, range=(-r, r))[0].tolist()
        assert d["post_counts"] == np.histogram(np.tanh(pre), bins=40, range=(-1, 1))[0].tolist()


def test_relu_and_gelu_rules(setup):
    cfg, _, b = setup
    valid = b.attention_mask.bool()
    for act, rule in (("relu", lambda p: p <= 0), ("gelu", lambda p: p < -3), ("gelu_tanh", lambda p: p < -3)):
        st_ = study.activation_stats(cfg, b.x, b.y, b.attention_mask, 1.0, act)
        pres = _mlp_pre(cfg, b, 1.0, act)
        for layer, d in enumerate(st_["layers"]):
            assert d["saturated"] == pytest.approx(float(rule(pres[layer][valid]).float().mean()), abs=1e-7)
        assert 0.3 < st_["layers"][0]["saturated"] < 0.6 if act == "relu" else True


def test_an_attention_only_model_has_no_mlp_to_study(setup):
    cfg, _, b = setup
    ao = cfg.replace(attn_only=True)
    st_ = study.activation_stats(ao, b.x, b.y, b.attention_mask, 1.0, "tanh")
    assert st_["has_mlp"] is False and st_["layers"] == []
    assert study.activation_sweep(ao, b.x, b.y, b.attention_mask)["layers"] == []
    r = study.residual_stds(ao, b.x, b.attention_mask)
    assert r["labels"] == ["token embedding", "L0 in (tok + pos)", "L0 after attn", "L1 after attn"]
    assert abs(study.loss_sweep(ao, b.x, b.y, b.attention_mask, scales=(0.002,))["losses"][0] - math.log(76)) < 0.05


# --------------------------------------------------------------------------- keeping the spread
@pytest.mark.parametrize("n", [16, 64])
def test_x_at_w_keeps_the_spread_only_with_variance_one_over_n(n):
    d = study.spread_demo(n)
    assert d["ratio_scaled"] == pytest.approx(1.0, abs=0.1)
    assert d["ratio_unit"] == pytest.approx(math.sqrt(n), rel=0.1)
    assert d["depth_unit"][-1] > 0.5 * math.sqrt(n) ** 6 and 0.5 < d["depth_scaled"][-1] < 2


def _residual_by_hand(cfg, b, init_std) -> list[torch.Tensor]:
    """Independently of trace: the residual stream at each point, read by forward hooks on the modules (a pre-norm
    block's stream after attention is its ln_2's input), at the real positions only."""
    model, seen = GPT(cfg.replace(init_std=init_std)), {}
    blocks = model.transformer.h
    hooks = [model.transformer.wte.register_forward_hook(lambda m, i, out: seen.__setitem__("embed", out)),
             blocks[0].register_forward_pre_hook(lambda m, args: seen.__setitem__("in", args[0]))]
    for l, blk in enumerate(blocks):
        hooks.append(blk.ln_2.register_forward_pre_hook(lambda m, args, l=l: seen.__setitem__(("mid", l), args[0])))
        hooks.append(blk.register_forward_hook(lambda m, i, out, l=l: seen.__setitem__(("post", l), out)))
    with torch.no_grad():
        model(b.x, attention_mask=b.attention_mask)
    for h in hooks:
        h.remove()
    real = b.attention_mask == 1
    order = ["embed", "in"] + [(w, l) for l in range(cfg.n_layer) for w in ("mid", "post")]
    return [seen[k][real] for k in order]


def test_residual_stream_std(setup, padded):
    cfg, _, _ = setup
    small = study.residual_stds(cfg, padded.x, padded.attention_mask)
    large = study.residual_stds(cfg, padded.x, padded.attention_mask, 1.0)
    assert small["names"][0] == "hook_embed" and small["names"][-1] == "blocks.1.hook_resid_post"
    assert len(small["stds"]) == 6 and max(small["stds"]) < 0.05  # 0.02 … 0.03: kept small throughout
    assert large["stds"][0] == pytest.approx(1.0, rel=0.2) and large["stds"][-1] > 5 * large["stds"][0]
    for got, s in ((small, 0.02), (large, 1.0)):
        points = _residual_by_hand(cfg, padded, s)
        assert [tuple(p.shape) for p in points] == [(17, cfg.n_embd)] * 6  # the 17 real positions only
        assert got["stds"] == pytest.approx([float(p.std()) for p in points], rel=1e-5)


# --------------------------------------------------------------------------- figures
def test_figures(setup, sweep, tanh_stats):
    cfg, tok, b = setup
    f = fi.loss_sweep_figure(sweep, "Initial loss").to_dict()
    assert f["layout"]["xaxis"]["type"] == "log"
    assert f["data"][1]["x"] == [0.02] and f["data"][1]["y"] == [sweep["current_loss"]]
    assert f["layout"]["shapes"][0]["y0"] == sweep["ln_v"]
    vocab = [tok.token_str(i) for i in range(tok.vocab_size)]
    d = study.initial_distribution(cfg, b.x, b.attention_mask, 1.0, y=b.y)
    p = fi.prob_figure(d["probs"], vocab, "p", target=d["target"]).to_dict()
    assert p["layout"]["yaxis"]["range"] == [0, 1] and len(p["data"][0]["y"]) == 20
    assert "#d62728" in p["data"][0]["marker"]["color"]  # the target is shown, in red
    layer0 = tanh_stats[1.0]["layers"][0]
    h = fi.histogram_figure(layer0, "tanh", 1.0).to_dict()
    assert f"{100 * layer0['saturated']:.1f}% of units saturated" in h["layout"]["title"]["text"]
    assert h["layout"]["margin"]["t"] >= 80  # room for the title above the two pane titles
    assert len(fi.grad_figure(tanh_stats[1.0]).data) == 2
    s = study.activation_sweep(cfg, b.x, b.y, b.attention_mask, scales=(0.02, 1.0), activation="tanh")
    assert len(fi.saturation_sweep_figure(s, 1.0).data) == 4
    assert fi.spread_figure(study.spread_demo(16)).layout.yaxis.type == "log"
    assert len(fi.residual_figure([study.residual_stds(cfg, b.x, b.attention_mask)]).data) == 1


def test_training_leaves_torch_threads_as_it_found_them(setup):
    cfg, _, b = setup
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with study.torch_threads(1):
            assert torch.get_num_threads() == 1
            with study.torch_threads(1):  # overlapping users share one change
                pass
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
        study.training_curves(cfg, b.x[0].tolist() * 6, scales=(0.02,), steps=2)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_read_only_models_are_built_once_and_equal_fresh_ones():
    """The studies' forward passes reuse one model per (shape, scale, activation): its weights are those of a
    fresh model (same seed), and a model to train is always a new one."""
    from gptviz.training.init_study import fresh_model, read_only_model

    cfg = ModelConfig(vocab_size=30, block_size=8, n_layer=1, n_head=2, n_embd=8)
    a, b = read_only_model(cfg, 0.5), read_only_model(cfg, 0.5)
    assert a is b and a is not read_only_model(cfg, 0.25)
    f = fresh_model(cfg, 0.5)
    assert f is not a and f is not fresh_model(cfg, 0.5)
    for (n, p), (_, q) in zip(a.named_parameters(), f.named_parameters()):
        assert torch.equal(p, q), n
    assert read_only_model(cfg, 0.5, "tanh").config.activation == "tanh"


def _by_hand(cfg, b, init_std):
    """Independently of gptviz's recorder: the loss (F.cross_entropy over the positions with a target), and per
    layer the pre-activation (c_fc's output) and post-activation (c_proj's input) with their gradients, read by
    forward hooks after a plain backward of that loss."""
    model, seen = GPT(cfg.replace(init_std=init_std)), {}

    def keep(key):
        def hook(_mod, args, out=None):
            t = args[0] if out is None else out
            t.retain_grad()
            seen[key] = t
        return hook

    hooks = []
    for l, blk in enumerate(model.transformer.h):
        hooks.append(blk.mlp.c_fc.register_forward_hook(keep(("pre", l))))
        hooks.append(blk.mlp.c_proj.register_forward_pre_hook(keep(("post", l))))
    logits = model.run(b.x, b.attention_mask)
    loss = F.cross_entropy(logits.reshape(-1, cfg.vocab_size), b.y.reshape(-1), ignore_index=-100)
    loss.backward()
    for h in hooks:
        h.remove()
    return float(loss.detach()), seen


def test_one_pass_per_scale_gives_both_sweeps_as_plain_pytorch_computes_them(setup, padded):
    """The page's one-pass sweeps, on a two-row batch whose row 1 is padded (only real tokens count): each
    scale's loss is F.cross_entropy of a fresh model, and the saturation numbers (gelu_tanh: pre < −3; mean |∂L/∂pre|
    and |∂L/∂post| over the real tokens, and their ratio) are those of c_fc's output and c_proj's input."""
    cfg, _, _ = setup
    assert cfg.activation == "gelu_tanh" and not cfg.gated_mlp
    scales = (0.02, 0.5, 2.0)
    losses, acts = study.sweeps(cfg, padded.x, padded.y, padded.attention_mask, scales=scales)
    assert losses["scales"] == list(scales) and acts["scales"] == list(scales) and acts["activation"] == "gelu_tanh"
    assert losses["ln_v"] == pytest.approx(math.log(76)) and losses["current_std"] == 0.02
    real = padded.attention_mask == 1
    for i, s in enumerate(scales):
        loss, seen = _by_hand(cfg, padded, s)
        assert losses["losses"][i] == pytest.approx(loss, rel=1e-5)
        for l in range(cfg.n_layer):
            pre, post = seen[("pre", l)], seen[("post", l)]
            g_pre, g_post = float(pre.grad[real].abs().mean()), float(post.grad[real].abs().mean())
            got = acts["layers"][l]
            assert got["saturated"][i] == pytest.approx(float((pre.detach()[real] < -3).float().mean()), abs=1e-7)
            assert got["grad_pre"][i] == pytest.approx(g_pre, rel=1e-4)
            assert got["grad_post"][i] == pytest.approx(g_post, rel=1e-4)
            assert got["pass_through"][i] == pytest.approx(g_pre / g_post, rel=1e-4)
    assert losses["current_loss"] == losses["losses"][0]


def test_a_model_whose_mlp_the_study_replaces_gets_only_the_loss_sweep(setup, padded):
    """A gated MLP (the saturation study uses a plain one instead) or an attention-only model: the loss sweep is still
    each fresh model's own cross-entropy, and there is no activation sweep of the model's own."""
    cfg, _, _ = setup
    for other in (cfg.replace(gated_mlp=True), cfg.replace(attn_only=True)):
        losses, acts = study.sweeps(other, padded.x, padded.y, padded.attention_mask, scales=(0.02, 1.0))
        assert acts is None
        for i, s in enumerate((0.02, 1.0)):
            with torch.no_grad():
                logits = GPT(other.replace(init_std=s)).run(padded.x, padded.attention_mask)
            ref = F.cross_entropy(logits.reshape(-1, 76), padded.y.reshape(-1), ignore_index=-100)
            assert losses["losses"][i] == pytest.approx(float(ref), rel=1e-5)
