"""Transcoder training (gptviz/training/transcoder.py) step by step against a loop written here from its stated
definition: the seeded initialisation (encoders N(0, 1/d), unit-norm random decoders, ``b_dec`` each output's mean),
the loss (each layer's batch FVU, plus ``aux_coef`` times the AuxK loss of the dead features), Adam written out by
hand (β 0.9 and 0.999, ε 1e-8), the learning rate's linear fall over the last steps, the decoders renormalised
after every step, and the count of vectors since each feature last fired. The settings make features die within a
few steps, so the AuxK term takes part, and the learning rate falls within the run."""
import math
from dataclasses import asdict

import pytest
import torch

from gptviz.interp.transcoder import Transcoder
from gptviz.training import transcoder as train_mod


def data(L=2, d=6, n=64, seed=11):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, L, d, generator=g)
    y = torch.randn(n, L, d, generator=g) * 0.5 + torch.randn(L, d, generator=g)  # outputs with a mean of their own
    return x, y


def unit_rows(W: torch.Tensor) -> torch.Tensor:
    """Each feature's whole decoder (all the outputs it reaches) divided by its norm."""
    return W / W.pow(2).sum((1, 2), keepdim=True).sqrt().clamp(min=1e-8)


def reference(x, y, *, F, k, cross, steps, B, lr, aux_k, aux_coef, dead_after, decay_from, seed, every):
    """The training loop, written from the definitions. Returns the parameters and the history rows."""
    N, L, d = x.shape
    g = torch.Generator().manual_seed(seed)
    params = {"W_enc": [], "b_enc": [], "W_dec": [], "b_dec": []}
    for layer in range(L):
        params["W_enc"].append(torch.randn(d, F, generator=g) / math.sqrt(d))
        reach = L - layer if cross else 1
        params["W_dec"].append(torch.randn(F, reach, d, generator=g))
        params["b_dec"].append(y[:, layer].mean(0))
        params["b_enc"].append(torch.zeros(F))
    params["W_dec"] = [unit_rows(W) for W in params["W_dec"]]
    flat = [t.clone().requires_grad_(True) for name in ("W_enc", "b_enc", "W_dec", "b_dec") for t in params[name]]
    P = {name: flat[i * L:(i + 1) * L] for i, name in enumerate(("W_enc", "b_enc", "W_dec", "b_dec"))}
    m1 = [torch.zeros_like(p) for p in flat]
    m2 = [torch.zeros_like(p) for p in flat]
    draw = torch.Generator().manual_seed(seed + 1)
    since = torch.zeros(L, F, dtype=torch.long)
    rows = []
    for step in range(1, steps + 1):
        frac = step / steps
        rate = lr if frac <= decay_from else lr * max(0.0, (1 - frac) / (1 - decay_from))
        pick = torch.randint(0, N, (B,), generator=draw)
        xb, yb = x[pick], y[pick]
        dead = since >= dead_after
        pres = [xb[:, layer] @ P["W_enc"][layer] + P["b_enc"][layer] for layer in range(L)]
        feats = []
        for pre in pres:
            top = pre.topk(k, dim=-1)
            feats.append(torch.zeros_like(pre).scatter(-1, top.indices, top.values.clamp(min=0)))
        fvu, aux = torch.zeros(()), 0.0
        for layer in range(L):
            out = P["b_dec"][layer]
            for source in (range(layer + 1) if cross else [layer]):
                out = out + feats[source] @ P["W_dec"][source][:, layer - source]
            target = yb[:, layer]
            fvu = fvu + ((out - target) ** 2).sum(-1).mean() / ((target - target.mean(0)) ** 2).sum(-1).mean()
            if dead[layer].any():
                err = (target - out).detach()
                n_aux = min(aux_k, int(dead[layer].sum()))
                scores = pres[layer].masked_fill(~dead[layer], -math.inf)
                top = scores.topk(n_aux, dim=-1)
                rebuilt = (top.values.clamp(min=0).unsqueeze(-1) * P["W_dec"][layer][top.indices, 0]).sum(1)
                aux = aux + ((rebuilt - err) ** 2).sum(-1).mean() / (err ** 2).sum(-1).mean()
        loss = fvu + aux_coef * aux
        grads = torch.autograd.grad(loss, flat, allow_unused=True)
        with torch.no_grad():
            for i, (p, gr) in enumerate(zip(flat, grads)):
                gr = torch.zeros_like(p) if gr is None else gr
                m1[i] = 0.9 * m1[i] + 0.1 * gr
                m2[i] = 0.999 * m2[i] + 0.001 * gr * gr
                m_hat = m1[i] / (1 - 0.9 ** step)
                v_hat = m2[i] / (1 - 0.999 ** step)
                p -= rate * m_hat / (v_hat.sqrt() + 1e-8)
            for W in P["W_dec"]:
                W.copy_(unit_rows(W))
        fired = torch.stack([(f > 0).any(0) for f in feats])
        since = torch.where(fired, torch.zeros_like(since), since + B)
        if step % every == 0 or step == steps:
            rows.append({"step": step, "fvu": float(fvu.detach()), "aux": float(torch.as_tensor(aux).detach()),
                         "dead": float(dead.float().mean()),
                         "lr": rate})
    return {name: [t.detach() for t in P[name]] for name in P}, rows


