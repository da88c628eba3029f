"""Transcoders (gptviz/interp/transcoder.py, gptviz/training/transcoder.py) against hand-written oracles: the
features and the decoder's sums written as loops, the model with its MLPs replaced written in plain PyTorch from the
state dict, the training loss and its AuxK term written out, and the file's header checked before anything is
read."""

import pytest
import safetensors.torch
import torch
import torch.nn.functional as F
from transcoder_oracles import features_by_hand, output_by_hand, plain_forward

from gptviz.interp import transcoder as tc_mod
from gptviz.interp.transcoder import Transcoder, input_hook, load_transcoder, output_hook, transcoder_path
from gptviz.model.checkpoint import load_checkpoint
from gptviz.paths import CHECKPOINTS
from gptviz.run.trace import trace
from gptviz.training import transcoder as train_mod


def random_transcoder(cross, L=3, d=8, F_=12, k=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    tc = Transcoder(L, d, F_, k, cross)
    with torch.no_grad():
        for p in tc.parameters():
            p.copy_(torch.randn(p.shape, generator=g))
    return tc


@pytest.mark.parametrize("cross", [False, True], ids=["per-layer", "cross-layer"])
def test_features_and_outputs_equal_the_loops(cross):
    tc = random_transcoder(cross)
    with torch.no_grad():
        tc.b_enc[1].sub_(6.0)  # most of layer 1's scores negative: ReLU has work to do
    x = torch.randn(2, 3, tc.n_layer, tc.d_model, generator=torch.Generator().manual_seed(1))
    feats = [tc.encode(layer, x[..., layer, :]) for layer in range(tc.n_layer)]
    for layer in range(tc.n_layer):
        torch.testing.assert_close(feats[layer], features_by_hand(tc, layer, x[..., layer, :]), atol=1e-5, rtol=1e-5)
        assert int((feats[layer] != 0).sum(-1).max()) <= tc.k
    # some pre-activations among the top k are negative
    assert any(bool((tc.pre_acts(layer, x[..., layer, :]).topk(tc.k, -1).values < 0).any())
               for layer in range(tc.n_layer))
    for layer in range(tc.n_layer):
        torch.testing.assert_close(tc.decode(layer, feats), output_by_hand(tc, layer, feats), atol=1e-4, rtol=1e-5)


def test_a_cross_layer_output_hears_every_earlier_layer_and_a_per_layer_one_only_its_own():
    tc = random_transcoder(True)
    x = torch.randn(4, tc.n_layer, tc.d_model, generator=torch.Generator().manual_seed(2))
    feats = [tc.encode(layer, x[:, layer]) for layer in range(tc.n_layer)]
    last = tc.n_layer - 1
    without_first = tc.decode(last, [None] + feats[1:])
    expected_gap = feats[0] @ tc.W_dec[0][:, last].detach()
    torch.testing.assert_close(tc.decode(last, feats) - without_first, expected_gap, atol=1e-4, rtol=1e-5)
    assert tc.W_dec[0].shape == (tc.n_features, tc.n_layer, tc.d_model)
    assert tc.W_dec[last].shape == (tc.n_features, 1, tc.d_model)
    plt = random_transcoder(False)
    assert all(W.shape == (plt.n_features, 1, plt.d_model) for W in plt.W_dec)
    feats = [plt.encode(layer, x[:, layer]) for layer in range(plt.n_layer)]
    torch.testing.assert_close(plt.decode(last, feats), plt.decode(last, [None] * last + [feats[last]]))


# --------------------------------------------------------------------------- the model with its MLPs replaced
@pytest.fixture(scope="module")
def shakespeare():
    return load_checkpoint(CHECKPOINTS / "shakespeare.safetensors")


def small_transcoder_for(model, cross, seed=3):
    c = model.config
    tc = Transcoder(c.n_layer, c.n_embd, 16, 4, cross)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for layer in range(c.n_layer):
            tc.W_enc[layer].copy_(torch.randn(c.n_embd, 16, generator=g) * 0.3)
            tc.b_enc[layer].copy_(torch.randn(16, generator=g) * 0.1)
            tc.W_dec[layer].copy_(torch.randn(tc.W_dec[layer].shape, generator=g) * 0.2)
            tc.b_dec[layer].copy_(torch.randn(c.n_embd, generator=g) * 0.1)
    return tc.requires_grad_(False)


@pytest.mark.parametrize("cross,layers", [(False, None), (True, None), (True, [1, 3])],
                         ids=["per-layer, every MLP", "cross-layer, every MLP", "cross-layer, MLPs 1 and 3"])
def test_the_replaced_model_equals_a_plain_forward_with_the_mlps_swapped(shakespeare, cross, layers):
    model, tok = shakespeare.model, shakespeare.tokenizer
    tc = small_transcoder_for(model, cross)
    rows = [tok.encode("To be, or not to be: that is")[:9], tok.encode("Friends, Romans, countrymen, lend")[:9]]
    x = torch.tensor(rows)
    got = trace(model, x, edits=tc.replacement_edits(layers)).logits
    chosen = range(model.config.n_layer) if layers is None else layers
    want = plain_forward(model, x, tc, layers=set(chosen))
    torch.testing.assert_close(got.double(), want, atol=2e-4, rtol=1e-4)
    plain = plain_forward(model, x)
    assert float((want - plain).abs().max()) > 0.1  # the swap changes the logits: the comparison means something
    torch.testing.assert_close(trace(model, x).logits.double(), plain, atol=2e-4, rtol=1e-4)


def test_replacement_edits_read_and_write_the_mlps_own_hooks(shakespeare):
    model = shakespeare.model
    tc = small_transcoder_for(model, True)
    edits = tc.replacement_edits([2])
    assert set(edits) == {input_hook(0), input_hook(1), input_hook(2), output_hook(2)}
    assert input_hook(2) == "blocks.2.ln2.hook_out" and output_hook(2) == "blocks.2.hook_mlp_out"
    got = {}
    x = torch.tensor([shakespeare.tokenizer.encode("Now is the winter")])
    tr = trace(model, x, edits=tc.replacement_edits(features=got))
    for layer in range(model.config.n_layer):
        torch.testing.assert_close(got[layer], tc.encode(layer, tr[input_hook(layer)]))
        torch.testing.assert_close(tr[output_hook(layer)], tc.decode(layer, [got[s] for s in range(layer + 1)]))


# --------------------------------------------------------------------------- the file
@pytest.mark.parametrize("cross", [False, True], ids=["per-layer", "cross-layer"])
def test_the_file_round_trips_and_says_what_it_holds(tmp_path, cross):
    tc = random_transcoder(cross)
    tc.meta.update(model="toy", figures={"fvu": [0.1, 0.2, 0.3]})
    tc.save(tmp_path / "a.safetensors", dtype=torch.float32)
    back = load_transcoder(tmp_path / "a.safetensors")
    assert (back.n_layer, back.d_model, back.n_features, back.k, back.cross_layer) == (3, 8, 12, 3, cross)
    assert back.meta["model"] == "toy" and back.meta["figures"] == {"fvu": [0.1, 0.2, 0.3]}
    for a, b in zip(tc.parameters(), back.parameters()):
        assert torch.equal(a.detach(), b)
    tc.save(tmp_path / "h.safetensors")
    half = load_transcoder(tmp_path / "h.safetensors")
    for a, b in zip(tc.parameters(), half.parameters()):
        assert torch.equal(a.detach().half().float(), b)
    assert transcoder_path("shakespeare", cross).name == ("shakespeare.clt.transcoder.safetensors" if cross
                                                          else "shakespeare.transcoder.safetensors")


def _write(path, header, tensors):
    safetensors.torch.save_file(tensors, str(path), metadata=header)


@pytest.mark.parametrize("change,message", [
    ({"format": "gptviz-sae-1"}, "is not a gptviz transcoder"),
    ({"n_features": "99999999999"}, "n_features='99999999999'"),
    ({"n_layer": "0"}, "n_layer='0'"),
    ({"k": "13"}, "k='13'"),
    ({"d_model": "-8"}, "d_model='-8'"),
    ({"cross_layer": "yes"}, "cross_layer='yes'"),
    ({"n_layer": "4"}, "does not hold the tensors its header names"),
    ({"d_model": "9"}, "W_enc_0 is [8, 12], not [9, 12]"),
])
def test_a_bad_header_is_refused_by_name_before_any_weight_is_read(tmp_path, monkeypatch, change, message):
    tc = random_transcoder(True)
    tensors = {f"{n}_{layer}": getattr(tc, n)[layer].detach().clone() for layer in range(3)
               for n in ("W_enc", "b_enc", "W_dec", "b_dec")}
    _write(tmp_path / "t.safetensors", {**tc.header(), **change}, tensors)

    def no_read(*a, **k):
        raise AssertionError("the weights were read before the header was checked")

    monkeypatch.setattr(tc_mod.safetensors.torch, "load_file", no_read)
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_transcoder(tmp_path / "t.safetensors")


def test_a_file_too_big_or_not_safetensors_is_refused(tmp_path, monkeypatch):
    (tmp_path / "junk.safetensors").write_bytes(b"\x00" * 100)
    with pytest.raises(ValueError, match="is not a readable safetensors file"):
        load_transcoder(tmp_path / "junk.safetensors")
    with pytest.raises(ValueError, match="there is no transcoder file"):
        load_transcoder(tmp_path / "absent.safetensors")
    random_transcoder(False).save(tmp_path / "ok.safetensors")
    monkeypatch.setattr(tc_mod, "MAX_FILE_BYTES", 100)
    with pytest.raises(ValueError, match="a transcoder file may be at most 100"):
        load_transcoder(tmp_path / "ok.safetensors")


def test_out_of_range_layers_and_features_are_refused():
    tc = random_transcoder(True)
    for bad in (-1, 3, True, 1.0):
        with pytest.raises(ValueError, match="there is no layer"):
            tc.encode(bad, torch.zeros(8))
    with pytest.raises(ValueError, match="there is no feature 12"):
        tc.decoder_row(0, 12)
    with pytest.raises(ValueError, match="reads vectors of 8 numbers, not 7"):
        tc.encode(0, torch.zeros(7))
    with pytest.raises(ValueError, match="k=13"):
        Transcoder(3, 8, 12, 13, False)
    assert tc.decoder_row(1, 5).shape == (2, 8)


# --------------------------------------------------------------------------- training
def test_the_training_loss_and_its_aux_term_equal_their_definitions():
    tc = random_transcoder(True, L=2, d=6, F_=10, k=2)
    g = torch.Generator().manual_seed(5)
    x, y = torch.randn(7, 2, 6, generator=g), torch.randn(7, 2, 6, generator=g)
    dead = torch.zeros(2, 10, dtype=torch.bool)
    dead[1, [0, 3, 4, 8]] = True
    fvu, aux, fired = train_mod.losses(tc, x, y, dead, aux_k=3)
    fvu_value = float(fvu.detach())
    feats = [features_by_hand(tc, layer, x[:, layer]) for layer in range(2)]
    want_fvu, want_aux = 0.0, 0.0
    for layer in range(2):
        y_hat = output_by_hand(tc, layer, feats)
        var = (y[:, layer] - y[:, layer].mean(0)).pow(2).sum(-1).mean()
        want_fvu += float((y_hat - y[:, layer]).pow(2).sum(-1).mean() / var)
        if layer == 1:  # only layer 1 has dead features: its 3 strongest dead pre-activations rebuild its error
            err = y[:, 1] - y_hat
            pre = x[:, 1] @ tc.W_enc[1].detach() + tc.b_enc[1].detach()
            e_hat = torch.zeros_like(err)
            for r in range(7):
                cands = sorted([j for j in range(10) if dead[1, j]], key=lambda j: -float(pre[r, j]))[:3]
                for j in cands:
                    e_hat[r] += max(float(pre[r, j]), 0.0) * tc.W_dec[1][j, 0].detach()
            want_aux += float((e_hat - err).pow(2).sum(-1).mean() / err.pow(2).sum(-1).mean())
    assert fvu_value == pytest.approx(want_fvu, rel=1e-5)
    assert float(aux.detach()) == pytest.approx(want_aux, rel=1e-5)
    assert torch.equal(fired, torch.stack([(f > 0).any(0) for f in feats]))
    # the aux term's gradient reaches the dead features' encoders, never a live one's
    tc.zero_grad()
    aux.backward()
    grad = tc.W_enc[1].grad.abs().sum(0)
    assert bool((grad[~dead[1]] == 0).all()) and bool((grad[dead[1]] > 0).any())
    assert tc.W_enc[0].grad is None or float(tc.W_enc[0].grad.abs().sum()) == 0


def test_training_recovers_a_planted_sparse_map():
    """Inputs made of 2 of 24 directions each, and 'MLP outputs' that are the same 2 coefficients on 24 other
    directions: a transcoder with k=2 learns the map (the FVU falls from about 1 to under 0.3 a layer in 300
    steps); every feature's decoder is unit-norm, and the history is recorded."""
    g = torch.Generator().manual_seed(7)
    L, d, n, atoms = 2, 16, 4096, 24
    x, y = torch.zeros(n, L, d), torch.zeros(n, L, d)
    for layer in range(L):
        A = torch.randn(atoms, d, generator=g)
        A = A / A.norm(dim=-1, keepdim=True)
        D = torch.randn(atoms, d, generator=g)
        idx = torch.stack([torch.randperm(atoms, generator=g)[:2] for _ in range(n)])
        c = torch.zeros(n, atoms).scatter(-1, idx, torch.rand(n, 2, generator=g) + 0.5)
        x[:, layer], y[:, layer] = c @ A, c @ D
    cfg = train_mod.TranscoderTrainConfig(n_features=32, k=2, steps=300, batch_size=256, lr=2e-2, seed=0)
    with torch.no_grad():
        start = float(train_mod.losses(train_mod.init_transcoder(x, y, cfg), x, y, None, 1)[0]) / L
    tc, hist = train_mod.train_transcoder(x, y, cfg, progress_every=100)
    assert [r["step"] for r in hist] == [100, 200, 300]
    with torch.no_grad():
        end = float(train_mod.losses(tc, x, y, None, 1)[0]) / L
    assert start > 0.9 and end < 0.3, (start, end)
    for W in tc.W_dec:
        torch.testing.assert_close(W.pow(2).sum((1, 2)), torch.ones(32))
    assert tc.meta["train_config"]["k"] == 2 and not tc.W_enc[0].requires_grad


def test_collected_pairs_are_the_mlps_own_inputs_and_outputs(shakespeare):
    model, tok = shakespeare.model, shakespeare.tokenizer
    ids = torch.tensor(tok.encode("O Romeo, Romeo! wherefore art thou Romeo? Deny thy father and refuse thy name"))
    ins, outs = train_mod.collect_mlp_pairs(model, ids, n_tokens=50, T=16, batch=2, seed=1)
    assert ins.shape == outs.shape == (50, 4, 128)
    g = torch.Generator().manual_seed(1)
    starts = torch.randint(0, ids.numel() - 16, (2,), generator=g).tolist()
    tr = trace(model, torch.stack([ids[s:s + 16] for s in starts]))
    for layer in (0, 3):
        torch.testing.assert_close(ins[:32, layer], tr[input_hook(layer)].reshape(-1, 128))
        torch.testing.assert_close(outs[:32, layer], tr[output_hook(layer)].reshape(-1, 128))
    # the second batch of windows continues the stream of random starts
    starts2 = torch.randint(0, ids.numel() - 16, (2,), generator=g).tolist()
    tr2 = trace(model, torch.stack([ids[s:s + 16] for s in starts2]))
    torch.testing.assert_close(outs[32:50, 2], tr2[output_hook(2)].reshape(-1, 128)[:18])


def test_the_evaluation_equals_its_definitions_on_held_out_windows(shakespeare):
    model, tok = shakespeare.model, shakespeare.tokenizer
    tc = small_transcoder_for(model, True)
    text = "Is this a dagger which I see before me, the handle toward my hand? Come, let me clutch thee."
    ids = torch.tensor(tok.encode(text))
    wins = torch.stack([ids[0:13], ids[10:23], ids[20:33]])
    fig = train_mod.evaluate_transcoder(model, tc, wins, batch=2)  # two batches: the sums carry across them
    x, y = wins[:, :-1], wins[:, 1:]
    tr = trace(model, x)
    for layer in range(4):
        inp = tr[input_hook(layer)].reshape(-1, 128)
        out = tr[output_hook(layer)].reshape(-1, 128).double()
        feats = [tc.encode(s, tr[input_hook(s)].reshape(-1, 128)) for s in range(4)]
        err = (tc.decode(layer, feats).double() - out).pow(2).sum()
        assert fig["fvu"][layer] == pytest.approx(float(err / (out - out.mean(0)).pow(2).sum()), rel=1e-6)
        assert fig["l0"][layer] == pytest.approx(float((tc.encode(layer, inp) > 0).sum(-1).double().mean()))
        fired = (tc.encode(layer, inp) > 0).any(0)
        assert fig["dead_fraction"][layer] == pytest.approx(1 - float(fired.double().mean()))
    logits = plain_forward(model, x, tc, layers=set(range(4)))
    want = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
    assert fig["replaced_loss_per_token"] == pytest.approx(float(want), rel=1e-4)
    clean = F.cross_entropy(plain_forward(model, x).reshape(-1, logits.shape[-1]), y.reshape(-1))
    assert fig["loss_per_token"] == pytest.approx(float(clean), rel=1e-5)
    assert fig["tokens"] == y.numel() and fig["windows"] == 3


def test_snippets_round_trip_per_layer_and_a_missing_layer_is_refused(tmp_path, monkeypatch):
    per_layer = [{"ids": torch.full((4, 2, 3), layer, dtype=torch.int32), "peak": torch.rand(4, 2)}
                 for layer in range(3)]
    tc_mod.save_snippets(tmp_path / "s.safetensors", per_layer, {"model": "toy", "plays": ["hamlet"]})
    back, meta = tc_mod.load_snippets(tmp_path / "s.safetensors", 3)
    assert meta == {"model": "toy", "plays": ["hamlet"]}
    for layer in range(3):
        assert torch.equal(back[layer]["ids"], per_layer[layer]["ids"])
        assert torch.equal(back[layer]["peak"], per_layer[layer]["peak"])
    with pytest.raises(ValueError, match="does not hold snippets for every one of the 4 layers"):
        tc_mod.load_snippets(tmp_path / "s.safetensors", 4)
    monkeypatch.setattr(tc_mod, "MAX_FILE_BYTES", 10)
    with pytest.raises(ValueError, match="a snippets file may be at most 10"):
        tc_mod.load_snippets(tmp_path / "s.safetensors", 3)
    assert tc_mod.snippets_path("shakespeare", True).name == "shakespeare.clt.transcoder.snippets.safetensors"


@pytest.mark.parametrize("cross", [False, True], ids=["per-layer", "cross-layer"])
def test_the_shipped_transcoders_belong_to_the_shipped_model_and_meet_their_goals(shakespeare, cross):
    """The files record the figures their command measured on all the held-out plays; here: the goals of issue 34
    (L0 at most 40 a layer, at most 10 % dead, the cross-layer one in place of every MLP within +0.25 nats/char of
    the model), the model they were trained on (its file's SHA-256), and, on 4 held-out windows, the loss with the
    transcoder in place of every MLP recomputed by the plain-PyTorch oracle, equal to what the evaluation gives."""
    import hashlib

    from gptviz.text import corpus
    from gptviz.training.sae import windows

    tc = load_transcoder(transcoder_path("shakespeare", cross))
    assert tc.cross_layer == cross and (tc.n_layer, tc.d_model) == (4, 128)
    assert tc.meta["model_sha256"] == hashlib.sha256((CHECKPOINTS / "shakespeare.safetensors").read_bytes()).hexdigest()
    fig = tc.meta["figures"]
    assert max(fig["l0"]) <= 40 and max(fig["dead_fraction"]) <= 0.10
    assert fig["loss_nats_per_char"] == pytest.approx(1.4513, abs=1e-4)
    if cross:
        assert fig["delta_nats_per_char"] <= 0.25
    model, tok = shakespeare.model, shakespeare.tokenizer
    val = windows(torch.from_numpy(corpus.encoded("val", tok).astype("int64")), 128)[[0, 300, 600, 900], :33]
    got = train_mod.evaluate_transcoder(model, tc, val)
    x, y = val[:, :-1], val[:, 1:]
    logits = plain_forward(model, x, tc, layers=range(4))
    want = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
    assert got["replaced_loss_per_token"] == pytest.approx(float(want), rel=1e-4)
