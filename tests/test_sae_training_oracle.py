"""gptviz.training.sae against oracles written out here in plain torch on tiny models and tiny SAEs: the hook's
tensor read by a forward hook on the model's own module (not gptviz's recorder), the windows and the random draws
of ``collect`` by hand, the held-out figures (FVU over every vector from one global mean, L0, dead share, the
losses with the reconstruction spliced in by a forward hook), and a whole training run re-done step by step (the
seeded init, the batch draws, TopK of ReLU decoded densely, the AuxK loss on the dead features, Adam, the
learning-rate decay, the unit decoder rows, the dead counters, the history rows). Edge cases: a layer other than
0, more than one loop, batch and chunk boundaries, windows of unequal batches, limits exactly at the edge and one
past it, and the messages a user reads."""
import math

import pytest
import torch
import torch.nn.functional as F

import gptviz.training.sae as sae_training
from gptviz import GPT, ModelConfig
from gptviz.interp.sae import SparseAutoencoder
from gptviz.training.sae import (
    SAETrainConfig,
    collect,
    evaluate,
    held_out_resid,
    init_sae,
    losses,
    resid,
    top_snippets,
    train_sae,
    windows,
)

CFG = ModelConfig(vocab_size=17, block_size=8, n_layer=2, n_head=2, n_embd=8)
HOOK = "blocks.1.hook_resid_pre"


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return GPT(CFG).eval()


@pytest.fixture
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@torch.no_grad()
def hooked(model, x, layer=1):
    """The input of block ``layer`` read with a plain forward hook on its ``hook_resid_pre`` module."""
    got = []
    h = model.transformer.h[layer].hook_resid_pre.register_forward_hook(lambda m, i, o: got.append(o.detach()))
    try:
        model(x)
    finally:
        h.remove()
    return got[0]


def random_sae(d, n_feat, k, seed, bias=0.0):
    g = torch.Generator().manual_seed(seed)
    sae = SparseAutoencoder(d, n_feat, HOOK, "topk", k)
    with torch.no_grad():
        sae.W_enc.copy_(torch.randn(d, n_feat, generator=g))
        sae.b_enc.copy_(torch.randn(n_feat, generator=g) * 0.5 + bias)
        sae.W_dec.copy_(torch.randn(n_feat, d, generator=g))
        sae.b_dec.copy_(torch.randn(d, generator=g) * 0.1)
    return sae


def hand_encode(W_enc, b_enc, b_dec, x, k):
    """TopK of ReLU: the k largest pre-activations, negatives made 0, every other feature 0."""
    pre = (x - b_dec) @ W_enc + b_enc
    top = pre.topk(k, dim=-1)
    return torch.zeros_like(pre).scatter(-1, top.indices, torch.relu(top.values)), pre


# --------------------------------------------------------------------------- reading the hook
def test_resid_is_the_blocks_input_read_by_a_forward_hook_on_every_row_and_an_unknown_step_is_named(model):
    x = torch.randint(0, 17, (3, 8), generator=torch.Generator().manual_seed(1))
    assert torch.equal(resid(model, x, HOOK), hooked(model, x))
    assert torch.equal(resid(model, x, "blocks.0.hook_resid_pre"), hooked(model, x, 0))
    with pytest.raises(ValueError, match=r"this model has no step 'blocks\.9\.hook_resid_pre'"):
        resid(model, x, "blocks.9.hook_resid_pre")


@pytest.mark.parametrize("n, T, want", [(23, 5, 4), (21, 5, 4), (20, 5, 3), (6, 5, 1)])
def test_windows_are_non_overlapping_slices_with_the_next_token_and_the_tail_dropped(n, T, want):
    """Window i is ids[i T : i T + T + 1]; there are (n - 1) // T of them: 21 ids make 4 windows of 5 (the last
    target is the last id), 20 ids only 3."""
    ids = torch.arange(100, 100 + n)
    w = windows(ids, T)
    assert w.shape == (want, T + 1)
    for i in range(want):
        assert w[i].tolist() == list(range(100 + i * T, 100 + i * T + T + 1))


