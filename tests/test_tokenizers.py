import pytest

from gptviz import BUILTIN_TEXT, CharBPETokenizer, TiktokenTokenizer, TokenizerUnavailable, get_tokenizer
from gptviz.tokenizers import EOT, visible


def test_base_vocabulary_is_sorted_distinct_characters_then_merges_then_eot():
    t = CharBPETokenizer(num_merges=2).train(["ba", "ab"])
    # "baab": pairs ba, aa, ab each once -> the first seen, (b, a), wins the tie.
    assert t.merges[0] == ("b", "a")
    assert t.id_to_token[:2] == ["a", "b"]
    assert t.id_to_token[2] == "ba"
    assert t.id_to_token[-1] == EOT and t.eot_id == t.vocab_size - 1
    assert t.vocab == {tok: i for i, tok in enumerate(t.id_to_token)}


def test_merges_follow_counts_on_a_worked_example():
    t = CharBPETokenizer(num_merges=3).train(["aaabdaaabac"])
    # aa x4 merges first (left to right: aa a b d aa a b a c); then (aa, a) ties (a, b) at 2 and is seen first.
    assert t.merges == [("a", "a"), ("aa", "a"), ("aaa", "b")]
    assert t.id_to_token == ["a", "b", "c", "d", "aa", "aaa", "aaab", EOT]
    assert t.encode("aaabdaaabac") == [6, 3, 6, 0, 2]


def test_texts_are_joined_with_nothing_between():
    joined = CharBPETokenizer(num_merges=4).train(["the ca", "t the"])
    whole = CharBPETokenizer(num_merges=4).train(["the cat the"])
    assert joined.merges == whole.merges


def test_encode_decode_round_trip_and_rank_order():
    t = CharBPETokenizer(num_merges=20).train([BUILTIN_TEXT])
    text = "the cat sat on the mat."
    ids = t.encode(text)
    assert t.decode(ids) == text
    assert len(ids) < len(text)  # merges were used
    assert t.encode("THE") == t.encode("the")  # lowercase


def test_unknown_characters_are_skipped_and_reported_or_strict():
    t = CharBPETokenizer(num_merges=0).train(["abc"])
    assert t.unknown_chars("a€bz€") == ["€", "z"]
    assert t.decode(t.encode("a€bz")) == "ab"
    with pytest.raises(ValueError, match="not in the vocabulary: '€'"):
        t.encode("a€", errors="strict")
    assert t.encode("") == []


def test_literal_end_of_text_is_the_eot_token():
    t = CharBPETokenizer(num_merges=0, lowercase=False).train(["ab"])
    assert t.encode("a<|endoftext|>b") == [0, t.eot_id, 1]


def test_case_kept_when_lowercase_is_off():
    t = CharBPETokenizer(num_merges=0, lowercase=False).train(["aA"])
    assert t.id_to_token[:2] == ["A", "a"]


def test_to_dict_round_trip():
    t = CharBPETokenizer(num_merges=12).train([BUILTIN_TEXT])
    u = CharBPETokenizer.from_dict(t.to_dict())
    assert u.vocab == t.vocab and u.merges == t.merges
    assert u.encode(BUILTIN_TEXT) == t.encode(BUILTIN_TEXT)
    with pytest.raises(ValueError):
        CharBPETokenizer.from_dict({"num_merges": 1})


def test_bad_arguments():
    with pytest.raises(ValueError, match="num_merges"):
        CharBPETokenizer(num_merges=-1)
    with pytest.raises(ValueError, match="training text"):
        CharBPETokenizer().train([""])
    with pytest.raises(ValueError, match="not been trained"):
        CharBPETokenizer().encode("x")
    with pytest.raises(ValueError, match="outside the vocabulary"):
        CharBPETokenizer(0).train(["ab"]).decode([7])


def test_visible_whitespace():
    assert visible(" a\n\t\x00") == "␣a↵⇥\\x00"


def test_gpt2_encoding_from_the_cache():
    t = TiktokenTokenizer("gpt2")
    assert t.vocab_size == 50257 and t.eot_id == 50256
    ids = t.encode("Hello world<|endoftext|>")
    assert ids == [15496, 995, 50256]  # GPT-2's published ids
    assert t.decode(ids) == "Hello world<|endoftext|>"
    assert t.token_str(995) == "␣world"
    # An emoji is split into byte pieces that are not whole characters: shown readably.
    pieces = [t.token_str(i) for i in t.encode("🙂")]
    assert "".join(pieces).count("\\x") >= 1
    assert get_tokenizer("gpt2").vocab_size == 50257


def test_an_encoding_that_cannot_load_says_so(monkeypatch, tmp_path):
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))  # empty cache, and no network here
    import tiktoken.load
    import tiktoken.registry

    def offline(*args, **kwargs):
        raise ConnectionError("no network")

    monkeypatch.setattr(tiktoken.load, "read_file", offline)  # offline even on a machine with a network
    monkeypatch.setattr(tiktoken.registry, "ENCODINGS", {})
    with pytest.raises(TokenizerUnavailable, match="could not be loaded") as err:
        TiktokenTokenizer("o200k_base")
    assert isinstance(err.value, ValueError)
    with pytest.raises(ValueError, match="unknown encoding"):
        TiktokenTokenizer("p50k")
