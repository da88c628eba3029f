"""Lessons as data: one TOML file per lesson under ``lessons/``, loaded, checked and asked here.

No Streamlit. A lesson file is::

    title = "One attention head, step by step"
    summary = "QKᵀ, ÷√d, the mask, softmax, …"
    [settings]                       # optional: pinned on every step
    layer = 0
    head = 0

    [[steps]]
    title = "Scores: Q Kᵀ"
    text = '''Markdown shown next to the figure.'''
    view = "blocks.{layer}.attn.hook_scores_raw"   # a hook name, or a section such as "attention.pattern"
    prompt = "the cat sat on the mat."              # optional: the input text (else the teacher's)
    preset = "default"                              # optional pins: preset (or a list: the first that ships),
                                                    # layer, head, tokenizer, merges, untrained, init_std, …
    options = { all_heads = true }                  # optional: passed to the view
    [steps.question]                                # optional: predict, then reveal
    kind = "most_attended"
    query = -1

A question names a *kind* and its parameters, never its answer: ``ask(spec, live)`` works the answer out
from the live trace, so it follows the model and the text. ``load_folder`` checks every file and turns each
problem into a ``LessonError`` naming the file and the line; the other lessons still load.
"""
from __future__ import annotations

import inspect
import math
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Optional

import numpy as np
import torch

from ..interp import head_detector
from ..config import PRESETS
from ..run.generation import distribution
from .page_context import BOOL_FIELDS, CKPT_PREFIX, CONFIG_FIELDS, FLOAT_FIELDS, INT_FIELDS
from ..paths import CHECKPOINTS, LESSONS, ROOT
from .descriptions import describe
from ..text.tokenizers import TOKENIZER_NAMES

LESSONS_DIR = LESSONS
MAX_CHOICES = 8

# Settings a step (or a lesson's [settings] table) may pin. In [settings] tables "text" is the input text;
# at step level "text" is the step's Markdown, and the input text is "prompt".
SETTING_FIELDS = {"preset", "prompt", "tokenizer", "merges", "lowercase", "layer", "head", "batch", "untrained",
                  *CONFIG_FIELDS}
STEP_FIELDS = {"title", "text", "view", "options", "question", "settings"}
HOOK_PREFIXES = ("hook_", "blocks.", "ln_final.")


# --------------------------------------------------------------------------- data
@dataclass
class Step:
    title: str
    text: str
    view: str  # a section name, or a hook name (may hold "{layer}")
    settings: dict = field(default_factory=dict)  # this step's own pins (the lesson's are merged in by overrides())
    options: dict = field(default_factory=dict)
    question: Optional[dict] = None
    line: int = 0  # the line of its [[steps]] header

    @property
    def is_hook(self) -> bool:
        return is_hook(self.view)


@dataclass
class Lesson:
    id: str  # the file name without .toml
    path: Path
    title: str
    summary: str
    steps: list[Step]
    settings: dict = field(default_factory=dict)


class LessonError(ValueError):
    """A problem in a lesson file, with the file and the line it is on."""

    def __init__(self, path: Path | str, line: int, message: str):
        self.path, self.line, self.message = Path(path), int(line), message
        super().__init__(str(self))

    def __str__(self) -> str:
        return f"{self.path.name}, line {self.line}: {self.message}"


class QuestionUnavailable(ValueError):
    """The live model or text cannot answer this question (e.g. the text has no such token)."""


def is_hook(view: str) -> bool:
    return view.startswith(HOOK_PREFIXES)


# --------------------------------------------------------------------------- where things are in the file
_HEADER = re.compile(r"^\s*\[\[?\s*([A-Za-z0-9_.\- ]+?)\s*\]\]?\s*(#.*)?$")


