"""Every page, fed hostile input through the sidebar, shows the message that input calls for (or, when it
calls for none, the tokens it makes) rather than an exception, and with the tokenizer that was chosen."""
import numpy as np
import pytest
from apphelp import PAGES, array, charts, messages, page, set_sidebar

TEXTS = ["", "   \n\t ", "🙂🚀👩‍👩‍👧‍👦 emoji", "مرحبا بالعالم שלום", "\x00\x01\x1b[31mred\x7f", "<|endoftext|>",
         "x" * 100_000, "\n".join(f"line {i}" for i in range(40))]
EMPTY = "The text is empty: type at least one line. Showing the example sentence instead."
# a pasted line of 100,000 characters reaches the page as the box's 4,096 (Streamlit cuts a longer value to max_chars
# itself; one line may be all of the text), then is cut to the model's context; a link's is cut by url_params, with
# a warning (test_a_hostile_link_gives_a_notice_and_a_page_that_keeps_working)
LONG = ("Line 1 has 4,096 characters, far more than the model's context (block_size=32) can hold: it was cut to "
        "its first 32 tokens.")
MANY_LINES = "The text has 40 lines; only the first 16 are used as the batch."
OTHER_SCRIPTS = ("To read another script (Chinese, say), pick a byte-level tokenizer (gpt2, cl100k_base or o200k_base) "
                 "for the configurable model, or a model that uses one.")  # what to change, after the characters
TEXT_NOTICES = ("The text is empty", "Not in this tokenizer's vocabulary", "Line 1 has", "The text has")


def char_bpe():
    from gptviz import get_tokenizer

    return get_tokenizer("char-bpe", num_merges=20, lowercase=True)  # the sidebar's default tokenizer


def expected_char_bpe(text: str) -> tuple[list[str], list[str], tuple[int, int]]:
    """(warnings, info messages, (positions of the shown row 0, T of the padded batch)) that ``text`` calls for
    with the default char BPE tokenizer and the default model (block_size 32). Unknown characters are found
    from the vocabulary itself."""
    from gptviz.text.batches import DEFAULT_PROMPT

    tok = char_bpe()
    lines = [t for t in text.splitlines() if t.strip()]
    if not lines:
        n = len(tok.encode(DEFAULT_PROMPT))
        return [EMPTY], [], (n, n)
    warnings = []
    infos = []
    if text == TEXTS[6]:
        infos.append(LONG)
    if text == TEXTS[7]:
        infos.append(MANY_LINES)
    unknown = list(dict.fromkeys(ch for line in lines[:16] for ch in line.lower().replace("<|endoftext|>", "")
                                 if ch not in tok.vocab))  # <|endoftext|> is one token, not 13 characters
    if unknown:
        infos.append("Not in this tokenizer's vocabulary, so left out: " + " ".join(map(repr, unknown)) + ". "
                     + OTHER_SCRIPTS)
    lengths = [min(len(tok.encode(line)), 32) for line in lines[:16]]
    return warnings, infos, (lengths[0], max(lengths))


# GPT-2's encoding of each text (fixed forever): the example sentence "the cat sat on the mat." for the blank ones
GPT2_POSITIONS = {"": 7, "   \n\t ": 7, TEXTS[2]: 20, TEXTS[3]: 18, TEXTS[4]: 8, "<|endoftext|>": 1}  # one line each


def positions_shown(at, name: str, positions: tuple[int, int]) -> bool:
    """Whether the page draws as many token positions as the text makes, read from what it shows: the padded
    token grid's T on Tokens, else the rows of the first heatmap (every position of batch row 0)."""
    if name == "tokens":
        return array(charts(at)[0]["data"][0]["z"]).shape[1] == positions[1]
    z = next(c["data"][0]["z"] for c in charts(at) if c["data"][0].get("type") == "heatmap")
    return np.atleast_2d(array(z)).shape[0] == positions[0]


def check(at, name, text, vocab: str, warnings, infos, positions):
    where = (name, repr(text[:20]))
    assert not at.exception, (*where, [e.message for e in at.exception])
    assert [e.value for e in at.error] == [], where
    # the tokenizer asked for is the one used: no fallback, its vocabulary in the sidebar
    assert any(c.value.startswith(f"vocab_size = {vocab}, set by the tokenizer") for c in at.sidebar.caption), (
        *where, [c.value for c in at.sidebar.caption])
    # (Who did it also says when the chosen position has no true next token, as a one-token text's has not)
    assert [w.value for w in at.warning if not (name == "who" and w.value.startswith("Position "))] == warnings, where
    shown = [i.value for i in at.info]
    for m in infos:
        assert m in shown, (*where, m, shown)
    if not infos:  # a text that calls for no message gets none about the text
        assert not any(m.startswith(TEXT_NOTICES) for m in shown), (*where, shown)
    # Generation has its own prompt box, seeded once from the sidebar; Who did it's first heatmap is the logit lens,
    # one row per layer, not per position; the pages that explain one prediction (its routes, a neuron, a feature, two
    # models' heads) draw no position × position heatmap to count, nor does Experts on a model without experts (the
    # default's: one line says so)
    if name not in ("generation", "who", "contributions", "neurons", "features", "compare", "experts"):
        assert positions_shown(at, name, positions), (*where, positions)


def send_text(at, text: str):
    """The sidebar's text set to ``text`` whatever its length, as a client that speaks Streamlit's websocket
    protocol itself could send it (a browser, and AppTest's ``input``, stop at the box's ``max_chars``)."""
    return at.text_area(key="w.text").set_value(text).run()


