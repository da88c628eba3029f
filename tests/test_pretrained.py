"""``gptviz.from_pretrained`` against ``transformers``: for each family, a small model with random weights (every
weight, norms and biases included, drawn at random so none is left at an identity), saved with a tokenizer
trained here, opened by gptviz and compared with ``transformers`` on the same folder: logits, every layer's and
head's attention pattern (eager attention, ``output_attentions=True``), and the token ids ``tokenizers`` gives."""
import json

import pytest
import torch
from hf_models import FAMILIES, TEXT, build, train_tokenizer
from lazy_import import lazy

import gptviz
from gptviz import trace
from gptviz.model.hook_names import act_name

transformers = lazy("transformers", skip=True)
tokenizers = pytest.importorskip("tokenizers")


@pytest.mark.parametrize("family", FAMILIES)
def test_logits_patterns_and_token_ids_equal_transformers(family, tmp_path):
    hf = build(family, tmp_path)
    model, tok = gptviz.from_pretrained(tmp_path)
    own = tokenizers.Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    ids = tok.encode(TEXT)
    assert ids == own.encode(TEXT).ids and len(ids) > 10
    idx = torch.tensor([ids[:40]])
    with torch.no_grad():
        out = hf(idx, output_attentions=True)
    tr = trace(model, idx)
    assert (tr["hook_logits"] - out.logits).abs().max().item() < 1e-4
    assert len(out.attentions) == model.config.n_layer
    for layer, pattern in enumerate(out.attentions):  # (B, n_head, T, T) per layer
        assert torch.allclose(tr[act_name("pattern", layer)], pattern, atol=1e-5), layer
    assert tok.decode(ids) == own.decode(ids, skip_special_tokens=False)


def test_each_family_maps_onto_its_blocks(tmp_path):
    """The config each family gives: read back from config.json, not guessed."""
    seen = {}
    for family in FAMILIES:
        folder = tmp_path / family
        folder.mkdir()
        build(family, folder)
        seen[family] = gptviz.from_pretrained(folder)[0].config
    gpt2, llama, qwen, mistral, neox = (seen[f] for f in FAMILIES)
    assert (gpt2.n_head, gpt2.d_head, gpt2.norm, gpt2.tie_weights) == (4, 16, "layernorm", True)  # not 64 wide
    assert (llama.n_head, llama.n_kv_head, llama.d_head, llama.gated_mlp, llama.activation) == (6, 2, 8, True, "silu")
    assert (llama.norm, llama.pos_encoding, llama.rope_base, llama.qkv_bias, llama.tie_weights) == \
        ("rmsnorm", "rope", 5000.0, False, False)
    assert (qwen.n_kv_head, qwen.d_head, qwen.qkv_bias, qwen.attn_proj_bias, qwen.tie_weights) == (1, 12, True, False,
                                                                                                  True)
    assert (mistral.n_kv_head, mistral.gated_mlp) == (2, True)
    assert (neox.parallel_attn, neox.d_rot, neox.rotary_pct, neox.rope_base, neox.tie_weights) == \
        (True, 4, 0.25, 2000.0, False)


def test_sharded_weights_and_a_sequential_neox(tmp_path):
    """Weights split over shards (model.safetensors.index.json) load the same; GPT-NeoX without the parallel
    residual runs its blocks one after the other."""
    hf = build("gpt_neox", tmp_path, use_parallel_residual=False)
    hf.save_pretrained(str(tmp_path), max_shard_size="20KB")
    (tmp_path / "model.safetensors").unlink(missing_ok=True)
    assert (tmp_path / "model.safetensors.index.json").is_file()
    shards = json.loads((tmp_path / "model.safetensors.index.json").read_text())["weight_map"].values()
    assert len(set(shards)) > 1
    model, _ = gptviz.from_pretrained(tmp_path)
    assert model.config.parallel_attn is False
    idx = torch.tensor([[5, 9, 2, 7, 7, 1]])
    with torch.no_grad():
        assert (trace(model, idx)["hook_logits"] - hf(idx).logits).abs().max().item() < 1e-4


def test_byte_level_and_sentencepiece_tokens_read_as_text(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / "s").mkdir()
    train_tokenizer(tmp_path / "b", 300)
    train_tokenizer(tmp_path / "s", 300, sentencepiece_style=True)
    from gptviz.text.hf_tokenizer import HFTokenizer

    for folder in ("b", "s"):
        tok = HFTokenizer.from_file(tmp_path / folder / "tokenizer.json")
        ids = tok.encode(" the cat")
        assert "".join(tok.token_text(i) for i in ids) == " the cat", folder  # Ġ and ▁ read as the spaces they are
        assert all("Ġ" not in tok.token_str(i) and "▁" not in tok.token_str(i) for i in ids)
    assert HFTokenizer.from_file(tmp_path / "b" / "tokenizer.json").eot_id >= 0