class _Lines:
    """Line numbers of keys in a TOML file (tomllib gives none for values it parsed fine)."""

    def __init__(self, text: str):
        self.lines = text.splitlines()
        self.headers: list[tuple[int, str]] = []  # (1-based line, table name) outside multi-line strings
        self.code: list[bool] = []  # False for lines inside a multi-line string
        inside = None
        for i, line in enumerate(self.lines, start=1):
            self.code.append(inside is None)
            if inside is None:
                m = _HEADER.match(line)
                if m and not line.lstrip().startswith("#"):
                    self.headers.append((i, m.group(1).strip()))
            for q in ('"""', "'''"):
                if inside in (None, q) and line.count(q) % 2 == 1:
                    inside = q if inside is None else None

    def step_header(self, k: int) -> int:
        """The line of the k-th [[steps]] header (0-based k)."""
        rows = [i for i, name in self.headers if name == "steps" and self._is_array(i)]
        return rows[k] if k < len(rows) else (rows[-1] if rows else 1)

    def _is_array(self, i: int) -> bool:
        return self.lines[i - 1].lstrip().startswith("[[")

    def _block(self, k: Optional[int]) -> tuple[int, int]:
        if k is None:  # the top of the file, before the first table
            end = self.headers[0][0] if self.headers else len(self.lines) + 1
            return 1, end
        start = self.step_header(k)
        later = [i for i, name in self.headers if i > start and self._is_array(i)]
        return start, (later[0] if later else len(self.lines) + 1)

    def key(self, k: Optional[int], key: str, table: Optional[str] = None) -> int:
        """The line of ``key = …`` in step k (None: the top of the file), inside ``table`` if given."""
        start, end = self._block(k)
        if table:
            sub = [i for i, name in self.headers if start <= i < end and name.split(".")[-1] == table]
            if sub:
                start = sub[0]
            else:
                found = self._find(start, end, table)
                start = found or start
        return self._find(start, end, key) or start

    def table(self, name: str) -> int:
        return next((i for i, n in self.headers if n == name), 1)

    def _find(self, start: int, end: int, key: str) -> Optional[int]:
        pat = re.compile(rf"(^|[{{,\s])\"?{re.escape(key)}\"?\s*=")
        for i in range(start, min(end, len(self.lines) + 1)):
            if self.code[i - 1] and pat.search(self.lines[i - 1]):
                return i
        return None


# --------------------------------------------------------------------------- checking
def _reference_configs():
    base = PRESETS["default"].replace(vocab_size=16)
    return [base, base.replace(pos_encoding="rope")]


def check_hook(view: str) -> Optional[str]:
    """None if ``view`` names a step gptviz records (with "{layer}" read as any layer), else why not."""
    name = view.replace("{layer}", "0")
    for cfg in _reference_configs():
        try:
            describe(name, cfg)
            return None
        except ValueError:
            continue
    return (f"unknown hook {view!r}: hook names look like 'blocks.0.attn.hook_pattern', 'hook_embed' or "
            "'hook_logits' (see the Step-through page for every one)")


def _check_setting(key: str, value: Any) -> Optional[str]:
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
        return None if value in TOKENIZER_NAMES else f"unknown tokenizer {value!r}: choose one of {', '.join(TOKENIZER_NAMES)}"
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


def _accepted(fn: Callable) -> Optional[set]:
    """The keyword options a section accepts (None: any)."""
    params = inspect.signature(fn).parameters
    if any(p.kind == p.VAR_KEYWORD for p in params.values()):
        return None
    return {n for n in list(params)[1:] if n not in ("key", "highlight")}


