"""Oracle tests of ``gptviz.model.hf_families``: each family's ``config.json`` read into a ``ModelConfig``, every
key into its own field (the oracle: the config written out by hand from the keys' meanings in ``transformers``'
config classes), the defaults of the keys a config leaves out (``transformers``' config classes), the exact
messages a user sees for a wrong value, and the weights of the variants the other tests don't build (biases on or
off, tied or not) against the same ``transformers`` model's logits."""
import json
import re

import pytest
import torch
from lazy_import import lazy

import gptviz
from gptviz.config import MAX_PARAMS, ModelConfig
from gptviz.model.hf_families import FAMILIES, MAX_CONTEXT, in_config_terms
from gptviz.model.pretrained import model_config

transformers = lazy("transformers", skip=True)
from hf_models import build


def opened(tmp_path, d: dict) -> ModelConfig:
    (tmp_path / "config.json").write_text(json.dumps(d))
    cfg, family = model_config(tmp_path)
    assert family == d["model_type"]
    return cfg


def refusal(tmp_path, d: dict) -> str:
    """The message of the ValueError opening a folder whose config.json holds ``d`` gives."""
    (tmp_path / "config.json").write_text(json.dumps(d))
    with pytest.raises(ValueError) as exc:
        model_config(tmp_path)
    return str(exc.value)


LLAMA = {"model_type": "llama", "vocab_size": 16, "hidden_size": 8, "intermediate_size": 8, "num_hidden_layers": 1,
         "num_attention_heads": 2, "num_key_value_heads": 1, "max_position_embeddings": 8}
GPT2 = {"model_type": "gpt2", "vocab_size": 16, "n_embd": 8, "n_layer": 1, "n_head": 2, "n_positions": 8}
NEOX = {"model_type": "gpt_neox", "vocab_size": 16, "hidden_size": 16, "intermediate_size": 8,
        "num_hidden_layers": 1, "num_attention_heads": 2, "max_position_embeddings": 8}
GEMMA = {**LLAMA, "model_type": "gemma", "head_dim": 4}

