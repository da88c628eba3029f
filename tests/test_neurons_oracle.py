"""gptviz.interp.neurons on tiny models and made-up text, checked against oracles written out here: the held-out text
replaced by a string built in the test and read by a toy tokenizer (so every window is known by hand), the
activations caught by a plain torch forward pre-hook on each MLP's c_proj (its input is the neuron activations),
``numpy.histogram`` run neuron by neuron, ``numpy.sort`` for the top activations, and W_out[:, n] through the final
norm's weight and W_U written out in float64."""
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from gptviz import GPT, ModelConfig, preset
from gptviz.interp import neurons
from gptviz.run.trace import trace
from gptviz.text import corpus

TINY = ModelConfig(vocab_size=20, block_size=8, n_layer=2, n_head=2, n_embd=8)  # d_mlp = 32


def tiny_model(cfg=TINY, seed=0):
    torch.manual_seed(seed)
    return GPT(cfg)


@torch.no_grad()
def hooked(model, windows) -> np.ndarray:
    """(L, W*T, d_mlp): what each MLP's c_proj reads, caught by a plain forward pre-hook, all windows in one pass."""
    L = model.config.n_layer
    got = [None] * L
    handles = [model.transformer.h[l].mlp.c_proj.register_forward_pre_hook(
        lambda mod, args, l=l: got.__setitem__(l, args[0].reshape(-1, args[0].shape[-1]).clone())) for l in range(L)]
    try:
        model(torch.as_tensor(np.asarray(windows), dtype=torch.long))
    finally:
        for h in handles:
            h.remove()
    return np.stack([g.numpy() for g in got])


class CharTok:
    """One id per character: 'a'..'z' are 0..25, a space 26, a newline 27, anything else 99."""

    def encode(self, s):
        return [ord(c) - 97 if "a" <= c <= "z" else {" ": 26, "\n": 27}.get(c, 99) for c in s]


class WordTok:
    """One id per word (the text split on spaces): the word's length. A chunk cut inside a word reads that word
    shorter, as a BPE reads the last token of a cut chunk."""

    def encode(self, s):
        return [len(w) for w in s.split(" ") if w]


# ----------------------------------------------------------------------------------------------- which models
def test_a_model_without_mlps_or_with_an_encoder_is_told_apart_from_one_with_neurons():
    """The two sentences a user reads, each for its own kind of model; a config that names neither (no attn_only, no
    n_enc_layer attribute at all) and a decoder-only one have neurons; n_enc_layer = 0 (a fixed random encoder
    output) is already an encoder-decoder."""
    assert neurons.why_no_neurons(SimpleNamespace(attn_only=True)) == (
        "This model has no MLP: it is attention-only, so its blocks have no neurons. Choose a model with MLPs (the "
        "Shakespeare GPT, say) to browse neurons.")
    want = ("The neuron view reads the held-out plays as a decoder-only model would; this model is an "
            "encoder-decoder, whose decoder needs a source to read.")
    assert neurons.why_no_neurons(SimpleNamespace(n_enc_layer=0)) == want
    assert neurons.why_no_neurons(SimpleNamespace(n_enc_layer=2, attn_only=False)) == want
    assert neurons.why_no_neurons(SimpleNamespace()) is None
    assert neurons.why_no_neurons(SimpleNamespace(attn_only=False, n_enc_layer=-1)) is None
    assert neurons.why_no_neurons(TINY) is None


def test_a_mixture_of_experts_is_told_it_has_no_neurons_every_token_passes_through():
    """Word for word, for a config with experts (even one expert) and for a real MoE model's; a dense config and one
    with no n_expert attribute have neurons."""
    want = ("This model's MLPs are mixtures of experts: each hidden unit belongs to one expert, which runs only on the "
            "tokens routed to it, so there is no neuron every token passes through. The Experts page shows where each "
            "token goes and what each expert does.")
    assert neurons.why_no_neurons(SimpleNamespace(n_expert=8)) == want
    assert neurons.why_no_neurons(SimpleNamespace(n_expert=1, attn_only=False, n_enc_layer=-1)) == want
    assert neurons.why_no_neurons(TINY.replace(n_expert=4, n_expert_active=2)) == want
    assert neurons.why_no_neurons(SimpleNamespace(n_expert=0)) is None


@pytest.mark.parametrize("fn", ["collect", "logit_effect", "compute"])
def test_every_entry_point_refuses_an_attention_only_model_with_its_sentence(fn):
    model = GPT(ModelConfig(vocab_size=20, block_size=8, n_layer=1, n_head=2, n_embd=8, attn_only=True))
    call = {"collect": lambda: neurons.collect(model, np.zeros((1, 4), dtype=np.int32)),
            "logit_effect": lambda: neurons.logit_effect(model, 0, 0),
            "compute": lambda: neurons.compute(model, CharTok())}[fn]
    with pytest.raises(ValueError, match=r"^This model has no MLP: it is attention-only"):
        call()


