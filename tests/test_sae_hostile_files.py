"""An SAE file is checked before anything is allocated (issue 33): a header's sizes are compared with the file's
own tensor shapes first, so a 400-byte file that claims d_model = n_features = 65,536 (two 17 GB matrices) is
refused at once; a header value nested too deeply to read is a ValueError naming it, not a RecursionError."""
import pytest
import safetensors.torch
import torch

from gptviz.interp import sae as sae_module
from gptviz.interp.sae import FORMAT, load_sae


def write(path, d: int, n: int, header_d: int, header_n: int, **extra) -> None:
    """A small SAE file: tensors of d × n, a header that says header_d × header_n, and ``extra`` header keys."""
    tensors = {"W_enc": torch.zeros(d, n, dtype=torch.float16), "b_enc": torch.zeros(n, dtype=torch.float16),
               "W_dec": torch.zeros(n, d, dtype=torch.float16), "b_dec": torch.zeros(d, dtype=torch.float16)}
    header = {"format": FORMAT, "hook": "blocks.0.hook_resid_pre", "kind": "relu", "k": "0",
              "d_model": str(header_d), "n_features": str(header_n), **extra}
    safetensors.torch.save_file(tensors, str(path), metadata=header)


class NeverBuilt:
    """Stands in for the SAE class: building one (allocating its matrices) fails the test."""

    def __init__(self, *a, **k):
        raise AssertionError(f"an SAE was allocated for a file that should be refused first: {a}")


def test_a_header_claiming_huge_sizes_is_refused_before_any_allocation(tmp_path, monkeypatch):
    f = tmp_path / "bomb.safetensors"
    write(f, 2, 3, 65_536, 65_536)
    assert f.stat().st_size < 1_000
    monkeypatch.setattr(sae_module, "SparseAutoencoder", NeverBuilt)
    with pytest.raises(ValueError, match=r"W_enc has shape \(2, 3\), not \(65536, 65536\)"):
        load_sae(f)


@pytest.mark.parametrize("d, n, hd, hn, wrong", [(4, 8, 4, 9, "W_enc"), (4, 8, 5, 8, "W_enc"), (4, 8, 8, 4, "W_enc")])
def test_every_size_the_header_states_must_match_its_tensor(tmp_path, monkeypatch, d, n, hd, hn, wrong):
    f = tmp_path / "s.safetensors"
    write(f, d, n, hd, hn)
    monkeypatch.setattr(sae_module, "SparseAutoencoder", NeverBuilt)
    with pytest.raises(ValueError, match=f"{wrong} has shape"):
        load_sae(f)


def test_a_mismatched_decoder_alone_is_refused_before_allocation(tmp_path, monkeypatch):
    """The encoder agrees with the header, the decoder (n × d) is transposed: refused by the decoder's name."""
    f = tmp_path / "t.safetensors"
    tensors = {"W_enc": torch.zeros(4, 8), "b_enc": torch.zeros(8), "W_dec": torch.zeros(4, 8), "b_dec": torch.zeros(4)}
    safetensors.torch.save_file(tensors, str(f), metadata={"format": FORMAT, "hook": "h", "kind": "relu", "k": "0",
                                                           "d_model": "4", "n_features": "8"})
    monkeypatch.setattr(sae_module, "SparseAutoencoder", NeverBuilt)
    with pytest.raises(ValueError, match=r"W_dec has shape \(4, 8\), not \(8, 4\)"):
        load_sae(f)


def test_a_deeply_nested_header_value_is_a_value_error_naming_it(tmp_path):
    f = tmp_path / "deep.safetensors"
    write(f, 2, 3, 2, 3, notes="[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match="'notes' is nested too deeply"):
        load_sae(f)


def test_a_good_small_file_still_loads_with_its_metadata(tmp_path):
    f = tmp_path / "ok.safetensors"
    write(f, 2, 3, 2, 3, notes='{"a": [1, 2]}', label="plain words")
    sae = load_sae(f)
    assert (sae.d_model, sae.n_features, sae.kind) == (2, 3, "relu")
    assert sae.meta == {"notes": {"a": [1, 2]}, "label": "plain words"}
    assert sae.W_enc.dtype == torch.float32 and tuple(sae.W_dec.shape) == (3, 2)
