"""Process-level tuning that the app (and the benchmark, which measures the app) apply once.

A trace keeps every intermediate tensor alive, so it asks the allocator for fresh memory that a plain
forward pass would have reused. With glibc's defaults that memory is returned to the kernel after each
request and faulted in, zeroed, again on the next: for GPT-2 small at T = 256 that alone made a trace
~1.2× slower than a forward pass. Keeping freed memory in the process (and serving mid-sized tensors
from the heap rather than from fresh mmaps) removes the difference. The cost: the server's resident
memory stays at its high-water mark instead of shrinking between requests.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import sys
import threading

M_TRIM_THRESHOLD = -1
M_TOP_PAD = -2
M_MMAP_THRESHOLD = -3

_done = False


def tune_allocator(trim_threshold: int = 1 << 30, top_pad: int = 256 << 20, mmap_threshold: int = 32 << 20) -> bool:
    """Ask glibc to keep freed memory for reuse. Returns False where there is no glibc (macOS, Windows, musl)."""
    global _done
    if _done:
        return True
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    ok = all(mallopt(param, value) == 1 for param, value in (
        (M_MMAP_THRESHOLD, mmap_threshold), (M_TRIM_THRESHOLD, trim_threshold), (M_TOP_PAD, top_pad)))
    _done = ok
    return ok


_frozen = False


def freeze_imports() -> None:
    """Move every object alive now (the imported modules: torch, plotly, streamlit, ~300,000 objects) out of
    the garbage collector's sight, once. A full collection over them takes ~170 ms on two cores, and
    Python starts one from time to time in the middle of a page's run; the imports are never garbage."""
    global _frozen, _modules_at_freeze
    if not _frozen:
        import gc

        gc.collect()
        gc.freeze()
        _frozen = True
        _modules_at_freeze = len(sys.modules)


_modules_at_freeze = 0
_refreeze_lock = threading.Lock()
NEW_MODULES_TO_REFREEZE = 50


def refreeze_after_imports() -> bool:
    """Freeze again once at least NEW_MODULES_TO_REFREEZE modules were imported since the last freeze. Some heavy
    imports happen only when first needed: building the first model imports torch._dynamo and sympy (~800 modules,
    ~120,000 objects), integrated gradients captum, matplotlib and IPython. Left in the collector's sight, they made
    every full collection (one every few seconds of a busy server) scan them again: 90 to 200 ms each, measured in
    the bench's pages part. Called at the start of every page's run: a handful of times in a server's life it costs
    one full collection, otherwise a length check. Returns whether it froze."""
    global _modules_at_freeze
    if not _frozen or len(sys.modules) - _modules_at_freeze < NEW_MODULES_TO_REFREEZE:
        return False
    with _refreeze_lock:
        if len(sys.modules) - _modules_at_freeze < NEW_MODULES_TO_REFREEZE:
            return False
        import gc

        gc.collect()
        gc.freeze()
        _modules_at_freeze = len(sys.modules)
        return True
