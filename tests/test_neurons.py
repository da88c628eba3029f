"""MLP neurons (gptviz.interp.neurons and the shipped summaries), checked against independent computations: the
activations recomputed with a plain torch forward hook on the MLP's output projection (its input is the neuron
activations, the gated product for SwiGLU), numpy.histogram, and a hand-written W_out[:, n] @ W_U."""
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


def check_summary(top_pos, top_val, hist, lo, hi, acts):
    L, N, D = acts.shape
    k = top_val.shape[-1]
    for l in range(L):
        a = acts[l]  # (N, D)
        want = -np.sort(-a, axis=0)[:k].T  # (D, k) the k largest of each neuron, largest first
        np.testing.assert_allclose(top_val[l], want, atol=1e-4)
        at = np.take_along_axis(a.T, top_pos[l].astype(np.int64), axis=1)  # the activations at the stored positions
        np.testing.assert_allclose(at, top_val[l], atol=1e-4)
        assert all(len(set(p)) == k for p in top_pos[l].tolist())  # k different positions
        for n in range(D):
            counts, edges = np.histogram(a[:, n], bins=hist.shape[-1])
            np.testing.assert_array_equal(hist[l, n], counts)
            assert lo[l, n] == pytest.approx(edges[0], abs=1e-6) and hi[l, n] == pytest.approx(edges[-1], abs=1e-6)


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
    job = neuron_jobs.job_for(("test", "gated"), model, tok, n_tokens=320)
    assert neuron_jobs.job_for(("test", "gated"), model, tok, n_tokens=320) is job  # one computation per model
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
    job = neuron_jobs.NeuronJob(model, tok, 64, slots).start()
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
