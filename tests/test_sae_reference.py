"""The SAE's pieces against oracles written out here in plain torch, on small hand-made SAEs where the hard cases
happen for sure: pre-activations that are negative inside the top k, a decoder that is not square, top snippets
over a corpus read in more than one chunk, and features that are dead (never in the top k) for the AuxK loss."""
import pytest
import torch

import gptviz.training.sae as sae_training
from gptviz.interp.sae import SparseAutoencoder
from gptviz.training.sae import SAETrainConfig, init_sae, losses, top_snippets, train_sae

HOOK = "blocks.0.hook_resid_pre"


@pytest.fixture
def one_thread():
    """Training on one thread (its numbers do not depend on how a matmul is split), the worker's count restored."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def random_sae(d, F, k, seed, bias=0.0):
    """An SAE with random weights; ``bias`` shifts every encoder bias (negative: fewer features above zero)."""
    g = torch.Generator().manual_seed(seed)
    sae = SparseAutoencoder(d, F, HOOK, "topk", k)
    with torch.no_grad():
        sae.W_enc.copy_(torch.randn(d, F, generator=g))
        sae.b_enc.copy_(torch.randn(F, generator=g) * 0.5 + bias)
        sae.W_dec.copy_(torch.randn(F, d, generator=g))
        sae.b_dec.copy_(torch.randn(d, generator=g) * 0.1)
    return sae


def hand_features(sae, x, k):
    """TopK of ReLU: the k largest of relu(pre), every other feature 0 (pre from the raw weights)."""
    pre = (x - sae.b_dec.detach()) @ sae.W_enc.detach() + sae.b_enc.detach()
    r = torch.relu(pre)
    top = r.topk(k, dim=-1)
    return torch.zeros_like(r).scatter(-1, top.indices, top.values), pre


# --------------------------------------------------------------------------- TopK keeps no negative value
def test_topk_encode_zeroes_pre_activations_that_are_negative_inside_the_top_k():
    """With encoder biases far below zero most vectors have fewer than k positive pre-activations, so the k largest
    include negative ones: those must come out as 0, exactly as top-k of relu(pre) computed by hand."""
    torch.manual_seed(0)
    sae = random_sae(6, 20, 5, seed=1, bias=-3.0)
    x = torch.randn(3, 7, 6)  # a batch of sequences: rows other than 0 too
    want, pre = hand_features(sae, x, 5)
    raw_top = pre.topk(5, dim=-1).values
    assert bool((raw_top < 0).any()) and bool((raw_top > 0).any())  # the case that matters does happen
    got = sae.encode(x)
    assert torch.equal(got, want)
    assert float(got.detach().min()) == 0.0
    assert torch.equal((got > 0).sum(-1), (raw_top > 0).sum(-1))


def test_the_training_loss_uses_top_k_of_relu_and_its_fvu_is_the_hand_computed_one():
    """``losses`` (the training step's own TopK, not ``encode``): its features and its batch FVU against
    top-k of relu(pre), decoded as f @ W_dec + b_dec, over the batch's summed squared distance from its mean."""
    sae = random_sae(6, 20, 5, seed=2, bias=-3.0)
    x = torch.randn(40, 6, generator=torch.Generator().manual_seed(3)) * 2
    want_f, pre = hand_features(sae, x, 5)
    assert bool((pre.topk(5, dim=-1).values < 0).any())
    mse, aux, f = losses(sae, x, None, aux_k=4)
    assert torch.allclose(f.detach(), want_f, atol=1e-6)
    x_hat = want_f @ sae.W_dec.detach() + sae.b_dec.detach()
    fvu = ((x_hat - x) ** 2).sum() / ((x - x.mean(0)) ** 2).sum()
    assert torch.allclose(mse.detach(), fvu, rtol=1e-5)
    assert float(aux) == 0.0  # no dead features, no auxiliary loss
    _, aux_none_dead, _ = losses(sae, x, torch.zeros(20, dtype=torch.bool), aux_k=4)
    assert float(aux_none_dead) == 0.0


# --------------------------------------------------------------------------- unit decoder rows (one per feature)
def test_normalise_decoder_gives_every_feature_row_unit_norm_on_a_non_square_decoder():
    """W_dec is (n_features, d_model): each row, a feature's direction, is divided by its own norm."""
    sae = random_sae(5, 12, 3, seed=4)
    W = sae.W_dec.detach().clone()
    sae.normalise_decoder()
    want = W / torch.sqrt((W ** 2).sum(1, keepdim=True))
    assert torch.allclose(sae.W_dec.detach(), want, atol=1e-6)
    assert torch.allclose(sae.direction(7), want[7], atol=1e-6)


def test_a_trained_sae_has_unit_decoder_rows_and_starts_from_them(one_thread):
    """``init_sae`` starts from unit rows with the encoder their transpose; after training (Adam moves the rows
    off the sphere every step) every row is back at unit norm. 12 features in 5 dimensions: the columns cannot
    all have unit norm as well (their squared norms sum to 12)."""
    g = torch.Generator().manual_seed(5)
    data = torch.randn(512, 5, generator=g) * torch.tensor([3.0, 1.0, 0.5, 2.0, 1.0]) + 1.0
    cfg = SAETrainConfig(n_features=12, k=3, steps=30, batch_size=128, lr=1e-2, dead_after=10_000)
    start = init_sae(data, HOOK, cfg)
    rows = torch.sqrt((start.W_dec.detach() ** 2).sum(1))
    assert torch.allclose(rows, torch.ones(12), atol=1e-5)
    assert torch.equal(start.W_enc.detach(), start.W_dec.detach().T)
    assert torch.allclose(start.b_dec.detach(), data.mean(0), atol=1e-6)
    sae, _ = train_sae(data, HOOK, cfg, progress_every=10)
    assert not torch.allclose(sae.W_dec, start.W_dec, atol=1e-3)  # it did train
    rows = torch.sqrt((sae.W_dec ** 2).sum(1))
    assert torch.allclose(rows, torch.ones(12), atol=1e-5), rows


# --------------------------------------------------------------------------- top snippets over several chunks
@pytest.mark.parametrize("chunk", [1, 3, 32])
@pytest.mark.parametrize("width", [5, 16])
def test_top_snippets_point_at_the_right_window_of_the_corpus_in_every_chunk(monkeypatch, chunk, width):
    """10 windows of 12 tokens cut from one token stream (window j = stream[12 j : 12 j + 13]), encoded ``chunk``
    windows at a time. Oracle: every window's peak per feature from top-k of relu(pre) by hand, the windows ranked
    by it, and each snippet read straight from the stream at the absolute offset 12 w + s, where the span start
    s = clamp(p + after + 1 - width, 0, T - min(width, T)); a width over T is the whole window padded with -1."""
    monkeypatch.setattr(sae_training, "SNIPPET_CHUNK", chunk)
    n, T, d, F, k, n_top, after = 10, 12, 6, 16, 3, 4, 2
    g = torch.Generator().manual_seed(6)
    sae = random_sae(d, F, k, seed=7, bias=-0.5)
    stream = torch.randint(0, 1000, (n * T + 1,), generator=g)
    wins = torch.stack([stream[j * T:(j + 1) * T + 1] for j in range(n)])
    resid_all = torch.randn(n, T, d, generator=g)
    out = top_snippets(sae, wins, resid_all, n_top=n_top, width=width, after=after)

    f, _ = hand_features(sae, resid_all, k)  # (n, T, F)
    L = min(width, T)
    few = many = 0
    for fi in range(F):
        peaks = [(float(f[w, :, fi].max()), w, int(f[w, :, fi].argmax())) for w in range(n)]
        ranked = sorted([p for p in peaks if p[0] > 0], reverse=True)[:n_top]
        few += len(ranked) < n_top
        many += any(w >= 3 for _, w, _ in ranked)
        for j in range(n_top):
            if j >= len(ranked):
                assert out["where"][fi, j].tolist() == [-1, -1] and float(out["peak"][fi, j]) == 0.0
                assert bool((out["ids"][fi, j] == -1).all()) and bool((out["acts"][fi, j] == 0).all())
                continue
            v, w, p = ranked[j]
            assert out["where"][fi, j].tolist() == [w, p], (fi, j)
            assert abs(float(out["peak"][fi, j]) - v) < 1e-5
            s = min(max(p + after + 1 - width, 0), T - L)
            assert s <= p < s + L and (p + after >= s + L - 1 or s == 0)  # the peak inside, `after` after it
            assert out["ids"][fi, j, :L].tolist() == stream[w * T + s:w * T + s + L].tolist()
            assert bool((out["ids"][fi, j, L:] == -1).all())
            assert torch.allclose(out["acts"][fi, j, :L].float(), f[w, s:s + L, fi], atol=1e-2, rtol=1e-3)
    assert few > 0 and many > 0  # features with empty slots, and snippets from windows past the first chunk
    assert torch.allclose(out["density"], (f > 0).float().mean((0, 1)), atol=1e-6)


# --------------------------------------------------------------------------- the AuxK loss trains the dead features
def dead_feature_sae():
    """6 live features that see one coordinate each (x in [1, 2]^6, so their pre-activations are 4 to 8) and 4
    features whose pre-activations stay below 3.5 (sometimes negative): never in the top 2, so they never fire."""
    g = torch.Generator().manual_seed(8)
    sae = SparseAutoencoder(6, 10, HOOK, "topk", 2)
    with torch.no_grad():
        sae.W_enc.zero_()
        sae.W_enc[:, :6] = 4 * torch.eye(6)
        sae.W_enc[:, 6:] = torch.randn(6, 4, generator=g) * 0.3
        sae.W_dec.copy_(torch.nn.functional.normalize(torch.randn(10, 6, generator=g), dim=-1))
    return sae


def sparse_data(n, seed):
    return torch.rand(n, 6, generator=torch.Generator().manual_seed(seed)) + 1


def test_the_aux_loss_is_the_dead_features_reconstruction_of_the_live_error_and_trains_only_them():
    """Oracle: err = x - x_hat (live TopK reconstruction), the aux_k largest pre-activations among the dead
    features only, relu'd and decoded without b_dec, and the squared error to err over err's squared norm.
    Its gradient reaches the decoder rows and encoder columns of dead features only; the main loss's never does."""
    sae = dead_feature_sae()
    x = sparse_data(64, 9)
    dead = torch.zeros(10, dtype=torch.bool)
    dead[6:] = True
    f, pre = hand_features(sae, x, 2)
    assert not bool((f[:, 6:] > 0).any()) and bool((pre[:, 6:] > 0).any()) and bool((pre[:, 6:] < 0).any())
    W = sae.W_dec.detach()
    err = x - (f @ W + sae.b_dec.detach())
    dv, di = pre[:, 6:].topk(3, dim=-1)
    e_hat = torch.zeros_like(x)
    for r in range(x.shape[0]):
        for v, i in zip(dv[r].tolist(), di[r].tolist()):
            e_hat[r] += max(v, 0.0) * W[6 + i]
    want = ((e_hat - err) ** 2).sum(-1).mean() / (err ** 2).sum(-1).mean()

    mse, aux, _ = losses(sae, x, dead, aux_k=3)
    assert torch.allclose(aux.detach(), want, rtol=1e-5), (float(aux), float(want))
    g_dec, g_enc = torch.autograd.grad(aux, [sae.W_dec, sae.W_enc])
    moved = g_dec.abs().sum(1) > 0
    assert bool(moved[6:].all()) and not bool(moved[:6].any()), moved
    assert bool((g_enc[:, 6:].abs().sum(0) > 0).all()) and float(g_enc[:, :6].abs().sum()) == 0.0
    g_main = torch.autograd.grad(mse, sae.W_dec)[0]
    assert float(g_main[6:].abs().sum()) == 0.0 and bool((g_main[:6].abs().sum(1) > 0).all())


def test_a_feature_that_never_fires_learns_through_the_aux_loss_and_only_through_it(monkeypatch, one_thread):
    """Training starts from ``dead_feature_sae`` (init_sae replaced). After one batch of 64 the 4 features that
    never fired are dead (dead_after=64); from then on only the AuxK loss can move their decoder rows. With
    aux_coef > 0 every dead row moves; with aux_coef = 0 they stay where they were, while the live rows train."""
    start = dead_feature_sae()
    W0 = start.W_dec.detach().clone()
    monkeypatch.setattr(sae_training, "init_sae", lambda acts, hook, cfg: dead_feature_sae())
    data = sparse_data(512, 10)
    base = dict(n_features=10, k=2, steps=4, batch_size=64, lr=1e-2, aux_k=3, dead_after=64, decay_from=1.0)
    moved = {}
    for coef in (1 / 32, 0.0):
        sae, hist = train_sae(data, HOOK, SAETrainConfig(**base, aux_coef=coef), progress_every=1)
        assert [h["dead"] for h in hist[:2]] == [0.0, 0.4]  # features 6-9 dead from step 2 on, no other
        assert not bool((sae.encode(data)[:, 6:] > 0).any())  # and they still never fire
        moved[coef] = (sae.W_dec - W0).abs().max(1).values
        assert bool((moved[coef][:6] > 1e-3).all())  # the live ones trained either way
        assert hist[1]["aux"] > 0
    assert bool((moved[1 / 32][6:] > 1e-3).all()), moved[1 / 32]
    assert float(moved[0.0][6:].max()) < 1e-6, moved[0.0]
