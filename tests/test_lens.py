"""Logit lens and direct logit attribution (gptviz.interp.lens) against independent computations."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from lazy_import import lazy

transformers = lazy("transformers")  # pinned in requirements-dev.txt: missing, the tests fail, not skip

from gptviz import GPT, ModelConfig, from_hf_gpt2, trace
from gptviz.interp.lens import REST_LABEL, components, decompose, describe_top, head_grid, lens_summary, logit_lens
from gptviz.model.build import build_model

TOL = 1e-4
HEAD_TOL = 1e-6  # one head's share: values up to ~0.1 here, computed to ~1e-9


def perturbed(cfg: ModelConfig, seed: int = 0) -> GPT:
    """A model whose biases and norm weights are far from their 0 / 1 start, so β and γ matter."""
    m = GPT(cfg)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in m.parameters():
            if p.dim() == 1:  # biases and norm weights
                p.add_(torch.randn(p.shape, generator=g) * 0.5)
            else:
                p.mul_(1 + 5 * torch.rand(p.shape, generator=g))
    return m


def batch(cfg, B=2, T=7, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, cfg.vocab_size, (B, T), generator=g)
    y = torch.randint(0, cfg.vocab_size, (B, T), generator=g)
    y[0, -1] = -100  # a position with nothing to predict
    return x, y


def logit_of(tr, ids):
    return tr.logits.gather(-1, ids.clamp(min=0)[..., None])[..., 0]


@torch.no_grad()
def head_outputs(tr, m, l):
    """What each head of layer l wrote into the residual stream, (n_head, B, T, C) in float64, one head at a time:
    ``hook_z[..., h, :] @ W_O_h.T`` with W_O_h head h's column block of the attention output projection's weight."""
    cfg, attn = m.config, m.transformer.h[l].attn
    W_O = (attn.c_proj if hasattr(attn, "c_proj") else attn.o_proj).weight.double()  # (C, n_head * d_head)
    z = tr[f"blocks.{l}.attn.hook_z"].double()  # (B, T, n_head, d_head)
    hs = cfg.d_head
    return torch.stack([z[..., h, :] @ W_O[:, h * hs:(h + 1) * hs].T for h in range(cfg.n_head)])


@torch.no_grad()
def through_frozen_norm(tr, m, vec, ids):
    """A vector written into the residual stream (..., B, T, C), read as a logit of ``ids`` (B, T): the final norm with
    its scale fixed at the value the trace recorded (``ln_final.hook_scale``; LayerNorm also centres), then its
    weight, then the token's unembedding row."""
    if m.config.norm == "layernorm":
        vec = vec - vec.mean(-1, keepdim=True)
    u = m.lm_head.weight[ids.clamp(min=0)].double()  # (B, T, C)
    return (vec / tr["ln_final.hook_scale"].double() * m.transformer.ln_f.weight.double() * u).sum(-1)


def assert_each_head_by_hand(tr, m, labels, c, ids):
    """Every layer's every head: its row of decompose's contributions (found by its label) equals its own output
    sent through the frozen final norm by hand, at every position with a token."""
    valid = ids != -100
    for l in range(m.config.n_layer):
        by_hand = through_frozen_norm(tr, m, head_outputs(tr, m, l), ids)  # (n_head, B, T)
        for h in range(m.config.n_head):
            torch.testing.assert_close(c[labels.index(f"L{l}.H{h}")][valid].double(), by_hand[h][valid],
                                       rtol=1e-5, atol=HEAD_TOL, msg=lambda e, l=l, h=h: f"L{l}.H{h}: {e}")


@torch.no_grad()
def lens_logits_by_hand(tr, m):
    """The logit lens in plain torch, (n_layer + 1, B, T, vocab) in float64: every layer's input, then the last
    layer's output, through the final norm with its own mean and scale, and the unembedding."""
    cfg, ln = m.config, m.transformer.ln_f
    L = cfg.n_layer
    W_U = (m.transformer.wte.weight if cfg.tie_weights else m.lm_head.weight).double()
    w, b = ln.weight.double(), (None if ln.bias is None else ln.bias.double())
    out = []
    for r in [tr[f"blocks.{l}.hook_resid_pre"] for l in range(L)] + [tr[f"blocks.{L - 1}.hook_resid_post"]]:
        r = r.double()
        if cfg.norm == "layernorm":
            n = F.layer_norm(r, (cfg.n_embd,), w, b, cfg.ln_eps)
        else:
            n = r / torch.sqrt(r.pow(2).mean(-1, keepdim=True) + cfg.ln_eps) * w + (0 if b is None else b)
        out.append(n @ W_U.T + (0 if m.lm_head.bias is None else m.lm_head.bias.double()))
    return torch.stack(out)


