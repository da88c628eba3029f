"""The HTML report: ``python -m gptviz.report`` writes one self-contained file (plotly.js inlined, no URL to
load), one figure per step of the chosen layer, and a loss section whose numbers are the model's own."""
import importlib.util
import json
import math
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
import torch.nn.functional as F

from gptviz import GPT, describe, encode_batch, get_tokenizer, preset, trace
from gptviz.present import report as rep

ROOT = Path(__file__).resolve().parents[1]
TEXT = "the cat sat on the mat."
LAYER, HEAD = 1, 1


def run(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "gptviz.report", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = tmp_path_factory.mktemp("report") / "sub" / "report.html"
    res = run("--text", TEXT, "--preset", "default", "--layer", str(LAYER), "--head", str(HEAD), "--out", str(out))
    assert res.returncode == 0, res.stderr
    return out, out.read_text(encoding="utf-8"), res


@pytest.fixture(scope="module")
def independent():
    """The same model and text, traced here without the report's code: the settings' defaults are char BPE
    with 20 merges, lowercase, and the "default" preset's shape (seed 0)."""
    tok = get_tokenizer("char-bpe", num_merges=20, lowercase=True)
    cfg = preset("default").replace(vocab_size=tok.vocab_size)
    model = GPT(cfg)
    b = encode_batch(tok, TEXT, block_size=cfg.block_size)
    tr = trace(model, b.x, targets=b.y, attention_mask=b.attention_mask)
    return tok, cfg, b, tr


class Attrs(HTMLParser):
    def __init__(self):
        super().__init__()
        self.urls, self.tags = [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        for k, v in attrs:
            if k in ("src", "href", "xlink:href", "action", "data", "poster", "srcset") and v:
                self.urls.append((tag, k, v))


def _plotly_js():
    from plotly.offline import get_plotlyjs

    return get_plotlyjs()


def test_the_command_writes_one_file(written):
    out, page, res = written
    assert out.is_file() and out.stat().st_size > 1_000_000
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert "wrote" in res.stdout and str(out) in res.stdout


def test_no_script_or_stylesheet_comes_from_a_url(written):
    _, page, _ = written
    p = Attrs()
    p.feed(page)
    for tag, attr, value in p.urls:
        assert "http://" not in value and "https://" not in value, (tag, attr, value)
        assert not value.startswith("//"), (tag, attr, value)
    scripts = [a for t, a in p.tags if t == "script"]
    assert scripts and all("src" not in a for a in scripts), "every script is inline"
    assert not [a for t, a in p.tags if t in ("link", "iframe", "img", "object", "embed")]
    assert not re.search(r"@import|url\(\s*['\"]?(https?:)?//", page.replace(_plotly_js(), "")), "no CSS import"
    # Other occurrences: plotly.js itself names URLs in its code (map tiles, licences, the SVG namespace);
    # none is loaded by a heatmap. Outside plotly.js the file names no URL at all (the figures' JSON included).
    js = _plotly_js()
    rest = page.replace(js, "")
    assert "http://" not in rest and "https://" not in rest, re.findall(r"https?://\S{0,60}", rest)[:5]


def test_plotly_js_is_inlined_once(written):
    _, page, _ = written
    js = _plotly_js()
    banner = js[:60]
    assert re.match(r"/\*\*\s*\* plotly\.js v\d+\.\d+\.\d+", banner), banner
    assert page.count(banner) == 1
    assert js in page, "the whole of plotly.js, byte for byte"


def test_one_figure_per_step(written, independent):
    _, page, _ = written
    _, _, _, tr = independent
    expected = [n for n in tr if n != "hook_loss" and tr.info(n).layer in (None, LAYER)]
    assert len(expected) == 30  # 2 embeddings + 22 steps of a layer + 3 of the final norm + logits, probs, loss/token
    calls = re.findall(r'gptvizPlot\("fig-(\d+)", \{', page)
    divs = re.findall(r'<div class="figure" id="fig-(\d+)"></div>', page)
    assert calls == divs == [str(i) for i in range(len(expected))]
    # each figure sits in its step's section, in the trace's order, with its title, formula and sentence
    sections = re.findall(r'<section class="step" id="step-(\d+)"><h3>\d+\. (.*?)</h3>'
                          r'<p class="meta"><code>(.*?)</code>',
                          page)
    assert [s[2] for s in sections] == expected
    import html as _html

    for name in expected:
        info = describe(name, tr.config)
        assert _html.escape(info.formula, quote=True) in page
        assert _html.escape(info.explanation, quote=True) in page
    # the figures' titles, read as data from their JSON (however it escapes "·"): each step's own title, with the
    # chosen head for a per-head step
    figs = _figures(page)
    assert [i for i, _, _ in figs] == list(range(len(expected)))
    want = [describe(n, tr.config).title + (f" · head {HEAD}" if "head" in describe(n, tr.config).axes else "")
            for n in expected]
    assert [f["layout"]["title"]["text"] for _, _, f in figs] == want
    assert f"L{LAYER} attention weights · head {HEAD}" in want
    assert not [f for _, _, f in figs if f["layout"]["title"]["text"].startswith("L0 ")], "only the chosen layer's"


def _figures(page: str) -> list[tuple[int, str, dict]]:
    """Every figure of a report: (its number, its JSON as written, that JSON parsed). Nothing in the JSON can
    close its <script> (``<`` is always escaped), so the first ``);</script>`` after it ends it."""
    found = re.findall(r'gptvizPlot\("fig-(\d+)", (.*?)\);</script>', page)
    return [(int(i), raw, json.loads(raw)) for i, raw in found]


def _canonical(fig: dict) -> str:
    """One way to write a figure, fixed here: the standard library's compact JSON, ASCII only (every other
    character as a \\u escape), keys in their order, no NaN; then ``<``, ``>`` and ``&`` as \\u escapes too."""
    text = json.dumps(fig, ensure_ascii=True, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def test_every_figure_is_written_in_one_canonical_form(written):
    """The file the command wrote: every figure's JSON is ASCII and byte for byte the canonical writing of its own
    data, so two machines (with or without orjson) write the same file. orjson writes "·" as it is and plotly's
    standard-library engine writes "/" as \\u002f: neither is this form."""
    _, page, _ = written
    figs = _figures(page)
    assert len(figs) == 30
    for i, raw, fig in figs:
        assert raw.isascii(), (i, [c for c in raw if not c.isascii()][:5])
        assert raw == _canonical(fig), i
    titles = [f["layout"]["title"]["text"] for _, _, f in figs]
    assert any(not t.isascii() for t in titles), "some title has a character outside ASCII to escape"


def _cells(page: str, table_id: str) -> list[list[str]]:
    m = re.search(rf'<table[^>]*id="{table_id}".*?</table>', page, re.S)
    assert m, table_id
    def cell(attrs, text):
        v = re.search(r'data-value="([^"]*)"', attrs)
        return (v.group(1) if v else ""), text

    return [[cell(a, x) for a, x in re.findall(r"<td([^>]*)>(.*?)</td>", row)]
            for row in re.findall(r"<tr[^>]*>(.*?)</tr>", m.group(0), re.S)]


def test_the_loss_numbers_are_the_models_own(written, independent):
    _, page, _ = written
    tok, cfg, b, tr = independent
    summary = dict(re.findall(r'<tr data-key="(\w+)"><th>[^<]*</th><td class="num" data-value="([^"]+)"', page))
    ref = F.cross_entropy(tr["hook_logits"].reshape(-1, cfg.vocab_size), b.y.reshape(-1), ignore_index=-100)
    assert float(summary["loss"]) == pytest.approx(float(tr.loss), rel=1e-6)
    assert float(summary["cross_entropy"]) == pytest.approx(float(ref), rel=1e-6)
    assert float(summary["uniform"]) == pytest.approx(math.log(cfg.vocab_size), rel=1e-12)
    assert "scored" not in summary  # the configurable model has no task
    rows = [r for r in _cells(page, "loss-per-token") if r]
    T = b.lengths[0]
    assert len(rows) == T
    tp = tr.breakdown["target_probs"][0].numpy()
    nll = tr["hook_loss_per_token"][0].numpy()
    for t, row in enumerate(rows):
        values = [v for v, _ in row]
        texts = [x for _, x in row]
        assert texts[1] == str(t)
        y = int(b.y[0, t])
        if y == -100:
            assert values[4] == values[5] == "nan"
            continue
        assert float(values[4]) == pytest.approx(float(tp[t]), rel=1e-6)
        assert float(values[5]) == pytest.approx(float(nll[t]), rel=1e-6)
        import html as _html

        assert _html.unescape(texts[3]) == tok.token_str(y)
    # the mean of the table's −log p is the loss
    shown = np.array([float(r[5][0]) for r in rows if r[5][0] != "nan"])
    assert shown.mean() == pytest.approx(float(tr.loss), rel=1e-6)


BAD_INPUT = [
    (["--text", "", "--preset", "default"], "text is empty"),
    (["--text", "   \n ", "--preset", "default"], "text is empty"),
    (["--text", "hello", "--preset", "no-such-model"], "unknown preset 'no-such-model'"),
    (["--text", "hello", "--preset", "checkpoint: nope"], "unknown preset 'checkpoint: nope'"),
    (["--text", "hello there", "--preset", "default", "--layer", "7"], "--layer 7: this model has 2 layer(s)"),
    (["--text", "hello there", "--preset", "default", "--head", "2"], "--head 2: this model has 2 head(s)"),
]


@pytest.mark.parametrize("args, says", BAD_INPUT)
def test_bad_input_is_a_clear_message_and_a_failing_exit(tmp_path, capsys, args, says):
    """The command's own function, in this process (an exception would fail the test, as a traceback would)."""
    out = tmp_path / "r.html"
    assert rep.main([*args, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert says in err, err
    assert not out.exists()


def test_the_command_exits_with_a_failure_and_no_traceback_on_bad_input(tmp_path):
    """One bad input through the real command (a process: its exit status and its standard error)."""
    out = tmp_path / "r.html"
    res = run(*BAD_INPUT[2][0], "--out", str(out))
    assert res.returncode == 2
    assert BAD_INPUT[2][1] in res.stderr and "Traceback" not in res.stderr, res.stderr
    assert not out.exists()


def _presets():
    return [rep.page_context.CKPT_PREFIX + n for n in rep.shipped_names()] + [
        "llama-like", "original-transformer", "decoder-cross-attention", "explainer"]


@pytest.mark.parametrize("name", _presets())
def test_every_shipped_checkpoint_and_shape_makes_a_report(name):
    """In-process, through the same resolve as the app: one figure per reported step, every chart inline."""
    ctx, _ = rep.build(TEXT, name, layer=0, head=-1)
    page = rep.report_html(ctx)
    tr = ctx.trace()
    steps = rep.report_steps(tr, 0)
    assert len(re.findall(r'gptvizPlot\("fig-\d+", \{', page)) == len(steps) > 10
    assert ctx.s["preset"] == name and ctx.head is None
    assert "https://" not in page.replace(_plotly_js(), "")
    summary = dict(re.findall(r'<tr data-key="(\w+)"><th>[^<]*</th><td class="num" data-value="([^"]+)"', page))
    assert float(summary["loss"]) == pytest.approx(tr.loss, rel=1e-6)
    if ctx.scored_y is not None:
        from gptviz.run.loss import mean_over

        assert float(summary["scored"]) == pytest.approx(mean_over(tr["hook_loss_per_token"], ctx.scored_y), rel=1e-6)


def test_a_bare_checkpoint_name_is_that_checkpoint():
    name = rep.shipped_names()[0]
    assert rep._preset(name) == rep.page_context.CKPT_PREFIX + name


def test_a_token_cannot_break_out_of_a_script():
    ctx, _ = rep.build("a </script><script>alert(1)</script> & b", "default")
    page = rep.report_html(ctx)
    assert "<script>alert(1)" not in page
    assert page.count("</script>") == page.count("<script")


def test_the_app_offers_the_report_as_a_download():
    from streamlit.testing.v1 import AppTest

    def app():
        from gptviz.present import page_context
        from gptviz.ui import resources
        from gptviz.ui.sections import get

        ctx, _ = page_context.resolve(page_context.pinned(page_context.defaults(), preset="default", layer=1, head=0),
                                      resources)
        get("report.download")(ctx, key="rep")

    at = AppTest.from_function(app, default_timeout=120).run()
    assert not at.exception, [e.message for e in at.exception]
    buttons = at.get("download_button")
    assert len(buttons) == 1
    proto = buttons[0].proto
    assert "Report: layer 1, head 0" in proto.label
    # built only when clicked: the page carries a deferred file, not the 5 MB of HTML
    assert proto.HasField("deferred_file_id") and proto.deferred_file_id and not proto.url


def _engines(monkeypatch):
    """Each way plotly could pick its JSON engine on some machine, set in turn: (its name, a function that sets it).
    Without orjson "auto" is the standard library: for that case plotly's JSON module is told orjson is missing."""
    import plotly.io as pio
    import plotly.io._json as plotly_json

    found = plotly_json.get_module

    def engine(name, hide_orjson=False):
        def apply():
            missing = lambda module, should_load=True: None if module == "orjson" else found(module, should_load)
            monkeypatch.setattr(plotly_json, "get_module", missing if hide_orjson else found)
            monkeypatch.setattr(pio.json.config, "default_engine", name)
        return apply

    out = [("json", engine("json")), ("auto without orjson", engine("auto", hide_orjson=True))]
    if importlib.util.find_spec("orjson") is not None:
        out += [("orjson", engine("orjson")), ("auto with orjson", engine("auto"))]
    return out


def test_a_figure_is_written_the_same_whichever_json_engine_plotly_would_pick(monkeypatch):
    """Plotly writes JSON with orjson when it is installed and with the standard library otherwise (which escapes
    "·" as \\u00b7): the report must not depend on which this machine has. A figure whose token is "NaN" too (the
    encoder writes such a figure twice)."""
    import plotly.io as pio

    from gptviz.present import figures, matrices

    figs = [figures.heatmap(matrices.Matrix(np.eye(3), ["a·", "<b>", tok], ["x", "y", "z"], "query", "key",
                                            "probability"), "L1 attention weights · head 1")
            for tok in ("c", "NaN")]
    for fig in figs:
        outs, plotlys = {}, {}
        for name, apply in _engines(monkeypatch):
            apply()
            outs[name] = rep._fig_json(fig)
            plotlys[name] = pio.to_json(fig, validate=False)
        assert len(set(outs.values())) == 1, outs.keys()
        if "orjson" in plotlys:  # the settings do change plotly's own writing: "·" as it is, or as \u00b7
            assert plotlys["orjson"] == plotlys["auto with orjson"] != plotlys["json"] == plotlys["auto without orjson"]
        raw = outs["json"]
        data = json.loads(raw)
        assert data["layout"]["title"]["text"] == "L1 attention weights · head 1"
        assert [t for t in data["data"] if t["type"] == "heatmap"][0]["y"][0] == "a·"
        assert raw == _canonical(data)  # the same form, NaN-named token or not
        assert "<" not in raw and ">" not in raw  # nothing can close the <script> the JSON sits in


def test_the_whole_report_is_the_same_bytes_whichever_json_engine_plotly_would_pick(monkeypatch):
    """The report of one view rendered once per engine setting: the same bytes each time (but for the minute in
    "made YYYY-MM-DD HH:MM", which may tick between two renders)."""
    ctx, _ = rep.build(TEXT, "default", layer=LAYER, head=HEAD)
    ctx.trace()
    pages = {}
    for name, apply in _engines(monkeypatch):
        apply()
        page, n = re.subn(r"made \d{4}-\d\d-\d\d \d\d:\d\d\.", "made (time).", rep.report_html(ctx))
        assert n == 1
        pages[name] = page.encode("utf-8")
    assert len(pages) >= 2
    first = next(iter(pages.values()))
    for name, b in pages.items():
        assert b == first, name
    assert f"L{LAYER} attention weights · head {HEAD}" in [f["layout"]["title"]["text"]
                                                          for _, _, f in _figures(first.decode("utf-8"))]
