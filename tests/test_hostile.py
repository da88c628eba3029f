"""Hostile input: the engine either works or raises ValueError with a message. Never anything else."""
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gptviz import GPT, BUILTIN_TEXT, CharBPETokenizer, ModelConfig, TiktokenTokenizer, encode_batch, trace
from gptviz.config import ACTIVATIONS, NORM_PLACEMENTS, NORMS, POS_ENCODINGS
from gptviz.tokenizers import TokenizerUnavailable

NASTY_TEXTS = [
    "", " ", "   \n\t  \n", "🙂🚀👩‍👩‍👧‍👦", "مرحبا بالعالم", "שלום עולם", "a\u202eb\u202cc", "\x00\x01\x07\x1b[31m\x7f",
    "<|endoftext|>", "x<|endoftext|>y<|endoftext|>", "a" * 100_000, "\n".join(["line"] * 500), "\ud800".encode(
        "utf-8", "surrogatepass").decode("utf-8", "replace"), "ｆｕｌｌｗｉｄｔｈ", "e\u0301\u0301\u0301",
]


def tokenizers():
    out = [CharBPETokenizer(20).train([BUILTIN_TEXT]), CharBPETokenizer(0, lowercase=False).train(["ab"])]
    try:
        out.append(TiktokenTokenizer("gpt2"))
    except TokenizerUnavailable:
        pass
    return out


TOKS = tokenizers()


def run_engine(tok, text, block_size=16):
    """What a page does with a text. Returns normally, or raises ValueError."""
    batch = encode_batch(tok, text, block_size)
    cfg = ModelConfig(vocab_size=tok.vocab_size, block_size=block_size, n_layer=1, n_head=2, n_embd=8)
    tr = trace(GPT(cfg), batch.x, batch.y, batch.attention_mask)
    assert torch.isfinite(tr["hook_logits"]).all()
    return batch


@pytest.mark.parametrize("text", NASTY_TEXTS, ids=range(len(NASTY_TEXTS)))
@pytest.mark.parametrize("tok", TOKS, ids=lambda t: t.name + str(t.vocab_size))
def test_nasty_texts_work_or_say_why(tok, text):
    try:
        batch = run_engine(tok, text)
    except ValueError as exc:
        assert str(exc)  # a message a page can show
    else:
        assert batch.x.shape[1] <= 16 and batch.x.shape[0] <= 16


def test_long_text_is_cut_with_a_notice():
    b = encode_batch(TOKS[0], "the cat " * 20_000, block_size=16)
    assert b.x.shape == (1, 16) and any("cut" in n for n in b.notices)


def test_unavailable_encodings_are_value_errors(monkeypatch, tmp_path):
    import tiktoken.load
    import tiktoken.registry

    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(tiktoken.load, "read_file", lambda *a, **k: (_ for _ in ()).throw(OSError("offline")))
    monkeypatch.setattr(tiktoken.registry, "ENCODINGS", {})
    for name in ("cl100k_base", "o200k_base"):
        with pytest.raises(ValueError):
            TiktokenTokenizer(name)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.text(max_size=300), tok_i=st.integers(0, len(TOKS) - 1))
def test_any_text_with_any_tokenizer(text, tok_i):
    try:
        run_engine(TOKS[tok_i], text)
    except ValueError as exc:
        assert str(exc)


small_int = st.one_of(st.integers(-3, 40), st.just(0), st.floats(-2, 50), st.booleans(), st.none(), st.text(max_size=3))


@settings(max_examples=300, deadline=None)
@given(
    n_layer=small_int, n_head=small_int, n_embd=small_int, d_head=small_int, d_mlp=small_int,
    block_size=small_int, vocab_size=small_int,
    norm=st.sampled_from(NORMS + ("batch", "")), placement=st.sampled_from(NORM_PLACEMENTS + ("mid",)),
    pos=st.sampled_from(POS_ENCODINGS + ("alibi",)), act=st.sampled_from(ACTIVATIONS + ("swish",)),
    bias=st.one_of(st.booleans(), st.just("yes")), dropout=st.one_of(st.floats(-1, 2), st.just(float("nan")), st.just(0.1)),
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
