"""``MemoryStore``: the live classroom's classes in this process (one ``streamlit run app.py``, nothing else to
start). One lock guards every read and write; expired classes are swept on ``create`` and dropped when read.
The UI holds one instance in a ``st.cache_resource`` and only ever calls its methods."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field, replace
from typing import Optional

from .store import (
    MAX_CHOICES,
    MAX_STEP,
    ClassState,
    ClassStore,
    ClassStoreFull,
    check_new_class,
    good_code,
    good_int,
    good_nickname,
    good_seconds,
    good_student,
    issue_student,
    new_code,
    new_secret,
    new_token,
    same_token,
    signed_student,
    token_hash,
)


@dataclass
class _Class:
    state: ClassState
    token_hash: str
    secret: str  # signs this class's student ids; never leaves the store
    students: dict[str, str] = field(default_factory=dict)  # student id -> nickname
    answers: dict[int, dict[str, int]] = field(default_factory=dict)  # step -> student id -> choice


class MemoryStore(ClassStore):
    def __init__(self, idle_seconds: Optional[float] = None, max_classes: Optional[int] = None,
                 max_students: Optional[int] = None, clock=time.time):
        super().__init__(idle_seconds, max_classes, max_students)
        self._clock = clock
        self._lock = threading.Lock()
        self._classes: dict[str, _Class] = {}

    # --- under the lock only -------------------------------------------------------------------------------------
    def _live(self, code: object) -> Optional[_Class]:
        if not good_code(code):
            return None
        c = self._classes.get(code)
        if c is not None and self._clock() - c.state.touched > c.state.idle:
            del self._classes[code]
            return None
        return c

    def _sweep(self) -> None:
        now = self._clock()
        for code in [k for k, c in self._classes.items() if now - c.state.touched > c.state.idle]:
            del self._classes[code]

    def _touch(self, c: _Class, **changes) -> None:
        c.state = replace(c.state, touched=self._clock(), **changes)

    # --- the contract ----------------------------------------------------------------------------------------------
    def create(self, lesson_id: str, lang: str = "en", settings: str = "") -> tuple[str, str]:
        check_new_class(lesson_id, lang, settings)
        token = new_token()
        with self._lock:
            self._sweep()
            if len(self._classes) >= self.max_classes:
                raise ClassStoreFull(f"this server already holds {self.max_classes} classes")
            code = new_code()
            while code in self._classes:
                code = new_code()
            now = self._clock()
            self._classes[code] = _Class(ClassState(code, lesson_id, lang, 0, False, 1, now, now, settings,
                                                    self.idle_seconds), token_hash(token), new_secret())
        return code, token

    def get(self, code: str) -> Optional[ClassState]:
        with self._lock:
            c = self._live(code)
            return None if c is None else c.state

    def version(self, code: str) -> Optional[int]:
        with self._lock:
            c = self._live(code)
            return None if c is None else c.state.version

    def is_teacher(self, code: str, token: str) -> bool:
        with self._lock:
            c = self._live(code)
            return c is not None and same_token(token, c.token_hash)

    def advance(self, code: str, token: str, step: int) -> bool:
        if not good_int(step, 0, MAX_STEP):
            return False
        with self._lock:
            c = self._live(code)
            if c is None or not same_token(token, c.token_hash):
                return False
            self._touch(c, step=step, revealed=False, version=c.state.version + 1)
            return True

    def reveal(self, code: str, token: str, revealed: bool = True) -> bool:
        if not isinstance(revealed, bool):
            return False
        with self._lock:
            c = self._live(code)
            if c is None or not same_token(token, c.token_hash):
                return False
            self._touch(c, revealed=revealed, version=c.state.version + 1)
            return True

    def _joined(self, c: _Class, student_id: str, nickname: Optional[str]) -> bool:
        if student_id not in c.students and len(c.students) >= self.max_students:
            return False
        if nickname or student_id not in c.students:
            c.students[student_id] = nickname or ""
        return True

    def _student(self, code: object, student_id: object) -> Optional[_Class]:
        """The live class, when ``student_id`` is one it issued (under the lock only)."""
        c = self._live(code)
        return c if c is not None and signed_student(c.secret, code, student_id) else None

    def answer(self, code: str, student_id: str, step: int, choice: int) -> bool:
        if not (good_student(student_id) and good_int(step, 0, MAX_STEP) and good_int(choice, 0, MAX_CHOICES)):
            return False
        with self._lock:
            c = self._student(code, student_id)
            if c is None or c.state.revealed or c.state.step != step or not self._joined(c, student_id, None):
                return False
            c.answers.setdefault(step, {})[student_id] = choice
            self._touch(c)
            return True

    def answers(self, code: str, step: int) -> dict[int, int]:
        if not good_int(step, 0, MAX_STEP):
            return {}
        with self._lock:
            c = self._live(code)
            chosen = [] if c is None else list(c.answers.get(step, {}).values())
        counts: dict[int, int] = {}
        for choice in chosen:
            counts[choice] = counts.get(choice, 0) + 1
        return counts

    def my_answer(self, code: str, student_id: str, step: int) -> Optional[int]:
        if not (good_student(student_id) and good_int(step, 0, MAX_STEP)):
            return None
        with self._lock:
            c = self._student(code, student_id)
            return None if c is None else c.answers.get(step, {}).get(student_id)

    def join(self, code: str, student_id: str, nickname: str = "") -> bool:
        if not good_student(student_id) or not good_nickname(nickname):
            return False
        with self._lock:
            c = self._student(code, student_id)
            if c is None or not self._joined(c, student_id, nickname.strip()):
                return False
            self._touch(c)
            return True

    def students(self, code: str) -> int:
        with self._lock:
            c = self._live(code)
            return 0 if c is None else len(c.students)

    def nicknames(self, code: str) -> list[str]:
        with self._lock:
            c = self._live(code)
            return [] if c is None else sorted(n for n in c.students.values() if n)

    def new_student(self, code: str) -> Optional[str]:
        with self._lock:
            c = self._live(code)
            return None if c is None else issue_student(c.secret, code)

    def issued(self, code: str, student_id: str) -> bool:
        with self._lock:
            return self._student(code, student_id) is not None

    def end(self, code: str, token: str, only_if_empty: bool = False) -> bool:
        with self._lock:
            c = self._live(code)
            if c is None or not same_token(token, c.token_hash) or (only_if_empty and c.students):
                return False
            del self._classes[code]
            return True

    def expire(self, code: str, token: str, seconds: float) -> bool:
        if not good_seconds(seconds):
            return False
        with self._lock:
            c = self._live(code)
            if c is None or not same_token(token, c.token_hash):
                return False
            self._touch(c, idle=min(c.state.idle, float(seconds)))
            return True
