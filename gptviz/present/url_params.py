"""Every setting a link can carry, its type and range, and the one function that checks a link against them.

``PARAMS`` states each URL parameter's type and range once: the sidebar's widgets take their ranges from it
(``widget(field)``), and ``read(params)`` reads an address's raw query dict into clean settings and notices
before anything is built. Nothing a link says can reach a model, a tokenizer or a trace unchecked: a value that
is not understood falls back to its default, one out of range is clamped into it, an over-long text is cut, and
each of these is a ``Notice`` naming the parameter. No Streamlit here.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Mapping, Optional

from ..config import ACTIVATIONS, NORM_PLACEMENTS, NORMS, POS_ENCODINGS, PRESETS
from ..paths import CHECKPOINTS, MODEL_NAME, model_folder_names
from ..text.tokenizers import TOKENIZER_NAMES
from .figures.base import PALETTE_NAMES
from .lessons.wording import languages
from .page_context import CKPT_PREFIX, CONFIG_FIELDS, FOLDER_PREFIX, URL_FIELDS, Notice, _config_settings, defaults

# Address-bar parameters a page owns and checks itself (the Lessons page): passed through untouched.
PAGE_PARAMS = ("present", "lesson", "lstep", "class", "teach", "me")  # the last three: a live class
MODEL_PARAM = "model"  # ?model=NAME: a model folder in the server's models directory (the preset "folder: NAME")

# The text a link can carry: at most MAX_TEXT_CHARS characters, and one line may be all of it. A line of
# MAX_LINE_CHARS characters fills the largest context the sidebar allows (block_size 2048) even with one character
# per token, and holds a researcher's paragraph of 512 GPT-2 tokens (academic English takes 6-7 characters a token).
MAX_LINE_CHARS = 4096
MAX_TEXT_CHARS = 4096
MAX_NUMBER_CHARS = 64  # a number written with more characters than this is not read at all
SHOWN_CHARS = 40  # how much of a bad value a notice repeats
MAX_NOTICES = 8  # notices about one link, at most (then one line says how many more)


@dataclass(frozen=True)
class Param:
    """One URL parameter: ``kind`` is "int", "float", "bool", "choice" or "text"; ``lo``/``hi`` bound a number,
    ``options`` list a choice's values."""

    kind: str
    lo: Any = None
    hi: Any = None
    options: tuple = ()

    def widget(self) -> dict[str, Any]:
        """The keyword arguments that give a Streamlit widget this range."""
        if self.kind in ("int", "float"):
            return {"min_value": self.lo, "max_value": self.hi}
        if self.kind == "choice":
            return {"options": list(self.options)}
        return {}


PARAMS: dict[str, Param] = {
    "preset": Param("choice", options=(*PRESETS, "custom")),  # or "checkpoint: NAME" of a shipped model
    "text": Param("text", hi=MAX_TEXT_CHARS),
    "source": Param("text", hi=MAX_TEXT_CHARS),
    "tokenizer": Param("choice", options=TOKENIZER_NAMES),
    "merges": Param("int", 0, 200),
    "lowercase": Param("bool"),
    "untrained": Param("bool"),
    # the view: clamped again to the model's own layers and heads once it is built
    "layer": Param("int", 0, 47),
    "head": Param("int", -1, 63),  # -1: all heads
    "palette": Param("choice", options=PALETTE_NAMES),  # every chart's colours (colour-blind safe, …)
    "lang": Param("choice", options=tuple(languages())),  # the lessons' language: en, and each lessons/<code>/
    # the model's shape
    "n_layer": Param("int", 1, 48),
    "n_head": Param("int", 1, 64),
    "n_embd": Param("int", 1, 4096),
    "d_head": Param("int", 0, 1024),  # 0: n_embd / n_head
    "d_mlp": Param("int", 0, 16384),  # 0: 4 × n_embd
    "block_size": Param("int", 1, 2048),
    "n_enc_layer": Param("int", -1, 48),  # -1: decoder only; 0: a fixed random encoder output
    "enc_len": Param("int", 1, 2048),
    # its architecture
    "norm": Param("choice", options=NORMS),
    "norm_placement": Param("choice", options=NORM_PLACEMENTS),
    "pos_encoding": Param("choice", options=POS_ENCODINGS),
    "activation": Param("choice", options=ACTIVATIONS),
    "attn_only": Param("bool"),
    "bias": Param("bool"),
    "qkv_bias": Param("choice", options=("same as bias", True, False)),
    "attn_proj_bias": Param("choice", options=(None, True, False)),  # None: the same as bias
    "head_bias": Param("bool"),
    "tie_weights": Param("bool"),
    "dropout": Param("float", 0.0, 0.9),
    "init_std": Param("float", 0.0001, 1.0),
    "ln_eps": Param("float", 1e-12, 1e-1),
    "rope_base": Param("float", 2.0, 1e7),
    "seed": Param("int", 0, 2**31 - 1),
    # later models' choices
    "n_kv_head": Param("int", 0, 64),  # 0: as many as n_head (no grouping)
    "gated_mlp": Param("bool"),
    "parallel_attn": Param("bool"),
    "rotary_pct": Param("float", 0.01, 1.0),
}
assert set(PARAMS) == set(URL_FIELDS), "every URL field needs a type and range"

