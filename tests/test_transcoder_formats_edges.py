"""The edges of gptviz/interp/transcoder_formats.py, each checked exactly: the smallest and largest folders it
opens, the full text of each refusal, a per-layer folder told apart from a cross-layer one by one decoder, what a
converted or loaded transcoder carries, the thresholds of a feature that fired once, and the config it writes.
Folders are written here with safetensors directly (see test_transcoder_formats_oracle.py for the layout)."""
import pytest
import safetensors.torch
import torch
import yaml
from test_transcoder_formats_oracle import D, F, L, write_folder

import gptviz.interp.transcoder_formats as formats
from gptviz import load_sae
from gptviz.interp.transcoder import Transcoder
from gptviz.interp.transcoder_formats import (
    as_jumprelu,
    is_circuit_tracer_folder,
    load_circuit_tracer,
    matched_thresholds,
    save_circuit_tracer,
)

CONFIG = ("model_kind: cross_layer_transcoder\nfeature_input_hook: ln2.hook_normalized\n"
          "feature_output_hook: hook_mlp_out\n")


def tiny(folder, n_layer=1, F=1, d=1, later=None):
    """The smallest folder: ``n_layer`` layers of ``F`` features of ``d`` numbers, ReLU; ``later``: the value of every
    decoder to a later layer (zero: a per-layer transcoder)."""
    folder.mkdir(parents=True)
    g = torch.Generator().manual_seed(1)
    for i in range(n_layer):
        safetensors.torch.save_file({f"W_enc_{i}": torch.randn(F, d, generator=g), f"b_enc_{i}": torch.zeros(F),
                                     f"b_dec_{i}": torch.zeros(d)}, str(folder / f"W_enc_{i}.safetensors"))
        dec = torch.randn(F, n_layer - i, d, generator=g)
        if later is not None:
            dec[:, 1:] = later
        safetensors.torch.save_file({f"W_dec_{i}": dec}, str(folder / f"W_dec_{i}.safetensors"))
    (folder / "config.yaml").write_text(CONFIG, encoding="utf-8")
    return folder


def refused(path) -> str:
    with pytest.raises(ValueError) as err:
        load_sae(path)
    return str(err.value)


def test_the_smallest_and_the_largest_folders_it_opens(tmp_path, monkeypatch):
    one = load_circuit_tracer(tiny(tmp_path / "one"))  # one layer, one feature of one number
    assert (one.n_layer, one.n_features, one.d_model, one.activation) == (1, 1, 1, "relu")
    assert one.meta == {"format_read": "circuit-tracer", "source": "one"}
    assert not one.W_enc[0].requires_grad and not one.training
    write_folder(tmp_path / "max")
    monkeypatch.setattr(formats, "MAX_LAYERS", L)
    monkeypatch.setattr(formats, "MAX_FEATURES", F)
    monkeypatch.setattr(formats, "MAX_D_MODEL", D)
    monkeypatch.setattr(formats, "MAX_FILE_BYTES", sum(f.stat().st_size for f in (tmp_path / "max").glob("W_*")))
    monkeypatch.setattr(formats, "MAX_CONFIG_BYTES", (tmp_path / "max" / "config.yaml").stat().st_size)
    assert load_circuit_tracer(tmp_path / "max").n_layer == L  # every limit met exactly: opened
    monkeypatch.setattr(formats, "MAX_LAYERS", L - 1)
    assert refused(tmp_path / "max") == ("max must hold W_enc_0.safetensors to W_enc_{n-1}.safetensors for n from 1 "
                                         "to 2 layers, each once (found layers [0, 1, 2])")
    monkeypatch.setattr(formats, "MAX_LAYERS", L)
    monkeypatch.setattr(formats, "MAX_D_MODEL", D - 1)
    assert refused(tmp_path / "max") == "W_enc_0 is 6 features of 5 numbers: gptviz opens at most 6 features of 4"


def test_many_layers_name_the_first_six_found(tmp_path):
    folder = tiny(tmp_path / "many", n_layer=8)
    (folder / "W_enc_3.safetensors").rename(folder / "W_enc_9.safetensors")
    assert refused(folder).endswith("each once (found layers [0, 1, 2, 4, 5, 6])")


