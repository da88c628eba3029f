"""circuit-tracer's three interventions (``feature_intervention`` with ``freeze_attention`` True or False, and with
every layer constrained), as gptviz/interp/graph_interventions.py computes them, against a plain-PyTorch forward of
the shipped GPT written here from its state dict: the real MLPs run, and each chosen feature's decoder rows times
(its value - its activation in this run) are added to the MLP outputs they reach; the value is ``scale`` times the
feature's activation on the prompt. The fully constrained intervention is also compared with the graph's prediction,
as circuit-tracer's own tests compare a graph with it (``verify_feature_edges``: rtol 1e-3)."""
import pytest
import torch
from transcoder_oracles import plain_steered, toy_transcoder

from gptviz.interp.graph_interventions import MODES, intervene, steered_logits
from gptviz.interp.replacement import freeze
from gptviz.model.checkpoint import load_checkpoint
from gptviz.paths import CHECKPOINTS

PROMPT = "KING HENRY: Once more unto the breach, dear friends"


@pytest.fixture(scope="module")
def shakespeare():
    return load_checkpoint(CHECKPOINTS / "shakespeare.safetensors")


def demeaned(logits, ids):
    last = logits[-1].double()
    return last[ids] - last.mean()


def chosen_features(fz):
    """Two active features at different layers and positions (the second one past the first's position, so the
    first's change reaches it), and one inactive one."""
    act0 = int(fz.features[0][5].nonzero()[0])
    act2 = int(fz.features[2][11].nonzero()[0])
    idle = int((fz.features[1][3] == 0).nonzero()[0])
    return [(0, 5, act0), (2, 11, act2), (1, 3, idle)]


@pytest.mark.parametrize("cross", [False, True], ids=["per-layer", "cross-layer"])
@pytest.mark.parametrize("mode", ["attention", "free"])
def test_a_steered_model_equals_the_plain_forward_steered_the_same_way(shakespeare, cross, mode):
    model, tok = shakespeare.model, shakespeare.tokenizer
    ids = tok.encode(PROMPT)[:20]
    tc = toy_transcoder(model, cross, seed=1)
    fz = freeze(model, tc, ids)
    chosen = chosen_features(fz)
    targets = [int(tok.encode("e")[0]), int(tok.encode(" ")[0]), 7]
    x = torch.tensor([ids])
    clean_logits, clean = plain_steered(model, x, tc)
    for scale in (0.0, 1.7):
        got = intervene(model, tc, ids, chosen, scale, targets, mode=mode)
        after, _ = plain_steered(model, x, tc, chosen, scale, clean, hold_patterns=mode == "attention")
        want = (demeaned(after, targets) - demeaned(clean_logits, targets)).float()
        torch.testing.assert_close(got["real"], want, atol=2e-4, rtol=1e-3)
        assert float(want.abs().max()) > 1e-2  # the intervention does something
        assert got["active"] == 2
    # holding the patterns or not is a different number
    other = intervene(model, tc, ids, chosen, 0.0, targets, mode="free" if mode == "attention" else "attention")
    assert not torch.allclose(intervene(model, tc, ids, chosen, 0.0, targets, mode=mode)["real"], other["real"],
                              atol=1e-4)


@pytest.mark.parametrize("cross", [False, True], ids=["per-layer", "cross-layer"])
def test_the_fully_constrained_intervention_is_the_graphs_prediction(shakespeare, cross):
    """Every single active feature at two positions, switched off and scaled by 1.7: the direct mode's change is
    the graph's prediction, within circuit-tracer's own tolerance for this check."""
    model, tok = shakespeare.model, shakespeare.tokenizer
    ids = tok.encode(PROMPT)[:16]
    tc = toy_transcoder(model, cross, seed=3)
    fz = freeze(model, tc, ids)
    targets = [int(tok.encode("e")[0]), int(tok.encode("t")[0])]
    checked = 0
    for layer in range(4):
        for pos in (6, 15):
            for feat in fz.features[layer][pos].nonzero().flatten().tolist():
                for scale in (0.0, 1.7):
                    got = intervene(model, tc, ids, [(layer, pos, feat)], scale, targets, mode="direct")
                    torch.testing.assert_close(got["real"], got["predicted"], atol=1e-5, rtol=1e-3)
                    checked += 1
    assert checked >= 2 * 4 * 2 * 3  # every layer, both positions, at least 3 active features each (k = 4)
    # several at once: two of one layer and position (their writes add up), one two layers on, an inactive one
    pair = fz.features[0][6].nonzero().flatten().tolist()[:2]
    later = int(fz.features[2][15].nonzero()[0])
    idle = int((fz.features[1][3] == 0).nonzero()[0])
    chosen = [(0, 6, pair[0]), (0, 6, pair[1]), (2, 15, later), (1, 3, idle)]
    for scale in (0.0, 1.7):
        got = intervene(model, tc, ids, chosen, scale, targets, mode="direct")
        torch.testing.assert_close(got["real"], got["predicted"], atol=1e-5, rtol=1e-3)
        alone = sum(intervene(model, tc, ids, [c], scale, targets, mode="direct")["real"] for c in chosen)
        torch.testing.assert_close(got["real"], alone, atol=1e-5, rtol=1e-3)  # direct effects add up
        assert float(got["real"].abs().max()) > 1e-2


