"""One self-contained HTML report of a model on a text: its config and parameters, every step of one layer
(and the steps outside the layers) as a heatmap with its formula and sentence, and the loss taken apart.

    python -m gptviz.report --text "the cat sat on the mat." [--preset NAME] [--layer L] [--head H] --out report.html

The file opens with no network: plotly.js is inlined once, and nothing is loaded from a URL. Every chart's
toolbar downloads a PNG (3×) and, with a second button, an SVG. Settings resolve exactly as in the app
(``session.resolve``), through ``Store``: the app's cached resources without Streamlit. The app offers the
same report as a download (``report_html(ctx)``, section "report.download").
"""
from __future__ import annotations

import argparse
import datetime as _dt
import html
import json
import math
import sys
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np
from plotly.utils import PlotlyJSONEncoder

from ..config import PRESETS, ModelConfig
from ..run import edits as edit_specs
from ..run.loss import mean_over, uniform_loss
from ..run.trace import Trace
from ..text.batches import encode_batch
from ..text.tokenizers import token_labels
from . import figures, matrices, page_context
from .descriptions import step_info
from .report_store import Store, shipped_names

FULL_VOCAB_LIMIT = 96  # as the Logits page: a bigger vocabulary shows its top-k columns plus the targets
TOP_K = 12


# ------------------------------------------------------------------------------------------ the contents
def report_steps(tr: Trace, layer: int) -> list[str]:
    """The steps the report draws, in the order the forward pass computed them: every step of ``layer``
    and every step outside the layers (embeddings, final norm, logits, probabilities, loss per token). The
    scalar loss has the loss section instead of a figure."""
    return [n for n in tr if n != "hook_loss" and step_info(tr, n).layer in (None, layer)]


def _source_side(ctx, tr: Trace) -> tuple[Optional[list[str]], Optional[np.ndarray]]:
    """An encoder-decoder model's source tokens for row b (its real positions) and their padding mask."""
    src = tr.source.get("enc_input")
    if src is None:
        return None, None
    ids = np.asarray(src)[ctx.b]
    m = tr.source.get("enc_mask")
    n = int(len(ids) if m is None else np.asarray(m)[ctx.b].astype(bool).sum())
    return token_labels(ctx.tok, ids[:n].tolist()), None  # only the real positions: no padding to grey


def step_figure(ctx, tr: Trace, name: str):
    """The heatmap of one step for the context's batch row, layer and head, as the app draws it."""
    info = step_info(tr, name)
    b, T = ctx.b, ctx.n_pos
    head = ctx.head
    title = info.title
    if name in ("hook_logits", "hook_probs"):
        V = ctx.cfg.vocab_size
        y = np.asarray(tr.targets)[b, :T] if tr.targets is not None else None
        logits = np.asarray(tr["hook_logits"])[b, :T]
        ids = np.arange(V) if V <= FULL_VOCAB_LIMIT else matrices.vocab_columns(logits, y, TOP_K)
        m = matrices.vocab_matrix(np.asarray(tr[name])[b, :T], ids, ctx.vocab_labels(), ctx.labels(), info.kind)
        if len(ids) < V:
            title += f" (top-{TOP_K} at any position + targets: {len(ids)} of {V:,} tokens)"
        return figures.heatmap(m, title), m
    per_head = "head" in info.axes
    h = head
    if per_head and "query_pos" in info.axes and h is None:
        h = 0  # a (query, key) step shows one head; with "all heads" chosen, head 0
    keys, key_mask = _source_side(ctx, tr)
    if info.stack == "encoder":  # the encoder's own steps run over source positions
        tokens = keys or matrices.enc_labels(np.asarray(tr[name]).shape[2 if info.axes[1] == "head" else 1])
        m = matrices.step_matrix(tr[name], info, tokens, b, h, n_pos=len(tokens), key_tokens=keys)
    else:
        m = matrices.step_matrix(tr[name], info, ctx.labels(), b, h, masked=matrices.masked_cells(tr, b), n_pos=T,
                              key_tokens=keys, key_mask=key_mask)
    if per_head:
        title += f" · head {h}" if h is not None else " · every head side by side"
    sel = ctx.selection
    by_pos = info.stack != "encoder" and m.row_title in ("query", "position")
    pairwise = m.row_title == "query" and m.col_title == "key"
    fig = figures.heatmap(m, title, show_values=bool(ctx.s.get("show_values")),
                          highlight_row=sel[0] if sel and by_pos else None,
                          highlight_col=sel[1] if sel and pairwise else None)
    return fig, m


