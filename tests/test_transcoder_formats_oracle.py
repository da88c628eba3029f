"""Transcoders in circuit-tracer's format (gptviz/interp/transcoder_formats.py). Each folder here is written in the
test with safetensors directly, in the layout circuit-tracer's ``CrossLayerTranscoder.to_safetensors`` writes and
``load_clt`` reads: ``W_enc_{i}`` (F, d), ``b_enc_{i}``, ``b_dec_{i}``, ``threshold_{i}`` in ``W_enc_{i}.safetensors``,
``W_dec_{i}`` (F, n_layer - i, d) in ``W_dec_{i}.safetensors``. The features and outputs are checked against
circuit-tracer's definitions written out here as loops over features (``pre · [pre > threshold]``, a ReLU without
thresholds, every layer's decoder summed into every later MLP output), never through the module under test."""
import math

import pytest
import safetensors.torch
import torch
import yaml
from test_attribution_graph_oracle import PROMPT, Oracle, feature_quantity, logit_quantity

from gptviz import load_sae
from gptviz.interp.attribution_graph import attribute
from gptviz.interp.transcoder import Transcoder, load_transcoder, transcoder_path
from gptviz.interp.transcoder_formats import (
    as_jumprelu,
    load_circuit_tracer,
    matched_thresholds,
    save_circuit_tracer,
)
from gptviz.model.checkpoint import load_checkpoint
from gptviz.paths import CHECKPOINTS

L, F, D = 3, 6, 5


def write_folder(folder, seed=0, jump=True, per_layer=False, cfg=None, drop=(), extra=None, shapes=None,
                 threshold_sign=1.0):
    """A circuit-tracer folder with random weights; returns the tensors written, by file key."""
    g = torch.Generator().manual_seed(seed)
    folder.mkdir(parents=True, exist_ok=True)
    written = {}
    for i in range(L):
        enc = {f"W_enc_{i}": torch.randn(F, D, generator=g), f"b_enc_{i}": torch.randn(F, generator=g) * 0.3,
               f"b_dec_{i}": torch.randn(D, generator=g) * 0.1}
        if jump:
            enc[f"threshold_{i}"] = threshold_sign * torch.rand(F, generator=g) * 0.5
        dec = torch.randn(F, L - i, D, generator=g)
        if per_layer:
            dec[:, 1:] = 0
        files = {"enc": enc, "dec": {f"W_dec_{i}": dec}}
        for key, t in (extra or {}).get(i, {}).items():
            files["enc"][key] = t
        for part, tensors in files.items():
            tensors = {k: (shapes[k] if shapes and k in shapes else v) for k, v in tensors.items() if k not in drop}
            written.update(tensors)
            safetensors.torch.save_file(tensors, str(folder / f"W_{part}_{i}.safetensors"))
    conf = {"model_kind": "cross_layer_transcoder", "model_name": "toy", "feature_input_hook": "ln2.hook_normalized",
            "feature_output_hook": "hook_mlp_out"}
    conf.update(cfg or {})
    (folder / "config.yaml").write_text(yaml.safe_dump(conf), encoding="utf-8")
    return written


def features_by_definition(w, i, x, jump):
    """circuit-tracer's features of layer i, one vector and one feature at a time."""
    out = torch.zeros(x.shape[0], F, dtype=torch.float64)
    for r in range(x.shape[0]):
        for f in range(F):
            pre = sum(float(x[r, j]) * float(w[f"W_enc_{i}"][f, j]) for j in range(D)) + float(w[f"b_enc_{i}"][f])
            if jump:
                out[r, f] = pre if pre > float(w[f"threshold_{i}"][f]) else 0.0
            else:
                out[r, f] = max(pre, 0.0)
    return out


def output_by_definition(w, m, feats):
    """MLP m's stand-in: b_dec_m plus every earlier-or-same layer's features through its decoder to m."""
    out = w[f"b_dec_{m}"].double().expand(feats[0].shape[0], -1).clone()
    for source in range(m + 1):
        for r in range(feats[0].shape[0]):
            for f in range(F):
                out[r] += feats[source][r, f] * w[f"W_dec_{source}"][f, m - source].double()
    return out