# ------------------------------------------------------------------------------------------- how much to read
def test_the_window_is_the_wanted_length_cut_to_the_block_size_and_at_least_one_token():
    cfg = SimpleNamespace(block_size=8)
    assert [neurons.window_len(cfg, w) for w in (0, -3, 1, 7, 8, 9, 64)] == [1, 1, 1, 7, 8, 8, 8]
    assert neurons.window_len(SimpleNamespace(block_size=1000)) == 64 == neurons.WINDOW
    assert neurons.window_len(SimpleNamespace(block_size=30)) == 30


def test_the_number_of_windows_is_the_tokens_wanted_bounded_by_the_floats_kept():
    """By hand: 2 layers x 4 neurons x 8 tokens = 64 floats a window. 100 tokens make 12 whole windows; 640 floats
    hold exactly 10 windows, 639 only 9; fewer than one window's floats, or fewer tokens than a window, still read
    one. The default bound is MAX_FLOATS = 8,000,000 floats."""
    cfg = SimpleNamespace(n_layer=2, d_mlp=4)
    assert neurons.n_windows_for(cfg, 100, 8, None) == 12
    assert neurons.n_windows_for(cfg, 100, 8, 10_000) == 12
    assert neurons.n_windows_for(cfg, 100, 8, 640) == 10
    assert neurons.n_windows_for(cfg, 100, 8, 639) == 9
    assert neurons.n_windows_for(cfg, 100, 8, 63) == 1
    assert neurons.n_windows_for(cfg, 7, 8, None) == 1
    assert neurons.n_windows_for(cfg, 16, 8, 10_000) == 2
    big = SimpleNamespace(n_layer=1, d_mlp=1000)  # 8,000 floats a window: 8,000,000 of them hold 1000 windows
    assert neurons.MAX_FLOATS == 8_000_000
    assert neurons.n_windows_for(big, 10**7, 8) == 1000
    assert neurons.n_windows_for(big, 10**7, 8, 8_000_000) == 1000


def test_a_window_starts_at_the_next_line_unless_that_line_is_more_than_200_characters_away():
    text = "ab\ncd" + "x" * 300 + "\nq"
    assert neurons._line_start(text, 0) == 3  # the newline at 2: the next line starts at 3
    assert neurons._line_start(text, 2) == 3  # on the newline itself
    assert neurons._line_start(text, 3) == 3  # the next newline is 302 characters away: stay
    assert neurons._line_start(text, 4) == 4
    assert neurons._line_start(text, len(text) - 1) == len(text) - 1  # no newline after: stay
    for gap in (199, 200):  # the newline exactly 200 characters away still counts, 201 does not
        t = "y" * gap + "\nz"
        assert neurons._line_start(t, 0) == gap + 1
    assert neurons._line_start("y" * 201 + "\nz", 0) == 0


def test_a_newline_at_the_very_start_of_the_text_still_moves_the_window_past_it():
    assert neurons._line_start("\nabc", 0) == 1


# ---------------------------------------------------------------------------------------- the held-out windows
@pytest.fixture
def lines_text(monkeypatch):
    """Ten lines of 30 characters, line i holding the letter 'a' + i: 310 characters, line starts at 31 * i."""
    text = "".join(chr(97 + i) * 30 + "\n" for i in range(10))
    monkeypatch.setattr(corpus, "load", lambda split: {"val": text}[split])
    return text


def test_the_windows_start_at_the_line_starts_spread_evenly_over_the_text(lines_text):
    """4 windows over 310 characters: wanted starts 0, 77, 155, 232, each moved to the next line's start (even the
    first): 31, 93, 186, 248 (lines 1, 3, 6, 8); each window is the first 5 characters there, as CharTok reads
    them."""
    got = neurons.corpus_windows(CharTok(), 30, 4, 5)
    assert got.dtype == np.int32 and got.shape == (4, 5)
    assert got.tolist() == [[i] * 5 for i in (1, 3, 6, 8)]
    # a window longer than a line runs on over the newline (27) into the next line
    assert neurons.corpus_windows(CharTok(), 30, 2, 33).tolist() == [[1] * 30 + [27, 2, 2], [6] * 30 + [27, 7, 7]]