def load_file(path: Path | str, views: Optional[Mapping[str, Callable]] = None) -> Lesson:
    """One lesson file, checked. ``views``: the section registry (name -> function); with it, section names
    and their options are checked too. Raises LessonError (file and line) on the first problem."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise LessonError(path, 1, f"cannot be read: {exc}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        msg = str(exc)
        m = re.search(r"\(at line (\d+), column \d+\)", msg)
        line = int(m.group(1)) if m else 1
        msg = re.sub(r"\s*\(at (line \d+, column \d+|end of document)\)", "", msg)
        raise LessonError(path, line, f"this is not valid TOML: {msg}") from None
    where = _Lines(text)

    def need_str(obj: dict, key: str, k: Optional[int], what: str) -> str:
        if key not in obj:
            line = where.step_header(k) if k is not None else 1
            raise LessonError(path, line, f"{what} has no {key!r}: every {what} needs one")
        if not isinstance(obj[key], str) or not obj[key].strip():
            raise LessonError(path, where.key(k, key), f"{key!r} must be a non-empty string")
        return obj[key]

    title = need_str(data, "title", None, "lesson")
    summary = data.get("summary", "")
    if not isinstance(summary, str):
        raise LessonError(path, where.key(None, "summary"), "'summary' must be a string")
    for key in data:
        if key not in ("title", "summary", "settings", "steps"):
            raise LessonError(path, where.key(None, key) if key != "settings" else where.table(key),
                              f"unknown field {key!r} (a lesson has title, summary, [settings] and [[steps]])")
    lesson_settings = data.get("settings", {})
    if not isinstance(lesson_settings, dict):
        raise LessonError(path, where.key(None, "settings"), "'settings' must be a table")
    for key, value in lesson_settings.items():
        line = where._find(where.table("settings"), len(where.lines) + 1, key) or where.table("settings")
        if key not in SETTING_FIELDS | {"text"}:
            raise LessonError(path, line, f"unknown setting {key!r}: choose from {', '.join(sorted(SETTING_FIELDS))}")
        problem = _check_setting(key, value)
        if problem:
            raise LessonError(path, line, problem)
    raw_steps = data.get("steps")
    if not isinstance(raw_steps, list) or not raw_steps:
        raise LessonError(path, len(where.lines) or 1, "the lesson has no [[steps]]")

    steps = []
    for k, raw in enumerate(raw_steps):
        header = where.step_header(k)
        if not isinstance(raw, dict):
            raise LessonError(path, header, "each step must be a [[steps]] table")
        s_title = need_str(raw, "title", k, f"step {k + 1}")
        s_text = raw.get("text", "")
        if not isinstance(s_text, str):
            raise LessonError(path, where.key(k, "text"), "'text' must be a string (Markdown)")
        view = need_str(raw, "view", k, f"step {k + 1}")
        settings: dict[str, Any] = {}
        for key, value in raw.items():
            if key in STEP_FIELDS:
                continue
            if key not in SETTING_FIELDS:
                raise LessonError(path, where.key(k, key),
                                  f"unknown field {key!r} in step {k + 1}: a step has {', '.join(sorted(STEP_FIELDS))} "
                                  f"and the settings {', '.join(sorted(SETTING_FIELDS))}")
            settings[key] = value
        nested = raw.get("settings", {})
        if not isinstance(nested, dict):
            raise LessonError(path, where.key(k, "settings"), "'settings' must be a table")
        for key, value in nested.items():
            if key not in SETTING_FIELDS | {"text"}:
                raise LessonError(path, where.key(k, key, "settings"), f"unknown setting {key!r}")
            settings["prompt" if key == "text" else key] = value
        for key, value in settings.items():
            problem = _check_setting(key, value)
            if problem:
                raise LessonError(path, where.key(k, key), problem)
        options = raw.get("options", {})
        if not isinstance(options, dict):
            raise LessonError(path, where.key(k, "options"), "'options' must be a table, e.g. options = { step = 2 }")
        if is_hook(view):
            problem = check_hook(view)
            if problem:
                raise LessonError(path, where.key(k, "view"), problem)
            fn = (views or {}).get("step")
        else:
            fn = None
            if views is not None:
                if view not in views:
                    raise LessonError(path, where.key(k, "view"),
                                      f"unknown view {view!r}: use a hook name (e.g. 'blocks.0.attn.hook_pattern') or "
                                      f"one of {', '.join(sorted(views))}")
                fn = views[view]
        if fn is not None:
            ok = _accepted(fn)
            bad = [o for o in options if ok is not None and o not in ok]
            if bad:
                raise LessonError(path, where.key(k, bad[0]),
                                  f"the view {view!r} has no option {bad[0]!r}" +
                                  (f" (it takes {', '.join(sorted(ok - {'hook'}))})" if ok - {"hook"} else ""))
        question = raw.get("question")
        if question is not None:
            if not isinstance(question, dict):
                raise LessonError(path, where.key(k, "question"), "'question' must be a table with a 'kind'")
            if "kind" not in question:
                raise LessonError(path, where.key(k, "question"), "the question has no 'kind'")
            kind = question["kind"]
            if kind not in KINDS:
                raise LessonError(path, where.key(k, "kind", "question"),
                                  f"unknown question kind {kind!r}: choose one of {', '.join(KINDS)}")
            spec = KINDS[kind]
            for p in question:
                if p != "kind" and p not in spec.params:
                    raise LessonError(path, where.key(k, p, "question"),
                                      f"the question kind {kind!r} has no parameter {p!r}" +
                                      (f" (it takes {', '.join(spec.params)})" if spec.params else ""))
            for p in spec.required:
                if p not in question:
                    raise LessonError(path, where.key(k, "kind", "question"),
                                      f"the question kind {kind!r} needs {p!r}")
            for p, value in question.items():
                problem = spec.check(p, value)
                if problem:
                    raise LessonError(path, where.key(k, p, "question"), problem)
        steps.append(Step(s_title, s_text, view, settings, dict(options), question, header))
    settings = {("prompt" if k == "text" else k): v for k, v in lesson_settings.items()}
    return Lesson(path.stem, path, title, summary, steps, settings)


def load_folder(folder: Path | str = LESSONS_DIR, views: Optional[Mapping[str, Callable]] = None
                ) -> tuple[list[Lesson], list[LessonError]]:
    """Every ``*.toml`` in ``folder``, in file-name order: the lessons that load, and one error per file
    that does not."""
    lessons, errors = [], []
    for path in sorted(Path(folder).glob("*.toml")):
        try:
            lessons.append(load_file(path, views))
        except LessonError as exc:
            errors.append(exc)
    return lessons, errors


# --------------------------------------------------------------------------- a step's settings
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


# --------------------------------------------------------------------------- questions
@dataclass
class Live:
    """What a question reads: the live trace and how to label it. ``b`` is the batch row shown."""

    trace: Any
    tokens: list[str]  # labels of row b's real positions
    vocab: list[str]  # label of every token id
    b: int = 0
    layer: int = 0
    head: int = 0
    model: Any = None  # for questions that probe the model (induction heads)
    tok: Any = None  # for questions that quote the text
    scored: Any = None  # (B, T) targets with -100 where the model's task does not score, or None

    @property
    def n_pos(self) -> int:
        return len(self.tokens)

    def arr(self, name: str) -> np.ndarray:
        v = self.trace[name]
        return v.detach().cpu().numpy() if isinstance(v, torch.Tensor) else np.asarray(v)

    @property
    def ids(self) -> list[int]:
        idx = self.trace.idx
        idx = idx.detach().cpu().numpy() if isinstance(idx, torch.Tensor) else np.asarray(idx)
        return [int(i) for i in idx[self.b, : self.n_pos]]

    @property
    def targets(self) -> np.ndarray:
        y = self.trace.targets
        y = y.detach().cpu().numpy() if isinstance(y, torch.Tensor) else np.asarray(y)
        return y[self.b, : self.n_pos]

    @property
    def vocab_size(self) -> int:
        return int(self.trace.config.vocab_size)

    def text(self, upto: Optional[int] = None) -> str:
        ids = self.ids[: None if upto is None else upto + 1]
        if self.tok is not None:
            return self.tok.decode(ids)
        return "".join(self.vocab[i] for i in ids)


def live_from_trace(tr, tok, b: int = 0, layer: int = 0, head: int = 0, model=None, scored=None) -> Live:
    """A Live for a trace made outside the app (tests, the report)."""
    mask = tr.attention_mask
    mask = mask.detach().cpu().numpy() if isinstance(mask, torch.Tensor) else np.asarray(mask)
    idx = tr.idx.detach().cpu().numpy() if isinstance(tr.idx, torch.Tensor) else np.asarray(tr.idx)
    n = int(mask[b].sum()) if mask is not None and mask.ndim == 2 else idx.shape[1]
    vocab = [tok.token_str(i) for i in range(tok.vocab_size)]
    return Live(tr, [tok.token_str(int(i)) for i in idx[b, :n]], vocab, b, layer, head, model, tok, scored)


@dataclass
class Question:
    prompt: str
    choices: list[str]
    correct: int
    value: Any  # the answer itself: a position, a token id, a number, (layer, head)
    explanation: str  # how the answer follows from the live numbers
    highlight: dict  # what to mark on a figure: {"hook", "row", "col"} | {"token", "pos"} | {"value"} | …
    view: str = ""  # the section that shows the answer when the step's own view cannot
    options: dict = field(default_factory=dict)  # that section's options
    settings: dict = field(default_factory=dict)  # settings it pins (e.g. the answer's layer and head)

    @property
    def answer(self) -> str:
        return self.choices[self.correct]


@dataclass
class Kind:
    fn: Callable
    params: tuple = ()
    required: tuple = ()
    types: dict = field(default_factory=dict)  # param -> (types, description)
    doc: str = ""

    def check(self, p: str, value: Any) -> Optional[str]:
        if p == "behaviour" and value not in head_detector.KINDS:
            return f"'behaviour' must be one of {', '.join(head_detector.KINDS)}"
        if p == "kind" or p not in self.types:
            return None
        types, what = self.types[p]
        if isinstance(value, bool) and bool not in types:
            return f"{p!r} must be {what}"
        return None if isinstance(value, types) else f"{p!r} must be {what}"


def _pos(live: Live, value, default: int) -> int:
    """A position: an int (negative counts from the end of the text), or a token's text (its last occurrence)."""
    n = live.n_pos
    if value is None:
        value = default
    if isinstance(value, str):
        want = value.strip().lower()
        hits = [i for i, t in enumerate(live.tokens) if t.replace("␣", " ").strip().lower() == want]
        if not hits:
            raise QuestionUnavailable(f"the text has no token {value!r}")
        return hits[-1]
    i = int(value)
    i = n + i if i < 0 else i
    if not 0 <= i < n:
        raise QuestionUnavailable(f"position {value} is outside the text ({n} tokens)")
    return i


