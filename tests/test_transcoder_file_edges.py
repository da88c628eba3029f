"""The edges of a gptviz transcoder file and of ``Transcoder`` itself (gptviz/interp/transcoder.py), each checked
exactly: the smallest transcoder saved and read back, a file exactly at the size limit, the full text of each
refusal, the metadata read back without the header's own keys, the repr of each rule. Files are written here with
``Transcoder.save`` or, for broken ones, with safetensors directly."""
import pytest
import safetensors.torch
import torch

import gptviz.interp.transcoder as transcoder
from gptviz.interp.transcoder import FORMAT, Transcoder, load_transcoder


def test_the_smallest_transcoder_is_saved_and_read_back(tmp_path):
    tc = Transcoder(1, 1, 1, 1, False, {"model": "m", "figures": {"fvu": [0.5]}})
    assert tc.header()["model"] == "m"  # a string stays as it is; anything else is JSON
    assert tc.header()["figures"] == '{"fvu": [0.5]}'
    tc.save(tmp_path / "t.safetensors")
    back = load_transcoder(tmp_path / "t.safetensors")
    assert (back.n_layer, back.d_model, back.n_features, back.k, back.activation) == (1, 1, 1, 1, "topk")
    assert back.meta == {"model": "m", "figures": {"fvu": [0.5]}}  # none of the header's own keys
    assert not any(p.requires_grad for p in back.parameters()) and not back.training


def test_a_file_exactly_at_the_size_limit_is_read(tmp_path, monkeypatch):
    Transcoder(2, 3, 4, 2, True).save(tmp_path / "t.safetensors")
    size = (tmp_path / "t.safetensors").stat().st_size
    monkeypatch.setattr(transcoder, "MAX_FILE_BYTES", size)
    assert load_transcoder(tmp_path / "t.safetensors").n_layer == 2
    monkeypatch.setattr(transcoder, "MAX_FILE_BYTES", size - 1)
    with pytest.raises(ValueError, match=f"^t.safetensors is {size:,} bytes: a transcoder file may be at most "):
        load_transcoder(tmp_path / "t.safetensors")


def write(path, header, tensors=None):
    safetensors.torch.save_file(tensors or {"x": torch.zeros(1)}, str(path), metadata=header)
    return path


def refusal(path) -> str:
    with pytest.raises(ValueError) as err:
        load_transcoder(path)
    return str(err.value)


def test_each_refusal_of_a_file_in_full(tmp_path):
    assert refusal(write(tmp_path / "a.safetensors", {"format": "other"})) == (
        "a.safetensors is not a gptviz transcoder (its format is 'other', not 'gptviz-transcoder-1')")
    base = {"format": FORMAT, "n_layer": "3", "d_model": "2", "n_features": "2", "k": "1", "cross_layer": "1"}
    assert refusal(write(tmp_path / "b.safetensors", dict(base, activation="gelu"))) == (
        "the transcoder's header says activation='gelu': it must be one of topk, relu, jumprelu")
    assert refusal(write(tmp_path / "c.safetensors", base, {f"extra_{j}": torch.zeros(1) for j in range(6)})) == (
        "c.safetensors does not hold the tensors its header names (missing: ['W_dec_0', 'W_dec_1', 'W_dec_2', "
        "'W_enc_0'], unexpected: ['extra_0', 'extra_1', 'extra_2', 'extra_3'])")


def test_each_refusal_of_a_shape_or_rule_in_full():
    for args, want in (((0, 2, 2, 1, True), "n_layer=0 must be a whole number from 1 to 128"),
                       ((1, 0, 2, 1, True), "d_model=0 must be a whole number from 1 to 65536"),
                       ((1, 2, 0, 1, True), "n_features=0 must be a whole number from 1 to 65536")):
        with pytest.raises(ValueError) as err:
            Transcoder(*args)
        assert str(err.value) == want
    with pytest.raises(ValueError) as err:
        Transcoder(1, 2, 2, None, True, activation="gelu")
    assert str(err.value) == "activation='gelu': choose one of topk, relu, jumprelu"


def test_the_repr_names_the_kind_and_the_rule():
    assert repr(Transcoder(4, 128, 1024, 32, True)) == \
        "Transcoder(cross-layer, n_layer=4, d_model=128, n_features=1024, k=32)"
    assert repr(Transcoder(2, 8, 16, None, False, activation="jumprelu")) == \
        "Transcoder(per-layer, n_layer=2, d_model=8, n_features=16, activation='jumprelu')"


@pytest.mark.parametrize("raw", ["+1", "²", None, "1.0", " "])
def test_a_header_count_that_is_not_plain_digits_is_refused_in_full(tmp_path, raw):
    """'+1' and '1.0' would parse as numbers, '²' is a digit that int() cannot read, and a missing count is None:
    each is refused with the same sentence, before any weight is read."""
    base = {"format": FORMAT, "n_layer": "1", "d_model": "2", "n_features": "2", "k": "1", "cross_layer": "0"}
    header = dict(base, n_layer=raw) if raw is not None else {k: v for k, v in base.items() if k != "n_layer"}
    assert refusal(write(tmp_path / "h.safetensors", header)) == (
        f"the transcoder's header says n_layer={raw!r}: it must be a whole number from 1 to 128")