@pytest.mark.parametrize("name", list(PAGES))
def test_hostile_texts_on_every_page(name):
    at = page(name)
    assert at.text_area(key="w.text").max_chars == 4096  # a browser stops a paste there
    for text in TEXTS:
        at = send_text(at, text)
        check(at, name, text, "76", *expected_char_bpe(text))
    assert len(at.session_state["gptviz.settings"]["text"]) == len(TEXTS[-1])  # the last, short text as it was


def test_the_expected_messages_are_worked_out_right():
    """The expectations themselves, spelled out for the texts whose message is easy to read."""
    assert expected_char_bpe("")[0] == [EMPTY] and expected_char_bpe("   \n\t ")[0] == [EMPTY]
    assert expected_char_bpe(TEXTS[6]) == ([], [LONG], (32, 32))
    assert expected_char_bpe(TEXTS[7])[1] == [MANY_LINES]
    assert expected_char_bpe("<|endoftext|>") == ([], [], (1, 1))
    assert expected_char_bpe(TEXTS[4])[1] == [
        "Not in this tokenizer's vocabulary, so left out: '\\x00' '\\x01' '\\x1b' '[' '\\x7f'. " + OTHER_SCRIPTS]


@pytest.mark.parametrize("name", ["home", "attention", "logits", "generation"])
def test_hostile_texts_with_gpt2_tokens(name):
    at = set_sidebar(page(name), "tokenizer", "gpt2")
    for text in TEXTS[:6]:
        at = set_sidebar(at, "text", text)
        # GPT-2 reads every byte: only the blank texts call for a message; the others show their GPT-2 tokens
        n = GPT2_POSITIONS[text]
        check(at, name, text, "50,257", [EMPTY] if not text.strip() else [], [], (n, n))


def test_a_model_over_the_size_cap_is_refused_with_a_message():
    at = page("home")
    at = set_sidebar(at, "n_layer", 48)  # 48 small layers first: still under the cap (n_embd=4096 first would
    at = set_sidebar(at, "n_embd", 4096)  # build a 400 M-parameter two-layer model on the way)
    assert not at.exception
    assert "over the limit" in messages(at)


def test_a_hand_edited_link_does_not_break_the_page():
    at = page("attention", n_layer="abc", n_head="-5", norm="batchnorm", block_size="99999999", tokenizer="nope")
    assert not at.exception
    for name in ("n_layer", "n_head", "norm", "block_size", "tokenizer"):  # one notice names each bad setting
        assert f"`{name}`" in messages(at), (name, messages(at))


# Hand-edited links that crashed the page (issue 19), each with the parameter its notice must name and the value
# it must end up with: read by one function (gptviz.present.url_params) before anything is built.
HOSTILE_LINKS = [
    ({"merges": "-1"}, "merges", "0"),
    ({"seed": "18446744073709551616"}, "seed", str(2**31 - 1)),
    ({"tokenizer": "gpt2", "merges": "1000000"}, "merges", "200"),
    ({"pos_encoding": "none", "block_size": "150000"}, "block_size", "2048"),
    ({"pos_encoding": "rope", "n_embd": "2", "n_head": "1", "d_head": "1000000", "block_size": "2048"}, "d_head",
     "1024"),
    ({"text": "x" * 100_000}, "text", "x" * 4096),
    ({"seed": "nan", "dropout": "inf"}, "seed", None),
    ({"norm": "batchnorm"}, "norm", None),
    ({"whatever": "1"}, "whatever", None),
]


@pytest.mark.parametrize("query, name, value", HOSTILE_LINKS, ids=[q[1] + "-" + str(i) for i, q in
                                                                   enumerate(HOSTILE_LINKS)])
def test_a_hostile_link_gives_a_notice_and_a_page_that_keeps_working(query, name, value):
    at = page("attention", **query)
    assert not at.exception, [e.message for e in at.exception]
    notices = [w.value for w in at.warning if name in w.value]
    assert notices, (name, messages(at))
    assert len(at.get("plotly_chart")) >= 1  # the page still draws
    assert any(b.label == "Reset to defaults" for b in at.sidebar.button)
    if value is not None:  # the address now holds the value used, so a reload opens the same page without a crash
        assert at.query_params[name] == value
    at.run()  # the same session again
    assert not at.exception, [e.message for e in at.exception]
    assert len(at.get("plotly_chart")) >= 1
    assert not any(name in w.value for w in at.warning if w.value in notices)  # shown once, not on every rerun


def test_reloading_a_hostile_link_works_every_time():
    for _ in range(2):  # two fresh sessions on the same address: no crash loop
        at = page("attention", merges="-1", seed="18446744073709551616")
        assert not at.exception, [e.message for e in at.exception]
        assert "`merges`" in messages(at) and "`seed`" in messages(at)
        assert len(at.get("plotly_chart")) >= 1


@pytest.mark.parametrize("field,stale", [("batch", "0: 'the cat sat on an old line'"), ("head", "head 3 of old"),
                                         ("layer", None)])
def test_a_stale_widget_label_in_the_settings_is_clamped_not_a_traceback(field, stale):
    """A client can send back a selectbox label this run no longer offers (the batch rows' labels change with the
    text): the setting becomes the first row (all heads, layer 0), on this run and every later one."""
    at = page("attention", text="the cat sat\non the mat\nand ran")
    assert not at.exception
    at.session_state["gptviz.settings"][field] = stale
    at = at.run()
    assert not at.exception, [e.message for e in at.exception]
    s = at.session_state["gptviz.settings"]
    assert s[field] == (-1 if field == "head" else 0)
    at = at.run()
    assert not at.exception