def _tok(live: Live, i: int) -> str:
    return f"{i}: '{live.tokens[i]}'"


def _spread_choices(correct: int, pool: list[int], must: Iterable[int] = (), k: int = MAX_CHOICES) -> list[int]:
    """At most k items of ``pool`` (in order) holding ``correct`` and ``must``, the rest spread evenly."""
    if len(pool) <= k:
        return list(pool)
    keep = {correct, *[m for m in must if m in pool]}
    rest = [p for p in pool if p not in keep]
    n = k - len(keep)
    if n > 0:
        picks = np.linspace(0, len(rest) - 1, n).round().astype(int)
        keep |= {rest[i] for i in picks}
    return [p for p in pool if p in keep]


def _layer_head(live: Live, q: dict) -> tuple[int, int]:
    cfg = live.trace.config
    layer = int(q.get("layer", live.layer))
    head = int(q.get("head", live.head))
    if not 0 <= layer < cfg.n_layer:
        raise QuestionUnavailable(f"this model has no layer {layer} (it has {cfg.n_layer})")
    if not 0 <= head < cfg.n_head:
        raise QuestionUnavailable(f"this model has no head {head} (it has {cfg.n_head} per layer)")
    return layer, head


def most_attended(q: dict, live: Live) -> Question:
    layer, head = _layer_head(live, q)
    name = f"blocks.{layer}.attn.hook_pattern"
    i = _pos(live, q.get("query"), -1)
    if i < 1:
        raise QuestionUnavailable("the first token can only look at itself: choose a later query")
    row = live.arr(name)[live.b, head, i, : i + 1].astype(np.float64)
    ans = int(np.argmax(row))
    order = np.argsort(-row, kind="stable")
    second = int(order[1]) if len(order) > 1 else ans
    pool = _spread_choices(ans, list(range(i + 1)), must=(i, i - 1, 0))
    explanation = (f"Row {i} ('{live.tokens[i]}') of layer {layer} head {head}'s attention weights puts "
                   f"**{row[ans]:.2f}** on position {ans} ('{live.tokens[ans]}'), more than on any other key"
                   + (f"; next is position {second} ('{live.tokens[second]}') with {row[second]:.2f}." if second != ans
                      else "."))
    return Question(
        f"Which token will layer {layer} head {head} attend to most from token {i} ('{live.tokens[i]}'): "
        "itself or an earlier one?",
        [_tok(live, j) for j in pool], pool.index(ans), ans, explanation,
        {"hook": name, "head": head, "row": i, "col": ans}, "step", {"hook": name},
        {"layer": layer, "head": head})


