"""A long text's attention map (over 96 tokens: ``figures.heatmaps.BIG_CELLS``) is one light image whose cells are
pixels, so it has no cells to click: its query and key are chosen in two lists under it (gptviz.ui.cell_picker).

The model is the small "default" preset with block_size 256 and a 139-token text (a page run takes about 2 s); the
real case, GPT-2 small at 300 tokens, was looked at in Chromium. Every value is checked against a pattern computed
by hand (scaled dot products, causal mask, softmax) from the queries and keys of a plain ``GPT.run``."""
import math

import numpy as np
import pytest
import torch
from apphelp import array, chart, charts, ok, page, set_sidebar

TEXT = "the cat sat on the mat and the dog sat on the log. " * 6
BLOCK = 256
PATTERN = "fig.topblocks.0.attn.hook_pattern"  # the Attention page's head map: its picker's widget keys start so


@pytest.fixture(scope="module")
def oracle():
    """The page's model and text run with plain ``GPT.run``; the pattern worked out by hand from its q and k."""
    from gptviz import GPT, encode_batch, get_tokenizer, preset

    tok = get_tokenizer("char-bpe", num_merges=20, lowercase=True)
    cfg = preset("default", vocab_size=tok.vocab_size, block_size=BLOCK)
    b = encode_batch(tok, TEXT, cfg.block_size)
    seen = {}

    def rec(name, x):
        seen[name] = x.detach().double()
        return x

    with torch.no_grad():
        GPT(cfg).run(b.x, b.attention_mask, rec=rec)
    q, k = seen["blocks.0.attn.hook_q"][0], seen["blocks.0.attn.hook_k"][0]  # (T, head, d_head)
    T, d = q.shape[0], q.shape[-1]
    raw = torch.einsum("qhd,khd->hqk", q, k)
    future = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
    pattern = torch.softmax((raw / math.sqrt(d)).masked_fill(future, float("-inf")), dim=-1)
    labels = [tok.token_str(int(i)) for i in b.x[0]]
    return {"T": T, "raw": raw.numpy(), "pattern": pattern.numpy(), "labels": labels}


def _pick(at, query=None, key=None, chart_key=PATTERN):
    if query is not None:
        at = at.selectbox(key=chart_key + ".q").set_value(query).run()
    if key is not None:
        at = at.selectbox(key=chart_key + ".k").set_value(key).run()
    return ok(at)


def _outlines(c) -> set:
    return {(s["name"], s["x0"], s["x1"], s["y0"], s["y1"]) for s in c["layout"].get("shapes", [])}


def _sel(at):
    return at.session_state["gptviz.settings"].get("sel")


def test_query_120_and_key_37_chosen_in_the_lists_are_the_selection_on_every_chart(oracle):
    T, P = oracle["T"], oracle["pattern"]
    assert T > 96 and T * T > 96 * 96  # a big map: no click points, the lists are its only way to select
    at = ok(page("attention", block_size=BLOCK, text=TEXT))
    qbox = at.selectbox(key=PATTERN + ".q")
    assert qbox.value is None and len(qbox.options) == T
    assert qbox.options[120] == f"120: '{oracle['labels'][120]}'"  # positions named with their tokens
    at = _pick(at, query=120)
    # a query alone takes its strongest key (the largest weight in its row, by hand)
    assert _sel(at) == [120, int(np.argmax(P[0, 120, :121]))]
    at = _pick(at, key=37)
    assert _sel(at) == [120, 37]
    big = chart(at, "L0 attention weights")
    assert _outlines(big) == {("selected query", -0.5, T - 0.5, 119.5, 120.5),
                              ("selected key", 36.5, 37.5, -0.5, T - 0.5)}
    assert abs(float(array(big["data"][0]["z"])[120, 37]) - P[0, 120, 37]) < 1e-6
    # the chosen cell's value, said under the map (4 significant figures), is the hand-computed weight
    line = [c.value for c in at.caption if c.value.startswith("Query 120")]
    assert line and f"**{P[0, 120, 37]:.4g}**" in line[0], line
    side = " ".join(i.value for i in at.sidebar.info)
    assert f"query 120 '{oracle['labels'][120]}'" in side and f"key 37 '{oracle['labels'][37]}'" in side
    # another chart follows: the scores step (also a big map) outlines the same cell, and its own lists show it
    radio = at.radio(key="s.pick")
    at = ok(radio.set_value([o for o in radio.options if o.startswith("4 · Scores")][0]).run())
    scores_key = "fig.sblocks.0.attn.hook_scores_raw"
    assert at.selectbox(key=scores_key + ".q").value == 120 and at.selectbox(key=scores_key + ".k").value == 37
    scores = [c for c in charts(at) if c["layout"]["title"]["text"].startswith("L0 scores QKᵀ")][0]
    assert ("selected query", -0.5, T - 0.5, 119.5, 120.5) in _outlines(scores)
    assert ("selected key", 36.5, 37.5, -0.5, T - 0.5) in _outlines(scores)
    said = [c.value for c in at.caption if c.value.startswith("Query 120")]
    assert len(said) == 2 and f"**{oracle['raw'][0, 120, 37]:.4g}**" in said[1], said
    # zoom: 49 positions around the cell (keys 13..61 around 37; queries 96..144 would pass the last row, so
    # 90..138), the first row kept at the top
    at = ok(at.toggle(key=PATTERN + ".zoom").set_value(True).run())
    lay = chart(at, "L0 attention weights")["layout"]
    assert T == 139 and lay["xaxis"]["range"] == [12.5, 61.5] and lay["yaxis"]["range"] == [138.5, 89.5]


