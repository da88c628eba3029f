"""The live classroom's store: what a class is (``ClassState``), the checks every argument passes before a store
is touched, and ``ClassStore``, the contract both stores keep (``MemoryStore`` in the process, ``RedisStore``
shared by several replicas). No Streamlit.

A class is created by a teacher for one lesson and gets a short ``code`` (6 characters from an alphabet without
0/O/1/I) that students type, and a secret ``teacher_token`` that only the teacher's address carries. The store
keeps only the hash of the token; every teacher-only call compares hashes with ``hmac.compare_digest``.

The contract (every method takes untrusted input and returns ``None``/``False``/empty on a bad argument, a
missing or an expired class; none raises, except ``create`` when the store is full or a bad lesson id, and any
call with ``ClassStoreUnavailable`` when Redis cannot be reached):

``create(lesson_id, lang="en", settings="") -> (code, teacher_token)``
    a new class at step 0, not revealed, version 1. ``settings`` (optional): the teacher's shared settings as a
    URL query string (printable ASCII, at most ``MAX_SETTINGS_CHARS``), so a student who types the code sees the
    teacher's model and text; whoever applies it checks it as any address. Raises ``ClassStoreFull`` once
    ``max_classes`` live classes exist, ``ValueError`` on a bad lesson id, language or settings.
``get(code) -> ClassState | None``
    lesson_id, lang, step, revealed, version, created, touched (epoch seconds), settings.
``version(code) -> int | None``
    what followers poll, one small read. It grows by one on every ``advance`` and every ``reveal`` (never on
    answers or joins), so a follower reruns only when the teacher did something.
``advance(code, token, step) -> bool``
    teacher only (False when the token is wrong); moves the class to ``step`` and clears ``revealed``.
``reveal(code, token, revealed=True) -> bool``
    teacher only; shows (or hides again) the answer of the current step.
``answer(code, student_id, step, choice) -> bool``
    a student's answer to the current step's question: one per student (a second call replaces the first), only
    for the class's current ``step``, refused once revealed; ``0 <= choice < MAX_CHOICES``. A student who has not
    joined is joined (without a nickname) if the class has room.
``answers(code, step) -> dict[int, int]``
    choice -> how many students chose it, for any step.
``join(code, student_id, nickname="") -> bool``
    adds the student; again with a nickname: changes it (an empty one keeps the old); False when the class is
    full or the nickname is bad.
``new_student(code) -> str | None``
    a student id this class issued (None: no such class). Each class has its own random ``secret`` (kept in the
    store beside the class, never returned by any method, never in ``ClassState``); an id is a random part and
    an HMAC-SHA256 of the code and that part keyed with the secret, truncated, base64url
    (``STUDENT_ID_CHARS`` characters). It adds no student: ``join`` (or a first ``answer``) does.
``issued(code, student_id) -> bool``
    the id was issued by this class (its signature checks, ``hmac.compare_digest``). ``join``, ``answer`` and
    ``my_answer`` check it themselves: any other id, well formed or not (made up, another class's, one
    character changed), joins nothing, answers nothing and reads nothing.
``end(code, token, only_if_empty=False) -> bool``
    teacher only; the class and everything in it is gone at once. ``only_if_empty``: only when no student has
    joined (False, and nothing changes, when one has), in one step with the check.
``expire(code, token, seconds) -> bool``
    teacher only; from now on the class ends after ``seconds`` without activity (0 < seconds <= its idle time
    so far: it never lengthens). The page does this when a teacher leaves a class students joined
    (``LEFT_CLASS_SECONDS``).
``students(code) -> int``
    how many students joined.
Extras (not needed by followers):
``my_answer(code, student_id, step) -> int | None``
    the choice this student made for that step (so a reload shows it again).
``nicknames(code) -> list[str]``
    the joined students' nicknames, non-empty ones only, sorted.
``is_teacher(code, token) -> bool``
    the token is this class's teacher token.

Activity (create, advance, reveal, answer, join) refreshes the class; a class nobody touched for its idle time
(``idle_seconds``: ``GPTVIZ_CLASS_IDLE_SECONDS``, default 4 hours; less after ``expire``; ``ClassState.idle``) is
gone. A class holds no personal data beyond the optional nickname.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
import secrets
from dataclasses import dataclass
from typing import Optional

CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O, no 1/I
CODE_LEN = 6
CODE_RE = re.compile(r"[A-HJ-NP-Z2-9]{6}")
TOKEN_RE = re.compile(r"[A-Za-z0-9_-]{20,64}")
STUDENT_RE = re.compile(r"[A-Za-z0-9_-]{8,32}")  # well formed; an issued id is also signed (``signed_student``)
STUDENT_NONCE_BYTES = 12  # the random part: 12 bytes, 16 base64url characters
STUDENT_SIG_BYTES = 12  # the HMAC-SHA256, truncated to 96 bits: 16 base64url characters
_SIG_CHARS = STUDENT_SIG_BYTES * 4 // 3
STUDENT_ID_CHARS = STUDENT_NONCE_BYTES * 4 // 3 + _SIG_CHARS  # 32: an issued id, the random part then the signature
LESSON_RE = re.compile(r"[A-Za-z0-9_.-]{1,80}")
LANG_RE = re.compile(r"[a-z]{2,3}(-[A-Za-z0-9]{2,8})?")  # as gptviz.present.lessons.wording.LANG_CODE
NICKNAME_MAX = 24
NICKNAME_RE = re.compile(r"[\w .'-]{0,%d}" % NICKNAME_MAX)  # letters of any script, digits, space, . ' -
MAX_CHOICES = 8  # as gptviz.present.lessons.questions.MAX_CHOICES (a test checks they agree)
MAX_STEP = 500
MAX_SETTINGS_CHARS = 16384
SETTINGS_RE = re.compile(r"[\x21-\x7e]*")  # a URL query string: printable ASCII, no space
DEFAULT_IDLE_SECONDS = 4 * 3600
DEFAULT_MAX_CLASSES = 200
DEFAULT_MAX_STUDENTS = 200
# A class its teacher left ("Leave the class on this screen") while students were in it ends after this long
# without activity (an empty one ends at once): a session that starts and leaves classes in a loop holds none.
LEFT_CLASS_SECONDS = 600
MAX_IDLE_SECONDS = 7 * 24 * 3600


class ClassStoreFull(RuntimeError):
    """``create`` when the store already holds ``max_classes`` live classes."""


class ClassStoreUnavailable(RuntimeError):
    """The shared store (Redis) cannot be reached or answered with an error; the message says which."""


@dataclass(frozen=True)
class ClassState:
    code: str
    lesson_id: str
    lang: str
    step: int
    revealed: bool
    version: int
    created: float  # epoch seconds
    touched: float  # epoch seconds, the last activity
    settings: str = ""  # the teacher's shared settings, a URL query string ("preset=default&text=...")
    idle: float = 0.0  # seconds: the class ends this long after ``touched`` (the store's idle_seconds, or less)


def _env_number(name: str, default: float, low: float, high: float) -> float:
    """A positive number from the environment, clamped to [low, high]; the default when unset or not a number."""
    raw = os.environ.get(name, "").strip()
    try:
        value = float(raw) if raw else default
    except ValueError:
        return default
    return min(max(value, low), high) if value == value else default


def idle_seconds_from_env() -> float:
    return _env_number("GPTVIZ_CLASS_IDLE_SECONDS", DEFAULT_IDLE_SECONDS, 0.05, MAX_IDLE_SECONDS)


def max_classes_from_env() -> int:
    return int(_env_number("GPTVIZ_MAX_CLASSES", DEFAULT_MAX_CLASSES, 1, 100_000))


def max_students_from_env() -> int:
    return int(_env_number("GPTVIZ_MAX_STUDENTS", DEFAULT_MAX_STUDENTS, 1, 10_000))


def normalise_code(text: object) -> Optional[str]:
    """A code as a person types it ("abc-def", " AbC DeF ") -> "ABCDEF", or None when it cannot be one."""
    if not isinstance(text, str) or len(text) > 20:
        return None
    code = re.sub(r"[\s-]", "", text).upper()
    return code if CODE_RE.fullmatch(code) else None


def good_code(code: object) -> bool:
    return isinstance(code, str) and CODE_RE.fullmatch(code) is not None


def good_token(token: object) -> bool:
    return isinstance(token, str) and TOKEN_RE.fullmatch(token) is not None


def good_student(student_id: object) -> bool:
    return isinstance(student_id, str) and STUDENT_RE.fullmatch(student_id) is not None


def good_nickname(nickname: object) -> bool:
    return isinstance(nickname, str) and NICKNAME_RE.fullmatch(nickname) is not None


def good_int(value: object, low: int, high: int) -> bool:
    """An int (not a bool) with low <= value < high."""
    return isinstance(value, int) and not isinstance(value, bool) and low <= value < high


def new_code() -> str:
    return "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LEN))


def new_token() -> str:
    return secrets.token_urlsafe(24)


def new_secret() -> str:
    """A class's own key for signing its students' ids (256 bits)."""
    return secrets.token_urlsafe(32)


def _student_signature(secret: str, code: str, nonce: str) -> str:
    mac = hmac.new(secret.encode(), f"{code}:{nonce}".encode(), hashlib.sha256).digest()[:STUDENT_SIG_BYTES]
    return base64.urlsafe_b64encode(mac).decode()


def issue_student(secret: str, code: str) -> str:
    """A new student id for class ``code``: a random part, then its signature under the class's secret."""
    nonce = secrets.token_urlsafe(STUDENT_NONCE_BYTES)
    return nonce + _student_signature(secret, code, nonce)


