"""Every user string and token string is escaped wherever it reaches HTML or a Plotly label; the lesson header
regex is linear; lessons are parsed once per change; the initialisation study never touches torch's threads.

Hostile tokens are real: a char-BPE tokenizer trained on a text that repeats them learns merges that spell each
as one token, and a model with that vocabulary reads them."""
import json
import re
import time
from html.parser import HTMLParser

import numpy as np
import pytest
import torch

from gptviz import encode_batch, preset
from gptviz.present import figures, matrices, page_context, readouts
from gptviz.present import lessons as L
from gptviz.present import report as rep
from gptviz.present.figures import initialisation as fi
from gptviz.present.figures import lens as fl
from gptviz.present.lessons.toml_lines import TABLE_HEADER, TomlLines
from gptviz.run.trace import trace
from gptviz.text.tokenizers import CharBPETokenizer
from gptviz.training import init_study as study

SCRIPT_TOKEN = "<td><svg/onload=alert(document.domain)>"
LINK_TOKEN = '<a href="x">t</a>'


def bpe_with(token: str) -> CharBPETokenizer:
    """A char BPE whose merges spell ``token`` as one token (learned from a text that repeats it)."""
    tok = CharBPETokenizer(num_merges=64, lowercase=False).train([token + " "] * 30)
    ids = tok.encode(token)
    assert len(ids) == 1 and tok.token_str(ids[0]) == token
    return tok


class Tags(HTMLParser):
    """Every start tag a browser would build (script bodies are text, as in a browser)."""

    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, list]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, attrs))


# --------------------------------------------------------------------------- the HTML report
def test_a_token_that_spells_markup_stays_text_in_the_report():
    tok = bpe_with(SCRIPT_TOKEN)
    cfg = preset("default").replace(vocab_size=tok.vocab_size)
    text = (SCRIPT_TOKEN + " ") * 3
    s = page_context.pinned(page_context.defaults(), text=text, layer=0, head=0)
    ctx = page_context.Ctx(s=s, cfg=cfg, cfg_json=json.dumps(cfg.to_dict()), tok=tok,
                           batch=encode_batch(tok, text, cfg.block_size), store=rep.Store())
    assert all(lab.startswith(SCRIPT_TOKEN) for lab in ctx.labels())  # cells of the loss-per-token table
    page = rep.report_html(ctx)
    assert SCRIPT_TOKEN not in page
    parser = Tags()
    parser.feed(page)
    assert not [t for t, _ in parser.tags if t == "svg"]
    assert not [(t, a) for t, attrs in parser.tags for a, _ in attrs if a.lower().startswith("on")]
    # shown, as text, in the token list and the per-token table
    assert page.count("&lt;td&gt;&lt;svg/onload=alert(document.domain)&gt;") >= 6


def test_table_writes_a_text_cell_that_starts_with_td_as_text():
    tok = bpe_with(SCRIPT_TOKEN)
    cell = tok.token_str(tok.encode(SCRIPT_TOKEN)[0])
    out = rep._table(["token", "p"], [[cell, rep._num(0.5)]])
    parser = Tags()
    parser.feed(out)
    assert [t for t, _ in parser.tags] == ["table", "thead", "tr", "th", "th", "tbody", "tr", "td", "td"]
    assert '<td class="num" data-value="0.5">0.50000</td>' in out  # the numbers' own cells are kept


# --------------------------------------------------------------------------- Plotly labels
def _strings(node):
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for v in node.values():
            yield from _strings(v)
    elif isinstance(node, (list, tuple)):
        for v in node:
            yield from _strings(v)
    elif isinstance(node, np.ndarray) and node.dtype == object:
        yield from _strings(node.tolist())


def _check(fig, name):
    spec = json.loads(fig.to_json())  # what the browser gets
    found = list(_strings(spec))
    raw = [s for s in found if re.search(r"<\s*/?\s*a\b", s, re.I)]
    assert not raw, (name, raw[:3])
    assert any("&lt;a href=\"x\"&gt;t&lt;/a&gt;" in s for s in found), name  # still there, as text


