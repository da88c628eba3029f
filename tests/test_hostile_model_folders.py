"""Hostile Hugging Face model folders (issue 33, "Loaders never crash"): every value a family reads from
``config.json`` is checked for its type and range before anything is built, the largest token id of
``tokenizer.json`` is checked against the model's embedding when the folder opens, and every failure is a ValueError
that names the field (the pages catch ValueError only: any other exception crashes the page).

Nothing here needs ``transformers``: a config is judged from ``config.json`` alone (``model_config``), and the one
folder that opens is a GPT-2 of 16 tokens, 4 wide, whose tensors are written out by hand below."""
import json
import math
import re

import pytest
import torch

import gptviz
from gptviz.config import MAX_PARAMS
from gptviz.model.hf_families import MAX_CONTEXT
from gptviz.model.pretrained import model_config

tokenizers = pytest.importorskip("tokenizers")
safetensors_torch = pytest.importorskip("safetensors.torch")

LLAMA = {"model_type": "llama", "vocab_size": 16, "hidden_size": 8, "intermediate_size": 8, "num_hidden_layers": 1,
         "num_attention_heads": 2, "num_key_value_heads": 1, "max_position_embeddings": 8}
BASES = {
    "gpt2": {"model_type": "gpt2", "vocab_size": 16, "n_embd": 8, "n_layer": 1, "n_head": 2, "n_ctx": 8},
    "llama": LLAMA,
    "mistral": {**LLAMA, "model_type": "mistral", "sliding_window": 4},
    "qwen2": {**LLAMA, "model_type": "qwen2", "head_dim": 4},
    "gemma": {**LLAMA, "model_type": "gemma", "head_dim": 4},
    "gpt_neox": {"model_type": "gpt_neox", "vocab_size": 16, "hidden_size": 16, "intermediate_size": 8,
                 "num_hidden_layers": 1, "num_attention_heads": 2, "max_position_embeddings": 8},
}

# The wrong values of each kind of field. A size may not be huge (above the parameter limit it can't fit); a
# context length may (it is capped at MAX_CONTEXT, as a longer text is refused).
NAN, INF = float("nan"), float("inf")
WRONG = {
    "size": [[8], {"n": 8}, "8", True, False, 8.5, NAN, INF, -INF, -1, 0, 10**30, MAX_PARAMS + 1],
    "context": [[8], {"n": 8}, "8", True, 8.5, NAN, INF, -1, 0],
    "eps": [[1e-5], {"e": 1}, "1e-5", True, NAN, INF, -INF, -1e-5, 0, 0.0],
    "theta": [[1e4], {"t": 1}, "10000", True, NAN, INF, -1.0, 0, 0.5, 1, 1.0],
    "fraction": [[0.5], {"f": 1}, "0.5", True, NAN, INF, -0.5, 0, 0.0, 1.5, 10**30],
    "flag": [[True], {"b": True}, "false", "true", 0, 1, 0.0, NAN],
    "text": [["silu"], {"act": "silu"}, 5, True, NAN, "mish"],
    # a scaling gptviz does not compute, or one of the four without its factor (tests/test_rope_scaling_oracle.py)
    "rope kind": [["linear"], {"type": "linear"}, 5, True, NAN, "", "longrope", "linear", "llama3", "yarn"],
    "object": ["linear", ["linear"], 5, True, NAN],
    "count": [[8], {"n": 8}, "8", True, 8.5, NAN, INF, -1],  # 0 is a count too (max_window_layers: every layer)
    "layer types": ["sliding_attention", {"a": 1}, 5, True, NAN, [], ["sliding_attention", "full_attention"],
                    ["chunked_attention"], [5], [None]],  # wanted: one of the two types per layer (the bases have 1)
}
LLAMA_FIELDS = {"vocab_size": "size", "hidden_size": "size", "intermediate_size": "size", "num_hidden_layers": "size",
                "num_attention_heads": "size", "num_key_value_heads": "size", "head_dim": "size",
                "max_position_embeddings": "context", "rms_norm_eps": "eps",
                "initializer_range": "eps", "rope_theta": "theta", "rotary_emb_base": "theta",
                "partial_rotary_factor": "fraction", "rotary_pct": "fraction", "rope_parameters.rope_theta": "theta",
                "rope_parameters.partial_rotary_factor": "fraction", "rope_parameters.rope_type": "rope kind",
                "rope_scaling.type": "rope kind", "rope_scaling.rope_type": "rope kind", "rope_parameters": "object",
                "rope_scaling": "object", "mlp_bias": "flag", "attention_bias": "flag", "tie_word_embeddings": "flag",
                "hidden_act": "text", "model_type": "text"}
