"""MLP neurons (gptviz.interp.neurons and the shipped summaries), checked against independent computations: the
activations recomputed with a plain torch forward hook on the MLP's output projection (its input is the neuron
activations, the gated product for SwiGLU), numpy.histogram, and a hand-written W_out[:, n] @ W_U. Recomputed
activations may differ from the summarised ones in the last bits (another batch size, another machine): they are
compared within ACT_RTOL, and the counts exactly on the very array the summary binned."""
import threading

import numpy as np
import pytest
import torch

from gptviz import GPT, preset
from gptviz.interp import neuron_jobs, neuron_store, neurons
from gptviz.interp.lens import components, decompose
from gptviz.model.checkpoint import load_checkpoint
from gptviz.paths import CHECKPOINTS
from gptviz.run.slots import Slots
from gptviz.run.trace import trace
from gptviz.text import corpus


@pytest.fixture(scope="module")
def shakespeare():
    return load_checkpoint(CHECKPOINTS / "shakespeare.safetensors")


@torch.no_grad()
def hooked_activations(model, windows: np.ndarray) -> np.ndarray:
    """(L, W*T, d_mlp): what each MLP's c_proj reads, caught by a plain forward pre-hook, 32 windows a pass."""
    L = model.config.n_layer
    got = [[] for _ in range(L)]
    handles = [model.transformer.h[l].mlp.c_proj.register_forward_pre_hook(
        lambda mod, args, l=l: got[l].append(args[0].reshape(-1, args[0].shape[-1]).clone())) for l in range(L)]
    try:
        for i in range(0, len(windows), 32):
            model(torch.tensor(windows[i:i + 32], dtype=torch.long))
    finally:
        for h in handles:
            h.remove()
    return np.stack([torch.cat(g).numpy() for g in got])


# How far two float32 computations of one activation may be apart, as a fraction of the largest activation: a float64
# forward of the Shakespeare GPT puts its float32 activations within 5.4e-6 of the exact values, small and large ones
# alike (the largest activation is 5.1: 1.1e-6 of it), so two float32 runs that add in other orders (a batch of
# another size, another machine's kernels) are at most 2.2e-6 of it apart. ACT_RTOL is more than twice that.
ACT_RTOL = 5e-6