# ---------------------------------------------------------------------- every key into its field
# Each config.json sets every key the family reads to a value other than its default; the oracle is the
# ModelConfig written out by hand from what each key means in transformers (GPT2Config, LlamaConfig, ...).
EVERY_KEY = [
    ("gpt2", {"model_type": "gpt2", "vocab_size": 17, "n_embd": 12, "n_layer": 3, "n_head": 3, "n_positions": 20,
              "n_inner": 20, "activation_function": "relu", "layer_norm_epsilon": 1e-3, "tie_word_embeddings": False,
              "initializer_range": 0.05, "scale_attn_weights": True, "scale_attn_by_inverse_layer_idx": False,
              "reorder_and_upcast_attn": False, "add_cross_attention": False},
     dict(vocab_size=17, block_size=20, n_layer=3, n_head=3, n_embd=12, d_mlp=20, activation="relu", ln_eps=1e-3,
          bias=True, qkv_bias=True, tie_weights=False, init_std=0.05)),
    ("llama", {"model_type": "llama", "vocab_size": 17, "hidden_size": 12, "intermediate_size": 20,
               "num_hidden_layers": 3, "num_attention_heads": 6, "num_key_value_heads": 3, "head_dim": 4,
               "max_position_embeddings": 40, "rope_theta": 500.0, "partial_rotary_factor": 0.5, "hidden_act": "gelu",
               "attention_bias": True, "mlp_bias": False, "tie_word_embeddings": True, "rms_norm_eps": 1e-3,
               "initializer_range": 0.05},
     dict(vocab_size=17, block_size=40, n_layer=3, n_head=6, n_kv_head=3, n_embd=12, d_head=4, d_mlp=20,
          norm="rmsnorm", pos_encoding="rope", rope_base=500.0, rotary_pct=0.5, activation="gelu", gated_mlp=True,
          bias=False, qkv_bias=True, attn_proj_bias=True, tie_weights=True, ln_eps=1e-3, init_std=0.05)),
    ("qwen2", {"model_type": "qwen2", "vocab_size": 17, "hidden_size": 12, "intermediate_size": 20,
               "num_hidden_layers": 3, "num_attention_heads": 6, "num_key_value_heads": 2, "head_dim": 6,
               "max_position_embeddings": 40, "sliding_window": 24, "use_sliding_window": True,
               "max_window_layers": 1,
               "rope_parameters": {"rope_type": "default", "rope_theta": 300.0}, "hidden_act": "tanh",
               "tie_word_embeddings": True, "rms_norm_eps": 1e-4, "initializer_range": 0.07},
     dict(vocab_size=17, block_size=40, sliding_window=24, sliding_layers=(1, 2), n_layer=3, n_head=6, n_kv_head=2,
          n_embd=12, d_head=6, d_mlp=20,
          norm="rmsnorm", pos_encoding="rope", rope_base=300.0, rotary_pct=1.0, activation="tanh", gated_mlp=True,
          bias=False, qkv_bias=True, attn_proj_bias=False, tie_weights=True, ln_eps=1e-4, init_std=0.07)),
    ("mistral", {"model_type": "mistral", "vocab_size": 17, "hidden_size": 12, "intermediate_size": 20,
                 "num_hidden_layers": 3, "num_attention_heads": 6, "num_key_value_heads": 6,
                 "max_position_embeddings": 40, "sliding_window": 24, "rope_theta": 700.0, "hidden_act": "silu",
                 "tie_word_embeddings": False, "rms_norm_eps": 1e-5, "initializer_range": 0.01},
     dict(vocab_size=17, block_size=40, sliding_window=24, n_layer=3, n_head=6, n_kv_head=6, n_embd=12, d_head=2,
          d_mlp=20,
          norm="rmsnorm", pos_encoding="rope", rope_base=700.0, activation="silu", gated_mlp=True, bias=False,
          qkv_bias=False, attn_proj_bias=False, tie_weights=False, ln_eps=1e-5, init_std=0.01)),
    ("gpt_neox", {"model_type": "gpt_neox", "vocab_size": 17, "hidden_size": 12, "intermediate_size": 20,
                  "num_hidden_layers": 3, "num_attention_heads": 3, "max_position_embeddings": 40,
                  "rotary_pct": 0.5, "rotary_emb_base": 900.0, "use_parallel_residual": False,
                  "hidden_act": "gelu_new", "attention_bias": False, "tie_word_embeddings": True,
                  "layer_norm_eps": 1e-3, "initializer_range": 0.03},
     dict(vocab_size=17, block_size=40, n_layer=3, n_head=3, n_embd=12, d_mlp=20, norm="layernorm",
          pos_encoding="rope", rope_base=900.0, rotary_pct=0.5, parallel_attn=False, activation="gelu_tanh",
          bias=True, qkv_bias=False, attn_proj_bias=False, tie_weights=True, ln_eps=1e-3, init_std=0.03)),
    ("gemma", {"model_type": "gemma", "vocab_size": 17, "hidden_size": 12, "intermediate_size": 20,
               "num_hidden_layers": 3, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 8,
               "max_position_embeddings": 40, "rope_theta": 400.0, "hidden_act": "gelu_pytorch_tanh",
               "hidden_activation": "gelu_pytorch_tanh", "attention_bias": True, "rms_norm_eps": 1e-3,
               "initializer_range": 0.04, "tie_word_embeddings": True},
     dict(vocab_size=17, block_size=40, n_layer=3, n_head=2, n_kv_head=1, n_embd=12, d_head=8, d_mlp=20,
          norm="rmsnorm", pos_encoding="rope", rope_base=400.0, activation="gelu_tanh", gated_mlp=True, bias=False,
          qkv_bias=True, attn_proj_bias=True, tie_weights=False, ln_eps=1e-3, init_std=0.04)),
]


@pytest.mark.parametrize("family, d, want", EVERY_KEY, ids=[f for f, _, _ in EVERY_KEY])
def test_every_key_a_family_reads_lands_in_its_own_field(tmp_path, family, d, want):
    assert opened(tmp_path, d) == ModelConfig(**want)


