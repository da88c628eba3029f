"""The sparse autoencoder: its maps against the raw weights of its file, the shipped SAE's figures recomputed with
plain torch (a forward hook on the model, not gptviz's edits), its top snippets against a fresh trace, steering
against a hand-applied hook, and the training loop on synthetic sparse data."""
import json
import math

import pytest
import safetensors.torch
import torch
from safetensors import safe_open

from gptviz import load_sae, trace
from gptviz.interp.sae import (
    SparseAutoencoder,
    direction_logits,
    greedy,
    load_snippets,
    read_labels,
    sae_path,
    snippets_path,
    steering_edit,
)
from gptviz.model.checkpoint import load_checkpoint
from gptviz.paths import CHECKPOINTS
from gptviz.text import corpus
from gptviz.training.sae import SAETrainConfig, train_sae

SAE_FILE = sae_path("shakespeare")
T = 128


@pytest.fixture(scope="module")
def shipped():
    torch.set_num_threads(1)
    ck = load_checkpoint(CHECKPOINTS / "shakespeare.safetensors")
    raw = safetensors.torch.load_file(str(SAE_FILE))
    with safe_open(str(SAE_FILE), framework="pt") as fh:
        header = fh.metadata()
    W = {k: v.float() for k, v in raw.items()}
    val = torch.from_numpy(corpus.encoded("val", ck.tokenizer).astype("int64"))
    return ck.model.eval(), ck.tokenizer, W, header, val


def hand_encode(W, k, x):
    """TopK by order statistics: keep a pre-activation if it is positive and at least the k-th largest of its row."""
    pre = (x - W["b_dec"]) @ W["W_enc"] + W["b_enc"]
    kth = pre.kthvalue(pre.shape[-1] - k + 1, dim=-1, keepdim=True).values
    return torch.where((pre >= kth) & (pre > 0), pre, torch.zeros_like(pre))


def hand_decode(W, f):
    return f @ W["W_dec"] + W["b_dec"]


def block_of(model, hook):
    layer = int(hook.split(".")[1])
    return model.transformer.h[layer].hook_resid_pre


class _Stop(Exception):
    pass


def resid_by_hook(model, x, hook):
    """The tensor at the hook, read by a torch forward hook on the model's own module (the layers after it are
    not run)."""
    got = {}

    def grab(m, i, o):
        got["x"] = o.detach()
        raise _Stop

    h = block_of(model, hook).register_forward_hook(grab)
    try:
        with torch.no_grad():
            model(x)
    except _Stop:
        pass
    finally:
        h.remove()
    return got["x"]


def test_the_file_is_small_and_says_what_it_reads(shipped):
    _, _, W, header, _ = shipped
    assert SAE_FILE.stat().st_size < 5_000_000 and snippets_path("shakespeare").stat().st_size < 5_000_000
    assert header["hook"] == "blocks.2.hook_resid_pre" and header["kind"] == "topk"
    n, d = int(header["n_features"]), int(header["d_model"])
    assert (d, n) == (128, 1024) and tuple(W["W_enc"].shape) == (d, n) and tuple(W["W_dec"].shape) == (n, d)
    assert int(header["k"]) <= 32
    assert torch.allclose(W["W_dec"].norm(dim=-1), torch.ones(n), atol=2e-3)  # unit decoder rows (float16)


def test_encode_and_decode_match_the_raw_weights(shipped):
    model, _, W, header, val = shipped
    sae = load_sae(SAE_FILE)
    x = resid_by_hook(model, val[:T][None], header["hook"])[0]  # real vectors of the held-out text
    f = sae.encode(x)
    want = hand_encode(W, int(header["k"]), x)
    assert f.shape == (T, 1024)
    assert torch.allclose(f, want, atol=1e-5)
    assert int((f > 0).sum(-1).max()) <= int(header["k"])
    assert torch.allclose(sae.decode(f), hand_decode(W, want), atol=1e-5)
    g = torch.rand(3, 1024)  # any features, dense ones too
    assert torch.allclose(sae.decode(g), g @ W["W_dec"] + W["b_dec"], atol=1e-4)


