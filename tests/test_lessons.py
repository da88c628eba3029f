"""Lessons as data: every shipped lesson loads, bad files name their file and line, and every question's
answer equals an independent computation on a trace made here."""
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from gptviz import GPT, encode_batch, get_tokenizer, preset, trace
from gptviz.interp.head_detector import repeated_probe
from gptviz.present import lessons as L

SHIPPED = ["01_text_to_token_ids", "02_one_attention_head", "03_initial_loss", "04_what_training_changes",
           "05_logits_to_text", "06_attention_is_not_explanation", "07_routes_neurons_features",
           "08_tracing_a_circuit"]


@pytest.fixture(scope="module")
def views():
    from gptviz.ui.sections import load_all

    return load_all()


# --------------------------------------------------------------------------- loading
def test_every_shipped_lesson_loads(views):
    lessons, errors = L.load_folder(L.LESSONS_DIR, views)
    assert not errors, [str(e) for e in errors]
    assert [les.id for les in lessons] == SHIPPED
    for les in lessons:
        assert les.title and len(les.steps) >= 5
        for s in les.steps:
            assert s.title and s.text.strip() and s.line > 0
            assert s.is_hook or s.view in views
    kinds = {s.question["kind"] for les in lessons for s in les.steps if s.question}
    assert {"most_attended", "uniform_loss", "greedy_next", "target_prob", "nucleus_size", "best_head"} <= kinds


GOOD = '''title = "Good"

[[steps]]
title = "One"
view = "blocks.0.attn.hook_pattern"
text = "Hello"
'''


def _write(folder: Path, name: str, text: str) -> Path:
    p = folder / name
    p.write_text(text, encoding="utf-8")
    return p


def test_a_malformed_file_names_the_file_and_line_and_the_others_still_load(tmp_path, views):
    _write(tmp_path, "a_good.toml", GOOD)
    _write(tmp_path, "b_broken.toml", 'title = "Broken"\n\n[[steps]]\ntitle = "One\nview = "hook_embed"\n')
    lessons, errors = L.load_folder(tmp_path, views)
    assert [les.id for les in lessons] == ["a_good"]
    assert len(errors) == 1
    msg = str(errors[0])
    assert msg.startswith("b_broken.toml, line 4:") and "not valid TOML" in msg
    assert errors[0].line == 4


@pytest.mark.parametrize("body, line, words", [
    # an unknown hook, on line 6 where it is named
    ('title = "X"\n\n[[steps]]\ntitle = "A"\ntext = "t"\nview = "blocks.0.attn.hook_nonsense"\n', 6, "unknown hook"),
    # an unknown section name
    ('title = "X"\n[[steps]]\ntitle = "A"\nview = "attention.nonsense"\n', 4, "unknown view 'attention.nonsense'"),
    # an unknown question kind: the line of its kind
    ('title = "X"\n[[steps]]\ntitle = "A"\nview = "hook_embed"\n[steps.question]\nkind = "telepathy"\n', 6,
     "unknown question kind 'telepathy'"),
    # a missing field: the line of the step's header (the second step's)
    ('title = "X"\n[[steps]]\ntitle = "A"\nview = "hook_embed"\n\n[[steps]]\ntitle = "B"\n', 6, "has no 'view'"),
    # an option the view does not take
    ('title = "X"\n[[steps]]\ntitle = "A"\nview = "attention.steps"\noptions = { colour = 3 }\n', 5,
     "has no option 'colour'"),
    # a setting of the wrong type, in a multi-line text's shadow
    ('title = "X"\n[[steps]]\ntitle = "A"\ntext = """\nlayer = 3\n"""\nview = "hook_embed"\nlayer = "two"\n', 8,
     "layer must be a whole number"),
    # a question missing its required parameter
    ('title = "X"\n[[steps]]\ntitle = "A"\nview = "hook_embed"\nquestion = { kind = "nucleus_size" }\n', 5,
     "needs 'top_p'"),
])
def test_bad_lessons_name_the_file_and_line(tmp_path, views, body, line, words):
    p = _write(tmp_path, "bad.toml", body)
    with pytest.raises(L.LessonError) as exc:
        L.load_file(p, views)
    assert str(exc.value).startswith(f"bad.toml, line {line}:"), str(exc.value)
    assert words in str(exc.value)


