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
    Python starts one from time to time in the middle of a page's run; the imports are never garbage.
    No collection first: right after ``import gptviz.ui`` one found nothing to free (0 objects, 148 ms, on the
    server's critical path as a class joins a fresh server); what the young generations hold then is frozen too."""
    global _frozen, _modules_at_freeze
    if not _frozen:
        import gc

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


# Threads for torch's arithmetic, chosen per run by the model's size. A small model's matrices are too small to
# split: on two threads the Shakespeare GPT's trace (T = 27) cost 14-16 ms of CPU against 8-9 ms on one, the second
# thread mostly spinning between operations. In a server with 20 students typing on Attention (the bench's class
# CPU row, three alternated runs each, 2026-11-28) one thread cost 59-62 ms of server CPU a run against 74-85 ms,
# and the change p95 fell from 0.15-0.20 s to 0.13-0.15 s. A big model's matrices are worth splitting across cores.
SMALL_MODEL_THREADS = 1
# The app's one line between a small and a big model, in parameters: the pages, the caches and the background jobs
# all import it from here.
BIG_MODEL_PARAMS = 20_000_000


def threads_for(num_params: int, cores: int | None = None) -> int:
    """How many threads torch should use for a model of ``num_params`` parameters: 1 up to 20 million, else every
    core (``cores``, default ``os.cpu_count()``), or ``GPTVIZ_TORCH_THREADS`` when it is set (1 to 64)."""
    import os

    raw = os.environ.get("GPTVIZ_TORCH_THREADS", "").strip()
    if raw.isdigit() and 1 <= int(raw) <= 64:
        return int(raw)
    if num_params <= BIG_MODEL_PARAMS:
        return SMALL_MODEL_THREADS
    return max(1, cores if cores is not None else (os.cpu_count() or 1))


def use_threads(n: int) -> None:
    """Set torch's thread count for the calling thread's work. Each of Streamlit's script runs is a thread of its
    own, and OpenMP keeps the count per thread, so one session's choice does not change another's run. One catch:
    torch gives a thread the process-wide count (the last one set anywhere) the first time it splits work, so the
    thread is made to take it first and is then given its own."""
    import torch

    torch.get_num_threads()  # the thread's first contact: torch copies the process-wide count into it now
    torch.set_num_threads(max(1, int(n)))


# Long-lived threads for the app's traces. Each of Streamlit's script runs is a new thread, and glibc hands a new
# thread whichever malloc arena is free then: the memory an evicted trace gave back sits in another thread's arena,
# and the next trace faults in fresh pages. Qwen3-0.6B shape, Home at T = 128, 10 text changes in AppTest: 150k-178k
# minor faults on 6 of them and traces of 1.38-2.66 s; in two long-lived threads, 19k-49k after the first two
# (the rest is the logits, over glibc's 32 MB mmap threshold) and 1.35-1.65 s.
_pool = None
_pool_lock = threading.Lock()
_worker = threading.local()


def worker_count(cores: int | None = None) -> int:
    """How many trace threads the process keeps: one per core, at least 2 (two small models' traces run at once)."""
    import os

    return max(2, cores if cores is not None else (os.cpu_count() or 1))


def in_worker(fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` run in one of the process's long-lived worker threads (``worker_count``), with the
    caller's torch thread count; its result returned and its exception raised here. Called from a worker thread, it
    runs ``fn`` there (a job never waits for a worker it holds)."""
    global _pool
    if getattr(_worker, "inside", False):
        return fn(*args, **kwargs)
    import torch

    n = torch.get_num_threads()
    if _pool is None:
        with _pool_lock:
            if _pool is None:
                from concurrent.futures import ThreadPoolExecutor

                _pool = ThreadPoolExecutor(worker_count(), thread_name_prefix="gptviz-trace")

    def job():
        _worker.inside = True
        use_threads(n)
        return fn(*args, **kwargs)

    return _pool.submit(job).result()
