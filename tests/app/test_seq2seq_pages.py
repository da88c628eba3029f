"""The pages for encoder-decoder models: the Attention page's cross-attention (a decoder-position ×
encoder-position grid), on the shipped reverser and on the teaching material's decoder; the Training page's
reversal task and the material's own training loop."""
import numpy as np
import torch
from apphelp import array, chart, charts, messages, ok, page, titles

from gptviz.model.checkpoint import load_checkpoint
from gptviz.run.trace import trace
from gptviz.ui.resources import CHECKPOINTS

REVERSE = "checkpoint: reverse"


def _reverse_reference(source: str, decoder: str):
    """The shipped reverser's cross-attention weights (head 0) on one source, traced here, not by the app."""
    ck = load_checkpoint(CHECKPOINTS / "reverse.safetensors")
    tok = ck.tokenizer
    tr = trace(ck.model, torch.tensor([tok.encode(decoder)]), enc_input=torch.tensor([tok.encode(source)]))
    return tr["blocks.0.cross_attn.hook_pattern"][0, 0].numpy()


def test_reverse_checkpoint_cross_attention_is_t_by_s_and_anti_diagonal():
    at = ok(page("attention", preset=REVERSE))
    assert not at.error and not at.warning, messages(at)
    s = at.session_state["gptviz.settings"]
    assert s["source"] == "fbdacbeg" and s["text"] == "^gebcadb"  # the source, and what the decoder reads
    assert at.text_area(key="att.source").value == "fbdacbeg"
    c = chart(at, "L0 cross-attention weights")
    z = array(c["data"][0]["z"])
    assert z.shape == (8, 8)
    assert list(c["layout"]["xaxis"]["ticktext"]) == list("fbdacbeg")  # columns: the source's letters
    assert list(c["layout"]["yaxis"]["ticktext"]) == list("^gebcadb")  # rows: the decoder's tokens
    assert np.allclose(z, _reverse_reference("fbdacbeg", "^gebcadb"), atol=1e-5)
    assert (z.argmax(1) == np.arange(8)[::-1]).all()  # output t reads source letter 7 - t
    assert len(c["data"]) == 1  # no causal triangle: nothing is grey
    # the steps are cross-attention's, with their formulas and code lines
    radio = at.radio(key="s.cross.pick")
    assert radio.options[7].startswith("6 · The padding mask") and len(radio.options) == 13
    at = ok(radio.set_value(radio.options[3]).run())  # K from the encoder output: one row per source letter
    k = chart(at, "L0 cross K per head")
    assert list(k["layout"]["yaxis"]["ticktext"]) == list("fbdacbeg")
    # the code shown is the model's own: the encoder output goes in as cross-attention's kv, and K = k_proj(kv)
    assert any("self.cross_attn(h, enc" in x.value and "self.k_proj(kv)" in x.value for x in at.code) and at.latex


def test_a_new_source_sets_the_decoder_text_and_pads_shorter_lines():
    at = ok(page("attention", preset=REVERSE))
    at = at.text_area(key="att.source").input("abcdefgh\ncab").run()
    ok(at)
    s = at.session_state["gptviz.settings"]
    assert s["text"] == "^hgfedcb\n^ba"
    c = chart(at, "L0 cross-attention weights")
    z = array(c["data"][0]["z"])
    assert np.allclose(z, _reverse_reference("abcdefgh", "^hgfedcb"), atol=1e-5)
    # the second row: 3 source letters, the rest padding, grey in every row and given no weight
    at = at.selectbox(key="w.batch").set_value(1).run()
    c = chart(at, "L0 cross-attention weights")
    z, grey = array(c["data"][0]["z"]), np.isfinite(array(c["data"][1]["z"]))
    assert z.shape == (3, 8) and grey[:, 3:].all() and not grey[:, :3].any()
    assert np.allclose(z[:, :3], _reverse_reference("cab", "^ba"), atol=1e-5)


def test_self_attention_of_the_reverser_is_causal_and_skips_missing_steps():
    at = ok(page("attention", preset=REVERSE))
    at = ok(at.segmented_control(key="att.kind").set_value("Self-attention").run())
    c = chart(at, "L0 attention weights")
    grey = np.isfinite(array(c["data"][1]["z"]))
    assert np.array_equal(grey, np.triu(np.ones((8, 8), bool), 1))  # the decoder's own mask, not the encoder's
    options = at.radio(key="s.pick").options
    assert not any("One projection" in o for o in options)  # no hook_qkv: separate Q, K and V projections
    assert any("Q, split" in o for o in options)