def _fig_json(fig, palette: str = "default") -> str:
    """The figure as JSON for ``Plotly.newPlot`` in the viewer's ``palette``, safe inside a <script>: no template
    (plotly.js's defaults), and every ``<``, ``>`` and ``&`` written as a JSON escape, so a token can never close
    the script."""
    d = figures.recolour(fig.to_plotly_json(), palette)
    layout = dict(d.get("layout") or {})
    layout.pop("template", None)  # 10 kB a figure; plotly.js's own defaults look the same for a heatmap
    layout["autosize"] = True
    data = [dict(t) for t in d.get("data") or []]
    for t in data:  # a grey mask trace over the heatmap: its gaps (the cells it leaves open) must not hover
        if t.get("type") == "heatmap" and t.get("name") == "masked":
            t["hoverongaps"] = False
    for k, ax in layout.items():  # the template's one setting that matters: room for the tick labels
        if k.startswith(("xaxis", "yaxis")) and isinstance(ax, dict):
            ax.setdefault("automargin", True)
    # plotly's own JSON engine is orjson when that package is installed and the standard library otherwise, and
    # the two escape differently ("·" or "\\u00b7"): one encoder, always, so a report is the same on every machine.
    # ASCII only: PlotlyJSONEncoder writes a figure that holds "NaN" or "Infinity" (a NaN value, or only a token
    # spelt so) a second time with json.dumps's default ensure_ascii=True, so ensure_ascii=False would escape "·"
    # in those figures and not in the others. With True both passes write the same bytes.
    text = json.dumps({"data": data, "layout": layout}, cls=PlotlyJSONEncoder, ensure_ascii=True,
                      separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


class _Td(str):
    """A table cell already written as HTML (``<td …>…</td>``), built here from numbers: ``_table`` writes it as
    it is. Every other cell is text (a token, a name) and is escaped, whatever it starts with."""


def _td(inner: str, cls: str = "num") -> _Td:
    return _Td(f'<td class="{cls}">{inner}</td>')


def _num(v: float, digits: int = 5) -> str:
    """A number shown rounded, with its exact value in ``data-value`` (what the tests read)."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return _Td('<td class="num" data-value="nan">—</td>')
    return _Td(f'<td class="num" data-value="{float(v)!r}">{float(v):.{digits}f}</td>')


def _table(head: Sequence[str], rows: Sequence[Sequence[str]], cls: str = "") -> str:
    th = "".join(f"<th>{_e(h)}</th>" for h in head)
    body = "\n".join("<tr>" + "".join(c if isinstance(c, _Td) else f"<td>{_e(c)}</td>" for c in r) + "</tr>"
                     for r in rows)
    return f'<table class="{cls}"><thead><tr>{th}</tr></thead><tbody>\n{body}\n</tbody></table>'


def _config_table(cfg: ModelConfig) -> str:
    return _table(["field", "value"], [[k, str(v)] for k, v in cfg.to_dict().items()], "config")


def _param_table(model) -> str:
    rows = model.parameter_table()
    total = sum(r["count"] for r in rows)
    body = [[r["name"], " × ".join(map(str, r["shape"])), _td(f"{r['count']:,}")] for r in rows]
    body.append(["total", "", _td(f"<b>{total:,}</b>")])
    return _table(["parameter", "shape", "count"], body, "params")


def _loss_section(ctx, tr: Trace) -> str:
    cfg, bd = ctx.cfg, tr.breakdown
    if bd is None:
        return "<p>This trace has no targets, so there is no loss.</p>"
    loss = tr.loss
    ref = matrices.loss_check(np.asarray(tr["hook_logits"]), np.asarray(tr.targets))
    lnv = uniform_loss(cfg.vocab_size)
    rows = [["mean of −log p(target)", _num(loss)], ["F.cross_entropy (PyTorch, ignore_index=-100)", _num(ref)],
            [f"uniform guess ln V = ln {cfg.vocab_size:,}", _num(lnv)]]
    if ctx.scored_y is not None:
        rows.append(["loss on the positions the task scores", _num(mean_over(tr["hook_loss_per_token"], ctx.scored_y))])
    out = ['<table class="loss" id="loss-summary"><tbody>']
    keys = ["loss", "cross_entropy", "uniform", "scored"]
    for k, (label, cell) in zip(keys, rows):
        out.append(f'<tr data-key="{k}"><th>{_e(label)}</th>{cell}</tr>')
    out.append("</tbody></table>")
    n_valid = int(bd["n_valid"])
    out.append(f"<p>The mean is over the {n_valid} position(s) that have a next token, in every row of the batch. "
               + ("An untrained model scores close to ln V: it knows nothing yet. " if loss is not None
                  and not math.isnan(loss) and abs(loss - lnv) < 0.5 else "")
               + (_e(ctx.task_rule) if ctx.task_rule else "") + "</p>")
    vocab = ctx.vocab_labels()
    probs = np.asarray(tr["hook_probs"])
    tp = np.asarray(bd["target_probs"])
    nll = np.asarray(tr["hook_loss_per_token"])
    y = np.asarray(tr.targets)
    table = []
    for b in range(y.shape[0]):
        ids = np.asarray(tr.idx)[b]
        for t in range(ctx.batch.lengths[b]):
            target = int(y[b, t])
            best = int(np.argmax(probs[b, t]))
            has = target != -100
            table.append([_td(str(b)), _td(str(t)), ctx.tok.token_str(int(ids[t])),
                          vocab[target] if has else "—", _num(float(tp[b, t]) if has else None, 4),
                          _num(float(nll[b, t]) if has else None, 4),
                          f"{vocab[best]} ({float(probs[b, t, best]):.2f})"])
    out.append('<h3>Loss per token</h3><p>At each position: the true next token, the probability the model gave it, '
               '−log of that probability (the loss at that position) and the model\'s own most likely guess.</p>')
    out.append(_table(["row", "pos", "token", "true next", "p(target)", "−log p", "model's top guess"], table,
                      "per-token").replace("<table ", '<table id="loss-per-token" ', 1))
    info = step_info(tr, "hook_loss")
    out.append(f'<p>{_e(info.explanation)}</p><pre class="formula">{_e(info.formula)}</pre>'
               f'<pre class="code">{_e(info.code)}</pre>')
    return "\n".join(out)


CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;
color:#1a1a1a;line-height:1.45}
h1{margin-bottom:.2em} h2{border-bottom:2px solid #ddd;padding-bottom:.2em;margin-top:2em}
table{border-collapse:collapse;margin:.6em 0;font-size:.92em} \
th,td{border:1px solid #ddd;padding:.25em .6em;text-align:left}
td.num{text-align:right;font-variant-numeric:tabular-nums} thead th{background:#f4f4f4}
pre{background:#f6f8fa;padding:.6em .8em;overflow-x:auto;border-radius:4px;white-space:pre-wrap}
pre.formula{border-left:4px solid #4a7dbd} .meta{color:#555;font-size:.9em} .notice{background:#fff7e0;
border-left:4px solid #e0a800;padding:.4em .8em;margin:.4em 0} .toc{columns:2;font-size:.92em}
.step{margin-top:2.2em;page-break-inside:avoid} .figure{width:100%} .tokens code{background:#eef;margin-right:.25em;
padding:0 .2em} .cols{display:flex;gap:2em;flex-wrap:wrap}
"""

# A second toolbar button for SVG: possible here because this page's JavaScript is our own (Streamlit's chart
# config is JSON, which cannot carry the click function plotly.js requires of a custom button).
PLOT_JS = """
var GPTVIZ_CONFIG = {displaylogo: false, responsive: true,
  toImageButtonOptions: {format: "png", scale: 3},
  modeBarButtonsToAdd: [{name: "svg", title: "Download plot as SVG", icon: Plotly.Icons.disk,
    click: function (gd) { Plotly.downloadImage(gd, {format: "svg", filename: gd.id}); }}]};
function gptvizPlot(id, fig) { Plotly.newPlot(id, fig.data, fig.layout, GPTVIZ_CONFIG); }
"""


def report_html(ctx, *, notices: Sequence[Any] = (), trace: Optional[Trace] = None, model: Any = None) -> str:
    """The whole report for a context (``session.resolve``'s ``Ctx``: its model, text, layer, head, batch row
    and edits) as one HTML page. ``trace``/``model`` may be passed in when they are already at hand."""
    from plotly import __version__ as plotly_py_version
    from plotly.offline import get_plotlyjs

    tr = trace if trace is not None else ctx.trace()
    model = model if model is not None else ctx.model
    cfg, L = ctx.cfg, ctx.layer
    names = report_steps(tr, L)
    head_txt = "every head" if ctx.head is None else f"head {ctx.head}"
    text = ctx.s.get("text", "")
    parts: list[str] = []
    add = parts.append
    add("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
        f"<title>gptviz report · layer {L} · {_e(head_txt)}</title><style>{CSS}</style>")
    add(f"<script type=\"text/javascript\">/* plotly.js, inlined from plotly {plotly_py_version} for Python */\n"
        f"{get_plotlyjs()}\n</script>")
    add(f"<script type=\"text/javascript\">{PLOT_JS}</script></head><body>")
    add(f"<h1>gptviz report</h1><p class=\"meta\">{_e(ctx.label)} · layer {L} of {cfg.n_layer} · {_e(head_txt)} of "
        f"{cfg.n_head} · batch row {ctx.b} · made {_dt.datetime.now().strftime('%Y-%m-%d %H:%M')}. Opens with no "
        "network. Each chart's toolbar downloads a PNG (camera) or an SVG (disk).</p>")
    add(f"<h2>The text</h2><pre>{_e(text)}</pre>")
    add("<p class=\"tokens\">Row " + str(ctx.b) + f", {ctx.n_pos} tokens: "
        + "".join(f"<code>{_e(t)}</code>" for t in ctx.labels()) + "</p>")
    for n in notices:
        add(f"<div class=\"notice\">{_e(getattr(n, 'text', n))}</div>")
    if ctx.edit_notice:
        add(f"<div class=\"notice\">{_e(ctx.edit_notice)}</div>")
    spec = ctx.s.get("edits") or edit_specs.EMPTY
    if not edit_specs.is_empty(spec):
        add(f"<div class=\"notice\">Edits are applied: {_e(json.dumps(spec))}. Every step after them is computed "
            "again.</div>")
    add("<h2>The model</h2><div class=\"cols\"><div><h3>Config</h3>" + _config_table(cfg) + "</div>"
        f"<div><h3>Parameters ({cfg.num_params():,})</h3>" + _param_table(model) + "</div></div>")
    add(f"<h2>Every step (layer {L}, {_e(head_txt)})</h2><p>{len(names)} steps in the order the forward pass "
        "computes them: the embeddings, every step of this layer, the final norm, the logits, the probabilities and "
        "the loss at each position. Each has its heatmap, what it means, its formula (LaTeX source) and the line of "
        "PyTorch that makes it.</p><ol class=\"toc\">"
        + "".join(f"<li><a href=\"#step-{i}\">{_e(step_info(tr, n).title)}</a></li>" for i, n in enumerate(names))
        + "</ol>")
    for i, name in enumerate(names):
        info = step_info(tr, name)
        fig, m = step_figure(ctx, tr, name)
        shape = " × ".join(f"{a} = {s}" for a, s in zip(info.axes, tr.shape(name))) or "a single number"
        add(f"<section class=\"step\" id=\"step-{i}\"><h3>{i + 1}. {_e(info.title)}</h3>"
            f"<p class=\"meta\"><code>{_e(name)}</code> · {_e(shape)} · values: {_e(info.kind)}"
            + (f" · {_e(m.note)}" if m.note else "") + "</p>"
            f"<div class=\"figure\" id=\"fig-{i}\"></div>"
            f"<script type=\"text/javascript\">gptvizPlot(\"fig-{i}\", "
            f"{_fig_json(fig, str(ctx.s.get('palette', 'default')))});</script>"
            f"<p>{_e(info.explanation)}</p><pre class=\"formula\">{_e(info.formula)}</pre>"
            f"<pre class=\"code\">{_e(info.code)}</pre></section>")
    add("<h2 id=\"loss\">The loss</h2>" + _loss_section(ctx, tr))
    add("</body></html>\n")
    return "\n".join(parts)


def report_filename(ctx) -> str:
    return f"gptviz-report-layer{ctx.layer}-" + ("all-heads" if ctx.head is None else f"head{ctx.head}") + ".html"


# ------------------------------------------------------------------------------------------------ the CLI
class BadInput(ValueError):
    """A setting the report cannot use; the message says which and what would work."""


def preset_choices() -> list[str]:
    return [page_context.CKPT_PREFIX + n for n in shipped_names()] + list(PRESETS)


def _preset(name: Optional[str]) -> str:
    if name is None:
        return page_context.default_preset()
    if name in PRESETS or (name.startswith(page_context.CKPT_PREFIX)
                           and name[len(page_context.CKPT_PREFIX):] in shipped_names()):
        return name
    if name in shipped_names():  # "shakespeare" for "checkpoint: shakespeare"
        return page_context.CKPT_PREFIX + name
    raise BadInput(f"unknown preset {name!r}: choose one of " + ", ".join(repr(c) for c in preset_choices()))


def build(text: str, preset: Optional[str] = None, layer: int = 0, head: int = 0, store: Optional[Store] = None):
    """Resolve the settings as the app does and check them: ``(ctx, notices)``. Raises ``BadInput``."""
    if text is None or not text.strip():
        raise BadInput("the text is empty: give the model something to read, e.g. --text \"the cat sat on the mat.\"")
    name = _preset(preset)
    store = store or Store()
    s = page_context.pinned(page_context.defaults(), preset=name, text=text, layer=int(layer), head=int(head))
    ctx, notices = page_context.resolve(s, store)
    errors = [n.text for n in notices if n.level == "error"]
    if errors:
        raise BadInput(" ".join(errors))
    if ctx.s.get("preset") != name:
        raise BadInput(f"the preset {name!r} could not be used")
    try:
        encode_batch(ctx.tok, text, ctx.cfg.block_size)
    except ValueError as exc:
        raise BadInput(f"this model's tokenizer cannot read the text: {exc}") from None
    if not 0 <= int(layer) < ctx.cfg.n_layer:
        raise BadInput(f"--layer {layer}: this model has {ctx.cfg.n_layer} layer(s), 0 to {ctx.cfg.n_layer - 1}")
    if not -1 <= int(head) < ctx.cfg.n_head:
        raise BadInput(f"--head {head}: this model has {ctx.cfg.n_head} head(s), 0 to {ctx.cfg.n_head - 1} "
                       "(or -1 for every head)")
    return ctx, notices


def main(argv: Optional[Sequence[str]] = None, prog: str = "python -m gptviz.report") -> int:
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    p.add_argument("--text", required=True, help="the text the model reads (a new line starts another batch row)")
    p.add_argument("--preset", default=None,
                   help=f"a model: one of {', '.join(preset_choices())} (default: the app's opening model, "
                        f"{page_context.default_preset()!r}); a shipped checkpoint's bare name works too")
    p.add_argument("--layer", type=int, default=0, help="the layer whose steps are drawn (default 0)")
    p.add_argument("--head", type=int, default=0, help="the head for per-head steps (default 0; -1: every head)")
    p.add_argument("--out", required=True, help="the HTML file to write")
    a = p.parse_args(argv)
    try:
        ctx, notices = build(a.text, a.preset, a.layer, a.head)
    except BadInput as exc:
        print(f"gptviz.report: error: {exc}", file=sys.stderr)
        return 2
    for n in notices:
        print(f"gptviz.report: {n.level}: {n.text}", file=sys.stderr)
    page = report_html(ctx, notices=notices)
    out = Path(a.out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(page, encoding="utf-8")
    except OSError as exc:
        print(f"gptviz.report: error: cannot write {out}: {exc}", file=sys.stderr)
        return 1
    n_steps = len(report_steps(ctx.trace(), ctx.layer))
    print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB): {ctx.label}, layer {ctx.layer}, "
          f"{n_steps} step figures, loss {ctx.trace().loss:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