# The keys a config leaves out: the oracle is each transformers config class's own default for that key, read
# from the class (rope_theta 10000, rms_norm_eps 1e-6, layer_norm_epsilon 1e-5, initializer_range 0.02, ...).
def test_the_keys_a_gpt2_config_leaves_out_take_transformers_defaults(tmp_path):
    t = transformers.GPT2Config()
    cfg = opened(tmp_path, {k: v for k, v in GPT2.items()})
    assert (cfg.d_mlp, cfg.ln_eps, cfg.init_std, cfg.tie_weights, cfg.activation) == \
        (4 * 8, t.layer_norm_epsilon, t.initializer_range, t.tie_word_embeddings, "gelu_tanh")  # gelu_new
    assert t.n_inner is None and t.activation_function == "gelu_new"
    # n_ctx is the older name of the context: read when n_positions is absent, n_positions first when both are
    assert opened(tmp_path, {**{k: v for k, v in GPT2.items() if k != "n_positions"}, "n_ctx": 6}).block_size == 6
    assert opened(tmp_path, {**GPT2, "n_ctx": 6}).block_size == 8


@pytest.mark.parametrize("family", ["llama", "mistral", "qwen2"])
def test_the_keys_a_llama_family_config_leaves_out_take_transformers_defaults(tmp_path, family):
    t = transformers.LlamaConfig()
    d = {k: v for k, v in LLAMA.items() if k != "num_key_value_heads"} | {"model_type": family}
    cfg = opened(tmp_path, d)
    assert (cfg.n_kv_head, cfg.d_head, cfg.rope_base, cfg.rotary_pct, cfg.ln_eps, cfg.init_std) == \
        (2, 4, t.rope_parameters["rope_theta"] if t.rope_parameters else 10000.0, 1.0, t.rms_norm_eps,
         t.initializer_range)
    assert (cfg.activation, cfg.tie_weights, cfg.qkv_bias, cfg.attn_proj_bias, cfg.bias) == \
        ("silu", False, family == "qwen2", False, False)
    # without max_position_embeddings: LlamaConfig's default, 2048 (Mistral's default window, 4096, is a mask)
    d.pop("max_position_embeddings")
    assert opened(tmp_path, d).block_size == t.max_position_embeddings == 2048


def test_the_keys_a_neox_config_leaves_out_take_transformers_defaults(tmp_path):
    t = transformers.GPTNeoXConfig()
    cfg = opened(tmp_path, NEOX)
    assert (cfg.rotary_pct, cfg.rope_base, cfg.parallel_attn, cfg.qkv_bias, cfg.attn_proj_bias, cfg.bias) == \
        (0.25, 10000.0, t.use_parallel_residual, t.attention_bias, t.attention_bias, True)
    assert (cfg.ln_eps, cfg.init_std, cfg.tie_weights, cfg.activation, cfg.norm) == \
        (t.layer_norm_eps, t.initializer_range, t.tie_word_embeddings, "gelu", "layernorm")


def test_rope_parameters_win_over_the_older_top_level_keys(tmp_path):
    """transformers 5 reads ``rope_parameters`` (the older top-level keys are what it converts from): where a config
    holds both, the object's values are the ones used."""
    d = {**LLAMA, "rope_parameters": {"rope_theta": 300.0, "partial_rotary_factor": 1.0}, "rope_theta": 700.0,
         "partial_rotary_factor": 0.5}
    cfg = opened(tmp_path, d)
    assert (cfg.rope_base, cfg.rotary_pct) == (300.0, 1.0)
    d["rope_parameters"] = {"rope_type": "default"}  # no values in it: the top-level ones
    cfg = opened(tmp_path, d)
    assert (cfg.rope_base, cfg.rotary_pct) == (700.0, 0.5)
    d["rope_scaling"] = {"rope_type": "default", "type": "linear"}  # the first kind named is the one judged
    assert opened(tmp_path, d).rope_base == 700.0


@pytest.mark.parametrize("change", [{"rope_theta": 1.5}, {"rope_parameters": {"rope_theta": 1.5}},
                                    {"rotary_emb_base": 1.5}])
