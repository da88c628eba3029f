"""Long texts (issue 21): a 512-token line for a big model's shape, the slim trace (score steps worked out when read,
bit for bit the full trace's), and heatmaps of 512 × 512 that stay light and readable.

Most checks use a tiny model with block_size 512; one builds GPT-2 small's real shape (124M) and traces 512 tokens.
"""
import math
import resource
import time

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from apphelp import array as arr

from gptviz import GPT, ModelConfig, get_tokenizer, trace
from gptviz.config import MAX_PARAMS, MAX_TRACE_BYTES, preset
from gptviz.interp.head_detector import head_scores, target_cells
from gptviz.present import figures
from gptviz.present.figures.heatmaps import BIG_CELLS, TILE_CELLS
from gptviz.present.matrices import step_matrix, top_predictions
from gptviz.present.page_context import BIG_MODEL_T, big_model_t, defaults, resolve, slim_view, trace_for_view
from gptviz.present.report_store import Store
from gptviz.present.url_params import MAX_LINE_CHARS
from gptviz.run import edits as edit_specs
from gptviz.run.byte_cache import nbytes
from gptviz.run.step_meta import step_meta

T = 512
TINY = ModelConfig(vocab_size=64, block_size=T, n_layer=2, n_head=2, n_embd=16)
T_EXACT = 96  # the exactness checks run at every kind of input on a shorter text (nothing in them depends on T) ...
TINY_GQA = ModelConfig(vocab_size=64, block_size=T, n_layer=2, n_head=6, n_kv_head=2, n_embd=24, norm="rmsnorm",
                       pos_encoding="rope", gated_mlp=True, activation="silu", bias=False, tie_weights=False)
SCORE_STEPS = ("scores_raw", "scores_scaled", "attn_scores")


def ids(cfg, B=1, seed=0, n=T):
    return torch.randint(0, cfg.vocab_size, (B, n), generator=torch.Generator().manual_seed(seed))


def next_tokens(idx):
    y = torch.full_like(idx, -100)
    y[:, :-1] = idx[:, 1:]
    return y


def as_t(v):
    return torch.as_tensor(np.asarray(v))


# ---------------------------------------------------------------- the length cap and the limits, nothing allocated
SMOL = ModelConfig(vocab_size=49152, block_size=8192, n_layer=30, n_head=9, n_kv_head=3, n_embd=576, d_mlp=1536,
                   norm="rmsnorm", pos_encoding="rope", bias=False, tie_weights=True, rope_base=100000.0,
                   activation="silu", gated_mlp=True, ln_eps=1e-5)  # SmolLM2-135M's shape


def test_the_cap_is_512_where_block_size_allows_and_the_limit_still_holds():
    gpt2 = preset("gpt2-small")
    assert BIG_MODEL_T == 512 and big_model_t(gpt2) == 512 and big_model_t(SMOL) == 512
    assert SMOL.num_params() == 134_515_008
    assert big_model_t(preset("gpt2-small", block_size=300)) == 300  # never past the model's context
    SMOL.check_limits(1, 512, slim=True)  # a slim trace of one 512-token line fits the trace limit ...
    with pytest.raises(ValueError, match="over the limit of 1.5 GB"):
        SMOL.check_limits(1, 512)  # ... the full trace (four T × T tensors a layer) would not
    with pytest.raises(ValueError, match="GB"):
        gpt2.check_limits(16, 512, slim=True)  # 16 lines of 512 tokens: still refused before anything is built


