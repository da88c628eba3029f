"""The view on the screen as a Jupyter notebook: the same model, text, edits and figure, through gptviz's own API.

``notebook_for(ctx)`` writes (with ``nbformat``) a notebook that loads the model the page shows (a configurable
shape by its config, a shipped checkpoint by name, a model folder by name, GPT-2 from the hub; a model trained or
uploaded in the app from the weights file the Model & weights page downloads), reads the sidebar's text with the
same tokenizer and limit, applies the session's edits, traces, and draws the attention pattern of the layer and
head in view with the app's own figure function. Every other step is one ``tr[act_name(...)]`` away.
Run it from the gptviz folder (or with gptviz installed).
"""
from __future__ import annotations

import json

from ..run import edits as edit_specs
from .page_context import CKPT_PREFIX, FOLDER_PREFIX, Ctx

RENDERER = "plotly_mimetype"  # the figure travels in the notebook's output as Plotly JSON (any front end draws it)


def _model_cells(ctx: Ctx) -> list[str]:
    s = ctx.s
    preset = str(s.get("preset", ""))
    key = s.get("model_key") or ""
    lines: list[str]
    if ctx.entry is None:  # the configurable model: its config, seeded weights
        lines = [f"cfg = ModelConfig.from_dict(json.loads({ctx.cfg_json!r}))",
                 "model = build_model(cfg)  # the same seed, so the same weights as the app's",
                 _tokenizer_line(s)]
        return ["\n".join(lines)]
    if preset.startswith(CKPT_PREFIX):
        name = preset[len(CKPT_PREFIX):]
        lines = [f"ck = load_checkpoint('checkpoints/{name}.safetensors')  # shipped with gptviz",
                 "model, tok = ck.model, ck.tokenizer"]
    elif preset.startswith(FOLDER_PREFIX):
        name = preset[len(FOLDER_PREFIX):]
        lines = ["import os",
                 f"folder = os.path.join(os.environ.get('GPTVIZ_MODELS_DIR', 'models'), {name!r})  # the server's",
                 "model, tok = gptviz.from_pretrained(folder)"]
    elif key == "hub-gpt2":
        lines = ["import transformers",
                 "model = gptviz.from_hf_gpt2(transformers.GPT2LMHeadModel.from_pretrained('gpt2'))",
                 "tok = gptviz.TiktokenTokenizer('gpt2')"]
    else:
        lines = [f"# {_one_line(ctx.entry.label)}: made in the app. Download it on Model & weights (⬇ This model) "
                 "beside this",
                 "# notebook, then:",
                 "ck = load_checkpoint('gptviz-model.safetensors')",
                 "model, tok = ck.model, ck.tokenizer"]
    if ctx.untrained:
        lines.append("model = build_model(model.config)  # 'Untrained weights (same shape)' is on")
    if ctx.entry.tokenizer is None:
        lines.append(_tokenizer_line(s))
    return ["\n".join(lines)]


def _one_line(text: str) -> str:
    """A name made safe for a code comment: one line, no control characters."""
    return " ".join("".join(ch if ch.isprintable() else " " for ch in str(text)).split())[:200]


def _markdown(text: str) -> str:
    """A name made safe for a Markdown cell: one line, Markdown's and HTML's special characters escaped."""
    return "".join("\\" + ch if ch in "\\`*_{}[]<>()#+-.!|~$&" else ch for ch in _one_line(text))


def _tokenizer_line(s: dict) -> str:
    if s.get("tokenizer") == "char-bpe":
        return (f"tok = get_tokenizer('char-bpe', num_merges={int(s['merges'])}, "
                f"lowercase={bool(s['lowercase'])})  # trained on the built-in text, as in the app")
    return f"tok = get_tokenizer({str(s.get('tokenizer'))!r})"


def notebook_for(ctx: Ctx):
    """The notebook (an ``nbformat`` NotebookNode, version 4) that reproduces ``ctx``'s view."""
    import nbformat
    from nbformat import v4

    s = ctx.s
    layer, head = ctx.layer, ctx.head if ctx.head is not None else 0
    T = int(ctx.batch.x.shape[1])
    spec = ctx.s.get("edits") or edit_specs.EMPTY
    ids = [[int(i) for i in row] for row in ctx.batch.x.tolist()]
    cells = [
        v4.new_markdown_cell(f"# gptviz: {_markdown(ctx.label)}\n\nLayer {layer}, head {head}, on the app's text. "
                             "Made by the "
                             "app's *Notebook* button; run it from the gptviz folder."),
        v4.new_code_cell("import json\n\nimport plotly.io as pio\nimport torch\n\nimport gptviz\n"
                         "from gptviz import ModelConfig, build_model, encode_batch, get_tokenizer, load_checkpoint, "
                         "trace\nfrom gptviz.model.hook_names import act_name\n"
                         "from gptviz.present import figures, matrices\nfrom gptviz.present.descriptions import "
                         "step_info\nfrom gptviz.run import edits as edit_specs\n"
                         "from gptviz.text.tokenizers import token_labels\n\n"
                         f"pio.renderers.default = {RENDERER!r}"),
        *[v4.new_code_cell(c) for c in _model_cells(ctx)],
        v4.new_code_cell(f"text = {str(s.get('text', ''))!r}\n"
                         f"batch = encode_batch(tok, text, {T})  # the app reads at most {T} tokens a line here\n"
                         + (f"batch.x[:] = torch.tensor({ids})  # the token ids edited in the app\n"
                            if s.get("id_edits") else "")
                         + "x, y, mask = batch.x, batch.y, batch.attention_mask"),
        v4.new_code_cell(f"spec = json.loads({json.dumps(spec)!r})  # the edits made in the app\n"
                         "edits = None if edit_specs.is_empty(spec) else edit_specs.from_spec(spec, "
                         "model.config.n_layer, model.config.n_head, model.config)\n"
                         "tr = trace(model, x, targets=y, attention_mask=mask, edits=edits)\n"
                         "print(f'loss {tr.loss:.4f}')"),
        v4.new_code_cell(f"name = act_name('pattern', {layer})\ninfo = step_info(tr, name)\n"
                         "labels = token_labels(tok, x[0, : batch.lengths[0]].tolist())\n"
                         f"m = matrices.step_matrix(tr[name].detach().numpy(), info, labels, 0, {head}, "
                         "masked=matrices.masked_cells(tr, 0), n_pos=batch.lengths[0])\n"
                         f"fig = figures.heatmap(m, info.title + ' · head {head}')\nfig"),
    ]
    nb = v4.new_notebook(cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                                "language": "python"}})
    nbformat.validate(nb)
    return nb


def notebook_bytes(ctx: Ctx) -> bytes:
    import nbformat

    return nbformat.writes(notebook_for(ctx)).encode("utf-8")