def test_a_rope_theta_just_above_1_is_read(tmp_path, change):
    """The rule is "above 1" (a base of 1 would turn nothing): 1.5 is above it, wherever it is written."""
    assert opened(tmp_path, {**LLAMA, **change}).rope_base == 1.5


THREE = {"num_hidden_layers": 3}


@pytest.mark.parametrize("family, change, block, window, layers", [
    # transformers' Llama, Gemma, GPT-2 and GPT-NeoX have no sliding window: a stray key is ignored, as there
    ("llama", {"sliding_window": 4}, 8, None, None),
    ("llama", {"sliding_window": 4, "use_sliding_window": True}, 8, None, None),
    ("llama", {"sliding_window": 10**30}, 8, None, None),
    ("gemma", {"sliding_window": 4}, 8, None, None),
    ("gpt2", {"sliding_window": 4}, 8, None, None),
    ("gpt_neox", {"sliding_window": 4}, 8, None, None),
    # Mistral: a window on every layer, whatever use_sliding_window or layer_types say (MistralModel reads neither)
    ("mistral", {"sliding_window": 8}, 8, 8, None),
    ("mistral", {"sliding_window": 9}, 8, 9, None),
    ("mistral", {"sliding_window": 7}, 8, 7, None),
    ("mistral", {"sliding_window": 1}, 8, 1, None),
    ("mistral", {"sliding_window": 6, "use_sliding_window": False}, 8, 6, None),
    ("mistral", {"sliding_window": 6, "layer_types": ["full_attention"]}, 8, 6, None),
    ("mistral", {}, 8, 4096, None),  # MistralConfig's default window
    ("mistral", {"sliding_window": None}, 8, None, None),  # null: none
    # Qwen2: only with use_sliding_window, on the layers i >= max_window_layers (28 by default), or layer_types'
    ("qwen2", {"sliding_window": 6}, 8, None, None),
    ("qwen2", {"sliding_window": 6, "use_sliding_window": True}, 8, None, None),  # 1 layer < 28
    ("qwen2", {"sliding_window": 6, "use_sliding_window": True, "max_window_layers": 0}, 8, 6, None),
    ("qwen2", {"use_sliding_window": True, "max_window_layers": 0}, 8, 4096, None),
    ("qwen2", {"sliding_window": 6, "use_sliding_window": True, "max_window_layers": 1, **THREE}, 8, 6, (1, 2)),
    ("qwen2", {"sliding_window": 6, "use_sliding_window": True, "max_window_layers": 3, **THREE}, 8, None, None),
    ("qwen2", {"sliding_window": 6, "use_sliding_window": True, "max_window_layers": 0, **THREE,
               "layer_types": ["sliding_attention", "full_attention", "sliding_attention"]}, 8, 6, (0, 2)),
    ("qwen2", {"sliding_window": 6, "use_sliding_window": False, **THREE,
               "layer_types": ["full_attention", "attention", "full_attention"]}, 8, None, None),
    ("gpt2", {"n_positions": MAX_CONTEXT + 1}, MAX_CONTEXT, None, None),
    ("gpt2", {"n_positions": MAX_CONTEXT}, MAX_CONTEXT, None, None),
    ("gpt2", {"n_positions": MAX_CONTEXT - 1}, MAX_CONTEXT - 1, None, None),
])
def test_the_context_is_the_positions_capped_and_a_sliding_window_is_a_mask(tmp_path, family, change, block, window,
                                                                            layers):
    """The model is built for its positions (at most MAX_CONTEXT), never for its sliding window: the window is a
    mask on the layers transformers puts it on (issue 38; before, a window shorter than the context was read as
    the context, and a longer text was refused)."""
    base = {"gpt2": GPT2, "llama": LLAMA, "gemma": GEMMA, "gpt_neox": NEOX,
            "mistral": {**LLAMA, "model_type": "mistral"}, "qwen2": {**LLAMA, "model_type": "qwen2"}}[family]
    cfg = opened(tmp_path, {**base, **change})
    assert (cfg.block_size, cfg.sliding_window, cfg.sliding_layers) == (block, window, layers)


