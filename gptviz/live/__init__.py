"""The live classroom (issue 23): a teacher's class that students join with a short code, follow step by step,
and answer the predict-then-reveal questions in. No Streamlit here: ``store`` is the contract and the checks,
``memory_store`` keeps classes in the process, ``redis_store`` in Redis (``GPTVIZ_REDIS_URL``) for several
replicas. ``open_store()`` picks one."""
from __future__ import annotations

import os
from typing import Optional

from .memory_store import MemoryStore
from .store import (
    CODE_ALPHABET,
    LEFT_CLASS_SECONDS,
    MAX_CHOICES,
    NICKNAME_MAX,
    ClassState,
    ClassStore,
    ClassStoreFull,
    ClassStoreUnavailable,
    good_code,
    good_nickname,
    good_student,
    good_token,
    normalise_code,
)

_UNSET = object()


def open_store(url: Optional[str] = _UNSET, **limits) -> ClassStore:  # type: ignore[assignment]
    """A ``RedisStore`` when ``url`` (default: ``GPTVIZ_REDIS_URL``) is set and not empty, else a ``MemoryStore``.
    ``limits``: idle_seconds, max_classes, max_students (default: from the environment)."""
    if url is _UNSET:
        url = os.environ.get("GPTVIZ_REDIS_URL", "")
    url = (url or "").strip()
    if url:
        from .redis_store import RedisStore
        return RedisStore(url, **limits)
    return MemoryStore(**limits)


__all__ = ["CODE_ALPHABET", "LEFT_CLASS_SECONDS", "MAX_CHOICES", "NICKNAME_MAX", "ClassState", "ClassStore",
           "ClassStoreFull", "ClassStoreUnavailable", "MemoryStore", "good_code", "good_nickname", "good_student",
           "good_token", "normalise_code", "open_store"]