def test_one_later_decoder_makes_a_folder_cross_layer(tmp_path):
    assert not load_circuit_tracer(tiny(tmp_path / "plt", n_layer=3, F=2, d=2, later=0.0)).cross_layer
    folder = tiny(tmp_path / "clt", n_layer=3, F=2, d=2, later=0.0)
    dec = torch.zeros(2, 3, 2)
    dec[1, 1, 0] = 0.5  # layer 0's decoder to layer 1 only: the next layer, not the last
    safetensors.torch.save_file({"W_dec_0": dec}, str(folder / "W_dec_0.safetensors"))
    tc = load_circuit_tracer(folder)
    assert tc.cross_layer and float(tc.W_dec[0][1, 1, 0]) == 0.5


def test_each_refusal_in_full(tmp_path):
    write_folder(tmp_path / "a", extra={0: {"W_skip_0": torch.zeros(D, D)}})
    assert refused(tmp_path / "a") == ("W_enc_0.safetensors holds W_skip_0, which gptviz does not compute (it reads "
                                       "W_enc_0, b_dec_0, b_enc_0, threshold_0)")
    write_folder(tmp_path / "b", drop=("b_enc_1", "b_dec_1", "threshold_1", "W_enc_1"))
    assert refused(tmp_path / "b") == "W_enc_1.safetensors has no W_enc_1, b_dec_1, b_enc_1"
    write_folder(tmp_path / "c", shapes={"b_dec_2": torch.zeros(D + 1)})
    assert refused(tmp_path / "c") == "W_enc_2.safetensors: b_dec_2 has shape [6], not [5]"
    write_folder(tmp_path / "d", shapes={"W_enc_0": torch.zeros(F * D)})
    assert refused(tmp_path / "d") == "W_enc_0.safetensors has no two-dimensional W_enc_0"
    write_folder(tmp_path / "e")
    (tmp_path / "e" / "W_enc_1.safetensors").write_bytes(b"not a safetensors file")
    assert refused(tmp_path / "e").startswith("W_enc_1.safetensors is not a readable safetensors file (")
    write_folder(tmp_path / "f")
    (tmp_path / "f" / "config.yaml").write_text("- a list\n- not a mapping\n", encoding="utf-8")
    assert refused(tmp_path / "f") == "config.yaml must hold a mapping (model_kind, feature_input_hook, ...)"
    (tmp_path / "f" / "config.yaml").write_text("a: [1, 2", encoding="utf-8")
    assert refused(tmp_path / "f") == "config.yaml is not readable YAML (ParserError)"
    write_folder(tmp_path / "g", cfg={"model_kind": "transcoder_set"})
    assert refused(tmp_path / "g") == (
        "config.yaml: model_kind='transcoder_set': gptviz opens circuit-tracer's cross-layer layout "
        "('cross_layer_transcoder'); a per-layer set opens when written as a cross-layer transcoder whose decoders "
        "to later layers are zero")
    write_folder(tmp_path / "h", cfg={"feature_output_hook": "hook_resid_post"})
    assert refused(tmp_path / "h") == ("config.yaml: feature_output_hook='hook_resid_post': gptviz's transcoders "
                                       "write the MLP's output ('hook_mlp_out' or 'mlp.hook_out')")
    write_folder(tmp_path / "i", cfg={"feature_output_hook": "mlp.hook_out"})  # the other name of an MLP's output
    assert load_sae(tmp_path / "i").n_layer == L


def test_a_folder_is_one_only_with_both_its_config_and_its_first_encoder(tmp_path):
    (tmp_path / "empty").mkdir()
    assert not is_circuit_tracer_folder(tmp_path / "empty")
    assert refused(tmp_path / "empty") == ("empty is a folder without cfg.json and sae_weights.safetensors (a SAELens "
                                           "SAE) or config.yaml and W_enc_0.safetensors (a circuit-tracer "
                                           "transcoder)")
    folder = tiny(tmp_path / "no-config")
    (folder / "config.yaml").unlink()
    assert not is_circuit_tracer_folder(folder)
    assert "config.yaml and W_enc_0.safetensors" in refused(folder)
    assert not is_circuit_tracer_folder(tiny(tmp_path / "t") / "W_enc_0.safetensors")  # a file is not a folder
    assert is_circuit_tracer_folder(tmp_path / "t")