def numpy_bin(x: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """numpy.histogram's bin of every value (bins [e_i, e_i+1), the last one closed), by comparing with the edges."""
    return np.clip(np.searchsorted(edges, x, side="right") - 1, 0, len(edges) - 2)


def check_counts(hist, lo, hi, acts, tol):
    """The stored counts against numpy.histogram of recomputed activations ``acts`` (N, D), which may differ from
    the ones the summary binned by ``tol``: the edges (the neuron's min and max) within ``tol``, and every value
    farther than 2 * tol from each of numpy's edges (an edge moves by at most tol too) counted in its own bin; a
    value nearer an edge may sit on either side of it. No count can flip with the last bits. Returns how many values
    were that near an edge."""
    near = 0
    bins = hist.shape[-1]
    for n in range(acts.shape[1]):
        x = acts[:, n]
        edges = np.histogram_bin_edges(x, bins)  # numpy's own, in float32 like x
        assert abs(lo[n] - edges[0]) <= tol and abs(hi[n] - edges[-1]) <= tol, n
        x64, band = x.astype(np.float64), 2 * tol
        below, above = numpy_bin(x64 - band, edges), numpy_bin(x64 + band, edges)
        sure = below == above
        low = np.bincount(below[sure], minlength=bins)
        spread = np.zeros(bins + 1, dtype=np.int64)  # the values near an edge, on every bin they may be in
        np.add.at(spread, below[~sure], 1)
        np.add.at(spread, above[~sure] + 1, -1)
        high = low + np.cumsum(spread)[:bins]
        assert (low <= hist[n]).all() and (hist[n] <= high).all(), (n, hist[n], low, high)
        assert int(hist[n].sum()) == len(x)
        near += int((~sure).sum())
    return near


def check_summary(top_pos, top_val, hist, lo, hi, acts):
    """The summary against activations recomputed by a plain forward hook, ``acts`` (L, N, d_mlp): the top values
    and the activations at the stored positions within ACT_RTOL of the largest, and the counts as ``check_counts``
    says."""
    L, N, D = acts.shape
    k = top_val.shape[-1]
    near, tol = 0, ACT_RTOL * float(np.abs(acts).max())
    for l in range(L):
        a = acts[l]  # (N, D)
        want = -np.sort(-a, axis=0)[:k].T  # (D, k) the k largest of each neuron, largest first
        np.testing.assert_allclose(top_val[l], want, rtol=0, atol=tol)
        at = np.take_along_axis(a.T, top_pos[l].astype(np.int64), axis=1)  # the activations at the stored positions
        np.testing.assert_allclose(at, top_val[l], rtol=0, atol=tol)
        assert all(len(set(p)) == k for p in top_pos[l].tolist())  # k different positions
        near += check_counts(hist[l], lo[l], hi[l], a, tol)
    assert near <= 0.01 * acts.size, near  # every count is checked value by value, all but a few values (0.3 %)


def test_the_shipped_shakespeare_summary_matches_a_plain_forward_hook(shakespeare):
    with np.load(CHECKPOINTS / "shakespeare.neurons.npz", allow_pickle=False) as f:
        raw = {k: f[k] for k in f.files}
    windows = raw["windows"].astype(np.int64)
    assert windows.shape == (256, 64) and raw["top_val"].shape == (4, 512, 20)
    val = corpus.load("val")
    tok = shakespeare.tokenizer
    for row in windows[::37]:  # the slice is held-out text, read by the model's own tokenizer
        assert tok.decode(row.tolist()) in val
    acts = hooked_activations(shakespeare.model, windows)
    check_summary(raw["top_pos"], raw["top_val"], raw["hist"], raw["hist_lo"], raw["hist_hi"], acts)
    assert neuron_store.load(CHECKPOINTS / "shakespeare.neurons.npz").meta["fingerprint"] == \
        neuron_store.fingerprint(shakespeare.model)  # computed from these very weights


def test_every_shipped_summary_is_small_and_matches_its_checkpoint():
    files = sorted(CHECKPOINTS.glob("*.neurons.npz"))
    assert {p.name.split(".")[0] for p in files} >= {"shakespeare"}
    for p in files:
        assert p.stat().st_size < 3_000_000, p.name
        ck = load_checkpoint(CHECKPOINTS / f"{p.name.split('.')[0]}.safetensors")
        stats = neuron_store.load(p)
        assert stats.meta["fingerprint"] == neuron_store.fingerprint(ck.model), f"{p.name} is stale: rerun the command"
        assert (stats.n_layer, stats.d_mlp) == (ck.model.config.n_layer, ck.model.config.d_mlp)
    assert not (CHECKPOINTS / "induction-heads.neurons.npz").exists()  # attention-only: no neurons


def hand_effect(model, l, n):
    W_out = model.transformer.h[l].mlp.c_proj.weight.detach().double()  # (C, d_mlp)
    w = W_out[:, n]
    if model.config.norm_placement == "pre":
        if model.config.norm == "layernorm":
            w = w - w.mean()
        w = w * model.transformer.ln_f.weight.detach().double()
    return (model.lm_head.weight.detach().double() @ w).numpy()  # W_U rows are tokens


@pytest.mark.parametrize("name", ["shakespeare", "llama-like", "original-transformer"])
def test_promoted_and_suppressed_tokens_are_w_out_times_w_u(shakespeare, name):
    model = shakespeare.model if name == "shakespeare" else GPT(preset(name))
    for l, n in [(0, 3), (model.config.n_layer - 1, model.config.d_mlp - 1)]:
        want = hand_effect(model, l, n)
        np.testing.assert_allclose(neurons.logit_effect(model, l, n), want, atol=1e-5)
        up, up_v, down, down_v = neurons.promoted(model, l, n, k=8)
        assert up == np.argsort(-want)[:8].tolist() and down == np.argsort(want)[:8].tolist()
        np.testing.assert_allclose(up_v, want[up], atol=1e-5)
        np.testing.assert_allclose(down_v, want[down], atol=1e-5)


def test_the_neurons_add_up_to_the_mlp_share_of_direct_logit_attribution(shakespeare):
    """Consistent with lens.decompose: Σ_n a_n · effect_n[v] / σ, plus the output bias read the same way, is the MLP's
    own share of the logit of v."""
    model, tok = shakespeare.model, shakespeare.tokenizer
    x = torch.tensor([tok.encode(corpus.HELD_OUT_LINE)])
    tr = trace(model, x)
    v = 57
    _, contrib, _ = decompose(tr, model, v)
    labels = [c.label for c in components(model.config)]
    l, t = 2, x.shape[1] - 1
    a = tr[f"blocks.{l}.mlp.hook_post"][0, t].double().numpy()
    effects = np.stack([hand_effect(model, l, n)[v] for n in range(model.config.d_mlp)])
    b = model.transformer.h[l].mlp.c_proj.bias.detach().double()
    gamma = model.transformer.ln_f.weight.detach().double()
    b_eff = float(model.lm_head.weight[v].detach().double() @ ((b - b.mean()) * gamma))
    sigma = float(tr["ln_final.hook_scale"][0, t, 0])
    assert (a @ effects + b_eff) / sigma == pytest.approx(float(contrib[labels.index(f"L{l} MLP"), 0, t]), abs=1e-4)


def gated_model():
    tok = corpus.tokenizer()
    cfg = preset("llama-like", vocab_size=tok.vocab_size, gated_mlp=True, activation="silu", seed=3)
    return GPT(cfg), tok


def test_a_gated_mlp_neuron_is_the_product_and_the_summary_matches_the_hook():
    model, tok = gated_model()
    stats = neurons.compute(model, tok, n_tokens=256)
    acts = hooked_activations(model, stats.windows.astype(np.int64))
    check_summary(stats.top_pos, stats.top_val, stats.hist, stats.hist_lo, stats.hist_hi, acts)
    mlp = model.transformer.h[0].mlp
    with torch.no_grad():  # the product act(x W_gate) * (x W_in), by hand, at the top snippet of neuron 0
        x = torch.tensor(stats.windows[:1].astype(np.int64))
        seen = {}
        h = model.transformer.h[0].ln_2.register_forward_hook(lambda m, i, o: seen.setdefault("x", o))
        model(x)
        h.remove()
        prod = torch.nn.functional.silu(mlp.c_gate(seen["x"])) * mlp.c_fc(seen["x"])
    np.testing.assert_allclose(prod[0].numpy(), acts[0, : x.shape[1]], atol=1e-5)


def test_the_background_job_finishes_and_equals_the_synchronous_computation():
    model, tok = gated_model()
    job = neuron_jobs.job_for(("test", "gated"), lambda: model, tok, n_tokens=320, params=model.config.num_params())
    assert neuron_jobs.job_for(("test", "gated"), lambda: model, tok, n_tokens=320, params=1) is job  # one per model
    assert job.wait(120) and job.state == "done", job.error
    sync = neurons.compute(model, tok, n_tokens=320)
    for a in neuron_store.ARRAYS:
        np.testing.assert_array_equal(getattr(job.result, a), getattr(sync, a))
    assert job.progress == 1.0


def test_a_big_job_waits_for_the_shared_slot():
    model, tok = gated_model()
    slots = Slots(1, "test")
    held, release = threading.Event(), threading.Event()

    def holder():
        with slots.hold():
            held.set()
            release.wait(30)

    threading.Thread(target=holder, daemon=True).start()
    held.wait(10)
    job = neuron_jobs.NeuronJob(lambda: model, tok, 64, slots).start()
    for _ in range(100):
        if job.state == "waiting":
            break
        job.wait(0.05)
    assert job.state == "waiting" and job.progress == 0.0
    release.set()
    assert job.wait(60) and job.state == "done"


def test_models_without_neurons_say_why():
    assert "no MLP" in neurons.why_no_neurons(preset("default", attn_only=True))
    assert "encoder-decoder" in neurons.why_no_neurons(preset("decoder-cross-attention"))
    with pytest.raises(ValueError, match="no MLP"):
        neurons.compute(GPT(preset("default", attn_only=True)), corpus.tokenizer())


def test_snippets_escape_every_token():
    from html.parser import HTMLParser

    from gptviz.present import figures

    tags = []

    class Tags(HTMLParser):
        def handle_starttag(self, tag, attrs):
            tags.append(tag)

    hostile = "<td><svg/onload=alert(1)>"
    Tags().feed(figures.snippets_html([{"tokens": ["a", hostile, '"><b>'], "at": 1, "value": 2.0,
                                        "where": '"><script>x</script>'}]))
    assert set(tags) <= {"div", "span"}, tags


def small_model():
    tok = corpus.tokenizer()
    return GPT(preset("default", vocab_size=tok.vocab_size, seed=5)), tok


def test_the_histogram_counts_are_numpys_on_the_very_float32_array_it_binned():
    """Exact, with nothing left to the last bits: the summary of the activations ``collect`` returns (read in
    passes of 3 windows), binned again by numpy.histogram from that same float32 array, gives the same counts and
    the same first and last edges; the array itself is a plain forward hook's within ACT_RTOL. Then by hand:
    values exactly on every float32 edge and one float32 step either side of it, the maximum (the last bin is
    closed), and a neuron that never changes (numpy's bins span its value ± 0.5)."""
    model, tok = small_model()
    windows = neurons.corpus_windows(tok, model.config.vocab_size, 10, 16)
    acts = neurons.collect(model, windows, rows_per_pass=3)
    hooked = hooked_activations(model, windows.astype(np.int64))
    np.testing.assert_allclose(acts, hooked, rtol=0, atol=ACT_RTOL * float(np.abs(hooked).max()))

    e = np.histogram_bin_edges(np.float32([-1.5, 2.0]), neurons.HIST_BINS)  # numpy's float32 edges for this range
    on_edges = np.concatenate([e, np.nextafter(e, np.float32(-np.inf)), np.nextafter(e, np.float32(np.inf))])
    on_edges = np.clip(on_edges, e[0], e[-1])
    assert on_edges.dtype == np.float32 and (np.histogram_bin_edges(on_edges, neurons.HIST_BINS) == e).all()
    rng = np.random.default_rng(0)
    made = np.stack([on_edges, np.full_like(on_edges, 0.25), rng.normal(size=on_edges.size).astype(np.float32)], 1)
    for a in (acts, made[None]):
        stats = neurons.summarise(a, windows)
        for l in range(a.shape[0]):
            for n in range(a.shape[2]):
                counts, edges = np.histogram(a[l][:, n], bins=neurons.HIST_BINS)
                np.testing.assert_array_equal(stats.hist[l, n], counts)
                assert (stats.hist_lo[l, n], stats.hist_hi[l, n]) == (edges[0], edges[-1])
    # by hand: each edge and its two neighbours in the bins [e_i, e_i+1), the last bin closed (the clipped ends twice)
    assert stats.hist[0, 0].tolist() == [4] + [3] * (neurons.HIST_BINS - 2) + [5]
    assert stats.hist[0, 1, neurons.HIST_BINS // 2] == made.shape[0] and stats.hist_lo[0, 1] == np.float32(-0.25)


def test_each_snippet_is_the_held_out_text_around_its_own_top_activation():
    """Over 20 windows of 16 tokens (read in three passes of ROWS_PER_PASS = 8), each snippet of a neuron is one of
    its largest activations by a plain forward hook, at absolute position w * 16 + t of the slice, and shows the
    tokens of the slice around that position (10 before, 3 after, never past its own window): the held-out play's
    text at that place."""
    model, tok = small_model()
    stats = neurons.compute(model, tok, n_tokens=320, ctx_len=16)
    W, T = stats.windows.shape
    assert (W, T) == (20, 16) and neurons.ROWS_PER_PASS < W
    acts = hooked_activations(model, stats.windows.astype(np.int64))  # (L, W*T, d_mlp)
    flat = stats.windows.reshape(-1)  # the slice as one stream: token t of window w is at w * T + t
    text = corpus.load("val")
    where = [text.find(tok.decode(w.tolist())) for w in stats.windows]  # each window is held-out text
    assert min(where) >= 0
    tol = ACT_RTOL * float(np.abs(acts).max())
    seen = set()
    for l, n in [(0, 0), (0, 17), (1, 40), (1, model.config.d_mlp - 1)]:
        a = acts[l, :, n]
        snips = stats.snippets(l, n)
        assert [s["value"] for s in snips] == pytest.approx(np.sort(a)[::-1][:len(snips)], abs=tol)
        for s in snips:
            w, t = s["window"], s["pos"]
            p = w * T + t
            assert a[p] == pytest.approx(s["value"], abs=tol)  # the activation at that absolute position
            lo, hi = max(w * T, p - neurons.SNIPPET_BEFORE), min((w + 1) * T, p + neurons.SNIPPET_AFTER + 1)
            assert s["ids"] == flat[lo:hi].tolist() and s["at"] == p - lo
            before = tok.decode(flat[w * T:lo].tolist())
            shown = tok.decode(s["ids"])
            assert text[where[w] + len(before):where[w] + len(before) + len(shown)] == shown
            seen.add(w)
    assert len(seen) > 3 and max(seen) >= 2 * neurons.ROWS_PER_PASS  # from many windows, the last pass too


def test_the_most_active_neurons_are_every_layers_largest_first_in_any_batch_row():
    """``most_active`` against a ranking by hand of every (layer, neuron) activation a plain forward hook sees at
    that position: batch rows 1 and 2 as well as 0, a full trace and a slim one (hook_post worked out when read)."""
    model, _ = small_model()
    x = torch.randint(0, model.config.vocab_size, (3, 12), generator=torch.Generator().manual_seed(2))
    acts = hooked_activations(model, x.numpy()).reshape(model.config.n_layer, 3, 12, -1)
    for slim in (False, True):
        tr = trace(model, x, slim=slim)
        for b, pos in [(1, 4), (2, 11), (0, 0)]:
            a = acts[:, b, pos]  # (L, d_mlp)
            everyone = [(l, n, float(a[l, n])) for l in range(a.shape[0]) for n in range(a.shape[1])]
            want = sorted(everyone, key=lambda r: r[2], reverse=True)[:9]
            got = neurons.most_active(tr, b, pos, k=9)
            assert [(l, n) for l, n, _ in got] == [(l, n) for l, n, _ in want], (slim, b, pos)
            assert [v for _, _, v in got] == pytest.approx([v for _, _, v in want], abs=1e-5)
            assert len({l for l, _, _ in got}) > 1 or slim  # the ranking mixes the layers
