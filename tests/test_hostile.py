"""Hostile input: the engine either works or raises ValueError with a message. Never anything else."""
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gptviz import BUILTIN_TEXT, GPT, CharBPETokenizer, ModelConfig, TiktokenTokenizer, encode_batch, trace
from gptviz.config import ACTIVATIONS, NORM_PLACEMENTS, NORMS, POS_ENCODINGS
from gptviz.text.tokenizers import EOT, TIKTOKEN_ENCODINGS, TOKENIZER_NAMES

NASTY_TEXTS = [
    "", " ", "   \n\t  \n", "🙂🚀👩‍👩‍👧‍👦", "مرحبا بالعالم", "שלום עולם", "a\u202eb\u202cc", "\x00\x01\x07\x1b[31m\x7f",
    "<|endoftext|>", "x<|endoftext|>y<|endoftext|>", "a" * 100_000, "\n".join(["line"] * 500), "\ud800".encode(
        "utf-8", "surrogatepass").decode("utf-8", "replace"), "ｆｕｌｌｗｉｄｔｈ", "e\u0301\u0301\u0301",
]
BLANK = {0, 1, 2}  # no line with anything but whitespace: every tokenizer refuses these, and only these

# Every tokenizer the app offers, by id. None may drop out silently: the vocabularies ship with gptviz, so a
# tokenizer that cannot load is a failure (test_every_tokenizer_is_tested), never a shorter list.
TOKS = {
    "char-bpe76": CharBPETokenizer(20).train([BUILTIN_TEXT]),  # the app's default: 20 merges of the built-in text
    "char-bpe-ab": CharBPETokenizer(0, lowercase=False).train(["ab"]),  # knows only 'a', 'b' and end-of-text
    **{name: TiktokenTokenizer(name) for name in TIKTOKEN_ENCODINGS},
}

# The non-blank texts each tokenizer must refuse, named one by one: none of their characters is in its
# vocabulary. Any other non-blank text must encode and run.
NOT_IN_VOCAB = {
    "char-bpe76": {3, 12, 13},  # emoji; U+FFFD; full-width letters (the built-in text has none of them)
    "char-bpe-ab": {3, 4, 5, 7, 11, 12, 13, 14},  # everything without an 'a', a 'b' or <|endoftext|>
}
EMPTY_MSG = "the text is empty: type at least one line"
UNKNOWN_MSG = "none of the text's characters are in the tokenizer's vocabulary"


def test_every_tokenizer_is_tested():
    assert {t.name for t in TOKS.values()} == set(TOKENIZER_NAMES)
    assert TOKS["gpt2"].vocab_size == 50257 and TOKS["cl100k_base"].vocab_size == 100277
    assert TOKS["o200k_base"].vocab_size == 200019
    assert set(NOT_IN_VOCAB) == {k for k, t in TOKS.items() if t.name == "char-bpe"}


def run_engine(tok, text, block_size=16):
    """What a page does with a text. Returns normally, or raises ValueError."""
    batch = encode_batch(tok, text, block_size)
    cfg = ModelConfig(vocab_size=tok.vocab_size, block_size=block_size, n_layer=1, n_head=2, n_embd=8)
    tr = trace(GPT(cfg), batch.x, batch.y, batch.attention_mask)
    assert torch.isfinite(tr["hook_logits"]).all()
    return batch


@pytest.mark.parametrize("i", range(len(NASTY_TEXTS)), ids=range(len(NASTY_TEXTS)))
@pytest.mark.parametrize("tok_id", list(TOKS))
def test_nasty_texts_work_or_say_why(tok_id, i):
    tok, text = TOKS[tok_id], NASTY_TEXTS[i]
    if i in BLANK:
        with pytest.raises(ValueError, match=EMPTY_MSG):
            run_engine(tok, text)
    elif i in NOT_IN_VOCAB.get(tok_id, ()):
        assert not set(text) & set(tok.vocab)  # the reason it is refused really holds
        with pytest.raises(ValueError, match=UNKNOWN_MSG):
            run_engine(tok, text)
    else:
        batch = run_engine(tok, text)  # an ordinary non-empty text: it must encode, no ValueError allowed
        assert 1 <= batch.x.shape[1] <= 16 and 1 <= batch.x.shape[0] <= 16
        assert min(batch.lengths) >= 1


