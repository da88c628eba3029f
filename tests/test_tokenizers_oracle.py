"""gptviz.text.tokenizers against oracles written out here: a character BPE trainer and encoder written the naive way
(count every adjacent pair, take the first most frequent, merge left to right; encode by the earliest merge
present, repeatedly), GPT-2's published ids and tiktoken's own byte tables, UTF-8 read one character at a time by
trying 1 to 4 bytes with Python's decoder; plus the edge cases (the end-of-text marker anywhere, empty text,
control characters at the limits of the visible range, ids at the vocabulary's edge and one past it, unused ids,
damaged or truncated vocabulary files, a missing tiktoken) and the messages a user reads."""
import base64
import gzip
import hashlib
import sys
from collections import Counter

import pytest

import gptviz.text.tokenizers as tk
from gptviz.text.batches import BUILTIN_TEXT
from gptviz.text.tokenizers import (
    EOT,
    CharBPETokenizer,
    TiktokenTokenizer,
    TokenizerUnavailable,
    _utf8_chars,
    get_tokenizer,
    load_mergeable_ranks,
    tiktoken_encoding,
    token_labels,
    visible,
)


# --------------------------------------------------------------------------- visible
def test_visible_marks_whitespace_and_escapes_exactly_the_c0_controls_and_delete():
    """Space, newline, tab and carriage return get their symbols; code points below 32 and 127 become \\xNN;
    32 (space) and 126 (~) and 128 and above stay as they are."""
    assert visible(" \n\t\r") == "␣↵⇥␍"
    assert visible("\x00\x01\x1f\x7f") == "\\x00\\x01\\x1f\\x7f"
    assert visible("!~\x80é注") == "!~\x80é注"
    assert visible("") == ""


# --------------------------------------------------------------------------- the char BPE, by a naive oracle
def naive_train(text, num_merges):
    """The rule as written in the class docstring, the slow way: base = sorted distinct characters, then each
    merge the most frequent adjacent pair (ties: the one seen first), merged left to right everywhere."""
    base = sorted(set(text))
    seq = list(text)
    merges = []
    for _ in range(num_merges):
        if len(seq) < 2:
            break
        pairs = list(zip(seq, seq[1:]))
        counts = Counter(pairs)
        best = max(counts.values())
        a, b = next(p for p in pairs if counts[p] == best)
        merges.append((a, b))
        out, i = [], 0
        while i < len(seq):
            if i + 1 < len(seq) and seq[i] == a and seq[i + 1] == b:
                out.append(a + b)
                i += 2
            else:
                out.append(seq[i])
                i += 1
        seq = out
    vocab = list(base)
    for a, b in merges:
        if a + b not in vocab:
            vocab.append(a + b)
    return base, merges, vocab + [EOT]


def naive_encode(text, merges, vocab):
    """Characters to tokens, then: the earliest-learned merge that occurs, everywhere left to right; repeat."""
    seq = [c for c in text if c in vocab]
    while True:
        present = set(zip(seq, seq[1:]))
        ranked = [m for m in merges if m in present]
        if not ranked:
            break
        a, b = ranked[0]
        out, i = [], 0
        while i < len(seq):
            if i + 1 < len(seq) and seq[i] == a and seq[i + 1] == b:
                out.append(a + b)
                i += 2
            else:
                out.append(seq[i])
                i += 1
        seq = out
    return [vocab.index(t) for t in seq]


@pytest.mark.parametrize("text, merges", [
    ("aaaa aaab abab bab", 6),  # "ab" from two different merges, overlapping runs
    ("abababab", 10),  # "abab" can be spelt as (ab, ab) and by (aba, b): the same string twice
    ("the cat sat on the mat. the end", 12),
    ("xy", 5),  # runs out of pairs: one merge, then a sequence of length 1
    ("z", 3),  # nothing to merge at all
])
def test_training_and_encoding_match_the_naive_rule(text, merges):
    tok = CharBPETokenizer(num_merges=merges, lowercase=False).train(text)  # a bare string is one text
    base, want_merges, vocab = naive_train(text, merges)
    assert tok.base == base and tok.merges == want_merges
    assert tok.id_to_token == vocab and tok.vocab_size == len(vocab)
    assert tok.vocab == {t: i for i, t in enumerate(vocab)}
    assert tok.eot_id == len(vocab) - 1 and tok.name == "char-bpe"
    for probe in (text, text[::-1], text[1:] + text[:2]):
        assert tok.encode(probe) == naive_encode(probe, want_merges, vocab), probe
        assert tok.decode(tok.encode(probe)) == probe


