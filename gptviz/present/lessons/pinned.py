"""The settings a lesson or a step may pin: which they are, their checks, and the pins a step hands the page."""
from __future__ import annotations

from typing import Any, Optional

from ...config import PRESETS
from ...paths import CHECKPOINTS
from ...text.tokenizers import TOKENIZER_NAMES
from ..page_context import BOOL_FIELDS, CKPT_PREFIX, CONFIG_FIELDS, FLOAT_FIELDS, INT_FIELDS
from .schema import Lesson, Step

# Settings a step (or a lesson's [settings] table) may pin. In [settings] tables "text" is the input text;
# at step level "text" is the step's Markdown, and the input text is "prompt".
SETTING_FIELDS = {"preset", "prompt", "tokenizer", "merges", "lowercase", "layer", "head", "batch", "untrained",
                  *CONFIG_FIELDS}


def check_setting(key: str, value: Any) -> Optional[str]:
    """None if ``value`` is a valid value for the setting ``key``, else why not."""
    if key == "preset":
        values = value if isinstance(value, list) else [value]
        if not values or not all(isinstance(v, str) for v in values):
            return "preset must be a name or a list of names"
        for v in values:
            if v not in PRESETS and v != "custom" and not v.startswith(CKPT_PREFIX):
                return (f"unknown preset {v!r}: choose one of {', '.join(PRESETS)}, or 'checkpoint: <name>' for a "
                        "model in checkpoints/")
        return None
    if key == "tokenizer":
        if value in TOKENIZER_NAMES:
            return None
        return f"unknown tokenizer {value!r}: choose one of {', '.join(TOKENIZER_NAMES)}"
    if key in ("prompt", "text"):
        return None if isinstance(value, str) else f"{key} must be a string"
    if key in INT_FIELDS or key in ("merges", "layer", "head", "batch"):
        return None if isinstance(value, int) and not isinstance(value, bool) else f"{key} must be a whole number"
    if key in FLOAT_FIELDS:
        return None if isinstance(value, (int, float)) and not isinstance(value, bool) else f"{key} must be a number"
    if key in BOOL_FIELDS or key in ("untrained", "lowercase"):
        if key == "qkv_bias" and value == "same as bias":
            return None
        return None if isinstance(value, bool) else f"{key} must be true or false"
    return None if isinstance(value, (str, int, float, bool)) else f"{key} has a value of the wrong type"


def preset_ships(name: str) -> bool:
    if name.startswith(CKPT_PREFIX):
        return (CHECKPOINTS / f"{name[len(CKPT_PREFIX):]}.safetensors").is_file()
    return name in PRESETS or name == "custom"


def choose_preset(value) -> tuple[str, str]:
    """A pinned preset, or the first of a list that ships here; and a note when it had to fall back."""
    values = value if isinstance(value, list) else [value]
    for v in values:
        if preset_ships(v):
            if v != values[0]:
                missing = ", ".join(repr(m) for m in values[: values.index(v)])
                return v, f"This step is written for {missing}, which is not installed here: showing {v!r} instead."
            return v, ""
    return values[0], ""


def overrides(lesson: Lesson, step: Step) -> tuple[dict, list[str]]:
    """The settings a step pins (the lesson's, then its own), ready for ``session.pinned``; and notes."""
    merged = {**lesson.settings, **step.settings}
    notes = []
    if "preset" in merged:
        merged["preset"], note = choose_preset(merged["preset"])
        if note:
            notes.append(note)
    if "prompt" in merged:
        merged["text"] = merged.pop("prompt")
    return merged, notes
