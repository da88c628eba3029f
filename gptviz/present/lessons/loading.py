"""Reading lesson files: each one checked, every problem a LessonError naming the file and the line."""
from __future__ import annotations

import inspect
import re
import threading
import tomllib
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

from ...config import PRESETS
from ...paths import LESSONS
from ..descriptions import describe
from .pinned import SETTING_FIELDS, check_setting
from .questions import KINDS
from .schema import STEP_FIELDS, Lesson, LessonError, Step, is_hook
from .toml_lines import TomlLines

LESSONS_DIR = LESSONS


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
    where = TomlLines(text)

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
        line = where.find(where.table("settings"), len(where.lines) + 1, key) or where.table("settings")
        if key not in SETTING_FIELDS | {"text"}:
            raise LessonError(path, line, f"unknown setting {key!r}: choose from {', '.join(sorted(SETTING_FIELDS))}")
        problem = check_setting(key, value)
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
            problem = check_setting(key, value)
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


_FOLDER_CACHE: dict[tuple, tuple[tuple, list[Lesson], list[LessonError]]] = {}
_FOLDER_CACHE_MAX = 8
_folder_lock = threading.Lock()


def _stamps(paths: list[Path]) -> tuple:
    """What says a file changed: its name, modification time and size (a vanished file: no stamp)."""
    out = []
    for p in paths:
        try:
            st = p.stat()
        except OSError:
            continue
        out.append((p.name, st.st_mtime_ns, st.st_size))
    return tuple(out)


def load_folder(folder: Path | str = LESSONS_DIR, views: Optional[Mapping[str, Callable]] = None
                ) -> tuple[list[Lesson], list[LessonError]]:
    """Every ``*.toml`` in ``folder``, in file-name order: the lessons that load, and one error per file
    that does not.

    The result is kept (for every session) until a file's modification time or size changes or a file is added
    or removed: the page asks for it on every rerun, and parsing and checking every file each time is wasted work.
    """
    paths = sorted(Path(folder).glob("*.toml"))
    key = (str(Path(folder).resolve()),
           None if views is None else tuple((name, id(fn)) for name, fn in sorted(views.items())))
    stamps = _stamps(paths)
    with _folder_lock:
        hit = _FOLDER_CACHE.get(key)
    if hit is not None and hit[0] == stamps:
        return list(hit[1]), list(hit[2])
    lessons, errors = [], []
    for path in paths:
        try:
            lessons.append(load_file(path, views))
        except LessonError as exc:
            errors.append(exc)
    with _folder_lock:
        if key not in _FOLDER_CACHE and len(_FOLDER_CACHE) >= _FOLDER_CACHE_MAX:
            _FOLDER_CACHE.pop(next(iter(_FOLDER_CACHE)))
        _FOLDER_CACHE[key] = (stamps, lessons, errors)
    return list(lessons), list(errors)