def test_collect_reads_the_seeded_random_windows_over_several_draws_and_cuts_to_n_tokens(model):
    """Oracle: a generator seeded with ``seed``; each draw takes ``batch`` starts in [0, len - T), the windows
    ids[s : s + T], the hook's vectors of every position (forward hook), until n_tokens are there; then the first
    n_tokens. 30 tokens from draws of 3 windows of 4 (12 vectors) take three draws."""
    ids = torch.randint(0, 17, (40,), generator=torch.Generator().manual_seed(2))
    got = collect(model, ids, HOOK, n_tokens=30, T=4, batch=3, seed=5)
    g = torch.Generator().manual_seed(5)
    parts = []
    for _ in range(3):
        starts = torch.randint(0, 40 - 4, (3,), generator=g)
        x = torch.stack([ids[s:s + 4] for s in starts.tolist()])
        parts.append(hooked(model, x).reshape(-1, 8))
    want = torch.cat(parts)[:30]
    assert got.shape == (30, 8)
    assert torch.allclose(got, want, atol=1e-6)
    assert not torch.allclose(collect(model, ids, HOOK, n_tokens=30, T=4, batch=3, seed=6), want)  # the seed counts
    assert collect(model, ids, HOOK, n_tokens=12, T=4, batch=3, seed=5).shape == (12, 8)  # one draw exactly


def test_held_out_resid_over_several_batches_is_the_hook_over_all_windows_at_once(model):
    wins = torch.randint(0, 17, (5, 9), generator=torch.Generator().manual_seed(3))
    got = held_out_resid(model, wins, HOOK, batch=2)
    assert got.shape == (5, 8, 8)
    assert torch.allclose(got, hooked(model, wins[:, :-1]), atol=1e-6)


# --------------------------------------------------------------------------- held-out figures
def test_evaluate_gives_the_hand_computed_fvu_l0_dead_share_and_losses_over_chunks_and_unequal_batches(model):
    """FVU = the reconstruction's squared error summed over all vectors / their summed squared distance from the
    mean of ALL of them (9000 vectors: more than one of evaluate's 8192-vector chunks); L0 = mean active features;
    dead = share of features active on no vector; the losses: mean cross-entropy over every target token of
    5 windows read in batches of 2, 2, 1 (each batch weighted by its tokens), clean and with the hook's output
    replaced by the hand reconstruction through a forward hook."""
    g = torch.Generator().manual_seed(4)
    sae = random_sae(8, 24, 3, seed=5, bias=-2.0)
    resid_all = torch.randn(1125, 8, 8, generator=g) * 0.6 + torch.linspace(-1, 1, 8)  # a mean far from 0
    wins = torch.randint(0, 17, (5, 9), generator=g)
    out = evaluate(model, sae, wins, resid_all, batch=2)

    W_enc, b_enc, W_dec, b_dec = (p.detach().double() for p in (sae.W_enc, sae.b_enc, sae.W_dec, sae.b_dec))
    X = resid_all.reshape(-1, 8).double()
    f, _ = hand_encode(W_enc, b_enc, b_dec, X, 3)
    fvu = float(((f @ W_dec + b_dec - X) ** 2).sum() / ((X - X.mean(0)) ** 2).sum())
    fired = (f > 0).any(0)
    assert 0 < int(fired.sum()) < 24  # some features are dead, some not
    assert math.isclose(out["fvu"], fvu, rel_tol=1e-5)
    assert math.isclose(out["l0"], float((f > 0).sum()) / X.shape[0], rel_tol=1e-6)
    assert 0 < out["l0"] < 3  # some vectors have fewer than k positive pre-activations
    assert math.isclose(out["dead_fraction"], float((~fired).sum()) / 24, rel_tol=1e-6)

    x, y = wins[:, :-1], wins[:, 1:]
    with torch.no_grad():
        clean = F.cross_entropy(model(x)[0].reshape(-1, 17), y.reshape(-1))

        def splice(m, i, o):
            fo, _ = hand_encode(sae.W_enc, sae.b_enc, sae.b_dec, o, 3)
            return fo @ sae.W_dec + sae.b_dec

        h = model.transformer.h[1].hook_resid_pre.register_forward_hook(splice)
        try:
            spliced = F.cross_entropy(model(x)[0].reshape(-1, 17), y.reshape(-1))
        finally:
            h.remove()
    assert math.isclose(out["loss_per_token"], float(clean), rel_tol=1e-5)
    assert math.isclose(out["spliced_loss_per_token"], float(spliced), rel_tol=1e-5)
    assert abs(out["spliced_loss_per_token"] - out["loss_per_token"]) > 1e-3
    assert out["tokens"] == 40 and out["windows"] == 5


