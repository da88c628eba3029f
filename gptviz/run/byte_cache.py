"""A thread-safe cache bounded by bytes, not by entries: the least recently used entry is evicted first.

A count of entries says nothing about memory when one trace is 20 kB and another 170 MB, or one model 3 MB and
another 0.5 GB. Each entry's size is worked out once, when it is stored (``size_of``); an entry larger than the
whole budget is returned to its caller but not kept. Values are shared by every caller: store only what no one
changes (frozen traces, models in eval mode). Two callers missing the same key at once compute it once: the
second waits for the first.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Callable, Hashable

import numpy as np

_NO_ARRAYS = frozenset({str, int, float, bool, type(None), bytes})


def nbytes(value: Any) -> int:
    """The bytes of the arrays and tensors ``value`` holds: a numpy array, a torch tensor or module, a mapping
    or sequence of them, or an object with a ``__dict__`` of them (a Trace). Anything else counts 0."""
    import torch

    seen: set[int] = set()

    def walk(v: Any) -> int:
        if type(v) in _NO_ARRAYS:  # most of a trace's objects: its steps' names, axes and facts
            return 0
        if id(v) in seen:
            return 0
        seen.add(id(v))
        if isinstance(v, np.ndarray):
            return int(v.nbytes)
        if isinstance(v, torch.Tensor):
            return int(v.element_size() * v.nelement())
        if isinstance(v, torch.nn.Module):
            return sum(walk(t) for t in (*v.parameters(), *v.buffers()))
        if isinstance(v, dict):
            return sum(walk(x) for x in v.values())
        if isinstance(v, (list, tuple)):
            return sum(walk(x) for x in v)
        if hasattr(v, "__dict__") and not isinstance(v, type):
            return sum(walk(x) for x in vars(v).values())
        return 0

    return walk(value)


def size_version(value: Any) -> Hashable:
    """What changes whenever ``value``'s size may have: its ``size_version`` attribute (a Trace's steps worked out
    on demand), or None for a value without one, which is measured again on every hit."""
    return getattr(value, "size_version", None)


class ByteLRU:
    """``get_or_compute(key, compute)``: the cached value, or ``compute()`` stored under ``key`` while the total
    stays under ``budget`` bytes, least recently used entries evicted to make room."""

    def __init__(self, budget: int, name: str, size_of: Callable[[Any], int] = nbytes,
                 version_of: Callable[[Any], Hashable] = size_version):
        self.budget, self.name, self.size_of, self.version_of = int(budget), name, size_of, version_of
        self._items: "OrderedDict[Hashable, tuple[Any, int]]" = OrderedDict()
        self._versions: dict[Hashable, Hashable] = {}  # each entry's size_version when it was last measured
        self._total = 0
        self._lock = threading.Lock()
        self._building: dict[Hashable, threading.Event] = {}

    @property
    def total(self) -> int:
        return self._total

    def keys(self) -> list:
        """The keys kept, least recently used first."""
        with self._lock:
            return list(self._items)

    def get(self, key: Hashable, default: Any = None) -> Any:
        with self._lock:
            if key not in self._items:
                return default
            return self._hit(key)

    def _hit(self, key: Hashable) -> Any:
        """The entry, made the most recently used and, if it may have grown since it was measured (its
        ``version_of`` changed, or it has none), measured again (under the lock): a slim trace keeps the last few
        steps it worked out (``Trace._memo``), and the others give way to it as they would to a new one."""
        self._items.move_to_end(key)
        value, size = self._items[key]
        version = self.version_of(value)
        if version is not None and self._versions.get(key) == version:
            return value  # measuring a trace walks its ~1,000 arrays: 4 ms of every rerun that reads it
        self._versions[key] = version
        now = int(self.size_of(value))
        if now != size:
            self._items[key] = (value, now)
            self._total += now - size
            while len(self._items) > 1 and self._total > self.budget:
                gone, (_, old) = self._items.popitem(last=False)
                self._versions.pop(gone, None)
                self._total -= old
        return value

    def put(self, key: Hashable, value: Any) -> bool:
        """Store ``value``; False (and nothing stored or evicted) when it alone is over the budget."""
        version = self.version_of(value)  # read before measuring: a step worked out meanwhile is measured next time
        size = int(self.size_of(value))
        with self._lock:
            if key in self._items:
                self._total -= self._items.pop(key)[1]
                self._versions.pop(key, None)
            if size > self.budget:
                return False
            while self._items and self._total + size > self.budget:
                gone, (_, old) = self._items.popitem(last=False)
                self._versions.pop(gone, None)
                self._total -= old
            self._items[key] = (value, size)
            self._versions[key] = version
            self._total += size
            return True

    def get_or_compute(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        while True:
            with self._lock:
                if key in self._items:
                    return self._hit(key)
                event = self._building.get(key)
                if event is None:
                    event = self._building[key] = threading.Event()
                    mine = True
                else:
                    mine = False
            if not mine:
                event.wait()  # another caller is computing it: use theirs (or compute it, if theirs failed)
                continue
            try:
                value = compute()
                self.put(key, value)
                return value
            finally:
                with self._lock:
                    self._building.pop(key, None)
                event.set()

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._versions.clear()
            self._total = 0