def two_rows():
    """A perturbed model and a batch of two different texts, each row with its own targets and its own position
    that has nothing to predict (row 0 the last, row 1 position 2)."""
    cfg = DLA_CONFIGS["layernorm-learned-tied"]
    m = perturbed(cfg)
    x, y = batch(cfg)
    y[1, 2] = -100
    assert not torch.equal(x[0], x[1]) and (y[0] != y[1]).sum() >= 5
    return cfg, m, x, y, trace(m, x, y)


def assert_summary_by_hand(s, probs, y, k):
    """One row's lens summary against the plain-torch lens probabilities of that row (P, T, V) and its targets (T,)."""
    y = y.numpy()
    valid = y != -100
    p = probs.numpy()
    np.testing.assert_allclose(s.target_prob[:, valid], p[:, valid, y[valid]], rtol=0, atol=1e-6)
    assert np.isnan(s.target_prob[:, ~valid]).all() and not np.isnan(s.target_prob[:, valid]).any()
    v, i = probs.topk(k, dim=-1)  # (P, T, k): all k, in order
    assert s.top_ids.shape == tuple(i.shape)
    np.testing.assert_array_equal(s.top_ids, i.numpy())
    np.testing.assert_allclose(s.top_probs, v.numpy(), rtol=0, atol=1e-6)


DLA_CONFIGS = {
    f"{norm}-{pos}-{'tied' if tied else 'untied'}": ModelConfig(
        vocab_size=23, block_size=8, n_layer=2, n_head=3, n_embd=12, norm=norm, pos_encoding=pos, tie_weights=tied)
    for norm in ("layernorm", "rmsnorm") for pos in ("learned", "sinusoidal", "rope") for tied in (True, False)
}
DLA_CONFIGS["no-bias-nopos"] = ModelConfig(vocab_size=23, block_size=8, n_layer=2, n_head=2, n_embd=8,
                                           pos_encoding="none", bias=False)
DLA_CONFIGS["attn-only"] = ModelConfig(vocab_size=23, block_size=8, n_layer=2, n_head=2, n_embd=8, attn_only=True)
DLA_CONFIGS["wide-heads-head-bias"] = ModelConfig(vocab_size=23, block_size=8, n_layer=1, n_head=2, n_embd=8,
                                                  d_head=6, head_bias=True, tie_weights=False, attn_proj_bias=False)


@pytest.mark.parametrize("name", list(DLA_CONFIGS))
def test_contributions_add_up_to_the_logit(name):
    cfg = DLA_CONFIGS[name]
    m = perturbed(cfg)
    x, y = batch(cfg)
    tr = trace(m, x, y)
    labels, c, bias = decompose(tr, m, "target")
    comps = components(cfg)
    assert labels == [k.label for k in comps]
    assert c.shape == (len(comps), *x.shape) and bias.shape == x.shape
    assert ("position embedding" in labels) == (cfg.pos_encoding in ("learned", "sinusoidal"))
    assert any(k.kind == "mlp" for k in comps) != cfg.attn_only
    valid = y != -100
    err = (c.sum(0) + bias - logit_of(tr, y))[valid].abs().max()
    assert err < TOL, float(err)
    # not only the sum: every head of every layer is its own output through the frozen final norm
    assert_each_head_by_hand(tr, m, labels, c, y)
    # nothing to predict: NaN, not a made-up 0
    assert torch.isnan(c[:, ~valid]).all() and torch.isnan(bias[~valid]).all()
    # one token for every position, and an explicit (B, T) array of ids
    for tokens in (5, torch.randint(0, cfg.vocab_size, x.shape, generator=torch.Generator().manual_seed(3))):
        _, c2, b2 = decompose(tr, m, tokens)
        ids = torch.full_like(x, tokens) if isinstance(tokens, int) else tokens
        assert (c2.sum(0) + b2 - logit_of(tr, ids)).abs().max() < TOL
        assert_each_head_by_hand(tr, m, labels, c2, ids)
    # the app's cached numpy trace gives the same numbers
    _, cn, bn = decompose(tr.numpy(), m, "target")
    assert isinstance(cn, np.ndarray)
    np.testing.assert_allclose(cn, c.numpy(), rtol=0, atol=1e-6)
    np.testing.assert_allclose(bn, bias.numpy(), rtol=0, atol=1e-6)


