"""What a run's elements say: the errors it showed, the model the sidebar names, and the model the app opens with.

Errors are exception elements (``st.exception`` and uncaught exceptions; deprecation-style ones with
``is_warning`` are kept apart as warnings), ``st.error`` alerts, and script compilation errors. The model is read
from the sidebar's caption ``vocab_size = V, set by the tokenizer · P parameters``; the expected model is worked
out from the app's own defaults and the checkpoint's header, never from the page.
"""
from __future__ import annotations

import re

from streamlit.proto.Alert_pb2 import Alert

MODEL_CAPTION = re.compile(r"vocab_size = ([\d,]+), set by the tokenizer · ([\d,]+) parameters")


def texts(elements) -> list[str]:
    """Every markdown, caption, heading, text, alert and text-widget value the run drew, in order."""
    out = []
    for _, el in elements:
        kind = el.WhichOneof("type")
        if kind == "markdown":
            out.append(el.markdown.body)
        elif kind == "heading":
            out.append(el.heading.body)
        elif kind == "text":
            out.append(el.text.body)
        elif kind == "alert":
            out.append(el.alert.body)
    return out


def errors(elements, compile_errors=()) -> tuple[list[str], list[str]]:
    """(errors, warnings) one run showed, each as a short text."""
    errs, warns = [], []
    for _, el in elements:
        kind = el.WhichOneof("type")
        if kind == "exception":
            e = el.exception
            text = f"{e.type}: {e.message}".strip()
            (warns if e.is_warning else errs).append(text)
        elif kind == "alert" and el.alert.format == Alert.ERROR:
            errs.append(f"st.error: {el.alert.body}")
    errs += [f"compile error: {c}" for c in compile_errors]
    return errs, warns


def model_shown(elements) -> str | None:
    """The sidebar's model caption (``vocab_size = … parameters``), or None when the run drew none."""
    for text in texts(elements):
        m = MODEL_CAPTION.search(text)
        if m:
            return m.group(0)
    return None


def parse_model(caption: str | None) -> tuple[int, int] | None:
    """(vocab_size, parameters) from a model caption."""
    m = MODEL_CAPTION.search(caption or "")
    return tuple(int(g.replace(",", "")) for g in m.groups()) if m else None


def expected_model() -> dict:
    """The model the app opens with, no address parameters given: its preset, vocab_size and parameter count,
    and the caption the sidebar must show for it."""
    import json

    from gptviz.config import ModelConfig, preset
    from gptviz.present.page_context import CKPT_PREFIX, defaults

    d = defaults()
    name = d["preset"]
    if name.startswith(CKPT_PREFIX):
        from safetensors import safe_open

        from gptviz.paths import CHECKPOINTS

        with safe_open(str(CHECKPOINTS / f"{name[len(CKPT_PREFIX):]}.safetensors"), framework="pt") as f:
            cfg = ModelConfig.from_dict(json.loads((f.metadata() or {})["config"]))
    else:
        from gptviz.text.tokenizers import get_tokenizer

        tok = get_tokenizer(d["tokenizer"], num_merges=int(d["merges"]), lowercase=bool(d["lowercase"]))
        cfg = preset(name, vocab_size=tok.vocab_size)
    caption = f"vocab_size = {cfg.vocab_size:,}, set by the tokenizer · {cfg.num_params():,} parameters"
    return {"preset": name, "vocab_size": cfg.vocab_size, "parameters": cfg.num_params(), "caption": caption}