# ---------------------------------------------------------------------- the messages a user sees
SCALES = "gptviz computes the rotary scalings 'linear', 'dynamic', 'llama3', 'yarn', 'longrope' (and plain rotary " \
         "positions), not this one"  # the scalings themselves: tests/test_rope_scaling_oracle.py
ACTS = "gelu, gelu_fast, gelu_new, gelu_pytorch_tanh, relu, silu, swish, tanh"  # transformers' names, sorted
GEMMA2 = " is Gemma 2's: this config says model_type 'gemma' (Gemma 1), which has none (a Gemma 2 folder's " \
    "config.json says model_type 'gemma2')"
@pytest.mark.parametrize("change, message", [
    ({"vocab_size": "16"}, "config.json's vocab_size='16' must be a whole number"),
    ({"vocab_size": 0}, "config.json's vocab_size=0 must be at least 1"),
    ({"vocab_size": MAX_PARAMS + 1}, f"config.json's vocab_size={MAX_PARAMS + 1} must be at most {MAX_PARAMS:,}"),
    ({"vocab_size": "x" * 58}, "config.json's vocab_size='" + "x" * 58 + "' must be a whole number"),  # 60 shown
    ({"vocab_size": "x" * 59}, "config.json's vocab_size='" + "x" * 56 + "… must be a whole number"),  # 61 cut
    ({"rms_norm_eps": "1e-5"}, "config.json's rms_norm_eps='1e-5' must be a finite number"),
    ({"rms_norm_eps": 0}, "config.json's rms_norm_eps=0 must be above 0"),
    ({"rope_theta": 1}, "config.json's rope_theta=1 must be above 1"),
    ({"partial_rotary_factor": 1.5}, "config.json's partial_rotary_factor=1.5 must be above 0 and at most 1"),
    ({"rope_parameters": {"partial_rotary_factor": 0}},
     "config.json's rope_parameters.partial_rotary_factor=0 must be above 0 and at most 1"),
    ({"rope_parameters": {"rope_theta": "x"}}, "config.json's rope_parameters.rope_theta='x' must be a finite number"),
    ({"rope_parameters": {"rope_type": 5}}, "config.json's rope_parameters.rope_type=5 must be a string"),
    ({"rope_scaling": {"type": "longrope", "factor": 2.0}},
     "config.json's rope_scaling.type='longrope' needs rope_scaling.short_factor, which it does not have"),
    ({"rope_scaling": {"rope_type": "yarn"}},
     "config.json's rope_scaling.rope_type='yarn' needs rope_scaling.factor, which it does not have"),
    ({"rope_parameters": {"rope_type": "llama3"}, "rope_scaling": {"rope_type": "su"}},  # rope_scaling is the one read
     "config.json's rope_scaling.rope_type='su': " + SCALES),
    ({"rope_scaling": [1]}, "config.json's rope_scaling=[1] must be a JSON object"),
    ({"attention_bias": 1}, "config.json's attention_bias=1 must be true or false"),
    ({"hidden_act": 5}, "config.json's hidden_act=5 must be a string"),
    ({"hidden_act": "mish"}, "hidden_act='mish' has no gptviz equivalent (gptviz has " + ACTS + ")"),
    ({"mlp_bias": True}, "mlp_bias=true is not supported: gptviz's Llama-family MLP has no biases"),
    ({"num_hidden_layers": None}, "config.json lacks 'num_hidden_layers', which a llama model needs"),
    ({"num_attention_heads": 2, "num_key_value_heads": 4},
     "config.json's num_attention_heads=2 must be divisible by num_key_value_heads=4: each key/value head serves the "
     "same number of query heads"),
    ({"num_attention_heads": 9, "num_key_value_heads": 9},
     "config.json's num_attention_heads=9 is more than its hidden_size=8, and it has no head_dim: each head would "
     "be hidden_size / num_attention_heads = 0 wide"),
])
def test_a_wrong_llama_value_is_refused_with_the_message_a_user_reads(tmp_path, change, message):
    """The whole message, as written out here: it names the key as config.json spells it, shows the value (cut to
    60 characters) and says the rule."""
    assert refusal(tmp_path, {**LLAMA, **change}) == message