FIELDS = {
    "gpt2": {"vocab_size": "size", "n_embd": "size", "n_layer": "size", "n_head": "size", "n_inner": "size",
             "n_positions": "context", "n_ctx": "context", "layer_norm_epsilon": "eps",
             "initializer_range": "eps", "scale_attn_by_inverse_layer_idx": "flag", "reorder_and_upcast_attn": "flag",
             "add_cross_attention": "flag", "scale_attn_weights": "flag", "tie_word_embeddings": "flag",
             "activation_function": "text", "model_type": "text"},
    "llama": LLAMA_FIELDS,
    # a sliding window: Mistral's (every layer); Qwen2's (use_sliding_window, and the layers it is on). The families
    # without one in transformers ignore a sliding_window key, as transformers does
    "mistral": {**LLAMA_FIELDS, "sliding_window": "context"},
    "qwen2": {k: v for k, v in LLAMA_FIELDS.items() if k != "attention_bias"}  # Qwen2's q/k/v always have biases
    | {"use_sliding_window": "flag", "sliding_window": "context", "max_window_layers": "count",
       "layer_types": "layer types"},
    "gemma": {**LLAMA_FIELDS, "hidden_activation": "text", "use_bidirectional_attention": "flag"},
    "gpt_neox": {k: v for k, v in LLAMA_FIELDS.items() if k not in ("num_key_value_heads", "head_dim", "mlp_bias",
                                                                    "rms_norm_eps")}
    | {"layer_norm_eps": "eps", "use_parallel_residual": "flag"},
}


def write_config(folder, d: dict) -> None:
    (folder / "config.json").write_text(json.dumps(d))


def read_config(monkeypatch, d: dict):
    """``model_config`` of a folder whose config.json holds ``d``, without the file: ``d`` goes through JSON as the
    file's text would (NaN and Infinity included), and the file reading itself is tested where a folder is opened
    (writing some 1,500 files would take seconds)."""
    from gptviz.model import pretrained

    monkeypatch.setattr(pretrained, "_read_json", lambda path, limit, what: json.loads(json.dumps(d)))
    return model_config("a folder")


def with_value(base: dict, field: str, value) -> dict:
    """``base`` with ``field`` (``outer.inner`` for a key inside an object) set to ``value``."""
    d = json.loads(json.dumps(base))
    if "." in field:
        outer, inner = field.split(".")
        d[outer] = {inner: value}
    else:
        d[field] = value
    return d


def test_every_base_config_opens_so_each_refusal_below_is_for_the_wrong_value(monkeypatch):
    """The baselines the wrong values are put into are read without complaint (else every case would pass for the
    wrong reason)."""
    for family, d in BASES.items():
        cfg, got = read_config(monkeypatch, d)
        assert got == family and cfg.vocab_size == 16