@pytest.fixture(scope="module")
def link_run():
    """A real model's numbers with a vocabulary whose token 0 is ``LINK_TOKEN`` as written (a char BPE shows a
    space as ␣, so the labels are given here: figures are pure functions of their labels)."""
    from gptviz import GPT

    tok = CharBPETokenizer(num_merges=10).train(["the cat sat on the mat. " * 4])
    cfg = preset("default").replace(vocab_size=tok.vocab_size)
    model = GPT(cfg).eval()
    ids = [0] + tok.encode("the cat") + [0]
    tr = trace(model, torch.tensor([ids]))
    vocab = [LINK_TOKEN] + [tok.token_str(i) for i in range(1, tok.vocab_size)]
    return model, ids, tr, vocab


def test_every_figure_label_built_from_a_token_is_escaped(link_run):
    model, ids, tr, vocab = link_run
    labels = [vocab[i] for i in ids]
    T = len(ids)
    from gptviz.model.hook_names import act_name
    from gptviz.present.descriptions import step_info

    name = act_name("pattern", 0)
    m = matrices.step_matrix(tr[name], step_info(tr, name), labels, 0, 0, masked=matrices.masked_cells(tr, 0))
    d, order = readouts.next_distribution(model, ids, 1.0, 0, 1.0, 12)
    bar_labels = [vocab[i] for i in sorted(set(order) | {0})]
    t = LINK_TOKEN
    built = {
        "heatmap": figures.heatmap(m, f"What “{t}” looks at", clickable=True),
        "heatmap note": figures.heatmap(matrices.Matrix(m.values, m.rows, m.cols, "query", "key", m.kind,
                                                        note=f"about {t}"), "title"),
        "bar_chart": figures.bar_chart(bar_labels, [0.1] * len(bar_labels), title=f"drew “{t}”"),
        "bar_chart vertical": figures.bar_chart(bar_labels, [0.1] * len(bar_labels), horizontal=False),
        "line_chart": figures.line_chart({t: [1.0, 2.0]}, hlines={t: 1.5}, title=t, x_title=t, y_title=t),
        "tiled_heatmap": figures.tiled_heatmap([[np.eye(T)]], [t], [t], title=t),
        "side_by_side": figures.side_by_side(m, m, t, t),
        "token_grid": figures.token_grid([labels], np.array([ids]), np.ones((1, T)), title=t),
        "head_grid": figures.head_grid(np.full((1, 1), 0.5), np.array([[t]], dtype=object), title=t,
                                       hover=np.array([[t]], dtype=object)),
        "lens_heatmap": fl.lens_heatmap(np.full((2, T), 0.5), [t, "b"], labels, labels,
                                        np.array([[0] * T] * 2), np.full((2, T), 0.5), title=t),
        "lens_topk": fl.lens_topk([t, "b"], [[t, "x"], ["y", t]], np.full((2, 2), 0.5), title=t, highlight=t),
        "dla_bars": fl.dla_bars([t, "embed"], [0.5, -0.2], title=t),
        "patch_resid_heatmap": fl.patch_resid_heatmap(np.zeros((2, T)), [t, "b"], labels, title=t),
        "prob_figure": fi.prob_figure(np.full(len(vocab), 1 / len(vocab)), vocab, title=t, target=0),
        "residual_figure": fi.residual_figure([dict(stds=[1.0, 2.0], labels=[t, "b"], init_std=0.02)]),
    }
    assert d.final.shape[0] == len(vocab)
    for name, fig in built.items():
        _check(fig, name)
        _check(figures.fixed_margins(fig), name + " (fixed margins)")
        _check(figures.styled(fig, 1.5, 1.2), name + " (presenter mode)")


def test_label_escaping_keeps_the_figures_own_markup_and_is_idempotent():
    assert figures.escape_label(LINK_TOKEN) == '&lt;a href="x"&gt;t&lt;/a&gt;'
    assert figures.escape_label(figures.escape_label("a & <b>")) == "a &amp; &lt;b&gt;"
    assert figures.escape_markup(f"{LINK_TOKEN}<br>value 1<extra></extra>") == \
        '&lt;a href="x"&gt;t&lt;/a&gt;<br>value 1<extra></extra>'


