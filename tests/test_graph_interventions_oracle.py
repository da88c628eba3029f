"""Interventions on attribution-graph features (gptviz/interp/graph_interventions.py) against two independent
computations: the graph's prediction against the model run with every pattern, norm divisor and MLP output held at
its recorded value and only the chosen features' own writes changed (circuit-tracer's fully constrained
intervention); the real change against the plain-PyTorch forward with the transcoder and its errors in place of
every MLP (tests/transcoder_oracles.py)."""
import pytest
import torch
from transcoder_oracles import plain_forward

from gptviz.interp.graph_interventions import intervene, spliced_logits
from gptviz.interp.replacement import freeze
from gptviz.interp.transcoder import Transcoder, output_hook
from gptviz.model.checkpoint import load_checkpoint
from gptviz.paths import CHECKPOINTS
from gptviz.run.trace import trace

PROMPT = "KING HENRY: Once more unto the breach, dear friends"


@pytest.fixture(scope="module")
def shakespeare():
    return load_checkpoint(CHECKPOINTS / "shakespeare.safetensors")


def toy(model, cross, seed=0, F=16, k=4):
    c = model.config
    tc = Transcoder(c.n_layer, c.n_embd, F, k, cross)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for layer in range(c.n_layer):
            # small gains: a toy transcoder with large ones amplifies float32 rounding tenfold a layer
            tc.W_enc[layer].copy_(torch.randn(c.n_embd, F, generator=g) * 0.1)
            tc.b_enc[layer].copy_(torch.randn(F, generator=g) * 0.2)
            tc.W_dec[layer].copy_(torch.randn(tc.W_dec[layer].shape, generator=g) * 0.1)
            tc.b_dec[layer].copy_(torch.randn(c.n_embd, generator=g) * 0.1)
    return tc.requires_grad_(False)


def demeaned(logits, ids):
    last = logits[-1].double()
    return last[ids] - last.mean()


def constrained_change(model, tc, ids, chosen, scale, targets):
    """Patterns, norm divisors and MLP outputs held at their recorded values; each chosen feature's decoder writes
    (scale - 1) times its activation more into the MLP outputs it reaches."""
    x = torch.tensor([ids])
    tr = trace(model, x)
    fz = freeze(model, tc, ids)
    extra = {m: torch.zeros_like(tr[output_hook(m)]) for m in range(tc.n_layer)}
    for layer, pos, feat in chosen:
        a = fz.features[layer][pos, feat]
        for m in (range(layer, tc.n_layer) if tc.cross_layer else [layer]):
            extra[m][0, pos] += (scale - 1) * a * tc.W_dec[layer][feat, m - layer]

    def rec(name, t):
        if name.endswith("hook_scale") or name.endswith("hook_pattern"):
            return tr[name]
        for m in range(tc.n_layer):
            if name == output_hook(m):
                return tr[name] + extra[m]
        return t

    with torch.no_grad():
        after = model.run(x, rec=rec)[0]
    return (demeaned(after, targets) - demeaned(tr.logits[0], targets)).float()


