"""Figure builders on their own: traces, labels, colour scales, masked cells."""
import json
import math

import numpy as np
import plotly.io as pio
import pytest
import torch
from conftest import CONFIGS, random_ids

from gptviz import GPT, trace
from gptviz.present import figures, matrices
from gptviz.present.descriptions import PROBABILITY


@pytest.fixture(scope="module")
def tr():
    c = CONFIGS["gpt2-like"]
    idx = random_ids(c, B=2, T=6)
    mask = torch.tensor([[1] * 6, [1, 1, 1, 1, 0, 0]])
    return trace(GPT(c), idx, targets=random_ids(c, B=2, T=6, seed=1), attention_mask=mask).numpy()


TOKS = ["the", "cat", "sat", "the", "mat", "."]


def roundtrip(fig):
    """What the browser gets: the figure's JSON, parsed back."""
    return json.loads(pio.to_json(fig, validate=True))


def test_signed_heatmap_is_diverging_and_centred(tr):
    name = "blocks.0.hook_resid_pre"
    m = matrices.step_matrix(tr[name], tr.info(name), TOKS, batch=0)
    fig = figures.heatmap(m, "resid")
    h = fig.data[0]
    assert h.type == "heatmap" and len(fig.data) == 1
    assert h.zmid == 0 and h.zmin == -h.zmax == -float(np.abs(tr[name][0]).max())
    assert fig.layout.yaxis.ticktext == tuple(TOKS) and fig.layout.yaxis.autorange == "reversed"
    # the repeated "the" stays two distinct rows
    assert len(set(h.y)) == 6 and h.y[0] != h.y[3]
    assert "value" in h.hovertemplate
    roundtrip(fig)


def test_probability_heatmap_is_fixed_zero_to_one_with_masked_cells_grey(tr):
    name = "blocks.0.attn.hook_pattern"
    mk = matrices.masked_cells(tr, 1)
    m = matrices.step_matrix(tr[name], tr.info(name), TOKS, batch=1, head=1, masked=mk)
    fig = figures.heatmap(m, "pattern")
    main, overlay = fig.data
    assert (main.zmin, main.zmax) == (0.0, 1.0)
    expected = np.triu(np.ones((6, 6), bool), 1)
    expected[:, 4:] = True  # padded keys
    assert np.array_equal(m.masked, expected)
    z = np.asarray(main.z, dtype=float)
    assert np.isnan(z[expected]).all() and np.isfinite(z[~expected]).all()
    oz = np.asarray(overlay.z, dtype=float)
    assert np.array_equal(np.isfinite(oz), expected)  # grey exactly on masked cells
    assert overlay.colorscale[0][1] == figures.MASK_COLOR and "masked" in overlay.hovertemplate
    assert figures.MASK_COLOR.lower() not in ("#ffffff", "#f7fbff")  # not the colour of 0
    roundtrip(fig)


def test_masked_scores_mark_minus_infinity(tr):
    name = "blocks.1.attn.hook_attn_scores"
    m = matrices.step_matrix(tr[name], tr.info(name), TOKS, batch=0, head=0)
    assert np.array_equal(m.masked, np.triu(np.ones((6, 6), bool), 1))
    fig = figures.heatmap(m)
    assert len(fig.data) == 2 and fig.data[0].zmid == 0


def test_heads_and_paging(tr):
    z = tr["blocks.0.attn.hook_z"]
    info = tr.info("blocks.0.attn.hook_z")
    one = matrices.step_matrix(z, info, TOKS, head=1)
    assert one.values.shape == (6, 4) and one.cols[0] == "h1.0"
    assert np.array_equal(one.values, z[0, :, 1])
    allh = matrices.step_matrix(z, info, TOKS, head=None)
    assert allh.values.shape == (6, 8) and allh.cols[4] == "h1.0"
    paged = matrices.step_matrix(z, info, TOKS, head=None, max_cols=3, col_page=2)
    assert paged.values.shape == (6, 2) and "page 3 of 3" in paged.note
    assert np.array_equal(paged.values, allh.values[:, 6:8])


def test_numbers_in_cells_only_when_small(tr):
    name = "blocks.0.attn.hook_pattern"
    m = matrices.step_matrix(tr[name], tr.info(name), TOKS, head=0)
    assert figures.heatmap(m, show_values=True).data[0].texttemplate == "%{z:.2f}"
    assert figures.heatmap(m, show_values=False).data[0].texttemplate is None
    big = matrices.Matrix(np.zeros((30, 30)), [str(i) for i in range(30)], [str(i) for i in range(30)],
                          "r", "c", "signed")
    assert figures.heatmap(big, show_values=True).data[0].texttemplate is None


def test_nonnegative_and_scalar(tr):
    m = matrices.step_matrix(tr["blocks.0.ln1.hook_scale"], tr.info("blocks.0.ln1.hook_scale"), TOKS)
    h = figures.heatmap(m).data[0]
    assert h.zmin == 0 and h.colorscale and m.values.shape == (6, 1)
    loss = matrices.step_matrix(tr["hook_loss"], tr.info("hook_loss"), TOKS)
    assert loss.values.shape == (1, 1) and loss.values[0, 0] == pytest.approx(tr.loss)