def test_a_key_after_the_query_is_never_offered_and_a_later_query_is_refused_with_a_message(oracle):
    P = oracle["pattern"]
    at = _pick(page("attention", block_size=BLOCK, text=TEXT), query=120, key=37)
    keys = at.selectbox(key=PATTERN + ".k").options
    assert len(keys) == 121 and keys[-1].startswith("120: ")  # keys 0..120 only: the causal rule of a click
    at = _pick(at, query=121)
    assert _sel(at) == [121, 37] and not at.warning  # a key before the new query stays
    at = _pick(at, query=20)  # key 37 would be in query 20's future
    strongest = int(np.argmax(P[0, 20, :21]))
    assert _sel(at) == [20, strongest]
    said = " ".join(w.value for w in at.warning)
    assert "Key 37 comes after query 20" in said and f"strongest key, {strongest}" in said
    assert len(at.selectbox(key=PATTERN + ".k").options) == 21
    # a selection that breaks the rule (set by hand in the session) outlines nothing and crashes nothing
    at.session_state["gptviz.settings"]["sel"] = [10, 30]
    at = ok(at.run())
    assert at.selectbox(key=PATTERN + ".q").value is None and not chart(at, "L0 attention weights")["layout"].get(
        "shapes")


def test_a_selection_past_a_shrunk_text_is_dropped_without_a_traceback(oracle):
    at = _pick(page("attention", block_size=BLOCK, text=TEXT), query=120, key=37)
    at = ok(set_sidebar(at, "text", TEXT[:240]))  # still a big map (over 96 tokens), but no position 120
    n = len(at.selectbox(key=PATTERN + ".q").options)
    assert 96 < n <= 120 and at.selectbox(key=PATTERN + ".q").value is None
    assert not chart(at, "L0 attention weights")["layout"].get("shapes") and not at.sidebar.info
    at = _pick(at, query=n - 1, key=3)  # choosing again works on the shorter text
    assert _sel(at) == [n - 1, 3]
    at = ok(set_sidebar(at, "text", "the cat sat"))  # a short text: a small map, no lists, nothing outlined
    assert PATTERN + ".q" not in [s.key for s in at.selectbox]
    # a selection made on a short text is shown by the lists once the text is long
    at.session_state["gptviz.settings"]["sel"] = [5, 2]
    at = ok(set_sidebar(at, "text", TEXT))
    assert at.selectbox(key=PATTERN + ".q").value == 5 and at.selectbox(key=PATTERN + ".k").value == 2
    assert ("selected query", -0.5, oracle["T"] - 0.5, 4.5, 5.5) in _outlines(chart(at, "L0 attention weights"))


def test_the_chosen_tokens_are_shown_as_text_not_markdown():
    """Tokens reach the line under the map as text: two "*" tokens make no emphasis (this tokenizer drops "[" and
    "<", so no link or tag can be spelt with it)."""
    from markdown_it import MarkdownIt

    from gptviz import get_tokenizer

    tok = get_tokenizer("char-bpe", num_merges=20, lowercase=True)
    text = "see [it](http://evil.example) **now** or <b>x</b> " * 5
    ids = tok.encode(text)
    labels = [tok.token_str(i) for i in ids]
    assert len(ids) > 96
    q = max(i for i, t in enumerate(labels) if "*" in t)
    k = max(i for i, t in enumerate(labels[:q - 1]) if "*" in t)
    at = _pick(page("attention", block_size=BLOCK, text=text), query=q, key=k)
    line = [c.value for c in at.caption if c.value.startswith(f"Query {q}")]
    assert line and _sel(at) == [q, k]
    html = MarkdownIt("commonmark").render(line[0])
    assert "<a" not in html and "<em>" not in html and "<b>" not in html and "**" not in html.replace("<strong>", "")
    assert html.count("<strong>") == 1  # the value only
    note = [i.value for i in at.sidebar.info if i.value.startswith("Selected: query")]  # the sidebar's line too
    assert note and "<em>" not in MarkdownIt("commonmark").render(note[0])