@pytest.mark.parametrize("change, message", [
    (lambda d: d.update(model_type="bert"), "not a family gptviz opens"),
    (lambda d: d.update(num_attention_heads=5), "divisible"),
    (lambda d: d.update(hidden_size=10**6, intermediate_size=10**6), "over the limit"),
    (lambda d: d.update(rope_parameters={"rope_type": "ntk_by_parts", "rope_theta": 1e4}), "computes the rotary "
                                                                                             "scalings"),
    (lambda d: d.update(rope_parameters={"rope_type": "longrope", "rope_theta": 1e4}), "needs rope_parameters."
                                                                                         "short_factor"),
    (lambda d: d.update(rope_parameters={"rope_type": "llama3", "rope_theta": 1e4}), "needs rope_parameters.factor"),
    (lambda d: d.pop("num_hidden_layers"), "lacks 'num_hidden_layers'"),
])
def test_a_bad_config_is_a_clear_message_before_anything_is_built(tmp_path, change, message):
    build("llama", tmp_path)
    d = json.loads((tmp_path / "config.json").read_text())
    change(d)
    (tmp_path / "config.json").write_text(json.dumps(d))
    with pytest.raises(ValueError, match=message):
        gptviz.from_pretrained(tmp_path)


def test_weights_that_do_not_fit_the_config_are_refused_unread(tmp_path):
    build("qwen2", tmp_path)
    d = json.loads((tmp_path / "config.json").read_text())
    d["intermediate_size"] = 64  # the file's MLP is 56 wide
    (tmp_path / "config.json").write_text(json.dumps(d))
    with pytest.raises(ValueError, match=r"mlp.gate_proj.weight has shape \(56, 32\), but config.json asks for "
                                         r"\(64, 32\)"):
        gptviz.from_pretrained(tmp_path)


def test_a_name_that_is_neither_a_folder_nor_a_repo_id_says_so(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="not a folder here, nor a Hugging Face repo id"):
        gptviz.from_pretrained(str(tmp_path / "nowhere" / "x" / "y"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ValueError, match="Hugging Face hub can't provide it"):
        gptviz.from_pretrained("someone/some-model")


def test_a_folder_sent_as_files_opens_and_nothing_else_is_read(tmp_path):
    """A browser's folder upload: the files by name (with the folder's path), plus files a model folder may hold that
    are never read (a README, a pickled .bin); a name with a path in it is written by its base name only."""
    from gptviz.model.pretrained import from_uploaded_files

    hf = build("llama", tmp_path)
    files = [(f"my-model/{p.name}", p.read_bytes()) for p in tmp_path.iterdir()]
    files += [("my-model/README.md", b"# hello"), ("my-model/pytorch_model.bin", b"not a pickle at all"),
              ("../../../etc/evil.safetensors", b"junk")]
    files = [f for f in files if not f[0].endswith("evil.safetensors")] + [("../../x/tokenizer.json",
                                                                            (tmp_path / "tokenizer.json").read_bytes())]
    model, tok = from_uploaded_files(files)
    idx = torch.tensor([tok.encode(TEXT)[:20]])
    with torch.no_grad():
        assert (trace(model, idx)["hook_logits"] - hf(idx).logits).abs().max().item() < 1e-4
    with pytest.raises(ValueError, match="no config.json"):
        from_uploaded_files([(n, d) for n, d in files if not n.endswith("config.json")])
    with pytest.raises(ValueError, match="not a readable .safetensors"):
        from_uploaded_files([(n, d) for n, d in files if not n.endswith("model.safetensors")]
                            + [("model.safetensors", b"junk")])


@pytest.mark.parametrize("pct_key, theta_key", [("rotary_pct", "rotary_emb_base"),
                                                ("partial_rotary_factor", "rope_theta")],
                         ids=["pythia-style", "transformers-4-style"])
def test_a_neox_folder_in_the_older_config_format_keeps_its_partial_rotary(tmp_path, pct_key, theta_key):
    """A GPT-NeoX folder saved before ``rope_parameters`` existed (Pythia's config.json: ``rotary_pct`` and
    ``rotary_emb_base`` at the top level; transformers 4's: ``partial_rotary_factor`` and ``rope_theta``): the
    oracle is the same ``transformers`` model in memory (rotary on a quarter of each head, base 2000). Full rotary,
    or the default base, would give other logits at every position after the first."""
    hf = build("gpt_neox", tmp_path)
    d = json.loads((tmp_path / "config.json").read_text())
    params = d.pop("rope_parameters")
    assert params["partial_rotary_factor"] == 0.25
    d.pop("partial_rotary_factor", None)
    d.update({pct_key: 0.25, theta_key: 2000.0, "rope_scaling": None})
    (tmp_path / "config.json").write_text(json.dumps(d))
    model, _ = gptviz.from_pretrained(tmp_path)
    idx = torch.tensor([[5, 9, 2, 7, 7, 1, 30, 4, 11, 250], [17, 3, 3, 8, 120, 9, 2, 2, 64, 5]])
    with torch.no_grad():
        want = hf(idx).logits
    assert (trace(model, idx)["hook_logits"] - want).abs().max().item() < 1e-4
    assert (model.config.rotary_pct, model.config.d_rot, model.config.rope_base) == (0.25, 4, 2000.0)
