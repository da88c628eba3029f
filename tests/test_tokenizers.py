import pytest

from gptviz import BUILTIN_TEXT, CharBPETokenizer, TiktokenTokenizer, TokenizerUnavailable, get_tokenizer
from gptviz.text.tokenizers import EOT, visible


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


def test_gpt2_encoding_from_the_shipped_file():
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


OFFLINE_SCRIPT = """
import json, socket
def no_network(*a, **k):
    raise OSError("no network in this test")
socket.socket.connect = no_network
socket.create_connection = no_network
from gptviz.text.tokenizers import TiktokenTokenizer
out = {}
for name in ("gpt2", "cl100k_base", "o200k_base"):
    t = TiktokenTokenizer(name)
    ids = t.encode("hello world")
    out[name] = [ids, t.decode(ids), t.vocab_size]
print(json.dumps(out))
"""


def test_every_encoding_loads_offline_with_an_empty_tiktoken_cache(tmp_path):
    """A fresh machine: no tiktoken cache, no network. The shipped vocabularies are all it needs."""
    import json
    import os
    import subprocess
    import sys

    from conftest import ROOT

    env = dict(os.environ, TIKTOKEN_CACHE_DIR=str(tmp_path), PYTHONPATH=str(ROOT))
    run = subprocess.run([sys.executable, "-c", OFFLINE_SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["gpt2"] == [[31373, 995], "hello world", 50257]
    assert out["cl100k_base"] == [[15339, 1917], "hello world", 100277]
    assert out["o200k_base"] == [[24912, 2375], "hello world", 200019]
    assert not any(tmp_path.iterdir())  # nothing was fetched into the cache


@pytest.mark.parametrize("encoding", ["r50k_base", "cl100k_base", "o200k_base"])
def test_the_encodings_use_tiktokens_own_pattern_and_special_tokens(encoding, monkeypatch):
    """tiktoken's own definition (which would download the ranks) gives the same pattern and special tokens
    as ours, and the shipped file's hash is the one tiktoken expects."""
    import tiktoken_ext.openai_public as public

    from gptviz.text.tokenizers import TIKTOKEN_SPECS, load_mergeable_ranks

    seen = {}

    def fake_load(path, expected_hash=None):
        seen["hash"] = expected_hash
        return {b"a": 0}

    monkeypatch.setattr(public, "load_tiktoken_bpe", fake_load)
    theirs = getattr(public, encoding)()
    ours = TIKTOKEN_SPECS[encoding]
    assert theirs["pat_str"] == ours["pat_str"]
    assert theirs["special_tokens"] == ours["special_tokens"]
    assert seen["hash"] == ours["sha256"]
    assert len(load_mergeable_ranks(encoding)) > 50_000


def test_a_damaged_vocabulary_is_refused(tmp_path):
    import gzip

    from gptviz.text.tokenizers import load_mergeable_ranks

    bad = tmp_path / "r50k_base.tiktoken.gz"
    bad.write_bytes(gzip.compress(b"IQ== 0\n"))
    with pytest.raises(TokenizerUnavailable, match="damaged"):
        load_mergeable_ranks("r50k_base", bad)
    with pytest.raises(TokenizerUnavailable, match="could not be read"):
        load_mergeable_ranks("r50k_base", tmp_path / "missing.gz")
    with pytest.raises(ValueError, match="unknown encoding"):
        TiktokenTokenizer("p50k")


# --------------------------------------------------------------------------- labels read in context
def _oracle_labels(text: str, pieces: list[bytes]) -> list[str]:
    """Each token's label worked out from the text itself: every character's byte range from its own UTF-8
    length, then, for each token's byte range, the characters it touches, with … where one goes on past it."""
    spans, at = [], 0
    for ch in text:
        n = len(ch.encode("utf-8"))
        spans.append((at, at + n, ch))
        at += n
    out, at = [], 0
    for p in pieces:
        s, e = at, at + len(p)
        at = e
        touched = [c for c in spans if c[0] < e and c[1] > s]
        whole = all(s <= c[0] and c[1] <= e for c in touched)
        label = visible("".join(c[2] for c in touched))
        if not whole:
            label = ("…" if touched[0][0] < s else "") + label + ("…" if touched[-1][1] > e else "")
        out.append(label)
    return out


@pytest.mark.parametrize("name", ["gpt2", "cl100k_base"])
@pytest.mark.parametrize("text", ["注意力是你所需要的", "héllo 🤖 wörld, 日本語のテキスト", "the cat sat"])
def test_a_character_split_over_byte_tokens_is_labelled_by_that_character(name, text):
    from gptviz.text.tokenizers import token_labels

    tok = get_tokenizer(name)
    ids = tok.encode(text)
    pieces = [tok._enc.decode_single_token_bytes(i) for i in ids]  # tiktoken's own bytes for each token
    assert b"".join(pieces) == text.encode("utf-8")
    assert token_labels(tok, ids) == _oracle_labels(text, pieces)


def test_gpt2_splits_chinese_characters_and_the_labels_say_which():
    from gptviz.text.tokenizers import token_labels

    tok = get_tokenizer("gpt2")
    labels = token_labels(tok, tok.encode("注意力"))
    assert labels == ["注…", "…注", "意…", "…意", "力…", "…力"]  # GPT-2 gives each of these characters two tokens
    assert all("\\x" not in lab for lab in labels)


def test_a_byte_level_tokenizer_json_labels_split_characters_too(tmp_path):
    pytest.importorskip("tokenizers")
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from gptviz.text.hf_tokenizer import HFTokenizer
    from gptviz.text.tokenizers import token_labels

    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    raw.train_from_iterator(["the cat sat on the mat"] * 20, trainers.BpeTrainer(
        vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[EOT]))
    raw.save(str(tmp_path / "tokenizer.json"))
    tok = HFTokenizer.from_file(tmp_path / "tokenizer.json")
    text = "猫 the cat"
    ids = tok.encode(text)
    pieces = [tok.token_bytes(i) for i in ids]
    assert b"".join(pieces) == text.encode("utf-8")  # 猫 is unseen: three byte tokens
    assert token_labels(tok, ids) == _oracle_labels(text, pieces)
    assert token_labels(tok, ids)[:3] == ["猫…", "…猫…", "…猫"]
