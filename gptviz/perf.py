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
    global _frozen
    if not _frozen:
        import gc

        gc.collect()
        gc.freeze()
        _frozen = True