def test_long_text_is_cut_with_a_notice():
    b = encode_batch(TOKS["char-bpe76"], "the cat " * 20_000, block_size=16)
    assert b.x.shape == (1, 16) and any("cut" in n for n in b.notices)


def test_unavailable_encodings_are_value_errors(monkeypatch, tmp_path):
    """A shipped vocabulary that is missing or damaged is a ValueError with a message, never a crash."""
    import gzip

    import gptviz.text.tokenizers as tk

    monkeypatch.setattr(tk, "_ENCODINGS", {})  # nothing loaded yet in this process
    monkeypatch.setattr(tk, "TIKTOKEN_DIR", tmp_path)  # no files here
    for name in TIKTOKEN_ENCODINGS:
        with pytest.raises(ValueError, match="could not be read"):
            TiktokenTokenizer(name)
    (tmp_path / "o200k_base.tiktoken.gz").write_bytes(gzip.compress(b"aGVsbG8= 0\n"))
    with pytest.raises(ValueError, match="is damaged: its SHA-256"):
        TiktokenTokenizer("o200k_base")


def should_refuse(tok, text: str, block_size: int = 16) -> bool:
    """True only for the texts a page must refuse: no non-blank line, or (char BPE) not one character of the
    lines used (the first 16 non-blank ones, each cut to 4·block_size+64 characters, as encode_batch
    documents) is in the vocabulary. Worked out from the vocabulary itself, not from encode()."""
    lines = [t for t in text.splitlines() if t.strip()][:16]
    if not lines:
        return True
    if not hasattr(tok, "vocab"):  # tiktoken: every character has bytes, so every non-blank line encodes
        return False
    for line in lines:
        line = line[: 4 * block_size + 64]
        line = line.lower() if tok.lowercase else line
        if EOT in line or any(ch in tok.vocab for ch in line):
            return False
    return True


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.text(max_size=300), tok_id=st.sampled_from(list(TOKS)))
def test_any_text_with_any_tokenizer(text, tok_id):
    tok = TOKS[tok_id]
    if should_refuse(tok, text):
        with pytest.raises(ValueError, match=f"{EMPTY_MSG}|{UNKNOWN_MSG}"):
            run_engine(tok, text)
    else:
        run_engine(tok, text)  # must encode and run: a ValueError here fails the test


small_int = st.one_of(st.integers(-3, 40), st.just(0), st.floats(-2, 50), st.booleans(), st.none(), st.text(max_size=3))


@settings(max_examples=300, deadline=None)
@given(
    n_layer=small_int, n_head=small_int, n_embd=small_int, d_head=small_int, d_mlp=small_int,
    block_size=small_int, vocab_size=small_int,
    norm=st.sampled_from(NORMS + ("batch", "")), placement=st.sampled_from(NORM_PLACEMENTS + ("mid",)),
    pos=st.sampled_from(POS_ENCODINGS + ("alibi",)), act=st.sampled_from(ACTIVATIONS + ("swish",)),
    bias=st.one_of(st.booleans(), st.just("yes")),
    dropout=st.one_of(st.floats(-1, 2), st.just(float("nan")), st.just(0.1)),
    ln_eps=st.one_of(st.floats(-1, 1), st.sampled_from([float("nan"), float("inf")]), st.just(1e-5)),
)
def test_any_config_works_or_says_which_field(n_layer, n_head, n_embd, d_head, d_mlp, block_size, vocab_size, norm,
                                              placement, pos, act, bias, dropout, ln_eps):
    kw = dict(n_layer=n_layer, n_head=n_head, n_embd=n_embd, d_head=d_head, d_mlp=d_mlp, block_size=block_size,
              vocab_size=vocab_size, norm=norm, norm_placement=placement, pos_encoding=pos, activation=act, bias=bias,
              dropout=dropout, ln_eps=ln_eps)
    try:
        cfg = ModelConfig(**kw)
    except ValueError as exc:
        assert "=" in str(exc)  # names the field and its value
        return
    cfg.check_limits()
    m = GPT(cfg)
    idx = torch.zeros(1, min(cfg.block_size, 4), dtype=torch.long)
    assert trace(m, idx)["hook_logits"].shape == (1, idx.shape[1], cfg.vocab_size)


def test_a_config_over_the_caps_is_refused_before_allocating():
    huge = ModelConfig(vocab_size=50257, n_layer=96, n_head=96, n_embd=12288)
    with pytest.raises(ValueError, match="over the limit"):
        GPT(huge)  # refuses in microseconds; building would need ~700 GB
