"""One place reads a link's parameters: every value is checked against the table the sidebar's widgets use,
before anything is built. Bad values fall back to their defaults, values out of range are clamped, long texts
are cut, and each is a notice naming the parameter."""
import math

import pytest

from gptviz.config import PRESETS, ModelConfig
from gptviz.present import page_context, url_params
from gptviz.present.url_params import MAX_LINE_CHARS, MAX_TEXT_CHARS, PARAMS, read


def notice_about(notes, name: str) -> str:
    found = [n.text for n in notes if f"`{name}`" in n.text]
    assert len(found) == 1, (name, [n.text for n in notes])
    return found[0]


# --------------------------------------------------------------------------- the links from issue 19
def test_negative_merges_is_clamped_to_zero():
    s, notes = read({"merges": "-1"})
    assert s["merges"] == 0 and "below the smallest allowed value 0" in notice_about(notes, "merges")


def test_a_seed_past_64_bits_is_clamped():
    s, notes = read({"seed": "18446744073709551616"})
    assert s["seed"] == 2**31 - 1 and "set to 2147483647" in notice_about(notes, "seed")


def test_merges_are_clamped_for_every_tokenizer():
    s, notes = read({"tokenizer": "gpt2", "merges": "1000000"})
    assert (s["tokenizer"], s["merges"]) == ("gpt2", 200)
    notice_about(notes, "merges")


def test_a_huge_block_size_is_clamped_before_anything_is_built():
    s, notes = read({"preset": "default", "pos_encoding": "none", "block_size": "150000"})
    assert s["block_size"] == 2048 and s["pos_encoding"] == "none"
    notice_about(notes, "block_size")
    cfg = page_context.config_from_settings(s, 76)
    cfg.check_limits(batch=1, seq_len=1)  # the clamped model is one the app can build


def test_a_huge_d_head_is_clamped_before_anything_is_built():
    s, notes = read({"preset": "default", "pos_encoding": "rope", "n_embd": "2", "n_head": "1", "d_head": "1000000",
                     "block_size": "2048"})
    assert (s["d_head"], s["block_size"], s["n_embd"]) == (1024, 2048, 2)
    notice_about(notes, "d_head")
    page_context.config_from_settings(s, 76).check_limits(batch=1, seq_len=1)


def test_a_long_line_is_cut_with_a_notice():
    s, notes = read({"text": "x" * 100_000})
    assert s["text"] == "x" * MAX_LINE_CHARS
    assert f"cut to {MAX_LINE_CHARS:,} characters" in notice_about(notes, "text")


def test_a_long_text_is_cut_in_total_with_a_notice():
    text = "\n".join(["y" * 1000] * 10)
    s, notes = read({"text": text, "source": text})
    assert s["text"] == text[:MAX_TEXT_CHARS] and s["source"] == text[:MAX_TEXT_CHARS]
    assert "was cut to its first 4,096" in notice_about(notes, "text")
    notice_about(notes, "source")


def test_a_text_within_the_limits_is_kept_exactly():
    text = "\n".join(["z" * (MAX_TEXT_CHARS - 20), "🙂 <b>*x*</b>"])
    s, notes = read({"text": text})
    assert s["text"] == text and notes == []


# --------------------------------------------------------------------------- types
@pytest.mark.parametrize("raw", ["abc", "", "  ", "nan", "NaN", "inf", "-inf", "2.5", "1e400", "0x10", "1" * 5000,
                                 "١٢"])
def test_an_int_that_is_not_a_whole_number_falls_back_to_its_default(raw):
    s, notes = read({"preset": "default", "n_layer": raw})
    if raw == "1e400":  # float("1e400") is inf: not a number
        assert s["n_layer"] == 2
    elif raw == "1" * 5000:  # a whole number, far too big: clamped
        assert s["n_layer"] == 48
    else:
        assert s["n_layer"] == PRESETS["default"].n_layer
    assert isinstance(s["n_layer"], int) and not isinstance(s["n_layer"], bool)
    notice_about(notes, "n_layer")


@pytest.mark.parametrize("raw, want", [("3", 3), (" 4 ", 4), ("+5", 5), ("6.0", 6), ("1e1", 10), ("-7", 1),
                                       ("-99999999999999999999999999999999999999", 1), ("99999999999", 48)])
def test_ints_are_read_and_clamped(raw, want):
    s, _ = read({"preset": "default", "n_layer": raw})
    assert s["n_layer"] == want and type(s["n_layer"]) is int


@pytest.mark.parametrize("raw", ["nan", "inf", "-inf", "abc", "", "1e-5" * 30])
def test_a_float_that_is_not_a_finite_number_falls_back(raw):
    s, notes = read({"preset": "default", "dropout": raw, "ln_eps": raw})
    assert s["dropout"] == 0.0 and s["ln_eps"] == 1e-5
    assert all(math.isfinite(s[f]) for f in ("dropout", "ln_eps"))
    notice_about(notes, "dropout"), notice_about(notes, "ln_eps")