def test_the_model_name_is_kept_up_to_200_characters(tmp_path):
    for n, kept in ((200, True), (201, False)):
        write_folder(tmp_path / str(n), cfg={"model_name": "m" * n})
        assert load_sae(tmp_path / str(n)).meta.get("model") == ("m" * n if kept else None)
    write_folder(tmp_path / "num", cfg={"model_name": 7})
    assert "model" not in load_sae(tmp_path / "num").meta


def test_a_conversion_keeps_the_metadata_and_refuses_wrong_thresholds():
    tc = Transcoder(2, 3, 4, 2, True, {"model": "m"})
    right = [torch.full((4,), 0.25), torch.full((4,), 0.5)]
    out = as_jumprelu(tc, right)
    assert out.meta == {"model": "m", "converted_from": "topk k=2", "thresholds": "given"}
    assert not out.training and not any(p.requires_grad for p in out.parameters())
    assert float(out.threshold[1][0]) == 0.5
    for wrong in (right[:1], [right[0], torch.zeros(5)]):
        with pytest.raises(ValueError, match=r"^give 2 thresholds of 4 features each$"):
            as_jumprelu(tc, wrong)
    with pytest.raises(ValueError, match=r"^thresholds are matched to a TopK transcoder's firing; this one's rule is "
                                         r"'jumprelu'$"):
        matched_thresholds(out, torch.zeros(3, 2, 3))


def test_a_feature_that_fired_once_gets_a_threshold_just_under_that_score():
    tc = Transcoder(1, 2, 3, 1, False)
    with torch.no_grad():
        tc.W_enc[0].copy_(torch.tensor([[1.0, 0.0, 0.3], [0.0, 1.0, 0.3]]))
    x = torch.tensor([[[0.6, 0.1]], [[0.5, 0.2]], [[0.1, 0.9]], [[0.4, 0.3]]])  # feature 1 wins once: 0.9
    t = matched_thresholds(tc, x)[0]
    assert float(t[1]) == float(torch.nextafter(torch.tensor(0.9), torch.tensor(0.0)))  # below 0.9, not 0.2
    assert float(t[0]) == float(torch.nextafter(torch.tensor(0.4), torch.tensor(0.0)))  # fired 3 times: 0.6, 0.5, 0.4
    assert float(t[2]) == pytest.approx(0.3)  # never the largest: its largest score, so it never fires here


def test_the_config_it_writes_and_where(tmp_path):
    relu = Transcoder(2, 3, 4, None, False, activation="relu")  # no model named anywhere
    out = save_circuit_tracer(relu, tmp_path / "new" / "nested")  # parents made
    save_circuit_tracer(relu, out, extra={"note": "again"})  # an existing folder is written over
    text = (out / "config.yaml").read_text(encoding="utf-8")
    assert list(yaml.safe_load(text)) == ["model_kind", "model_name", "feature_input_hook", "feature_output_hook",
                                          "note"]
    assert yaml.safe_load(text)["model_name"] == ""
    back = load_circuit_tracer(out)
    assert back.activation == "relu" and not back.cross_layer and back.meta == {"format_read": "circuit-tracer",
                                                                                "source": "nested"}


def test_extra_tensors_are_named_three_at_most_and_a_topk_save_is_refused_in_full(tmp_path):
    extra = {f"W_skip_{j}": torch.zeros(1) for j in range(4)}
    write_folder(tmp_path / "a", extra={0: extra})
    assert refused(tmp_path / "a").startswith("W_enc_0.safetensors holds W_skip_0, W_skip_1, W_skip_2, which gptviz "
                                              "does not compute")
    with pytest.raises(ValueError) as err:
        save_circuit_tracer(Transcoder(2, 3, 4, 2, True), tmp_path / "k")
    assert str(err.value) == ("circuit-tracer computes ReLU and JumpReLU transcoders, not 'topk': turn a TopK "
                              "transcoder into a JumpReLU one first (as_jumprelu)")