def test_ids_past_the_vocabulary_are_left_out_and_zero_windows_or_tokens_mean_one(lines_text):
    """vocab_size 5 keeps only the letters a..e (ids 0..4): the newline (27) is dropped, so a window of 33 runs from
    line 1 into line 2 without it; vocab_size 2 keeps 'b' (id 1), the last id it allows. Asking for 0 windows of 0
    tokens reads 1 of 1."""
    assert neurons.corpus_windows(CharTok(), 5, 1, 33).tolist() == [[1] * 30 + [2] * 3]
    assert neurons.corpus_windows(CharTok(), 30, 0, 0).tolist() == [[1]]
    assert neurons.corpus_windows(CharTok(), 2, 1, 2).tolist() == [[1, 1]]


def test_an_id_equal_to_the_vocabulary_size_is_left_out(monkeypatch):
    """'abc' repeated, vocab_size 2: ids 0 and 1 are read, 2 (the letter 'c', one past the last id) is not."""
    monkeypatch.setattr(corpus, "load", lambda split: "abc" * 20)
    assert neurons.corpus_windows(CharTok(), 2, 1, 6).tolist() == [[0, 1, 0, 1, 0, 1]]
    assert neurons.corpus_windows(CharTok(), 3, 1, 6).tolist() == [[0, 1, 2, 0, 1, 2]]


def test_a_window_never_ends_on_a_token_cut_short_by_the_chunk(monkeypatch):
    """Words of 9 letters then a space: a first chunk of 8 x 2 = 16 characters reads '123456789 123456' as the
    words 9 and 6 (the second cut short). Two ids fill a window of 2 but leave no spare one, so the chunk is doubled
    (32 characters: 9, 9, 9, 1) and the window is the two whole words [9, 9]."""
    monkeypatch.setattr(corpus, "load", lambda split: "123456789 " * 40)
    assert neurons.corpus_windows(WordTok(), 50, 1, 2).tolist() == [[9, 9]]


class CountingTok(CharTok):
    """CharTok that keeps the length of every text it is asked to read."""

    def __init__(self):
        self.asked = []

    def encode(self, s):
        self.asked.append(len(s))
        return super().encode(s)


def test_the_chunk_read_is_doubled_only_while_it_holds_no_spare_token_and_the_text_goes_on(monkeypatch):
    """By hand, for windows of 2 (a first chunk of 16 characters): a text whose first chunk holds 3 readable ids is
    read once; exactly 2 readable ids (no spare one) make it read 32 characters too; a 16-character text is read
    once even with only 2 (its end is reached: nothing more to read), and so is a 6-character text read for a
    window of 6 (a chunk of 48 passes its end)."""
    cases = [("abc" + "#" * 60, 2, [16]), ("ab" + "#" * 20 + "c" + "#" * 40, 2, [16, 32]), ("ab" + "#" * 14, 2, [16]),
             ("abcdef", 6, [6])]
    for text, ctx, asked in cases:
        monkeypatch.setattr(corpus, "load", lambda split, text=text: text)
        tok = CountingTok()
        neurons.corpus_windows(tok, 30, 1, ctx)
        assert tok.asked == asked, text


def sparse_text(readable_at):
    """400 characters the tokenizer cannot read ('#', id 99) but for an 'a' (id 0) at each of ``readable_at``."""
    chars = ["#"] * 400
    for i in readable_at:
        chars[i] = "a"
    return "".join(chars)


def test_the_chunk_is_doubled_up_to_128_tokens_worth_before_giving_up(monkeypatch):
    """A window of 2 tokens: chunks of 16, 32, 64, 128 characters, then 256 (more than 64 x 2, the last try). With
    one readable character in the first 128 and the second at 200, the 256-character chunk fills the window; with
    the second at 300, nothing does and the user reads why."""
    monkeypatch.setattr(corpus, "load", lambda split: sparse_text([5, 200]))
    assert neurons.corpus_windows(CharTok(), 30, 1, 2).tolist() == [[0, 0]]
    monkeypatch.setattr(corpus, "load", lambda split: sparse_text([5, 128]))
    assert neurons.corpus_windows(CharTok(), 30, 1, 2).tolist() == [[0, 0]]
    monkeypatch.setattr(corpus, "load", lambda split: sparse_text([5, 300]))
    with pytest.raises(ValueError) as err:
        neurons.corpus_windows(CharTok(), 30, 1, 2)
    assert str(err.value) == ("this model's tokenizer reads too little of the held-out plays to fill a window of 2 "
                              "tokens")


