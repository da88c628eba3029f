"""SAELens folders (gptviz/interp/sae_formats.py): folders written here by hand, in SAELens 6's cfg.json form and in
the older one, load through ``gptviz.load_sae`` and encode and decode as SAELens defines each architecture, written
out below from its definitions (``x' = x - b_dec`` only with ``apply_b_dec_to_input``; ``pre = x' W_enc + b_enc``;
standard ReLU(pre); topk the k largest of pre through a ReLU; jumprelu ReLU(pre) · [pre > threshold];
``x_hat = f W_dec + b_dec``). Every header value is checked before anything is allocated."""
import json
import resource
import subprocess
import sys

import pytest
import safetensors.torch
import torch

import gptviz
from gptviz.interp.sae import load_sae as load_gptviz_file
from gptviz.interp.sae import sae_path
from gptviz.interp.sae_formats import CFG_NAME, WEIGHTS_NAME, save_saelens
from gptviz.paths import ROOT

D, N = 12, 40


def write_folder(folder, arch, b_dec_in=True, k=None, old=False, dtype=torch.float32, seed=0, shift=0.0,
                 **cfg_extra):
    """A SAELens folder, as SAELens's save_model writes it (6.x), or in the form before 6 (``old``)."""
    g = torch.Generator().manual_seed(seed)
    w = {"W_enc": torch.randn(D, N, generator=g), "b_enc": torch.randn(N, generator=g) * 0.5 + shift,
         "W_dec": torch.randn(N, D, generator=g), "b_dec": torch.randn(D, generator=g)}
    if arch == "jumprelu":
        w["threshold"] = torch.rand(N, generator=g) * 8 - 4  # some below 0: the ReLU before the step matters
    folder.mkdir(parents=True, exist_ok=True)
    safetensors.torch.save_file({n: t.to(dtype) for n, t in w.items()}, str(folder / WEIGHTS_NAME))
    if old:
        cfg = {"architecture": "standard", "d_in": D, "d_sae": N, "hook_name": "blocks.1.hook_resid_pre",
               "hook_layer": 1, "model_name": "tiny", "apply_b_dec_to_input": b_dec_in, "dtype": "float32",
               "activation_fn_str": "topk" if arch == "topk" else "relu",
               "activation_fn_kwargs": {"k": k} if arch == "topk" else {}, "normalize_activations": "none"}
    else:
        cfg = {"architecture": arch, "d_in": D, "d_sae": N, "dtype": "float32", "device": "cpu",
               "apply_b_dec_to_input": b_dec_in, "normalize_activations": "none", "reshape_activations": "none",
               "metadata": {"model_name": "tiny", "hook_name": "blocks.1.hook_resid_pre", "hook_layer": 1}}
        if arch == "topk":
            cfg["k"] = k
    cfg.update(cfg_extra)
    (folder / CFG_NAME).write_text(json.dumps(cfg))
    return {n: t.to(dtype).double() for n, t in w.items()}


def saelens_encode(w, x, arch, b_dec_in, k=None):
    xin = x - w["b_dec"] if b_dec_in else x
    pre = xin @ w["W_enc"] + w["b_enc"]
    if arch == "standard":
        return torch.relu(pre)
    if arch == "jumprelu":
        return torch.relu(pre) * (pre > w["threshold"]).double()
    top = pre.topk(k, dim=-1)
    return torch.zeros_like(pre).scatter(-1, top.indices, torch.relu(top.values))


CASES = [("standard", True, None, False), ("standard", False, None, False), ("topk", True, 5, False),
         ("topk", False, 3, True), ("topk", False, 12, False), ("jumprelu", False, None, False),
         ("jumprelu", True, None, False), ("standard", True, None, True)]


@pytest.mark.parametrize("arch, b_dec_in, k, old", CASES)
def test_a_saelens_folder_encodes_and_decodes_as_the_format_defines(tmp_path, arch, b_dec_in, k, old):
    w = write_folder(tmp_path / "sae", arch, b_dec_in, k, old, shift=-8.0 if k == 12 else 0.0)
    sae = gptviz.load_sae(tmp_path / "sae")
    assert (sae.d_model, sae.n_features, sae.hook) == (D, N, "blocks.1.hook_resid_pre")
    x = torch.randn(2, 3, D, generator=torch.Generator().manual_seed(9)) * 2  # batch 2 × 3 positions
    f = sae.encode(x).double()
    want = saelens_encode(w, x.double(), arch, b_dec_in, k)
    torch.testing.assert_close(f, want, rtol=1e-5, atol=1e-5)
    assert 0 < int((f > 0).sum()) < f.numel()  # some features on, some off, in every case
    if arch == "topk":
        assert ((f > 0).sum(-1) <= k).all()
    if k == 12:  # some of the 12 largest pre-activations are below 0: TopK's ReLU zeroes them
        xin = x.double() if not b_dec_in else x.double() - w["b_dec"]
        assert ((xin @ w["W_enc"] + w["b_enc"]).topk(k).values < 0).any()
    if arch == "jumprelu":  # a negative threshold: the ReLU decides there, not the step
        pre = (x.double() if not b_dec_in else x.double() - w["b_dec"]) @ w["W_enc"] + w["b_enc"]
        assert ((pre < 0) & (pre > w["threshold"])).any()
    torch.testing.assert_close(sae.decode(f.float()).double(), want @ w["W_dec"] + w["b_dec"], rtol=1e-5, atol=1e-4)


