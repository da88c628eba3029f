"""Who did it, part 4: the token-attribution section on the default model and text. The attention bars are the
chosen head's row of the pattern from a plain forward pass (apphelp.engine_run); the integrated-gradients bars add
up to the logit's change from zero token embeddings to the real ones, both logits from plain forward passes with
a torch hook (completeness, checked outside gptviz); the page says why attention weights are not an explanation."""
import numpy as np
import pytest
import torch
from apphelp import array, chart, engine_run, ok, page
from lazy_import import lazy

lazy("captum", skip=True)


def _logit_gap(position: int, target: int) -> float:
    from gptviz import GPT, encode_batch, get_tokenizer, preset
    from gptviz.text.batches import DEFAULT_PROMPT

    tok = get_tokenizer("char-bpe", num_merges=20, lowercase=True)
    model = GPT(preset("default", vocab_size=tok.vocab_size))
    x = encode_batch(tok, DEFAULT_PROMPT, model.config.block_size).x[:1]
    with torch.no_grad():
        full = float(model(x)[0][0, position, target])
        h = model.transformer.wte.register_forward_hook(lambda m, i, o: torch.zeros_like(o))
        try:
            zero = float(model(x)[0][0, position, target])
        finally:
            h.remove()
    return full - zero


def test_three_readings_of_one_prediction():
    at = ok(page("who", preset="default", layer=1, head=1))
    att = chart(at, "Attention L1 H1")
    roll = chart(at, "Rollout")
    ig = chart(at, "Int. gradients")
    seen, _ = engine_run()
    pattern = seen["blocks.1.attn.hook_pattern"][0, 1]
    T = pattern.shape[0]
    pos = at.selectbox(key="attr.pos").value
    assert pos == T - 1
    assert np.allclose(array(att["data"][0]["x"]), pattern[pos, : pos + 1], atol=1e-5)
    r = array(roll["data"][0]["x"])
    assert r.shape == (T,) and abs(r.sum() - 1) < 1e-5
    target = at.selectbox(key=f"attr.target.{pos}").value
    assert abs(array(ig["data"][0]["x"]).sum() - _logit_gap(pos, target)) < 1e-3
    assert any("Attention weights are not an explanation" in m.value for m in at.markdown)


def test_on_a_big_model_integrated_gradients_wait_for_a_click():
    """GPT-2 small's shape (124M): 64 tokens of integrated gradients took 17.7 s here, so the page draws attention
    and rollout at once and waits for the button before it starts the 64 passes (queued, one at a time)."""
    at = page("who", preset="gpt2-small", tokenizer="gpt2", text="the cat sat on the mat")
    assert not at.exception
    assert [b for b in at.button if b.label == "Compute integrated gradients"]
    chart(at, "Attention L0 H0")
    chart(at, "Rollout")
    with pytest.raises(KeyError):
        chart(at, "Int. gradients")