@pytest.mark.parametrize("change, field", [
    ({"model_type": ["llama"]}, "model_type"),
    ({"rope_scaling": "linear"}, "rope_scaling"),
    ({"num_attention_heads": 0}, "num_attention_heads"),  # and no head_dim: hidden_size / 0
])
def test_the_reported_malformed_configs_are_a_value_error_naming_the_field(tmp_path, change, field):
    """The three findings of issue 33, exactly: before, a TypeError, an AttributeError and a ZeroDivisionError."""
    write_config(tmp_path, {**LLAMA, **change})
    with pytest.raises(ValueError, match=f"config.json's {field}="):
        gptviz.from_pretrained(tmp_path)


@pytest.mark.parametrize("family, field", [(f, k) for f, fields in FIELDS.items() for k in fields])
def test_every_wrong_type_or_range_of_every_field_is_a_value_error_naming_it(monkeypatch, family, field):
    """Each field each family reads, given each wrong value of its kind (a list, an object, a string or a bool where
    a number is wanted, nan, ±inf, negative, zero, huge): a ValueError whose message names the field, for every one
    of them; the wrong values that are not a ValueError naming the field are listed together."""
    kind = FIELDS[family][field]
    base = BASES[family]
    if family == "qwen2" and field in ("sliding_window", "max_window_layers", "layer_types"):
        base = {**base, "use_sliding_window": True}  # read only where the window is on
    wrong = []
    for value in WRONG[kind]:
        try:
            read_config(monkeypatch, with_value(base, field, value))
        except ValueError as exc:
            if not re.search(rf"(?<![\w.]){re.escape(field)}\b", str(exc)):
                wrong.append(f"{value!r}: ValueError not naming it: {exc}")
        except Exception as exc:  # noqa: BLE001 - the point: anything else crashes the page
            wrong.append(f"{value!r}: {type(exc).__name__}: {exc}")
        else:
            wrong.append(f"{value!r}: accepted")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("family, field, value", [
    ("gpt2", "n_positions", 10**30),  # a context length is capped, never refused for its size
    ("llama", "max_position_embeddings", 10**30),
    ("llama", "num_key_value_heads", None),  # null is the same as absent: as many as num_attention_heads
    ("llama", "partial_rotary_factor", 1),  # a whole number where a fraction is wanted
    ("llama", "rope_theta", 500000),
    ("gpt_neox", "rope_scaling.type", "default"),
    ("gemma", "hidden_act", "gelu"),
])
def test_right_values_at_the_edges_of_each_rule_still_open(monkeypatch, family, field, value):
    cfg, _ = read_config(monkeypatch, with_value(BASES[family], field, value))
    assert cfg.block_size == (MAX_CONTEXT if field in ("n_positions", "max_position_embeddings") else 8)
    if field == "num_key_value_heads":
        assert cfg.n_kv_head == cfg.n_head == 2
    if field.startswith("rope_theta"):
        assert cfg.rope_base == 500000.0


@pytest.mark.parametrize("family, change, named", [
    ("llama", {"num_attention_heads": 2, "num_key_value_heads": 4}, r"num_attention_heads=2 must be divisible by "
                                                                    r"num_key_value_heads=4"),
    ("llama", {"num_attention_heads": 16, "num_key_value_heads": 16}, r"num_attention_heads=16 is more than its "
                                                                      r"hidden_size=8, and it has no head_dim"),
    ("qwen2", {"head_dim": 3}, r"d_head=3 must be even .* d_head is head_dim"),  # rotary turns pairs
    ("gpt_neox", {"hidden_size": 9, "num_attention_heads": 2}, r"n_embd=9 must be divisible by n_head=2 .*(?=.*n_embd "
                                                                r"is hidden_size)(?=.*n_head is num_attention_heads)"),
    ("gpt2", {"n_embd": 9}, r"n_embd=9 must be divisible by n_head=2"),
    ("llama", {"vocab_size": MAX_PARAMS}, r"over the limit .*vocab_size.*n_layer is num_hidden_layers"),
])
def test_fields_that_disagree_are_refused_with_their_config_json_names(monkeypatch, family, change, named):
    """Rules across fields (ModelConfig's, worded in its own field names) also say which config.json key each of
    those names stands for."""
    with pytest.raises(ValueError, match=named):
        read_config(monkeypatch, {**BASES[family], **change})