def test_a_window_of_exactly_the_tokens_left_at_the_end_of_the_text_is_kept(monkeypatch):
    """The text has exactly 6 readable characters and no more: a window of 6 is all of it (no spare token), 7 is
    too many."""
    monkeypatch.setattr(corpus, "load", lambda split: "abcdef")
    assert neurons.corpus_windows(CharTok(), 30, 1, 6).tolist() == [[0, 1, 2, 3, 4, 5]]
    with pytest.raises(ValueError, match="fill a window of 7 tokens"):
        neurons.corpus_windows(CharTok(), 30, 1, 7)


# ------------------------------------------------------------------------------------------------ activations
@pytest.mark.parametrize("rows_per_pass, fractions", [(2, [0.4, 0.8, 1.0]), (5, [1.0]), (0, [0.2, 0.4, 0.6, 0.8, 1.0]),
                                                      (3, [0.6, 1.0])])
def test_collect_is_the_plain_hook_in_every_pass_and_reports_its_progress(rows_per_pass, fractions):
    """5 windows of 6 tokens read in passes of ``rows_per_pass`` (0 means 1): every layer's activations (layer 0
    too) at position w * 6 + t equal a pre-hook on c_proj in one pass of all windows, and ``progress`` hears the
    fraction of windows done after each pass."""
    model = tiny_model()
    windows = np.random.default_rng(1).integers(0, 20, size=(5, 6)).astype(np.int32)
    seen = []
    got = neurons.collect(model, windows, rows_per_pass=rows_per_pass, progress=seen.append)
    assert got.dtype == np.float32 and got.shape == (2, 30, 32)
    np.testing.assert_allclose(got, hooked(model, windows), rtol=0, atol=1e-6)
    assert seen == pytest.approx(fractions)


def test_collect_reads_in_passes_of_eight_windows_by_default():
    model = tiny_model()
    windows = np.random.default_rng(2).integers(0, 20, size=(10, 3)).astype(np.int32)
    seen = []
    got = neurons.collect(model, windows, progress=seen.append)
    assert seen == pytest.approx([0.8, 1.0])
    np.testing.assert_allclose(got, hooked(model, windows), rtol=0, atol=1e-6)
    np.testing.assert_array_equal(neurons.collect(model, windows), got)  # no progress: the same numbers


# ------------------------------------------------------------------------------------------------ histograms
def numpy_rows(a, bins):
    """np.histogram row by row: the counts and the edges numpy itself gives."""
    pairs = [np.histogram(r, bins=bins) for r in a]
    return np.stack([c for c, _ in pairs]), np.stack([e for _, e in pairs])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("bins", [1, 7, 40])
def test_histograms_count_exactly_as_numpy_row_by_row(dtype, bins):
    """Random rows, a constant row (numpy spans value +- 0.5), and a row made of numpy's own edges and the floats
    one step either side of each (where a computed bin is most easily one off), against np.histogram per row."""
    rng = np.random.default_rng(bins)
    a = rng.normal(size=(6, 300)).astype(dtype) * np.array([1, 3, 0.01, 100, 1, 1], dtype=dtype)[:, None]
    a[4] = dtype(2.5)
    e = np.histogram_bin_edges(np.array([-1.3, 2.7], dtype=dtype), bins)
    near = np.concatenate([e, np.nextafter(e, dtype(-np.inf)), np.nextafter(e, dtype(np.inf))])
    near = np.clip(near, e[0], e[-1])
    a[5] = np.resize(near, 300)
    counts, edges = neurons.histograms(a, bins)
    want_c, want_e = numpy_rows(a, bins)
    assert counts.shape == (6, bins) and edges.dtype == dtype
    np.testing.assert_array_equal(counts, want_c)
    np.testing.assert_array_equal(edges, want_e)
    assert edges[4, 0] == 2.0 and edges[4, -1] == 3.0 and counts[4].sum() == 300


def test_histograms_have_forty_bins_by_default_and_the_maximum_falls_in_the_last():
    a = np.array([[0.0, 1.0, 2.0, 4.0], [-1.0, -1.0, -1.0, 3.0]])
    counts, edges = neurons.histograms(a)
    assert neurons.HIST_BINS == 40 and counts.shape == (2, 40) and edges.shape == (2, 41)
    assert counts[0, [0, 10, 20, 39]].tolist() == [1, 1, 1, 1] and counts[0].sum() == 4
    assert counts[1, 0] == 3 and counts[1, 39] == 1


