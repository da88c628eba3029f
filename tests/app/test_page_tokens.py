import pytest
from apphelp import charts, messages, ok, page, set_sidebar, titles


def test_renders_grids_chips_and_merges():
    at = ok(page("tokens"))
    t = titles(at)
    assert t[0].startswith("x: the input ids, B=1") and t[1].startswith("y: the targets")
    x = charts(at)[0]["data"][0]
    assert "the␣" in x["text"][0][0]  # a merged token, shown with a visible space
    assert any("learned merges" in s.value for s in at.subheader)
    assert len(at.dataframe) >= 1


def test_several_lines_make_a_padded_batch_with_a_mask():
    at = set_sidebar(page("tokens"), "text", "the cat sat on the mat.\nthe dog")
    ok(at)
    assert titles(at)[0].startswith("x: the input ids, B=2")
    assert any("Padding and the attention mask" in s.value for s in at.subheader)
    grid = charts(at)[0]["data"]
    assert len(grid) == 2  # padding drawn as its own grey layer


def test_bad_inputs_become_messages():
    at = set_sidebar(page("tokens"), "text", "   ")
    ok(at)
    assert "The text is empty" in messages(at)
    at = set_sidebar(at, "text", "price: 5€ ~ ok")
    ok(at)
    assert "'€'" in messages(at) and "'~'" in messages(at)
    at = set_sidebar(at, "text", "the cat " * 40)
    ok(at)
    assert "cut" in messages(at) and "block_size" in messages(at)


def test_gpt2_and_o200k_load_from_the_shipped_files():
    at = set_sidebar(page("tokens"), "tokenizer", "gpt2")
    ok(at)
    assert any("vocab_size = 50,257, set by the tokenizer" in c.value for c in at.sidebar.caption)
    at = set_sidebar(set_sidebar(at, "tokenizer", "o200k_base"), "text", "hello world")
    ok(at)
    assert "could not be" not in messages(at) and "char BPE" not in messages(at)
    assert any("vocab_size = 200,019, set by the tokenizer" in c.value for c in at.sidebar.caption)
    assert titles(at)[0].startswith("x: the input ids, B=1 × T=2")
    assert charts(at)[0]["data"][0]["text"] == [["hello<br>24912", "␣world<br>2375"]]  # o200k's ids for "hello world"
    assert at.selectbox(key="w.tokenizer").value == "o200k_base"


@pytest.fixture
def damaged_vocabularies(monkeypatch, tmp_path):
    """The shipped vocabulary files replaced by a folder holding one damaged file (o200k) and no others, with
    nothing loaded or cached yet in this process; everything put back afterwards."""
    import gzip

    import gptviz.text.tokenizers as tk
    from gptviz.ui import resources

    (tmp_path / "o200k_base.tiktoken.gz").write_bytes(gzip.compress(b"aGVsbG8= 0\n"))
    monkeypatch.setattr(tk, "TIKTOKEN_DIR", tmp_path)
    monkeypatch.setattr(tk, "_ENCODINGS", {})
    resources.tokenizer_for.clear()
    yield tmp_path
    resources.tokenizer_for.clear()  # so no other test sees a cached failure


def test_a_vocabulary_that_cannot_load_is_a_message_and_the_choice_is_kept(damaged_vocabularies):
    at = set_sidebar(page("tokens"), "tokenizer", "o200k_base")
    ok(at)
    msg = messages(at)
    assert "The o200k_base vocabulary file o200k_base.tiktoken.gz is damaged" in msg and "char BPE" in msg
    assert any("vocab_size = 76, set by the tokenizer" in c.value for c in at.sidebar.caption)  # the fallback
    assert at.selectbox(key="w.tokenizer").value == "o200k_base"  # the user's choice is kept
    at = set_sidebar(at, "tokenizer", "cl100k_base")  # missing altogether
    ok(at)
    assert "The cl100k_base vocabulary file cl100k_base.tiktoken.gz could not be read" in messages(at)


def test_merges_slider_changes_the_tokens():
    at = page("tokens")
    n_before = len(charts(at)[0]["data"][0]["x"])
    at = set_sidebar(at, "merges", 0)
    ok(at)
    assert len(charts(at)[0]["data"][0]["x"]) > n_before  # no merges: one token per character


def test_chinese_text_reads_as_characters_on_the_chips_and_the_heatmap_axes():
    """GPT-2's byte tokens split each of these characters in two: the chips and the attention heatmap's axes name
    the character (注… then …注), never escaped bytes."""
    from apphelp import PAGES, ROOT, TIMEOUT
    from streamlit.testing.v1 import AppTest

    text = "注意力是你所需要的"
    at = ok(page("tokens", tokenizer="gpt2", text=text))
    chips = " ".join(m.value for m in at.markdown)
    for label in ("注…", "…注", "…需…", "是", "的"):
        assert f">{label}<" in chips, label
    assert "\\x" not in chips
    x_grid, y_grid = charts(at)[0]["data"][0]["text"][0], charts(at)[1]["data"][0]["text"][0]
    assert "注…" in x_grid[0] and "…注" in y_grid[0]  # the target at 0 is the token at 1, labelled the same
    assert not any("\\x" in str(c) for c in x_grid + y_grid)
    assert any("… marks a character split over several tokens" in c.value for c in at.caption)
    attention = AppTest.from_file(str(ROOT / PAGES["attention"]), default_timeout=TIMEOUT)
    for k, v in {"preset": "default", "tokenizer": "gpt2", "text": text}.items():
        attention.query_params[k] = v
    attention.run()
    assert not attention.exception
    axes = [c for c in charts(attention) if c["data"] and c["data"][0].get("type") == "heatmap"]
    ticks = set()
    for c in axes:
        for ax in ("xaxis", "yaxis"):
            ticks.update(str(t) for t in c["layout"].get(ax, {}).get("ticktext") or [])
            ticks.update(str(t) for t in c["data"][0].get("x" if ax == "xaxis" else "y") or [])
    assert any("注…" in t for t in ticks) and any("…注" in t for t in ticks), sorted(ticks)[:20]
    assert not any("\\x" in t for t in ticks)


def test_characters_the_char_bpe_does_not_know_show_as_left_out_chips_and_say_what_to_change():
    at = ok(page("tokens", text="the cat 注意 sat"))
    chips = " ".join(m.value for m in at.markdown)
    assert "not in the vocabulary: left out" in chips and ">注<" in chips and ">意<" in chips
    assert "byte-level tokenizer" in messages(at) + " ".join(c.value for c in at.caption)
    at = ok(page("tokens", text="注意力"))  # nothing it can read: the example, the user's text kept
    assert "byte-level tokenizer" in messages(at)
    assert at.query_params.get("text") in ("注意力", ["注意力"]) or "注意力" in str(at.sidebar.text_area[0].value)
