"""Oracle tests of ``gptviz.model.pretrained`` (opening a model folder): each check at its boundary (a limit met
and one past it), the exact message a user reads, the order of the checks (config.json, then tokenizer.json, then
the weights) and the weights themselves, against a GPT-2 of 16 tokens, 4 wide, whose tensors are written out here
by hand with ``safetensors.torch`` (the oracle: the stored tensors, and GPT-2's forward pass written out)."""
import importlib
import importlib.util
import json
import math
import sys

import pytest
import torch

from gptviz.model import pretrained

safetensors_torch = pytest.importorskip("safetensors.torch")
pytest.importorskip("tokenizers")
# transformers and huggingface_hub are imported when a test first uses them (tests/lazy_import.py)
HAS_HUB = importlib.util.find_spec("huggingface_hub") is not None

CONFIG = {"model_type": "gpt2", "vocab_size": 16, "n_embd": 4, "n_layer": 1, "n_head": 1, "n_positions": 8}
C, V, T = 4, 16, 8
SHAPES = {"wte.weight": (V, C), "wpe.weight": (T, C), "ln_f.weight": (C,), "ln_f.bias": (C,),
          "h.0.ln_1.weight": (C,), "h.0.ln_1.bias": (C,), "h.0.ln_2.weight": (C,), "h.0.ln_2.bias": (C,),
          "h.0.attn.c_attn.weight": (C, 3 * C), "h.0.attn.c_attn.bias": (3 * C,),
          "h.0.attn.c_proj.weight": (C, C), "h.0.attn.c_proj.bias": (C,),
          "h.0.mlp.c_fc.weight": (C, 4 * C), "h.0.mlp.c_fc.bias": (4 * C,),
          "h.0.mlp.c_proj.weight": (4 * C, C), "h.0.mlp.c_proj.bias": (C,)}


def weights(dtype=torch.float32) -> dict:
    g = torch.Generator().manual_seed(0)
    return {k: torch.randn(s, generator=g).to(dtype) for k, s in SHAPES.items()}


def write_folder(folder, w=None, config=None, prefix: str = "") -> dict:
    """A GPT-2 folder as Hugging Face writes it (Conv1D weights stored (in, out)); returns the tensors written."""
    w = weights() if w is None else w
    safetensors_torch.save_file({prefix + k: v for k, v in w.items()}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(config or CONFIG))
    return w


def write_tokenizer(folder, vocab: dict) -> None:
    doc = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
           "pre_tokenizer": {"type": "Whitespace"}, "post_processor": None, "decoder": None,
           "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "a"}}
    (folder / "tokenizer.json").write_text(json.dumps(doc))


def gpt2_logits(w: dict, ids: list[int]) -> torch.Tensor:
    """GPT-2's forward pass written out (one head, 4 wide, gelu_new, causal softmax attention): (T, V) logits."""
    w = {k: v.float() for k, v in w.items()}
    ln = lambda x, p: torch.nn.functional.layer_norm(x, (C,), w[p + ".weight"], w[p + ".bias"], 1e-5)
    x = w["wte.weight"][ids] + w["wpe.weight"][:len(ids)]
    q, k, v = (ln(x, "h.0.ln_1") @ w["h.0.attn.c_attn.weight"] + w["h.0.attn.c_attn.bias"]).split(C, dim=-1)
    s = q @ k.T / math.sqrt(C)
    s = s.masked_fill(torch.triu(torch.ones(len(ids), len(ids), dtype=torch.bool), 1), float("-inf"))
    x = x + s.softmax(-1) @ v @ w["h.0.attn.c_proj.weight"] + w["h.0.attn.c_proj.bias"]
    h = torch.nn.functional.gelu(ln(x, "h.0.ln_2") @ w["h.0.mlp.c_fc.weight"] + w["h.0.mlp.c_fc.bias"],
                                 approximate="tanh")
    x = x + h @ w["h.0.mlp.c_proj.weight"] + w["h.0.mlp.c_proj.bias"]
    return ln(x, "ln_f") @ w["wte.weight"].T