def test_as_many_heads_as_hidden_size_is_not_refused_for_width_but_for_an_odd_head(tmp_path):
    """num_attention_heads == hidden_size (no head_dim): heads 1 wide, which rotary refuses (it turns pairs); one
    more head than hidden_size is the other refusal."""
    got = refusal(tmp_path, {**LLAMA, "num_attention_heads": 8, "num_key_value_heads": 8})
    assert "is more than its hidden_size" not in got and re.search(r"d_head=1 must be even", got), got


@pytest.mark.parametrize("change, message", [
    ({"scale_attn_by_inverse_layer_idx": True},
     "scale_attn_by_inverse_layer_idx=true is not supported: gptviz computes attention as GPT-2 does"),
    ({"reorder_and_upcast_attn": True},
     "reorder_and_upcast_attn=true is not supported: gptviz computes attention as GPT-2 does"),
    ({"add_cross_attention": True},
     "add_cross_attention=true is not supported: gptviz computes attention as GPT-2 does"),
    ({"scale_attn_weights": False}, "scale_attn_weights=false is not supported: gptviz always divides by √d_head"),
    ({"n_embd": 9}, "n_embd=9 must be divisible by n_head=2 when d_head is not given (in config.json: d_head is n_embd "
                    "/ n_head)"),
    ({"n_inner": 0}, "config.json's n_inner=0 must be at least 1"),
    ({"layer_norm_epsilon": -1}, "config.json's layer_norm_epsilon=-1 must be above 0"),
    ({"initializer_range": 0}, "config.json's initializer_range=0 must be above 0"),
    ({"activation_function": "mish"}, "activation_function='mish' has no gptviz equivalent (gptviz has " + ACTS + ")"),
    ({"tie_word_embeddings": "no"}, "config.json's tie_word_embeddings='no' must be true or false"),
])
def test_a_wrong_gpt2_value_is_refused_with_the_message_a_user_reads(tmp_path, change, message):
    assert refusal(tmp_path, {**GPT2, **change}) == message


def test_a_message_about_gptviz_fields_also_says_their_config_json_names(tmp_path):
    """The rule across fields is ModelConfig's, in its own words; the family's names follow, for the fields the
    message names only (d_head, not n_head inside "n_head=..." of another word)."""
    got = refusal(tmp_path, {**NEOX, "hidden_size": 9})
    assert got.startswith("n_embd=9 must be divisible by n_head=2")
    assert got.endswith("(in config.json: n_head is num_attention_heads; n_embd is hidden_size; d_head is "
                        "hidden_size / num_attention_heads)"), got
    names = {"n_head": "num_attention_heads", "vocab_size": "vocab_size", "d_head": "head_dim"}
    assert in_config_terms("n_head=3 and n_kv_head=2", names) == \
        "n_head=3 and n_kv_head=2 (in config.json: n_head is num_attention_heads)"  # vocab_size: the same name
    assert in_config_terms("x.n_head or 'n_head'", names) == "x.n_head or 'n_head'"  # not a field on its own
    assert in_config_terms("d_headx", names) == "d_headx"


@pytest.mark.parametrize("change, message", [
    ({"use_bidirectional_attention": True},
     "use_bidirectional_attention=true is not supported: gptviz computes causal attention"),
    ({"query_pre_attn_scalar": 1}, "query_pre_attn_scalar" + GEMMA2),
    ({"final_logit_softcapping": 30.0}, "final_logit_softcapping" + GEMMA2),
    ({"attn_logit_softcapping": 50.0}, "attn_logit_softcapping" + GEMMA2),
    ({"tie_word_embeddings": False}, "tie_word_embeddings=false is not supported for gemma: gptviz opens Gemma with "
                                     "its unembedding tied to its embedding table, as every Gemma 1 model is"),
    ({"head_dim": None}, "config.json lacks 'head_dim', which a gemma model needs"),
    ({"head_dim": 3}, "d_head=3 must be even when pos_encoding='rope': rotary embeddings turn pairs of dimensions (in "
                      "config.json: d_head is head_dim)"),
    ({"hidden_act": "relu", "hidden_activation": "gelu"},
     "hidden_act='relu' and hidden_activation='gelu' name different activations (transformers' versions differ on "
     "which one Gemma uses): keep one of them"),
    ({"hidden_activation": "mish"}, "hidden_activation='mish' has no gptviz equivalent (gptviz has " + ACTS + ")"),
])
def test_a_wrong_gemma_value_is_refused_with_the_message_a_user_reads(tmp_path, change, message):
    d = {k: v for k, v in {**GEMMA, **change}.items() if v is not None}
    assert refusal(tmp_path, d) == message