def test_an_unknown_hook_is_caught_without_the_section_registry(tmp_path):
    p = _write(tmp_path, "hooks.toml", 'title = "X"\n[[steps]]\ntitle = "A"\nview = "hook_embedz"\n')
    with pytest.raises(L.LessonError, match=r"^hooks.toml, line 4: unknown hook 'hook_embedz'"):
        L.load_file(p)


def test_a_preset_list_falls_back_to_the_first_that_ships():
    name, note = L.choose_preset(["checkpoint: no-such-model", "checkpoint: induction", "default"])
    assert name == "checkpoint: induction" and "no-such-model" in note
    assert L.choose_preset("default") == ("default", "")


# --------------------------------------------------------------------------- answers, checked by hand
TEXT = "the cat sat on the mat. the dog sat on the log."


@pytest.fixture(scope="module")
def run():
    """The default model on TEXT, traced here; and the tokenizer, model and batch."""
    tok = get_tokenizer("char-bpe", num_merges=20, lowercase=True)
    cfg = preset("default", vocab_size=tok.vocab_size)
    model = GPT(cfg)
    b = encode_batch(tok, TEXT, cfg.block_size)
    tr = trace(model, b.x, targets=b.y, attention_mask=b.attention_mask)
    return tok, model, b, tr


def _pattern_by_hand(tr, layer: int, head: int) -> np.ndarray:
    """softmax(q kᵀ / √d) with the causal mask, from the recorded q and k: (T, T) for row 0."""
    q = tr[f"blocks.{layer}.attn.hook_q"][0, :, head].double()
    k = tr[f"blocks.{layer}.attn.hook_k"][0, :, head].double()
    s = q @ k.T / math.sqrt(q.shape[-1])
    T = s.shape[0]
    s = s.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
    return torch.softmax(s, -1).numpy()


@pytest.mark.parametrize("head", [0, 1])
def test_most_attended_is_the_argmax_of_the_pattern_row(run, head):
    tok, model, b, tr = run
    live = L.live_from_trace(tr, tok, layer=1, head=head, model=model)
    n = live.n_pos
    pat = _pattern_by_hand(tr, 1, head)
    for query in (-1, 5, n - 3):
        i = n + query if query < 0 else query
        q = L.ask({"kind": "most_attended", "query": query}, live)
        j = int(np.argmax(pat[i, : i + 1]))
        assert q.value == j and q.answer.startswith(f"{j}: ")
        assert q.highlight == {"hook": "blocks.1.attn.hook_pattern", "head": head, "row": i, "col": j}
        assert len(q.choices) <= L.MAX_CHOICES and len(set(q.choices)) == len(q.choices)
    # a token named by its text: its last occurrence
    q = L.ask({"kind": "most_attended", "query": "on", "layer": 0, "head": 0}, live)
    last_on = max(t for t, lab in enumerate(live.tokens) if lab.replace("␣", " ").strip() == "on")
    assert q.highlight["row"] == last_on
    assert q.value == int(np.argmax(_pattern_by_hand(tr, 0, 0)[last_on, : last_on + 1]))
    with pytest.raises(L.QuestionUnavailable, match="no token 'zebra'"):
        L.ask({"kind": "most_attended", "query": "zebra"}, live)


def test_uniform_loss_is_ln_v_of_the_live_vocabulary(run):
    tok, model, b, tr = run
    q = L.ask({"kind": "uniform_loss"}, L.live_from_trace(tr, tok))
    V = tok.vocab_size
    assert q.value == pytest.approx(math.log(V)) and q.answer == f"{math.log(V):.3f}"
    assert len(set(q.choices)) == len(q.choices) >= 4
    # and a bigger vocabulary gives a bigger answer, from the same file
    tok0 = get_tokenizer("char-bpe", num_merges=120, lowercase=True)
    cfg = preset("default", vocab_size=tok0.vocab_size)
    bb = encode_batch(tok0, TEXT, cfg.block_size)
    tr0 = trace(GPT(cfg), bb.x, targets=bb.y, attention_mask=bb.attention_mask)
    assert (L.ask({"kind": "uniform_loss"}, L.live_from_trace(tr0, tok0)).value
            == pytest.approx(math.log(tok0.vocab_size)))