def test_the_shipped_figures_hold_on_a_held_out_slice(shipped):
    """FVU, L0, dead share and the spliced loss, with a torch forward hook doing the splice."""
    model, tok, W, header, val = shipped
    k, hook = int(header["k"]), header["hook"]
    figures = json.loads(header["figures"])
    n_win = (val.numel() - 1) // T
    # FVU, L0 and dead features on every fourth window of the held-out split (a quarter of it). A feature dead on
    # the whole split is dead on the quarter, so the quarter's dead share bounds the whole's from above.
    fired = torch.zeros(1024, dtype=torch.bool)
    wins = torch.stack([val[j * T:(j + 1) * T] for j in range(0, n_win, 4)])
    rs = torch.cat([resid_by_hook(model, wins[i:i + 96], hook) for i in range(0, wins.shape[0], 96)]).reshape(-1, 128)
    err = tot = active = 0.0
    mean = rs.mean(0)
    for i in range(0, rs.shape[0], 8192):
        r = rs[i:i + 8192]
        f = hand_encode(W, k, r)
        err += float((hand_decode(W, f) - r).double().pow(2).sum())
        tot += float((r - mean).double().pow(2).sum())
        active += float((f > 0).sum())
        fired |= (f > 0).any(0)
    fvu, l0, dead = err / tot, active / rs.shape[0], float((~fired).float().mean())
    assert fvu < 0.25 and l0 <= 40 and dead <= 0.10, (fvu, l0, dead)
    assert abs(fvu - figures["fvu"]) < 0.002, (fvu, figures["fvu"])
    assert abs(l0 - figures["l0"]) < 0.5 and dead >= figures["dead_fraction"]
    # the loss with the reconstruction spliced in by a forward hook, on 48 windows spread over the split
    picks = torch.linspace(0, n_win - 1, 48).long().tolist()
    x = torch.stack([val[j * T:(j + 1) * T] for j in picks])
    y = torch.stack([val[j * T + 1:(j + 1) * T + 1] for j in picks])
    with torch.no_grad():
        _, clean = model(x, y)
        h = block_of(model, hook).register_forward_hook(lambda m, i, o: hand_decode(W, hand_encode(W, k, o)))
        try:
            _, spliced = model(x, y)
        finally:
            h.remove()
    chars = sum(len(tok.decode(row.tolist())) for row in y)
    per_char = y.numel() / chars
    delta = (float(spliced) - float(clean)) * per_char
    assert 0 < delta <= 0.15, delta
    assert abs(delta - figures["delta_nats_per_char"]) < 0.03
    assert abs(float(clean) * per_char - figures["loss_nats_per_char"]) < 0.1