def test_evaluate_without_the_residuals_reads_them_itself(model):
    wins = torch.randint(0, 17, (3, 9), generator=torch.Generator().manual_seed(6))
    sae = random_sae(8, 12, 2, seed=7)
    got = evaluate(model, sae, wins, batch=2)
    want = evaluate(model, sae, wins, hooked(model, wins[:, :-1]), batch=3)
    for key in ("fvu", "l0", "dead_fraction", "loss_per_token", "spliced_loss_per_token"):
        assert math.isclose(got[key], want[key], rel_tol=1e-5), key


# --------------------------------------------------------------------------- the configuration
@pytest.mark.parametrize("field", ["n_features", "k", "steps", "batch_size", "aux_k", "dead_after"])
@pytest.mark.parametrize("value", [0, -1, 2.0, True])
def test_a_count_that_is_not_a_whole_number_of_at_least_1_is_refused_by_name(field, value):
    kw = {"n_features": 8, "k": 2, field: value}
    with pytest.raises(ValueError, match=rf"^{field}={value!r} must be a whole number of at least 1$"):
        SAETrainConfig(**kw)


def test_the_configuration_limits_hold_exactly_at_the_edge_and_refuse_one_past_it():
    SAETrainConfig(n_features=4, k=4, steps=1, batch_size=1, aux_k=1, dead_after=1, lr=1.0)  # every limit at 1 / k = F
    with pytest.raises(ValueError, match=r"^k=5 cannot be more than n_features=4$"):
        SAETrainConfig(n_features=4, k=5)
    for lr in (0.0, -1e-3, 1.0001, float("inf"), float("nan")):
        with pytest.raises(ValueError, match=r"must be above 0 and at most 1$"):
            SAETrainConfig(n_features=4, k=2, lr=lr)
    assert SAETrainConfig(n_features=4, k=2, lr=1e-12).lr == 1e-12


# --------------------------------------------------------------------------- init and losses
def test_init_sae_is_the_seeded_unit_rows_their_transpose_and_the_data_mean():
    data = torch.randn(50, 5, generator=torch.Generator().manual_seed(8)) + 2
    cfg = SAETrainConfig(n_features=7, k=3, seed=11)
    sae = init_sae(data, "blocks.0.hook_resid_post", cfg)
    W = torch.randn(7, 5, generator=torch.Generator().manual_seed(11))
    W = W / W.norm(dim=1, keepdim=True)
    assert (sae.d_model, sae.n_features, sae.k, sae.kind, sae.hook) == (5, 7, 3, "topk", "blocks.0.hook_resid_post")
    assert torch.allclose(sae.W_dec.detach(), W, atol=1e-6)
    assert torch.allclose(sae.W_enc.detach(), W.T, atol=1e-6)
    assert torch.equal(sae.b_enc.detach(), torch.zeros(7))
    assert torch.allclose(sae.b_dec.detach(), data.mean(0), atol=1e-6)


def aux_by_hand(sae, x, dead, aux_k):
    """The live TopK reconstruction's error, reconstructed (without b_dec) by the min(aux_k, #dead) largest
    pre-activations among the dead features, relu'd; squared error over the error's squared norm."""
    W_enc, b_enc, W_dec, b_dec = (p.detach() for p in (sae.W_enc, sae.b_enc, sae.W_dec, sae.b_dec))
    f, pre = hand_encode(W_enc, b_enc, b_dec, x, sae.k)
    err = x - (f @ W_dec + b_dec)
    d_idx = dead.nonzero().flatten()
    n = min(aux_k, len(d_idx))
    top = pre[:, d_idx].topk(n, dim=-1)
    fa = torch.zeros_like(pre)
    fa.scatter_(-1, d_idx[top.indices], torch.relu(top.values))
    e_hat = fa @ W_dec
    return ((e_hat - err) ** 2).sum(-1).mean() / (err ** 2).sum(-1).mean()