def uniform_loss(q: dict, live: Live) -> Question:
    V = live.vocab_size
    ans = math.log(V)
    cands = {"1/V": 1 / V, "ln V / 2": ans / 2, "ln V": ans, "log₂ V": math.log2(V), "2 ln V": 2 * ans}
    shown: dict[str, float] = {}
    for _, v in sorted(cands.items(), key=lambda kv: kv[1]):
        shown.setdefault(f"{v:.3f}", v)
    labels = list(shown)
    return Question(
        f"Before any training, what loss does a model that spreads its guess evenly over all {V:,} tokens get?",
        labels, labels.index(f"{ans:.3f}"), ans,
        f"A uniform guess gives each of the V = {V:,} tokens p = 1/{V:,}, so every position costs "
        f"−ln(1/{V:,}) = ln {V:,} = **{ans:.3f}**, and so does their mean.",
        {"value": ans, "metric": "uniform"}, "logits.loss")


LOSS_BANDS = ("well below ln V: better than guessing", "about ln V (within 10%)",
              "well above ln V: confidently wrong")


def loss_vs_uniform(q: dict, live: Live) -> Question:
    V = live.vocab_size
    ln_v = math.log(V)
    loss = live.trace.loss
    if loss is None or math.isnan(loss):
        raise QuestionUnavailable("the text has no position with a target: type at least two tokens")
    band = 0 if loss < 0.9 * ln_v else (1 if loss <= 1.1 * ln_v else 2)
    return Question(
        f"This model's loss on the text, against ln V = {ln_v:.3f} (a uniform guess): where will it be?",
        list(LOSS_BANDS), band, loss,
        f"The live loss is **{loss:.3f}**, {loss / ln_v:.2f} × ln V.", {"value": loss, "metric": "loss"},
        "logits.loss")