def test_vocab_columns_top_k_plus_targets():
    logits = np.array([[0.0, 5.0, 1.0, 0.0, 0.0], [3.0, 0.0, 0.0, 0.0, 4.0]])
    ids = matrices.vocab_columns(logits, np.array([3, -100]), k=1)
    assert ids.tolist() == [1, 3, 4]
    m = matrices.vocab_matrix(logits, ids, ["a", "b", "c", "d", "e"], ["x", "y"], "signed")
    assert m.cols == ["b", "d", "e"] and m.values[1, 2] == 4.0


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_vocab_columns_of_a_big_vocabulary_are_each_rows_k_largest_and_the_targets(dtype):
    """Against a full sort of every row (random logits: no ties), on a read-only array as a cached trace gives it."""
    rng = np.random.default_rng(3)
    logits = rng.standard_normal((9, 5000)).astype(dtype)
    logits.flags.writeable = False
    y = np.array([7, -100, 4999, 0, -100, 12, 12, 3000, -100])
    want = {int(i) for row in logits for i in np.argsort(-row, kind="stable")[:10]} | {7, 4999, 0, 12, 3000}
    ids = matrices.vocab_columns(logits, y, k=10)
    assert ids.tolist() == sorted(want) and ids.dtype == np.int64
    assert matrices.vocab_columns(logits, None, k=5000).tolist() == list(range(5000))


def test_top_predictions_of_a_big_vocabulary_are_a_full_stable_sorts_first_k():
    """Against a full stable sort of every row, ties included (the lower id first), on a read-only table."""
    rng = np.random.default_rng(5)
    p = rng.random((6, 5000)).astype(np.float32)
    p[2, [10, 20, 30, 40]] = 2.0  # a four-way tie at the top: ids in order
    p[4, [4000, 17]] = 3.0
    p[4, 99] = 2.5
    p.flags.writeable = False
    names = [f"t{i}" for i in range(5000)]
    got = matrices.top_predictions(p, 3, names)
    want = [[(names[i], float(row[i])) for i in np.argsort(-row, kind="stable")[:3]] for row in p]
    assert got == want
    assert [n for n, _ in got[2]] == ["t10", "t20", "t30"] and [n for n, _ in got[4]] == ["t17", "t4000", "t99"]


def test_top_predictions_of_a_vocabulary_smaller_than_k_rank_every_token():
    """k past the vocabulary: every token, best first, ties in id order (each row of three)."""
    p = np.array([[0.2, 0.5, 0.3], [0.4, 0.2, 0.4], [0.1, 0.1, 0.8]])
    got = matrices.top_predictions(p, 5, ["a", "b", "c"])
    assert [[n for n, _ in row] for row in got] == [["b", "c", "a"], ["a", "c", "b"], ["c", "a", "b"]]
    assert [v for _, v in got[1]] == [0.4, 0.4, 0.2]


def test_vocab_columns_leave_out_targets_outside_the_vocabulary():
    logits = np.zeros((2, 6))
    logits[0, 4] = logits[1, 2] = 1.0
    assert matrices.vocab_columns(logits, np.array([6, -100]), k=1).tolist() == [2, 4]


def test_top_predictions_and_averaging():
    p = np.array([[0.1, 0.7, 0.2]])
    assert matrices.top_predictions(p, 2, ["a", "b", "c"]) == [[("b", 0.7), ("c", 0.2)]]
    avg = matrices.averaging_matrix(3)
    assert np.allclose(avg, [[1, 0, 0], [0.5, 0.5, 0], [1 / 3, 1 / 3, 1 / 3]])


def test_tiled_heatmap_places_every_head(tr):
    tiles = [[tr[f"blocks.{l}.attn.hook_pattern"][0, h] for h in range(2)] for l in range(2)]
    mk = matrices.masked_cells(tr, 0)
    fig = figures.tiled_heatmap(tiles, ["L0", "L1"], ["H0", "H1"], PROBABILITY, masked=mk)
    z = np.asarray(fig.data[0].z, dtype=float)
    assert z.shape == (13, 13)
    assert np.allclose(np.nan_to_num(z[7:13, 7:13]), tiles[1][1])  # L1 H1 in the bottom-right tile
    assert np.isnan(z[6]).all()  # gap row
    assert fig.layout.xaxis.ticktext == ("H0", "H1") and fig.data[0].zmax == 1.0
    roundtrip(fig)


def test_token_grid_and_chips():
    fig = figures.token_grid([["a", "<b>"], ["c", ""]], np.array([[1, 2], [3, -100]]), np.array([[1, 1], [1, 0]]), "x")
    assert fig.data[0].text[0][1] == "&lt;b&gt;<br>2"  # escaped
    assert len(fig.data) == 2  # the padded cell gets the grey layer
    html = figures.token_chips_html(["a", "<script>"], [5, 6], pad_from=1)
    assert "&lt;script&gt;" in html and "<script>" not in html and "pad" in html


def test_bar_and_line_charts():
    fig = figures.bar_chart(["x", "y"], [0.25, 0.75], highlight=1, prob=True)
    assert fig.data[0].marker.color[1] != fig.data[0].marker.color[0]
    assert tuple(fig.layout.xaxis.range) == (0, 1)
    ln = figures.line_chart({"loss": [3, 2, 1]}, hlines={"ln V": 4.1})
    assert ln.data[0].y == (3, 2, 1) and ln.layout.shapes[0].y0 == 4.1
    roundtrip(fig)
    roundtrip(ln)


def test_architecture_diagram_has_live_shapes():
    from gptviz import preset

    dot = figures.architecture_dot(preset("default", vocab_size=70), B=2, T=9)
    assert "[B=2 × T=9]" in dot and "V=70" in dot and "2 heads × d_head=8" in dot and "× 2 blocks" in dot
    post = figures.architecture_dot(preset("original-transformer"), 1, 4)
    assert "ln_f" not in post and "sin/cos" in post
    html = figures.architecture_html(preset("default", vocab_size=70), B=2, T=9)
    assert "[B=2 × T=9]" in html and "V=70" in html and "× 2 blocks" in html and html.count("border-top:9px") == 6
    assert "no MLP" in figures.architecture_html(preset("default", vocab_size=70, attn_only=True), 1, 4)