@pytest.mark.parametrize("aux_k", [1, 2, 3, 50])
def test_the_aux_loss_uses_the_aux_k_strongest_dead_features_or_all_of_them_when_fewer(aux_k):
    """3 dead features out of 16 (0, 7 and 15): aux_k 1 and 2 take that many, 3 and 50 all three."""
    sae = random_sae(6, 16, 3, seed=9)
    x = torch.randn(30, 6, generator=torch.Generator().manual_seed(10))
    dead = torch.zeros(16, dtype=torch.bool)
    dead[[0, 7, 15]] = True
    _, aux, _ = losses(sae, x, dead, aux_k)
    assert torch.allclose(aux.detach(), aux_by_hand(sae, x, dead, aux_k), rtol=1e-5)
    assert aux.dtype == x.dtype


def test_a_perfect_reconstruction_keeps_the_aux_loss_finite():
    """x exactly on the decoder's row plus b_dec: the live error is 0, and the aux loss divides by at least 1e-12
    (so it is the dead features' squared reconstruction over 1e-12, not inf or nan)."""
    sae = SparseAutoencoder(2, 3, HOOK, "topk", 1)
    with torch.no_grad():
        sae.W_enc.copy_(torch.tensor([[1.0, 0.0, 0.5], [0.0, 0.0, 0.5]]))
        sae.W_dec.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]]))
    x = torch.tensor([[2.0, 0.0], [3.0, 0.0]])
    dead = torch.tensor([False, False, True])
    mse, aux, f = losses(sae, x, dead, 4)
    assert float(mse.detach()) == 0.0 and torch.equal(f, torch.tensor([[2.0, 0, 0], [3.0, 0, 0]]))
    assert float(aux.detach()) == 0.0  # the dead row decodes to 0: (0 - 0)^2 / 1e-12
    with torch.no_grad():
        sae.W_dec[2] = torch.tensor([1.0, 0.0])
    _, aux, _ = losses(sae, x, dead, 4)
    want = ((1.0 ** 2 + 1.5 ** 2) / 2) / 1e-12  # pre of feature 2: 1.0 and 1.5
    assert math.isclose(float(aux.detach()), want, rel_tol=1e-5)


# --------------------------------------------------------------------------- the training loop, re-done by hand
def train_by_hand(acts, cfg, progress_every):
    """The whole run in plain torch: init (seed), batches drawn by a generator seeded seed + 1, TopK of ReLU
    decoded densely, FVU + aux_coef * AuxK, Adam(0.9, 0.999) at lr * min(1, (1 - step/steps) / (1 - decay_from))
    after decay_from of the steps, the decoder rows renormalised after each step, a feature dead once it has not
    fired for dead_after vectors; a history row every progress_every steps and at the last."""
    g0 = torch.Generator().manual_seed(cfg.seed)
    d, n_feat, N = acts.shape[1], cfg.n_features, acts.shape[0]
    W_dec = torch.randn(n_feat, d, generator=g0)
    W_dec = W_dec / W_dec.norm(dim=1, keepdim=True)
    params = [W_dec.T.clone().requires_grad_(), torch.zeros(n_feat, requires_grad=True), W_dec.requires_grad_(),
              acts.mean(0).clone().requires_grad_()]
    W_enc, b_enc, W_dec, b_dec = params
    opt = torch.optim.Adam(params, lr=cfg.lr, betas=(0.9, 0.999))
    g = torch.Generator().manual_seed(cfg.seed + 1)
    since = [0] * n_feat
    hist = []
    for step in range(1, cfg.steps + 1):
        frac = step / cfg.steps
        lr = cfg.lr if frac <= cfg.decay_from else cfg.lr * max(0.0, (1 - frac) / (1 - cfg.decay_from))
        for group in opt.param_groups:
            group["lr"] = lr
        x = acts[torch.randint(0, N, (cfg.batch_size,), generator=g)]
        dead = torch.tensor([s >= cfg.dead_after for s in since])
        f, pre = hand_encode(W_enc, b_enc, b_dec, x, cfg.k)
        x_hat = f @ W_dec + b_dec
        mse = ((x_hat - x) ** 2).sum(-1).mean() / ((x - x.mean(0)) ** 2).sum(-1).mean()
        aux = torch.zeros(())
        if dead.any():
            d_idx = dead.nonzero().flatten()
            top = pre[:, d_idx].topk(min(cfg.aux_k, len(d_idx)), dim=-1)
            fa = torch.zeros_like(pre).scatter(-1, d_idx[top.indices], torch.relu(top.values))
            err = (x - x_hat).detach()
            aux = ((fa @ W_dec - err) ** 2).sum(-1).mean() / (err ** 2).sum(-1).mean()
        opt.zero_grad()
        (mse + cfg.aux_coef * aux).backward()
        opt.step()
        with torch.no_grad():
            W_dec /= W_dec.norm(dim=1, keepdim=True)
        fired = (f > 0).any(0).tolist()
        since = [0 if fi else s + cfg.batch_size for fi, s in zip(fired, since)]
        if step % progress_every == 0 or step == cfg.steps:
            hist.append({"step": step, "fvu": float(mse.detach()), "aux": float(aux.detach()),
                         "dead": float(dead.float().mean()), "lr": lr})
    return [p.detach() for p in params], hist


