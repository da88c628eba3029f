"""A heavy package imported when a test first uses it, not when the file is collected.

Every xdist worker collects every test file, so a top-level ``import transformers`` (or ``captum``, ``nbclient``)
costs its seconds of CPU in each worker, even those that never run the file's tests: together 9 s per worker
(transformers 3.5 s with torch._dynamo, captum 2.4 s, nbclient 1.1 s; measured 2026-11-27 with ``-X importtime``).
``lazy("transformers")`` is a stand-in whose first attribute imports the package; ``lazy(..., skip=True)`` first skips
the whole file when the package is not installed (``importlib.util.find_spec``: no import). Mutation runs, whose
forked children would each pay for the import, preload them instead (tests/conftest.py, ``GPTVIZ_PRELOAD``)."""
import importlib
import importlib.util

import pytest

HEAVY = ("transformers", "captum", "captum.attr", "nbformat", "nbclient", "huggingface_hub")


class LazyModule:
    """Stands in for module ``name``; the first attribute asked for imports it."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr: str):
        return getattr(importlib.import_module(self._name), attr)


def lazy(name: str, skip: bool = False) -> LazyModule:
    if skip and importlib.util.find_spec(name) is None:
        pytest.skip(f"{name} is not installed", allow_module_level=True)
    return LazyModule(name)


def preload() -> None:
    """Import the heavy packages now (a mutation run's test server: its forked children inherit them)."""
    for name in HEAVY:
        if importlib.util.find_spec(name.split(".")[0]) is not None:
            importlib.import_module(name)
    from huggingface_hub import snapshot_download  # noqa: F401 - a lazy import of its own
    from transformers import (  # noqa: F401 - their modules
        GemmaForCausalLM,
        GPT2LMHeadModel,
        GPTNeoXForCausalLM,
        LlamaForCausalLM,
    )
