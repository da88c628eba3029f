"""The fast merge loop gives exactly the ids of the simple one it replaces."""
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from gptviz.text.batches import BUILTIN_TEXT
from gptviz.text.bpe import apply_merges
from gptviz.text.tokenizers import CharBPETokenizer, _merge


def simple(seq, ranks):
    """The literal rule: the earliest-learned merge present, everywhere, left to right; repeat."""
    while len(seq) >= 2:
        pair = min((p for p in zip(seq, seq[1:]) if p in ranks), key=lambda p: ranks[p][0], default=None)
        if pair is None:
            return seq
        seq = _merge(seq, pair, ranks[pair][1])
    return seq


def test_fast_equals_simple_on_builtin_text():
    tok = CharBPETokenizer(num_merges=120, lowercase=False).train([BUILTIN_TEXT])
    seq = [tok.vocab[c] for c in BUILTIN_TEXT if c in tok.vocab]
    fast = apply_merges(seq, tok._ranks)
    assert fast == simple(seq, tok._ranks)
    assert len(fast) < len(seq) * 0.6  # the merges really did something


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="aab ", min_size=0, max_size=60), st.integers(0, 30), st.text(alphabet="aab ", min_size=2,
                                                                                       max_size=80))
def test_fast_equals_simple_on_repeats(text, merges, train):
    # tiny alphabets make overlapping pairs ("aaa") and merges that spell the same string twice
    tok = CharBPETokenizer(num_merges=merges, lowercase=False).train([train + "ab "])
    seq = [tok.vocab[c] for c in text if c in tok.vocab]
    assert apply_merges(seq, tok._ranks) == simple(seq, tok._ranks)


def test_fast_equals_simple_random_merges():
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
