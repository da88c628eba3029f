import numpy as np
import pytest
from apphelp import array, chart, charts, ok, page, set_sidebar


def test_forward_and_gradient_side_by_side_with_param_norms():
    at = ok(page("backward"))
    c = chart(at, "∂loss/∂ L0 attention weights")
    g = array(c["data"][0]["z"])
    assert c["data"][0]["zmid"] == 0 and np.isfinite(g[~np.isnan(g)]).all()
    assert any("strongest is at" in i.value for i in at.info)
    bars = chart(at, "‖∂loss/∂W‖")
    assert len(bars["data"][0]["x"]) > 5 and min(bars["data"][0]["x"]) >= 0


def test_choosing_another_step():
    at = page("backward")
    sel = at.selectbox(key="bw.step")
    at = sel.set_value("hook_embed").run()
    ok(at)
    assert any(t["layout"]["title"]["text"] == "∂loss/∂ Token embedding" for t in charts(at))
    at = at.selectbox(key="bw.step").set_value("hook_logits").run()
    g = array(chart(at, "∂loss/∂ logits")["data"][0]["z"])
    assert abs(g.sum()) < 1e-4  # softmax - onehot sums to zero in every row


def _engine_trace_with_head_off(layer: int, head: int):
    """The page's default model and text, traced with gradients and a hand-written edit that switches a head off
    (not the app's edit specs), as an independent reference."""
    from gptviz import GPT, encode_batch, get_tokenizer, preset, trace
    from gptviz.text.batches import DEFAULT_PROMPT

    tok = get_tokenizer("char-bpe", num_merges=20, lowercase=True)
    cfg = preset("default", vocab_size=tok.vocab_size)
    b = encode_batch(tok, DEFAULT_PROMPT, cfg.block_size)

    def off(p):
        p[:, head] = 0.0
        return p

    return trace(GPT(cfg), b.x, b.y, b.attention_mask, grads=True, edits={f"blocks.{layer}.attn.hook_pattern": off})


def _head_grad_max(tr, name, head, allowed_only=False):
    g = np.take(tr.grad(name).detach().numpy(), head, axis=tr.info(name).axes.index("head"))
    if allowed_only:  # the cells the causal mask lets attention use (i >= j); this text has no padding
        g = g[:, np.tril(np.ones(g.shape[-2:], dtype=bool))]
    return float(np.abs(g).max())


UPSTREAM = "masked scores, scaled scores, raw scores, queries and keys"


def test_a_head_switched_off_has_no_gradient_upstream_of_its_pattern():
    ref = _engine_trace_with_head_off(0, 0)
    g_pattern = _head_grad_max(ref, "blocks.0.attn.hook_pattern", 0, allowed_only=True)
    assert g_pattern > 1e-5  # the zeroed weights still have a gradient
    for short in ("hook_attn_scores", "hook_scores_scaled", "hook_scores_raw", "hook_q", "hook_k"):
        assert _head_grad_max(ref, f"blocks.0.attn.{short}", 0) == 0.0, short  # cut off by the edit
        assert _head_grad_max(ref, f"blocks.0.attn.{short}", 1) > 0.0, short  # the head still on is not

    at = page("backward")
    at.session_state["gptviz.settings"]["edits"] = {"set": [], "heads_off": [[0, 0]]}
    at = set_sidebar(at, "head", 0)
    ok(at)
    # the pattern: held at 0 by the edit, with a gradient, and nothing upstream gets any of it
    assert [i.value for i in at.info] == [
        "Head 0 of layer 0 is switched off: your edit replaces its attention weights with 0, so their forward value "
        f"is exactly 0. Their gradient is not 0 (up to {g_pattern:.3g}) on the cells attention may use: it says how "
        "the loss would change if those weights were nudged up from 0. Upstream of the edit, the gradient on this "
        f"head's {UPSTREAM} is exactly 0: the edit cut them off from the loss."]
    g = array(chart(at, "∂loss/∂ L0 attention weights")["data"][0]["z"])
    assert np.nanmax(np.abs(g)) == pytest.approx(g_pattern, rel=1e-5)

    # a step upstream of the edit: its gradient heatmap is all zeros, and the page says why
    for short in ("hook_attn_scores", "hook_k"):
        at = at.selectbox(key="bw.step").set_value(f"blocks.0.attn.{short}").run()
        ok(at)
        assert [i.value for i in at.info] == [
            "Head 0 of layer 0 is switched off after this step: its attention weights are replaced with 0, so this "
            "step no longer reaches the loss through head 0. Head 0's gradient here is exactly 0, and so is the "
            f"gradient on all of its {UPSTREAM}: the edit cut them off from the loss."], short
        z = [array(c["data"][0]["z"]) for c in charts(at) if c["layout"]["title"]["text"].startswith("∂loss/∂")]
        assert z and all(np.nanmax(np.abs(a)) == 0.0 for a in z), short

    # head 1 is still on: the usual reading, naming its strongest entry
    at = set_sidebar(at.selectbox(key="bw.step").set_value("blocks.0.attn.hook_attn_scores").run(), "head", 1)
    assert len(at.info) == 1 and "The strongest is at head 1" in at.info[0].value