def test_greedy_next_is_the_argmax_of_the_next_token_distribution(run):
    tok, model, b, tr = run
    live = L.live_from_trace(tr, tok, model=model)
    n = live.n_pos
    with torch.no_grad():
        logits, _ = model(b.x[:, :n])
    want = int(logits[0, -1].argmax())
    q = L.ask({"kind": "greedy_next"}, live)
    assert q.value == want and q.answer.startswith(f"'{tok.token_str(want)}'")
    q3 = L.ask({"kind": "greedy_next", "pos": 3}, live)
    assert q3.value == int(logits[0, 3].argmax())


def test_nucleus_size_counts_the_tokens_top_p_keeps(run):
    tok, model, b, tr = run
    live = L.live_from_trace(tr, tok, model=model)
    n = live.n_pos
    with torch.no_grad():
        logits, _ = model(b.x[:, :n])
    for top_p, temperature in ((0.5, 1.0), (0.9, 1.0), (0.9, 0.5)):
        p = np.sort(torch.softmax(logits[0, -1].double() / temperature, -1).numpy())[::-1]
        want = int(np.searchsorted(np.cumsum(p), top_p - 1e-12) + 1)  # fewest tokens whose mass reaches top_p
        q = L.ask({"kind": "nucleus_size", "top_p": top_p, "temperature": temperature}, live)
        assert q.value == want and q.answer == str(want)


def test_target_prob_and_target_at_and_token_count(run):
    tok, model, b, tr = run
    live = L.live_from_trace(tr, tok, model=model)
    n = live.n_pos
    with torch.no_grad():
        logits, _ = model(b.x[:, :n])
    ids = b.x[0, :n].tolist()
    pos = 4
    p = float(torch.softmax(logits[0, pos].double(), -1)[ids[pos + 1]])
    q = L.ask({"kind": "target_prob", "pos": pos}, live)
    assert q.value == pytest.approx(p, rel=1e-5)
    V = tok.vocab_size
    band = 0 if p < 0.5 / V else 1 if p <= 2 / V else 2 if p <= 0.5 else 3
    assert q.correct == band
    q = L.ask({"kind": "target_at", "pos": 2}, live)
    assert q.value == ids[3] and q.answer == f"'{tok.token_str(ids[3])}'"
    q = L.ask({"kind": "target_at", "pos": n - 1}, live)
    assert q.value == -100 and q.answer == L.NO_TARGET
    q = L.ask({"kind": "token_count"}, live)
    assert q.value == len(tok.encode(TEXT)) == n and q.answer == str(n)


def _live_with_loss(ratio: float, V: int = 76) -> tuple[L.Live, float]:
    """A Live whose loss is ``ratio`` × ln V, from logits chosen by hand: one position whose target has logit 0 and
    every other token logit c, so that loss = ln(1 + (V - 1) e^c) = ratio × ln V when e^c = (V^ratio - 1)/(V - 1)."""
    c = math.log((V ** ratio - 1) / (V - 1))
    logits = torch.full((1, V), c, dtype=torch.float64)
    logits[0, 0] = 0.0
    loss = float(F.cross_entropy(logits, torch.tensor([0])))
    assert loss == pytest.approx(ratio * math.log(V), rel=1e-12)
    readings = SimpleNamespace(loss=loss, config=preset("default", vocab_size=V))  # all the question reads
    return L.Live(readings, ["a", "b"], [str(i) for i in range(V)]), loss


BELOW, ABOUT, ABOVE = ("well below ln V", "about ln V", "well above ln V")


