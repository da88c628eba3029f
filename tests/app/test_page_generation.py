import numpy as np
from apphelp import chart, ok, page, titles


def bars(at, title):
    return np.asarray(chart(at, title)["data"][0]["x"], dtype=float)


def test_distribution_stages_and_controls():
    at = ok(page("generation"))
    raw = bars(at, "softmax(logits)")
    assert abs(bars(at, "The distribution").sum() - raw.sum()) < 1e-6  # nothing reshaped by default
    at.number_input(key="gen.topk").set_value(3).run()
    final = bars(at, "The distribution")
    assert (final > 0).sum() == 3 and abs(final.sum() - 1) < 1e-6
    at.slider(key="gen.temp").set_value(0.0).run()
    assert (bars(at, "The distribution") > 0).sum() == 1


def _engine_run(temperature, greedy, seed, n=12):
    """The page's default model and prompt, generated with the engine directly."""
    from gptviz import GPT, get_tokenizer, preset
    from gptviz.run.generation import generate
    from gptviz.text.batches import DEFAULT_PROMPT

    tok = get_tokenizer("char-bpe", num_merges=20, lowercase=True)
    cfg = preset("default", vocab_size=tok.vocab_size)
    ids = tok.encode(DEFAULT_PROMPT.splitlines()[0])[-cfg.block_size:]
    return [s.token for s in generate(GPT(cfg), ids, n, temperature, greedy=greedy, seed=seed)]


def _generate(at):
    return [b for b in at.button if b.label == "Generate"][0].click().run()


def _engine_next(ids):
    """The default model's next-token probabilities after ``ids``, in plain PyTorch (its forward pass, a softmax)."""
    import torch

    from gptviz import GPT, get_tokenizer, preset

    tok = get_tokenizer("char-bpe", num_merges=20, lowercase=True)
    model = GPT(preset("default", vocab_size=tok.vocab_size))
    with torch.no_grad():
        logits = model(torch.tensor([ids[-model.config.block_size:]]))[0][0, -1]
    return torch.softmax(logits.double(), -1).numpy(), tok


def test_the_distribution_is_the_models_own_after_the_last_prompt_token_before_and_after_generating():
    """The first chart's bars (softmax(logits)) are the model's next-token probabilities after the prompt's last token,
    computed here with a plain forward pass: each bar's token and height, and the heights are the 12 largest. After a
    generation the pattern reads prompt + generated tokens, but the distribution stays the prompt's."""
    from gptviz import get_tokenizer
    from gptviz.text.batches import DEFAULT_PROMPT

    ids = get_tokenizer("char-bpe", num_merges=20, lowercase=True).encode(DEFAULT_PROMPT.splitlines()[0])
    p, tok = _engine_next(ids)
    by_label = {tok.token_str(i): i for i in range(tok.vocab_size)}
    at = ok(page("generation"))
    for step in ("before", "after"):
        spec = chart(at, "softmax(logits)")
        labels, got = spec["layout"]["yaxis"]["ticktext"], np.asarray(spec["data"][0]["x"], dtype=float)
        assert len(labels) == len(got) == 12, step
        np.testing.assert_allclose(got, [p[by_label[t]] for t in labels], rtol=1e-5, atol=1e-8, err_msg=step)
        np.testing.assert_allclose(np.sort(got)[::-1], np.sort(p)[::-1][:12], rtol=1e-5, atol=1e-8, err_msg=step)
        if step == "before":
            at = _generate(at)
            assert at.session_state["gptviz.gen"]["tokens"]
            at = ok(at.run())  # a rerun with the generated tokens in the session (the click's run drew them last)
            assert "(prompt + generated)" in " ".join(t for t in titles(at))


def test_generate_greedy_and_sampled():
    at = _generate(page("generation"))
    ok(at)
    g = at.session_state["gptviz.gen"]
    assert g["mode"] == "greedy" and g["tokens"] == _engine_run(1.0, True, 0)
    greedy = list(g["tokens"])

    at.slider(key="gen.temp").set_value(1.5).run()
    at.radio(key="gen.mode").set_value("sampled").run()
    at = _generate(at)
    ok(at)
    g = at.session_state["gptviz.gen"]
    sampled = list(g["tokens"])
    assert g["mode"] == "sampled" and sampled == _engine_run(1.5, False, 0)  # sampled mode really ran
    assert sampled != greedy
    assert _generate(at).session_state["gptviz.gen"]["tokens"] == sampled  # same seed, same run
    at.number_input(key="gen.seed").set_value(7).run()
    other = _generate(at).session_state["gptviz.gen"]["tokens"]
    assert other == _engine_run(1.5, False, 7) and other != sampled
    at.slider(key="gen.step").set_value(3).run()
    assert chart(at, "Step 3: drew")


def test_empty_prompt_is_a_message():
    at = page("generation")
    at.text_input(key="gen.prompt").input("€€€").run()
    ok(at) if at.get("plotly_chart") else None
    assert not at.exception
    assert any("no tokens" in w.value for w in at.warning)


def test_every_query_label_of_the_pattern_has_a_line_of_its_own():
    """At 340 px, 18 rows had 10.5 px each and their 14-px labels sat on one another (looked at in Chromium). The
    plot's height, less its margins, gives each row at least one line of the tick font (1.2 × 14 px)."""
    from gptviz.model.checkpoint import load_checkpoint
    from gptviz.paths import CHECKPOINTS

    at = ok(page("generation", opening=True))
    fig = chart(at, "What each token looks at")
    lay = fig["layout"]
    ck = load_checkpoint(CHECKPOINTS / "shakespeare.safetensors")
    rows = len(ck.tokenizer.encode(ck.meta["example"]))  # the opening model's example line is the prompt
    assert rows == 18 and len(lay["yaxis"]["ticktext"]) == rows
    assert (lay["height"] - lay["margin"]["t"] - lay["margin"]["b"]) / rows >= 1.2 * 14