# --------------------------------------------------------------------------------------------------- summaries
def oracle_top(acts_l, k):
    """(D, k) values and positions of each neuron's k largest, largest first, by numpy.argsort (values distinct)."""
    order = np.argsort(-acts_l.T, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(acts_l.T, order, axis=1), order


def check_stats(stats, acts, k, bins):
    L, N, D = acts.shape
    assert stats.top_val.shape == (L, D, k) and stats.top_pos.dtype == np.int32 and stats.top_val.dtype == np.float32
    assert stats.hist.shape == (L, D, bins) and stats.hist.dtype == np.int32
    assert stats.hist_lo.dtype == np.float64 and stats.hist_hi.dtype == np.float64
    for l in range(L):
        val, pos = oracle_top(acts[l], k)
        np.testing.assert_array_equal(stats.top_val[l], val)
        np.testing.assert_array_equal(stats.top_pos[l], pos)
        counts, edges = numpy_rows(acts[l].T, bins)
        np.testing.assert_array_equal(stats.hist[l], counts)
        np.testing.assert_array_equal(stats.hist_lo[l], edges[:, 0])
        np.testing.assert_array_equal(stats.hist_hi[l], edges[:, -1])


def test_summarise_keeps_each_neurons_largest_and_numpys_histogram_in_every_layer():
    rng = np.random.default_rng(3)
    acts = rng.normal(size=(3, 50, 6)).astype(np.float32)
    windows = rng.integers(0, 9, size=(5, 10))
    stats = neurons.summarise(acts, windows, k=4, bins=9, meta={"x": 1})
    check_stats(stats, acts, 4, 9)
    assert stats.windows.dtype == np.int32 and stats.windows.tolist() == windows.tolist()
    assert stats.meta == {"x": 1} and (stats.n_layer, stats.d_mlp, stats.n_tokens) == (3, 6, 50)
    default = neurons.summarise(acts, windows)
    assert default.meta == {} and default.top_val.shape == (3, 6, 20) and default.hist.shape == (3, 6, 40)


def test_summarise_keeps_at_least_one_and_at_most_every_position():
    acts = np.random.default_rng(4).normal(size=(1, 5, 3)).astype(np.float32)
    windows = np.zeros((1, 5))
    check_stats(neurons.summarise(acts, windows, k=9, bins=3), acts, 5, 3)
    check_stats(neurons.summarise(acts, windows, k=0, bins=3), acts, 1, 3)
    check_stats(neurons.summarise(acts, windows, k=5, bins=3), acts, 5, 3)


def test_summarise_bins_a_long_slice_a_few_neurons_at_a_time():
    """700,001 positions: 2,000,000 // 700,001 = 2 neurons binned at a time, so 3 neurons take two steps (the second
    of 1): every neuron's counts and edges are still numpy's (the top values do not depend on the steps)."""
    acts = np.random.default_rng(5).random((1, 700_001, 3), dtype=np.float32) * np.float32([1, 2, 3])
    stats = neurons.summarise(acts, np.zeros((1, 700_001)), k=1, bins=5)
    for n in range(3):
        counts, edges = np.histogram(acts[0, :, n], bins=5)
        assert stats.hist[0, n].tolist() == counts.tolist()
        assert (stats.hist_lo[0, n], stats.hist_hi[0, n]) == (edges[0], edges[-1])
        assert stats.top_val[0, n, 0] == acts[0, :, n].max()


# -------------------------------------------------------------------------------------------------- snippets
def made_stats():
    """3 windows of 6 tokens (token ids 10 * w + t); neuron (1, 0) of a 2-layer, 1-neuron summary peaks at flat
    positions 13 (window 2, t 1), 6 (window 1, t 0) and 5 (window 0, t 5)."""
    windows = np.array([[10 * w + t for t in range(6)] for w in range(3)], dtype=np.int32)
    top_pos = np.array([[[0, 1, 2]], [[13, 6, 5]]], dtype=np.int32)
    top_val = np.array([[[3.0, 2.0, 1.0]], [[9.5, 7.25, -1.0]]], dtype=np.float32)
    hist = np.array([[[1, 2]], [[0, 3]]], dtype=np.int32)
    return neurons.NeuronStats(windows, top_pos, top_val, hist, np.array([[-1.0], [0.5]]), np.array([[2.0], [4.5]]))


def test_snippets_are_the_tokens_of_their_own_window_around_each_peak_largest_first():
    """By hand from the made-up summary: (window, t) of each flat position, ids from t - before to t + after within
    its window only, ``at`` the peak's index in them."""
    s = made_stats()
    assert (s.n_layer, s.d_mlp, s.n_tokens) == (2, 1, 18)
    assert s.snippets(1, 0, before=2, after=1) == [
        {"ids": [20, 21, 22], "at": 1, "value": 9.5, "window": 2, "pos": 1},
        {"ids": [10, 11], "at": 0, "value": 7.25, "window": 1, "pos": 0},
        {"ids": [3, 4, 5], "at": 2, "value": -1.0, "window": 0, "pos": 5}]
    assert s.snippets(1, 0, before=0, after=0)[0] == {"ids": [21], "at": 0, "value": 9.5, "window": 2, "pos": 1}
    # the defaults: 10 before and 3 after, which here is the whole window up to 3 after
    assert neurons.SNIPPET_BEFORE == 10 and neurons.SNIPPET_AFTER == 3
    assert [(x["ids"], x["at"]) for x in s.snippets(1, 0)] == [([20, 21, 22, 23, 24], 1), ([10, 11, 12, 13], 0),
                                                               ([0, 1, 2, 3, 4, 5], 5)]
    assert [x["window"] for x in s.snippets(0, 0)] == [0, 0, 0]


def test_snippets_reach_ten_tokens_back_and_three_on_in_a_long_window():
    windows = np.arange(40, dtype=np.int32)[None]  # one window of 40 tokens, id = position
    z = np.zeros((1, 1, 1))
    s = neurons.NeuronStats(windows, np.array([[[20]]], np.int32), np.ones((1, 1, 1), np.float32), z.astype(np.int32),
                            z[0], z[0])
    assert s.snippets(0, 0) == [{"ids": list(range(10, 24)), "at": 10, "value": 1.0, "window": 0, "pos": 20}]


def test_the_bin_edges_run_from_the_first_to_the_last_edge_in_as_many_steps_as_bins():
    s = made_stats()
    np.testing.assert_allclose(s.edges(0, 0), [-1.0, 0.5, 2.0])
    np.testing.assert_allclose(s.edges(1, 0), [0.5, 2.5, 4.5])


# ------------------------------------------------------------------------------------------------- compute
def test_compute_reads_the_text_summarises_the_hook_and_reports_progress(lines_text):
    """The tiny model (block 8) over the made-up lines with CharTok: 40 tokens make 5 windows of 8 (the default 64
    cut to the block), read in one pass (progress 0.9 of 1, then 1.0 when summarised); the summary is the plain
    hook's activations on those very windows, sorted and binned by numpy."""
    model = tiny_model()
    seen = []
    stats = neurons.compute(model, CharTok(), n_tokens=40, progress=seen.append)
    want_windows = neurons.corpus_windows(CharTok(), 20, 5, 8)
    assert stats.windows.tolist() == want_windows.tolist() == [[i] * 8 for i in (1, 3, 5, 7, 9)]
    assert seen == pytest.approx([0.9, 1.0])
    acts = hooked(model, want_windows)
    L, N, D = acts.shape
    for l in range(L):
        np.testing.assert_allclose(stats.top_val[l], -np.sort(-acts[l].T, axis=1)[:, :20], rtol=0, atol=1e-6)
        at = np.take_along_axis(acts[l].T, stats.top_pos[l].astype(np.int64), axis=1)
        np.testing.assert_allclose(at, stats.top_val[l], rtol=0, atol=1e-6)
    assert stats.hist.sum(axis=-1).tolist() == [[40] * D] * L
    assert {k: v for k, v in stats.meta.items() if k != "seconds"} == {"ctx_len": 8, "n_tokens": 40}
    assert 0 <= stats.meta["seconds"] < 60


def test_compute_scales_the_passes_progress_to_nine_tenths_and_times_itself(lines_text, monkeypatch):
    """72 tokens are 9 windows of 8: two passes (8 windows, then 1), heard as 0.9 x 8/9 = 0.8 and 0.9, then 1.0.
    The seconds are the clock's difference (a stand-in clock: 101.23456 - 100) rounded to 2 digits."""
    clock = iter([100.0, 101.23456])
    monkeypatch.setattr(neurons, "time", SimpleNamespace(perf_counter=lambda: next(clock)))
    seen = []
    stats = neurons.compute(tiny_model(), CharTok(), n_tokens=72, progress=seen.append)
    assert stats.windows.shape == (9, 8)
    assert seen == pytest.approx([0.8, 0.9, 1.0])
    assert stats.meta["seconds"] == 1.23 and isinstance(stats.meta["seconds"], float)


def test_compute_takes_the_window_length_asked_and_bounds_the_floats(lines_text):
    """ctx_len 3 and 27 tokens: 9 windows, but max_floats = 2 layers x 32 neurons x 3 tokens x 4 allows only 4."""
    model = tiny_model()
    stats = neurons.compute(model, CharTok(), n_tokens=27, ctx_len=3, max_floats=2 * 32 * 3 * 4)
    assert stats.windows.shape == (4, 3) and stats.meta["ctx_len"] == 3 and stats.meta["n_tokens"] == 12
    assert neurons.compute(model, CharTok(), n_tokens=27, ctx_len=3).windows.shape == (9, 3)


# --------------------------------------------------------------------------------------- what a neuron writes
def hand_effect(model, l, n):
    """W_out[:, n], centred for a pre-LayerNorm and times ln_f's weight for any pre-norm, against every row of W_U."""
    w = model.transformer.h[l].mlp.c_proj.weight.detach().double()[:, n]
    cfg = model.config
    if cfg.norm_placement == "pre":
        if cfg.norm == "layernorm":
            w = w - w.mean()
        w = w * model.transformer.ln_f.weight.detach().double()
    return (model.lm_head.weight.detach().double() @ w).numpy()


@pytest.mark.parametrize("name", ["pre-layernorm", "pre-rmsnorm", "post-rmsnorm", "post-layernorm"])
def test_the_logit_effect_is_w_out_through_the_final_norm_and_w_u(name):
    """Each norm: the final norm's weight is made far from 1 (and the column's mean far from 0), so leaving out
    the weight or the centring, or centring an RMSNorm, shows."""
    norm, place = name.split("-")[1], name.split("-")[0]
    cfg = ModelConfig(vocab_size=20, block_size=8, n_layer=2, n_head=2, n_embd=8, norm=norm, norm_placement=place,
                      tie_weights=False)
    model = tiny_model(cfg, seed=7)
    with torch.no_grad():
        if "ln_f" in model.transformer:
            model.transformer.ln_f.weight.copy_(torch.linspace(-2, 3, 8))
        model.transformer.h[1].mlp.c_proj.weight.add_(0.7)
    for l, n in [(0, 0), (1, 5), (1, 31)]:
        got = neurons.logit_effect(model, l, n)
        assert got.shape == (20,)
        np.testing.assert_allclose(got, hand_effect(model, l, n), rtol=1e-5, atol=1e-5)


def test_a_neuron_outside_the_model_is_refused_with_the_ranges():
    model = tiny_model()
    msg = "layers 0..1, neurons 0..31"
    for l, n in [(2, 0), (-1, 0), (0, 32), (0, -1)]:
        with pytest.raises(ValueError) as err:
            neurons.logit_effect(model, l, n)
        assert str(err.value) == f"no neuron {n} in layer {l}: {msg}"
    neurons.logit_effect(model, 1, 31)  # the last one is there


def test_promoted_ranks_the_tokens_up_and_down_breaking_ties_by_id():
    """A W_U with repeated rows (40 tokens, most sharing one of three rows) gives effects with many ties: both lists
    follow a stable numpy sort (ties in id order), with the effects at those ids; k is cut to the vocabulary, at
    least one, and 10 by default."""
    cfg = ModelConfig(vocab_size=40, block_size=8, n_layer=1, n_head=2, n_embd=8, tie_weights=False)
    model = tiny_model(cfg, seed=3)
    with torch.no_grad():
        rows = torch.randn(3, 8)
        model.lm_head.weight.copy_(rows[torch.arange(40) % 3])
        model.lm_head.weight[[7, 30]] = torch.randn(2, 8)
    eff = hand_effect(model, 0, 4)
    for k, n_want in [(5, 5), (40, 40), (100, 40), (0, 1), (None, 10)]:
        got = neurons.promoted(model, 0, 4) if k is None else neurons.promoted(model, 0, 4, k=k)
        up, up_v, down, down_v = got
        eff32 = neurons.logit_effect(model, 0, 4)
        assert up == np.argsort(-eff32, kind="stable")[:n_want].tolist()
        assert down == np.argsort(eff32, kind="stable")[:n_want].tolist()
        np.testing.assert_allclose(up_v, eff[up], atol=1e-5)
        np.testing.assert_allclose(down_v, eff[down], atol=1e-5)
        assert all(isinstance(v, float) for v in up_v + down_v)
    up = neurons.promoted(model, 0, 4, k=40)[0]
    tied = [i for i in up if eff32[i] == eff32[up[5]]]
    assert tied == sorted(tied) and len(tied) >= 5  # ties in id order


# ------------------------------------------------------------------------------------------------ most active
class FakeTrace:
    """A trace stand-in: ``config`` and the post activations (B, T, d_mlp) of each layer."""

    def __init__(self, acts):
        self.config = SimpleNamespace(n_layer=len(acts))
        self.acts = {f"blocks.{l}.mlp.hook_post": a for l, a in enumerate(acts)}

    def __getitem__(self, name):
        return self.acts[name]


def test_most_active_takes_the_k_largest_over_every_layer_even_when_one_layer_holds_them_all():
    """Layer 1 holds the 4 largest activations at (b=1, t=2); layer 0 holds equal values (ties keep layer order).
    Another batch row and position give other numbers, so the right row must be read."""
    a0 = np.zeros((2, 3, 5), np.float32)
    a1 = np.zeros((2, 3, 5), np.float32)
    a0[1, 2] = [0.5, 0.1, 0.5, -3.0, 0.2]
    a1[1, 2] = [4.0, 0.5, 6.0, 5.0, 7.0]
    a0[0, 2] = a1[0, 2] = a0[1, 1] = a1[1, 1] = 100.0  # elsewhere: never chosen
    tr = FakeTrace([torch.tensor(a0), torch.tensor(a1)])
    assert neurons.most_active(tr, 1, 2, k=4) == [(1, 4, 7.0), (1, 2, 6.0), (1, 3, 5.0), (1, 0, 4.0)]
    assert neurons.most_active(tr, 1, 2, k=7) == [(1, 4, 7.0), (1, 2, 6.0), (1, 3, 5.0), (1, 0, 4.0), (0, 0, 0.5),
                                                  (0, 2, 0.5), (1, 1, 0.5)]
    got = neurons.most_active(tr, 1, 2)  # 12 by default: more than the 10 neurons there
    assert len(got) == 10 and got[-1] == (0, 3, -3.0)
    assert all(isinstance(v, float) and isinstance(n, int) for _, n, v in got)


def test_most_active_on_a_real_trace_is_the_hooks_ranking():
    model = tiny_model()
    x = torch.randint(0, 20, (2, 8), generator=torch.Generator().manual_seed(4))
    acts = hooked(model, x).reshape(2, 2, 8, 32)
    tr = trace(model, x)
    a = acts[:, 1, 6]
    want = sorted(((l, n, float(a[l, n])) for l in range(2) for n in range(32)), key=lambda r: -r[2])[:12]
    got = neurons.most_active(tr, 1, 6)
    assert [(l, n) for l, n, _ in got] == [(l, n) for l, n, _ in want]
    assert [v for _, _, v in got] == pytest.approx([v for _, _, v in want], abs=1e-6)


def test_a_gated_model_is_summarised_too():
    """A SwiGLU model (preset llama-like, tiny): compute reads it and the summary is its hook's activations."""
    cfg = preset("llama-like", vocab_size=30, block_size=8, n_layer=1, n_embd=16, n_head=2, n_kv_head=2, d_mlp=12,
                 gated_mlp=True, activation="silu")
    model = GPT(cfg)
    windows = np.random.default_rng(6).integers(0, 30, size=(3, 8)).astype(np.int32)
    np.testing.assert_allclose(neurons.collect(model, windows), hooked(model, windows), rtol=0, atol=1e-6)


def test_most_active_breaks_ties_by_layer_then_neuron():
    """40 neurons a layer, two layers, activations 0, 1 or 2 (many ties, more than a small-array sort keeps in order
    by chance): the ranking is Python's stable sort of every (layer, neuron) by its activation, largest first."""
    rng = np.random.default_rng(0)
    acts = [torch.tensor(rng.integers(0, 3, size=(1, 2, 40)).astype(np.float32)) for _ in range(2)]
    tr = FakeTrace(acts)
    everyone = [(l, n, float(acts[l][0, 1, n])) for l in range(2) for n in range(40)]
    for k in (5, 12, 30):
        assert neurons.most_active(tr, 0, 1, k=k) == sorted(everyone, key=lambda r: -r[2])[:k]


def test_a_value_just_below_the_first_inner_edge_is_counted_in_the_first_bin():
    """float32 row from -0.50604063 to 27.807467 in 40 bins: the float just below numpy's edge e_1 gives
    (x - lo) / (hi - lo) * 40 == 1.0 in float32, one bin too far; numpy counts it in bin 0. Rows 0 and 1 (the
    correction must not spill into another row)."""
    lo, hi = np.float32(-0.50604063), np.float32(27.807467)
    e = np.histogram_bin_edges(np.array([lo, hi], np.float32), 40)
    x = np.nextafter(e[1], np.float32(-np.inf))
    assert int(((x - lo) / (hi - lo)) * 40) == 1  # the estimate is one bin off
    row = np.array([lo, hi, x, x, np.float32(3.0)], dtype=np.float32)
    a = np.stack([row, row[::-1] * np.float32(1)])
    counts, edges = neurons.histograms(a, 40)
    want_c, want_e = numpy_rows(a, 40)
    np.testing.assert_array_equal(counts, want_c)
    np.testing.assert_array_equal(edges, want_e)
    assert counts[0, 0] == 3 and counts[1, 0] == 3
