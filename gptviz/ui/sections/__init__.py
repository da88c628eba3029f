"""Page sections: each a function ``f(ctx, *, key, **options)`` that draws one part of a page.

Pages are lists of sections; lessons, presenter mode and the HTML report call the same functions by
name through ``SECTIONS``, so no layout code is ever copied. ``key`` makes every widget key of a call
unique, so one section can be drawn twice on a page.
"""
from __future__ import annotations

from typing import Callable

SECTIONS: dict[str, Callable] = {}
FAILED: dict[str, str] = {}  # section module -> why it could not be imported (its sections are missing)


def section(name: str):
    """Register a section function under ``name`` (e.g. "attention.pattern")."""
    def register(fn: Callable) -> Callable:
        SECTIONS[name] = fn
        fn.section_name = name
        return fn
    return register


def get(name: str) -> Callable:
    load_all()
    if name not in SECTIONS:
        raise KeyError(f"unknown view {name!r}: choose one of {', '.join(sorted(SECTIONS))}")
    return SECTIONS[name]


def load_all() -> dict[str, Callable]:
    """Import every section module, so the registry is complete. A module that fails to import is left out
    (and listed in ``FAILED``): the sections of the others still work."""
    import importlib
    import pkgutil

    for mod in pkgutil.iter_modules(__path__):
        name = f"{__name__}.{mod.name}"
        try:
            importlib.import_module(name)
            FAILED.pop(mod.name, None)
        except Exception as exc:  # noqa: BLE001 - one broken module must not take every section down
            FAILED[mod.name] = f"{type(exc).__name__}: {exc}"
    return SECTIONS