SETTINGS = dict(F=24, k=2, steps=7, B=8, lr=0.05, aux_k=3, aux_coef=0.5, dead_after=16, decay_from=0.5, seed=3)


@pytest.mark.parametrize("cross", [False, True], ids=["per-layer", "cross-layer"])
def test_training_equals_the_loop_written_from_its_definition(cross):
    x, y = data()
    s = SETTINGS
    cfg = train_mod.TranscoderTrainConfig(n_features=s["F"], k=s["k"], cross_layer=cross, steps=s["steps"],
                                          batch_size=s["B"], lr=s["lr"], aux_k=s["aux_k"], aux_coef=s["aux_coef"],
                                          dead_after=s["dead_after"], decay_from=s["decay_from"], seed=s["seed"])
    seen = []
    tc, hist = train_mod.train_transcoder(x, y, cfg, on_progress=lambda step, row: seen.append((step, row)),
                                          progress_every=2)
    want, rows = reference(x, y, cross=cross, every=2, **s)
    for name in ("W_enc", "b_enc", "W_dec", "b_dec"):
        for layer in range(2):
            torch.testing.assert_close(getattr(tc, name)[layer].detach(), want[name][layer], atol=1e-5, rtol=1e-4,
                                       msg=f"{name}[{layer}]")
    assert [r["step"] for r in hist] == [2, 4, 6, 7]
    assert seen == [(r["step"], r) for r in hist]
    for got, ref in zip(hist, rows):
        assert got["step"] == ref["step"] and got["lr"] == pytest.approx(ref["lr"], rel=1e-12)
        assert got["fvu"] == pytest.approx(ref["fvu"], abs=2e-5)
        assert got["aux"] == pytest.approx(ref["aux"], abs=2e-5)
        assert got["dead"] == pytest.approx(ref["dead"], abs=1e-4)
        assert got["seconds"] >= 0
    # the run exercised what it claims to: dead features (and so the AuxK term) and a falling learning rate
    assert max(r["dead"] for r in rows) > 0 and max(r["aux"] for r in rows) > 0
    assert [r["lr"] for r in rows] == pytest.approx([0.05, 0.05 * 3 / 3.5, 0.05 * 1 / 3.5, 0.0], rel=1e-12)
    assert not tc.training and not any(p.requires_grad for p in tc.parameters())
    assert tc.meta["train_config"] == asdict(cfg)
    assert (tc.k, tc.cross_layer, tc.n_features, tc.activation) == (2, cross, 24, "topk")


def test_the_initialisation_is_the_seeded_draw_it_describes():
    x, y = data(L=3, d=5)
    cfg = train_mod.TranscoderTrainConfig(n_features=7, k=3, cross_layer=True, seed=9)
    tc = train_mod.init_transcoder(x, y, cfg)
    g = torch.Generator().manual_seed(9)
    for layer in range(3):
        torch.testing.assert_close(tc.W_enc[layer].detach(), torch.randn(5, 7, generator=g) / math.sqrt(5))
        torch.testing.assert_close(tc.W_dec[layer].detach(), unit_rows(torch.randn(7, 3 - layer, 5, generator=g)))
        torch.testing.assert_close(tc.b_dec[layer].detach(), y[:, layer].mean(0))
        assert torch.equal(tc.b_enc[layer].detach(), torch.zeros(7))
    assert (tc.n_layer, tc.d_model, tc.n_features, tc.k, tc.cross_layer) == (3, 5, 7, 3, True)


@pytest.mark.parametrize("field", ["n_features", "k", "steps", "batch_size", "aux_k", "dead_after"])
@pytest.mark.parametrize("bad", [0, -1, True, 1.0, "4"])
def test_each_count_must_be_a_whole_number_of_at_least_one(field, bad):
    with pytest.raises(ValueError) as err:
        train_mod.TranscoderTrainConfig(**{field: bad})
    assert str(err.value) == f"{field}={bad!r} must be a whole number of at least 1"


