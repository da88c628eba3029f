"""What a lesson is once loaded: its steps, and the errors a lesson file or a question can raise."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

STEP_FIELDS = {"title", "text", "view", "options", "question", "settings"}
HOOK_PREFIXES = ("hook_", "blocks.", "ln_final.")


def is_hook(view: str) -> bool:
    return view.startswith(HOOK_PREFIXES)


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
