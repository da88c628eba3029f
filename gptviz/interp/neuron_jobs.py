"""Neuron summaries computed in the background, one computation per model, shared by every session.

``job_for(key, model, tok, n_tokens)`` returns the job for ``key`` (what names the model: the app passes its
config JSON and model key), starting it in a daemon thread the first time. The thread only reads the model (a
forward pass with no hooks registered and no weight written), reports ``progress`` (0..1) as it goes, and keeps
``result`` (a ``NeuronStats``) or ``error`` (a sentence) when it ends. A model above ``BIG_MODEL_PARAMS`` waits
for the process-wide ``BIG_LOAD`` slot first (state ``"waiting"``, with ``ahead`` runs before it). At most
``MAX_JOBS`` jobs are kept; the oldest finished ones are forgotten first. No Streamlit here.
"""
from __future__ import annotations

import atexit
import threading
from collections import OrderedDict
from contextlib import nullcontext
from typing import Hashable, Optional

from ..run.slots import BIG_LOAD, Slots
from .neurons import NeuronStats, compute

BIG_MODEL_PARAMS = 20_000_000
MAX_JOBS = 8
APP_TOKENS = 4096  # the held-out tokens the app reads for a model with no shipped summary (fewer for a big one)


class Stopped(Exception):
    """The process is ending: a running job stops after its current forward pass."""


_STOP = threading.Event()


class NeuronJob:
    """One background computation of a model's neuron summary."""

    def __init__(self, model, tok, n_tokens: int, slots: Optional[Slots] = None):
        self.n_tokens = int(n_tokens)
        self.state = "queued"  # queued | waiting | running | done | failed
        self.progress = 0.0
        self.ahead = 0
        self.result: Optional[NeuronStats] = None
        self.error = ""
        self._slots = slots
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(model, tok), name="gptviz-neurons", daemon=True)

    def start(self) -> "NeuronJob":
        self._thread.start()
        return self

    @property
    def finished(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Block until the job ends (for tests and commands); returns whether it did."""
        return self._done.wait(timeout)

    def _waiting(self, ahead: int) -> None:
        self.state, self.ahead = "waiting", int(ahead)

    def _tell(self, fraction: float) -> None:
        if _STOP.is_set():
            raise Stopped("the server is stopping")
        self.progress = max(self.progress, min(1.0, float(fraction)))

    def _run(self, model, tok) -> None:
        try:
            hold = self._slots.hold(on_wait=self._waiting) if self._slots is not None else nullcontext()
            with hold:
                self.state = "running"
                result = compute(model, tok, self.n_tokens, progress=self._tell)
            for name in ("windows", "top_pos", "top_val", "hist", "hist_lo", "hist_hi"):
                getattr(result, name).flags.writeable = False  # shared by every session: read only
            self.result = result
            self.state = "done"
        except Exception as exc:  # noqa: BLE001 - a failure is reported on the page, never raised in a thread
            self.error = f"{type(exc).__name__}: {exc}" if not isinstance(exc, ValueError) else str(exc)
            self.state = "failed"
        finally:
            self.progress = 1.0 if self.state == "done" else self.progress
            self._done.set()


_JOBS: "OrderedDict[Hashable, NeuronJob]" = OrderedDict()
_LOCK = threading.Lock()


def job_for(key: Hashable, model, tok, n_tokens: int = APP_TOKENS) -> NeuronJob:
    """The job computing ``model``'s neuron summary, started now if there is none for ``key`` yet (``forget`` a
    failed one to try again). ``key`` must name the weights: the same key, the same model."""
    with _LOCK:
        job = _JOBS.get(key)
        if job is not None:
            _JOBS.move_to_end(key)
            return job
        big = model.config.num_params() > BIG_MODEL_PARAMS
        job = NeuronJob(model, tok, n_tokens, BIG_LOAD if big else None)
        _JOBS[key] = job
        while len(_JOBS) > MAX_JOBS:
            old = next((k for k, j in _JOBS.items() if j.finished), None)
            if old is None:
                break
            _JOBS.pop(old)
    return job.start()


@atexit.register
def _stop_all(timeout: float = 30.0) -> None:
    """At exit, stop the running jobs after their current forward pass and wait for them: a thread killed inside
    torch at interpreter shutdown aborts the whole process."""
    _STOP.set()
    with _LOCK:
        jobs = list(_JOBS.values())
    for job in jobs:
        if job._thread.is_alive():
            job._thread.join(timeout)


def existing(key: Hashable) -> Optional[NeuronJob]:
    """The job for ``key`` if one was started (and not forgotten)."""
    with _LOCK:
        return _JOBS.get(key)


def forget(key: Hashable) -> None:
    """Drop a finished job (a failed one, so that it can be tried again)."""
    with _LOCK:
        job = _JOBS.get(key)
        if job is not None and job.finished:
            _JOBS.pop(key)
