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