@pytest.mark.parametrize("name", ["layernorm-learned-tied", "rmsnorm-rope-untied", "attn-only", "wide-heads-head-bias"])
def test_heads_of_a_layer_add_up_to_its_recorded_attention_output(name):
    """Independent of how decompose splits c_proj: the heads plus the bias equal the recorded hook_attn_out,
    sent through the same frozen final norm by hand; and head_grid's cell (l, h) is head h's own output
    (``hook_z[..., h, :] @ W_O_h.T``) through that norm, for every layer and head."""
    cfg = DLA_CONFIGS[name]
    m = perturbed(cfg)
    x, y = batch(cfg)
    tr = trace(m, x, y)
    labels, c, _ = decompose(tr, m, "target")
    grid = head_grid(c, cfg)  # (L, H, B, T)
    assert grid.shape == (cfg.n_layer, cfg.n_head, *x.shape)
    valid = y != -100
    for l in range(cfg.n_layer):
        a = tr[f"blocks.{l}.hook_attn_out"].double()
        ours = grid[l].sum(0)
        if f"L{l} attn bias" in labels:
            ours = ours + c[labels.index(f"L{l} attn bias")]
        assert (ours - through_frozen_norm(tr, m, a, y))[valid].abs().max() < TOL
        # the hand split is right: the heads' outputs plus the projection's bias are the recorded output
        heads = head_outputs(tr, m, l)  # (H, B, T, C)
        bias = m.transformer.h[l].attn.c_proj.bias
        torch.testing.assert_close(heads.sum(0) + (0 if bias is None else bias.double()), a, rtol=1e-5, atol=1e-5)
        # and each head on its own, in its own cell
        by_hand = through_frozen_norm(tr, m, heads, y)  # (H, B, T)
        for h in range(cfg.n_head):
            torch.testing.assert_close(grid[l, h][valid].double(), by_hand[h][valid], rtol=1e-5, atol=HEAD_TOL,
                                       msg=lambda e, l=l, h=h: f"head_grid[{l}, {h}]: {e}")


def test_hugging_face_gpt2_with_random_weights():
    torch.manual_seed(0)
    hf = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=2, n_head=2, n_embd=16, vocab_size=50,
                                                              n_positions=16)).eval()
    with torch.no_grad():
        for p in hf.parameters():
            if p.dim() == 1:  # biases and LayerNorm weights
                p.add_(torch.randn_like(p) * 0.5)
    m = from_hf_gpt2(hf)
    x = torch.randint(0, 50, (2, 12))
    y = torch.randint(0, 50, (2, 12))
    tr = trace(m, x, y)
    assert (tr.logits - hf(x).logits).abs().max() < 1e-4
    _, c, bias = decompose(tr, m, "target")
    assert (c.sum(0) + bias - logit_of(tr, y)).abs().max() < TOL
    _, lens = logit_lens(tr, m)
    assert torch.equal(lens[-1], tr.logits)


@pytest.mark.parametrize("name", ["layernorm-learned-tied", "rmsnorm-sinusoidal-untied", "attn-only"])
def test_logit_lens_last_point_is_the_logits_and_early_points_match_plain_torch(name):
    cfg = DLA_CONFIGS[name]
    m = perturbed(cfg)
    x, y = batch(cfg)
    tr = trace(m, x, y)
    labels, lens = logit_lens(tr, m)
    assert len(labels) == cfg.n_layer + 1 and lens.shape == (cfg.n_layer + 1, *x.shape, cfg.vocab_size)
    assert torch.equal(lens[-1], tr.logits)  # the same operations on the same input: bit for bit
    # numpy trace (what the app caches): numpy out, same values
    _, lens_np = logit_lens(tr.numpy(), m)
    assert isinstance(lens_np, np.ndarray) and np.array_equal(lens_np[-1], tr.numpy().logits)
    # every point, written out with plain torch ops
    assert (lens - lens_logits_by_hand(tr, m)).abs().max() < 1e-4
    # one row only (a matmul over fewer rows may round differently in the last bit)
    _, one = logit_lens(tr, m, rows=1)
    assert one.shape[1] == 1 and (one[:, 0] - lens[:, 1]).abs().max() < 1e-6


