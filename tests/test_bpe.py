"""Both fast merge loops (the heap's, for texts, and NumPy's passes, for a corpus) give exactly the ids of the simple
one they replace."""
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gptviz.text import bpe
from gptviz.text.batches import BUILTIN_TEXT
from gptviz.text.bpe import apply_merges, apply_merges_array, apply_merges_heap
from gptviz.text.tokenizers import CharBPETokenizer, _merge

FAST = [apply_merges_heap, apply_merges_array, apply_merges]  # the last: the switch, on sequences short and empty


def simple(seq, ranks):
    """The literal rule: the earliest-learned merge present, everywhere, left to right; repeat."""
    while len(seq) >= 2:
        pair = min((p for p in zip(seq, seq[1:]) if p in ranks), key=lambda p: ranks[p][0], default=None)
        if pair is None:
            return seq
        seq = _merge(seq, pair, ranks[pair][1])
    return seq


@pytest.mark.parametrize("apply_merges", FAST)
def test_fast_equals_simple_on_builtin_text(apply_merges):
    tok = CharBPETokenizer(num_merges=120, lowercase=False).train([BUILTIN_TEXT])
    seq = [tok.vocab[c] for c in BUILTIN_TEXT if c in tok.vocab]
    fast = apply_merges(seq, tok._ranks)
    assert fast == simple(seq, tok._ranks)
    assert len(fast) < len(seq) * 0.6  # the merges really did something


@pytest.mark.parametrize("apply_merges", FAST)
@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="aab ", min_size=0, max_size=60), st.integers(0, 30), st.text(alphabet="aab ", min_size=2,
                                                                                       max_size=80))
def test_fast_equals_simple_on_repeats(apply_merges, text, merges, train):
    # tiny alphabets make overlapping pairs ("aaa") and merges that spell the same string twice
    tok = CharBPETokenizer(num_merges=merges, lowercase=False).train([train + "ab "])
    seq = [tok.vocab[c] for c in text if c in tok.vocab]
    assert apply_merges(seq, tok._ranks) == simple(seq, tok._ranks)


@pytest.mark.parametrize("apply_merges", FAST)
def test_fast_equals_simple_random_merges(apply_merges):
    rng = random.Random(0)
    for _ in range(200):
        base = list("xyz")
        merges = []
        vocab = list(base)
        for _ in range(rng.randint(1, 12)):
            a, b = rng.choice(vocab), rng.choice(vocab)
            merges.append((a, b))
            if a + b not in vocab:
                vocab.append(a + b)
        tok = CharBPETokenizer(len(merges), lowercase=False)
        tok._build(base, merges)
        text = "".join(rng.choice("xyz") for _ in range(rng.randint(0, 50)))
        seq = [tok.vocab[c] for c in text]
        assert apply_merges(seq, tok._ranks) == simple(seq, tok._ranks), (merges, text)


def test_a_merge_that_spells_an_earlier_string_brings_back_a_lower_ranked_pair():
    # 0: y z -> "yz"; 1: x y; 2: "xy" z -> "xyz"; 3: "xyz" x -> "xyzx"; 4: x "yz" -> "xyz", the id of merge 2. In
    # "xyzxxyzx" merge 0 takes every "y z" first, so "xyz" is made only by merge 4, and then merge 3's pair is there
    tok = CharBPETokenizer(5, lowercase=False)
    tok._build(list("xyz"), [("y", "z"), ("x", "y"), ("xy", "z"), ("xyz", "x"), ("x", "yz")])
    seq = [tok.vocab[c] for c in "xyzxxyzx"]
    assert simple(seq, tok._ranks) == [tok.vocab["xyzx"]] * 2
    assert apply_merges_array(seq, tok._ranks) == apply_merges_heap(seq, tok._ranks) == [tok.vocab["xyzx"]] * 2


def test_the_shipped_corpus_encodes_the_same_either_way():
    from gptviz.text import corpus

    tok = corpus.tokenizer()
    seq = [tok.vocab[c] for c in corpus.load("val") if c in tok.vocab]  # 290 k characters
    assert len(seq) >= bpe.LONG
    got = apply_merges(seq, tok._ranks)  # long: NumPy's passes
    assert got == apply_merges_heap(seq, tok._ranks)
    assert all(type(i) is int for i in got)  # Python ints, as the heap's: a float id would be no token id


def test_a_long_sequence_takes_numpys_passes_and_a_short_one_the_heap(monkeypatch):
    calls = []
    monkeypatch.setattr(bpe, "apply_merges_array", lambda seq, ranks: calls.append(("array", len(seq))) or [])
    monkeypatch.setattr(bpe, "apply_merges_heap", lambda seq, ranks: calls.append(("heap", len(seq))) or [])
    ranks = {(0, 1): (0, 2)}
    bpe.apply_merges([0, 1] * (bpe.LONG // 2), ranks)
    bpe.apply_merges([0, 1] * (bpe.LONG // 2 - 1) + [0], ranks)
    assert calls == [("array", bpe.LONG), ("heap", bpe.LONG - 1)]