@pytest.mark.parametrize("aux_k, decay_from", [(2, 0.6), (64, 0.5)])
def test_train_sae_matches_a_training_loop_written_out_by_hand(one_thread, aux_k, decay_from):
    """10 steps on 12 features, k = 2, 5 dimensions; features that miss one batch of 24 are dead (dead_after = 24),
    so the AuxK loss is on from step 2; the learning rate decays over the last steps. Weights, the history rows
    (rounded as documented), the progress callback and the finished SAE (eval mode, no gradients, the config in
    its metadata) against the hand loop."""
    g = torch.Generator().manual_seed(12)
    acts = torch.randn(200, 5, generator=g) * torch.tensor([2.0, 1.0, 0.5, 1.5, 1.0]) + 0.5
    cfg = SAETrainConfig(n_features=12, k=2, steps=10, batch_size=24, lr=2e-2, aux_k=aux_k, aux_coef=0.5,
                         dead_after=24, decay_from=decay_from, seed=3)
    seen = []
    sae, hist = train_sae(acts, "blocks.0.hook_resid_mid", cfg, on_progress=lambda s, row: seen.append((s, row)),
                          progress_every=3)
    (W_enc, b_enc, W_dec, b_dec), want = train_by_hand(acts, cfg, 3)
    assert torch.allclose(sae.W_enc, W_enc, atol=2e-4) and torch.allclose(sae.b_enc, b_enc, atol=2e-4)
    assert torch.allclose(sae.W_dec, W_dec, atol=2e-4) and torch.allclose(sae.b_dec, b_dec, atol=2e-4)
    assert [h["step"] for h in hist] == [3, 6, 9, 10]
    assert any(h["dead"] > 0 for h in want) and any(h["aux"] > 0 for h in want)
    for got, w in zip(hist, want):
        assert set(got) == {"step", "seconds", "fvu", "aux", "dead", "lr"}
        assert got["step"] == w["step"] and got["lr"] == pytest.approx(w["lr"], rel=1e-12)
        assert got["fvu"] == pytest.approx(w["fvu"], abs=2e-5) and got["fvu"] == round(got["fvu"], 5)
        assert got["aux"] == pytest.approx(w["aux"], abs=2e-5) and got["aux"] == round(got["aux"], 5)
        assert got["dead"] == round(w["dead"], 4)
        assert 0 <= got["seconds"] < 60
    assert [h["lr"] for h in hist][-1] == 0.0 and hist[0]["lr"] == 2e-2
    assert seen == [(h["step"], h) for h in hist]
    assert not sae.training and not any(p.requires_grad for p in sae.parameters())
    assert sae.meta["train_config"] == {**cfg.__dict__}
    assert sae.hook == "blocks.0.hook_resid_mid" and sae.k == 2


class Clock:
    """A stand-in for ``time.perf_counter``: 100.0 at the start, then 1.2345 s more at each reading."""

    def __init__(self):
        self.t = 100.0 - 1.2345

    def perf_counter(self):
        self.t += 1.2345
        return self.t


