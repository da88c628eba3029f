"""gptviz.interp.attribution against oracles written out here, on tiny models so each test takes well under a second:
attention rollout multiplied out by hand (padded rows, numpy traces, batch row 1), integrated gradients against a
hand-written Gauss-Legendre quadrature with the very nodes Captum uses (few steps, so a wrong step count shows),
its convergence delta against two plain forward passes, and the import of Captum with a blank ``__main__``."""
import importlib.abc
import importlib.machinery
import sys
import types

import numpy as np
import pytest
import torch
from lazy_import import lazy
from perturbed_models import perturbed

from gptviz import ModelConfig, trace
from gptviz.interp import attribution
from gptviz.interp.attribution import attention_rollout, integrated_gradients

lazy("captum", skip=True)

TINY = ModelConfig(vocab_size=11, block_size=6, n_layer=2, n_head=2, n_embd=8)
DROPOUT = ModelConfig(vocab_size=11, block_size=6, n_layer=1, n_head=2, n_embd=8, dropout=0.5)



def rollout_by_hand(patterns, valid_rows=None):
    """Rollout of one batch row with plain loops: patterns is a list (one per layer) of (heads, T, T) arrays. Each
    layer's matrix is ½ · (mean over heads) + ½ · I, each row divided by its own sum (so a padded query row, all
    zeros, becomes the identity's row), multiplied from the first layer up."""
    T = patterns[0].shape[-1]
    r = np.eye(T)
    for a in patterns:
        mixed = np.zeros((T, T))
        for i in range(T):
            for j in range(T):
                mixed[i, j] = 0.5 * float(np.mean(a[:, i, j])) + 0.5 * (i == j)
            mixed[i] /= mixed[i].sum()
        r = mixed @ r
    return r


def test_rollout_of_a_left_padded_row_keeps_each_dead_query_on_its_own_token():
    """Row 1 is left-padded twice: its queries 0 and 1 may look at no key (all-zero pattern rows). Against the
    hand-written rollout of that row: those rows are exactly the identity's, every row sums to 1, and row 0
    (unpadded) is its own hand-written rollout too."""
    m = perturbed(TINY)
    idx = torch.randint(0, TINY.vocab_size, (2, 5), generator=torch.Generator().manual_seed(1))
    tr = trace(m, idx, attention_mask=torch.tensor([[1, 1, 1, 1, 1], [0, 0, 1, 1, 1]]))
    assert float(tr["blocks.0.attn.hook_pattern"][1, :, 0].abs().sum()) == 0.0  # the dead row really is all zeros
    got = attention_rollout(tr)
    assert got.shape == (2, 5, 5) and got.dtype == np.float64
    for b in (0, 1):
        pats = [tr[f"blocks.{l}.attn.hook_pattern"][b].double().numpy() for l in range(TINY.n_layer)]
        np.testing.assert_allclose(got[b], rollout_by_hand(pats), rtol=0, atol=1e-12)
    np.testing.assert_array_equal(got[1, :2], np.eye(5)[:2])
    np.testing.assert_allclose(got.sum(-1), 1.0, rtol=0, atol=1e-12)


