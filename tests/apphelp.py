"""Helpers for driving pages with Streamlit's AppTest."""
import json
import math
import re
from pathlib import Path

from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[1]
PAGES = {
    "home": "app_pages/home.py",
    "tokens": "app_pages/tokens_and_batch.py",
    "embeddings": "app_pages/embeddings.py",
    "attention": "app_pages/attention.py",
    "mlp": "app_pages/mlp_and_residual.py",
    "experts": "app_pages/experts.py",
    "logits": "app_pages/logits_and_loss.py",
    "step": "app_pages/step_through.py",
    "backward": "app_pages/backward.py",
    "training": "app_pages/training.py",
    "generation": "app_pages/generation.py",
    "weights": "app_pages/model_and_weights.py",
    "who": "app_pages/who_did_it.py",
    "contributions": "app_pages/contributions.py",
    "neurons": "app_pages/neurons.py",
    "features": "app_pages/features.py",
    "compare": "app_pages/compare_models.py",
}
TIMEOUT = 120  # torch's first import alone can take seconds


def rendered(markdown: str) -> str:
    """Markdown source as its text reads, as far as backslash escapes go: CommonMark drops a backslash before any
    ASCII punctuation character (``4\\.331`` reads ``4.331``); everything else is left as written."""
    return re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", markdown)


def page(name: str, opening: bool = False, **query) -> AppTest:
    """A fresh session on one page, opened directly (no state from any other page).

    Unless ``opening``, the link names the small untrained "default" preset (most tests are about the
    configurable model); ``opening=True`` opens the page as a bare address does, on the app's opening model."""
    if not opening:
        query.setdefault("preset", "default")
    at = AppTest.from_file(str(ROOT / PAGES[name]), default_timeout=TIMEOUT)
    for k, v in query.items():
        at.query_params[k] = str(v)
    return at.run()


def charts(at: AppTest) -> list[dict]:
    """Every Plotly chart on the page, as the JSON the browser would get."""
    return [json.loads(c.proto.spec) for c in at.get("plotly_chart")]


def titles(at: AppTest) -> list[str]:
    out = []
    for c in charts(at):
        t = c.get("layout", {}).get("title", {})
        out.append(t.get("text", "") if isinstance(t, dict) else str(t))
    return out


def ok(at: AppTest) -> AppTest:
    """No exception anywhere on the page, and at least one chart."""
    assert not at.exception, [e.message for e in at.exception]
    assert len(at.get("plotly_chart")) >= 1
    return at


def messages(at: AppTest) -> str:
    return " | ".join(str(m.value) for kind in (at.error, at.warning, at.info) for m in kind)


def metric(at: AppTest, label: str) -> float:
    for m in at.metric:
        if m.label == label:
            return float(m.value.replace(",", "")) if m.value not in ("—", "") else math.nan
    raise KeyError(label)


def set_sidebar(at: AppTest, field: str, value) -> AppTest:
    """Change one shared setting through its sidebar widget, like a user would."""
    key = "w." + field
    for getter in (at.number_input, at.selectbox, at.checkbox, at.text_area, at.slider, at.toggle, at.radio):
        try:
            w = getter(key=key)
        except KeyError:
            continue
        if getter == at.text_area:
            w.input(value)
        else:
            w.set_value(value)
        return at.run()
    if field != "edit_shape" and "w.edit_shape" in [w.key for w in at.toggle]:
        if not at.toggle(key="w.edit_shape").value:  # the shape's widgets are drawn once this is on
            at.toggle(key="w.edit_shape").set_value(True).run()
            return set_sidebar(at, field, value)
    from gptviz.ui.page import VIEW_FOLD

    if not (VIEW_FOLD in at.session_state and at.session_state[VIEW_FOLD]):  # the view's widgets: made while open
        at.session_state[VIEW_FOLD] = True
        return set_sidebar(at.run(), field, value)
    raise KeyError(field)


def array(v):
    """A Plotly array from the figure JSON: plain lists, or base64 'bdata' (typed arrays)."""
    import base64

    import numpy as np

    if isinstance(v, dict) and "bdata" in v:
        a = np.frombuffer(base64.b64decode(v["bdata"]), dtype=np.dtype(v["dtype"]))
        shape = v.get("shape")
        if isinstance(shape, str):
            shape = [int(n) for n in shape.split(",")]
        return a.reshape(shape) if shape else a
    return np.asarray(v, dtype=float)


def chart(at, title_start: str) -> dict:
    for c in charts(at):
        t = c.get("layout", {}).get("title", {})
        if (t.get("text", "") if isinstance(t, dict) else "").startswith(title_start):
            return c
    raise KeyError(title_start)


def engine_run(edit_name=None, index=(), values=None):
    """The pages' default model (preset "default") and text run with plain ``GPT.run`` and a hand-written hook
    that writes ``values`` at ``index`` of ``edit_name``: every hooked tensor and the loss, independent of trace()."""
    import torch
    import torch.nn.functional as F

    from gptviz import GPT, encode_batch, get_tokenizer, preset
    from gptviz.text.batches import DEFAULT_PROMPT

    tok = get_tokenizer("char-bpe", num_merges=20, lowercase=True)
    cfg = preset("default", vocab_size=tok.vocab_size)
    b = encode_batch(tok, DEFAULT_PROMPT, cfg.block_size)
    seen = {}

    def rec(name, x):
        if name == edit_name:
            x = x.clone()
            x[tuple(index)] = torch.tensor(values, dtype=x.dtype)
        seen[name] = x.detach().numpy()
        return x

    with torch.no_grad():
        logits = GPT(cfg).run(b.x, b.attention_mask, rec=rec)
    loss = F.cross_entropy(logits.flatten(0, 1), b.y.flatten(), ignore_index=-100)
    return seen, float(loss)


def open_downloads(at: AppTest) -> AppTest:
    """Every step's Download popover opened (their buttons are made only while open), then a run."""
    from gptviz.ui.widgets import DOWNLOAD_POPOVER

    for k in [k for k in at.session_state._state.filtered_state if str(k).startswith(DOWNLOAD_POPOVER)]:
        at.session_state[k] = True
    return at.run()