def signed_student(secret: Optional[str], code: str, student_id: object) -> bool:
    """The id was issued for class ``code`` with this secret (constant-time compare); False for anything else."""
    if not secret or not good_student(student_id) or len(student_id) != STUDENT_ID_CHARS:
        return False
    nonce, signature = student_id[:-_SIG_CHARS], student_id[-_SIG_CHARS:]
    return hmac.compare_digest(signature, _student_signature(secret, code, nonce))


def good_seconds(seconds: object) -> bool:
    """A number of seconds (int or float, not a bool) in (0, MAX_IDLE_SECONDS]."""
    return (isinstance(seconds, (int, float)) and not isinstance(seconds, bool)
            and 0 < seconds <= MAX_IDLE_SECONDS)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def same_token(token: object, stored_hash: Optional[str]) -> bool:
    """The token's hash equals the stored one, compared in constant time; False for a malformed token."""
    if not good_token(token) or not stored_hash:
        return False
    return hmac.compare_digest(token_hash(token), stored_hash)


def check_new_class(lesson_id: object, lang: object, settings: object = "") -> None:
    if not isinstance(lesson_id, str) or not LESSON_RE.fullmatch(lesson_id):
        raise ValueError("a lesson id is 1 to 80 letters, digits, '_', '.' or '-'")
    if not isinstance(lang, str) or not LANG_RE.fullmatch(lang):
        raise ValueError("a language is a code such as 'en', 'es' or 'pt-BR'")
    if not isinstance(settings, str) or len(settings) > MAX_SETTINGS_CHARS or not SETTINGS_RE.fullmatch(settings):
        raise ValueError(f"the settings are a URL query string of at most {MAX_SETTINGS_CHARS} characters")


