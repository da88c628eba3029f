"""A long text's trace with gradients keeps one layer (issue 21): the Backward page's trace of a big model at 512
tokens holds the steps and gradients of the layer in view and of the steps outside every block, nothing else.
Every number kept is the whole trace's, bit for bit, and the gradients are checked against plain torch autograd."""
import numpy as np
import pytest
import torch
from apphelp import array, chart, ok, page, set_sidebar
from test_long_texts import SMOL, T_EXACT, TINY, TINY_GQA, as_t, ids, next_tokens

from gptviz import GPT, trace
from gptviz.config import MAX_TRACE_BYTES, preset
from gptviz.model.hook_names import parse_act_name
from gptviz.present import page_context
from gptviz.run.byte_cache import nbytes


@pytest.mark.parametrize("cfg", [TINY, TINY_GQA], ids=["gpt2-like", "gqa-rope"])
@pytest.mark.parametrize("edit", [False, True], ids=["plain", "head-off-in-another-layer"])
def test_one_layers_gradients_are_the_whole_traces(cfg, edit):
    model = GPT(cfg)
    idx = ids(cfg, B=2, n=T_EXACT)
    args = dict(targets=next_tokens(idx), grads=True, slim=True)
    if edit:  # an edit in a layer not kept still changes everything after it
        def head_off(p):
            p[:, 1] = 0
            return p
        args["edits"] = {"blocks.0.attn.hook_pattern": head_off}
    full, one = trace(model, idx, **args), trace(model, idx, layers=[1], **args)
    layer_of = {n: parse_act_name(n).layer for n in full}
    assert list(one) == [n for n in full if layer_of[n] in (None, 1)]
    assert any(layer_of[n] == 1 for n in one) and not any(layer_of[n] == 0 for n in one)
    for n in one:
        assert torch.equal(as_t(full[n]), as_t(one[n])), n
        ga, gb = full.grad(n), one.grad(n)
        assert (ga is None) == (gb is None) and (ga is None or torch.equal(as_t(ga), as_t(gb))), f"∂loss/∂{n}"
    assert one.param_grad_norms() == full.param_grad_norms() and one.loss == full.loss


def test_the_kept_gradients_against_plain_autograd():
    """∂loss/∂(layer 1's input) and ∂loss/∂(its attention pattern) from torch autograd on the model itself, with
    hooks that keep those two tensors' gradients; and ∂loss/∂logits = (softmax − one-hot) / n."""
    model = GPT(TINY)
    idx = ids(TINY, n=T_EXACT)
    y = next_tokens(idx)
    tr = trace(model, idx, targets=y, grads=True, slim=True, layers=[1])
    kept = {}

    def keep_input(_module, args):
        args[0].retain_grad()
        kept["resid_pre"] = args[0]

    block = model.transformer.h[1]
    handle = block.register_forward_pre_hook(keep_input)
    try:
        logits, _ = model(idx)  # (B, T, vocab), no loss without targets
    finally:
        handle.remove()
    valid = y != -100
    loss = torch.nn.functional.cross_entropy(logits[valid], y[valid])
    loss.backward()
    torch.testing.assert_close(as_t(tr.grad("blocks.1.hook_resid_pre")), kept["resid_pre"].grad, atol=1e-6,
                               rtol=1e-4)
    p = torch.softmax(logits.detach(), -1)
    onehot = torch.zeros_like(p)
    onehot[valid] = torch.nn.functional.one_hot(y[valid], TINY.vocab_size).float()
    expected = (p - onehot) * valid[..., None] / valid.sum()
    torch.testing.assert_close(as_t(tr.grad("hook_logits")), expected, atol=1e-7, rtol=1e-4)


