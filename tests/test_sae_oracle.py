"""``gptviz.interp.sae`` piece by piece against oracles written out here: the SAE's maps from its raw weights in
plain torch, its file read back with safetensors itself, its labels and snippets files, the logits a direction
promotes through an explicit centring matrix, and steering and greedy generation against a torch forward hook on
the model's own module. Every check runs on tiny hand-made SAEs and models (well under a second each)."""
import json
import re

import numpy as np
import pytest
import safetensors.torch
import torch
from conftest import CONFIGS
from safetensors import safe_open

import gptviz.interp.sae as sae_mod
from gptviz import GPT
from gptviz.interp.sae import (
    FORMAT,
    MAX_FEATURES,
    SparseAutoencoder,
    direction_logits,
    greedy,
    labels_path,
    load_sae,
    load_snippets,
    read_labels,
    sae_path,
    save_snippets,
    snippets_path,
    steering_edit,
)
from gptviz.paths import CHECKPOINTS

HOOK = "blocks.1.hook_resid_pre"


def random_sae(d=6, F=10, k=3, kind="topk", seed=0, meta=None):
    """An SAE with random weights (biases too), so that every term of every map matters."""
    g = torch.Generator().manual_seed(seed)
    sae = SparseAutoencoder(d, F, HOOK, kind, k, meta)
    with torch.no_grad():
        sae.W_enc.copy_(torch.randn(d, F, generator=g))
        sae.b_enc.copy_(torch.randn(F, generator=g) * 0.5)
        sae.W_dec.copy_(torch.randn(F, d, generator=g))
        sae.b_dec.copy_(torch.randn(d, generator=g) * 0.3)
    return sae


def raw(sae):
    return {n: getattr(sae, n).detach().clone() for n in ("W_enc", "b_enc", "W_dec", "b_dec")}


def write_sae_file(path, tensors, header):
    safetensors.torch.save_file({k: v.contiguous() for k, v in tensors.items()}, str(path), metadata=header)


def good_header(d=6, F=10, k=3, kind="topk"):
    return {"format": FORMAT, "hook": HOOK, "kind": kind, "k": str(k), "d_model": str(d), "n_features": str(F)}


def good_tensors(d=6, F=10):
    g = torch.Generator().manual_seed(1)
    return {"W_enc": torch.randn(d, F, generator=g), "b_enc": torch.randn(F, generator=g),
            "W_dec": torch.randn(F, d, generator=g), "b_dec": torch.randn(d, generator=g)}


