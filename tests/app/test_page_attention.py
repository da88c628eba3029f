import numpy as np
from apphelp import array, chart, charts, ok, page, set_sidebar, titles


def _step(at, title_start):
    radio = at.radio(key="s.pick")
    return radio.set_value([o for o in radio.options if o.startswith(title_start)][0]).run()


def test_one_step_at_a_time_and_every_step_in_order():
    at = ok(page("attention"))
    radio = at.radio(key="s.pick")
    assert len(radio.options) == 13 and radio.value is None  # no step drawn until one is picked
    assert len(at.get("plotly_chart")) == 2  # the head and the detector grid: quick to draw
    assert any("Pick one of the 13 steps" in c.value for c in at.caption)
    at = ok(_step(at, "1 · The norm"))
    assert len(at.get("plotly_chart")) == 3 and [s.value for s in at.subheader][0].startswith("1 · The norm")
    at.segmented_control(key="att.more").set_value("Every layer × every head").run()
    assert len(at.get("plotly_chart")) == 4 and any("every head" in x for x in titles(at))
    at = ok(_step(at, "6 · The causal"))
    assert ([s.value for s in at.subheader][0].startswith("6 · The causal")
            and any("masked scores" in x for x in titles(at)))
    at.toggle(key="s.every").set_value(True).run()
    heads = [s.value for s in at.subheader]
    for word in ["norm", "Q, K and V", "Q", "K", "V", "Q Kᵀ", "1/√d_head", "mask", "Softmax",
                 "Weighted values", "side by side", "output projection", "residual add"]:
        assert any(word in h for h in heads), word
    assert len(at.latex) >= 10 and len(at.code) >= 10
    t = titles(at)
    assert any("masked scores" in x for x in t) and any("Every layer" in x or "every head" in x for x in t)


def test_pattern_rows_sum_to_one_and_masked_cells_are_marked():
    at = page("attention")
    c = chart(at, "L0 attention weights")
    z = array(c["data"][0]["z"])
    mask = np.isfinite(array(c["data"][1]["z"]))
    assert np.array_equal(mask, np.triu(np.ones_like(mask), 1))
    assert np.allclose(np.nansum(z, axis=1), 1.0, atol=1e-5)


def test_layer_and_head_selectors_change_the_view():
    at = page("attention")
    z0 = array(chart(at, "L0 attention weights")["data"][0]["z"])
    at = set_sidebar(at, "head", 1)
    z1 = array(chart(at, "L0 attention weights")["data"][0]["z"])
    assert not np.allclose(np.nan_to_num(z0), np.nan_to_num(z1))
    at = set_sidebar(at, "layer", 1)
    assert at.title[0].value.startswith("Attention · layer 1 · head 1")
    at = set_sidebar(at, "head", -1)
    ok(at)
    assert any("every head" in t for t in titles(at))


def test_switching_a_head_off_zeroes_it_and_recomputes():
    at = _step(page("attention"), "10 · The output projection")
    out_before = array(chart(at, "L0 attention output")["data"][0]["z"])
    at.button_group(key="gptviz.headoff.att.0").set_value([0]).run()
    ok(at)
    z = array(chart(at, "L0 attention weights")["data"][0]["z"])
    assert np.nansum(np.abs(z)) == 0
    assert not np.allclose(array(chart(at, "L0 attention output")["data"][0]["z"]), out_before)
    at = [b for b in at.button if b.label == "Clear all edits"][0].click().run()
    assert np.allclose(array(chart(at, "L0 attention output")["data"][0]["z"]), out_before)


def test_rope_model_shows_rotated_steps_and_bad_shape_keeps_page():
    at = set_sidebar(page("attention"), "pos_encoding", "rope")
    ok(at)
    assert any("RoPE" in o for o in at.radio(key="s.pick").options)
    at = ok(_step(at, "3b · Rotate Q"))
    assert any("RoPE" in s.value for s in at.subheader)
    at = set_sidebar(at, "n_embd", 15)
    ok(at)
    assert any("n_embd=15" in e.value for e in at.error)