def causal_patterns(T, seed):
    """Two heads' worth of random causal attention patterns, (2, T, T): each row a softmax over the keys up to it."""
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(2, T, T, generator=g) * 2
    return torch.softmax(scores.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf")), -1)


def test_rollout_of_a_numpy_trace_with_different_layers_is_the_hand_product_in_layer_order():
    """The app's cached numpy trace, with each layer's pattern replaced by a different random causal one (the two
    heads differing, the two batch rows differing): the rollout of each row is its layer 1's mixed matrix times its
    layer 0's, not the other way round."""
    m = perturbed(TINY)
    T = 4
    pats = {(b, l): causal_patterns(T, seed=10 * b + l) for b in (0, 1) for l in (0, 1)}
    edits = {f"blocks.{l}.attn.hook_pattern": torch.stack([pats[0, l], pats[1, l]]) for l in (0, 1)}
    tr = trace(m, torch.randint(0, TINY.vocab_size, (2, T), generator=torch.Generator().manual_seed(2)),
               edits=edits).numpy()
    got = attention_rollout(tr)
    for b in (0, 1):
        want = rollout_by_hand([pats[b, 0].double().numpy(), pats[b, 1].double().numpy()])
        swapped = rollout_by_hand([pats[b, 1].double().numpy(), pats[b, 0].double().numpy()])
        assert np.abs(want - swapped).max() > 5e-3  # the order is visible
        np.testing.assert_allclose(got[b], want, rtol=0, atol=1e-6)
    assert np.abs(got[0] - got[1]).max() > 0.05


def _logit(model, idx, position, target, scale=None):
    """The target's logit by a plain forward pass of the model in eval mode; with ``scale`` the token embeddings
    (wte's output) are multiplied by it through a forward hook (the position embeddings stay)."""
    hook = None if scale is None else model.transformer.wte.register_forward_hook(lambda mod, i, o: o * scale)
    was = model.training
    model.eval()
    try:
        with torch.no_grad():
            return float(model(idx)[0][0, position, target])
    finally:
        model.train(was)
        if hook is not None:
            hook.remove()


def gauss_legendre_ig(model, idx, position, target, steps):
    """Integrated gradients written out with the Gauss-Legendre rule on [0, 1] (numpy's nodes x_k and weights w_k on
    [-1, 1], mapped to α_k = (1 + x_k) / 2 and w_k / 2: the rule Captum uses by default): at each α_k the token
    embeddings are α_k · e through a forward hook on wte, the gradient of the target's logit by torch.autograd;
    attribution = Σ_d e · Σ_k (w_k / 2) · ∇f(α_k e), one number per position."""
    x, w = np.polynomial.legendre.leggauss(steps)
    was = model.training
    model.eval()
    emb = model.transformer.wte(idx).detach().double()
    total = torch.zeros_like(emb)
    try:
        for a, wk in zip(0.5 * (1 + x), 0.5 * w):
            z = (float(a) * emb).float().requires_grad_(True)
            hook = model.transformer.wte.register_forward_hook(lambda mod, i, o, z=z: z)
            try:
                out = model(idx)[0][0, position, target]
            finally:
                hook.remove()
            total += float(wk) * torch.autograd.grad(out, z)[0].double()
    finally:
        model.train(was)
    return (emb * total).sum(-1)[0].numpy()


@pytest.mark.parametrize("steps", [2, 3])
def test_integrated_gradients_are_the_gauss_legendre_integral_with_that_many_points(steps):
    """At 2 and 3 points (where the two rules differ clearly): the attributions equal the hand-written quadrature with
    that many points, and delta is sum(attributions) − (f(x) − f(zero tokens)) from two plain forward passes. The
    text is given as a 1-D list, the position from the end (−1), and the target is the last id of the vocabulary."""
    m = perturbed(TINY, seed=3)
    ids = [3, 7, 1, 9, 4]
    idx = torch.tensor([ids])
    target = TINY.vocab_size - 1
    attr, delta = integrated_gradients(m, ids, -1, target, steps=steps)
    assert isinstance(attr, np.ndarray) and attr.shape == (5,) and isinstance(delta, float)
    want = gauss_legendre_ig(m, idx, 4, target, steps)
    other = gauss_legendre_ig(m, idx, 4, target, 5 - steps)
    assert np.abs(want - other).max() > 1e-2  # the number of points matters here
    np.testing.assert_allclose(attr, want, rtol=1e-4, atol=1e-4)
    gap = _logit(m, idx, 4, target) - _logit(m, idx, 4, target, scale=0.0)
    assert abs(gap) > 0.1
    assert delta == pytest.approx(float(attr.sum()) - gap, abs=1e-4)
    assert abs(delta) > 1e-3  # a real, non-zero error at so few points


def test_integrated_gradients_use_the_model_without_dropout_even_in_training_mode():
    """A model with dropout 0.5 left in training mode: the attributions are still the deterministic hand-written
    quadrature of the eval-mode model (twice the same), and the model is left as it was, in training mode."""
    m = perturbed(DROPOUT, seed=4)
    m.train()
    idx = torch.tensor([[2, 5, 8, 1]])
    a1, _ = integrated_gradients(m, idx, 2, 6, steps=3)
    a2, _ = integrated_gradients(m, idx, 2, 6, steps=3)
    np.testing.assert_array_equal(a1, a2)
    np.testing.assert_allclose(a1, gauss_legendre_ig(m, idx, 2, 6, 3), rtol=1e-4, atol=1e-4)
    assert m.training


def test_integrated_gradients_at_the_first_position_counted_from_the_end_is_position_zero():
    """position = −T is allowed and is position 0: only token 0 can matter there (the causal mask), and its
    attribution is the whole gap f(x) − f(zero tokens) up to delta."""
    m = perturbed(TINY, seed=5)
    idx = torch.tensor([[6, 2, 10, 0]])
    attr, delta = integrated_gradients(m, idx, -4, 3, steps=4)
    np.testing.assert_allclose(attr, gauss_legendre_ig(m, idx, 0, 3, 4), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(attr[1:], 0.0, atol=1e-7)
    gap = _logit(m, idx, 0, 3) - _logit(m, idx, 0, 3, scale=0.0)
    assert attr[0] - delta == pytest.approx(gap, abs=1e-4)


def test_integrated_gradients_in_small_batches_run_at_most_that_many_points_at_once(monkeypatch):
    """batch=2 with 5 points: every forward pass the model runs holds at most 2 rows (at least 3 passes), and the
    attributions are those of one big pass (and of the hand-written quadrature)."""
    m = perturbed(TINY, seed=6)
    idx = torch.tensor([[1, 2, 3]])
    whole, _ = integrated_gradients(m, idx, 2, 5, steps=5)
    sizes = []
    run = m.run

    def counting_run(rows, *args, **kwargs):
        sizes.append(rows.shape[0])
        return run(rows, *args, **kwargs)

    monkeypatch.setattr(m, "run", counting_run)
    parts, _ = integrated_gradients(m, idx, 2, 5, steps=5, batch=2)
    assert sizes and max(sizes) <= 2 and sizes.count(2) >= 2
    np.testing.assert_allclose(parts, whole, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(parts, gauss_legendre_ig(m, idx, 2, 5, 5), rtol=1e-4, atol=1e-4)


def test_integrated_gradients_default_to_64_points_and_read_byte_token_ids():
    """No steps given: exactly the result of steps=64 (the same computation, bit for bit), and token ids given as a
    numpy uint8 array (a byte tokenizer's) give exactly what a list of the same ids gives."""
    m = perturbed(TINY, seed=7)
    ids = [4, 9, 2]
    default, d_default = integrated_gradients(m, np.array(ids, dtype=np.uint8), 2, 1)
    explicit, d_explicit = integrated_gradients(m, ids, 2, 1, steps=64)
    np.testing.assert_array_equal(default, explicit)
    assert d_default == d_explicit


@pytest.mark.parametrize("position,target,ids,message", [
    (4, 0, [[1, 2, 3, 4]], "position 4 is outside the text's 4 tokens"),
    (-5, 0, [[1, 2, 3, 4]], "position -5 is outside the text's 4 tokens"),
    (1, -1, [[1, 2, 3, 4]], r"target_id -1 is outside the vocabulary \(vocab_size=11\)"),
    (1, 11, [[1, 2, 3, 4]], r"target_id 11 is outside the vocabulary \(vocab_size=11\)"),
    (1, 0, [[1, 2], [3, 4], [5, 6]], "integrated_gradients explains one line at a time: idx has 3 rows"),
    (1, 0, [[1, 11, 3]], r"token id 11 is outside the vocabulary \(vocab_size=11\)"),
])
def test_integrated_gradients_refuse_bad_input_with_a_message_saying_what(position, target, ids, message):
    """Each limit exactly one past its last allowed value (position T and −T−1, target −1 and vocab_size, a token
    id equal to vocab_size), and a batch of three lines of two tokens: a ValueError naming the value and the
    limit."""
    with pytest.raises(ValueError, match=f"^{message}$"):
        integrated_gradients(perturbed(TINY), ids, position, target, steps=2)


class _FakeCaptumAttr(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Stands in for ``captum.attr`` during one import: records which module is ``__main__`` while it loads, and
    optionally puts a module of its own in ``__main__``'s place (as a package that rebinds it would)."""

    def __init__(self, replace_main=None):
        self.seen_main = None
        self.loads = 0
        self.replace_main = replace_main
        self.ig = type("IntegratedGradients", (), {})

    def find_spec(self, name, path=None, target=None):
        return importlib.machinery.ModuleSpec(name, self) if name == "captum.attr" else None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        self.loads += 1
        self.seen_main = sys.modules.get("__main__")
        module.IntegratedGradients = self.ig
        if self.replace_main is not None:
            sys.modules["__main__"] = self.replace_main


@pytest.fixture
def fake_captum(monkeypatch):
    """A clean slate for the import: captum.attr not yet imported, a module of ours as ``__main__``, the fake loader
    first on sys.meta_path (all restored afterwards)."""
    import captum

    def make(replace_main=None):
        fake = _FakeCaptumAttr(replace_main)
        main = types.ModuleType("__main__")
        monkeypatch.delitem(sys.modules, "captum.attr", raising=False)
        monkeypatch.setattr(captum, "attr", getattr(captum, "attr", None), raising=False)
        monkeypatch.setitem(sys.modules, "__main__", main)
        monkeypatch.setattr(sys, "meta_path", [fake, *sys.meta_path])
        return fake, main

    return make


def test_captum_is_imported_with_a_blank_main_and_the_page_main_is_put_back(fake_captum, monkeypatch):
    """While captum.attr loads, ``__main__`` is a fresh, empty module named ``__main__`` (not the page's, which
    IPython would keep alive); afterwards the page's is back, and the class returned is captum.attr's. A second call
    imports nothing and leaves ``__main__`` alone."""
    fake, main = fake_captum()
    cls = attribution._captum_integrated_gradients()
    assert cls is fake.ig and fake.loads == 1
    blank = fake.seen_main
    assert isinstance(blank, types.ModuleType) and blank is not main
    assert blank.__name__ == "__main__" and not [k for k in vars(blank) if not k.startswith("__")]
    assert sys.modules["__main__"] is main
    made = []
    monkeypatch.setattr(attribution, "types", types.SimpleNamespace(ModuleType=lambda n: made.append(n)))
    assert attribution._captum_integrated_gradients() is fake.ig and fake.loads == 1
    assert sys.modules["__main__"] is main and made == []  # no stand-in made: __main__ never swapped


def test_a_main_that_the_import_itself_installs_is_left_in_place(fake_captum):
    """If importing captum.attr puts its own module in ``__main__``'s place, that one stays (only our blank stand-in
    is swapped back)."""
    theirs = types.ModuleType("__main__")
    fake, main = fake_captum(replace_main=theirs)
    attribution._captum_integrated_gradients()
    assert fake.seen_main is not main and sys.modules["__main__"] is theirs


def test_without_a_main_module_the_blank_stand_in_is_not_swapped_for_nothing(fake_captum, monkeypatch):
    """A process with no ``__main__`` in sys.modules (embedded interpreters): the import still works, under the
    blank stand-in."""
    fake, _ = fake_captum()
    monkeypatch.delitem(sys.modules, "__main__")
    assert attribution._captum_integrated_gradients() is fake.ig
    assert fake.seen_main is not None and fake.seen_main.__name__ == "__main__"
    assert sys.modules.get("__main__") is fake.seen_main