def _next_probs(live: Live, pos: int) -> np.ndarray:
    logits = torch.as_tensor(live.arr("hook_logits")[live.b, pos]).double()
    return torch.softmax(logits, -1).numpy()


def _label(live: Live, i: int) -> str:
    return f"'{live.vocab[i]}'"


def _distinct(live: Live, ids: list[int]) -> list[str]:
    labels = [_label(live, i) for i in ids]
    return [f"{l} (id {i})" if labels.count(l) > 1 else l for l, i in zip(labels, ids)]


def greedy_next(q: dict, live: Live) -> Question:
    pos = _pos(live, q.get("pos"), -1)
    p = _next_probs(live, pos)
    ans = int(np.argmax(p))
    top = [int(i) for i in np.argsort(-p, kind="stable")[: int(q.get("choices", 4))]]
    pool = sorted(top, key=lambda i: (live.vocab[i], i))  # not in order of probability: that would tell
    before = live.text(pos)
    return Question(
        f"Which token will greedy decoding pick after “{before[-40:]}”?",
        _distinct(live, pool), pool.index(ans), ans,
        f"Greedy decoding takes the most likely token: {_label(live, ans)} with p = **{p[ans]:.3f}**"
        + (f" (next: {_label(live, top[1])} with {p[top[1]]:.3f})." if len(top) > 1 else "."),
        {"token": ans, "pos": pos}, "generation.distribution",
        {"prompt": before, "temperature": 1.0, "top_k": 0, "top_p": 1.0})