def test_a_long_texts_backward_trace_fits_where_all_layers_did_not():
    """The view keeps one layer's gradients for a long text on a big model (the layer in view) and every layer's for
    a small one; at 512 tokens of the tiny model the trace of one layer is much lighter than the whole."""
    assert page_context.slim_view(SMOL, 1, 512) and not page_context.slim_view(preset("default"), 1, 32)
    model = GPT(TINY)
    idx = ids(TINY)
    y = next_tokens(idx)
    full = trace(model, idx, targets=y, grads=True, slim=True)
    one = trace(model, idx, targets=y, grads=True, slim=True, layers=[0])
    assert nbytes(one) < 0.7 * nbytes(full) < MAX_TRACE_BYTES
    est = TINY.trace_bytes(1, 512, grads=True, slim=True, layers=1)  # the upper estimate, before anything is built
    assert nbytes(one) <= est < TINY.trace_bytes(1, 512, grads=True, slim=True)
    with pytest.raises(ValueError, match="layers"):
        trace(model, idx, targets=y, grads=True, layers=[2])


def test_the_backward_page_on_a_long_text_shows_the_layer_in_view(monkeypatch):
    """With every text counted as long (SLIM_TRACE_BYTES = 0), the Backward page's step list holds layer 1's steps
    (the layer chosen) and those outside every block, says why, and its gradient of layer 1's pattern is plain
    autograd's on the same model and text."""
    monkeypatch.setattr(page_context, "SLIM_TRACE_BYTES", 0)
    at = ok(page("backward", layer=1))
    options = at.selectbox(key="bw.step").options
    layers = {parse_act_name(o.split(" · ")[-1]).layer for o in options}
    assert layers == {None, 1}
    assert any("gradients kept are those of layer 1" in c.value for c in at.caption)
    g = array(chart(at, "∂loss/∂ L1 attention weights")["data"][0]["z"]).astype(float)
    # the same model and text, traced whole with gradients (every layer): the page's numbers are its layer 1
    from gptviz import encode_batch, get_tokenizer
    from gptviz.text.batches import DEFAULT_PROMPT

    tok = get_tokenizer("char-bpe", num_merges=20, lowercase=True)
    cfg = preset("default", vocab_size=tok.vocab_size)
    b = encode_batch(tok, DEFAULT_PROMPT, cfg.block_size)
    ref = trace(GPT(cfg), b.x, b.y, b.attention_mask, grads=True)
    want = ref.grad("blocks.1.attn.hook_pattern").detach().numpy()[0, 0]
    T = b.lengths[0]
    allowed = np.tril(np.ones((T, T), dtype=bool))
    np.testing.assert_allclose(g[:T, :T][allowed], want[:T, :T][allowed], atol=1e-6, rtol=1e-4)


def _held_bytes(tr) -> int:
    """The bytes of the tensors a trace holds, summed here by hand: every forward value it keeps (a slim trace's
    steps worked out when read hold no tensor) and every gradient."""
    values = [*tr._acts.values(), *(tr.grads or {}).values()]
    return sum(v.element_size() * v.nelement() for v in values if isinstance(v, torch.Tensor))


# Grouped-query attention where the repeated keys and values weigh most: 8 query heads of 32 sharing 4 key/value
# heads, in a residual stream of 8. Each of the two repeats (B, 8, T, 32) is four times the residual stream.
WIDE_GQA = TINY_GQA.replace(block_size=64, n_head=8, n_kv_head=4, d_head=32, n_embd=8, d_mlp=8, vocab_size=16)


@pytest.mark.parametrize("slim", [False, True], ids=["full", "slim"])
@pytest.mark.parametrize("layers", [None, [1]], ids=["every-layer", "one-layer"])
@pytest.mark.parametrize("B, T", [(2, 8), (3, 12)])
def test_the_size_estimate_of_a_gqa_trace_with_gradients_is_never_under_its_real_bytes(slim, layers, B, T):
    """``ModelConfig.trace_bytes`` (what the app checks before tracing) against the bytes the real trace with
    gradients holds, summed tensor by tensor: an upper estimate, and not a wild one."""
    cfg = WIDE_GQA
    assert cfg.n_kv_head < cfg.n_head and cfg.d_attn == 256
    idx = ids(cfg, B=B, n=T)
    tr = trace(GPT(cfg), idx, targets=next_tokens(idx), grads=True, slim=slim, layers=layers,
               weight_grads="norms")
    assert any(n.endswith("hook_k_rep") for n in tr) and tr.grad("blocks.1.attn.hook_v_rep") is not None
    held = _held_bytes(tr)
    est = cfg.trace_bytes(B, T, grads=True, slim=slim, layers=None if layers is None else len(layers))
    assert held <= est < 2 * held, (held, est)