def test_a_qwen_sized_shape_is_admitted_without_allocating_it():
    """Qwen2.5-0.5B's shape (494M parameters): under the parameter limit, and the cap picks a T whose slim trace fits;
    worked out from the config alone (the process grows by far less than its 1.9 GB of weights)."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    qwen = ModelConfig(vocab_size=151936, block_size=32768, n_layer=24, n_head=14, n_kv_head=2, n_embd=896,
                       d_mlp=4864, norm="rmsnorm", pos_encoding="rope", bias=False, qkv_bias=True,
                       attn_proj_bias=False, tie_weights=True, rope_base=1_000_000.0, activation="silu",
                       gated_mlp=True)
    assert qwen.num_params() == 494_032_768 <= MAX_PARAMS
    qwen.check_limits(1, 1)
    t = big_model_t(qwen)
    assert 64 <= t < 512 and t in (64, 128, 256)
    assert qwen.trace_bytes(1, t, slim=slim_view(qwen, 1, t)) <= MAX_TRACE_BYTES
    assert qwen.trace_bytes(1, 2 * t, slim=True) > MAX_TRACE_BYTES or \
        qwen.forward_flops(1, 2 * t) > 160e9  # the largest such T (memory, or the arithmetic of one text)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200_000  # KiB: no weights were built


PARAGRAPH = " ".join([
    "Interpretability researchers often examine how individual attention heads distribute their weights across "
    "long contexts, particularly when a model must retrieve information introduced several hundred tokens earlier.",
    "Induction heads, previous-token heads and duplicate-token detectors each leave characteristic signatures in "
    "these patterns, which become clearer as the surrounding paragraph grows longer and more varied.",
    "Consequently, experiments typically feed complete paragraphs, sometimes entire documents, rather than isolated "
    "sentences, and compare the resulting heatmaps layer by layer.",
] * 6)


def test_a_512_token_line_is_read_whole_for_gpt2_small():
    """resolve() (settings → the page's batch) keeps 512 GPT-2 tokens of one line for the 124M shape (it used to cut
    at 64), and cuts a longer line there; nothing is built."""
    s = defaults()
    s.update(preset="gpt2-small", tokenizer="gpt2", text="a cat sat. " * 300)
    s.update({k: v for k, v in preset("gpt2-small").to_dict().items() if k != "vocab_size"})
    s.update(d_head=0, d_mlp=0, qkv_bias="same as bias", n_kv_head=0)
    ctx, notes = resolve(s, Store())
    assert ctx.cfg.num_params() == 124_439_808
    assert ctx.batch.x.shape == (1, 512)
    assert not [n for n in notes if n.level == "error"]
    assert any("cut to 512 tokens" in n.text for n in notes)
    # a researcher's paragraph: 512 tokens of academic English take over 3,000 characters, and are read whole
    s["text"] = PARAGRAPH
    assert 3072 < len(PARAGRAPH) <= MAX_LINE_CHARS
    ctx, notes = resolve(s, Store())
    assert ctx.batch.x.shape == (1, 512) and not [n for n in notes if "characters" in n.text]
    assert ctx.batch.x[0].tolist() == get_tokenizer("gpt2").encode(PARAGRAPH)[:512]
    # 16 such lines would need about 16 × 0.7 GB: refused before anything is built, the first line shown instead
    s["text"] = "\n".join(["a cat sat. " * 300] * 16)
    ctx, notes = resolve(s, Store())
    assert any(n.level == "error" and "too long" in n.text for n in notes)
    assert ctx.batch.x.shape == (1, 512)


# ---------------------------------------------------------------- on-demand recording: exactly the full trace
@pytest.mark.parametrize("cfg", [TINY, TINY_GQA], ids=["gpt2-like", "gqa-rope"])
@pytest.mark.parametrize("kw", [{}, {"padded": True}, {"grads": True, "padded": True}, {"edit": True},
                                {"grads": True, "head_off": True}, {"grads": True, "long": True}],
                         ids=["plain", "padded", "grads-padded", "edited", "grads-head-off", "grads-512"])
def test_slim_trace_is_the_full_trace_bit_for_bit(cfg, kw):
    """... and once at T = 512, with gradients."""
    model = GPT(cfg)
    length = T if kw.get("long") else T_EXACT
    idx = ids(cfg, B=1 if kw.get("long") else 2, n=length)
    args = {}
    if kw.get("padded"):
        mask = torch.ones_like(idx)
        mask[1, length // 2:] = 0
        args.update(attention_mask=mask, targets=next_tokens(idx))  # with targets: hook_probs too
    if kw.get("grads"):
        args.update(targets=next_tokens(idx), grads=True)
    if kw.get("edit"):
        args["edits"] = {"blocks.1.attn.hook_scores_raw": lambda t: t * 2, "blocks.0.mlp.hook_post": lambda t: t + 1}
    if kw.get("head_off"):  # as the app switches a head off: its gradients pass through the edit, so they are kept
        def head_off(p):
            p[:, 1] = 0
            return p
        args["edits"] = {"blocks.1.attn.hook_pattern": head_off}
    full, slim = trace(model, idx, **args), trace(model, idx, slim=True, **args)
    assert slim.slim and not full.slim
    saved = nbytes(full) - nbytes(slim)  # three steps a layer, and with gradients two of their gradients
    assert list(slim) == list(full)
    for tr_f, tr_s in ((full, slim), (full.numpy().freeze(), slim.numpy().freeze())):
        for n in tr_f:
            a, b = as_t(tr_f[n]), as_t(tr_s[n])
            assert a.dtype == b.dtype and torch.equal(a, b), n
            assert tr_f.shape(n) == tr_s.shape(n)
            if kw.get("grads"):
                ga, gb = tr_f.grad(n), tr_s.grad(n)
                assert (ga is None) == (gb is None), n
                assert ga is None or torch.equal(as_t(ga), as_t(gb)), f"∂loss/∂{n}"
    # what is left out: three (B, H, T, T) tensors a layer, except in an edited layer, which keeps its scores
    kept = {n for n, v in slim._acts.items() if isinstance(v, (torch.Tensor, np.ndarray))}
    for layer in range(cfg.n_layer):
        for s in SCORE_STEPS:
            n = f"blocks.{layer}.attn.hook_{s}"
            assert (n in kept) == (kw.get("edit", False) and layer == 1), n
    # per layer: three forward steps, and with gradients all four of their gradients (two in a layer with a head off)
    per_layer = [0 if kw.get("edit") and layer == 1 else 3 + (0 if not kw.get("grads") else
                                                              2 if kw.get("head_off") and layer == 1 else 4)
                 for layer in range(cfg.n_layer)]
    assert saved >= 0.95 * sum(per_layer) * idx.shape[0] * cfg.n_head * length * length * 4


TINY_WINDOW = TINY_GQA.replace(sliding_window=5, sliding_layers=(1,))  # layer 0 causal, layer 1 a band of 5


@pytest.mark.parametrize("cfg", [TINY_WINDOW, TINY.replace(sliding_window=1)], ids=["window-on-layer-1", "window-1"])
@pytest.mark.parametrize("kw", [{}, {"pad": "left"}, {"grads": True, "pad": "right"}, {"grads": True}],
                         ids=["plain", "left-padded", "grads-right-padded", "grads"])
def test_a_slim_trace_with_a_sliding_window_is_the_full_trace_bit_for_bit(cfg, kw):
    """Each layer's masked scores and their gradients, worked out when read with that layer's own mask (the band on
    a windowed layer, the causal triangle on the other), equal the full trace's; right padding longer than the
    window leaves query rows with no key in the windowed layer only."""
    model = GPT(cfg)
    idx = ids(cfg, B=2, n=T_EXACT)
    args = {}
    if kw.get("pad"):
        mask = torch.ones_like(idx)
        if kw["pad"] == "left":
            mask[1, : T_EXACT // 3] = 0
        else:
            mask[1, T_EXACT // 2:] = 0
        args.update(attention_mask=mask, targets=next_tokens(idx))
    if kw.get("grads"):
        args.update(targets=next_tokens(idx), grads=True)
    full, slim = trace(model, idx, **args), trace(model, idx, slim=True, **args)
    assert slim.slim and list(slim) == list(full)
    for n in full:
        a, b = as_t(full[n]), as_t(slim[n])
        assert a.dtype == b.dtype and torch.equal(a, b), n
        if kw.get("grads"):
            ga, gb = full.grad(n), slim.grad(n)
            assert (ga is None) == (gb is None), n
            assert ga is None or torch.equal(as_t(ga), as_t(gb)), f"∂loss/∂{n}"
    for layer in range(cfg.n_layer):  # the layers' masks differ where the window does
        scores = as_t(slim[f"blocks.{layer}.attn.hook_attn_scores"])
        assert torch.isneginf(scores[0, 0, T_EXACT - 1, 0]) == (cfg.layer_window(layer) is not None), layer


def test_slim_scores_against_plain_pytorch():
    """Layer 0's raw scores and pattern of a slim trace against an independent computation from the weights."""
    model = GPT(TINY)
    idx = ids(TINY)
    tr = trace(model, idx, slim=True)
    w = model.transformer
    x = w.wte.weight[idx] + w.wpe.weight[:T]
    h = F.layer_norm(x, (TINY.n_embd,), model.transformer.h[0].ln_1.weight, model.transformer.h[0].ln_1.bias,
                     TINY.ln_eps)
    q, k, _ = model.transformer.h[0].attn.c_attn(h).split(TINY.n_embd, dim=2)
    q = q.view(1, T, 2, 8).transpose(1, 2)
    k = k.view(1, T, 2, 8).transpose(1, 2)
    raw = q @ k.transpose(-1, -2)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    pattern = F.softmax((raw / math.sqrt(8)).masked_fill(~causal, float("-inf")), dim=-1)
    torch.testing.assert_close(as_t(tr["blocks.0.attn.hook_scores_raw"]), raw.detach(), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(as_t(tr["blocks.0.attn.hook_pattern"]), pattern.detach(), atol=1e-5, rtol=1e-4)
    assert torch.isneginf(as_t(tr["blocks.0.attn.hook_attn_scores"])[0, 0][~causal]).all()


def test_the_app_traces_big_texts_slim_and_small_ones_full():
    small = preset("default")
    assert not slim_view(small, 1, small.block_size)
    assert slim_view(preset("gpt2-small"), 1, 64) and slim_view(preset("gpt2-small"), 1, 512)
    dec = preset("decoder-cross-attention", block_size=512)
    assert not slim_view(dec, 16, 512)  # an encoder-decoder model is never slim


def test_gpt2_small_512_tokens_traced_as_the_app_keeps_it():
    """The one test on the real 124M shape: one line of 512 tokens, traced as the app caches it, under 1 GB."""
    t0 = time.perf_counter()
    cfg = preset("gpt2-small")
    model = GPT(cfg)
    g = torch.Generator().manual_seed(0)
    x = tuple(tuple(r) for r in torch.randint(0, cfg.vocab_size, (1, T), generator=g).tolist())
    y = tuple(tuple(r[1:]) + (-100,) for r in x)
    tr = trace_for_view(model, x, y, None, edit_specs.spec_key(None), False)
    assert tr.slim and tr.shape("blocks.11.attn.hook_pattern") == (1, 12, T, T)
    assert tr.shape("blocks.11.attn.hook_scores_raw") == (1, 12, T, T)
    assert nbytes(tr) < MAX_TRACE_BYTES
    p = np.asarray(tr["blocks.5.attn.hook_pattern"])
    np.testing.assert_allclose(p.sum(-1), 1.0, atol=1e-5)
    assert time.perf_counter() - t0 < 60  # (about 3 s on a quiet machine)


# ---------------------------------------------------------------- figures at 512 tokens
def _pattern_matrix(tr, head=1, b=0):
    name = "blocks.1.attn.hook_pattern"
    labels = [f"t{i}" for i in range(T)]
    masked = np.isneginf(np.asarray(tr["blocks.0.attn.hook_attn_scores"])[b, 0])
    return step_matrix(np.asarray(tr[name]), step_meta(name, TINY), labels, b, head, masked=masked, n_pos=T), name


def test_the_heatmap_of_a_512_pattern_is_the_trace_light_thinned_and_outlined():
    tr = trace(GPT(TINY), ids(TINY), slim=True).numpy().freeze()
    m, name = _pattern_matrix(tr)
    fig = figures.heatmap(m, "pattern", highlight_row=300, highlight_col=120, clickable=True)
    spec = fig.to_plotly_json()
    assert T * T > BIG_CELLS and len(spec["data"]) == 1  # one trace: no grey trace, no 262,144 click points
    z = arr(spec["data"][0]["z"]).astype(np.float64)
    want = np.asarray(tr[name])[0, 1].astype(np.float64)
    causal = np.tril(np.ones((T, T), dtype=bool))
    # the displayed values are the trace's float32 values exactly (tolerance 0); masked cells are empty (grey plot)
    np.testing.assert_array_equal(z[causal], want[causal])
    assert np.isnan(z[~causal]).all() and spec["layout"]["plot_bgcolor"] == figures.MASK_COLOR
    # labels: on the rows at most as many as fit (1.2 × the font size each) in the plot's height; on the columns
    # plotly.js picks them for the width it draws at; neither axis lists all 512
    lay = spec["layout"]
    font = lay["yaxis"]["tickfont"]["size"]
    assert lay["yaxis"]["nticks"] <= (lay["height"] - 120) / (1.2 * font)
    assert lay["xaxis"]["tickmode"] == lay["yaxis"]["tickmode"] == "auto" and "tickvals" not in lay["xaxis"]
    assert len(spec["data"][0]["x"]) == T and len(spec["data"][0]["y"]) == T  # zoom in: every token is there
    # the selected query (row 300) and key (column 120) are outlined
    rects = {(s["name"], s["x0"], s["x1"], s["y0"], s["y1"]) for s in lay["shapes"]}
    assert ("selected query", -0.5, T - 0.5, 299.5, 300.5) in rects
    assert ("selected key", 119.5, 120.5, -0.5, T - 0.5) in rects
    finished = figures.finished(fig).to_dict()  # what st.plotly_chart sends: a typed array, about 1 MB
    assert len(str(finished["data"][0]["z"])) < 1.5e6


def test_tiles_of_512_are_pooled_to_the_largest_of_each_block():
    rng = np.random.default_rng(0)
    tiles = [[rng.random((T, T)) for _ in range(2)]]
    causal = ~np.tril(np.ones((T, T), dtype=bool))
    spec = figures.tiled_heatmap(tiles, ["L0"], ["H0", "H1"], masked=causal).to_plotly_json()
    z = arr(spec["data"][0]["z"]).astype(float)
    k = T // TILE_CELLS
    assert z.shape == (TILE_CELLS, 2 * TILE_CELLS + 1)
    for r, c in ((0, 0), (5, 3), (100, 90), (127, 127)):  # each cell: the largest unmasked value of its k × k block
        block = np.where(causal, np.nan, tiles[0][1])[r * k:(r + 1) * k, c * k:(c + 1) * k]
        want = np.nan if np.isnan(block).all() else np.nanmax(block)
        np.testing.assert_equal(z[r, TILE_CELLS + 1 + c], want)
    assert "4 × 4" in spec["layout"]["title"]["text"]


def test_head_scores_of_a_long_text_against_the_dense_sum():
    rng = np.random.default_rng(1)
    toks = rng.integers(0, 20, T)  # a small vocabulary: many repeats, so induction and duplicate cells
    p = rng.random((2, 3, T, T)).astype(np.float32)
    got = head_scores(p, toks)
    for kind, score in got.items():
        cells = target_cells(toks, kind)
        rows = cells.any(1)
        want = (p.astype(np.float64) * cells).sum(-1)[:, :, rows].sum(-1) / rows.sum()
        np.testing.assert_allclose(score, want, rtol=1e-12, err_msg=kind)


def test_top_predictions_of_a_long_text_are_the_full_sorts():
    """The Logits page's top-k of 512 positions × 50,257 ids, against a full stable sort (ties: the lower id first)."""
    rng = np.random.default_rng(2)
    p = rng.random((T, 50257)).astype(np.float32)
    p[3] = 0.5  # all tied
    p[4, 10:20] = 2.0  # ten tied at the top
    labels = [f"t{i}" for i in range(p.shape[1])]
    order = np.argsort(-p, axis=-1, kind="stable")[:, :5]
    assert top_predictions(p, 5, labels) == [[(labels[i], float(p[t, i])) for i in order[t]] for t in range(T)]
