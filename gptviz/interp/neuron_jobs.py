"""Neuron summaries computed in the background, one computation per model, shared by every session.

``job_for(key, load, tok, n_tokens, params=…, owner=…)`` returns the job for ``key`` (what names the model: the
app passes its config JSON and model key), starting it in a daemon thread the first time. ``load()`` gives the
model (or None once it is gone): it is called only when the job may run, so a waiting job holds no model (the
app passes a weak reference). The thread only reads the model (a forward pass with no hooks registered and no
weight written), reports ``progress`` (0..1) as it goes, and keeps ``result`` (a ``NeuronStats``) or ``error``
(a sentence) when it ends. A model above ``BIG_MODEL_PARAMS`` parameters waits for the process-wide ``BIG_LOAD``
slot first (state ``"waiting"``, with ``ahead`` runs before it).

Bounded (issue 33): at most ``MAX_UNFINISHED`` jobs queued, waiting or running at once (one more is refused with
``QueueFull``, a sentence saying to come back), at most ``MAX_JOBS`` kept (the oldest finished forgotten first),
and an ``owner`` (the app: a session) waits for at most one job: asking for another takes it off the one it waited
for, which is cancelled when no one else waits for it. No Streamlit here.
"""
from __future__ import annotations

import atexit
import threading
import time
from collections import OrderedDict
from contextlib import nullcontext
from typing import Any, Callable, Hashable, Optional

from ..perf import BIG_MODEL_PARAMS
from ..run.slots import BIG_LOAD, Slots
from .neurons import NeuronStats, compute

MAX_JOBS = 8
MAX_UNFINISHED = 8
APP_TOKENS = 4096  # the held-out tokens the app reads for a model with no shipped summary (fewer for a big one)


class Stopped(Exception):
    """The process is ending: a running job stops after its current forward pass."""


class Cancelled(Exception):
    """No one waits for this job any more: it leaves the queue before it loads its model."""


class QueueFull(RuntimeError):
    """As many summaries as the server computes at once are queued or running: the message says what to do."""


_STOP = threading.Event()


class NeuronJob:
    """One background computation of a model's neuron summary."""

    def __init__(self, load: Callable[[], Any], tok, n_tokens: int, slots: Optional[Slots] = None):
        self.n_tokens = int(n_tokens)
        self.state = "queued"  # queued | waiting | running | done | failed | cancelled
        self.progress = 0.0
        self.ahead = 0
        self.result: Optional[NeuronStats] = None
        self.error = ""
        self.owners: set = set()  # who waits for it (the app: sessions); changed under the table's lock
        self._load: Optional[Callable[[], Any]] = load  # None once the run has taken it
        self._slots = slots
        self._cancel = threading.Event()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(tok,), name="gptviz-neurons", daemon=True)

    def start(self) -> "NeuronJob":
        self._thread.start()
        return self

    @property
    def finished(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Block until the job ends (for tests and commands); returns whether it did."""
        return self._done.wait(timeout)

    @property
    def started(self) -> bool:
        """Whether it runs or has run: past its wait, its model loaded."""
        return self.state not in ("queued", "waiting")

    def cancel(self) -> None:
        """Leave the queue (if it has not started): it ends "cancelled", having loaded nothing."""
        self._cancel.set()

    def _waiting(self, ahead: int) -> None:
        if self._cancel.is_set():
            raise Cancelled("no one waits for this summary any more")
        self.state, self.ahead = "waiting", int(ahead)

    def _tell(self, fraction: float) -> None:
        if _STOP.is_set():
            raise Stopped("the server is stopping")
        self.progress = max(self.progress, min(1.0, float(fraction)))

    def _run(self, tok) -> None:
        try:
            hold = self._slots.hold(on_wait=self._waiting) if self._slots is not None else nullcontext()
            with hold:
                if self._cancel.is_set():
                    raise Cancelled("no one waits for this summary any more")
                self.state = "running"
                load, self._load = self._load, None  # the job keeps no way to the model but this run's
                assert load is not None  # the job's one thread runs this once
                model = load()
                if model is None:
                    raise ValueError("the model was let go while its summary waited: open the page again")
                result = compute(model, tok, self.n_tokens, progress=self._tell)
                del model
            for name in ("windows", "top_pos", "top_val", "hist", "hist_lo", "hist_hi"):
                getattr(result, name).flags.writeable = False  # shared by every session: read only
            self.result = result
            self.state = "done"
        except Cancelled as exc:
            self.error, self.state = str(exc), "cancelled"
        except Exception as exc:  # noqa: BLE001 - a failure is reported on the page, never raised in a thread
            self.error = f"{type(exc).__name__}: {exc}" if not isinstance(exc, ValueError) else str(exc)
            self.state = "failed"
        finally:
            self.progress = 1.0 if self.state == "done" else self.progress
            self._done.set()


_JOBS: "OrderedDict[Hashable, NeuronJob]" = OrderedDict()
_LOCK = threading.Lock()


def _let_go(owner: Hashable, keep: Hashable) -> None:
    """``owner`` no longer waits for any job but ``keep``'s: a job not started that no one else waits for is
    cancelled and forgotten. Call with the lock held."""
    for k, job in list(_JOBS.items()):
        if k != keep and owner in job.owners and not job.started and not job.finished:
            job.owners.discard(owner)
            if not job.owners:
                job.cancel()
                _JOBS.pop(k)


def job_for(key: Hashable, load: Callable[[], Any], tok, n_tokens: int = APP_TOKENS, *, params: int,
            owner: Optional[Hashable] = None) -> NeuronJob:
    """The job computing the neuron summary of the model ``load()`` gives (``params`` parameters), started now if
    there is none for ``key`` yet (``forget`` a failed one to try again). ``key`` must name the weights: the same
    key, the same model. ``owner`` waits for this job and for no other one any more. Raises ``QueueFull`` when
    ``MAX_UNFINISHED`` jobs are already queued or running."""
    with _LOCK:
        if owner is not None:
            _let_go(owner, key)
        job = _JOBS.get(key)
        if job is not None:
            _JOBS.move_to_end(key)
            if owner is not None and not job.finished:
                job.owners.add(owner)
            return job
        busy = sum(1 for j in _JOBS.values() if not j.finished)
        if busy >= MAX_UNFINISHED:
            raise QueueFull(f"this server is already computing {busy} neuron summaries, as many as it runs at once: "
                            "this model's starts when you open the page again after one of them ends")
        job = NeuronJob(load, tok, n_tokens, BIG_LOAD if int(params) > BIG_MODEL_PARAMS else None)
        if owner is not None:
            job.owners.add(owner)
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


def wait_idle(timeout: float) -> bool:
    """Block until every job started so far has ended, for at most ``timeout`` seconds; returns whether they all
    did. For the bench (a page's rows measure that page, not the summary the page before it started) and tests."""
    deadline = time.monotonic() + float(timeout)
    with _LOCK:
        jobs = [job for job in _JOBS.values() if not job.finished]
    return all(job.wait(max(0.0, deadline - time.monotonic())) for job in jobs)


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
