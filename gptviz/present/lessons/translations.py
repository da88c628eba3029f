"""A lesson in another language: ``lessons/<code>/<lesson id>.toml`` holds only words (the title, the summary,
and each step's title and text, in the English lesson's order). Everything else (the views, the pinned settings,
the questions) is the English lesson's own, so a translation cannot change what a step shows or what its answer is.

A missing or broken translation gives the English lesson and says why (the page shows it as a small notice).
"""
from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path

from ...paths import LESSONS
from .schema import Lesson
from .wording import LANG_CODE

MAX_TRANSLATION_BYTES = 400_000


def read_translation(lesson: Lesson, lang: str, folder: Path | str = LESSONS) -> Lesson:
    """``lesson`` in ``lang``. Raises FileNotFoundError if there is no translation, ValueError (saying what is
    wrong) if it does not match the English lesson."""
    if not LANG_CODE.fullmatch(lang):
        raise ValueError(f"{lang!r} is not a language code")
    path = Path(folder) / lang / f"{lesson.id}.toml"
    if not path.is_file():
        raise FileNotFoundError(path)
    if path.stat().st_size > MAX_TRANSLATION_BYTES:
        raise ValueError(f"{path.name} is larger than {MAX_TRANSLATION_BYTES:,} bytes")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"{lang}/{path.name} is not valid TOML: {exc}") from None
    extra = set(data) - {"title", "summary", "steps"}
    if extra:
        raise ValueError(f"{lang}/{path.name}: a translation holds title, summary and [[steps]] only, not "
                         f"{', '.join(sorted(extra))}")
    steps = data.get("steps", [])
    if not isinstance(steps, list) or len(steps) != len(lesson.steps):
        raise ValueError(f"{lang}/{path.name} has {len(steps) if isinstance(steps, list) else 0} steps; the English "
                         f"lesson has {len(lesson.steps)}")
    out = []
    for k, (raw, step) in enumerate(zip(steps, lesson.steps)):
        if not isinstance(raw, dict) or set(raw) - {"title", "text"} or not isinstance(raw.get("title"), str) \
                or not isinstance(raw.get("text", ""), str):
            raise ValueError(f"{lang}/{path.name}, step {k + 1}: a translated step has a title and a text only")
        out.append(dataclasses.replace(step, title=raw["title"], text=raw.get("text", "")))
    title, summary = data.get("title"), data.get("summary", lesson.summary)
    if not isinstance(title, str) or not title.strip() or not isinstance(summary, str):
        raise ValueError(f"{lang}/{path.name} needs a title (and a summary, if any, as text)")
    return dataclasses.replace(lesson, title=title, summary=summary, steps=out)


def translate(lesson: Lesson, lang: str, folder: Path | str = LESSONS) -> tuple[Lesson, str]:
    """(``lesson`` in ``lang``, "") or, when it has no usable translation, (the English lesson, why not)."""
    if lang == "en":
        return lesson, ""
    try:
        return read_translation(lesson, lang, folder), ""
    except FileNotFoundError:
        return lesson, "missing"
    except (OSError, ValueError) as exc:
        return lesson, str(exc)