def test_half_precision_weights_are_read_as_float32_of_the_same_values(tmp_path):
    w = write_folder(tmp_path / "sae", "jumprelu", dtype=torch.bfloat16)
    sae = gptviz.load_sae(tmp_path / "sae")
    assert sae.W_enc.dtype == torch.float32 and torch.equal(sae.threshold.double(), w["threshold"])


def test_the_shipped_sae_exports_to_a_folder_that_encodes_as_the_shipped_file(tmp_path):
    """``python -m gptviz.export_sae`` (run as a user would): its folder, read back, gives the shipped SAE's features
    exactly, and its cfg.json is SAELens 6's."""
    out = tmp_path / "exported"
    r = subprocess.run([sys.executable, "-m", "gptviz.export_sae", "--model", "shakespeare", "--out", str(out)],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    cfg = json.loads((out / CFG_NAME).read_text())
    assert cfg["architecture"] == "topk" and cfg["k"] == 32 and cfg["apply_b_dec_to_input"] is True
    assert cfg["metadata"]["hook_name"] == "blocks.2.hook_resid_pre" and cfg["metadata"]["hook_layer"] == 2
    shipped, back = load_gptviz_file(sae_path("shakespeare")), gptviz.load_sae(out)
    x = torch.randn(4, 7, shipped.d_model, generator=torch.Generator().manual_seed(1))
    assert torch.equal(back.encode(x), shipped.encode(x)) and torch.equal(back.decode(back.encode(x)),
                                                                          shipped.reconstruct(x))
    w = {n: getattr(shipped, n).detach().double() for n in ("W_enc", "b_enc", "W_dec", "b_dec")}
    torch.testing.assert_close(back.encode(x).double(), saelens_encode(w, x.double(), "topk", True, 32), rtol=1e-5,
                               atol=1e-5)


def test_a_jumprelu_sae_round_trips_through_both_formats(tmp_path):
    write_folder(tmp_path / "a", "jumprelu", b_dec_in=False)
    a = gptviz.load_sae(tmp_path / "a")
    save_saelens(a, tmp_path / "b")
    a.save(tmp_path / "c.safetensors", dtype=torch.float32)
    x = torch.randn(6, D)
    for other in (gptviz.load_sae(tmp_path / "b"), gptviz.load_sae(tmp_path / "c.safetensors")):
        assert other.kind == "jumprelu" and other.b_dec_in is False
        assert torch.equal(other.encode(x), a.encode(x))


@pytest.mark.parametrize("change, said", [
    ({"architecture": "gated"},
     "cfg.json: architecture='gated' is not one gptviz computes: choose one of standard, topk, jumprelu"),
    ({"d_sae": 0}, "cfg.json: d_sae=0 must be a whole number from 1 to 65,536"),
    ({"d_sae": 65_537}, "cfg.json: d_sae=65537 must be a whole number from 1 to 65,536"),
    ({"d_in": "12"}, "cfg.json: d_in='12' must be a whole number from 1 to 65,536"),
    ({"d_in": True}, "cfg.json: d_in=True must be a whole number from 1 to 65,536"),
    ({"d_in": 65_537}, "cfg.json: d_in=65537 must be a whole number from 1 to 65,536"),
    ({"normalize_activations": "constant_norm_rescale"},
     "cfg.json: normalize_activations='constant_norm_rescale': gptviz reads SAEs whose input is used as it is "
     "(\"none\"); fold the normalisation into the weights first"),
    ({"reshape_activations": "hook_z"},
     "cfg.json: reshape_activations='hook_z': gptviz reads SAEs on a hook's whole vector (\"none\"), not split into "
     "heads"),
    ({"apply_b_dec_to_input": "yes"}, "cfg.json: apply_b_dec_to_input='yes' must be true or false"),
    ({"metadata": {}}, "cfg.json names no hook (metadata.hook_name or hook_name)"),
    ({"metadata": {"hook_name": ""}}, "cfg.json names no hook (metadata.hook_name or hook_name)"),
    ({"metadata": {"hook_name": "h" * 201}}, "cfg.json names no hook (metadata.hook_name or hook_name)"),
    ({"k": 0}, "cfg.json: a TopK SAE needs a whole k from 1 to d_sae=40, not 0"),
    ({"k": 41}, "cfg.json: a TopK SAE needs a whole k from 1 to d_sae=40, not 41"),
    ({"k": True}, "cfg.json: a TopK SAE needs a whole k from 1 to d_sae=40, not True"),
    ({"activation_fn_str": "tanh-relu", "architecture": "standard"},
     "cfg.json: activation_fn_str='tanh-relu': gptviz computes a standard SAE's ReLU (or topk)"),
])
def test_a_config_gptviz_cannot_compute_is_refused_naming_the_value(tmp_path, change, said):
    k = change.pop("k", 4)
    write_folder(tmp_path / "sae", "topk", k=k, **change)
    with pytest.raises(ValueError) as err:
        gptviz.load_sae(tmp_path / "sae")
    assert str(err.value) == said


def test_the_limits_themselves_are_allowed(tmp_path):
    """k = d_sae, a hook name of 200 characters, a cfg.json of exactly 65,536 bytes, the older top-level hook_name and
    model_name, and a config without the optional keys (SAELens's defaults: standard, b_dec applied, no
    normalisation)."""
    write_folder(tmp_path / "a", "topk", k=N, metadata={"hook_name": "h" * 200, "model_name": "tiny"})
    a = gptviz.load_sae(tmp_path / "a")
    assert a.k == N and a.hook == "h" * 200 and a.meta["model"] == "tiny" and a.meta["format_read"] == "saelens"
    write_folder(tmp_path / "b", "standard")
    cfg = {"d_in": D, "d_sae": N, "hook_name": "blocks.0.hook_resid_post", "model_name": "m"}
    text = json.dumps(cfg)
    (tmp_path / "b" / CFG_NAME).write_text(text + " " * (65_536 - len(text)))
    b = gptviz.load_sae(tmp_path / "b")
    assert (b.kind, b.b_dec_in, b.hook, b.meta["model"]) == ("relu", True, "blocks.0.hook_resid_post", "m")
    (tmp_path / "b" / CFG_NAME).write_text(text + " " * (65_537 - len(text)))
    with pytest.raises(ValueError, match="^cfg.json is 65,537 bytes: a SAELens config is at most 65,536$"):
        gptviz.load_sae(tmp_path / "b")


def test_a_weights_file_over_the_limit_is_refused_unread(tmp_path, monkeypatch):
    from gptviz.interp import sae_formats

    write_folder(tmp_path / "a", "standard")
    size = (tmp_path / "a" / WEIGHTS_NAME).stat().st_size
    monkeypatch.setattr(sae_formats, "MAX_FILE_BYTES", size)
    gptviz.load_sae(tmp_path / "a")  # exactly the limit: read
    monkeypatch.setattr(sae_formats, "MAX_FILE_BYTES", size - 1)
    with pytest.raises(ValueError, match=f"^sae_weights.safetensors is {size:,} bytes: an SAE file is at most "
                                         f"{size - 1:,}$"):
        gptviz.load_sae(tmp_path / "a")


def test_the_config_written_names_each_architecture_and_the_hooks_layer(tmp_path):
    from gptviz.interp.sae_formats import saelens_config

    for arch in ("standard", "jumprelu"):
        write_folder(tmp_path / arch, arch, b_dec_in=False)
        sae = gptviz.load_sae(tmp_path / arch)
        cfg = saelens_config(sae)
        assert cfg == {"architecture": arch, "d_in": D, "d_sae": N, "dtype": "float32", "device": "cpu",
                       "apply_b_dec_to_input": False, "normalize_activations": "none", "reshape_activations": "none",
                       "metadata": {"model_name": "tiny", "hook_name": "blocks.1.hook_resid_pre", "hook_layer": 1}}
        assert saelens_config(sae, "other")["metadata"]["model_name"] == "other"
    sae.hook = "hook_embed"
    assert saelens_config(sae)["metadata"]["hook_layer"] is None
    sae.hook = "blocks.x.hook_resid_pre"
    assert saelens_config(sae)["metadata"]["hook_layer"] is None
    sae.hook = "blocks.12.attn.hook_z"
    assert saelens_config(sae)["metadata"]["hook_layer"] == 12


def test_a_folder_claiming_huge_tensors_is_refused_before_anything_is_allocated(tmp_path):
    """cfg.json says d_sae = 65,536 and d_in = 65,536 (two 17 GB matrices) over a file of small tensors: the shapes
    in the safetensors header disagree, so it is refused without reading a tensor (the process hardly grows)."""
    write_folder(tmp_path / "sae", "standard", d_in=65_536, d_sae=65_536)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(ValueError, match=r"W_enc has shape \(12, 40\), not \(65536, 65536\)"):
        gptviz.load_sae(tmp_path / "sae")
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 50_000  # KiB


def test_broken_files_are_refused_with_what_is_wrong(tmp_path):
    write_folder(tmp_path / "a", "jumprelu")
    t = safetensors.torch.load_file(str(tmp_path / "a" / WEIGHTS_NAME))
    del t["threshold"]
    safetensors.torch.save_file(t, str(tmp_path / "a" / WEIGHTS_NAME))
    with pytest.raises(ValueError, match="has no threshold"):
        gptviz.load_sae(tmp_path / "a")
    write_folder(tmp_path / "b", "standard")
    (tmp_path / "b" / CFG_NAME).write_text("{not json")
    with pytest.raises(ValueError, match="not readable JSON"):
        gptviz.load_sae(tmp_path / "b")
    write_folder(tmp_path / "c", "standard")
    (tmp_path / "c" / CFG_NAME).write_text(json.dumps({"pad": "x" * 70_000}))
    with pytest.raises(ValueError, match="a SAELens config is at most 65,536"):
        gptviz.load_sae(tmp_path / "c")
    write_folder(tmp_path / "d", "standard")
    t = safetensors.torch.load_file(str(tmp_path / "d" / WEIGHTS_NAME))
    t["W_enc"] = t["W_enc"].to(torch.int32)
    safetensors.torch.save_file(t, str(tmp_path / "d" / WEIGHTS_NAME))
    with pytest.raises(ValueError, match="W_enc is I32; gptviz reads F32, F16 or BF16"):
        gptviz.load_sae(tmp_path / "d")
    (tmp_path / "e").mkdir()
    with pytest.raises(ValueError, match="a folder without cfg.json and sae_weights.safetensors"):
        gptviz.load_sae(tmp_path / "e")


def test_the_writer_and_the_readers_edges(tmp_path):
    """What the mutation run of these functions found untested: a TopK SAE's k in its config, a model name given or
    none, saving into a folder that does not exist yet (nested) and into one that does, the older JSON error's name,
    a config that is not an object, a folder with weights and no config, the smallest whole sizes, a hook with no
    layer, and a gptviz file's b_dec_in kept out of its metadata."""
    from gptviz.interp.sae import SparseAutoencoder
    from gptviz.interp.sae_formats import _layer, _whole, saelens_config

    sae = SparseAutoencoder(D, N, "blocks.1.hook_resid_pre", "topk", 7)
    assert saelens_config(sae)["k"] == 7 and saelens_config(sae)["metadata"]["model_name"] == ""
    deep = tmp_path / "a" / "b" / "c"
    save_saelens(sae, deep, model_name="named")
    save_saelens(sae, deep, model_name="named")  # again, into the folder now there
    cfg = json.loads((deep / CFG_NAME).read_text())
    assert cfg["metadata"]["model_name"] == "named" and cfg["k"] == 7 and cfg["architecture"] == "topk"
    assert sorted(safetensors.torch.load_file(str(deep / WEIGHTS_NAME))) == ["W_dec", "W_enc", "b_dec", "b_enc"]
    assert gptviz.load_sae(deep).k == 7
    save_saelens(sae, tmp_path / "unnamed")  # no model name given, and none in the SAE's metadata
    assert json.loads((tmp_path / "unnamed" / CFG_NAME).read_text())["metadata"]["model_name"] == ""
    write_folder(tmp_path / "j", "standard")
    (tmp_path / "j" / CFG_NAME).write_text("{not json")
    with pytest.raises(ValueError, match=r"^cfg.json is not readable JSON \(JSONDecodeError\)$"):
        gptviz.load_sae(tmp_path / "j")
    (tmp_path / "j" / CFG_NAME).write_text("[1, 2]")
    with pytest.raises(ValueError, match="^cfg.json must hold a JSON object$"):
        gptviz.load_sae(tmp_path / "j")
    (tmp_path / "j" / CFG_NAME).unlink()  # weights alone: not a SAELens folder
    with pytest.raises(ValueError, match="^j is a folder without cfg.json and sae_weights.safetensors"):
        gptviz.load_sae(tmp_path / "j")
    assert _whole({"d": 1}, "d", 1, 5) == 1 and _whole({"d": 5}, "d", 1, 5) == 5
    assert _layer("blocks.3") is None and _layer("blocks.3.hook_resid_post") == 3
    f = SparseAutoencoder(D, N, "h", "relu", None, b_dec_in=False)
    f.save(tmp_path / "f.safetensors", dtype=torch.float32)
    back = gptviz.load_sae(tmp_path / "f.safetensors")
    assert back.b_dec_in is False and "b_dec_in" not in back.meta


def test_a_header_nested_too_deeply_is_refused_in_words(tmp_path):
    from gptviz.interp.sae import SparseAutoencoder

    sae = SparseAutoencoder(D, N, "h", "relu", None, meta={"deep": "x"})
    sae.meta["deep"] = "[" * 100_000 + "]" * 100_000  # read back with json.loads: too deep
    sae.save(tmp_path / "d.safetensors", dtype=torch.float32)
    with pytest.raises(ValueError, match="^d.safetensors: the header's 'deep' is nested too deeply to read$"):
        gptviz.load_sae(tmp_path / "d.safetensors")


def test_the_readers_other_edges(tmp_path):
    """k = 1, a hook name of one character, a model name that is not text (dropped), a standard SAE's k (None), the
    hook and model under "meta" (the reader's third place, after "metadata" and the top level, also when "metadata"
    is null), the folder's name as the SAE's source, and a damaged weights file named in the message."""
    from gptviz.interp.sae_formats import read_config

    w = write_folder(tmp_path / "k1", "topk", k=1)
    one = gptviz.load_sae(tmp_path / "k1")
    x = torch.randn(6, D, generator=torch.Generator().manual_seed(3))
    assert one.k == 1 and one.meta["source"] == "k1" and one.meta["format_read"] == "saelens"
    torch.testing.assert_close(one.encode(x).double(), saelens_encode(w, x.double(), "topk", True, k=1),
                               rtol=1e-5, atol=1e-5)

    write_folder(tmp_path / "h", "standard", metadata={"hook_name": "h", "model_name": 5})
    h = gptviz.load_sae(tmp_path / "h")
    assert h.hook == "h" and "model" not in h.meta and read_config(tmp_path / "h")["k"] is None

    write_folder(tmp_path / "m", "standard", metadata=None,
                 meta={"hook_name": "blocks.2.hook_resid_post", "model_name": "m2"})
    m = read_config(tmp_path / "m")
    assert (m["hook"], m["model"]) == ("blocks.2.hook_resid_post", "m2")

    write_folder(tmp_path / "bad", "standard")
    (tmp_path / "bad" / WEIGHTS_NAME).write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{broken}")
    with pytest.raises(ValueError, match=r"^sae_weights\.safetensors is not a readable safetensors file \(.+\)$"):
        gptviz.load_sae(tmp_path / "bad")


def test_jumprelu_keeps_only_what_is_strictly_above_the_threshold(tmp_path):
    """SAELens's JumpReLU is relu(pre) · (pre > threshold): a pre-activation exactly at its threshold gives 0. A
    freshly made jumprelu SAE has thresholds 0, so it encodes as a ReLU SAE."""
    from gptviz.interp.sae import SparseAutoencoder

    thr = torch.tensor([0.5, 1.0, -1.0, 2.0])
    folder = tmp_path / "j"
    write_folder(folder, "jumprelu")
    cfg = json.loads((folder / CFG_NAME).read_text())
    cfg.update(d_in=3, d_sae=4, apply_b_dec_to_input=False)
    (folder / CFG_NAME).write_text(json.dumps(cfg))
    safetensors.torch.save_file({"W_enc": torch.zeros(3, 4), "b_enc": thr.clone(), "W_dec": torch.ones(4, 3),
                                 "b_dec": torch.zeros(3), "threshold": thr.clone()}, str(folder / WEIGHTS_NAME))
    sae = gptviz.load_sae(folder)
    assert torch.equal(sae.encode(torch.randn(2, 3)), torch.zeros(2, 4))  # pre == threshold everywhere: all 0

    fresh = SparseAutoencoder(D, N, "blocks.0.hook_resid_pre", "jumprelu")
    relu = SparseAutoencoder(D, N, "blocks.0.hook_resid_pre", "relu")
    relu.load_state_dict({k: v for k, v in fresh.state_dict().items() if k in relu.state_dict()})
    x = torch.randn(5, D, generator=torch.Generator().manual_seed(1))
    assert torch.equal(fresh.encode(x), relu.encode(x)) and fresh.threshold.shape == (N,)
