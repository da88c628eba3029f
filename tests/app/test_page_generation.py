import numpy as np
from apphelp import chart, ok, page


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