def test_lens_summary_matches_the_full_lens():
    """Both rows of a batch of two different texts, each against the lens in plain torch and its own targets: p(target)
    (NaN where there is none), and all k top ids and their probabilities."""
    cfg, m, x, y, tr = two_rows()
    probs = torch.softmax(lens_logits_by_hand(tr, m), -1)  # (P, B, T, V)
    tr_np = tr.numpy()  # what the app caches
    for b in (0, 1):
        s = lens_summary(tr_np, m, b=b, k=3)
        assert s.labels == logit_lens(tr_np, m, rows=b)[0] and len(s.labels) == cfg.n_layer + 1
        assert_summary_by_hand(s, probs[:, b], y[b], k=3)
        # the last point is softmax of the trace's own logits
        valid = (y[b] != -100).numpy()
        np.testing.assert_allclose(s.target_prob[-1, valid], tr_np["hook_probs"][b, valid, y[b].numpy()[valid]],
                                   atol=1e-6)


def test_post_norm_lens_works_and_attribution_says_why_not():
    cfg = ModelConfig(vocab_size=23, block_size=8, n_layer=2, n_head=2, n_embd=8, norm_placement="post")
    m = perturbed(cfg)
    x, y = batch(cfg)
    tr = trace(m, x, y)
    labels, lens = logit_lens(tr, m)
    assert torch.equal(lens[-1], tr.logits)
    # no final norm: each point goes straight through lm_head
    assert torch.allclose(lens[1], tr["blocks.1.hook_resid_pre"] @ m.lm_head.weight.T, atol=1e-5)
    with pytest.raises(ValueError, match="direct logit attribution needs a pre-norm model"):
        decompose(tr, m, "target")


def test_an_edited_residual_stream_becomes_a_rest_component():
    cfg = DLA_CONFIGS["layernorm-learned-tied"]
    m = perturbed(cfg)
    x, y = batch(cfg)

    def bump(r):
        r[:, 2] += 3.0
        return r

    tr = trace(m, x, y, edits={"blocks.1.hook_resid_pre": bump})
    labels, c, bias = decompose(tr, m, "target")
    assert labels[-1] == REST_LABEL
    valid = y != -100
    assert (c.sum(0) + bias - logit_of(tr, y))[valid].abs().max() < TOL
    assert c[-1, :, 2].abs().min() > 0 and c[-1, :, 3].abs().max() < 1e-5  # only the edited position
    # an unedited trace has no such component
    assert REST_LABEL not in decompose(trace(m, x, y), m, "target")[0]


def test_bad_inputs_say_what_to_change():
    cfg = DLA_CONFIGS["layernorm-learned-tied"]
    m = perturbed(cfg)
    x, y = batch(cfg)
    tr = trace(m, x)
    with pytest.raises(ValueError, match="no targets"):
        decompose(tr, m, "target")
    with pytest.raises(ValueError, match="outside the vocabulary"):
        decompose(tr, m, cfg.vocab_size)
    with pytest.raises(ValueError, match="shape"):
        decompose(tr, m, torch.zeros(1, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="model"):
        logit_lens(tr)
    with pytest.raises(ValueError, match="different model"):
        logit_lens(tr, GPT(cfg.replace(n_layer=1)))


def test_sentence_names_the_top_contributors():
    s = describe_top(["a", "b", "c", "d"], np.array([0.5, -2.0, 1.5, 0.0]), "x", n=2)
    assert s.index("**c**") < s.index("**a**") < s.index("**b**")
    assert "(+1.5)" in s and "(-2)" in s


def test_encoder_decoder_decoder_adds_its_cross_attention():
    cfg = ModelConfig(vocab_size=23, block_size=8, n_layer=2, n_head=2, n_embd=8, n_enc_layer=0, enc_len=5,
                      head_bias=True, tie_weights=False)
    m = build_model(cfg)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())) * 0.3)
    x, y = batch(cfg)
    tr = trace(m, x, y)
    labels, c, bias = decompose(tr, m, "target")
    assert "L0 cross-attn" in labels and REST_LABEL not in labels
    assert (c.sum(0) + bias - logit_of(tr, y))[y != -100].abs().max() < TOL
    assert torch.equal(logit_lens(tr, m)[1][-1], tr.logits)


