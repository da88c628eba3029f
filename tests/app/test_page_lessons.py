"""The Lessons page: every step of every shipped lesson renders, every question's revealed answer equals an
independent computation on a trace made here, presenter mode comes from the address bar, and a bad lesson
file is a message while the others still load."""
import html
import json
import math
import re
import shutil

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from apphelp import ROOT, chart, rendered, set_sidebar
from streamlit.testing.v1 import AppTest

from gptviz import GPT, encode_batch, get_tokenizer, preset, trace
from gptviz.interp.head_detector import repeated_probe
from gptviz.present import lessons as L
from gptviz.text.batches import DEFAULT_PROMPT

PAGE = str(ROOT / "app_pages" / "lessons.py")
TIMEOUT = 180
LESSONS = ["01_text_to_token_ids", "02_one_attention_head", "03_initial_loss", "04_what_training_changes",
           "05_logits_to_text", "06_attention_is_not_explanation", "07_routes_neurons_features",
           "08_tracing_a_circuit"]


def open_page(**query) -> AppTest:
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT)
    query.setdefault("preset", "default")  # the configurable model unless a test names another
    for k, v in query.items():
        at.query_params[k] = str(v)
    return at.run()


def clean(at: AppTest) -> AppTest:
    assert not at.exception, [e.message for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    return at


def heading(at: AppTest) -> str:
    """The step's title: a "## " heading, or in presenter mode the top row's <h2 class='present-title'>."""
    for m in at.markdown:
        if m.value.startswith("## "):
            return m.value[3:]
        found = re.fullmatch(r"<h2 class='present-title' style='font-size:[\d.]+rem'>(.*)</h2>", m.value)
        if found:
            return html.unescape(found.group(1))
    raise AssertionError("no step title")


def counter(at: AppTest) -> str:
    return next(re.search(r"Step \d+ of \d+", m.value).group(0) for m in at.markdown
                if "lesson-counter" in m.value and re.search(r"Step \d+ of \d+", m.value))


# --------------------------------------------------------------------------- independent computations
def _checkpoint_for(value) -> str:
    names = value if isinstance(value, list) else [value]
    for name in names:
        if (L.CHECKPOINTS / (name.split(": ", 1)[1] + ".safetensors")).is_file():
            return name.split(": ", 1)[1]
    raise AssertionError(f"none of {names} ships")


def step_run(les, step, text=None, live_preset="default"):
    """The model, tokenizer and trace a step shows, rebuilt here from the lesson file's settings (and what the
    teacher chose: ``text``, ``live_preset``, for what the step does not pin)."""
    pins = {**les.settings, **step.settings}
    prompt = pins.get("prompt", pins.get("text"))
    name = pins.get("preset", live_preset)
    if str(name if not isinstance(name, list) else name[0]).startswith("checkpoint: "):
        from gptviz.model.checkpoint import load_checkpoint

        ck = load_checkpoint(L.CHECKPOINTS / f"{_checkpoint_for(name)}.safetensors")
        tok = ck.tokenizer
        model = GPT(ck.model.config) if pins.get("untrained") else ck.model
        text = prompt or text or ck.meta["example"]
        scored_task = ck.meta.get("task")
    else:
        tok = get_tokenizer(pins.get("tokenizer", "char-bpe"), num_merges=pins.get("merges", 20), lowercase=True)
        over = {k: pins[k] for k in ("init_std",) if k in pins}
        model = GPT(preset("default", vocab_size=tok.vocab_size, **over))
        text = prompt or text or DEFAULT_PROMPT
        scored_task = None
    b = encode_batch(tok, text, model.config.block_size)
    tr = trace(model, b.x, targets=b.y, attention_mask=b.attention_mask)
    return tok, model, b, tr, scored_task


def _pattern_by_hand(tr, layer, head, n):
    q = tr[f"blocks.{layer}.attn.hook_q"][0, :n, head].double()
    k = tr[f"blocks.{layer}.attn.hook_k"][0, :n, head].double()
    s = q @ k.T / math.sqrt(q.shape[-1])
    s = s.masked_fill(torch.triu(torch.ones(n, n, dtype=torch.bool), 1), float("-inf"))
    return torch.softmax(s, -1).numpy()


def _head_scores_by_hand(model, tr, n_pos, behaviour):
    cfg = model.config
    if behaviour == "previous":
        return np.array([[np.mean([float(tr[f"blocks.{l}.attn.hook_pattern"][0, h, t, t - 1]) for t in range(1, n_pos)])
                          for h in range(cfg.n_head)] for l in range(cfg.n_layer)])
    n = min(32, cfg.block_size // 2)
    idx = repeated_probe(cfg.vocab_size, n, 8, 0)
    pt = trace(model, idx)
    return np.array([[np.mean([float(pt[f"blocks.{l}.attn.hook_pattern"][r, h, t, t - n + 1])
                               for r in range(idx.shape[0]) for t in range(n, 2 * n)])
                      for h in range(cfg.n_head)] for l in range(cfg.n_layer)])


def expected(les, step, shown_prompt: str, text=None, live_preset="default"):
    """(the answer's value, a check on the revealed label) worked out here, without the page or ask()."""
    tok, model, b, tr, _ = step_run(les, step, text, live_preset)
    spec = step.question
    kind = spec["kind"]
    n = int(b.attention_mask[0].sum())
    ids = b.x[0, :n].tolist()
    with torch.no_grad():
        logits, _ = model(b.x[:1, :n])
    V = model.config.vocab_size
    if kind == "token_count":
        return n, str(n)
    if kind == "target_at":
        t = int(b.y[0, spec.get("pos", 2)])
        return t, f"'{tok.token_str(t)}'"
    if kind == "most_attended":
        pins = {**les.settings, **step.settings}
        layer, head = pins.get("layer", 0), pins.get("head", 0)
        i = n + spec.get("query", -1) if spec.get("query", -1) < 0 else spec["query"]
        j = int(np.argmax(_pattern_by_hand(tr, layer, head, n)[i, : i + 1]))
        return j, f"{j}: '{tok.token_str(ids[j])}'"
    if kind == "uniform_loss":
        return pytest.approx(math.log(V)), f"{math.log(V):.3f}"
    if kind == "loss_vs_uniform":
        with torch.no_grad():
            loss = float(F.cross_entropy(model(b.x)[0].flatten(0, 1), b.y.flatten(), ignore_index=-100))
        band = 0 if loss < 0.9 * math.log(V) else 1 if loss <= 1.1 * math.log(V) else 2
        return pytest.approx(loss, rel=1e-4), L.LOSS_BANDS[band]
    if kind == "target_prob":
        pos = int(re.search(r"At token (\d+)", shown_prompt).group(1))
        p = float(torch.softmax(logits[0, pos].double(), -1)[ids[pos + 1]])
        band = 0 if p < 0.5 / V else 1 if p <= 2 / V else 2 if p <= 0.5 else 3
        return pytest.approx(p, rel=1e-4), L.PROB_BANDS[band]
    if kind == "greedy_next":
        t = int(logits[0, -1].argmax())
        return t, f"'{tok.token_str(t)}'"
    if kind == "nucleus_size":
        p = np.sort(torch.softmax(logits[0, -1].double() / spec.get("temperature", 1.0), -1).numpy())[::-1]
        k = int(np.searchsorted(np.cumsum(p), spec["top_p"] - 1e-12) + 1)
        return k, str(k)
    if kind == "best_head":
        s = _head_scores_by_hand(model, tr, n, spec["behaviour"])
        lh = tuple(int(v) for v in np.unravel_index(s.argmax(), s.shape))
        return lh, f"L{lh[0]} H{lh[1]}"
    raise AssertionError(kind)


def reveal(at: AppTest, lid: str, i: int) -> tuple[AppTest, str, str]:
    """Pick the first answer, reveal; return the question asked and the revealed answer's text."""
    radio = at.radio(key=f"lessons.answer.{lid}.{i}")
    assert [b for b in at.button if b.key == f"lessons.reveal.{lid}.{i}"][0].disabled  # commit first
    at = clean(radio.set_value(0).run())
    at = clean(at.button(key=f"lessons.reveal.{lid}.{i}").click().run())
    shown = rendered(next(s.value for s in at.success if s.value.startswith("**Answer: ")))
    prompt = at.session_state["lessons.answer"]["prompt"]
    assert any(m.value == f"**{prompt}**" for m in at.markdown)  # the question the class saw
    return at, prompt, shown


# --------------------------------------------------------------------------- every lesson, every step
@pytest.mark.parametrize("lid", LESSONS)
def test_every_step_renders_and_every_answer_is_the_live_models(lid):
    les = L.load_file(L.LESSONS_DIR / f"{lid}.toml")
    at = clean(open_page())
    at = clean(at.selectbox(key="lessons.pick").set_value(lid).run())
    asked = 0
    for i, step in enumerate(les.steps):
        assert heading(at) == step.title and counter(at) == f"Step {i + 1} of {len(les.steps)}"
        if step.question:
            at, prompt, shown = reveal(at, lid, i)
            value, label = expected(les, step, prompt)
            got = at.session_state["lessons.answer"]
            assert got["lesson"] == lid and got["step"] == i
            assert (tuple(got["value"]) if isinstance(got["value"], (tuple, list)) else got["value"]) == value
            assert shown.startswith(f"**Answer: {label}**"), (shown, label)
            asked += 1
        if i < len(les.steps) - 1:
            at = clean(at.button(key="lessons.next").click().run())
    assert asked == sum(1 for s in les.steps if s.question)
    assert at.button(key="lessons.next").disabled  # the last step
    at = clean(at.button(key="lessons.prev").click().run())
    assert heading(at) == les.steps[-2].title


@pytest.mark.parametrize("live_preset", ["default", "checkpoint: text"])
def test_the_answer_follows_the_teachers_text_and_model(live_preset):
    """Lesson 2 pins no text and no model: change them in the sidebar and the answer is theirs."""
    les = L.load_file(L.LESSONS_DIR / "02_one_attention_head.toml")
    k = next(i for i, s in enumerate(les.steps) if s.question)
    text = "a small model reads one token at a time and guesses"
    at = set_sidebar(open_page(lesson="02_one_attention_head", lstep=k + 1, preset=live_preset), "text", text)
    clean(at)
    assert heading(at) == les.steps[k].title
    at, prompt, shown = reveal(at, "02_one_attention_head", k)
    value, label = expected(les, les.steps[k], prompt, text=text, live_preset=live_preset)
    assert at.session_state["lessons.answer"]["value"] == value and shown.startswith(f"**Answer: {label}**")
    # the answer is drawn on the live pattern: its query row outlined, its cell boxed
    fig = chart(at, "L0 attention weights")
    shapes = fig["layout"]["shapes"]
    n = len(fig["data"][0]["y"])
    assert any(s.get("name") == "selected query" and s["y0"] == n - 1.5 for s in shapes)
    assert any(s.get("name") == "answer" and s["x0"] == value - 0.5 for s in shapes)


def _title_sizes(at: AppTest) -> list[int]:
    out = []
    for c in at.get("plotly_chart"):
        t = json.loads(c.proto.spec)["layout"].get("title", {})
        if isinstance(t, dict) and "font" in t:
            out.append(t["font"]["size"])
    return out


def test_presenter_mode_comes_from_the_address_bar():
    normal = clean(open_page(lesson="02_one_attention_head", lstep=7))
    assert not normal.toggle(key="lessons.present").value
    at = clean(open_page(present=1, lesson="02_one_attention_head", lstep=7))
    assert at.toggle(key="lessons.present").value
    assert heading(at) == heading(normal) == "Softmax: the attention weights" and counter(at) == "Step 7 of 11"
    assert _title_sizes(normal) and set(_title_sizes(normal)) == {18}
    assert set(_title_sizes(at)) == {27}  # font_scale 1.5, per call: the module's fonts are untouched
    assert max(json.loads(c.proto.spec)["layout"]["height"] for c in at.get("plotly_chart")) <= 370
    assert any("font-size: 1.3rem" in m.value for m in at.markdown)  # larger Markdown
    assert at.query_params["present"] == "1"  # kept in the address bar while moving on
    at = clean(at.button(key="lessons.next").click().run())
    assert at.query_params["present"] == "1" and at.query_params["lstep"] == "8"
    # the arrow keys are the buttons' shortcuts
    assert at.button(key="lessons.next").proto.shortcut == "right"
    assert at.button(key="lessons.prev").proto.shortcut == "left"
    at = clean(at.toggle(key="lessons.present").set_value(False).run())
    assert "present" not in at.query_params and set(_title_sizes(at)) == {18}


def test_a_bad_lesson_file_is_a_message_and_the_others_still_load(tmp_path, monkeypatch):
    for p in L.LESSONS_DIR.glob("*.toml"):
        shutil.copy(p, tmp_path / p.name)
    (tmp_path / "99_broken.toml").write_text('title = "Broken"\n\n[[steps]]\ntitle = "A"\n'
                                             'view = "blocks.0.attn.hook_wrong"\n', encoding="utf-8")
    monkeypatch.setattr(L, "LESSONS_DIR", tmp_path)
    at = clean(open_page())
    warning = " ".join(w.value for w in at.warning)
    assert "99_broken.toml, line 5: unknown hook 'blocks.0.attn.hook_wrong'" in warning
    assert at.selectbox(key="lessons.pick").options == [
        f"{k + 1}. {L.load_file(tmp_path / f'{lid}.toml').title}" for k, lid in enumerate(LESSONS)]