def test_the_end_of_text_marker_is_left_out_of_training_and_read_anywhere_in_a_text():
    tok = CharBPETokenizer(num_merges=2, lowercase=False).train(["ab" + EOT + "ab", EOT])
    assert tok.base == ["a", "b"] and tok.merges == naive_train("abab", 2)[1] == [("a", "b"), ("ab", "ab")]
    ab = tok.vocab["ab"]
    assert tok.encode(EOT) == [tok.eot_id]
    assert tok.encode(EOT + EOT) == [tok.eot_id, tok.eot_id]
    assert tok.encode("ab" + EOT + "b" + EOT) == [ab, tok.eot_id, 1, tok.eot_id]
    assert tok.encode("") == [] and tok.decode([]) == ""
    assert tok.unknown_chars("x" + EOT + "<y") == ["x", "<", "y"]  # the marker's own characters are not unknown
    assert tok.unknown_chars(EOT) == []
    with pytest.raises(ValueError, match=r"^the char BPE needs some training text: every text given was empty$"):
        CharBPETokenizer().train([EOT, ""])


def test_lowercase_applies_to_training_encoding_and_unknown_characters():
    low = CharBPETokenizer(num_merges=1).train(["AbAb"])
    assert low.base == ["a", "b"] and low.lowercase
    assert low.encode("ABab") == low.encode("abab") == [low.vocab["ab"]] * 2
    assert low.unknown_chars("AbC") == ["c"]
    kept = CharBPETokenizer(num_merges=1, lowercase=False).train(["AbAb"])
    assert kept.base == ["A", "b"] and kept.unknown_chars("ABa") == ["B", "a"]
    assert kept.encode("Ab") == [kept.vocab["Ab"]] and kept.encode("ab") == [kept.vocab["b"]]


def test_encode_strict_and_skip_and_a_bad_errors_value():
    tok = CharBPETokenizer(num_merges=0, lowercase=False).train(["abc"])
    assert tok.encode("abc", errors="strict") == [0, 1, 2]  # nothing unknown: strict is fine
    assert tok.encode("aXbYc") == [0, 1, 2]
    with pytest.raises(ValueError, match=r"^characters not in the vocabulary: 'X' 'Y'$"):
        tok.encode("aXbYcX", errors="strict")
    with pytest.raises(ValueError, match=r"^errors='ignore' must be 'skip' or 'strict'$"):
        tok.encode("abc", errors="ignore")


def test_decode_accepts_every_id_of_the_vocabulary_and_refuses_one_past_either_end():
    import numpy as np

    tok = CharBPETokenizer(num_merges=1, lowercase=False).train(["abab"])
    assert tok.vocab_size == 4  # a, b, ab, EOT
    assert tok.decode([0, 3, 2]) == "a" + EOT + "ab"
    assert tok.decode(np.array([1, 0])) == "ba"
    assert tok.token_str(3) == EOT
    for bad in (4, -1):
        with pytest.raises(ValueError, match=rf"^token id {bad} is outside the vocabulary \(vocab_size=4\)$"):
            tok.decode([0, bad])
    spaced = CharBPETokenizer(num_merges=1, lowercase=False).train(["a\ta\n"])
    assert [spaced.token_str(i) for i in range(spaced.vocab_size)] == [visible(t) for t in spaced.id_to_token]
    assert spaced.token_str(spaced.vocab["\t"]) == "⇥"


