"""The Generation page's branching section on the Shakespeare GPT: click a generated token, force another, and the
two continuations it shows (tokens and every probability) are those of a greedy loop written here in plain torch."""
import numpy as np
import torch
import torch.nn.functional as F
from apphelp import array, chart, charts, ok, page

from gptviz.model.checkpoint import load_checkpoint
from gptviz.paths import CHECKPOINTS
from gptviz.present.figures import escape_label


def hand_greedy(model, prompt, n, force=None):
    ctx, toks, probs = list(prompt), [], []
    for step in range(n):
        with torch.no_grad():
            logits = model(torch.tensor([ctx[-model.config.block_size:]]))[0][0, -1]
        p = F.softmax(logits.double(), dim=-1)
        t = int(p.argmax()) if force is None or step != force[0] else force[1]
        toks.append(t)
        probs.append(float(p[t]))
        ctx.append(t)
    return toks, probs


def _paths(at):
    c = chart(at, "Two continuations")["data"][0]
    return array(c["z"]).astype(float), c["text"]


def test_forcing_a_token_shows_two_continuations_of_a_hand_written_greedy_loop():
    at = ok(page("generation", opening=True))
    ck = load_checkpoint(CHECKPOINTS / "shakespeare.safetensors")
    prompt = ck.tokenizer.encode(at.text_input(key="gen.prompt").value)
    n = at.slider(key="gen.n").value
    orig, orig_p = hand_greedy(ck.model, prompt, n)

    at.button_group(key="gen.branch.at").set_value(3).run()  # click the 4th generated token
    choice = at.selectbox(key="gen.branch.force.3")
    options = list(choice.options)
    assert len(options) >= 5 and all("p = " in o for o in options)  # the alternatives, with their probabilities
    forced_id = choice.value
    with torch.no_grad():
        logits = ck.model(torch.tensor([prompt + orig[:3]]))[0][0, -1]
    ranked = [i for i in torch.argsort(logits, descending=True).tolist() if i != orig[3]]
    assert forced_id == ranked[0]  # the first choice offered is the most likely other token
    at.selectbox(key="gen.branch.force.3").set_value(ranked[2]).run()
    ok(at)
    forced, forced_p = hand_greedy(ck.model, prompt, n, force=(3, ranked[2]))
    z, text = _paths(at)
    assert z.shape == (2, n)
    assert np.allclose(z[0], orig_p, atol=1e-5) and np.allclose(z[1], forced_p, atol=1e-5)
    label = [escape_label(ck.tokenizer.token_str(i)) for i in range(ck.model.config.vocab_size)]
    assert text == [[label[i] for i in orig], [label[i] for i in forced]]
    assert forced[3] == ranked[2] and forced[:3] == orig[:3]
    part = next(i for i in range(n) if orig[i] != forced[i])
    assert part == 3
    shapes = chart(at, "Two continuations")["layout"]["shapes"]
    assert shapes[0]["x0"] == part - 0.5  # the step where they part is outlined
    words = " ".join(m.value for m in at.markdown)
    assert "**Original:**" in words and "**Forced:**" in words
    assert any("They part at step 4" in c.value for c in at.caption)


def test_sampled_branching_uses_the_pages_choice_and_seed():
    from gptviz.run.generation import generate

    at = page("generation", opening=True)
    at.radio(key="gen.mode").set_value("sampled").run()
    at.number_input(key="gen.seed").set_value(5).run()
    at.slider(key="gen.n").set_value(6).run()
    ok(at)
    ck = load_checkpoint(CHECKPOINTS / "shakespeare.safetensors")
    prompt = ck.tokenizer.encode(at.text_input(key="gen.prompt").value)
    want = [s.token for s in generate(ck.model, prompt, 6, 1.0, greedy=False, seed=5)]
    label = [escape_label(ck.tokenizer.token_str(i)) for i in range(ck.model.config.vocab_size)]
    z, text = _paths(at)
    assert text[0] == [label[i] for i in want] and z.shape == (2, 6)
    assert text[1][0] != text[0][0]  # forced at the first step by default
    assert any("sampled with seed 5" in c.value for c in at.caption)


def test_on_a_big_model_branching_waits_for_a_click():
    at = ok(page("generation", preset="gpt2-small", tokenizer="gpt2", text="the cat sat"))
    assert [b for b in at.button if b.label == "Generate and branch"]
    assert not [t for t in (c.get("layout", {}).get("title", {}).get("text", "") for c in charts(at))
                if t.startswith("Two continuations")]


def test_sampled_at_a_low_temperature_with_top_p_the_page_shows_the_models_own_probabilities():
    """Sampled at temperature 0.6 with top-p 0.7: the original continuation is ``generate``'s with those settings, and
    every probability shown (both rows) is softmax of the model's raw logits by a plain forward pass over the tokens
    shown, not the tempered nucleus they were drawn from."""
    from gptviz.run.generation import generate

    at = page("generation", opening=True)
    at.radio(key="gen.mode").set_value("sampled")
    at.slider(key="gen.temp").set_value(0.6)
    at.slider(key="gen.topp").set_value(0.7)
    at.slider(key="gen.n").set_value(5)
    ok(at.run())
    assert any("sampled with seed 0" in c.value for c in at.caption)
    ck = load_checkpoint(CHECKPOINTS / "shakespeare.safetensors")
    prompt = ck.tokenizer.encode(at.text_input(key="gen.prompt").value)
    assert len(prompt) + 5 <= ck.model.config.block_size
    want = [s.token for s in generate(ck.model, prompt, 5, 0.6, top_p=0.7, greedy=False, seed=0)]
    label = [escape_label(ck.tokenizer.token_str(i)) for i in range(ck.model.config.vocab_size)]
    ids = {}
    for i, s in enumerate(label):
        ids.setdefault(s, []).append(i)
    z, text = _paths(at)
    assert text[0] == [label[i] for i in want] and z.shape == (2, 5)
    for row, shown in enumerate(text):
        toks = []
        for s in shown:
            assert len(ids[s]) == 1, s  # the label names one token
            toks.append(ids[s][0])
        with torch.no_grad():  # one pass over prompt + continuation gives every step's logits (it fits the context)
            logits = ck.model(torch.tensor([prompt + toks]))[0][0, len(prompt) - 1:-1]
        p = F.softmax(logits.double(), dim=-1)
        assert np.allclose(z[row], [float(p[s, t]) for s, t in enumerate(toks)], atol=1e-5), row