def test_the_bounds_of_k_and_the_learning_rate():
    assert train_mod.TranscoderTrainConfig(n_features=5, k=5).k == 5  # every feature on: allowed
    with pytest.raises(ValueError) as err:
        train_mod.TranscoderTrainConfig(n_features=5, k=6)
    assert str(err.value) == "k=6 cannot be more than n_features=5"
    assert train_mod.TranscoderTrainConfig(lr=1.0).lr == 1.0
    for bad in (0.0, -1e-3, 1.5, math.nan, math.inf):
        with pytest.raises(ValueError) as err:
            train_mod.TranscoderTrainConfig(lr=bad)
        assert str(err.value) == f"lr={bad!r} must be above 0 and at most 1"
    cfg = train_mod.TranscoderTrainConfig()  # the defaults the shipped transcoders were trained with
    assert (cfg.n_features, cfg.k, cfg.cross_layer, cfg.steps, cfg.batch_size, cfg.lr, cfg.aux_k, cfg.aux_coef,
            cfg.dead_after, cfg.decay_from, cfg.seed) == (1024, 32, False, 2000, 2048, 1e-3, 256, 1 / 32, 200_000,
                                                          0.8, 0)


def test_inputs_and_outputs_of_other_shapes_are_refused():
    x, y = data()
    cfg = train_mod.TranscoderTrainConfig(n_features=4, k=1, steps=1, batch_size=2)
    for a, b in ((x, y[:, :1]), (x[:, 0], y[:, 0])):
        with pytest.raises(ValueError) as err:
            train_mod.train_transcoder(a, b, cfg)
        assert str(err.value) == (f"inputs {tuple(a.shape)} and outputs {tuple(b.shape)} must both be "
                                  "(N, n_layer, d)")


def test_collected_pairs_are_the_windows_the_seed_draws_read_by_forward_hooks():
    """``collect_mlp_pairs`` with its defaults (128-token windows, 64 a batch, seed 0) against the same windows
    drawn here and each block's norm-before-the-MLP and MLP outputs caught by plain forward hooks; one vector more
    than a batch holds, so a second batch is drawn; and a single vector."""
    from gptviz.model.checkpoint import load_checkpoint
    from gptviz.paths import CHECKPOINTS

    model = load_checkpoint(CHECKPOINTS / "shakespeare.safetensors").model.eval()
    ids = torch.randint(0, model.config.vocab_size, (400,), generator=torch.Generator().manual_seed(2))
    n = 128 * 64 + 1
    got_in, got_out = train_mod.collect_mlp_pairs(model, ids, n)
    g = torch.Generator().manual_seed(0)
    caught: dict = {}
    hooks = [m.register_forward_hook(lambda mod, args, out, key=(kind, layer): caught.__setitem__(key, out.detach()))
             for layer, block in enumerate(model.transformer.h) for kind, m in (("in", block.ln_2), ("out", block.mlp))]
    ins, outs = [], []
    try:
        for _ in range(2):
            starts = torch.randint(0, 400 - 128, (64,), generator=g).tolist()
            with torch.no_grad():
                model(torch.stack([ids[s:s + 128] for s in starts]))
            ins.append(torch.stack([caught[("in", layer)] for layer in range(4)], -2).reshape(-1, 4, 128))
            outs.append(torch.stack([caught[("out", layer)] for layer in range(4)], -2).reshape(-1, 4, 128))
    finally:
        for h in hooks:
            h.remove()
    assert got_in.shape == got_out.shape == (n, 4, 128)
    torch.testing.assert_close(got_in, torch.cat(ins)[:n])
    torch.testing.assert_close(got_out, torch.cat(outs)[:n])
    one_in, one_out = train_mod.collect_mlp_pairs(model, ids, 1, T=16, batch=2, seed=5)
    assert one_in.shape == one_out.shape == (1, 4, 128)
    with pytest.raises(ValueError) as err:
        train_mod.collect_mlp_pairs(model, ids, 0)
    assert str(err.value) == "n_tokens=0: collect at least one vector"