@pytest.mark.parametrize("bad", [-1, True, 1.0, "3"])
def test_num_merges_must_be_a_whole_number_zero_or_more(bad):
    with pytest.raises(ValueError, match=rf"^num_merges={bad!r} must be a whole number, 0 or more$"):
        CharBPETokenizer(num_merges=bad)
    assert CharBPETokenizer(num_merges=0).num_merges == 0


def test_an_untrained_tokenizer_says_so_for_every_use():
    tok = CharBPETokenizer()
    for call in (lambda: tok.encode("a"), lambda: tok.decode([0]), lambda: tok.unknown_chars("a"), tok.to_dict):
        with pytest.raises(ValueError, match=r"^this tokenizer has not been trained: call \.train\(texts\) first$"):
            call()
    assert tok.vocab_size == 0 and tok.eot_id == -1
    assert (tok.base, tok.merges, tok.vocab, tok.id_to_token, tok._ranks) == ([], [], {}, [], {})
    assert (tok.num_merges, tok.lowercase, tok.name) == (5, True, "char-bpe")  # the defaults


def test_to_dict_is_exactly_the_description_and_from_dict_rebuilds_it():
    tok = CharBPETokenizer(num_merges=3, lowercase=False).train(["abab cab"])
    d = tok.to_dict()
    _, merges, vocab = naive_train("abab cab", 3)
    assert d == {"kind": "char-bpe", "num_merges": 3, "lowercase": False, "base": [" ", "a", "b", "c"],
                 "merges": [list(m) for m in merges]}
    back = CharBPETokenizer.from_dict(d)
    assert (back.num_merges, back.lowercase, back.base, back.merges) == (3, False, tok.base, tok.merges)
    assert back.id_to_token == tok.id_to_token and back.eot_id == tok.eot_id and back._ranks == tok._ranks
    assert back.encode("Abab cab") == naive_encode("Abab cab", merges, vocab)  # case kept: no 'A'
    low = CharBPETokenizer.from_dict({**d, "lowercase": 1})
    assert low.lowercase is True and low.encode("ABAB CAB") == tok.encode("abab cab")


@pytest.mark.parametrize("data, message", [
    ({"num_merges": 1, "lowercase": True, "base": ["a"]}, r"^not a char BPE tokenizer description: 'merges'$"),
    ({"num_merges": "x", "lowercase": True, "base": [], "merges": []}, r"^not a char BPE tokenizer description: "),
    ({"num_merges": 1, "lowercase": True, "base": ["a"], "merges": [["a"]]}, r"^not a char BPE tokenizer descr"),
    ({"num_merges": 1, "lowercase": True, "base": ["a"], "merges": 5}, r"^not a char BPE tokenizer description: "),
    ({"num_merges": 1, "lowercase": True, "base": ["a", "a"], "merges": []}, r"^a char BPE tokenizer's base must be "
                                                                             r"distinct single characters$"),
    ({"num_merges": 1, "lowercase": True, "base": ["ab"], "merges": []}, r"must be distinct single characters$"),
    ({"num_merges": 1, "lowercase": True, "base": [""], "merges": []}, r"must be distinct single characters$"),
    ({"num_merges": 1, "lowercase": True, "base": ["a", "b"], "merges": [["a", "c"]]},
     r"^merge 'a' \+ 'c' uses a token that is not in the vocabulary$"),
    ({"num_merges": 1, "lowercase": True, "base": ["a", "b"], "merges": [["c", "a"]]},
     r"^merge 'c' \+ 'a' uses a token that is not in the vocabulary$"),
])
def test_from_dict_refuses_a_bad_description_with_a_clear_message(data, message):
    with pytest.raises(ValueError, match=message):
        CharBPETokenizer.from_dict(data)


def test_from_dict_builds_the_ids_and_ranks_of_merges_that_spell_the_same_string_twice():
    """(a, bc) and (ab, c) both spell "abc": one id for it, each pair ranked by its own merge."""
    tok = CharBPETokenizer.from_dict({"num_merges": 4, "lowercase": "", "base": ["a", "b", "c"],
                                      "merges": [["b", "c"], ["a", "b"], ["a", "bc"], ["ab", "c"]]})
    assert tok.id_to_token == ["a", "b", "c", "bc", "ab", "abc", EOT] and tok.lowercase is False
    assert tok._ranks == {(1, 2): (0, 3), (0, 1): (1, 4), (0, 3): (2, 5), (4, 2): (3, 5)}
    assert tok.encode("abcab") == [5, 4]