@pytest.mark.parametrize("change, activation", [
    ({}, "gelu_tanh"),  # no hidden_act: Gemma's gelu_pytorch_tanh, as GemmaConfig's default
    ({"hidden_act": "gelu"}, "gelu_tanh"),  # Gemma's first configs: "gelu" meaning the tanh approximation
    ({"hidden_act": "relu"}, "relu"),
    ({"hidden_act": "gelu", "hidden_activation": "gelu_pytorch_tanh"}, "gelu_tanh"),
    ({"hidden_act": "relu", "hidden_activation": "relu"}, "relu"),
    ({"hidden_activation": "gelu_pytorch_tanh"}, "gelu_tanh"),
    ({"hidden_act": "gelu_fast", "hidden_activation": "gelu_new"}, "gelu_tanh"),  # two names, one function
])
def test_gemma_s_activation_is_the_one_transformers_runs(tmp_path, change, activation):
    assert transformers.GemmaConfig().hidden_act == "gelu_pytorch_tanh"
    assert opened(tmp_path, {**GEMMA, **change}).activation == activation


# ---------------------------------------------------------------------- weights of the variants
@pytest.mark.parametrize("family, extra", [
    ("gpt2", {"tie_word_embeddings": False}),
    ("llama", {"attention_bias": True}),
    ("gpt_neox", {"attention_bias": False, "tie_word_embeddings": True}),
    ("gpt_neox", {"attention_bias": True, "use_parallel_residual": True}),
])
def test_the_variants_with_other_biases_and_ties_compute_what_transformers_computes(tmp_path, family, extra):
    """Biases on (Llama's attention_bias: on q, k, v and the output) or off (GPT-NeoX's), the unembedding tied or
    not: the oracle is the same ``transformers`` model's logits on two rows of ids."""
    hf = build(family, tmp_path, **extra)
    names = {n for n, _ in hf.named_parameters()}
    model, _ = gptviz.from_pretrained(tmp_path)
    idx = torch.tensor([[5, 9, 2, 7, 7, 1, 30, 4], [17, 3, 3, 8, 120, 9, 2, 299]])
    with torch.no_grad():
        want = hf(idx).logits
        got = model(idx)
    got = got[0] if isinstance(got, tuple) else got
    assert (got - want).abs().max().item() < 1e-4
    assert model.config.tie_weights == hf.config.tie_word_embeddings
    if family != "gpt2":
        assert any(n.endswith("o_proj.bias") or n.endswith("dense.bias") for n in names) == extra["attention_bias"]
        assert model.config.qkv_bias == model.config.attn_proj_bias == extra["attention_bias"]
    if model.config.tie_weights:
        assert model.lm_head.weight is model.transformer.wte.weight or torch.equal(model.lm_head.weight,
                                                                                  model.transformer.wte.weight)


def test_gemma_s_note_says_how_its_embedding_is_held(tmp_path):
    note = FAMILIES["gemma"].note(ModelConfig(n_embd=64, n_head=2))
    assert note == ("Gemma multiplies each token's embedding by √64 before the first block and unembeds with its "
                    "table unscaled: here W_E is that table times √64 and W_U the table itself, so they are shown "
                    "untied.")
    assert all(FAMILIES[f].note is None for f in FAMILIES if f not in ("gemma", "gemma2", "gemma3_text", "phi3"))
    assert FAMILIES["gemma2"].note(ModelConfig(n_embd=64, n_head=2)) == note  # Gemma 2 and 3 hold it the same way
    assert FAMILIES["gemma3_text"].note(ModelConfig(n_embd=64, n_head=2)) == note