@pytest.mark.parametrize("cross", [False, True], ids=["per-layer", "cross-layer"])
def test_predicted_and_real_changes_equal_their_oracles(shakespeare, cross):
    model, tok = shakespeare.model, shakespeare.tokenizer
    ids = tok.encode(PROMPT)[:20]
    tc = toy(model, cross, seed=1)
    fz = freeze(model, tc, ids)
    # two active features at different layers and positions, and one inactive one
    act0 = fz.features[0][5].nonzero()[0].item()
    act2 = fz.features[2][11].nonzero()[0].item()
    idle = (fz.features[1][3] == 0).nonzero()[0].item()
    chosen = [(0, 5, act0), (2, 11, act2), (1, 3, idle)]
    targets = [int(tok.encode("e")[0]), int(tok.encode(" ")[0]), 7]
    for scale in (0.0, 1.7):
        got = intervene(model, tc, ids, chosen, scale, targets, mode="replacement")
        assert got["active"] == 2
        want_pred = constrained_change(model, tc, ids, chosen, scale, torch.tensor(targets))
        torch.testing.assert_close(got["predicted"], want_pred, atol=2e-4, rtol=1e-3)
        x = torch.tensor([ids])
        clean = plain_forward(model, x, tc, layers=range(4), errors=fz.errors)[0]
        after = plain_forward(model, x, tc, layers=range(4), errors=fz.errors, scaled=chosen, scale=scale)[0]
        want_real = (demeaned(after, targets) - demeaned(clean, targets)).float()
        torch.testing.assert_close(got["real"], want_real, atol=2e-4, rtol=1e-3)
        assert float(want_real.abs().max()) > 1e-3  # the intervention does something
    # the real change is not the prediction: what the graph freezes matters
    assert not torch.allclose(got["real"], got["predicted"], atol=1e-3)


def test_the_spliced_model_with_its_errors_is_the_model(shakespeare):
    model, tok = shakespeare.model, shakespeare.tokenizer
    ids = tok.encode(PROMPT)
    tc = toy(model, True, seed=2)
    fz = freeze(model, tc, ids)
    torch.testing.assert_close(spliced_logits(model, tc, ids, fz.errors), trace(model, torch.tensor([ids])).logits[0],
                               atol=1e-4, rtol=1e-4)
    got = intervene(model, tc, ids, [], 0.0, [3, 4], mode="replacement")
    assert got["predicted"].tolist() == [0.0, 0.0] and float(got["real"].abs().max()) < 1e-4


def test_bad_interventions_are_refused_by_name(shakespeare):
    model, tok = shakespeare.model, shakespeare.tokenizer
    ids = tok.encode(PROMPT)[:8]
    tc = toy(model, False)
    with pytest.raises(ValueError, match="there is no feature 99 at layer 0, position 1"):
        intervene(model, tc, ids, [(0, 1, 99)], 0.0, [1])
    with pytest.raises(ValueError, match="there is no feature 0 at layer 0, position 8"):
        intervene(model, tc, ids, [(0, 8, 0)], 0.0, [1])
    with pytest.raises(ValueError, match="scale=50"):
        intervene(model, tc, ids, [(0, 1, 0)], 50, [1])
    with pytest.raises(ValueError, match="target logits must be token ids"):
        intervene(model, tc, ids, [(0, 1, 0)], 0.0, [10_000])


def test_the_bounds_of_an_intervention(shakespeare, monkeypatch):
    import gptviz.interp.graph_interventions as gi

    model, tok = shakespeare.model, shakespeare.tokenizer
    ids = tok.encode(PROMPT)[:8]
    tc = toy(model, False)
    fz = freeze(model, tc, ids)
    a0 = int(fz.features[0][0].nonzero()[0])
    a3 = int(fz.features[3][7].nonzero()[0])
    for scale in (-10.0, 10.0):  # the ends are allowed
        assert intervene(model, tc, ids, [(0, 0, a0)], scale, [1])["active"] == 1
    for scale in (-10.5, 10.5):
        with pytest.raises(ValueError, match="must be from -10 to 10"):
            intervene(model, tc, ids, [(0, 0, a0)], scale, [1])
    for bad, words in (((4, 0, 0), "layer 4"), ((0, 0, 16), "there is no feature 16")):
        with pytest.raises(ValueError, match=words):
            intervene(model, tc, ids, [bad], 0.0, [1])
    monkeypatch.setattr(gi, "MAX_FEATURES", 2)
    assert intervene(model, tc, ids, [(0, 0, a0), (3, 7, a3)], 0.0, [1])["active"] == 2
    with pytest.raises(ValueError, match="at most 2 features can be scaled at once"):
        intervene(model, tc, ids, [(0, 0, a0), (3, 7, a3), (0, 1, 0)], 0.0, [1])