def test_get_tokenizer_trains_the_char_bpe_on_the_builtin_text_or_the_texts_given():
    default = get_tokenizer("char-bpe")
    assert default.merges == naive_train(BUILTIN_TEXT.lower(), 5)[1] and default.num_merges == 5 and default.lowercase
    mine = get_tokenizer("char-bpe", ["AaAb"], num_merges=2, lowercase=False)
    assert mine.merges == naive_train("AaAb", 2)[1] and not mine.lowercase
    assert get_tokenizer("cl100k_base").name == "cl100k_base"


# --------------------------------------------------------------------------- tiktoken's encodings
@pytest.mark.parametrize("name, vocab, eot", [("gpt2", 50257, 50256), ("cl100k_base", 100277, 100257),
                                              ("o200k_base", 200019, 199999)])
def test_each_encoding_has_its_published_size_and_end_of_text_and_refuses_ids_past_it(name, vocab, eot):
    tok = TiktokenTokenizer(name)
    assert (tok.name, tok.vocab_size, tok.eot_id) == (name, vocab, eot)
    assert tok.encode("a" + EOT) == tok.encode("a") + [eot]
    assert tok.decode([eot]) == EOT
    for bad in (vocab, -1):
        with pytest.raises(ValueError, match=rf"^token id {bad} is outside the vocabulary \(vocab_size={vocab}\)$"):
            tok.decode([0, bad])


def test_only_the_end_of_text_marker_is_special_other_markers_are_plain_text():
    tok = TiktokenTokenizer("cl100k_base")
    ids = tok.encode("<|fim_prefix|>")
    assert 100258 not in ids and tok.decode(ids) == "<|fim_prefix|>" and len(ids) > 1


def test_gpt2_ids_bytes_labels_and_replacement_of_half_a_character():
    """GPT-2's published ids; 注 is two tokens, b'\\xe6\\xb3' and b'\\xa8': alone, the first decodes to U+FFFD and
    is shown as escaped bytes."""
    tok = TiktokenTokenizer("gpt2")
    assert tok.encode("Hello world") == [15496, 995]
    assert tok.token_bytes(995) == b" world" and tok.token_bytes(0) == b"!"
    ids = tok.encode("注")
    assert ids == [37345, 101] and tok.token_bytes(37345) == b"\xe6\xb3"
    assert tok.decode([37345]) == "\ufffd" and tok.decode(ids) == "注"
    assert tok.token_str(37345) == "\\xe6\\xb3" and tok.token_str(198) == "↵"
    assert tok.decode(x for x in [15496]) == "Hello"


def test_an_unused_id_inside_the_vocabulary_is_labelled_unused_and_token_labels_keep_it():
    tok = TiktokenTokenizer("cl100k_base")
    assert tok.token_str(100261) == "<unused 100261>" and tok.token_str(100256) == "<unused 100256>"
    text = "注意"
    ids = tok.encode(text)
    labels = token_labels(tok, [100261, *ids])
    assert labels[0] == "<unused 100261>" and labels[1:] == token_labels(tok, ids)


def test_the_encoding_is_built_once_per_process():
    assert tiktoken_encoding("r50k_base") is tiktoken_encoding("r50k_base")
    assert TiktokenTokenizer("gpt2")._enc is tiktoken_encoding("r50k_base")
    assert tiktoken_encoding("r50k_base").n_vocab == 50257  # explicit_n_vocab checked by tiktoken
    assert [tiktoken_encoding(e).name for e in ("r50k_base", "cl100k_base")] == ["r50k_base", "cl100k_base"]