def logits(model, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        out = model(torch.tensor([ids]))
    return (out[0] if isinstance(out, tuple) else out)[0]


def refused(call, *args) -> str:
    with pytest.raises(ValueError) as exc:
        call(*args)
    return str(exc.value)


IDS = [3, 0, 15, 7, 7, 1]


# ---------------------------------------------------------------------- config.json
def test_a_folder_without_config_json_says_so(tmp_path):
    assert refused(pretrained.model_config, tmp_path) == "the folder has no config.json"


def test_config_json_of_exactly_the_size_limit_opens_and_one_byte_over_is_refused_unread(tmp_path, monkeypatch):
    text = json.dumps(CONFIG).ljust(1234)  # padded with spaces to 1,234 bytes
    (tmp_path / "config.json").write_text(text)
    monkeypatch.setattr(pretrained, "MAX_CONFIG_BYTES", 1234)
    assert pretrained.model_config(tmp_path)[1] == "gpt2"
    monkeypatch.setattr(pretrained, "MAX_CONFIG_BYTES", 1233)
    assert refused(pretrained.model_config, tmp_path) == \
        "config.json is 1,234 bytes, over the limit of 1,233: refused unread"


@pytest.mark.parametrize("content, message", [
    (b"{\"model_type\": ", "config.json is not readable JSON"),
    (b"\xff\xfe{}", "config.json is not readable JSON"),  # not UTF-8
    (b"[" * 100_000 + b"]" * 100_000, "config.json is not readable JSON"),  # nested past the recursion limit
    (b"[1, 2]", "config.json must be a JSON object"),
], ids=["cut short", "not utf-8", "nested too deep", "a list"])
def test_a_config_json_that_is_not_a_json_object_says_so(tmp_path, content, message):
    (tmp_path / "config.json").write_bytes(content)
    assert refused(pretrained.model_config, tmp_path) == message


@pytest.mark.parametrize("model_type, shown", [
    ("bert", "'bert'"), (5, "5"), (None, "None"), (["gpt2"], "['gpt2']"),
    ("x" * 58, "'" + "x" * 58 + "'"),  # a repr of 60 characters is shown whole
    ("x" * 59, "'" + "x" * 56 + "…"),  # one of 61 is cut to 57 and …
], ids=["bert", "a number", "absent", "a list", "shown whole", "cut"])
def test_a_model_type_gptviz_does_not_open_is_named_with_the_families_it_does(tmp_path, model_type, shown):
    d = {**CONFIG, "model_type": model_type} if model_type is not None else {"vocab_size": 16}
    (tmp_path / "config.json").write_text(json.dumps(d))
    assert refused(pretrained.model_config, tmp_path) == \
        f"config.json's model_type={shown} is not a family gptviz opens (it opens gemma, gemma2, gemma3_text, gpt2, " \
        "gpt_neox, gpt_oss, llama, mistral, mixtral, olmo2, olmoe, phi3, qwen2, qwen2_moe, qwen3)"


def test_a_config_over_the_limits_says_so_in_config_json_s_words(tmp_path):
    """ModelConfig.check_limits words its refusal in gptviz's field names: the family's config.json names follow."""
    d = {"model_type": "llama", "vocab_size": 10**6, "hidden_size": 1024, "intermediate_size": 8,
         "num_hidden_layers": 1, "num_attention_heads": 2, "max_position_embeddings": 8}
    (tmp_path / "config.json").write_text(json.dumps(d))
    got = refused(pretrained.model_config, tmp_path)
    assert got.startswith("this config has ") and "parameters, over the limit of 600,000,000: make n_layer, n_embd, " \
        "d_mlp or vocab_size smaller (in config.json: " in got, got
    assert "n_layer is num_hidden_layers" in got and "n_embd is hidden_size" in got and \
        "d_mlp is intermediate_size" in got


def test_a_config_without_a_key_its_family_needs_names_the_key_and_the_family(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({k: v for k, v in CONFIG.items() if k != "n_head"}))
    assert refused(pretrained.model_config, tmp_path) == "config.json lacks 'n_head', which a gpt2 model needs"


def test_a_config_is_judged_for_a_one_token_trace_not_a_trace_of_its_whole_context(tmp_path):
    """16 heads and 8,192 positions: one trace of the whole context would hold 2 layers × 16 heads × 8192² float32
    attention weights (over 8 GB, past the trace limit); the folder is judged on one token, which texts of any length
    up to the context are then checked against as they come."""
    d = {"model_type": "llama", "vocab_size": 16, "hidden_size": 256, "intermediate_size": 64,
         "num_hidden_layers": 2, "num_attention_heads": 16, "max_position_embeddings": 8192}
    (tmp_path / "config.json").write_text(json.dumps(d))
    cfg, _ = pretrained.model_config(tmp_path)
    assert cfg.block_size == 8192
    with pytest.raises(ValueError, match="a trace of 1×8192 tokens"):
        cfg.check_limits(batch=1, seq_len=None)


def test_a_config_whose_one_token_trace_fits_opens_though_two_tokens_would_not(tmp_path):
    """A vocabulary of 100 million, 4 wide: 400 million parameters (under the limit); one token's trace holds its
    100 million float32 logits and more (0.8 GB), two tokens' twice that, over the 1.5 GB trace limit. The folder is
    judged on one token of one row."""
    from gptviz.config import MAX_TRACE_BYTES

    d = {**CONFIG, "vocab_size": 100_000_000}
    (tmp_path / "config.json").write_text(json.dumps(d))
    cfg, _ = pretrained.model_config(tmp_path)
    assert 100_000_000 * 4 < MAX_TRACE_BYTES < 2 * 100_000_000 * 4 * 2
    for batch, seq_len in ((2, 1), (1, 2)):
        with pytest.raises(ValueError, match="over the limit"):
            cfg.check_limits(batch=batch, seq_len=seq_len)


# ---------------------------------------------------------------------- weights
def test_the_folder_opens_with_the_weights_it_stores_and_gpt2_s_forward_pass(tmp_path):
    """The oracle: GPT-2's forward pass written out on the stored tensors, over six positions; no tokenizer.json
    gives no tokenizer, and a GPT-2 carries no family note."""
    w = write_folder(tmp_path)
    model, tok = pretrained.from_pretrained(tmp_path)
    assert tok is None and model.family_note is None
    assert torch.allclose(logits(model, IDS), gpt2_logits(w, IDS), atol=1e-5)
    assert torch.equal(model.transformer.wte.weight, w["wte.weight"])


def test_load_folder_opens_the_weights_alone_without_reading_tokenizer_json(tmp_path):
    w = write_folder(tmp_path)
    (tmp_path / "tokenizer.json").write_text("not a tokenizer")
    model = pretrained.load_folder(str(tmp_path))
    assert model.config.vocab_size == 16 and model.family_note is None
    assert torch.allclose(logits(model, IDS), gpt2_logits(w, IDS), atol=1e-5)


def test_gpt2_weights_named_with_the_transformer_prefix_open_the_same(tmp_path):
    """GPT2LMHeadModel saves "transformer.h.0..." where GPT2Model saves "h.0...": both are GPT-2 files."""
    w = write_folder(tmp_path, prefix="transformer.")
    model, _ = pretrained.from_pretrained(tmp_path)
    assert torch.allclose(logits(model, IDS), gpt2_logits(w, IDS), atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_half_bfloat_and_double_weights_open_as_their_float32_values(tmp_path, dtype):
    w = write_folder(tmp_path, weights(dtype))
    model, _ = pretrained.from_pretrained(tmp_path)
    assert model.transformer.wte.weight.dtype == torch.float32
    assert torch.equal(model.transformer.wte.weight, w["wte.weight"].float())
    assert torch.allclose(logits(model, IDS), gpt2_logits(w, IDS), atol=1e-4)


def test_integer_weights_are_refused_naming_the_tensor_and_its_type(tmp_path):
    w = weights()
    w["h.0.ln_1.bias"] = torch.ones(C, dtype=torch.int64)
    write_folder(tmp_path, w)
    assert refused(pretrained.from_pretrained, tmp_path) == \
        "h.0.ln_1.bias holds I64 values: weights must be floating point"


def test_a_tensor_of_the_wrong_shape_is_refused_with_both_shapes(tmp_path):
    w = weights()
    w["h.0.ln_1.bias"] = torch.ones(C + 1)
    write_folder(tmp_path, w)
    assert refused(pretrained.from_pretrained, tmp_path) == \
        "h.0.ln_1.bias has shape (5,), but config.json asks for (4,)"


@pytest.mark.parametrize("n_missing, listed", [
    (1, "h.0.ln_2.bias"),
    (4, "h.0.ln_1.bias, h.0.ln_1.weight, h.0.ln_2.bias, h.0.ln_2.weight"),
    (5, "h.0.ln_1.bias, h.0.ln_1.weight, h.0.ln_2.bias, h.0.ln_2.weight …"),
])
def test_missing_tensors_are_listed_four_at_most_in_order(tmp_path, n_missing, listed):
    gone = ["h.0.ln_2.bias", "h.0.ln_1.weight", "h.0.ln_2.weight", "h.0.ln_1.bias", "ln_f.bias"][:n_missing]
    if n_missing == 1:
        gone = ["h.0.ln_2.bias"]
    write_folder(tmp_path, {k: v for k, v in weights().items() if k not in gone})
    assert refused(pretrained.from_pretrained, tmp_path) == \
        f"the weights lack {listed}, which this gpt2 config.json asks for"


def test_as_many_layers_as_tensors_is_judged_on_the_tensors_and_one_more_is_refused_at_once(tmp_path):
    """16 tensors: a config of 16 layers gets as far as naming the tensors it lacks; 17 is refused by the count."""
    write_folder(tmp_path, config={**CONFIG, "n_layer": 16})
    got = refused(pretrained.from_pretrained, tmp_path)
    assert got.startswith("the weights lack h.1.attn.c_attn.bias, "), got
    write_folder(tmp_path, config={**CONFIG, "n_layer": 17})
    assert refused(pretrained.from_pretrained, tmp_path) == \
        "config.json's n_layer=17 asks for more layers than the weights hold tensors (16)"


def test_a_llama_config_with_too_many_layers_names_its_own_key(tmp_path):
    d = {"model_type": "llama", "vocab_size": 16, "hidden_size": 8, "intermediate_size": 8,
         "num_hidden_layers": 1234, "num_attention_heads": 2, "max_position_embeddings": 8}
    (tmp_path / "config.json").write_text(json.dumps(d))
    safetensors_torch.save_file({"model.embed_tokens.weight": torch.zeros(16, 8)}, str(tmp_path / "model.safetensors"))
    assert refused(pretrained.from_pretrained, tmp_path) == \
        "config.json's num_hidden_layers=1,234 asks for more layers than the weights hold tensors (1)"


def test_a_file_that_is_not_safetensors_is_refused_naming_it(tmp_path):
    write_folder(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}junk")
    got = refused(pretrained.from_pretrained, tmp_path)
    assert got.startswith("model.safetensors is not a readable .safetensors file (") and got.endswith(")"), got
    assert len(got) <= len("model.safetensors is not a readable .safetensors file ()") + 120


def test_safetensors_own_error_is_quoted_cut_to_120_characters(tmp_path, monkeypatch):
    import safetensors

    def fail(path, framework):
        raise RuntimeError("header " + "e" * 300)

    write_folder(tmp_path)
    monkeypatch.setattr(safetensors, "safe_open", fail)
    assert refused(pretrained.from_pretrained, tmp_path) == \
        f"model.safetensors is not a readable .safetensors file (header {'e' * 113})"


# ---------------------------------------------------------------------- shards
def write_shards(folder, w: dict, names=("model-1.safetensors", "model-2.safetensors"), weight_map=None) -> None:
    keys = sorted(w)
    half = {names[0]: keys[:7], names[1]: keys[7:]}
    for n, ks in half.items():
        safetensors_torch.save_file({k: w[k] for k in ks}, str(folder / n))
    if weight_map is None:
        weight_map = {k: n for n, ks in half.items() for k in ks}
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    (folder / "config.json").write_text(json.dumps(CONFIG))


def test_weights_in_two_shards_open_as_one_file_does(tmp_path):
    w = weights()
    write_shards(tmp_path, w)
    model, _ = pretrained.from_pretrained(tmp_path)
    assert torch.allclose(logits(model, IDS), gpt2_logits(w, IDS), atol=1e-5)


def test_a_single_model_safetensors_is_read_before_an_index(tmp_path):
    w = write_folder(tmp_path)
    (tmp_path / "model.safetensors.index.json").write_text("not json")
    model, _ = pretrained.from_pretrained(tmp_path)
    assert torch.allclose(logits(model, IDS), gpt2_logits(w, IDS), atol=1e-5)


def test_a_folder_without_weights_says_gptviz_reads_safetensors_only(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    (tmp_path / "pytorch_model.bin").write_bytes(b"pickle")
    assert refused(pretrained.from_pretrained, tmp_path) == \
        "the folder has no model.safetensors (nor model.safetensors.index.json): gptviz reads safetensors weights only"


@pytest.mark.parametrize("index", [{}, {"weight_map": ["model-1.safetensors"]}, {"weight_map": None}])
def test_an_index_without_a_weight_map_says_so(tmp_path, index):
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    assert refused(pretrained.from_pretrained, tmp_path) == "model.safetensors.index.json has no weight_map"


@pytest.mark.parametrize("shard", ["../model-1.safetensors", "sub/model-1.safetensors", ".model.safetensors",
                                   "model-1.bin", "model-1.safetensors.bak", "../" + "x" * 100 + ".safetensors"])
def test_an_index_naming_a_shard_outside_the_folder_or_not_safetensors_is_refused(tmp_path, shard):
    w = weights()
    write_shards(tmp_path, w)
    bad = {k: "model-1.safetensors" for k in w} | {"wte.weight": shard}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": bad}))
    assert refused(pretrained.from_pretrained, tmp_path) == \
        f"model.safetensors.index.json names a shard {shard[:80]!r} that is not a plain .safetensors file name in " \
        "the folder"


def test_an_index_over_its_size_limit_is_refused_unread(tmp_path, monkeypatch):
    write_shards(tmp_path, weights())
    size = (tmp_path / "model.safetensors.index.json").stat().st_size
    monkeypatch.setattr(pretrained, "MAX_INDEX_BYTES", size)
    pretrained.from_pretrained(tmp_path)
    monkeypatch.setattr(pretrained, "MAX_INDEX_BYTES", size - 1)
    assert refused(pretrained.from_pretrained, tmp_path) == \
        f"model.safetensors.index.json is {size:,} bytes, over the limit of {size - 1:,}: refused unread"


# ---------------------------------------------------------------------- tokenizer.json, and the order of the checks
def test_the_tokenizer_is_read_with_the_folder_s_name_and_checked_before_the_weights(tmp_path):
    folder = tmp_path / "my-model"
    folder.mkdir()
    write_folder(folder)
    write_tokenizer(folder, {"a": 0, "b": 15})
    _, tok = pretrained.from_pretrained(folder)
    assert (tok.name, tok.vocab_size, tok.encode("b a")) == ("my-model", 16, [15, 0])
    write_tokenizer(folder, {"a": 0, "b": 1234})  # a bad tokenizer and broken weights: the tokenizer is named
    (folder / "model.safetensors").write_bytes(b"junk")
    assert refused(pretrained.from_pretrained, folder) == \
        "tokenizer.json has token id 1,234 ('b'), outside the model's vocabulary: config.json's vocab_size=16 gives " \
        "the embedding rows 0 to 15 only"
    (folder / "config.json").write_text(json.dumps({**CONFIG, "n_head": 3}))  # and a bad config: the config is
    assert refused(pretrained.from_pretrained, folder).startswith("n_embd=4 must be divisible by n_head=3")


# ---------------------------------------------------------------------- a name that is not a folder
def test_a_folder_under_the_home_folder_opens_from_a_tilde_path(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "m").mkdir()
    w = write_folder(tmp_path / "m")
    model, _ = pretrained.from_pretrained("~/m")
    assert torch.allclose(logits(model, IDS), gpt2_logits(w, IDS), atol=1e-5)


@pytest.mark.parametrize("name", ["-a/b", "a/b/c", "a", "a/" + "b" * 97, "b" * 97 + "/a", "a b/c", "a/.b"])
def test_a_name_that_is_not_a_repo_id_is_refused_without_the_hub(tmp_path, monkeypatch, name):
    """A repo id is owner/name, each of 1 to 96 letters, digits, _ . - and not starting with one of _ . -."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # the hub must not be asked
    assert refused(pretrained.resolve_folder, name) == \
        f"{name!r} is not a folder here, nor a Hugging Face repo id such as 'HuggingFaceTB/SmolLM2-135M'"


@pytest.mark.parametrize("name", ["y" * 300, "~no-such-user-here/m"], ids=["300 characters", "unknown user"])
def test_a_name_too_long_for_a_path_or_of_an_unknown_home_is_a_value_error(tmp_path, monkeypatch, name):
    """A name longer than the file system allows (the OSError of asking whether it is a folder) and a ``~user``
    path of no such user (expanduser's RuntimeError) are no folder here: a ValueError, shown cut to 200."""
    monkeypatch.chdir(tmp_path)
    assert refused(pretrained.resolve_folder, name) == \
        f"{name[:200]!r} is not a folder here, nor a Hugging Face repo id such as 'HuggingFaceTB/SmolLM2-135M'"


def test_a_repo_id_without_huggingface_hub_says_to_download_the_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    name = "A1/" + "b" * 95  # the longest name a repo id may have
    assert refused(pretrained.resolve_folder, name) == \
        f"{name!r} is not a folder here, and the huggingface_hub package that fetches models is not installed: " \
        "download the model folder and give its path"


def test_a_repo_id_is_fetched_from_the_hub_with_only_the_files_gptviz_reads(tmp_path, monkeypatch):
    hub = importlib.import_module("huggingface_hub") if HAS_HUB else pytest.skip("huggingface_hub is not installed")
    folder = tmp_path / "cache"
    folder.mkdir()
    w = write_folder(folder)
    asked = []
    monkeypatch.setattr(hub, "snapshot_download", lambda name, **kw: asked.append((name, kw)) or str(folder))
    monkeypatch.chdir(tmp_path)
    model, _ = pretrained.from_pretrained("some.one/a_model-2")
    assert asked == [("some.one/a_model-2", {"allow_patterns": ["config.json", "*.safetensors",
                                                                "model.safetensors.index.json", "tokenizer.json"]})]
    assert torch.allclose(logits(model, IDS), gpt2_logits(w, IDS), atol=1e-5)


def test_a_hub_failure_is_named_with_its_type_and_message_cut_to_160(tmp_path, monkeypatch):
    hub = importlib.import_module("huggingface_hub") if HAS_HUB else pytest.skip("huggingface_hub is not installed")

    def fail(name, **kw):
        raise OSError("z" * 300)

    monkeypatch.setattr(hub, "snapshot_download", fail)
    monkeypatch.chdir(tmp_path)
    assert refused(pretrained.resolve_folder, "a/b") == \
        f"'a/b' is not a folder here, and the Hugging Face hub can't provide it (OSError: {'z' * 160}). Offline, " \
        "download the model folder elsewhere and give its path."


# ---------------------------------------------------------------------- a folder sent as files
def folder_files(tmp_path) -> tuple[list, dict]:
    w = write_folder(tmp_path)
    write_tokenizer(tmp_path, {"a": 0, "b": 15})
    return [(f"C:\\Users\\me\\model\\{p.name}", p.read_bytes()) for p in sorted(tmp_path.iterdir())], w


def test_files_sent_with_windows_paths_open_by_their_base_names(tmp_path):
    files, w = folder_files(tmp_path)
    files += [(".hidden.safetensors", b"junk"), ("notes/.tokenizer.json", b"junk"), ("x/README.md", b"# hi")]
    model, tok = pretrained.from_uploaded_files(files)
    assert tok.encode("b") == [15]
    assert tok.name.startswith("gptviz-folder-")  # the temporary folder's name, which the Tokens page shows
    assert torch.allclose(logits(model, IDS), gpt2_logits(w, IDS), atol=1e-5)


def test_files_of_exactly_the_upload_limit_open_and_one_byte_over_is_refused(tmp_path, monkeypatch):
    files, _ = folder_files(tmp_path)
    total = sum(len(d) for _, d in files)
    files += [("README.md", b"x" * 1000), (".hidden.safetensors", b"x" * 1000)]  # left out: not counted
    monkeypatch.setattr(pretrained, "MAX_UPLOAD_BYTES", total)
    pretrained.from_uploaded_files(files)
    monkeypatch.setattr(pretrained, "MAX_UPLOAD_BYTES", total - 1)
    assert refused(pretrained.from_uploaded_files, files) == \
        f"the folder's model files come to {total:,} bytes, over the limit of {total - 1:,}"


def test_files_without_config_json_say_how_to_send_the_folder(tmp_path):
    files, _ = folder_files(tmp_path)
    assert refused(pretrained.from_uploaded_files, [f for f in files if not f[0].endswith("config.json")]) == \
        "the folder has no config.json: open the model's folder as Hugging Face saves it (config.json, " \
        "model.safetensors, tokenizer.json)"


# ---------------------------------------------------------------------- a family with a note, in half precision
def test_a_half_precision_gemma_folder_is_computed_in_float32_and_carries_its_note(tmp_path):
    """Weights stored as float16 are read as float32 before anything is computed on them (Gemma's gains 1 + w
    included: in float16, 1 + w would lose w's last bits). The oracle: the ``transformers`` model with its
    weights rounded to float16 and run in float32."""
    transformers = pytest.importorskip("transformers")
    from hf_models import build

    hf = build("gemma", tmp_path)
    sd = safetensors_torch.load_file(str(tmp_path / "model.safetensors"))
    safetensors_torch.save_file({k: v.half() for k, v in sd.items()}, str(tmp_path / "model.safetensors"),
                                metadata={"format": "pt"})
    with torch.no_grad():  # the parameters only: the rotary frequencies (a buffer) stay as transformers makes them
        for p in hf.parameters():
            p.copy_(p.half().float())
    assert isinstance(hf, transformers.GemmaForCausalLM)
    model, _ = pretrained.from_pretrained(tmp_path)
    idx = [5, 9, 2, 7, 7, 1, 30, 4, 11, 250]
    with torch.no_grad():
        want = hf(torch.tensor([idx])).logits[0]
    assert (logits(model, idx) - want).abs().max().item() < 1e-4
    assert model.family_note == ("Gemma multiplies each token's embedding by √64 before the first block and unembeds "
                                 "with its table unscaled: here W_E is that table times √64 and W_U the table "
                                 "itself, so they are shown untied.")