def test_the_aux_loss_is_a_ratio_at_any_scale_and_only_topk_is_trained():
    """Outputs a hundred times smaller (errors of squared norm far below 1): the AuxK loss is still the squared error
    of the dead features' rebuild over the error's own squared norm. A JumpReLU transcoder is refused by name."""
    x, y = data(L=1, d=6, n=20, seed=4)
    x, y = x * 0.01, y * 0.01
    cfg = train_mod.TranscoderTrainConfig(n_features=12, k=2, seed=1)
    tc = train_mod.init_transcoder(x, y, cfg)
    dead = torch.zeros(1, 12, dtype=torch.bool)
    dead[0, [1, 5, 7, 9]] = True
    _, aux, _ = train_mod.losses(tc, x, y, dead, aux_k=2)
    W, b, D, c = (t[0].detach() for t in (tc.W_enc, tc.b_enc, tc.W_dec, tc.b_dec))
    pre = x[:, 0] @ W + b
    top = pre.topk(2, dim=-1)
    feats = torch.zeros_like(pre).scatter(-1, top.indices, top.values.clamp(min=0))
    err = y[:, 0] - (feats @ D[:, 0] + c)
    assert float((err ** 2).sum(-1).mean()) < 1e-2  # where a floor of 1 in place of 1e-12 would change the ratio
    rebuilt = torch.zeros_like(err)
    for r in range(20):
        for j in sorted([1, 5, 7, 9], key=lambda j: -float(pre[r, j]))[:2]:
            rebuilt[r] += max(float(pre[r, j]), 0.0) * D[j, 0]
    want = float(((rebuilt - err) ** 2).sum(-1).mean() / (err ** 2).sum(-1).mean())
    assert float(aux.detach()) == pytest.approx(want, rel=1e-5)
    jump = Transcoder(1, 6, 12, None, False, activation="jumprelu")
    with pytest.raises(ValueError) as err_info:
        train_mod.losses(jump, x, y, None, 2)
    assert str(err_info.value) == "gptviz trains TopK transcoders; this one's rule is 'jumprelu'"


def test_the_evaluation_sums_in_float64_across_batches():
    """The held-out figures summed over three batches of windows equal one float64 computation over every vector to
    1e-10 (a float32 running sum is off by about 1e-7)."""
    from transcoder_oracles import toy_transcoder

    from gptviz.interp.transcoder import input_hook, output_hook
    from gptviz.model.checkpoint import load_checkpoint
    from gptviz.paths import CHECKPOINTS
    from gptviz.run.trace import trace

    ck = load_checkpoint(CHECKPOINTS / "shakespeare.safetensors")
    model, tok = ck.model.eval(), ck.tokenizer
    tc = toy_transcoder(model, False, F_=16, k=4, seed=6)
    ids = torch.tensor(tok.encode("Now is the winter of our discontent made glorious summer by this sun of York; "
                                  "and all the clouds that lour'd upon our house in the deep bosom of the ocean "
                                  "buried."))
    wins = torch.stack([ids[s:s + 33] for s in range(0, 50, 10)])
    fig = train_mod.evaluate_transcoder(model, tc, wins, batch=2)
    tr = trace(model, wins[:, :-1])
    for layer in range(4):
        feats = [tc.encode(s, tr[input_hook(s)].reshape(-1, 128)) for s in range(4)]
        out = tr[output_hook(layer)].reshape(-1, 128).double()
        err = (tc.decode(layer, feats).double() - out).pow(2).sum()
        assert fig["fvu"][layer] == pytest.approx(float(err / (out - out.mean(0)).pow(2).sum()), rel=1e-10)
        assert fig["l0"][layer] == pytest.approx(float((feats[layer] > 0).sum(-1).double().mean()), rel=1e-12)
    assert fig["windows"] == 5 and fig["tokens"] == 5 * 32


def test_the_history_has_a_row_every_hundred_steps_rounded_as_shown():
    """With the default ``progress_every``, rows at steps 100, 200 and the last one; the seconds to a tenth (since
    the run began), the losses to 5 decimals and the dead share to 4."""
    import time

    x, y = data(L=1, d=3, n=16)
    cfg = train_mod.TranscoderTrainConfig(n_features=7, k=1, steps=201, batch_size=4, lr=0.01, dead_after=8)
    t0 = time.perf_counter()
    _, hist = train_mod.train_transcoder(x, y, cfg)
    elapsed = time.perf_counter() - t0
    assert [r["step"] for r in hist] == [100, 200, 201]
    for r in hist:
        assert isinstance(r["seconds"], float) and r["seconds"] == round(r["seconds"], 1)
        assert 0.0 <= r["seconds"] <= elapsed + 0.05
        for key, places in (("fvu", 5), ("aux", 5), ("dead", 4)):
            assert r[key] == round(r[key], places), (key, r)
    assert any(0 < r["dead"] < 1 for r in hist)  # sevenths: more decimals than 4 before rounding


def test_pairs_are_refused_by_name_for_a_model_without_mlps():
    from gptviz import GPT, ModelConfig

    model = GPT(ModelConfig(vocab_size=11, block_size=8, n_layer=2, n_head=2, n_embd=4, attn_only=True))
    with pytest.raises(ValueError) as err:
        train_mod.mlp_pairs(model, torch.tensor([[1, 2, 3]]))
    assert str(err.value) == ("this model has no step 'blocks.0.ln2.hook_out': a transcoder needs an MLP after a norm "
                              "in every layer")