def test_without_tiktoken_the_encoding_is_unavailable_with_the_install_hint(monkeypatch):
    monkeypatch.setattr(tk, "_ENCODINGS", {})
    monkeypatch.setitem(sys.modules, "tiktoken", None)
    with pytest.raises(TokenizerUnavailable, match=r"^The tiktoken package is not installed \(pip install "
                                                   r"tiktoken\)\.$"):
        TiktokenTokenizer("gpt2")


def test_an_unknown_encoding_name_lists_the_choices():
    with pytest.raises(ValueError, match=r"^unknown encoding 'p50k': choose one of gpt2, cl100k_base, o200k_base$"):
        get_tokenizer("p50k")


# --------------------------------------------------------------------------- the vocabulary files
def write_vocab(path, lines: bytes):
    path.write_bytes(gzip.compress(lines))
    return hashlib.sha256(lines).hexdigest()


def test_load_mergeable_ranks_reads_every_line_and_skips_blank_ones(tmp_path, monkeypatch):
    """A vocabulary written here: base64 token, space, rank; a blank line in the middle and at the end."""
    text = b"".join(base64.b64encode(t) + b" " + str(r).encode() + b"\n" + (b"\n" if r == 1 else b"")
                    for t, r in [(b"!", 0), (b" the", 1), (b"\xe6\xb3", 7)]) + b"\n"
    sha = write_vocab(tmp_path / "v.gz", text)
    monkeypatch.setitem(tk.TIKTOKEN_SPECS, "r50k_base", {**tk.TIKTOKEN_SPECS["r50k_base"], "sha256": sha})
    assert load_mergeable_ranks("r50k_base", tmp_path / "v.gz") == {b"!": 0, b" the": 1, b"\xe6\xb3": 7}


def test_the_shipped_gpt2_vocabulary_has_its_published_ranks():
    ranks = load_mergeable_ranks("r50k_base")
    assert len(ranks) == 50256 and ranks[b"!"] == 0 and ranks[b"Hello"] == 15496 and ranks[b" world"] == 995
    assert sorted(ranks.values()) == list(range(50256))