@pytest.mark.parametrize("family, change, want", [
    ("gpt2", {}, {"activation": "gelu_tanh"}),  # activation_function="gelu_new"
    ("llama", {}, {"activation": "silu", "block_size": 8}),  # hidden_act="silu"
    ("qwen2", {"sliding_window": 4}, {"activation": "silu", "block_size": 8, "sliding_window": None}),  # off
    ("qwen2", {"sliding_window": 4, "use_sliding_window": True}, {"block_size": 8, "sliding_window": None}),  # 1 < 28
    ("qwen2", {"use_sliding_window": True, "max_window_layers": 0}, {"sliding_window": 4096, "sliding_layers": None}),
    ("mistral", {"sliding_window": "absent", "max_position_embeddings": 10**5},
     {"block_size": MAX_CONTEXT, "sliding_window": 4096}),  # a mask, not the context
    ("mistral", {"sliding_window": None, "max_position_embeddings": 10**5},
     {"block_size": MAX_CONTEXT, "sliding_window": None}),  # none
    ("gpt_neox", {}, {"rotary_pct": 0.25, "activation": "gelu"}),  # partial_rotary_factor=0.25, hidden_act="gelu"
])
def test_a_key_config_json_leaves_out_takes_the_default_transformers_gives_it(monkeypatch, family, change, want):
    """The oracle is each transformers config class's default (transformers 5's GPT2Config, LlamaConfig,
    Qwen2Config, MistralConfig, GPTNeoXConfig): what transformers would run on the same config.json."""
    d = {k: v for k, v in {**BASES[family], **change}.items() if v != "absent"}
    cfg, _ = read_config(monkeypatch, d)
    assert {k: getattr(cfg, k) for k in want} == want


# --------------------------------------------------------------------------- folders with weights and a tokenizer
TINY_GPT2 = {"model_type": "gpt2", "vocab_size": 16, "n_embd": 4, "n_layer": 1, "n_head": 1, "n_positions": 8}


def write_tiny_gpt2(folder) -> None:
    """A GPT-2 of 16 tokens, 4 wide, one layer, as Hugging Face names and shapes its tensors (Conv1D: (in, out))."""
    C, V, T = 4, 16, 8
    shapes = {"wte.weight": (V, C), "wpe.weight": (T, C), "ln_f.weight": (C,), "ln_f.bias": (C,),
              "h.0.ln_1.weight": (C,), "h.0.ln_1.bias": (C,), "h.0.ln_2.weight": (C,), "h.0.ln_2.bias": (C,),
              "h.0.attn.c_attn.weight": (C, 3 * C), "h.0.attn.c_attn.bias": (3 * C,),
              "h.0.attn.c_proj.weight": (C, C), "h.0.attn.c_proj.bias": (C,),
              "h.0.mlp.c_fc.weight": (C, 4 * C), "h.0.mlp.c_fc.bias": (4 * C,),
              "h.0.mlp.c_proj.weight": (4 * C, C), "h.0.mlp.c_proj.bias": (C,)}
    g = torch.Generator().manual_seed(0)
    safetensors_torch.save_file({k: torch.randn(s, generator=g) for k, s in shapes.items()},
                                str(folder / "model.safetensors"))
    write_config(folder, TINY_GPT2)


def write_tokenizer(folder, vocab: dict, **extra) -> None:
    """A word-level tokenizer.json: each word of ``vocab`` is one token of the id given ("a" stands for words it
    lacks)."""
    doc = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
           "pre_tokenizer": {"type": "Whitespace"}, "post_processor": None, "decoder": None,
           "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "a"}, **extra}
    (folder / "tokenizer.json").write_text(json.dumps(doc))