def test_the_history_counts_seconds_to_a_tenth_and_without_a_callback_has_a_row_every_progress_every_steps(
        one_thread, monkeypatch):
    """The clock read once at the start and once per history row: rows at 1.2345 s and 2.469 s after it, shown
    as 1.2 and 2.5. Without progress_every the rows are every 100 steps and the last (101 steps: 100 and 101)."""
    monkeypatch.setattr(sae_training, "time", Clock())
    acts = torch.randn(40, 3, generator=torch.Generator().manual_seed(13))
    cfg = SAETrainConfig(n_features=4, k=1, steps=4, batch_size=8, lr=1e-2)
    _, hist = train_sae(acts, HOOK, cfg, progress_every=2)
    assert [h["step"] for h in hist] == [2, 4] and [h["lr"] for h in hist] == [1e-2, 0.0]
    assert [h["seconds"] for h in hist] == [1.2, 2.5]
    _, hist = train_sae(acts[:4, :2], HOOK, SAETrainConfig(n_features=2, k=1, steps=101, batch_size=1, lr=1e-2))
    assert [h["step"] for h in hist] == [100, 101]


def test_the_aux_loss_without_dead_features_is_a_zero_of_the_datas_dtype():
    sae = random_sae(4, 6, 2, seed=14)
    x = torch.randn(5, 4, generator=torch.Generator().manual_seed(15), dtype=torch.float64)
    for dead in (None, torch.zeros(6, dtype=torch.bool)):
        _, aux, _ = losses(sae, x, dead, 3)
        assert aux.dtype == torch.float64 and float(aux) == 0.0


def test_the_readers_build_no_autograd_graph(model):
    """``resid``, ``collect``, ``held_out_resid``, ``evaluate`` and ``top_snippets`` run under ``torch.no_grad()``
    (a block in their body): with gradients on and weights that require them, autograd saves no tensor for a
    backward pass while they run (``saved_tensors_hooks`` sees every tensor it would save), and nothing they return
    carries a graph."""
    torch.manual_seed(3)
    m = GPT(CFG).eval()
    sae = random_sae(CFG.n_embd, 6, 2, seed=1)
    assert all(p.requires_grad for p in [*m.parameters(), *sae.parameters()]) and torch.is_grad_enabled()
    ids = torch.randint(0, CFG.vocab_size, (200,))
    wins = windows(ids, 6)
    resid_all = hooked(m, wins[:3, :-1])
    calls = {
        "resid": lambda: resid(m, wins[:2, :-1], HOOK),
        "collect": lambda: collect(m, ids, HOOK, 12, T=6, batch=2),
        "held_out_resid": lambda: held_out_resid(m, wins[:3], HOOK, batch=2),
        "evaluate": lambda: evaluate(m, sae, wins[:3], batch=2),
        "top_snippets": lambda: top_snippets(sae, wins[:3], resid_all, n_top=2, width=4, after=1),
    }
    for name, call in calls.items():
        saved = []
        with torch.autograd.graph.saved_tensors_hooks(lambda t, s=saved: s.append(t.shape) or t,
                                                      lambda t: t):
            out = call()
        assert saved == [], (name, len(saved))
        tensors = [out] if isinstance(out, torch.Tensor) else [v for v in out.values() if isinstance(v, torch.Tensor)]
        assert all(t.grad_fn is None for t in tensors), name


def test_collect_stops_at_exactly_n_tokens_counted_in_rows_and_refuses_none(model):
    """Rows are counted as vectors (batch · T per draw, not n_embd): 32 vectors of 4-token windows drawn one at a
    time are 8 draws, each window's vectors those of a plain forward hook; one vector is one row; zero is refused."""
    torch.manual_seed(5)
    ids = torch.randint(0, CFG.vocab_size, (60,))
    got = collect(model, ids, HOOK, 32, T=4, batch=1, seed=2)
    g = torch.Generator().manual_seed(2)
    want = torch.cat([hooked(model, ids[s:s + 4][None])[0]
                      for s in (int(torch.randint(0, 56, (1,), generator=g)) for _ in range(8))])
    assert got.shape == (32, CFG.n_embd) and torch.allclose(got, want, atol=1e-6)
    assert collect(model, ids, HOOK, 1, T=4, batch=1).shape == (1, CFG.n_embd)
    with pytest.raises(ValueError, match="at least one"):
        collect(model, ids, HOOK, 0, T=4)