def test_a_damaged_truncated_or_missing_vocabulary_says_which_file_and_why(tmp_path):
    sha = write_vocab(tmp_path / "r50k_base.tiktoken.gz", b"IQ== 0\n")
    with pytest.raises(TokenizerUnavailable, match=rf"^The r50k_base vocabulary file r50k_base\.tiktoken\.gz is "
                                                   rf"damaged: its SHA-256 is {sha}, tiktoken expects "
                                                   rf"{tk.TIKTOKEN_SPECS['r50k_base']['sha256']}\.$"):
        load_mergeable_ranks("r50k_base", tmp_path / "r50k_base.tiktoken.gz")
    whole = gzip.compress(b"IQ== 0\n" * 100)
    (tmp_path / "cut.gz").write_bytes(whole[:len(whole) // 2])
    (tmp_path / "plain.gz").write_bytes(b"IQ== 0\n")
    for name in ("cut.gz", "plain.gz", "missing.gz"):
        with pytest.raises(TokenizerUnavailable, match=rf"^The cl100k_base vocabulary file {name} could not be read "
                                                       r"\(.+\)\.$"):
            load_mergeable_ranks("cl100k_base", tmp_path / name)


# --------------------------------------------------------------------------- UTF-8 read in context
def utf8_oracle(data: bytes):
    """At each byte, the shortest run of 1 to 4 bytes that Python decodes as one character; else that one byte."""
    out, i = [], 0
    while i < len(data):
        for n in range(1, 5):
            try:
                ch = data[i:i + n].decode("utf-8")
            except UnicodeDecodeError:
                continue
            if len(ch) == 1 and i + n <= len(data):
                out.append((i, i + n, ch))
                i += n
                break
        else:
            out.append((i, i + 1, f"\\x{data[i]:02x}"))
            i += 1
    return out


@pytest.mark.parametrize("data", [
    "a注🤖é\x7f".encode(),
    b"\xc0\xaf\xc1\x81\xc2\x80\xdf\xbf",  # overlong leads (c0, c1) and the 2-byte range's edges
    b"\xe0\x80\x80\xe0\xa0\x80\xef\xbf\xbf\xed\xa0\x80",  # overlong, first and last 3-byte, a surrogate
    b"\xf0\x90\x80\x80\xf4\x8f\xbf\xbf\xf4\x90\x80\x80\xf5\x80\x80\x80\xff",  # 4-byte edges, past U+10FFFF, f5, ff
    b"\x80\xbfa\xe6\xb3",  # continuation bytes alone, a character cut at the end
    b"\xe6\xb3a\xf0\x9f\xa4",  # cut in the middle and at the end
    b"",
])
def test_utf8_chars_reads_each_character_or_lone_byte_like_pythons_decoder(data):
    assert _utf8_chars(data) == utf8_oracle(data)


def test_token_labels_of_a_tokenizer_without_bytes_or_of_nothing_are_the_token_strings():
    tok = CharBPETokenizer(num_merges=0, lowercase=False).train(["a b"])
    ids = tok.encode("a b")
    assert token_labels(tok, ids) == [tok.token_str(i) for i in ids] == ["a", "␣", "b"]
    assert token_labels(TiktokenTokenizer("gpt2"), []) == []
    gpt2 = TiktokenTokenizer("gpt2")
    ids = gpt2.encode("a\tb c")
    assert token_labels(gpt2, ids) == [gpt2.token_str(i) for i in ids]


class FakeBytes:
    """A byte-level tokenizer with hand-set tokens; id 9 has no bytes (ValueError), id 8 none either (KeyError)."""
    table = {0: b"\xe6", 1: b"\xb3\xa8", 2: b"x\xe6", 3: b"\xb3", 4: b"\xa8y", 5: b"\xff", 6: b" "}

    def token_str(self, i):
        return f"<{i}>"

    def token_bytes(self, i):
        if i == 9:
            raise ValueError(i)
        return self.table[i]


def test_token_labels_read_split_characters_across_tokens_around_tokens_without_bytes():
    """注 is e6 b3 a8. Oracle by hand: a token that holds part of a character shows the whole character (and any
    whole ones beside it), with … where the character goes on; a token without bytes keeps its own string and adds
    no bytes, so the bytes either side of it are read as one run."""
    tok = FakeBytes()
    assert token_labels(tok, [0, 1]) == ["注…", "…注"]
    assert token_labels(tok, [2, 3, 4]) == ["x注…", "…注…", "…注y"]
    assert token_labels(tok, [0, 9, 1]) == ["注…", "<9>", "…注"]
    assert token_labels(tok, [0, 8, 1]) == ["注…", "<8>", "…注"]
    assert token_labels(tok, [5, 6]) == ["\\xff", "<6>"]  # a byte that starts no character: shown escaped
    assert token_labels(tok, [6, 0]) == ["<6>", "\\xe6"]  # a cut character at the end: its byte


def test_a_model_vocabulary_past_the_tokenizer_is_labelled_unused_row_by_row_every_time():
    """A page's labels for every id the model scores (PageContext.vocab_labels): the tokenizer's own, then
    ``<unused N>`` for each padded row (Pythia pads 50,277 tokens to 50,304; a Qwen3-shaped model read with a small
    tokenizer pads 150,000), the same on every call, and cut to the model's vocabulary when it is the smaller."""
    from gptviz.config import preset
    from gptviz.present.page_context import Ctx

    tok = get_tokenizer("char-bpe", num_merges=20)

    class Store:
        def vocab_labels(self, t):
            return [t.token_str(i) for i in range(t.vocab_size)]

    V = tok.vocab_size
    own = [tok.token_str(i) for i in range(V)]
    for extra in (0, 1, 27, 5000):
        ctx = Ctx(s={}, cfg=preset("default", vocab_size=V + extra), cfg_json="", tok=tok, batch=None, store=Store())
        want = own + [f"<unused {i}>" for i in range(V, V + extra)]
        assert ctx.vocab_labels() == want and ctx.vocab_labels() == want, extra
    small = Ctx(s={}, cfg=preset("default", vocab_size=V - 3), cfg_json="", tok=tok, batch=None, store=Store())
    assert small.vocab_labels() == own[:V - 3]
