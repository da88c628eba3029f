import pytest

from gptviz import PRESETS, ModelConfig, preset
from gptviz.config import MAX_PARAMS


def test_defaults_are_gpt2_choices_at_a_small_size():
    c = ModelConfig()
    assert (c.norm, c.norm_placement, c.pos_encoding, c.activation) == ("layernorm", "pre", "learned", "gelu_tanh")
    assert c.bias and c.qkv_bias and c.tie_weights
    assert c.d_head == c.n_embd // c.n_head and c.d_mlp == 4 * c.n_embd
    assert c.n_embd < 768 and c.n_layer < 12


def test_d_head_may_differ_from_n_embd_over_n_head():
    c = ModelConfig(n_embd=12, n_head=3, d_head=5)
    assert c.d_attn == 15


@pytest.mark.parametrize("kwargs, fragment", [
    (dict(n_embd=30, n_head=4), "n_embd=30 must be divisible by n_head=4 when d_head is not given"),
    (dict(n_head=0), "n_head=0 must be at least 1"),
    (dict(vocab_size=2.5), "vocab_size=2.5 must be a whole number"),
    (dict(n_layer=True), "n_layer=True must be a whole number"),
    (dict(norm="batchnorm"), "norm='batchnorm' must be one of 'layernorm', 'rmsnorm'"),
    (dict(norm_placement="sandwich"), "norm_placement='sandwich' must be one of"),
    (dict(pos_encoding="alibi"), "pos_encoding='alibi' must be one of"),
    (dict(activation="swish"), "activation='swish' must be one of"),
    (dict(dropout=1.0), "dropout=1.0 must be at least 0 and below 1"),
    (dict(init_std=0), "init_std=0 must be above 0"),
    (dict(ln_eps=-1e-5), "ln_eps=-1e-05 must be above 0"),
    (dict(bias="yes"), "bias='yes' must be True or False"),
    (dict(pos_encoding="rope", n_embd=6, n_head=2), "d_head=3 must be even when pos_encoding='rope'"),
    (dict(d_mlp=0), "d_mlp=0 must be at least 1"),
    (dict(seed=-1), "seed=-1 must be 0 or more"),
    (dict(dropout=float("nan")), "dropout=nan must be a finite number"),
])
def test_invalid_values_name_the_field_and_the_rule(kwargs, fragment):
    with pytest.raises(ValueError) as err:
        ModelConfig(**kwargs)
    assert fragment in str(err.value)


def test_qkv_bias_follows_bias_unless_given():
    assert ModelConfig(bias=False).qkv_bias is False
    assert ModelConfig(bias=False, qkv_bias=True).qkv_bias is True


def test_replace_recomputes_derived_sizes():
    c = ModelConfig(n_embd=16, n_head=2).replace(n_embd=32)
    assert (c.d_head, c.d_mlp) == (16, 128)
    assert ModelConfig(d_head=4, n_embd=16, n_head=2).replace(seed=3).d_head == 4


def test_presets_have_the_promised_shapes():
    assert {"default", "explainer", "gpt2-small", "llama-like", "original-transformer"} <= set(PRESETS)
    g = PRESETS["gpt2-small"]
    assert (g.n_layer, g.n_head, g.n_embd, g.block_size, g.vocab_size) == (12, 12, 768, 1024, 50257)
    assert g.num_params() == 124_439_808  # GPT-2 small, tied head
    e = PRESETS["explainer"]
    assert (e.n_layer, e.n_head, e.n_embd, e.block_size) == (1, 2, 4, 8)
    ll = PRESETS["llama-like"]
    assert (ll.norm, ll.pos_encoding, ll.bias, ll.qkv_bias) == ("rmsnorm", "rope", False, False)
    o = PRESETS["original-transformer"]
    assert (o.norm_placement, o.activation, o.pos_encoding) == ("post", "relu", "sinusoidal")


def test_preset_overrides_and_unknown_name():
    assert preset("explainer", vocab_size=30).vocab_size == 30
    with pytest.raises(ValueError, match="unknown preset 'nope'"):
        preset("nope")


def test_round_trip_through_dict_and_unknown_fields():
    c = PRESETS["llama-like"]
    assert ModelConfig.from_dict(c.to_dict()) == c
    with pytest.raises(ValueError, match="unknown config field"):
        ModelConfig.from_dict({"n_layers": 3})


def test_limits_refuse_before_allocating():
    huge = ModelConfig(n_embd=8192, n_head=64, n_layer=48, vocab_size=50257)
    assert huge.num_params() > MAX_PARAMS
    with pytest.raises(ValueError, match="parameters, over the limit"):
        huge.check_limits()
    with pytest.raises(ValueError, match="GB, over the limit"):
        PRESETS["gpt2-small"].check_limits(batch=64, seq_len=1024)
    PRESETS["gpt2-small"].check_limits(batch=1, seq_len=256)
