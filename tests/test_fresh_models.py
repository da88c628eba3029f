"""The initialisation study's fresh models: built once per (shape, scale, activation) and kept within KEPT_PARAMS
parameters in all, the least recently used dropped first; a model past the bound is built anew each time; two
threads asking at once get one model; every kept model's weights are a fresh model's (same seed)."""
import threading

import torch

from gptviz.config import ModelConfig
from gptviz.model.gpt import GPT
from gptviz.training import fresh_models
from gptviz.training.fresh_models import read_only_model


def _cfg(n_embd=8, **kw):
    return ModelConfig(vocab_size=30, block_size=8, n_layer=1, n_head=2, n_embd=n_embd, **kw)


def test_the_shipped_mixtures_13_scales_are_built_once(monkeypatch):
    """The shipped mixture of experts has 2.4M parameters: its 13 scales were built again on every text (only models
    up to 1M were kept), half of the Initialisation page's text change."""
    monkeypatch.setattr(fresh_models, "_kept", type(fresh_models._kept)())
    cfg = ModelConfig(vocab_size=512, block_size=128, n_layer=4, n_head=4, n_embd=128, n_expert=8, n_expert_active=2)
    assert 2_000_000 < cfg.num_params() < 5_000_000
    scales = [0.002 * 10 ** (i / 4) for i in range(13)]
    first = [read_only_model(cfg, s) for s in scales]
    assert [read_only_model(cfg, s) for s in scales] == first and all(a is b for a, b in zip(
        first, [read_only_model(cfg, s) for s in scales]))
    want = GPT(cfg.replace(init_std=scales[5]))  # built by hand: the same seed gives the same weights
    for (n, p), (_, q) in zip(first[5].named_parameters(), want.named_parameters()):
        assert torch.equal(p, q), n


def test_the_kept_models_stay_within_their_bound_least_recently_used_dropped_first(monkeypatch):
    monkeypatch.setattr(fresh_models, "_kept", type(fresh_models._kept)())
    n = _cfg().num_params()
    monkeypatch.setattr(fresh_models, "KEPT_PARAMS", 3 * n)
    a, b, c = (read_only_model(_cfg(), s) for s in (0.1, 0.2, 0.3))
    assert read_only_model(_cfg(), 0.1) is a  # a is now the most recently used: b is the oldest
    d = read_only_model(_cfg(), 0.4)
    kept = list(fresh_models._kept.values())
    assert len(kept) == 3 and sum(m.config.num_params() for m in kept) <= 3 * n
    assert b not in kept and {id(m) for m in (a, c, d)} == {id(m) for m in kept}
    assert read_only_model(_cfg(), 0.2) is not b  # dropped, so built again
    big = _cfg(n_embd=64)
    assert big.num_params() > 3 * n
    assert read_only_model(big, 0.1) is not read_only_model(big, 0.1)  # past the bound: never kept
    assert all(m.config.n_embd == 8 for m in fresh_models._kept.values())


def test_two_threads_asking_at_once_get_one_model(monkeypatch):
    monkeypatch.setattr(fresh_models, "_kept", type(fresh_models._kept)())
    built, real = [], fresh_models.GPT
    gate = threading.Barrier(2)

    def slow_gpt(cfg):
        built.append(cfg)
        gate.wait(timeout=10)  # both threads are building when either finishes
        return real(cfg)

    monkeypatch.setattr(fresh_models, "GPT", slow_gpt)
    got = [None, None]
    threads = [threading.Thread(target=lambda i=i: got.__setitem__(i, read_only_model(_cfg(), 0.3))) for i in (0, 1)]
    [t.start() for t in threads]
    [t.join(timeout=20) for t in threads]
    assert len(built) == 2 and got[0] is got[1] and got[0] is not None
    assert list(fresh_models._kept.values()) == [got[0]]


def test_a_kept_model_is_not_built_again(monkeypatch):
    """Asked twice for each of 13 scales: 13 builds, not 26 (the second asking finds each kept)."""
    monkeypatch.setattr(fresh_models, "_kept", type(fresh_models._kept)())
    built, real = [], fresh_models.GPT
    monkeypatch.setattr(fresh_models, "GPT", lambda cfg: built.append(cfg) or real(cfg))
    scales = [0.002 * 10 ** (i / 4) for i in range(13)]
    for _ in range(2):
        for s in scales:
            read_only_model(_cfg(), s)
    assert len(built) == 13


def test_the_bound_counts_every_kept_models_parameters_whatever_their_sizes(monkeypatch):
    """Two small models and a big one (2.5 small ones) against a bound of 3 small ones: both small ones go, the big
    one stays alone; a model of exactly the bound is kept."""
    monkeypatch.setattr(fresh_models, "_kept", type(fresh_models._kept)())
    small = _cfg()
    n = small.num_params()
    big = next(_cfg(n_embd=e) for e in range(10, 64, 2) if 2.4 * n < _cfg(n_embd=e).num_params() < 3 * n)
    monkeypatch.setattr(fresh_models, "KEPT_PARAMS", 3 * n)
    read_only_model(small, 0.1)
    read_only_model(small, 0.2)
    b = read_only_model(big, 0.1)
    assert list(fresh_models._kept.values()) == [b]
    monkeypatch.setattr(fresh_models, "_kept", type(fresh_models._kept)())
    monkeypatch.setattr(fresh_models, "KEPT_PARAMS", n)
    assert read_only_model(small, 0.3) is read_only_model(small, 0.3)


def test_a_model_to_train_takes_the_scale_and_activation_asked():
    f = fresh_models.fresh_model(_cfg(), 0.5, "tanh")
    assert f.config.activation == "tanh" and f.config.init_std == 0.5 and f is not read_only_model(_cfg(), 0.5, "tanh")