def _layers_with_grads(tr) -> set:
    return {parse_act_name(n).layer for n in tr if tr.grad(n) is not None}


def test_only_a_long_text_gets_the_one_layer_gradient_trace(monkeypatch):
    """The view's trace with gradients, through ``resolve`` and a store as a page gets it, with the long-text
    threshold set between two texts: the short text keeps every layer's gradients (each equal to a whole trace
    with gradients of the same model and tokens, traced here), the long one only the layer in view's."""
    from gptviz.present.report_store import Store

    s = page_context.defaults()
    s.update(preset="default", layer=1)
    short, long = "the cat sat.", "the cat sat on the mat and the dog sat on the log by the door."
    store = Store()
    lengths = {}
    for text in (short, long):
        s["text"] = text
        lengths[text] = page_context.resolve(dict(s), store)[0].batch.x.shape[1]
    assert lengths[short] < lengths[long]
    cfg = page_context.resolve(dict(s), store)[0].cfg
    # long: over the bytes of a trace as long as the short text, and only then
    monkeypatch.setattr(page_context, "SLIM_TRACE_BYTES", cfg.trace_bytes(1, lengths[short]))
    s["text"] = short
    ctx, _ = page_context.resolve(dict(s), store)
    assert cfg.n_layer == 2 and ctx.grad_layer is None
    tr = ctx.trace(grads=True)
    assert _layers_with_grads(tr) == {None, 0, 1}
    b = ctx.batch
    whole = trace(GPT(cfg), b.x, b.y, b.attention_mask, grads=True)
    for n in ("blocks.0.attn.hook_pattern", "blocks.0.hook_resid_pre", "blocks.1.mlp.hook_post"):
        np.testing.assert_allclose(np.asarray(tr.grad(n)), whole.grad(n).detach().numpy(), atol=1e-7, rtol=1e-5)
    s["text"] = long
    ctx, _ = page_context.resolve(dict(s), store)
    assert ctx.grad_layer == 1 and _layers_with_grads(ctx.trace(grads=True)) == {None, 1}


def test_the_backward_page_on_a_long_text_traces_once_and_shows_the_forward_values_of_its_gradient_trace(
        monkeypatch):
    """A long text's trace with gradients keeps the layer in view, forward values too: the forward half reads them
    there, and the page computes one trace a text (it computed a second, plain one: 0.55-0.76 s of the Qwen3-0.6B
    shape's 1.7-2.3 s page). The forward half's pattern is plain PyTorch's, per head and for every head at once."""
    from gptviz import encode_batch, get_tokenizer
    from gptviz.text.batches import DEFAULT_PROMPT
    from gptviz.ui import resources

    monkeypatch.setattr(page_context, "SLIM_TRACE_BYTES", 0)
    computed = []
    real = resources._compute_trace
    monkeypatch.setattr(resources, "_compute_trace", lambda *a, **k: computed.append(a[6]) or real(*a, **k))
    at = ok(page("backward", layer=1, text=DEFAULT_PROMPT + " and again"))
    assert computed == [True], computed  # one trace, with gradients
    tok = get_tokenizer("char-bpe", num_merges=20, lowercase=True)
    cfg = preset("default", vocab_size=tok.vocab_size)
    b = encode_batch(tok, DEFAULT_PROMPT + " and again", cfg.block_size)
    T = b.lengths[0]
    with torch.no_grad():
        ref = trace(GPT(cfg), b.x, b.y, b.attention_mask)
    want = ref["blocks.1.attn.hook_pattern"].numpy()[0]  # (head, T, T)
    allowed = np.tril(np.ones((T, T), dtype=bool))
    for h in (0, 1):
        if h:
            at = ok(set_sidebar(at, "head", 1))
        got = array(chart(at, f"L1 attention weights · head {h}")["data"][0]["z"]).astype(float)
        np.testing.assert_allclose(got[:T, :T][allowed], want[h][allowed], atol=1e-6)
        assert np.isnan(got[:T, :T][~allowed]).all()  # the masked cells, from the same trace
    assert computed == [True], computed