def test_colour_scales_are_explicit_and_point_the_right_way():
    """plotly.js gets the lists as they are: 0 must be white for probabilities and signed values."""
    assert figures.PROB_SCALE[0][1] in ("rgb(247,251,255)", "#f7fbff")  # white-ish at 0
    assert figures.PROB_SCALE[-1][0] == 1.0 and figures.PROB_SCALE[-1][1] in ("rgb(8,48,107)", "#08306b")
    mid = figures.SIGNED_SCALE[len(figures.SIGNED_SCALE) // 2]
    assert mid[0] == 0.5 and mid[1] in ("rgb(247,247,247)", "#f7f7f7")
    # blue < 0 < red
    assert figures.SIGNED_SCALE[0][1] == "rgb(5,48,97)" and figures.SIGNED_SCALE[-1][1] == "rgb(103,0,31)"
    m = matrices.Matrix(np.eye(2), ["a", "b"], ["a", "b"], "r", "c", "probability")
    assert isinstance(figures.heatmap(m).data[0].colorscale, tuple)


def test_gradient_reading_names_the_largest_entry_in_the_chosen_head():
    from gptviz import preset
    from gptviz.present.descriptions import describe

    info = describe("blocks.0.attn.hook_pattern", preset("default"))
    g = np.zeros((1, 2, 3, 3))
    g[0, 1, 2, 0] = -5.0  # head 1
    g[0, 0, 1, 1] = 0.5  # head 0
    toks = ["a", "b", "c"]
    r_all = matrices.gradient_reading(info, g, toks)
    assert "head 1" in r_all and "query pos 2 ('c')" in r_all and "raise" in r_all
    r0 = matrices.gradient_reading(info, g, toks, head=0)
    assert r0.split("strongest is at ")[1].startswith("head 0, query pos 1 ('b'), key 1 ('b') (+0.5)") and "lower" in r0
    assert "Every entry is 0" in matrices.gradient_reading(info, np.zeros((1, 2, 3, 3)), toks)


def test_a_finished_figure_sends_what_plotly_sends_for_the_fixed_margins_figure():
    """``plot`` hands ``st.plotly_chart`` a ``FinishedFigure`` (no second Figure, no second deep copy). Streamlit
    turns any figure into JSON through ``plotly.tools.return_figure_from_figure_or_data`` and ``plotly.io.to_json``:
    on that path the finished figure must give exactly the JSON of Plotly's own figure with fixed margins, arrays
    in base64 included, for a heatmap with hover text, a chart with a legend (left as it is) and a bar chart. The
    figure it came from is left as it was."""
    import plotly.tools

    z = np.arange(12.0).reshape(3, 4) - 5
    hover = np.array([[f"<b>q{i}</b> k{j}" for j in range(4)] for i in range(3)], dtype=object)
    heat = figures.figure([dict(type="heatmap", z=z, hovertext=hover, hoverinfo="text")],
                          dict(title=dict(text="<i>x</i>"), height=300, xaxis=dict(title=dict(text="key"),
                               tickmode="array", tickvals=[0, 1, 2, 3], ticktext=["a", "<b>", "c", "a long label"])))
    legend = figures.line_chart({"one": [1.0, 2.0], "two": [2.0, 1.0]}, x=[0, 1], title="two lines")
    bars = figures.bar_chart(["p", "q"], [0.5, -1.5], title="bars")
    # arrays under a key Plotly leaves as it is (an axis range), nested in a marker, and numpy scalars beside them
    ranged = figures.figure([dict(type="scatter", x=np.arange(4.0), y=np.array([1, 3, 2, 4]), mode="markers",
                                  marker=dict(size=np.array([6.0, 8.0, 10.0, 12.0]), opacity=np.float64(0.5)))],
                            dict(height=300, xaxis=dict(range=np.array([-0.5, 3.5])), yaxis=dict(range=[0, 5])))
    for fig in (heat, legend, bars, ranged):
        before = pio.to_json(fig, validate=False)
        sent = plotly.tools.return_figure_from_figure_or_data(figures.finished(fig), validate_figure=True)
        expected = figures.fixed_margins(fig).to_dict()  # Plotly's own path: a new figure, then its to_dict
        assert json.loads(pio.to_json(sent, validate=False)) == json.loads(pio.to_json(expected, validate=False))
        assert pio.to_json(fig, validate=False) == before
    sent = figures.finished(heat).to_dict()
    assert isinstance(sent["data"][0]["z"], dict) and "bdata" in sent["data"][0]["z"]  # as to_dict sends arrays
    assert sent["layout"]["margin"]["autoexpand"] is False


def test_fixed_margins_make_room_for_every_label_and_colour_bar():
    """Charts are drawn without Plotly's automatic margins (they cost the browser a second drawing): the
    margins worked out here must hold the widest tick label, the axis title and the colour bar."""
    short = ["a", "b", "c"]
    long = ["a very long token label", "b", "c"]
    z = np.arange(9.0).reshape(3, 3) - 4
    lay = lambda rows: dict(title=dict(text="t"), font=dict(size=16), margin=dict(l=10, r=10, t=60, b=10),
                            xaxis=dict(title=dict(text="key"), tickmode="array", tickvals=[0, 1, 2], ticktext=short),
                            yaxis=dict(title=dict(text="query"), tickmode="array", tickvals=[0, 1, 2], ticktext=rows,
                                       tickfont=dict(size=14)))
    small = figures.fixed_margins(figures.figure([dict(type="heatmap", z=z)], lay(short)))
    wide = figures.fixed_margins(figures.figure([dict(type="heatmap", z=z)], lay(long)))
    ms, mw = small.layout.margin, wide.layout.margin
    assert mw.autoexpand is False and small.layout.yaxis.automargin is False and small.layout.xaxis.automargin is False
    assert mw.l >= 23 * 14 * 0.62 + 16 * 1.4  # the long label and the title beside it
    assert ms.l < mw.l and ms.t == 60
    assert ms.r >= 30 + 6 * 14 * 0.62  # a colour bar and its tick labels
    nobar = figures.fixed_margins(figures.figure([dict(type="heatmap", z=z, showscale=False)], lay(short)))
    assert nobar.layout.margin.r < ms.r
    # x labels on top go into the top margin; crowded x labels turn on their side and need their length
    top = lay(short)
    top["xaxis"]["side"] = "top"
    assert figures.fixed_margins(figures.figure([dict(type="heatmap", z=z)], top)).layout.margin.t > 60
    many = [f"token{i}" for i in range(64)]
    crowded = lay(short)
    crowded["xaxis"].update(tickvals=list(range(64)), ticktext=many)
    zz = np.zeros((3, 64))
    turned = figures.fixed_margins(figures.figure([dict(type="heatmap", z=zz)], crowded))
    assert turned.layout.margin.b >= 7 * 16 * 0.62 and turned.layout.xaxis.tickangle == -90
    some = lay(short)
    some["xaxis"].update(tickvals=list(range(12)), ticktext=[f"token{i}" for i in range(12)])
    assert (figures.fixed_margins(figures.figure([dict(type="heatmap", z=np.zeros((3, 12)))], some))
            .layout.xaxis.tickangle == -45)
    # a short chart's colour bar labels only its ends and middle; a tall one is left to Plotly
    short_fig = lay(short)
    short_fig["height"] = 160
    assert figures.fixed_margins(figures.figure([dict(type="heatmap", z=z)], short_fig)).data[0].colorbar.nticks == 3
    assert small.data[0].colorbar.nticks is None
    # a chart with a legend keeps Plotly's own margins
    legend = figures.figure([dict(type="scatter", y=[1, 2], name="a"), dict(type="scatter", y=[2, 1], name="b")],
                             dict(margin=dict(l=10, r=10, t=60, b=10)))
    assert figures.fixed_margins(legend) is legend


def test_head_grid_words_fit_their_cells():
    best = np.array([[0.5, 0.9], [0.2, 0.3]])
    kinds = np.array([["induction", "previous"], ["current", "first"]])
    fig = figures.head_grid(best, kinds, "grid")
    assert fig.data[0].text[0][0] == "induction<br>0.50" and fig.data[0].showscale is False
    wide = figures.head_grid(np.zeros((2, 12)), np.full((2, 12), "induction"), "grid")
    assert wide.data[0].text[0][0] == "ind<br>0.00"  # 12 heads: the short form
    assert 9 <= wide.data[0].textfont.size <= 14
    assert "induction" in wide.data[1].text[0]  # the tooltip keeps the whole word
    # across the page (GPT-2's 12 heads get the page's width on Attention): the short forms at the full 14 px
    across = figures.head_grid(np.zeros((2, 12)), np.full((2, 12), "induction"), "grid", cells_px=700)
    assert across.data[0].text[0][0] == "ind<br>0.00" and across.data[0].textfont.size == 14
    narrow = figures.head_grid(np.zeros((2, 12)), np.full((2, 12), "induction"), "grid", cells_px=190)
    assert narrow.data[0].textfont.size == 9  # 190 px would need 6 px letters: the floor, hence the page-wide grid


def test_grouped_query_keys_are_shown_for_the_query_head_that_reads_them():
    """With 4 query heads and 2 key/value heads, query head 3 reads key/value head 1 (3 // 2): the K view of head 3
    is that kv head's slice of the trace, labelled kv1; the fused projection's columns say q, k and v at their own
    widths (16 + 8 + 8), not in thirds."""
    c = CONFIGS["gqa-swiglu"]
    tr = trace(GPT(c), random_ids(c, B=1, T=5)).numpy()
    toks = [f"t{i}" for i in range(5)]
    k = matrices.step_matrix(tr["blocks.0.attn.hook_k"], tr.info("blocks.0.attn.hook_k"), toks, 0, head=3)
    assert np.array_equal(k.values, tr["blocks.0.attn.hook_k"][0, :, 1].astype(float))
    assert k.cols[0] == "kv1.0"
    rot = matrices.step_matrix(tr["blocks.0.attn.hook_rot_k"], tr.info("blocks.0.attn.hook_rot_k"), toks, 0, head=3)
    rep = matrices.step_matrix(tr["blocks.0.attn.hook_k_rep"], tr.info("blocks.0.attn.hook_k_rep"), toks, 0, head=3)
    assert np.array_equal(rep.values, rot.values) and rep.cols[0] == "h3.0"  # the repeat: the rotated keys again
    qkv = matrices.step_matrix(tr["blocks.0.attn.hook_qkv"], tr.info("blocks.0.attn.hook_qkv"), toks, 0)
    assert qkv.cols[:1] + qkv.cols[15:17] + qkv.cols[23:25] + qkv.cols[-1:] == ["q0", "q15", "k0", "k7", "v0", "v7"]


def test_a_palette_swaps_the_three_scales_and_nothing_else():
    """Written against plotly's own named scales: the colour-blind-safe palette puts PuOr (reversed) where RdBu
    (reversed) was, YlGnBu where Blues was, and keeps viridis; a trace with its own colours keeps them, and the
    figure it came from is unchanged."""
    from plotly.colors import get_colorscale

    m = lambda kind: matrices.Matrix(np.arange(4.0).reshape(2, 2) / 4 - (0.3 if kind == "signed" else 0),
                                     ["a", "b"], ["c", "d"], "query", "key", kind)
    for kind, want in (("signed", "PuOr_r"), ("probability", "YlGnBu"), ("nonnegative", "Viridis")):
        fig = figures.heatmap(m(kind), kind)
        before = json.dumps(fig.to_plotly_json(), default=str)
        spec = figures.recolour(fig.to_plotly_json(), "colour-blind safe")
        heat = [t for t in spec["data"] if t.get("name") != "masked"][0]
        assert [list(map(str, s)) for s in heat["colorscale"]] == [list(map(str, s)) for s in get_colorscale(want)]
        assert json.dumps(fig.to_plotly_json(), default=str) == before
        assert figures.recolour(fig.to_plotly_json(), "default") == fig.to_plotly_json()
    own = {"data": [{"type": "heatmap", "colorscale": [[0, "#dbe8fb"], [1, "#dbe8fb"]]}], "layout": {}}
    assert figures.recolour(own, "colour-blind safe") == own


def test_a_chart_in_words_names_its_largest_values_and_their_labels():
    """For a screen reader: a heatmap's three largest cells (in size, for signed values) with their row and column
    labels, read from a matrix written here; a bar chart's largest bars; a line's ends. A token shown escaped in the
    chart (``<b>``) is read as itself."""
    z = np.array([[0.1, 0.7], [0.05, -0.9]])
    fig = figures.heatmap(matrices.Matrix(z, ["<b>", "dog"], ["x", "y"], "query", "key", "signed"), "scores")
    words = figures.in_words(figures.finished(fig).to_dict())
    assert words.startswith("scores. A 2 × 2 heatmap. Largest values in size: -0.9 at row dog, column y; 0.7 at "
                            "row <b>, column y; 0.1 at row <b>, column x."), words
    bars = figures.in_words(figures.finished(figures.bar_chart(["a", "b", "c"], [0.2, -3.0, 1.0], title="norms"))
                            .to_dict())
    assert bars == "norms. Largest bars: b -3; c 1; a 0.2."
    line = figures.in_words(figures.line_chart({"loss": [4.0, 2.5, 1.25]}, title="Loss").to_dict())
    assert line == "Loss. loss from 4 to 1.25 (lowest 1.25) over 3 points."


def _hover(template: str, point: dict) -> str:
    """Plotly's hover template filled in for one point, by hand: %{x} and %{y} (on axes without tick text: the
    category's name) and %{customdata:.4~g} (d3's 4 significant digits, trailing zeros trimmed: Python's .4g for
    these values), the <extra> box dropped."""
    out = template.replace("%{x}", point["x"]).replace("%{y}", point["y"])
    out = out.replace("<extra></extra>", "")
    return out.replace("%{customdata:.4~g}", f"{point['customdata']:.4g}") if "customdata" in point else out


def test_a_clickable_patterns_cells_hover_as_before_without_a_string_per_cell(tr):
    """Every cell of a clickable pattern is one invisible point (two traces: valued and masked cells), and its hover
    reads exactly as the per-cell sentence did: the row and column, then the value or that the cell is masked. The
    labels are the points' own x and y, escaped (a token is never a link or bold), read on a second pair of axes
    that shows no tick text and matches the heatmap's: the same categories in the same order, so each point sits on
    its cell and a zoom moves both. No string but x and y is written per cell."""
    name = "blocks.0.attn.hook_pattern"
    toks = ["<a href='x'>", "<b>", "&", "the", "mat", "."]
    m = matrices.step_matrix(tr[name], tr.info(name), toks, batch=1, head=1,
                             masked=matrices.masked_cells(tr, 1))  # row 1: two padded positions
    spec = roundtrip(figures.heatmap(m, "pattern", clickable=True))
    z, masked = np.asarray(m.values, dtype=float), np.asarray(m.masked, dtype=bool)
    main = spec["data"][0]
    xs, ys = main["x"], main["y"]
    cells = [t for t in spec["data"] if t.get("name") == "cells"]
    assert [t.get("name") for t in spec["data"][1:]] == ["masked", "cells", "cells"]
    assert masked.any() and (~masked).any()
    assert not any(k in t for t in cells for k in ("text", "hovertext"))  # no string per cell besides x and y
    assert all(t["xaxis"] == "x2" and t["yaxis"] == "y2" for t in cells) and "xaxis" not in main
    lay = spec["layout"]
    for ax, main_ax, labels in (("xaxis2", "x", xs), ("yaxis2", "y", ys)):
        assert lay[ax]["overlaying"] == main_ax and lay[ax]["matches"] == main_ax and lay[ax]["visible"] is False
        assert lay[ax]["type"] == "category" and lay[ax]["categoryorder"] == "array"
        assert lay[ax]["categoryarray"] == labels  # the heatmap's own categories, in its order
        assert "ticktext" not in lay[ax] and "tickvals" not in lay[ax]  # so the hover reads the category's name
    assert "ticktext" in lay["xaxis"]  # (where the heatmap's own axis shows the token alone)
    seen = {}
    for t in cells:
        data = figures.words._array(t["customdata"]) if "customdata" in t else None
        for i, (x, y) in enumerate(zip(t["x"], t["y"])):
            point = {"x": x, "y": y}
            point |= {"customdata": float(data[i])} if data is not None else {}
            seen[(ys.index(y), xs.index(x))] = _hover(t["hovertemplate"], point)
    assert sorted(seen) == [(r, c) for r in range(6) for c in range(6)]  # every cell once
    for (r, c), shown in seen.items():
        want = (f"query {ys[r]}<br>key {xs[c]}<br>" + ("masked: this key is in the future or is padding"
                                                        if masked[r, c] else f"value {z[r, c]:.4g}"))
        assert shown == want, (r, c)
    assert "&lt;a href=" in ys[0] and "<a" not in json.dumps(cells)  # the token is text, never a link
    assert "&lt;b&gt;" in ys[1] and "<b>" not in json.dumps(cells)  # nor bold


def test_x_labels_stand_level_when_they_fit_else_upright_and_every_kth_when_even_that_is_tight():
    """readable_x_labels: never 45°. A label fits level when its width (plus 6 px) is within its column; an upright
    label is one line, about 1.5 × the font size across, so only every k-th is kept when columns are narrower."""
    abcd = figures.figure([dict(type="heatmap", z=np.zeros((2, 4)))],
                          dict(xaxis=dict(tickvals=[0, 1, 2, 3], ticktext=list("abcd"), tickfont=dict(size=14))))
    level = figures.readable_x_labels(abcd, 400)  # 100 px a column for a one-letter label
    assert level.layout.xaxis.tickangle == 0 and list(level.layout.xaxis.ticktext) == list("abcd")
    words = [f"w{i:03d}x" for i in range(20)]  # 5 characters at 14 px: wider than 30 px
    fig = figures.figure([dict(type="heatmap", z=np.zeros((2, 20)))],
                         dict(xaxis=dict(tickvals=list(range(20)), ticktext=words, tickfont=dict(size=14))))
    roomy = figures.readable_x_labels(fig, 600)  # 30 px a column: upright, every label (21 px each)
    assert roomy.layout.xaxis.tickangle == -90 and list(roomy.layout.xaxis.ticktext) == words
    tight = figures.readable_x_labels(fig, 240)  # 12 px a column: every 2nd (24 px apart)
    assert tight.layout.xaxis.tickangle == -90
    assert list(tight.layout.xaxis.ticktext) == words[::2]
    assert list(tight.layout.xaxis.tickvals) == list(range(0, 20, 2))
    tighter = figures.readable_x_labels(fig, 100)  # 5 px a column: every 5th (25 px apart)
    assert list(tighter.layout.xaxis.tickvals) == [0, 5, 10, 15]
    assert fig.layout.xaxis.tickangle is None and list(fig.layout.xaxis.ticktext) == words  # the one given is unchanged


def test_a_heatmap_given_its_plot_width_stands_its_column_labels_as_readable_x_labels_would():
    """The pattern's heatmap is built with its labels already level or upright (``plot_px``), not copied after: the
    same layout as ``readable_x_labels`` on the heatmap built without a width, and the rule's own numbers. 20 tokens of
    5 characters at 14 px (each 21 px across upright) on 600, 240 and 100 px: every label, every 2nd, every 5th."""
    from gptviz.present.matrices import Matrix, token_hover

    words = [f"w{i:03d}x" for i in range(20)]
    z = np.random.default_rng(0).random((20, 20))
    m = Matrix(z, words, words, "query", "key", "probability", hover_rows=token_hover(words),
               hover_cols=token_hover(words))
    plain = figures.heatmap(m, "pattern", clickable=True)
    for px, kept in ((600, words), (240, words[::2]), (100, words[::5])):
        built = figures.heatmap(m, "pattern", clickable=True, plot_px=px)
        assert built.to_plotly_json() == figures.readable_x_labels(plain, px).to_plotly_json()
        assert built.layout.xaxis.tickangle == -90 and list(built.layout.xaxis.ticktext) == kept
        assert list(built.layout.xaxis.tickvals) == [token_hover(words)[words.index(w)] for w in kept]
    assert figures.heatmap(m, "pattern", plot_px=2000).layout.xaxis.tickangle == 0  # 100 px a column: level
    assert plain.layout.xaxis.tickangle is None


def test_labels_turned_before_finishing_get_the_room_they_take():
    """A few labels on a wide chart are not crowded, but turned upright already (readable_x_labels on a narrow plot)
    they hang down their whole width: the bottom margin makes room for it, so the axis title stays below them."""
    from gptviz.present.figures.base import text_px

    labels = ["To␣", "or␣", "be", "that␣", "qu", "on"]

    def bottom(angle):
        lay = dict(xaxis=dict(tickvals=list(range(6)), ticktext=labels, tickfont=dict(size=14), tickangle=angle,
                              title=dict(text="key")))
        return figures.fixed_margins(figures.figure([dict(type="heatmap", z=np.zeros((2, 6)))], lay)).layout.margin.b

    widest = text_px("that␣", 14)
    assert bottom(-90) - bottom(0) == pytest.approx(widest - 14, abs=1)  # its width, not one line's height
    assert bottom(-45) - bottom(0) == pytest.approx((widest - 14) * math.sin(math.pi / 4), abs=1)


def test_a_figure_drawn_plain_is_sent_exactly_as_plotlys_own_figure_of_the_same_dicts_would_be():
    """``figure`` holds its dicts plain (``PlainFigure``), and ``finished`` sends them with the template Plotly adds:
    the JSON Streamlit sends equals that of ``go.Figure(dict(data=..., layout=...), _validate=False)`` finished the
    old way, for every kind of figure, both palettes and both default templates (Plotly's, and Streamlit's once it is
    imported). Asking for an attribute makes it Plotly's figure of the same dicts."""
    import plotly.graph_objects as go
    import plotly.io as pio

    from gptviz.present.figures.base import PlainFigure
    from gptviz.present.matrices import Matrix, token_hover

    toks = ["<b>a", "b&", "c", "d", "e"]
    z = np.random.default_rng(1).random((5, 5))
    mask = np.triu(np.ones((5, 5), bool), 1)
    m = Matrix(np.where(mask, np.nan, z), toks, toks, "query", "key", "probability", mask, "",
               token_hover(toks), token_hover(toks))
    big = Matrix(np.random.default_rng(2).standard_normal((100, 100)), [str(i) for i in range(100)],
                 [str(i) for i in range(100)], "query", "key", "signed")

    def built():
        return {
            "clickable pattern": figures.heatmap(m, "pattern", clickable=True, plot_px=300, highlight_row=2),
            "signed heatmap": figures.heatmap(Matrix(z - 0.5, toks, toks, "position", "dim", "signed"), "resid",
                                              show_values=True),
            "big heatmap": figures.heatmap(big, "big"),
            "head grid": figures.head_grid(np.full((2, 3), 0.5), np.full((2, 3), "induction", dtype=object), "grid"),
            "bars": figures.bar_chart(["x", "<y>"], [0.25, 0.75], highlight=1, prob=True),
            "lines": figures.line_chart({"one": [1.0, 2.0], "two": [2.0, 1.0]}, x=[0, 1], title="two lines"),
            "tiles": figures.tiled_heatmap([[np.eye(3), np.ones((3, 3))]], ["r"], ["p", "q"], title="t"),
            "side by side": figures.side_by_side(m, m, "left", "right"),
            "tokens": figures.token_grid([toks], np.array([[1, 2, 3, 4, 5]]), np.ones((1, 5)), title="ids"),
        }

    def sent(fig, palette):  # as Streamlit writes it, read back (Plotly's storage orders some keys its own way)
        return json.loads(pio.to_json(figures.finished(fig, 500, palette).to_dict(), validate=False))

    before = pio.templates.default
    try:
        for template in ("plotly", "streamlit"):
            if template == "streamlit":
                import streamlit  # noqa: F401 - registers and chooses Streamlit's template
            pio.templates.default = template
            for name, fig in built().items():
                assert isinstance(fig, PlainFigure) and fig.plain() is not None, name
                data, layout = fig.plain()
                plotlys = go.Figure(dict(data=data, layout=layout), _validate=False)
                for palette in ("default", "colour-blind safe"):
                    assert sent(fig, palette) == sent(plotlys, palette), (template, name, palette)
                assert fig.plain() is not None  # finishing did not make Plotly's figure
                assert fig.layout.title.text == plotlys.layout.title.text  # an attribute: now Plotly's own
                assert fig.plain() is None and fig.to_dict() == plotlys.to_dict(), name
                assert sent(fig, "default") == sent(plotlys, "default"), name
    finally:
        pio.templates.default = before


def test_readable_x_labels_keeps_a_plain_figure_plain_and_reads_plotlys_own_figure_too():
    """On a figure held plain, the labels are set on its dicts: the result is plain too and the figure given is not
    made into Plotly's object (that copy is what cost 15 ms). A figure Plotly built itself (``go.Figure``) gets the
    same labels, and a figure without its own tick labels is left as it is."""
    import plotly.graph_objects as go

    from gptviz.present.figures.base import PlainFigure

    words = [f"w{i:03d}x" for i in range(20)]
    data = [dict(type="heatmap", z=np.zeros((2, 20)))]
    layout = dict(xaxis=dict(tickvals=list(range(20)), ticktext=words, tickfont=dict(size=14)))
    plain = figures.figure(data, layout)
    tight = figures.readable_x_labels(plain, 240)
    assert isinstance(tight, PlainFigure) and tight.plain() is not None and plain.plain() is not None
    assert tight.plain()[1]["xaxis"]["ticktext"] == words[::2] and tight.plain()[1]["xaxis"]["tickangle"] == -90
    assert plain.plain()[1]["xaxis"]["ticktext"] == words  # the figure given is unchanged
    plotlys = go.Figure(dict(data=data, layout=layout))
    built = figures.readable_x_labels(plotlys, 240)
    assert not isinstance(built, PlainFigure)
    assert list(built.layout.xaxis.ticktext) == words[::2] and built.layout.xaxis.tickangle == -90
    assert list(built.layout.xaxis.tickvals) == list(range(0, 20, 2))
    assert built.to_dict()["data"] == tight.to_dict()["data"]
    bare = figures.figure(data, dict(xaxis=dict(title=dict(text="key"))))  # no tick labels of its own
    same = figures.readable_x_labels(bare, 240)
    assert same.plain()[1] == bare.plain()[1] and same.layout.xaxis.tickangle is None


def test_the_label_rule_on_plain_dicts_by_hand():
    """``readable_x_layout``, by hand (a label is 0.62 of its font size a character across: ``text_px``): the tick
    font's size comes first, then the layout's, then the default 16; the columns are the figure's when it has more
    than ticks; a label stands level when its width plus 6 px fits its column; an axis without its own labels, or
    with none, is given back as it is."""
    from gptviz.present.figures.finishing import readable_x_layout

    ticks = dict(tickvals=list(range(10)), ticktext=["abcde"] * 10)
    both = dict(font=dict(size=20), xaxis=dict(ticks, tickfont=dict(size=30)))
    # 70 px for 10 columns: 7 px each; an upright label is 1.5 × its size across: every 7th at 30, 5th at 20, 4th at 16
    assert readable_x_layout(both, 70)["xaxis"]["tickvals"] == [0, 7]
    assert readable_x_layout(dict(font=dict(size=20), xaxis=dict(ticks)), 70)["xaxis"]["tickvals"] == [0, 5]
    assert readable_x_layout(dict(xaxis=dict(ticks)), 70)["xaxis"]["tickvals"] == [0, 4, 8]
    out = readable_x_layout(both, 70)
    assert out["xaxis"]["tickangle"] == -90 and out["xaxis"]["ticktext"] == ["abcde"] * 2
    assert out["xaxis"]["tickfont"] == dict(size=30) and out["font"] == dict(size=20)  # the rest kept
    assert both["xaxis"]["tickvals"] == list(range(10)) and "tickangle" not in both["xaxis"]  # the given one unchanged
    short = dict(xaxis=dict(tickvals=list(range(10)), ticktext=["ab"] * 10, tickfont=dict(size=10)))  # 12.4 px wide
    assert readable_x_layout(short, 185)["xaxis"]["tickangle"] == 0  # 18.5 px a column: 12.4 + 6 fits
    assert readable_x_layout(short, 185)["xaxis"]["tickvals"] == list(range(10))
    assert readable_x_layout(short, 183)["xaxis"]["tickangle"] == -90  # 18.3 px: it does not
    assert readable_x_layout(short, 350)["xaxis"]["tickangle"] == 0  # 35 px a column
    thin = readable_x_layout(short, 350, n_cols=35)  # 35 columns under 10 ticks: 10 px each, every 2nd upright
    assert thin["xaxis"]["tickangle"] == -90 and thin["xaxis"]["tickvals"] == [0, 2, 4, 6, 8]
    assert readable_x_layout(short, 350, n_cols=4)["xaxis"]["tickangle"] == 0  # fewer columns than ticks: the ticks
    for bare in (dict(xaxis=dict(title=dict(text="key"))), dict(xaxis=dict(tickvals=[], ticktext=[])),
                 dict(xaxis=dict(tickvals=[0, 1])), dict(xaxis=dict(ticktext=["a", "b"])), dict(font=dict(size=9))):
        assert readable_x_layout(bare, 10) is bare


def test_finishing_a_plain_figure_honours_its_width_and_its_own_template():
    """The plain path reads the plot's width (ten 6-letter labels at 14 px fit 700 px level and turn at 300) and keeps
    a template the figure names itself, as finishing Plotly's own figure of the same dicts does."""
    import plotly.graph_objects as go
    import plotly.io as pio

    layout = dict(xaxis=dict(tickvals=list(range(10)), ticktext=["abcdef"] * 10, tickfont=dict(size=14)),
                  template=dict(layout=dict(paper_bgcolor="black")))
    fig = figures.figure([dict(type="heatmap", z=np.zeros((2, 10)))], layout)
    plotlys = go.Figure(dict(data=fig.plain()[0], layout=fig.plain()[1]), _validate=False)

    def sent(f, *width):
        return json.loads(pio.to_json(figures.finished(f, *width).to_dict(), validate=False))

    assert sent(fig, 300)["layout"]["xaxis"]["tickangle"] == -45
    assert "tickangle" not in sent(fig)["layout"]["xaxis"]  # the default width, 700
    assert sent(fig)["layout"]["template"] == {"layout": {"paper_bgcolor": "black"}}
    assert sent(fig, 300) == sent(plotlys, 300) and sent(fig) == sent(plotlys)


def test_readable_x_labels_counts_the_figures_own_columns():
    """The columns are the first trace's: its x when it has one, else its z's last axis (35 under 10 ticks: 10 px
    each at 350 px, so 12.4-px labels turn upright, every 2nd), and the ticks when it has neither. A single label has
    the whole width (100 px for a 62-px label: level). A level axis keeps the rest of the layout."""
    import plotly.graph_objects as go

    ticks = dict(tickvals=list(range(0, 35, 4))[:10], ticktext=["ab"] * 9, tickfont=dict(size=10))
    for first in (dict(type="heatmap", z=np.zeros((2, 35))), dict(type="scatter", x=list(range(35)), y=[0] * 35)):
        thin = figures.readable_x_labels(figures.figure([first], dict(xaxis=ticks)), 350).plain()[1]["xaxis"]
        assert thin["tickangle"] == -90 and thin["ticktext"] == ["ab"] * 5, first["type"]
        built = figures.readable_x_labels(go.Figure(dict(data=[first], layout=dict(xaxis=ticks))), 350)  # Plotly's
        assert built.layout.xaxis.tickangle == -90 and list(built.layout.xaxis.ticktext) == ["ab"] * 5
    level = figures.readable_x_labels(figures.figure([dict(type="bar", y=[1] * 3)], dict(xaxis=ticks)), 350)
    assert level.plain()[1]["xaxis"]["tickangle"] == 0  # no x or z: the 9 ticks, 38.9 px each
    one = dict(font=dict(size=20), xaxis=dict(tickvals=[0], ticktext=["abcdefghij"], tickfont=dict(size=10)))
    from gptviz.present.figures.finishing import readable_x_layout

    kept = readable_x_layout(one, 100)
    assert kept["xaxis"]["tickangle"] == 0 and kept["font"] == dict(size=20)


def test_click_targets_of_a_heatmap_with_every_cell_masked_are_all_there():
    """No valued cell at all (a row of padding only): the masked cells still get their points, every one, with the
    masked hover (the valued trace is skipped, not the loop ended)."""
    from gptviz.present.figures.heatmaps import MASKED_WORDS, value_cell_points

    xs, ys = ["0: 'a'", "1: 'b'", "2: 'c'"], ["0: 'a'", "1: 'b'"]
    out = value_cell_points(xs, ys, np.zeros((2, 3)), np.ones((2, 3), dtype=bool), "query", "key")
    assert len(out) == 1 and MASKED_WORDS in out[0]["hovertemplate"] and "customdata" not in out[0]
    assert list(zip(out[0]["y"], out[0]["x"])) == [(y, x) for y in ys for x in xs]