# --------------------------------------------------------------------------- lessons
def test_a_long_line_is_checked_for_a_table_header_in_linear_time():
    lines = ["[" + " " * 1998 + "x", "[" + " " * 2000 + "]" + " " * 100 + "x", "[[" + "a " * 999 + "!",
             "[" + "-" * 1999]
    for line in lines:
        t0 = time.perf_counter()
        where = TomlLines(f'title = "t"\n{line}\n[[steps]]\ntitle = "s"\n')
        assert time.perf_counter() - t0 < 0.1, line[:10]
        assert where.headers == [(3, "steps")]
    for line, name in [("[[steps]]", "steps"), ("  [[ steps ]]  # a comment", "steps"), ("[ settings ]", "settings"),
                       ("[steps.question]", "steps.question")]:
        assert TABLE_HEADER.match(line).group(1).strip() == name
    assert TABLE_HEADER.match("[x] y") is None


LESSON = '''title = "{title}"

[[steps]]
title = "One step"
view = "hook_embed"
'''


def test_a_lesson_folder_is_parsed_once_until_a_file_changes(tmp_path, monkeypatch):
    path = tmp_path / "01_a.toml"
    path.write_text(LESSON.format(title="First"), encoding="utf-8")
    (tmp_path / "02_bad.toml").write_text('title = "x"\n', encoding="utf-8")
    calls = []
    real = L.loading.load_file
    monkeypatch.setattr(L.loading, "load_file", lambda *a, **k: calls.append(a[0]) or real(*a, **k))
    found, errors = L.load_folder(tmp_path)
    assert [les.title for les in found] == ["First"] and len(errors) == 1 and len(calls) == 2
    again, errors2 = L.load_folder(tmp_path)
    assert len(calls) == 2  # nothing parsed again
    assert again[0] is found[0] and [str(e) for e in errors2] == [str(e) for e in errors]
    path.write_text(LESSON.format(title="Second, longer"), encoding="utf-8")
    assert [les.title for les in L.load_folder(tmp_path)[0]] == ["Second, longer"]
    (tmp_path / "02_bad.toml").unlink()
    assert L.load_folder(tmp_path)[1] == []


# --------------------------------------------------------------------------- torch's threads
def test_the_initialisation_study_never_changes_torch_threads(monkeypatch):
    """torch's thread count, read inside the study's own work (the model calls it makes) and after it."""
    from gptviz.training import loop

    tok = CharBPETokenizer(num_merges=10).train(["the cat sat on the mat. " * 4])
    cfg = preset("default").replace(vocab_size=tok.vocab_size)
    b = encode_batch(tok, "the cat sat on the mat.", cfg.block_size)
    before = torch.get_num_threads()
    target = 2 if before != 2 else 3
    seen = []

    def spy(fn):
        def wrapped(*a, **k):
            seen.append(torch.get_num_threads())
            return fn(*a, **k)
        return wrapped

    monkeypatch.setattr(study, "initial_loss", spy(study.initial_loss))
    monkeypatch.setattr(study, "trace", spy(study.trace))
    monkeypatch.setattr(study, "_mlp_acts_and_grads", spy(study._mlp_acts_and_grads))  # the saturation passes
    monkeypatch.setattr(loop, "train", spy(loop.train))
    torch.set_num_threads(target)
    try:
        study.loss_sweep(cfg, b.x, b.y, b.attention_mask)
        study.activation_sweep(cfg, b.x, b.y, b.attention_mask, scales=(0.02, 1.0), activation="tanh")
        study.residual_stds(cfg, b.x, b.attention_mask)
        study.sweeps(cfg, b.x, b.y, b.attention_mask, scales=(0.02, 1.0))
        study.training_curves(cfg, b.x[0].tolist() * 6, scales=(0.02,), steps=3)
        assert torch.get_num_threads() == target
        assert len(seen) >= 13 + 2 + 1 + 2 + 1 and set(seen) == {target}
    finally:
        torch.set_num_threads(before)