@pytest.fixture
def one_thread():
    """Tiny models on one thread (on a busy machine OpenMP's threads make each small op slow), the count restored."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# --------------------------------------------------------------------------- the constructor
def test_a_new_sae_has_zero_weights_of_the_right_shapes_and_its_own_copy_of_the_meta():
    meta = {"model": "m"}
    sae = SparseAutoencoder(5, 7, HOOK, "topk", 2, meta)
    meta["model"] = "changed"
    assert sae.meta == {"model": "m"}
    assert (sae.d_model, sae.n_features, sae.hook, sae.kind, sae.k) == (5, 7, HOOK, "topk", 2)
    shapes = {n: tuple(getattr(sae, n).shape) for n in ("W_enc", "b_enc", "W_dec", "b_dec")}
    assert shapes == {"W_enc": (5, 7), "b_enc": (7,), "W_dec": (7, 5), "b_dec": (5,)}
    assert all(float(getattr(sae, n).detach().abs().sum()) == 0.0 for n in shapes)
    default = SparseAutoencoder(5, 40, HOOK)
    assert default.meta == {} and default.kind == "topk" and default.k == 32
    relu = SparseAutoencoder(5, 7, HOOK, "relu", 4)
    assert relu.k is None  # a ReLU SAE keeps no k, whatever it was given
    assert repr(sae) == (f"SparseAutoencoder({HOOK!r}, d_model=5, n_features=7, kind='topk', k=2)")
    assert repr(relu) == f"SparseAutoencoder({HOOK!r}, d_model=5, n_features=7, kind='relu', k=None)"


def test_the_sizes_and_k_are_checked_at_their_limits_with_a_message_that_says_which():
    SparseAutoencoder(65_536, 1, HOOK, "topk", 1)  # the largest d_model
    SparseAutoencoder(1, MAX_FEATURES, HOOK, "topk", MAX_FEATURES)  # the most features, and k = n_features
    assert MAX_FEATURES == 65_536
    for d, n in ((0, 4), (65_537, 1), (4, 0), (1, MAX_FEATURES + 1)):
        with pytest.raises(ValueError, match=rf"^an SAE of d_model={d} and n_features={n} is out of range$"):
            SparseAutoencoder(d, n, HOOK, "topk", 1)
    for k in (None, 0, 9):
        with pytest.raises(ValueError, match=rf"^a TopK SAE needs 1 <= k <= n_features, not k={k!r}$"):
            SparseAutoencoder(4, 8, HOOK, "topk", k)
    assert SparseAutoencoder(4, 8, HOOK, "topk", 8).k == 8 and SparseAutoencoder(4, 8, HOOK, "topk", 1).k == 1
    assert SparseAutoencoder(4, 8, HOOK, "relu", None).kind == "relu"  # a ReLU SAE needs no k
    with pytest.raises(ValueError, match=r"^kind='sigmoid' must be one of topk, relu, jumprelu$"):
        SparseAutoencoder(4, 8, HOOK, "sigmoid", 2)


# --------------------------------------------------------------------------- the maps
def test_relu_encode_is_relu_of_the_hand_computed_pre_activations_on_every_row_of_a_batch():
    """Oracle: relu((x - b_dec) @ W_enc + b_enc) from the raw weights, written out per row with a loop over
    features, on a (2, 3, d) batch of float64 vectors (the SAE reads them as float32)."""
    sae = random_sae(kind="relu", seed=2)
    W = raw(sae)
    x = torch.randn(2, 3, 6, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    want = torch.zeros(2, 3, 10)
    for b in range(2):
        for t in range(3):
            xc = x[b, t].float() - W["b_dec"]
            for i in range(10):
                want[b, t, i] = max(float((xc * W["W_enc"][:, i]).sum() + W["b_enc"][i]), 0.0)
    got = sae.encode(x)
    assert got.dtype == torch.float32 and got.shape == (2, 3, 10)
    assert torch.allclose(got, want, atol=1e-5)
    assert bool((got == 0).any()) and bool((got > 0).sum() > 12)  # both sides of the ReLU happen
    assert torch.allclose(sae.pre_acts(x[1]), (x[1].float() - W["b_dec"]) @ W["W_enc"] + W["b_enc"], atol=1e-5)


def test_topk_encode_keeps_the_k_largest_positive_pre_activations_of_every_row_given_as_a_list():
    """Oracle: for each row, sort the pre-activations and keep those at or above the k-th largest that are
    positive (the inputs are plain lists, as a caller may pass them)."""
    sae = random_sae(k=3, seed=4)
    W = raw(sae)
    xs = torch.randn(4, 6, generator=torch.Generator().manual_seed(5)) * 2
    got = sae.encode(xs.tolist())
    for r in range(4):
        pre = (xs[r] - W["b_dec"]) @ W["W_enc"] + W["b_enc"]
        kth = sorted(pre.tolist(), reverse=True)[2]
        want = torch.where((pre >= kth) & (pre > 0), pre, torch.zeros(()))
        assert torch.allclose(got[r], want, atol=1e-5), r
    assert int((got > 0).sum(-1).max()) == 3


def test_decode_and_reconstruct_match_the_raw_weights_for_any_features():
    sae = random_sae(seed=6)
    W = raw(sae)
    f = torch.rand(2, 4, 10, dtype=torch.float64)  # dense features, float64, a batch of sequences
    got = sae.decode(f)
    assert got.dtype == torch.float32
    assert torch.allclose(got, f.float() @ W["W_dec"] + W["b_dec"], atol=1e-5)
    assert torch.allclose(sae.decode(f[0, 0].tolist()), f[0, 0].float() @ W["W_dec"] + W["b_dec"], atol=1e-5)
    x = torch.randn(3, 6, generator=torch.Generator().manual_seed(7))
    pre = (x - W["b_dec"]) @ W["W_enc"] + W["b_enc"]
    top = torch.relu(pre).topk(3, dim=-1)
    feats = torch.zeros_like(pre).scatter(-1, top.indices, top.values)
    assert torch.allclose(sae.reconstruct(x), feats @ W["W_dec"] + W["b_dec"], atol=1e-5)


def test_vectors_of_the_wrong_width_are_refused_with_the_width_in_the_message():
    sae = random_sae()
    with pytest.raises(ValueError, match=r"^this SAE reads vectors of 6 numbers, not 5$"):
        sae.encode(torch.zeros(2, 3, 5))  # a batch of sequences: the width is the last dimension
    with pytest.raises(ValueError, match=r"^this SAE has 10 features, not 6$"):
        sae.decode(torch.zeros(4, 2, 6))


def test_direction_is_the_decoder_row_detached_and_a_feature_out_of_range_is_named():
    sae = random_sae(seed=8)
    sae.requires_grad_(True)
    for i in (0, 4, 9):
        d = sae.direction(i)
        assert torch.equal(d, sae.W_dec.detach()[i]) and not d.requires_grad
    for bad in (-1, 10):
        with pytest.raises(ValueError, match=rf"^there is no feature {bad}: this SAE has 10 \(0 to 9\)$"):
            sae.direction(bad)


def test_normalise_decoder_leaves_a_zero_row_at_zero_instead_of_dividing_by_zero():
    """Oracle: each row over its own norm; an all-zero row (a feature never trained) stays all zero."""
    sae = random_sae(seed=9)
    with torch.no_grad():
        sae.W_dec[3] = 0.0
    W = sae.W_dec.detach().clone()
    sae.normalise_decoder()
    got = sae.W_dec.detach()
    assert bool(torch.isfinite(got).all()) and float(got[3].abs().sum()) == 0.0
    for r in (0, 5, 9):
        assert torch.allclose(got[r], W[r] / float(np.sqrt(float((W[r] ** 2).sum()))), atol=1e-6)


# --------------------------------------------------------------------------- the file
def test_header_writes_k_and_the_meta_as_strings_with_json_for_anything_else():
    sae = random_sae(meta={"model": "shakespeare", "figures": {"fvu": 0.125, "l0": 3}, "steps": 40})
    assert sae.header() == {"format": FORMAT, "hook": HOOK, "kind": "topk", "k": "3", "d_model": "6",
                            "n_features": "10", "model": "shakespeare", "figures": '{"fvu": 0.125, "l0": 3}',
                            "steps": "40"}
    assert random_sae(kind="relu").header()["k"] == "0"


def test_save_writes_float16_by_default_and_load_reads_back_float32_weights_and_the_parsed_meta(tmp_path):
    """Oracle: the file read with safetensors itself (dtype, values, metadata); the loaded SAE's weights are the
    float16 values as float32, frozen, in eval mode; its meta has the JSON values parsed and plain strings kept."""
    sae = random_sae(meta={"model": "tiny", "figures": {"fvu": 0.5}, "model_config": {"n_layer": 2}})
    p = tmp_path / "s.safetensors"
    sae.save(p)
    on_disk = safetensors.torch.load_file(str(p))
    with safe_open(str(p), framework="pt") as fh:
        header = fh.metadata()
    assert header == sae.header()
    assert {n: t.dtype for n, t in on_disk.items()} == dict.fromkeys(on_disk, torch.float16) and len(on_disk) == 4
    back = load_sae(p)
    assert (back.d_model, back.n_features, back.hook, back.kind, back.k) == (6, 10, HOOK, "topk", 3)
    assert back.meta == {"model": "tiny", "figures": {"fvu": 0.5}, "model_config": {"n_layer": 2}}
    for n, t in on_disk.items():
        got = getattr(back, n)
        assert got.dtype == torch.float32 and torch.equal(got.detach(), t.float()), n
        assert not got.requires_grad, n
    assert not back.training
    sae.save(tmp_path / "f32.safetensors", dtype=torch.float32)
    again = load_sae(tmp_path / "f32.safetensors")
    assert all(torch.equal(getattr(again, n).detach(), getattr(sae, n).detach()) for n in on_disk)


def test_save_writes_a_weight_that_is_a_transposed_view(tmp_path):
    """A weight set to a transposed (non-contiguous) tensor is still written, and read back equal."""
    sae = random_sae(seed=10)
    W = torch.randn(10, 6, generator=torch.Generator().manual_seed(11))
    sae.W_enc.data = W.T
    assert not sae.W_enc.is_contiguous()
    sae.save(tmp_path / "t.safetensors", dtype=torch.float32)
    assert torch.equal(load_sae(tmp_path / "t.safetensors").W_enc, W.T)


def test_a_relu_sae_file_round_trips_with_no_k(tmp_path):
    sae = random_sae(kind="relu", seed=12)
    sae.save(tmp_path / "r.safetensors", dtype=torch.float32)
    back = load_sae(tmp_path / "r.safetensors")
    assert back.kind == "relu" and back.k is None and back.meta == {}
    x = torch.randn(4, 6, generator=torch.Generator().manual_seed(13))
    assert torch.allclose(back.encode(x), torch.relu((x - sae.b_dec.detach()) @ sae.W_enc.detach()
                                                     + sae.b_enc.detach()), atol=1e-6)


def test_a_file_with_no_k_in_its_header_is_a_relu_sae_or_a_refused_topk_one(tmp_path):
    h = good_header(kind="relu")
    del h["k"]
    write_sae_file(tmp_path / "a.safetensors", good_tensors(), h)
    assert load_sae(tmp_path / "a.safetensors").kind == "relu"
    h = good_header()
    del h["k"]
    write_sae_file(tmp_path / "b.safetensors", good_tensors(), h)
    with pytest.raises(ValueError, match=r"^a TopK SAE needs 1 <= k <= n_features, not k=None$"):
        load_sae(tmp_path / "b.safetensors")


def test_a_file_one_byte_over_the_limit_is_refused_before_it_is_read_and_one_at_it_is_read(tmp_path, monkeypatch):
    p = tmp_path / "s.safetensors"
    random_sae().save(p)
    size = p.stat().st_size
    monkeypatch.setattr(sae_mod, "MAX_FILE_BYTES", size)
    assert load_sae(p).n_features == 10
    monkeypatch.setattr(sae_mod, "MAX_FILE_BYTES", size - 1)
    with pytest.raises(ValueError, match=rf"^s\.safetensors is {size:,} bytes: an SAE file is at most {size - 1:,}$"):
        load_sae(p)
    assert sae_mod.MAX_FILE_BYTES != 64_000_000  # the patch took (the real limit is 64 MB)


def test_the_real_size_limit_is_64_megabytes(tmp_path):
    """A sparse file of 64,000,001 bytes (no disk used) is refused by its size alone; 64,000,000 is not."""
    big = tmp_path / "big.safetensors"
    with open(big, "wb") as fh:
        fh.truncate(64_000_001)
    with pytest.raises(ValueError, match=r"is 64,000,001 bytes: an SAE file is at most 64,000,000$"):
        load_sae(big)
    with open(big, "wb") as fh:
        fh.truncate(64_000_000)
    with pytest.raises(ValueError, match="not a readable safetensors file"):  # past the size check
        load_sae(big)


def test_files_that_are_not_sae_files_are_refused_with_a_message_that_says_why(tmp_path):
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"not a safetensors file at all")
    with pytest.raises(ValueError, match=r"^junk\.safetensors is not a readable safetensors file \(.+\)$"):
        load_sae(junk)
    safetensors.torch.save_file(good_tensors(), str(tmp_path / "bare.safetensors"))  # no metadata at all
    with pytest.raises(ValueError, match=rf"^bare\.safetensors is not a gptviz SAE \(its format is None, "
                                         rf"not '{FORMAT}'\)$"):
        load_sae(tmp_path / "bare.safetensors")
    write_sae_file(tmp_path / "old.safetensors", good_tensors(), {**good_header(), "format": "gptviz-sae-0"})
    with pytest.raises(ValueError, match=rf"^old\.safetensors is not a gptviz SAE \(its format is 'gptviz-sae-0', "
                                         rf"not '{FORMAT}'\)$"):
        load_sae(tmp_path / "old.safetensors")
    t = good_tensors()
    del t["b_enc"], t["b_dec"]
    write_sae_file(tmp_path / "miss.safetensors", t, good_header())
    with pytest.raises(ValueError, match=r"^miss\.safetensors has no b_enc, b_dec$"):
        load_sae(tmp_path / "miss.safetensors")
    for key, value in (("d_model", "six"), ("n_features", None), ("hook", None), ("kind", None), ("k", "x")):
        h = good_header()
        if value is None:
            del h[key]
        else:
            h[key] = value
        write_sae_file(tmp_path / "h.safetensors", good_tensors(), h)
        with pytest.raises(ValueError, match=r"^h\.safetensors has a broken header \(.+\)$"):
            load_sae(tmp_path / "h.safetensors")


@pytest.mark.parametrize("name, shape", [("W_enc", (6, 9)), ("b_enc", (9,)), ("W_dec", (10, 5)), ("b_dec", (7,))])
def test_every_weight_of_the_wrong_shape_is_named_with_both_shapes(tmp_path, name, shape):
    t = good_tensors()
    t[name] = torch.zeros(shape)
    write_sae_file(tmp_path / "w.safetensors", t, good_header())
    want = {"W_enc": (6, 10), "b_enc": (10,), "W_dec": (10, 6), "b_dec": (6,)}[name]
    with pytest.raises(ValueError, match="^" + re.escape(f"w.safetensors: {name} has shape {shape}, not {want}") + "$"):
        load_sae(tmp_path / "w.safetensors")


# --------------------------------------------------------------------------- paths, labels and snippets
def test_the_files_of_a_shipped_models_sae_sit_beside_its_checkpoint_or_in_the_folder_given(tmp_path):
    assert sae_path("m") == CHECKPOINTS / "m.sae.safetensors"
    assert snippets_path("m") == CHECKPOINTS / "m.sae.snippets.safetensors"
    assert labels_path("m") == CHECKPOINTS / "m.sae.labels.toml"
    assert sae_path("m", tmp_path) == tmp_path / "m.sae.safetensors"
    assert snippets_path("m", tmp_path) == tmp_path / "m.sae.snippets.safetensors"
    assert labels_path("m", tmp_path) == tmp_path / "m.sae.labels.toml"


def test_read_labels_keeps_the_features_in_range_strips_and_cuts_them_and_skips_the_rest(tmp_path):
    long = "x" * 130
    (tmp_path / "l.toml").write_text(
        "[labels]\n"
        '0 = "first"\n'
        '7 = "  last one  "\n'
        '8 = "one past the end"\n'
        '-1 = "negative"\n'
        '"3.5" = "not a number"\n'
        '4 = 5\n'
        '5 = "   "\n'
        f'6 = "  {long}"\n', encoding="utf-8")
    assert read_labels(tmp_path / "l.toml", 8) == {0: "first", 7: "last one", 6: "x" * 120}
    assert read_labels(tmp_path / "l.toml", 8, max_chars=3) == {0: "fir", 7: "las", 6: "xxx"}
    assert read_labels(tmp_path / "l.toml", 9)[8] == "one past the end"


def test_read_labels_reads_utf8_whatever_the_locale_says(tmp_path, monkeypatch):
    """A labels file is UTF-8 on every machine: with the locale's encoding made cp1252 (as on Windows), a label
    with accents and an arrow still reads back as written."""
    import io

    (tmp_path / "u.toml").write_bytes('[labels]\n2 = "naïve → café"\n'.encode("utf-8"))
    real = io.text_encoding
    monkeypatch.setattr(io, "text_encoding", lambda encoding, stacklevel=2: encoding or "cp1252")
    assert (tmp_path / "u.toml").read_text() != '[labels]\n2 = "naïve → café"\n'  # the patch does bite
    assert read_labels(tmp_path / "u.toml", 8) == {2: "naïve → café"}
    monkeypatch.setattr(io, "text_encoding", real)


def test_read_labels_gives_nothing_for_a_missing_broken_or_label_less_file(tmp_path):
    assert read_labels(tmp_path / "absent.toml", 8) == {}
    (tmp_path / "bad.toml").write_text("[labels\n0 = 'x'\n", encoding="utf-8")
    assert read_labels(tmp_path / "bad.toml", 8) == {}
    (tmp_path / "bin.toml").write_bytes(b"[labels]\n0 = '\xff\xfe'\n")
    assert read_labels(tmp_path / "bin.toml", 8) == {}
    (tmp_path / "none.toml").write_text('[other]\n0 = "x"\n', encoding="utf-8")
    assert read_labels(tmp_path / "none.toml", 8) == {}


def test_snippets_round_trip_through_their_file_with_their_meta(tmp_path):
    """Oracle: the file read with safetensors itself: every tensor as given (numpy arrays and non-contiguous
    tensors too), the meta as JSON strings."""
    g = torch.Generator().manual_seed(14)
    snippets = {"ids": torch.randint(0, 50, (3, 2, 5), generator=g, dtype=torch.int32),
                "acts": torch.rand(3, 5, 2, generator=g).half().transpose(1, 2),  # a non-contiguous view
                "peak": np.array([[2.0, 1.0], [0.5, 0.0], [3.0, 2.5]], dtype=np.float32)}
    meta = {"hook": HOOK, "window": 128, "n_top": [2, 3]}
    p = tmp_path / "sn.safetensors"
    save_snippets(p, snippets, meta)
    with safe_open(str(p), framework="pt") as fh:
        assert fh.metadata() == {"hook": json.dumps(HOOK), "window": "128", "n_top": "[2, 3]"}
    tensors, got_meta = load_snippets(p)
    assert got_meta == meta
    assert set(tensors) == {"ids", "acts", "peak"}
    assert torch.equal(tensors["ids"], snippets["ids"]) and torch.equal(tensors["acts"], snippets["acts"])
    assert torch.equal(tensors["peak"], torch.from_numpy(snippets["peak"]))
    save_snippets(tmp_path / "nometa.safetensors", {"peak": torch.ones(2)})
    tensors, got_meta = load_snippets(tmp_path / "nometa.safetensors")
    assert got_meta == {} and set(tensors) == {"peak"} and torch.equal(tensors["peak"], torch.ones(2))
    safetensors.torch.save_file({"peak": torch.ones(2)}, str(tmp_path / "bare.safetensors"))  # no metadata at all
    assert load_snippets(tmp_path / "bare.safetensors")[1] == {}


# --------------------------------------------------------------------------- what a direction promotes
def tiny_model(name, seed=0):
    torch.manual_seed(seed)
    model = GPT(CONFIGS[name]).eval()
    if "ln_f" in model.transformer:
        with torch.no_grad():  # a final-norm scale that is not all ones, so that leaving it out shows
            model.transformer.ln_f.weight.copy_(torch.rand(model.config.n_embd) + 0.5)
    return model


@pytest.mark.parametrize("name", ["gpt2-like", "nopos-rms-pre", "rope-post-ln"])
def test_direction_logits_read_the_direction_through_the_linear_part_of_the_final_norm(name, one_thread):
    """Oracle: W_U diag(γ) C d, with C = I - 11ᵀ/n the centring matrix for a LayerNorm and I for an RMSNorm; a
    post-norm model has no final norm, so it is W_U d. Written with explicit matrices, in float64."""
    model = tiny_model(name)
    n = model.config.n_embd
    d = torch.randn(n, generator=torch.Generator().manual_seed(15))
    M = torch.eye(n, dtype=torch.float64)
    if "ln_f" in model.transformer:
        if model.config.norm == "layernorm":
            M = M - torch.full((n, n), 1.0 / n, dtype=torch.float64)
        M = torch.diag(model.transformer.ln_f.weight.detach().double()) @ M
    want = model.lm_head.weight.detach().double() @ (M @ d.double())
    got = direction_logits(model, d)
    assert got.shape == (model.config.vocab_size,)
    assert torch.allclose(got.double(), want, atol=1e-5)
    assert ("ln_f" in model.transformer) == (name != "rope-post-ln")  # the three cases are the three kinds


# --------------------------------------------------------------------------- steering and greedy generation
def test_a_steering_edit_adds_alpha_times_the_vector_at_every_position_in_the_input_dtype():
    v = torch.tensor([1.0, -2.0, 0.5], requires_grad=True)
    x = torch.arange(12, dtype=torch.float64).reshape(2, 2, 3)
    out = steering_edit(v, 3)(x)
    want = x.clone()
    for b in range(2):
        for t in range(2):
            want[b, t] += torch.tensor([3.0, -6.0, 1.5], dtype=torch.float64)
    assert out.dtype == torch.float64 and torch.equal(out, want) and not out.requires_grad
    assert torch.equal(steering_edit([1.0, 0.0, 0.0], -0.5)(torch.zeros(1, 3)), torch.tensor([[-0.5, 0.0, 0.0]]))
    half = steering_edit(v, 2.0)(torch.ones(2, 3, dtype=torch.float16))  # a half-precision model stays in half
    assert half.dtype == torch.float16 and torch.equal(half, torch.tensor([[3.0, -3.0, 2.0]] * 2).half())


def hand_greedy(model, ids, steps, hook_module=None, add=None):
    """Greedy decoding with plain ``model(...)`` calls on the last block_size tokens, a steering vector added by a
    torch forward hook on the hook point's own module."""
    h = hook_module.register_forward_hook(lambda m, i, o: o + add) if hook_module is not None else None
    try:
        ctx, out = list(ids), []
        with torch.no_grad():
            for _ in range(steps):
                nxt = int(model(torch.tensor([ctx[-model.config.block_size:]]))[0][0, -1].argmax())
                ctx.append(nxt)
                out.append(nxt)
        return out
    finally:
        if h is not None:
            h.remove()