def test_a_short_text_keeps_every_layers_gradients_on_the_page():
    """The default short text with layer 1 in the sidebar: the step list (the steps the page's trace holds a
    gradient for) has both layers' steps and those outside every block, no "this text is long" caption, and the
    gradient of a layer-0 step (not the layer in view) is that of a whole trace with gradients made here."""
    from gptviz import GPT, encode_batch, get_tokenizer, preset, trace
    from gptviz.model.hook_names import parse_act_name
    from gptviz.text.batches import DEFAULT_PROMPT

    at = ok(page("backward", layer=1))
    options = at.selectbox(key="bw.step").options
    assert {parse_act_name(o.split(" · ")[-1]).layer for o in options} == {None, 0, 1}
    assert not any("gradients kept are those of layer" in c.value for c in at.caption)
    at = at.selectbox(key="bw.step").set_value("blocks.0.attn.hook_pattern").run()
    g = array(chart(ok(at), "∂loss/∂ L0 attention weights")["data"][0]["z"]).astype(float)
    tok = get_tokenizer("char-bpe", num_merges=20, lowercase=True)
    cfg = preset("default", vocab_size=tok.vocab_size)
    b = encode_batch(tok, DEFAULT_PROMPT, cfg.block_size)
    want = trace(GPT(cfg), b.x, b.y, b.attention_mask, grads=True).grad("blocks.0.attn.hook_pattern")
    want = want.detach().numpy()[0, 0]
    T = b.lengths[0]
    allowed = np.tril(np.ones((T, T), dtype=bool))
    np.testing.assert_allclose(g[:T, :T][allowed], want[:T, :T][allowed], atol=1e-6, rtol=1e-4)


def test_both_halves_write_their_key_labels_upright_and_apart():
    """Forward value and gradient side by side are each about 178 px wide at 1280×720 (measured in Chromium): their
    key labels stand upright, every k-th as many as fit 1.5 × the 14-px font apart, never crossed at 45°."""
    import math

    from gptviz.model.checkpoint import load_checkpoint
    from gptviz.paths import CHECKPOINTS

    at = ok(page("backward", opening=True))
    ck = load_checkpoint(CHECKPOINTS / "shakespeare.safetensors")
    T = len(ck.tokenizer.encode(ck.meta["example"]))
    step = math.ceil(1.5 * 14 / (160 / T))
    assert (T, step) == (18, 3)
    for fig in charts(at)[:2]:  # the layer's attention weights and their gradient
        ax = fig["layout"]["xaxis"]
        assert ax["tickangle"] == -90 and [int(v.split(":")[0]) for v in ax["tickvals"]] == list(range(0, T, step))