def test_loss_vs_uniform_reads_the_live_loss():
    assert all(text.startswith(w) for text, w in zip(L.LOSS_BANDS, (BELOW, ABOUT, ABOVE), strict=True))
    tok = get_tokenizer("char-bpe", num_merges=20, lowercase=True)
    for std, band in ((0.02, ABOUT), (1.0, ABOVE)):
        cfg = preset("default", vocab_size=tok.vocab_size, init_std=std)
        model = GPT(cfg)
        b = encode_batch(tok, TEXT, cfg.block_size)
        tr = trace(model, b.x, targets=b.y, attention_mask=b.attention_mask)
        with torch.no_grad():
            logits, _ = model(b.x)
        loss = float(F.cross_entropy(logits.flatten(0, 1), b.y.flatten(), ignore_index=-100))
        q = L.ask({"kind": "loss_vs_uniform"}, L.live_from_trace(tr, tok))
        assert q.value == pytest.approx(loss, rel=1e-5) and q.answer.startswith(band), (std, loss, q.answer)
    # a trained shipped model on the text it learned: a loss far below ln V (measured 0.126 against ln 76 = 4.331)
    from gptviz.model.checkpoint import load_checkpoint

    ck = load_checkpoint(L.CHECKPOINTS / "text.safetensors")
    model, tok = ck.model, ck.tokenizer
    b = encode_batch(tok, TEXT, model.config.block_size)
    tr = trace(model, b.x, targets=b.y, attention_mask=b.attention_mask)
    with torch.no_grad():
        logits = model.run(b.x, b.attention_mask)
    loss = float(F.cross_entropy(logits.flatten(0, 1), b.y.flatten(), ignore_index=-100))
    assert loss < 0.5 * math.log(tok.vocab_size)
    q = L.ask({"kind": "loss_vs_uniform"}, L.live_from_trace(tr, tok))
    assert q.value == pytest.approx(loss, rel=1e-5) and q.answer.startswith(BELOW), (loss, q.answer)
    # either side of each edge of "about ln V" (0.9 and 1.1 × ln V)
    for ratio, band in ((0.85, BELOW), (0.95, ABOUT), (1.05, ABOUT), (1.15, ABOVE)):
        live, loss = _live_with_loss(ratio)
        q = L.ask({"kind": "loss_vs_uniform"}, live)
        assert q.value == loss and q.answer.startswith(band), (ratio, q.answer)


def test_best_head_by_hand_on_a_trained_model():
    from gptviz.model.checkpoint import load_checkpoint

    ck = load_checkpoint(L.CHECKPOINTS / "induction.safetensors")
    model, tok = ck.model, ck.tokenizer
    b = encode_batch(tok, ck.meta["example"], model.config.block_size)
    tr = trace(model, b.x, targets=b.y, attention_mask=b.attention_mask)
    live = L.live_from_trace(tr, tok, model=model)
    cfg = model.config
    # previous-token: the mean weight on t-1, from the recorded patterns
    prev = np.array([[np.mean([float(tr[f"blocks.{l}.attn.hook_pattern"][0, h, t, t - 1])
                               for t in range(1, live.n_pos)])
                      for h in range(cfg.n_head)] for l in range(cfg.n_layer)])
    q = L.ask({"kind": "best_head", "behaviour": "previous"}, live)
    assert q.value == np.unravel_index(prev.argmax(), prev.shape)
    assert q.answer == "L{} H{}".format(*q.value)
    # induction: on a random run repeated twice, the weight from each second-copy token to the token after its
    # first occurrence
    n = min(32, cfg.block_size // 2)
    idx = repeated_probe(cfg.vocab_size, n, 8, 0)
    pt = trace(model, idx)
    ind = np.zeros((cfg.n_layer, cfg.n_head))
    for l in range(cfg.n_layer):
        pat = pt[f"blocks.{l}.attn.hook_pattern"].double()
        for h in range(cfg.n_head):
            ind[l, h] = np.mean([float(pat[r, h, t, t - n + 1]) for r in range(idx.shape[0]) for t in range(n, 2 * n)])
    q = L.ask({"kind": "best_head", "behaviour": "induction"}, live)
    assert q.value == np.unravel_index(ind.argmax(), ind.shape)


def test_a_step_pins_its_settings_over_the_lessons():
    les = L.load_file(L.LESSONS_DIR / "03_initial_loss.toml")
    big = next(s for s in les.steps if "init_std" in s.settings)
    pins, notes = L.overrides(les, big)
    assert pins == {"untrained": True, "preset": "default", "init_std": 1.0} and not notes
    les5 = L.load_file(L.LESSONS_DIR / "05_logits_to_text.toml")
    pins, _ = L.overrides(les5, les5.steps[0])
    assert pins["text"] == "the cat sat on the" and pins["preset"].startswith("checkpoint: ")