def test_a_tokenizer_whose_largest_id_has_no_embedding_row_is_refused_when_the_folder_opens(tmp_path):
    """The finding of issue 33, exactly: ids {0, 1, 5000} and 16 rows in the embedding. Three tokens pass a check
    of their count against 16; before, the folder opened and a page broke later on "token id 5000 is outside the
    vocabulary"."""
    write_tiny_gpt2(tmp_path)
    write_tokenizer(tmp_path, {"a": 0, "b": 1, "c": 5000})
    with pytest.raises(ValueError, match=r"tokenizer.json has token id 5,000 \('c'\), outside the model's "
                                         r"vocabulary: config.json's vocab_size=16"):
        gptviz.from_pretrained(tmp_path)


def test_a_tokenizer_one_id_inside_the_embedding_opens_and_one_beyond_does_not(tmp_path):
    """The boundary: the largest id 15 has the last of 16 rows; 16 has none."""
    write_tiny_gpt2(tmp_path)
    write_tokenizer(tmp_path, {"a": 0, "b": 1, "c": 15})
    _, tok = gptviz.from_pretrained(tmp_path)
    assert tok.vocab_size == 16
    write_tokenizer(tmp_path, {"a": 0, "b": 1, "c": 16})
    with pytest.raises(ValueError, match="token id 16 "):
        gptviz.from_pretrained(tmp_path)


def test_a_tokenizer_with_gaps_in_its_ids_decodes_every_id_it_has(tmp_path):
    """Ids {0, 1, 5} (a gap, within 16 rows): the ids run to 5, so the tokenizer's vocab_size is 6, not its 3 tokens
    (with 3, decoding id 5 said it was outside the vocabulary). The oracle is the tokenizers library's own decode."""
    write_tiny_gpt2(tmp_path)
    write_tokenizer(tmp_path, {"a": 0, "b": 1, "c": 5})
    model, tok = gptviz.from_pretrained(tmp_path)
    own = tokenizers.Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    assert (tok.vocab_size, model.config.vocab_size) == (6, 16)
    assert tok.encode("c b a") == [5, 1, 0]
    assert tok.decode([5, 1, 0]) == own.decode([5, 1, 0], skip_special_tokens=False)
    assert tok.token_str(5) == "c"


def test_a_post_processor_that_adds_an_id_beyond_the_embedding_is_refused(tmp_path):
    """A post-processor adds ids of its own (Llama's beginning-of-text token) that need not be in the vocabulary:
    here 99999, added to every text, which the model has no row for."""
    write_tiny_gpt2(tmp_path)
    post = {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                                     {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"Sequence": {"id": "A", "type_id": 0}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [99999], "tokens": ["<s>"]}}}
    write_tokenizer(tmp_path, {"a": 0, "b": 1}, post_processor=post)
    assert tokenizers.Tokenizer.from_file(str(tmp_path / "tokenizer.json")).encode("a").ids == [99999, 0]
    with pytest.raises(ValueError, match="token id 99,999"):
        gptviz.from_pretrained(tmp_path)


@pytest.mark.parametrize("model, message", [
    ({"type": "WordLevel", "vocab": {"a": 0}, "unk_token": "<unk>"}, "can't encode text: .*Missing"),  # no <unk> row
    ({"type": "WordLevel", "vocab": {}, "unk_token": "<unk>"}, "no tokens"),
    ({"type": "WordLevel", "vocab": {"a": -1}, "unk_token": "a"}, "can't be read by the tokenizers library"),
    ({"type": "WordLevel", "vocab": {"a": 2**32}, "unk_token": "a"}, "can't be read by the tokenizers library"),
    ({"type": "WordLevel", "vocab": {"a": "0"}, "unk_token": "a"}, "can't be read by the tokenizers library"),
])
def test_a_tokenizer_that_fails_on_its_first_text_is_refused_when_the_folder_opens(tmp_path, model, message):
    """A tokenizer the library reads but that can't encode a word it lacks (its unknown token is not in its
    vocabulary), one with no tokens, and ids the library refuses to read: each a ValueError on opening."""
    write_tiny_gpt2(tmp_path)
    write_tokenizer(tmp_path, {})
    doc = json.loads((tmp_path / "tokenizer.json").read_text())
    (tmp_path / "tokenizer.json").write_text(json.dumps({**doc, "model": model}))
    with pytest.raises(ValueError, match=message):
        gptviz.from_pretrained(tmp_path)