@pytest.mark.parametrize("max_rows", [1, 7, 64])
def test_lens_summary_is_the_same_decoded_in_any_chunks(max_rows):
    """lens_summary decodes (point, position) rows in products of at most max_rows rows (at least one point):
    the chunking must not change any number. Row 1 of two different texts, against the lens in plain torch and
    row 1's own targets, all k top tokens."""
    cfg, m, x, y, tr = two_rows()
    s = lens_summary(tr.numpy(), m, b=1, k=4, max_rows=max_rows)
    assert s.target_prob.shape == (cfg.n_layer + 1, x.shape[1])
    assert_summary_by_hand(s, torch.softmax(lens_logits_by_hand(tr, m), -1)[:, 1], y[1], k=4)


@pytest.mark.parametrize("start,stop", [(2, 5), (0, 3), (4, 7)])
def test_a_window_of_positions_is_those_columns_of_the_lens(start, stop):
    """A long text's lens decodes one window of positions: its columns are the plain-torch lens's columns start:stop,
    row 1's targets there (position 2 has none), and it says where it starts."""
    cfg, m, x, y, tr = two_rows()
    s = lens_summary(tr.numpy(), m, b=1, k=3, start=start, stop=stop)
    assert s.start == start and s.target_prob.shape == (cfg.n_layer + 1, stop - start)
    assert_summary_by_hand(s, torch.softmax(lens_logits_by_hand(tr, m), -1)[:, 1, start:stop], y[1, start:stop], k=3)


def test_the_lens_window_fits_the_budget_of_gpt2_small_at_128_positions():
    """GPT-2 small reads all of a 128-token text and 128 positions of a longer one; a 30-layer model with a 49,152
    vocabulary (SmolLM2-135M's shape) 64; a small model all of any text. Windows end at the last position."""
    from gptviz.interp.lens import lens_window, lens_window_starts

    gpt2 = ModelConfig(vocab_size=50257, block_size=1024, n_layer=12, n_head=12, n_embd=768)
    smol = ModelConfig(vocab_size=49152, block_size=2048, n_layer=30, n_head=9, n_embd=576)
    tiny = ModelConfig(vocab_size=65, block_size=512, n_layer=4, n_head=4, n_embd=128)
    assert [lens_window(gpt2, T) for T in (100, 128, 129, 512)] == [100, 128, 128, 128]
    assert [lens_window(smol, T) for T in (50, 100, 512)] == [50, 64, 64]
    assert lens_window(tiny, 512) == 512
    for T, W in ((512, 128), (300, 128), (512, 64), (64, 64)):
        starts = lens_window_starts(T, W)
        covered = set().union(*(range(a, a + W) for a in starts))
        assert covered == set(range(T)) and starts[-1] + W == T and starts[0] == 0
    assert lens_window_starts(300, 128) == [0, 44, 172]


def test_attribution_at_one_position_adds_up_to_its_logit():
    """decompose(at=(b, t)) splits that one logit: its parts add up to the trace's own logit of the target there,
    and equal that column of the whole split; a position outside the batch is refused."""
    cfg = DLA_CONFIGS["rmsnorm-rope-untied"]
    m = perturbed(cfg)
    x, y = batch(cfg)
    tr = trace(m, x, y)
    labels, c, bias = decompose(tr, m, "target", at=(1, 4))
    assert c.shape == (len(labels), 1, 1) and bias.shape == (1, 1)
    assert abs(float(c.sum() + bias[0, 0]) - float(logit_of(tr, y)[1, 4])) < TOL
    _, c_all, bias_all = decompose(tr, m, "target")
    torch.testing.assert_close(c[:, 0, 0], c_all[:, 1, 4], atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match="outside"):
        decompose(tr, m, "target", at=(2, 0))