class ClassStore:
    """The contract (see the module's docstring). Subclasses implement every method; the base holds the limits."""

    def __init__(self, idle_seconds: Optional[float] = None, max_classes: Optional[int] = None,
                 max_students: Optional[int] = None):
        self.idle_seconds = float(idle_seconds) if idle_seconds is not None else idle_seconds_from_env()
        self.max_classes = int(max_classes) if max_classes is not None else max_classes_from_env()
        self.max_students = int(max_students) if max_students is not None else max_students_from_env()

    def create(self, lesson_id: str, lang: str = "en", settings: str = "") -> tuple[str, str]:
        raise NotImplementedError

    def get(self, code: str) -> Optional[ClassState]:
        raise NotImplementedError

    def version(self, code: str) -> Optional[int]:
        raise NotImplementedError

    def advance(self, code: str, token: str, step: int) -> bool:
        raise NotImplementedError

    def reveal(self, code: str, token: str, revealed: bool = True) -> bool:
        raise NotImplementedError

    def answer(self, code: str, student_id: str, step: int, choice: int) -> bool:
        raise NotImplementedError

    def answers(self, code: str, step: int) -> dict[int, int]:
        raise NotImplementedError

    def join(self, code: str, student_id: str, nickname: str = "") -> bool:
        raise NotImplementedError

    def students(self, code: str) -> int:
        raise NotImplementedError

    def my_answer(self, code: str, student_id: str, step: int) -> Optional[int]:
        raise NotImplementedError

    def nicknames(self, code: str) -> list[str]:
        raise NotImplementedError

    def is_teacher(self, code: str, token: str) -> bool:
        """The token is this class's teacher token (for the UI to decide what to draw; the teacher-only methods
        check it again themselves)."""
        raise NotImplementedError

    def new_student(self, code: str) -> Optional[str]:
        raise NotImplementedError

    def issued(self, code: str, student_id: str) -> bool:
        raise NotImplementedError

    def end(self, code: str, token: str, only_if_empty: bool = False) -> bool:
        raise NotImplementedError

    def expire(self, code: str, token: str, seconds: float) -> bool:
        raise NotImplementedError