def nucleus_size(q: dict, live: Live) -> Question:
    pos = _pos(live, q.get("pos"), -1)
    top_p, temperature = float(q["top_p"]), float(q.get("temperature", 1.0))
    top_k = int(q["top_k"]) if q.get("top_k") else None
    logits = torch.as_tensor(live.arr("hook_logits")[live.b, pos])
    d = distribution(logits, temperature, top_k, top_p)
    ans = int(d.kept.sum())
    V = live.vocab_size
    cands = sorted({c for c in (ans, ans - 1, ans + 1, ans // 2, ans * 2, ans + 3, 1, V) if 1 <= c <= V},
                   key=lambda c: (abs(math.log(c / ans)), c))[:4]
    pool = sorted(cands)
    before = live.text(pos)
    what = f"top-p = {top_p:g}" + (f", temperature {temperature:g}" if temperature != 1 else "") + \
           (f", top-k {top_k}" if top_k else "")
    return Question(
        f"With {what}, how many tokens can still be drawn after “{before[-40:]}”?",
        [str(c) for c in pool], pool.index(ans), ans,
        f"Sorted from most likely, the first **{ans}** token(s) reach a total of {top_p:g} "
        f"(they hold {float(d.tempered[d.kept].sum()):.3f} before renormalising); every other token is cut.",
        {"kept": ans, "top_p": top_p, "temperature": temperature, "top_k": top_k or 0},
        "generation.distribution", {"prompt": before, "temperature": temperature, "top_k": top_k or 0, "top_p": top_p})


PROB_BANDS = ("less than half of 1/V (worse than a uniform guess)", "about 1/V (between half and twice)",
              "between 2/V and 0.5", "more than 0.5")


def target_prob(q: dict, live: Live) -> Question:
    y = live.targets if live.scored is None else np.asarray(live.scored)[live.b, : live.n_pos]
    has = [t for t in range(live.n_pos) if y[t] >= 0]
    if not has:
        raise QuestionUnavailable("no position of the text has a target")
    pos = _pos(live, q.get("pos"), has[-1])
    if live.targets[pos] < 0:
        raise QuestionUnavailable(f"position {pos} has no target (nothing comes after it)")
    target = int(live.targets[pos])
    p = float(_next_probs(live, pos)[target])
    V = live.vocab_size
    band = 0 if p < 0.5 / V else (1 if p <= 2 / V else (2 if p <= 0.5 else 3))
    return Question(
        f"At token {pos} ('{live.tokens[pos]}') the true next token is {_label(live, target)}. What probability "
        f"does the model give it? (1/V = {1 / V:.3f})",
        list(PROB_BANDS), band, p,
        f"p({_label(live, target)} | the text up to token {pos}) = **{p:.3f}**; −log p = {-math.log(max(p, 1e-30)):.2f} "
        f"is what this position adds to the loss.",
        {"pos": pos, "token": target, "value": p}, "logits.target")


def token_count(q: dict, live: Live) -> Question:
    n = live.n_pos
    text = live.text()
    chars, words = len(text), len(text.split())
    cands = [n, chars, words, max(1, (n + chars) // 2), n + 2, max(1, n - 2)]
    pool = []
    for c in cands:
        if c not in pool:
            pool.append(c)
    pool = sorted(pool[:4])
    return Question(
        f"How many tokens does the tokenizer make of “{text[:60]}”? ({chars} characters, {words} words)",
        [str(c) for c in pool], pool.index(n), n,
        f"**{n}** tokens: each merge the tokenizer learned joins a frequent pair of characters into one token, so "
        f"there are fewer tokens than the {chars} characters.",
        {"count": n}, "tokens.chips")


NO_TARGET = "−100 (nothing to predict)"


def target_at(q: dict, live: Live) -> Question:
    pos = _pos(live, q.get("pos"), 2)
    ids = live.ids
    y = int(live.targets[pos])
    cand = []
    for j in (pos - 1, pos, pos + 1):
        if 0 <= j < live.n_pos and ids[j] not in cand:
            cand.append(ids[j])
    labels = _distinct(live, cand) + [NO_TARGET]
    correct = len(cand) if y < 0 else cand.index(y) if y in cand else None
    if correct is None:  # the target is a token not shown next to it (an edited id): add it
        labels.insert(-1, _label(live, y))
        correct = len(labels) - 2
    answer = NO_TARGET if y < 0 else _label(live, y)
    return Question(
        f"x[{live.b}, {pos}] is '{live.tokens[pos]}'. What is the target y[{live.b}, {pos}]?",
        labels, correct, y,
        f"y[{live.b}, {pos}] = **{answer}**" + (
            f": the token at position {pos + 1}. y is x shifted left by one, so at every position the model must "
            "predict the token that comes next." if y >= 0 else
            ": the last token has no next token, so its target is −100, which the loss ignores."),
        {"row": live.b, "col": pos}, "tokens.grids")


def best_head(q: dict, live: Live) -> Question:
    kind = q["behaviour"]
    probe = kind in ("induction", "duplicate") and live.model is not None
    scores = head_detector.detect(live.trace, live.b, probe_model=live.model if probe else None)[kind]
    s = np.nan_to_num(np.asarray(scores, dtype=np.float64), nan=-1.0)
    L, H = s.shape
    flat = int(np.argmax(s))
    ans = (flat // H, flat % H)
    pool = _spread_choices(flat, list(range(L * H)))
    where = "on a probe of random tokens repeated twice" if probe else "on your text"
    return Question(
        f"Which head is the strongest {kind} head? Such a head {head_detector.DESCRIPTIONS[kind]}",
        [f"L{c // H} H{c % H}" for c in pool], pool.index(flat), ans,
        f"Scored {where} ({head_detector.HOW[kind]}): layer {ans[0]} head {ans[1]} scores **{s[ans]:.2f}**; "
        f"a head that spread its weight evenly would score about {1 / max(2, live.n_pos // 2):.2f}.",
        {"hook": f"blocks.{ans[0]}.attn.hook_pattern", "head": ans[1]}, "step",
        {"hook": f"blocks.{ans[0]}.attn.hook_pattern"}, {"layer": ans[0], "head": ans[1]})


_POS = ((int, str), "a position (a whole number, negative from the end) or a token's text")
_INT = ((int,), "a whole number")
_NUM = ((int, float), "a number")
KINDS: dict[str, Kind] = {
    "most_attended": Kind(most_attended, ("query", "layer", "head"), (), {"query": _POS, "layer": _INT, "head": _INT},
                          "the key a head weights most from one query (argmax of the live pattern row)"),
    "uniform_loss": Kind(uniform_loss, (), (), {}, "the loss of a uniform guess, ln V of the live vocabulary"),
    "loss_vs_uniform": Kind(loss_vs_uniform, (), (), {}, "whether the live loss is below, about, or above ln V"),
    "greedy_next": Kind(greedy_next, ("pos", "choices"), (), {"pos": _POS, "choices": _INT},
                        "the token greedy decoding picks (argmax of the live next-token distribution)"),
    "nucleus_size": Kind(nucleus_size, ("top_p", "temperature", "top_k", "pos"), ("top_p",),
                         {"top_p": _NUM, "temperature": _NUM, "top_k": _INT, "pos": _POS},
                         "how many tokens top-p (and temperature, top-k) leave to draw from"),
    "target_prob": Kind(target_prob, ("pos",), (), {"pos": _POS},
                        "the probability the model gives the true next token, in bands around 1/V"),
    "token_count": Kind(token_count, (), (), {}, "how many tokens the text becomes"),
    "target_at": Kind(target_at, ("pos",), (), {"pos": _POS}, "the target y at a position: the next token, or −100"),
    "best_head": Kind(best_head, ("behaviour",), ("behaviour",), {"behaviour": ((str,), f"one of {', '.join(head_detector.KINDS)}")},
                      "the head that scores highest for a behaviour (previous-token, induction, …)"),
}


def ask(spec: dict, live: Live) -> Question:
    """The question ``spec`` ({"kind": …, params}) asked of the live trace. Raises QuestionUnavailable when
    this model or text cannot answer it."""
    kind = KINDS.get(spec.get("kind"))
    if kind is None:
        raise QuestionUnavailable(f"unknown question kind {spec.get('kind')!r}")
    return kind.fn(spec, live)