def test_a_tokenizer_json_s_padding_and_truncation_are_not_applied(tmp_path):
    """A tokenizer.json may say to pad every text to a fixed length (were it a billion, a billion ids would be made
    for the first text) or to cut it: transformers' tokenizer does neither unless asked (padding=False,
    truncation=False), and gptviz encodes as it does. Here: padding to a million with id 3, truncation to 1 token."""
    write_tiny_gpt2(tmp_path)
    padding = {"strategy": {"Fixed": 10**6}, "direction": "Right", "pad_to_multiple_of": None, "pad_id": 3,
               "pad_type_id": 0, "pad_token": "[PAD]"}
    truncation = {"direction": "Right", "max_length": 1, "strategy": "LongestFirst", "stride": 0}
    write_tokenizer(tmp_path, {"a": 0, "b": 1, "c": 5}, padding=padding, truncation=truncation)
    _, tok = gptviz.from_pretrained(tmp_path)
    assert tok.encode("c b a") == [5, 1, 0]


def test_a_config_asking_for_more_layers_than_the_weights_hold_is_refused_before_listing_them(tmp_path):
    """A million layers of a 4-wide GPT-2 pass the parameter and trace limits (about 250 parameters a layer); the
    folder holds 16 tensors. Refused at once, before a list of 12 million tensor names is made."""
    write_tiny_gpt2(tmp_path)
    write_config(tmp_path, {**TINY_GPT2, "n_layer": 10**6})
    with pytest.raises(ValueError, match=r"config.json's n_layer=1,000,000 asks for more layers than the weights "
                                         r"hold tensors \(16\)"):
        gptviz.from_pretrained(tmp_path)


def test_the_tiny_folder_opens_and_computes_what_its_weights_say(tmp_path):
    """The folder the tests above spoil is a good one: the logits of one token are its hand-computed GPT-2 forward
    pass (one position: attention returns the value of that position). Its config.json names no
    activation_function: GPT-2's default is gelu_new, the tanh approximation (transformers' GPT2Config)."""
    write_tiny_gpt2(tmp_path)
    write_tokenizer(tmp_path, {"a": 0, "b": 1, "c": 5})
    model, tok = gptviz.from_pretrained(tmp_path)
    w = safetensors_torch.load_file(str(tmp_path / "model.safetensors"))
    ln = lambda x, p: torch.nn.functional.layer_norm(x, (4,), w[p + ".weight"], w[p + ".bias"], 1e-5)
    x = w["wte.weight"][5] + w["wpe.weight"][0]
    v = (ln(x, "h.0.ln_1") @ w["h.0.attn.c_attn.weight"] + w["h.0.attn.c_attn.bias"])[8:]
    x = x + v @ w["h.0.attn.c_proj.weight"] + w["h.0.attn.c_proj.bias"]
    h = torch.nn.functional.gelu(ln(x, "h.0.ln_2") @ w["h.0.mlp.c_fc.weight"] + w["h.0.mlp.c_fc.bias"],
                                 approximate="tanh")
    x = x + h @ w["h.0.mlp.c_proj.weight"] + w["h.0.mlp.c_proj.bias"]
    want = ln(x, "ln_f") @ w["wte.weight"].T
    with torch.no_grad():
        got = model(torch.tensor([tok.encode("c")]))
    got = got[0] if isinstance(got, tuple) else got
    assert torch.allclose(got[0, -1], want, atol=1e-5)
    assert not math.isnan(float(want.sum()))