TRUE, FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")
_INT = re.compile(r"[+-]?[0-9]+")
_CKPT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_MD = re.compile(r"([\\`*_{}\[\]<>#|~$])")


def widget(field: str) -> dict[str, Any]:
    """``min_value``/``max_value`` (a number) or ``options`` (a choice) for the sidebar widget of ``field``."""
    return PARAMS[field].widget()


def _show(raw: Any) -> str:
    """A value from a link, as a notice may repeat it: cut short, and with no markdown in it."""
    text = str(raw)
    text = text[:SHOWN_CHARS] + "…" if len(text) > SHOWN_CHARS else text
    return _MD.sub(r"\\\1", repr(text)[1:-1])


def _note(text: str) -> Notice:
    return Notice("warning", text, "🔗")


def _number(field: str, p: Param, raw: str, default: Any) -> tuple[Any, Optional[str]]:
    text = raw.strip()
    if p.kind == "int" and _INT.fullmatch(text):
        digits = text.lstrip("+-")
        # more digits than any range here needs: no need to read them all to know which end it is beyond
        value: Any = int(text) if len(digits) <= 30 else (-math.inf if text.startswith("-") else math.inf)
    else:
        try:
            value = float(text) if len(text) <= MAX_NUMBER_CHARS and text.isascii() else math.nan
        except ValueError:
            value = math.nan
        if math.isnan(value) or math.isinf(value):
            what = "a whole number" if p.kind == "int" else "a number"
            return default, f"`{field}`: {_show(raw)} is not {what}, so it was left at {default}."
        if p.kind == "int":
            if not value.is_integer():
                return default, f"`{field}`: {_show(raw)} is not a whole number, so it was left at {default}."
            value = int(value)
    if value < p.lo:
        return p.lo, f"`{field}`: {_show(raw)} is below the smallest allowed value {p.lo}, so it was set to {p.lo}."
    if value > p.hi:
        return p.hi, f"`{field}`: {_show(raw)} is above the largest allowed value {p.hi}, so it was set to {p.hi}."
    return value, None


def _cut_text(field: str, raw: str) -> tuple[str, Optional[str]]:
    lines = raw.split("\n")
    long_lines = [i + 1 for i, line in enumerate(lines) if len(line) > MAX_LINE_CHARS]
    text = "\n".join(line[:MAX_LINE_CHARS] for line in lines)
    cut = []
    if long_lines:
        which = ", ".join(map(str, long_lines[:5])) + (" …" if len(long_lines) > 5 else "")
        cut.append(f"line{'s' if len(long_lines) > 1 else ''} {which} {'were' if len(long_lines) > 1 else 'was'} "
                   f"cut to {MAX_LINE_CHARS:,} characters")
    if len(text) > MAX_TEXT_CHARS:
        cut.append(f"the text ({len(text):,} characters) was cut to its first {MAX_TEXT_CHARS:,}")
        text = text[:MAX_TEXT_CHARS]
    if not cut:
        return raw, None
    per_line = f", {MAX_LINE_CHARS:,} per line" if MAX_LINE_CHARS < MAX_TEXT_CHARS else ""
    return text, f"`{field}`: gptviz reads at most {MAX_TEXT_CHARS:,} characters of text{per_line}, so " \
                 f"{' and '.join(cut)}."


