"""Process-wide limits on heavy work, with a visible queue: at most ``capacity`` holders at once, the others wait
in the order they came.

One server serves a class: thirty students pressing *Start training* at once must not share two cores thirty
ways. ``TRAINING`` lets ``GPTVIZ_MAX_TRAININGS`` runs (default 2) train at once and ``BIG_LOAD`` one big model
be loaded at a time; a waiter is told its place while it waits ("2 runs ahead of you"). A slot is released
whatever ends its holder: a return, an exception, or Streamlit stopping the script (a rerun, a closed tab), which
raises inside the holder. A waiter stopped the same way leaves the queue, and the places behind it move up.
No Streamlit here: the UI passes ``on_wait``, which draws the place and is where Streamlit can stop a waiting run.
"""
from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from typing import Callable, Iterator, Optional

DEFAULT_TRAININGS = 2


class Slots:
    """At most ``capacity`` holders at once, first come first served."""

    def __init__(self, capacity: int, name: str):
        if capacity < 1:
            raise ValueError(f"{name}: a capacity of {capacity} would let nothing run; it must be at least 1")
        self.capacity, self.name = int(capacity), name
        self._cond = threading.Condition()
        self._queue: list[object] = []  # tickets waiting, oldest first
        self._holding = 0

    def state(self) -> tuple[int, int]:
        """(runs holding a slot, runs waiting)."""
        with self._cond:
            return self._holding, len(self._queue)

    def _ahead(self, ticket: object) -> int:
        """How many runs wait before this one in the queue (0: it is next). Call with the lock held."""
        return self._queue.index(ticket)

    @contextmanager
    def hold(self, on_wait: Optional[Callable[[int], None]] = None, poll: float = 0.5) -> Iterator[int]:
        """Wait for a slot, hold it for the ``with`` block, release it however the block ends. While waiting,
        ``on_wait(ahead)`` is called at once and then every ``poll`` seconds with the number of runs waiting
        before this one (outside the lock: an exception it raises, a stop, takes this waiter out of the queue).
        Yields whether it had to wait."""
        ticket = object()
        with self._cond:
            self._queue.append(ticket)
        acquired = waited = False
        try:
            while True:
                with self._cond:
                    if self._queue[0] is ticket and self._holding < self.capacity:
                        self._queue.pop(0)
                        self._holding += 1
                        acquired = True
                        self._cond.notify_all()  # the next in line may move up (or in, if another slot is free)
                        break
                    ahead = self._ahead(ticket)
                waited = True
                if on_wait is not None:
                    on_wait(ahead)
                with self._cond:
                    if not (self._queue[0] is ticket and self._holding < self.capacity):
                        self._cond.wait(poll)
            yield waited
        finally:
            with self._cond:
                if acquired:
                    self._holding -= 1
                elif ticket in self._queue:
                    self._queue.remove(ticket)
                self._cond.notify_all()


def _trainings_from_env() -> int:
    raw = os.environ.get("GPTVIZ_MAX_TRAININGS", "")
    try:
        return max(1, int(raw)) if raw.strip() else DEFAULT_TRAININGS
    except ValueError:
        return DEFAULT_TRAININGS


TRAINING = Slots(_trainings_from_env(), "training")  # training runs at once, in this process
BIG_LOAD = Slots(1, "big model load")  # GPT-2-sized models built or read at once