def test_top_snippets_match_a_fresh_trace(shipped):
    model, _, W, header, val = shipped
    k, hook = int(header["k"]), header["hook"]
    sn, meta = load_snippets(snippets_path("shakespeare"))
    assert meta["hook"] == hook and meta["window"] == T
    live = [i for i in range(1024) if float(sn["peak"][i, 0]) > 0]
    n_win = (val.numel() - 1) // T
    sample = list(range(0, n_win, 47))[:24]  # windows to check that none outside a feature's list beats it
    xs = torch.stack([val[j * T:(j + 1) * T] for j in sample])
    sample_f = hand_encode(W, k, resid_by_hook(model, xs, hook))  # (24, T, 1024)
    checked = 0
    for i in live[:: max(1, len(live) // 5)][:5]:
        peaks = sn["peak"][i]
        assert torch.all(peaks[:-1] >= peaks[1:])  # strongest first
        w, p = (int(v) for v in sn["where"][i, 0])
        ids = val[w * T:(w + 1) * T]
        r = trace(model, ids[None])[hook][0]
        a = hand_encode(W, k, r)[:, i]
        assert math.isclose(float(a[p]), float(peaks[0]), rel_tol=1e-4, abs_tol=1e-4)
        assert math.isclose(float(a.max()), float(peaks[0]), rel_tol=1e-4, abs_tol=1e-4)
        span = [int(t) for t in sn["ids"][i, 0] if t >= 0]
        start = next(s for s in range(T) if ids[s:s + len(span)].tolist() == span)
        assert start <= p < start + len(span)
        assert torch.allclose(sn["acts"][i, 0, :len(span)].float(), a[start:start + len(span)], atol=2e-2)
        listed = {int(v) for v in sn["where"][i, :, 0]}
        others = [n for n, j in enumerate(sample) if j not in listed]
        assert float(sample_f[others, :, i].max()) <= float(peaks[-1]) + 1e-4
        checked += 1
    assert checked >= 3


def test_steering_matches_a_hand_applied_hook(shipped):
    model, tok, W, header, val = shipped
    hook = header["hook"]
    sae = load_sae(SAE_FILE)
    i, alpha = 7, 4.0
    x = val[:40][None]
    d = W["W_dec"][i]

    def add(m, inp, out):
        return out + alpha * d

    with torch.no_grad():
        h = block_of(model, hook).register_forward_hook(add)
        try:
            want = model(x)[0][0, -1]
            ctx, hand = x[0].tolist(), []
            for _ in range(6):
                nxt = int(model(torch.tensor([ctx]))[0][0, -1].argmax())
                ctx.append(nxt)
                hand.append(nxt)
        finally:
            h.remove()
        plain = model(x)[0][0, -1]
    edits = {hook: steering_edit(sae.direction(i), alpha)}
    got = trace(model, x, edits=edits).logits[0, -1]
    assert torch.allclose(got, want, atol=1e-4) and not torch.allclose(got, plain, atol=1e-2)
    assert greedy(model, x[0].tolist(), 6, edits) == hand


def test_promoted_tokens_read_the_direction_through_the_final_norm(shipped):
    model, _, W, _, _ = shipped
    d = W["W_dec"][3]
    want = model.lm_head.weight @ ((d - d.mean()) * model.transformer.ln_f.weight)
    assert torch.allclose(direction_logits(model, d), want, atol=1e-5)


def test_training_lowers_the_reconstruction_error_on_synthetic_sparse_data():
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    true = torch.nn.functional.normalize(torch.randn(48, 16, generator=g), dim=-1)
    codes = torch.rand(2048, 48, generator=g) * (torch.rand(2048, 48, generator=g) < 0.06)
    data = codes @ true + 0.3

    def fvu(sae):
        with torch.no_grad():
            return float((sae.reconstruct(data) - data).pow(2).sum() / (data - data.mean(0)).pow(2).sum())

    cfg = SAETrainConfig(n_features=64, k=4, steps=1, batch_size=256, lr=3e-3, dead_after=2000)
    start = fvu(train_sae(data, "blocks.0.hook_resid_pre", SAETrainConfig(**{**cfg.__dict__, "lr": 1e-9}))[0])
    sae, hist = train_sae(data, "blocks.0.hook_resid_pre", SAETrainConfig(**{**cfg.__dict__, "steps": 200}),
                          progress_every=50)
    end = fvu(sae)
    assert end < 0.5 * start and end < 0.3, (start, end)
    assert hist[-1]["step"] == 200 and int((sae.encode(data) > 0).sum(-1).max()) <= 4


def test_a_file_that_is_not_an_sae_is_refused(tmp_path):
    bad = tmp_path / "x.safetensors"
    safetensors.torch.save_file({"W_enc": torch.zeros(2, 3)}, str(bad), metadata={"format": "nope"})
    with pytest.raises(ValueError, match="not a gptviz SAE"):
        load_sae(bad)
    good = SparseAutoencoder(4, 8, "blocks.0.hook_resid_pre", "topk", 2)
    good.save(tmp_path / "g.safetensors")
    raw = safetensors.torch.load_file(str(tmp_path / "g.safetensors"))
    raw["W_dec"] = torch.zeros(8, 5, dtype=torch.float16)
    with safe_open(str(tmp_path / "g.safetensors"), framework="pt") as fh:
        header = fh.metadata()
    safetensors.torch.save_file(raw, str(tmp_path / "h.safetensors"), metadata=header)
    with pytest.raises(ValueError, match="W_dec has shape"):
        load_sae(tmp_path / "h.safetensors")
    (tmp_path / "l.toml").write_text('[labels]\n3 = "  <b>x</b>  "\n99 = "out of range"\nzz = "no"\n')
    assert read_labels(tmp_path / "l.toml", 8) == {3: "<b>x</b>"}


def test_snippet_html_escapes_every_token():
    from gptviz.present.figures.features import activation_html

    out = activation_html(["<script>alert(1)</script>", "a&b", "\n"], [0.5, 2.0, 0.0], scale=1.0, peak=1)
    assert "<script>" not in out and "&lt;script&gt;" in out and "a&amp;b" in out
    assert out.count("2px solid") == 1 and "rgba(230,97,1,1.00)" in out and "rgba(230,97,1,0.50)" in out