def test_held_out_resid_reads_every_window_when_there_are_more_windows_than_positions(model):
    torch.manual_seed(6)
    wins = windows(torch.randint(0, CFG.vocab_size, (70,)), 5)  # 11 windows of 6 tokens
    got = held_out_resid(model, wins, HOOK, batch=2)
    assert got.shape == (wins.shape[0], 5, CFG.n_embd)
    assert torch.allclose(got, hooked(model, wins[:, :-1]), atol=1e-6)


def snippets_by_hand(sae, wins, resid_all, n_top, width, after):
    """Each feature's n_top windows with the largest peaks (live: peak > 0), the span around each peak as the
    docstring gives it: it ends `after` tokens past the peak (at least `width` in, at most T), `width` long."""
    n, T, _ = resid_all.shape
    f = torch.stack([sae.encode(resid_all[w]) for w in range(n)])  # (n, T, F)
    F = f.shape[-1]
    ids = torch.full((F, n_top, width), -1, dtype=torch.int32)
    acts = torch.zeros((F, n_top, width), dtype=torch.float16)
    for fi in range(F):
        peaks = [(float(f[w, :, fi].max()), w) for w in range(n) if not torch.isnan(f[w, :, fi]).any()]
        for j, (v, w) in enumerate(sorted(peaks, reverse=True)[:n_top]):
            if v <= 0:
                continue
            p = int(f[w, :, fi].argmax())
            end = min(T, max(p + 1 + after, width))
            start = max(0, end - width)
            ids[fi, j, :end - start] = wins[w, start:end].to(torch.int32)
            acts[fi, j, :end - start] = f[w, start:end, fi].half()
    return ids, acts


def test_top_snippets_by_default_keeps_8_spans_of_24_tokens_4_past_the_peak_in_int32_and_float16(monkeypatch):
    """The defaults the training command relies on (8 snippets, 24 tokens, 4 after the peak), the saved dtypes
    (ids and where int32, acts float16), over two chunks of windows, the first longer than a window (33 > T = 32)."""
    monkeypatch.setattr(sae_training, "SNIPPET_CHUNK", 33)
    g = torch.Generator().manual_seed(7)
    n, T, d = 40, 32, 8
    sae = random_sae(d, 5, 2, seed=8)
    resid_all = torch.randn(n, T, d, generator=g)
    wins = torch.randint(0, 50, (n, T + 1), generator=g)
    out = sae_training.top_snippets(sae, wins, resid_all)
    want_ids, want_acts = snippets_by_hand(sae, wins, resid_all, 8, 24, 4)
    assert out["ids"].dtype == torch.int32 and out["where"].dtype == torch.int32
    assert out["acts"].dtype == torch.float16
    assert out["ids"].shape == (5, 8, 24)
    assert torch.equal(out["ids"], want_ids)
    assert torch.allclose(out["acts"].float(), want_acts.float(), atol=1e-3)


def test_a_window_of_nans_does_not_cost_a_feature_its_other_snippets():
    """torch's topk ranks NaN first: a window whose vectors are NaN takes a feature's first slot, not live; the
    live slots after it still get their spans (the loop skips a slot, it does not stop)."""
    g = torch.Generator().manual_seed(9)
    n, T, d = 12, 8, 8
    sae = random_sae(d, 4, 2, seed=10)
    resid_all = torch.randn(n, T, d, generator=g)
    resid_all[3] = float("nan")
    wins = torch.randint(0, 50, (n, T + 1), generator=g)
    out = sae_training.top_snippets(sae, wins, resid_all, n_top=3, width=4, after=1)
    live = out["peak"] > 0
    assert live[:, 1:].any()
    for fi, j in live.nonzero().tolist():
        assert (out["ids"][fi, j] >= 0).all(), (fi, j)  # a whole span of real tokens (T = 8 >= width)