def test_floats_are_clamped():
    s, notes = read({"preset": "default", "dropout": "5", "init_std": "0", "ln_eps": "1e-300", "rope_base": "1e308"})
    assert (s["dropout"], s["init_std"], s["ln_eps"], s["rope_base"]) == (0.9, 0.0001, 1e-12, 1e7)
    assert len(notes) == 4


def test_a_clean_link_reads_exactly_and_gives_no_notice():
    q = {"preset": "llama-like", "n_layer": "3", "dropout": "0.1", "ln_eps": "1e-06", "bias": "False",
         "qkv_bias": "same as bias", "attn_proj_bias": "None", "tokenizer": "cl100k_base", "lowercase": "0",
         "lesson": "2", "lstep": "3", "present": "1"}  # the Lessons page's own parameters pass without a word
    s, notes = read(q)
    assert notes == []
    assert (s["preset"], s["n_layer"], s["dropout"], s["bias"], s["qkv_bias"], s["attn_proj_bias"]) == (
        "llama-like", 3, 0.1, False, "same as bias", None)
    assert s["norm"] == "rmsnorm" and s["lowercase"] is False  # the rest of the preset's shape


@pytest.mark.parametrize("field, raw", [("norm", "batchnorm"), ("pos_encoding", "alibi"), ("activation", "swish"),
                                        ("tokenizer", "nope"), ("qkv_bias", "maybe"), ("attn_proj_bias", "2"),
                                        ("norm_placement", ""), ("preset", "gpt5")])
def test_unknown_enum_values_fall_back_to_the_default(field, raw):
    base, _ = read({"preset": "default"})
    s, notes = read({"preset": "default", field: raw}) if field != "preset" else read({field: raw})
    assert s[field] == base[field] if field != "preset" else s["preset"] == page_context.default_preset()
    notice_about(notes, field)


@pytest.mark.parametrize("raw", ["maybe", "2", "", "nan"])
def test_a_bool_that_is_not_true_or_false_falls_back(raw):
    s, notes = read({"preset": "default", "bias": raw, "untrained": raw})
    assert s["bias"] is True and s["untrained"] is False
    notice_about(notes, "bias"), notice_about(notes, "untrained")


@pytest.mark.parametrize("name", ["../../etc/passwd", "nope", "", "sort/../sort"])
def test_a_checkpoint_preset_must_name_a_shipped_model(name):
    s, notes = read({"preset": "checkpoint: " + name})
    assert s["preset"] == page_context.default_preset()
    assert "no shipped model" in notice_about(notes, "preset")


def test_unknown_parameters_are_ignored_with_one_notice():
    q = {f"x{i}": "1" for i in range(30)}
    q["<script>"] = "1"
    s, notes = read(q)
    assert s == read({})[0]
    assert len(notes) == 1 and "x0, x1, x2, x3, x4 and 26 more" in notes[0].text


def test_notices_are_capped_and_do_not_carry_markdown():
    q = {f: "[click](http://evil) *" * 10 for f in PARAMS if PARAMS[f].kind in ("int", "float", "choice")}
    s, notes = read(q)
    assert len(notes) == url_params.MAX_NOTICES + 1 and "more problems" in notes[-1].text
    assert all("[click]" not in n.text and "\\[click\\]" in n.text for n in notes[:-1])  # escaped: no link


def test_repeated_parameters_count_by_their_last_value():
    s, _ = read({"n_layer": ["2", "3"]})
    assert s["n_layer"] == 3 and s["preset"] == "default"  # a shape without a preset means the configurable model


# --------------------------------------------------------------------------- the table
def test_every_url_field_has_a_type_and_range():
    assert set(PARAMS) == set(page_context.URL_FIELDS)
    for name, p in PARAMS.items():
        assert p.kind in ("int", "float", "bool", "choice", "text"), name
        if p.kind in ("int", "float"):
            assert p.lo < p.hi and p.widget() == {"min_value": p.lo, "max_value": p.hi}


@pytest.mark.parametrize("preset", list(PRESETS))
def test_every_preset_is_within_the_ranges(preset):
    """A link to any preset opens it unchanged, and its every setting is one the sidebar's widgets can show."""
    s, notes = read({"preset": preset})
    assert notes == []
    for field in page_context.CONFIG_FIELDS:
        value, problem = url_params.clean(field, str(s[field]), None)
        assert problem is None and value == s[field], (preset, field, s[field])
    assert isinstance(page_context.config_from_settings(s, PRESETS[preset].vocab_size), ModelConfig)


def test_the_largest_settings_still_fit_the_limits_of_one_trace_line():
    """At the top of every range the sidebar allows, a line a link can carry fills block_size even at one character a
    token, and one line may be the whole text (a 512-token paragraph takes over 3,000 characters)."""
    assert MAX_LINE_CHARS >= PARAMS["block_size"].hi and MAX_TEXT_CHARS == MAX_LINE_CHARS