def test_material_preset_draws_cross_attention_over_a_fixed_random_encoder_output():
    at = ok(page("attention", preset="decoder-cross-attention"))
    assert not at.error and not at.warning, messages(at)
    c = chart(at, "L0 cross-attention weights")
    z = array(c["data"][0]["z"])
    assert z.shape == (8, 8) and np.allclose(z.sum(1), 1.0, atol=1e-5)
    assert list(c["layout"]["xaxis"]["ticktext"]) == [f"enc {i}" for i in range(8)]
    at.toggle(key="s.cross.every").set_value(True).run()
    ok(at)
    heads = [x.value for x in at.subheader]
    for word in ("fixed random encoder output", "Q from the decoder", "K from the encoder", "padding mask",
                 "Softmax over encoder positions", "output projection", "residual add"):
        assert any(word in h for h in heads), word
    assert len(at.latex) >= 12 and len(at.code) >= 12
    at = ok(at.segmented_control(key="att.more.cross").set_value("Every layer × every head").run())
    assert any(x.startswith("Cross-attention weights of every head") for x in titles(at))
    at = ok(at.segmented_control(key="att.kind").set_value("Self-attention").run())
    assert any(x.startswith("L0 attention weights") for x in titles(at))


def _start(at, label="Start training"):
    return [b for b in at.button if label in b.label][0].click().run()


def test_training_page_trains_the_reverser_and_shows_its_cross_attention():
    at = ok(page("training"))
    at = at.selectbox(key="train.task").set_value("reverse").run()
    at.number_input(key="train.steps.reverse").set_value(5)
    at = ok(_start(at))
    assert any("Trained for 5 steps" in m.value for m in at.success), messages(at)
    t = titles(at)
    assert "Loss during training (reverse)" in t and "Accuracy (reverse)" in t
    c = chart(at, "Cross-attention after training")
    assert array(c["data"][0]["z"]).shape == (8, 8)
    assert any(m.label == "Layer 0 head 0" for m in at.metric)  # the alignment score
    s = at.session_state["gptviz.settings"]
    assert s["model_key"] and s["source"] == "fbdacbeg" and s["text"] == "^gebcadb"


def test_training_page_runs_the_material_loop_and_its_loss_falls():
    at = ok(page("training"))
    at = at.selectbox(key="train.task").set_value("material").run()
    at.number_input(key="train.steps.material").set_value(15)
    at = ok(_start(at, "Run the material's loop"))
    y = chart(at, "The material's training loop")["data"][0]["y"]
    assert len(y) == 16 and y[-1] < y[0] - 0.1
    assert abs(y[0] - np.log(12)) < 0.3  # an untrained model starts near ln V
    assert any("optim.SGD(model.parameters(), lr=0.01)" in c.value for c in at.code)
    assert any(x.startswith("Cross-attention after the loop") for x in titles(at))
    assert not charts(at)[0]["layout"]["title"]["text"].startswith("Cross")  # the current model comes first


def test_views_cross_attention_is_t_by_s_and_greys_only_padded_source_columns():
    from gptviz.present import matrices

    ck = load_checkpoint(CHECKPOINTS / "reverse.safetensors")
    tok = ck.tokenizer
    src = torch.tensor([tok.encode("abcdefgh"), tok.encode("cab") + [0] * 5])
    src_mask = (torch.arange(8)[None] < torch.tensor([[8], [3]])).long()
    x = torch.tensor([tok.encode("^hgfedcb"), tok.encode("^ba") + [0] * 5])
    x_mask = (torch.arange(8)[None] < torch.tensor([[8], [3]])).long()
    tr = trace(ck.model, x, attention_mask=x_mask, enc_input=src, enc_mask=src_mask).numpy()
    name = "blocks.0.cross_attn.hook_pattern"
    keys = [tok.token_str(int(i)) for i in src[1]]
    m = matrices.step_matrix(tr[name], tr.info(name), list("^ba"), batch=1, head=0, n_pos=3, key_tokens=keys,
                          key_mask=src_mask[1].numpy() == 0)
    assert m.values.shape == (3, 8) and m.cols[:3] == list("cab")
    assert m.masked[:, 3:].all() and not m.masked[:, :3].any()  # no causal triangle, only the padding
    # with no source tokens (a fixed random encoder output) the columns are encoder positions
    scores = "blocks.0.cross_attn.hook_attn_scores"
    m2 = matrices.step_matrix(tr[scores], tr.info(scores), list("^hgfedcb"), batch=0, head=0)
    assert m2.cols == [f"enc {i}" for i in range(8)] and m2.masked is None
    # the default mask is the decoder's own (causal), not the encoder's, which the trace records first
    names = list(tr)
    assert names.index("enc_blocks.0.attn.hook_attn_scores") < names.index("blocks.0.attn.hook_attn_scores")
    assert np.array_equal(matrices.masked_cells(tr, 0), np.triu(np.ones((8, 8), bool), 1))
    cross = matrices.masked_cells(tr, 1, name)
    assert cross.shape == (8, 8) and cross[:, 3:].all() and not cross[:, :3].any()
