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
    """The page's alignment score of each head, checked on the model it trained: its cross-attention patterns are
    caught here by torch forward hooks in a plain forward pass (not the app's trace or ``alignment``), on the 200
    sequences the score is defined over (seeded as the page seeds them), and the weight on source letter 7 - t at
    output position t is averaged by hand."""
    from gptviz.ui import resources

    at = ok(page("training"))
    at = at.selectbox(key="train.task").set_value("reverse").run()
    at.number_input(key="train.steps.reverse").set_value(5)
    at.number_input(key="train.nh.reverse").set_value(2)  # two heads: two scores, each must be its own head's
    at = ok(_start(at))
    assert any("Trained for 5 steps" in m.value for m in at.success), messages(at)
    t = titles(at)
    assert "Loss during training (reverse)" in t and "Accuracy (reverse)" in t
    s = at.session_state["gptviz.settings"]
    assert s["model_key"] and s["source"] == "fbdacbeg" and s["text"] == "^gebcadb"

    entry = resources.registered(s["model_key"])
    model, tok = entry.model, entry.tokenizer
    assert (model.config.n_layer, model.config.n_head) == (1, 2)
    patterns = []

    def record(_module, _inputs, output):
        patterns.append(output.detach().double().numpy())

    def cross_patterns(src: torch.Tensor, dec: torch.Tensor) -> list[np.ndarray]:
        """Each decoder layer's cross-attention weights (B, head, T, S), caught at its pattern's hook point."""
        patterns.clear()
        handles = [blk.cross_attn.hook_pattern.register_forward_hook(record) for blk in model.transformer.h]
        try:
            with torch.no_grad():
                model(dec, enc_input=src)
        finally:
            for hd in handles:
                hd.remove()
        return list(patterns)

    # the score's sequences: 200 sources of 8 letters from a..j (torch.Generator seeded 1), the decoder reading ^
    # and then the reversal less its last letter
    n, L = 200, 8
    letters = torch.tensor([tok.encode(c)[0] for c in "abcdefghij"])
    src = letters[torch.randint(0, 10, (n, L), generator=torch.Generator().manual_seed(1))]
    start = tok.encode("^")[0]
    dec = torch.tensor([[start] + row[::-1][:-1] for row in src.tolist()])
    (p,) = cross_patterns(src, dec)
    assert p.shape == (n, 2, L, L) and np.allclose(p.sum(-1), 1.0)
    want = [sum(p[b, h, t, L - 1 - t] for b in range(n) for t in range(L)) / (n * L) for h in range(2)]

    shown = {m.label: m.value for m in at.metric if m.label.startswith("Layer ")}
    assert list(shown) == ["Layer 0 head 0", "Layer 0 head 1"]
    assert [shown[f"Layer 0 head {h}"] for h in range(2)] == [f"{w:.3f}" for w in want]
    assert f"{want[0]:.3f}" != f"{want[1]:.3f}", "the two heads' scores differ as shown: swapped, they would fail"
    # the scores the metrics are drawn from, to float precision (5 steps leave every head near 1/8 = 0.125, but a
    # neighbouring source letter's weight differs from the aligned one's by about 5e-4)
    run = at.session_state["gptviz.train.reverse"]
    assert np.allclose(np.asarray(run["align"]), [want], rtol=0, atol=1e-6)

    # the heatmap: the best-aligned head's cross-attention on the example, as the hooks catch it
    head = int(np.argmax(want))
    c = chart(at, f"Cross-attention after training · layer 0 head {head}")
    z = array(c["data"][0]["z"])
    (ex,) = cross_patterns(torch.tensor([tok.encode("fbdacbeg")]), torch.tensor([tok.encode("^gebcadb")]))
    assert z.shape == (8, 8) and np.allclose(z, ex[0, head], atol=1e-6)


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