def test_the_steered_runs_agree_with_each_other_where_they_must(shakespeare):
    """With nothing to change (scale 1), every mode's logits are the model's; a last-layer feature, whose write
    reaches no later layer, changes the logits the same way whether the patterns are held or not (nothing after
    it has attention)."""
    model, tok = shakespeare.model, shakespeare.tokenizer
    ids = tok.encode(PROMPT)[:12]
    tc = toy_transcoder(model, True, seed=4)
    fz = freeze(model, tc, ids)
    feat = int(fz.features[3][11].nonzero()[0])  # at the last position, which the targets read
    for mode in ("attention", "free", "direct"):
        torch.testing.assert_close(steered_logits(model, tc, fz, [(3, 11, feat)], 1.0, mode), fz.logits,
                                   atol=1e-4, rtol=1e-4)
    got = {m: intervene(model, tc, ids, [(3, 11, feat)], 0.0, [5, 6, 7], mode=m)["real"] for m in MODES}
    torch.testing.assert_close(got["attention"], got["free"], atol=1e-5, rtol=1e-4)
    # at the last position the final norm is live in both and held in the direct mode: not the same change
    assert not torch.allclose(got["attention"], got["direct"], atol=1e-4)


def test_an_unknown_mode_is_refused_by_name(shakespeare):
    model, tok = shakespeare.model, shakespeare.tokenizer
    ids = tok.encode(PROMPT)[:6]
    tc = toy_transcoder(model, False)
    with pytest.raises(ValueError, match="mode='frozen' must be one of attention, free, direct, replacement"):
        intervene(model, tc, ids, [], 0.0, [1], mode="frozen")
    with pytest.raises(ValueError, match="steered_logits computes 'attention', 'free' or 'direct'"):
        steered_logits(model, tc, freeze(model, tc, ids), [], 0.0, "replacement")


def test_an_intervention_keeps_no_autograd_graph(shakespeare):
    model, tok = shakespeare.model, shakespeare.tokenizer
    assert any(p.requires_grad for p in model.parameters())
    ids = tok.encode(PROMPT)[:10]
    tc = toy_transcoder(model, True, seed=5).requires_grad_(True)
    fz = freeze(model, tc, ids)
    feat = int(fz.features[1][9].nonzero()[0])
    for mode in MODES:
        out = intervene(model, tc, ids, [(1, 9, feat)], 0.0, [4, 5], mode=mode)
        assert not any(t.requires_grad for t in (out["predicted"], out["real"], out["clean"])), mode


def test_the_target_ids_run_from_zero_to_the_last_token_and_the_clean_logits_are_returned(shakespeare):
    model, tok = shakespeare.model, shakespeare.tokenizer
    ids = tok.encode(PROMPT)[:10]
    tc = toy_transcoder(model, False, seed=5)
    V = model.config.vocab_size
    fz = freeze(model, tc, ids)
    feat = int(fz.features[0][9].nonzero()[0])
    for mode in MODES:
        out = intervene(model, tc, ids, [(0, 9, feat)], 0.0, [0, V - 1], mode=mode)  # both ends are token ids
        last = fz.logits[-1].double()
        if mode != "replacement":  # the model's own logits; the replacement's equal them to rounding
            torch.testing.assert_close(out["clean"], (last[[0, V - 1]] - last.mean()).float())
        else:
            torch.testing.assert_close(out["clean"], (last[[0, V - 1]] - last.mean()).float(), atol=1e-4, rtol=1e-4)
    for bad in ([V], [-1], []):
        with pytest.raises(ValueError) as err:
            intervene(model, tc, ids, [(0, 9, feat)], 0.0, bad)
        assert str(err.value) == f"target logits must be token ids from 0 to {V - 1}"
