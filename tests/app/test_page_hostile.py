"""Every page, fed hostile input through the sidebar, shows a message rather than an exception."""
import pytest

from apphelp import PAGES, messages, page, set_sidebar

TEXTS = ["", "   \n\t ", "🙂🚀👩‍👩‍👧‍👦 emoji", "مرحبا بالعالم שלום", "\x00\x01\x1b[31mred\x7f", "<|endoftext|>",
         "x" * 100_000, "\n".join(f"line {i}" for i in range(40))]


@pytest.mark.parametrize("name", list(PAGES))
def test_hostile_texts_on_every_page(name):
    at = page(name)
    for text in TEXTS:
        at = set_sidebar(at, "text", text)
        assert not at.exception, (name, repr(text[:20]), [e.message for e in at.exception])
    assert "the first 16 are used" in messages(at)  # the 40-line text


@pytest.mark.parametrize("name", ["home", "attention", "logits", "generation"])
def test_hostile_texts_with_gpt2_tokens(name):
    at = set_sidebar(page(name), "tokenizer", "gpt2")
    for text in TEXTS[:6]:
        at = set_sidebar(at, "text", text)
        assert not at.exception, (name, repr(text[:20]))


def test_a_model_over_the_size_cap_is_refused_with_a_message():
    at = page("home")
    at = set_sidebar(at, "n_embd", 4096)
    at = set_sidebar(at, "n_layer", 48)
    assert not at.exception
    assert "over the limit" in messages(at)


def test_a_hand_edited_link_does_not_break_the_page():
    at = page("attention", n_layer="abc", n_head="-5", norm="batchnorm", block_size="99999999", tokenizer="nope")
    assert not at.exception
    assert "not understood" in messages(at) or "can't be used" in messages(at)
