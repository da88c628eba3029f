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


def test_gpt2_tokenizer_and_an_unavailable_encoding():
    at = set_sidebar(page("tokens"), "tokenizer", "gpt2")
    ok(at)
    assert any("50,257" in c.value for c in at.caption)
    at = set_sidebar(at, "tokenizer", "o200k_base")
    ok(at)
    assert "could not be loaded" in messages(at) and "char BPE" in messages(at)
    assert at.selectbox(key="w.tokenizer").value == "o200k_base"  # the user's choice is kept


def test_merges_slider_changes_the_tokens():
    at = page("tokens")
    n_before = len(charts(at)[0]["data"][0]["x"])
    at = set_sidebar(at, "merges", 0)
    ok(at)
    assert len(charts(at)[0]["data"][0]["x"]) > n_before  # no merges: one token per character