def typed_text(field: str, raw: Any) -> tuple[str, Optional[Notice]]:
    """A text typed or pasted into a text box (``text`` or ``source``), cut as a link's would be: the text to keep
    and, if it was cut, the notice that says so. The box's own ``max_chars`` stops a browser at the total, but a
    client that speaks the websocket protocol itself can send anything."""
    text, why = _cut_text(field, "" if raw is None else str(raw))
    return text, (None if why is None else Notice("warning", why, "✂️"))


def clean(field: str, raw: Any, default: Any) -> tuple[Any, Optional[str]]:
    """The value of URL parameter ``field`` for the raw string ``raw``, and what was wrong with it (None: nothing).
    A value that can't be read gives ``default``; a number out of range is clamped into it."""
    p = PARAMS[field]
    raw = "" if raw is None else str(raw)
    if p.kind in ("int", "float"):
        return _number(field, p, raw, default)
    if p.kind == "bool":
        low = raw.strip().lower()
        if low in TRUE or low in FALSE:
            return low in TRUE, None
        return default, f"`{field}`: {_show(raw)} is not true or false, so it was left at {default}."
    if p.kind == "choice":
        for option in p.options:
            if raw.strip().lower() == str(option).lower():
                return option, None
        if field == "preset" and raw.startswith(CKPT_PREFIX):
            name = raw[len(CKPT_PREFIX):].strip()
            if _CKPT_NAME.fullmatch(name) and (CHECKPOINTS / f"{name}.safetensors").is_file():
                return CKPT_PREFIX + name, None
            return default, f"`preset`: there is no shipped model called {_show(name)}, so the link opens " \
                            f"{_show(default)} instead."
        if field == "preset" and raw.startswith(FOLDER_PREFIX):
            return clean_model(raw[len(FOLDER_PREFIX):], default)
        choices = ", ".join(str(o) for o in p.options)
        return default, f"`{field}`: {_show(raw)} is not one of {choices}, so it was left at {_show(default)}."
    return _cut_text(field, raw)


def clean_model(raw: str, default: str) -> tuple[str, Optional[str]]:
    """(the preset, a problem or None) for ``?model=NAME``: a model folder of the server's models directory, looked
    up by name among them (a link never carries a path)."""
    name = str(raw).strip()
    if MODEL_NAME.fullmatch(name) and name in model_folder_names():
        return FOLDER_PREFIX + name, None
    return default, f"`model`: there is no model folder called {_show(name)} on this server, so the link opens " \
                    f"{_show(default)} instead."


def read(params: Mapping[str, Any]) -> tuple[dict[str, Any], list[Notice]]:
    """Clean settings (``defaults()`` with the link's values) and notices for an address's raw query dict.

    A repeated parameter counts by its last value. Parameters a page owns (``PAGE_PARAMS``) are not settings
    and are left for that page; any other unknown parameter is ignored, with a notice."""
    raw = {str(k): (v[-1] if isinstance(v, (list, tuple)) and v else v) for k, v in params.items()}
    s = defaults()
    problems: list[str] = []
    model_fields = (*CONFIG_FIELDS, "tokenizer", "merges", "lowercase")
    # a link that sets the model's shape or tokenizer but names no preset (links made before the app opened on a
    # trained model, or written by hand) means the configurable model
    fallback_preset = "default" if any(f in raw for f in model_fields) else s["preset"]
    if "preset" in raw:
        preset, problem = clean("preset", raw["preset"], fallback_preset)
        problems += [problem] if problem else []
    else:
        preset = fallback_preset
    if MODEL_PARAM in raw:  # ?model=NAME wins over a preset
        preset, problem = clean_model(raw[MODEL_PARAM], preset)
        problems += [problem] if problem else []
    s["preset"] = preset
    if preset in PRESETS:
        s.update(_config_settings(PRESETS[preset]))
    for field in PARAMS:
        if field != "preset" and field in raw:
            s[field], problem = clean(field, raw[field], s.get(field))
            problems += [problem] if problem else []
    unknown = [k for k in raw if k not in PARAMS and k not in PAGE_PARAMS and k != MODEL_PARAM]
    if unknown:
        names = ", ".join(_show(k) for k in unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
        problems.append(f"The link has settings this app does not know, so they were ignored: {names}.")
    notes = [_note(p) for p in problems[:MAX_NOTICES]]
    if len(problems) > MAX_NOTICES:
        notes.append(_note(f"… and {len(problems) - MAX_NOTICES} more problems with the link's settings."))
    return s, notes