@pytest.mark.parametrize("jump,sign", [(True, 1.0), (True, -1.0), (False, 1.0)],
                         ids=["jumprelu", "jumprelu-negative-thresholds", "relu"])
def test_a_folder_opens_and_computes_circuit_tracers_features_and_outputs(tmp_path, jump, sign):
    w = write_folder(tmp_path / "clt", jump=jump, threshold_sign=sign)
    tc = load_sae(tmp_path / "clt")
    assert isinstance(tc, Transcoder) and tc.cross_layer and tc.activation == ("jumprelu" if jump else "relu")
    assert (tc.n_layer, tc.n_features, tc.d_model, tc.k) == (L, F, D, None)
    assert tc.meta["model"] == "toy" and tc.meta["format_read"] == "circuit-tracer"
    x = torch.randn(7, L, D, generator=torch.Generator().manual_seed(5))
    feats = [tc.encode(i, x[:, i]) for i in range(L)]
    want = [features_by_definition(w, i, x[:, i], jump) for i in range(L)]
    for i in range(L):
        torch.testing.assert_close(feats[i].double(), want[i], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(tc.decode(i, feats).double(), output_by_definition(w, i, want), atol=1e-4,
                                   rtol=1e-5)
    if sign < 0:  # as circuit-tracer defines it, a negative threshold lets a negative score through
        assert float(torch.cat(want).min()) < 0 and float(torch.cat(feats).min()) < 0


def test_a_per_layer_transcoder_is_written_with_zero_later_decoders_and_read_back_as_per_layer(tmp_path):
    tc = Transcoder(L, D, F, None, False, {"model": "toy"}, activation="jumprelu")
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for name in tc.tensor_names():
            for p in getattr(tc, name):
                p.copy_(torch.randn(p.shape, generator=g).abs() if name == "threshold" else
                        torch.randn(p.shape, generator=g))
    save_circuit_tracer(tc, tmp_path / "plt")
    for i in range(L):  # the files themselves, read with safetensors: circuit-tracer's layout
        enc = safetensors.torch.load_file(str(tmp_path / "plt" / f"W_enc_{i}.safetensors"))
        dec = safetensors.torch.load_file(str(tmp_path / "plt" / f"W_dec_{i}.safetensors"))
        assert set(enc) == {f"W_enc_{i}", f"b_enc_{i}", f"b_dec_{i}", f"threshold_{i}"} and set(dec) == {f"W_dec_{i}"}
        torch.testing.assert_close(enc[f"W_enc_{i}"], tc.W_enc[i].T, atol=0, rtol=0)
        torch.testing.assert_close(enc[f"threshold_{i}"], tc.threshold[i].detach(), atol=0, rtol=0)
        assert dec[f"W_dec_{i}"].shape == (F, L - i, D)
        torch.testing.assert_close(dec[f"W_dec_{i}"][:, 0], tc.W_dec[i][:, 0], atol=0, rtol=0)
        assert not dec[f"W_dec_{i}"][:, 1:].any()
    cfg = yaml.safe_load((tmp_path / "plt" / "config.yaml").read_text())
    assert cfg == {"model_kind": "cross_layer_transcoder", "model_name": "toy",
                   "feature_input_hook": "ln2.hook_normalized", "feature_output_hook": "hook_mlp_out"}
    back = load_circuit_tracer(tmp_path / "plt")
    assert not back.cross_layer and back.activation == "jumprelu"
    for name in tc.tensor_names():
        for mine, theirs in zip(getattr(back, name), getattr(tc, name)):
            torch.testing.assert_close(mine, theirs.detach(), atol=0, rtol=0)
    write_folder(tmp_path / "cross", per_layer=False)  # one nonzero later decoder: cross-layer
    assert load_circuit_tracer(tmp_path / "cross").cross_layer


def test_the_gptviz_file_keeps_a_jumprelu_or_relu_rule(tmp_path):
    w = write_folder(tmp_path / "clt")
    tc = load_circuit_tracer(tmp_path / "clt")
    tc.save(tmp_path / "t.transcoder.safetensors", dtype=torch.float32)
    back = load_sae(tmp_path / "t.transcoder.safetensors")  # gptviz.load_sae opens a gptviz transcoder file too
    assert isinstance(back, Transcoder) and back.activation == "jumprelu" and back.k is None
    torch.testing.assert_close(back.threshold[2], w["threshold_2"], atol=0, rtol=0)
    relu = Transcoder(2, 3, 4, None, True, activation="relu")
    relu.save(tmp_path / "r.safetensors")
    assert load_transcoder(tmp_path / "r.safetensors").activation == "relu"


def refusal(tmp_path, **kw):
    write_folder(tmp_path / "bad", **kw)
    with pytest.raises(ValueError) as err:
        load_sae(tmp_path / "bad")
    return str(err.value)


def test_folders_gptviz_cannot_compute_are_refused_naming_why(tmp_path, monkeypatch):
    assert "transcoder_set" in refusal(tmp_path / "a", cfg={"model_kind": "transcoder_set"})
    assert "hook_resid_mid" in refusal(tmp_path / "b", cfg={"feature_input_hook": "hook_resid_mid"})
    assert "feature_output_hook" in refusal(tmp_path / "c", cfg={"feature_output_hook": "hook_resid_post"})
    assert "W_skip_1" in refusal(tmp_path / "d", extra={1: {"W_skip_1": torch.zeros(D, D)}})
    assert "threshold_2" in refusal(tmp_path / "e", drop=("threshold_2",))
    assert "W_dec_1" in refusal(tmp_path / "f", shapes={"W_dec_1": torch.zeros(F, L, D)})
    assert "F64" in refusal(tmp_path / "g", shapes={"b_enc_0": torch.zeros(F, dtype=torch.float64)})
    write_folder(tmp_path / "h")
    (tmp_path / "h" / "W_dec_2.safetensors").unlink()
    with pytest.raises(ValueError, match="W_dec_2.safetensors"):
        load_sae(tmp_path / "h")
    write_folder(tmp_path / "i")
    (tmp_path / "i" / "W_enc_2.safetensors").rename(tmp_path / "i" / "W_enc_5.safetensors")
    with pytest.raises(ValueError, match="each once"):
        load_sae(tmp_path / "i")
    write_folder(tmp_path / "j")
    (tmp_path / "j" / "config.yaml").write_text("model_kind: [unclosed", encoding="utf-8")
    with pytest.raises(ValueError, match="not readable YAML"):
        load_sae(tmp_path / "j")
    (tmp_path / "j" / "config.yaml").write_text("x" * 70_000, encoding="utf-8")
    with pytest.raises(ValueError, match="at most 65,536"):
        load_sae(tmp_path / "j")
    with pytest.raises(ValueError, match="TopK"):
        save_circuit_tracer(Transcoder(2, 3, 4, 2, True), tmp_path / "k")


def test_a_header_claiming_huge_tensors_is_refused_before_anything_is_allocated(tmp_path, monkeypatch):
    import gptviz.interp.transcoder_formats as formats

    write_folder(tmp_path / "big")
    monkeypatch.setattr(formats, "MAX_FEATURES", F - 1)  # the header's F is now too many
    calls = []
    monkeypatch.setattr(Transcoder, "__init__", lambda *a, **k: calls.append(a))
    with pytest.raises(ValueError, match="at most 5 features"):
        load_sae(tmp_path / "big")
    monkeypatch.undo()
    monkeypatch.setattr(formats, "MAX_FILE_BYTES", 1000)
    with pytest.raises(ValueError, match="bytes together"):
        load_sae(tmp_path / "big")
    assert calls == []


def test_matched_thresholds_fire_each_feature_exactly_as_often_as_topk_did():
    tc = Transcoder(2, D, 12, 3, True)
    g = torch.Generator().manual_seed(9)
    with torch.no_grad():
        for name in ("W_enc", "b_enc"):
            for p in getattr(tc, name):
                p.copy_(torch.randn(p.shape, generator=g))
        tc.b_enc[1][4] = -50.0  # a feature that never makes the top 3: it must not fire after
    x = torch.randn(400, 2, D, generator=g)
    thresholds = matched_thresholds(tc, x)
    jump = as_jumprelu(tc, thresholds, note="test")
    for layer in range(2):
        pre = x[:, layer] @ tc.W_enc[layer] + tc.b_enc[layer]
        top = pre.topk(3, dim=-1)
        fired = torch.zeros_like(pre, dtype=torch.bool).scatter(-1, top.indices, top.values > 0).sum(0)
        above = (pre > thresholds[layer]).sum(0)
        assert torch.equal(above, fired), (layer, above, fired)
        assert float(thresholds[layer].min()) >= 0
        assert torch.equal((jump.encode(layer, x[:, layer]) != 0).sum(0), fired)
    assert int((pre > thresholds[1]).sum(0)[4]) == 0 and math.isfinite(float(thresholds[1][4]))
    assert jump.meta["converted_from"] == "topk k=3" and jump.meta["thresholds"] == "test"


def test_the_graph_of_a_jumprelu_transcoder_read_from_a_folder_equals_autograd(tmp_path):
    ck = load_checkpoint(CHECKPOINTS / "shakespeare.safetensors")
    model, tok = ck.model, ck.tokenizer
    c = model.config
    g = torch.Generator().manual_seed(4)
    folder = tmp_path / "clt"
    folder.mkdir()
    for i in range(c.n_layer):  # 16 features a layer, thresholds low enough that some fire at every layer
        safetensors.torch.save_file({f"W_enc_{i}": torch.randn(16, c.n_embd, generator=g) * 0.3,
                                     f"b_enc_{i}": torch.randn(16, generator=g) * 0.2,
                                     f"b_dec_{i}": torch.randn(c.n_embd, generator=g) * 0.1,
                                     f"threshold_{i}": torch.rand(16, generator=g) * 0.6},
                                    str(folder / f"W_enc_{i}.safetensors"))
        safetensors.torch.save_file({f"W_dec_{i}": torch.randn(16, c.n_layer - i, c.n_embd, generator=g) * 0.2},
                                    str(folder / f"W_dec_{i}.safetensors"))
    (folder / "config.yaml").write_text("model_kind: cross_layer_transcoder\nfeature_input_hook: ln2.hook_normalized"
                                        "\nfeature_output_hook: hook_mlp_out\n", encoding="utf-8")
    tc = load_sae(folder)
    ids = tok.encode(PROMPT)[:10]
    graph = attribute(model, tc, ids)
    oracle = Oracle(model, tc, ids)
    assert graph.n_features == sum(int((f != 0).sum()) for f in oracle.feats) > 0
    for k in range(graph.logit_ids.numel()):
        want = oracle.row(graph, logit_quantity(model, int(graph.logit_ids[k])), c.n_layer)
        torch.testing.assert_close(graph.adjacency[graph.logit_index(k)], want, atol=2e-4, rtol=1e-3)
    last = [i for i in range(graph.n_features) if graph.node(i)[1] == c.n_layer - 1][-1]
    _, layer, pos, feat, _ = graph.node(last)
    want = oracle.row(graph, feature_quantity(tc, layer, pos, feat), layer)
    torch.testing.assert_close(graph.adjacency[last], want, atol=2e-4, rtol=1e-3)


def test_the_export_command_writes_a_folder_with_the_shipped_weights_and_its_figures(tmp_path):
    from gptviz.commands.export_sae import main

    out = tmp_path / "clt"
    assert main(["--what", "clt", "--out", str(out), "--tokens", "1024", "--measure-windows", "2"]) == 0
    shipped = load_transcoder(transcoder_path("shakespeare", True))
    back = load_sae(out)
    assert back.cross_layer and back.activation == "jumprelu"
    for name in ("W_enc", "b_enc", "W_dec", "b_dec"):  # the shipped float16 weights, exactly
        for mine, theirs in zip(getattr(back, name), getattr(shipped, name)):
            torch.testing.assert_close(mine, theirs, atol=0, rtol=0)
    assert all(float(t.min()) >= 0 for t in back.threshold)
    figures = yaml.safe_load((out / "config.yaml").read_text())["gptviz_figures"]
    assert set(figures["held_out"]) == {"topk", "jumprelu"} and figures["held_out"]["jumprelu"]["tokens"] == 256
    assert main(["--what", "transcoder", "--model", "no-such-model", "--out", str(tmp_path / "x")]) == 2
    for tokens in ("0", "131073"):  # bounded before anything is collected
        assert main(["--what", "clt", "--tokens", tokens, "--out", str(tmp_path / "y")]) == 2
    assert not (tmp_path / "y").exists()