def test_a_decoder_row_is_asked_by_a_whole_feature_number_in_range():
    tc = Transcoder(2, 3, 4, 2, True)
    with torch.no_grad():
        tc.W_dec[1].copy_(torch.arange(4 * 1 * 3, dtype=torch.float32).reshape(4, 1, 3))
    assert torch.equal(tc.decoder_row(1, 0), torch.tensor([[0.0, 1.0, 2.0]]))  # feature 0 is a feature
    assert torch.equal(tc.decoder_row(1, 3), torch.tensor([[9.0, 10.0, 11.0]]))
    assert tc.decoder_row(0, 2).shape == (2, 3)  # a cross-layer feature of layer 0 reaches both outputs
    for bad in (4, -1, True, 1.0):
        with pytest.raises(ValueError) as err:
            tc.decoder_row(1, bad)
        assert str(err.value) == f"there is no feature {bad!r}: each layer has 4 (0 to 3)"


def test_snippets_live_beside_their_transcoder_in_any_folder(tmp_path):
    assert transcoder.snippets_path("m", True, tmp_path) == tmp_path / "m.clt.transcoder.snippets.safetensors"
    assert transcoder.snippets_path("m", False, tmp_path) == tmp_path / "m.transcoder.snippets.safetensors"
    assert transcoder.snippets_path("m", False).parent == transcoder.transcoder_path("m", False).parent


def test_a_snippets_file_keeps_only_its_layers_keys_and_may_be_exactly_at_the_limit(tmp_path, monkeypatch):
    """Keys of other layers ('L2' for a 2-layer model), of no layer ('note', 'L.x', 'X1.ids') and every layer's own
    ('L0.ids', 'L1.peak'): only the last are read; a file of exactly the size limit is read."""
    path = tmp_path / "s.safetensors"
    tensors = {"L0.ids": torch.arange(3), "L1.peak": torch.ones(2), "L2.ids": torch.zeros(1), "note": torch.ones(1),
               "L.x": torch.ones(1), "X1.ids": torch.ones(1)}
    safetensors.torch.save_file(tensors, str(path), metadata={"model": '"m"'})
    monkeypatch.setattr(transcoder, "MAX_FILE_BYTES", path.stat().st_size)
    per_layer, meta = transcoder.load_snippets(path, 2)
    assert [sorted(d) for d in per_layer] == [["ids"], ["peak"]]
    assert torch.equal(per_layer[0]["ids"], torch.arange(3)) and meta == {"model": "m"}


def test_a_count_given_as_true_is_refused_and_a_layer_out_of_range_is_named_in_full():
    with pytest.raises(ValueError) as err:
        Transcoder(True, 2, 2, 1, False)
    assert str(err.value) == "n_layer=True must be a whole number from 1 to 128"
    tc = Transcoder(4, 2, 3, 1, True)
    for bad in (4, -1, True):
        with pytest.raises(ValueError) as err:
            tc.decode(bad, [])
        assert str(err.value) == f"there is no layer {bad!r}: this transcoder has layers 0 to 3"


def test_decode_reads_a_short_list_as_zeros_and_names_a_wrong_width_in_full():
    tc = Transcoder(3, 2, 4, 2, True)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for W in (*tc.W_dec, *tc.b_dec):
            W.copy_(torch.randn(W.shape, generator=g))
    f0 = torch.rand(5, 4, generator=g)
    torch.testing.assert_close(tc.decode(2, [f0]), tc.decode(2, [f0, None, None]))  # later layers missing: zero
    torch.testing.assert_close(tc.decode(2, [f0]), tc.b_dec[2].detach() + f0 @ tc.W_dec[0][:, 2].detach())
    # float64 inputs are read in the transcoder's own dtype
    torch.testing.assert_close(tc.decode(1, [f0.double(), None]), tc.decode(1, [f0, None]))
    x = torch.rand(5, 2, generator=g, dtype=torch.float64)
    torch.testing.assert_close(tc.pre_acts(0, x), tc.pre_acts(0, x.float()))
    for bad in (torch.zeros(2, 3), torch.zeros(1, 2, 3)):
        with pytest.raises(ValueError) as err:
            tc.decode(0, [bad])
        assert str(err.value) == "this transcoder has 4 features a layer, not 3"


def test_a_per_layer_replacement_encodes_only_the_layers_it_replaces():
    from gptviz import GPT, ModelConfig
    from gptviz.run.trace import trace

    model = GPT(ModelConfig(vocab_size=11, block_size=8, n_layer=3, n_head=2, n_embd=4))
    for cross, want in ((False, [2]), (True, [0, 1, 2])):
        seen: dict = {}
        tc = Transcoder(3, 4, 5, 2, cross)
        trace(model, torch.tensor([[1, 2, 3]]), edits=tc.replacement_edits(layers=[2], features=seen))
        assert sorted(seen) == want and seen[2].shape == (1, 3, 5)