def test_greedy_matches_plain_decoding_and_a_hand_hooked_steering_past_the_block_size(one_thread):
    """A prompt of 6 tokens and 7 steps on a model of block_size 8: the context slides after step 2."""
    model = tiny_model("gpt2-like", seed=3)
    ids = [3, 17, 5, 9, 0, 12]
    plain = greedy(model, ids, 7)
    assert plain == hand_greedy(model, ids, 7)
    v = torch.randn(8, generator=torch.Generator().manual_seed(16))
    steered = greedy(model, ids, 7, {HOOK: steering_edit(v, 6.0)})
    assert steered == hand_greedy(model, ids, 7, model.transformer.h[1].hook_resid_pre, 6.0 * v)
    assert steered != plain  # the steering does change what comes out
    assert greedy(model, ids, 0) == [] and greedy(model, [4], 1) == hand_greedy(model, [4], 1)


def test_greedy_edits_a_copy_so_an_edit_in_place_changes_nothing_else(one_thread):
    """An edit that writes into the tensor it is given (here the token embedding, which position embeddings are
    then added to) must see a copy: the result is the same as the edit written out of place."""
    model = tiny_model("gpt2-like", seed=4)
    ids = [1, 2, 3, 4]
    v = torch.randn(8, generator=torch.Generator().manual_seed(17)) * 4

    def in_place(t):
        t += v
        return t

    assert greedy(model, ids, 3, {"hook_embed": in_place}) == greedy(model, ids, 3, {"hook_embed": lambda t: t + v})


def test_greedy_refuses_an_empty_prompt_an_unknown_step_and_a_token_outside_the_vocabulary(one_thread):
    model = tiny_model("gpt2-like")
    with pytest.raises(ValueError, match=r"^generation needs a prompt of at least one token$"):
        greedy(model, [], 3)
    with pytest.raises(ValueError, match=r"^cannot edit 'blocks\.7\.hook_resid_pre', 'nope': no such step in "
                                         r"this model$"):
        greedy(model, [1], 3, {"nope": lambda t: t, "blocks.7.hook_resid_pre": lambda t: t, HOOK: lambda t: t})
    with pytest.raises(ValueError, match=r"outside the vocabulary"):  # the last token alone is fine
        greedy(model, [25, 1], 1)