def test_head_detector_grid_matches_an_independent_computation_and_opens_a_head():
    import torch

    from gptviz import GPT, encode_batch, get_tokenizer, preset, trace
    from gptviz.interp.head_detector import repeated_probe
    from gptviz.text.batches import DEFAULT_PROMPT

    at = ok(page("attention"))
    grid = chart(at, "What each head does")
    best = array(grid["data"][0]["z"])
    tok = get_tokenizer("char-bpe", num_merges=20, lowercase=True)
    cfg = preset("default", vocab_size=tok.vocab_size)
    b = encode_batch(tok, DEFAULT_PROMPT, cfg.block_size)
    model = GPT(cfg)
    T = b.lengths[0]
    tr = trace(model, b.x)
    P = np.stack([tr[f"blocks.{l}.attn.hook_pattern"][0, :, :T, :T].numpy() for l in range(2)]).astype(np.float64)
    # previous, current and first from the text, by hand: the mean weight on t-1 (t >= 1), on t, on 0 (t >= 1)
    want = {"previous": np.mean([P[:, :, t, t - 1] for t in range(1, T)], axis=0),
            "current": np.mean([P[:, :, t, t] for t in range(T)], axis=0),
            "first": np.mean([P[:, :, t, 0] for t in range(1, T)], axis=0)}
    # induction and duplicate from the probe (8 rows of a run of n distinct tokens, then the run again): position
    # t >= n repeats t - n only, so duplicate is the weight on t - n and induction on t - n + 1, for t = n..2n-1
    n = min(32, cfg.block_size // 2)
    idx = repeated_probe(cfg.vocab_size, n, 8, 0)
    assert torch.equal(idx[:, :n], idx[:, n:]) and all(len(set(r[:n].tolist())) == n for r in idx)
    tp = trace(model, idx)
    Q = np.stack([tp[f"blocks.{l}.attn.hook_pattern"].numpy() for l in range(2)]).astype(np.float64)  # (L, B, H, ..)
    want["duplicate"] = np.mean([Q[..., t, t - n] for t in range(n, 2 * n)], axis=(0, 2))
    want["induction"] = np.mean([Q[..., t, t - n + 1] for t in range(n, 2 * n)], axis=(0, 2))
    top = np.max(np.stack(list(want.values())), axis=0)
    assert best.shape == (2, 2) and np.allclose(best, top, rtol=0, atol=1e-6)
    cells = grid["data"][1]  # one invisible point per cell: what a click in the browser selects
    assert (cells["name"] == "cells"
            and list(zip(cells["y"], cells["x"])) == [(f"L{l}", f"H{h}") for l in range(2) for h in range(2)])
    # each cell's hover names every kind's score (2 decimals): all five match the hand computation
    for i, tip in enumerate(cells["text"]):
        shown = dict(line.split(": ") for line in tip.split("<br>")[1:])
        assert set(shown) == set(want), tip
        for k, v in shown.items():
            assert abs(float(v) - want[k][i // 2, i % 2]) <= 0.005 + 1e-9, (tip, k)
    # choosing a head from the list opens it: the shared layer and head follow
    at.selectbox(key="det.pick").set_value(3).run()  # L1 H1 of a 2 × 2 grid
    assert at.title[0].value == "Attention · layer 1 · head 1"


def test_a_selected_query_and_key_are_outlined_on_every_chart_and_named_in_the_sidebar():
    from apphelp import charts

    at = ok(page("attention"))
    at.session_state["gptviz.settings"]["sel"] = [4, 2]  # what a click on cell (query 4, key 2) stores
    at = ok(_step(at.run(), "4 · Scores"))
    side = " ".join(i.value for i in at.sidebar.info)
    assert "Selected: query 4" in side and "key 2" in side
    outlined = 0
    for c in charts(at):
        shapes = c["layout"].get("shapes", [])
        if c["layout"]["title"]["text"].startswith(("L0 attention weights", "L0 scores QKᵀ")):
            rows = [s for s in shapes if s.get("name") == "selected query"]
            cols = [s for s in shapes if s.get("name") == "selected key"]
            assert rows and rows[0]["y0"] == 3.5 and rows[0]["y1"] == 4.5, c["layout"]["title"]["text"]
            assert cols and cols[0]["x0"] == 1.5 and cols[0]["x1"] == 2.5
            outlined += 1
    assert outlined == 2
    at = [b for b in at.sidebar.button if b.label == "Clear the selection"][0].click().run()
    assert "sel" not in at.session_state["gptviz.settings"]
    assert not any(c["layout"].get("shapes") for c in charts(at))


def test_clicking_a_cell_reads_the_query_and_key():
    from gptviz.ui.widgets import clicked_cell

    assert clicked_cell({"selection": {"points": [{"x": "2: 'c'", "y": "4: 'a' [4]"}]}}) == (4, 2)
    assert clicked_cell({"selection": {"points": []}}) is None and clicked_cell(None) is None


def test_the_pattern_is_told_in_words_for_a_screen_reader():
    """The chart's alt text names its largest weights with their tokens: checked against the pattern of a plain
    forward pass (apphelp.engine_run) and the tokenizer's own token strings."""
    from apphelp import engine_run

    from gptviz import encode_batch, get_tokenizer
    from gptviz.text.batches import DEFAULT_PROMPT

    at = page("attention", layer=1, head=1)
    (proto,) = [c.proto for c in at.get("plotly_chart") if "L1 attention weights" in c.proto.spec]
    seen, _ = engine_run()
    p = seen["blocks.1.attn.hook_pattern"][0, 1]
    tok = get_tokenizer("char-bpe", num_merges=20, lowercase=True)
    ids = encode_batch(tok, DEFAULT_PROMPT, 32).x[0].tolist()
    q, k = np.unravel_index(int(np.argmax(p)), p.shape)
    assert proto.alt.startswith("L1 attention weights · head 1. A ")
    assert f"{p[q, k]:.3g} at row " in proto.alt and f"{tok.token_str(ids[k])!r}" in proto.alt, proto.alt


def test_the_patterns_key_labels_stand_upright_and_apart_in_its_column():
    """The pattern in the page's left column is about 257 px wide at 1280×720 (measured in Chromium): its key labels
    stand upright, never at 45° where neighbours cross, and as many as fit apart (1.5 × the 14-px font each)."""
    import math

    from gptviz.model.checkpoint import load_checkpoint
    from gptviz.paths import CHECKPOINTS

    at = ok(page("attention", opening=True))
    ax = charts(at)[0]["layout"]["xaxis"]
    ck = load_checkpoint(CHECKPOINTS / "shakespeare.safetensors")
    T = len(ck.tokenizer.encode(ck.meta["example"]))  # the opening model's example line
    step = math.ceil(1.5 * 14 / (240 / T))
    assert T == 18 and step == 2
    # the key axis's categories are named "position: 'token'"
    assert ax["tickangle"] == -90 and [int(v.split(":")[0]) for v in ax["tickvals"]] == list(range(0, T, step))
    assert len(ax["ticktext"]) == 9


def test_a_head_off_that_the_model_no_longer_has_is_not_a_choice_and_the_page_still_opens():
    """Edits kept from a model with more heads (head 7 of layer 0, on a 2-head model) leave the pills with the heads
    this model has: the real one stays selected, the page opens without an error."""
    at = page("attention")
    at.session_state["gptviz.settings"]["edits"] = {"set": [], "heads_off": [[0, 1], [0, 7]]}
    at.run()
    ok(at)
    pills = at.button_group(key="gptviz.headoff.att.0")
    assert pills.value == [1] and "H7" not in pills.options and "H1" in pills.options
