"""A delaying, de-duplicating work queue for pod keys, drained by a fixed pool of workers.

The shape of client-go's ``workqueue``: a key is queued at most once; a key being worked on
is never handed to a second worker at the same time (a change that arrives meanwhile re-queues
it when the worker is done); ``add(key, at)`` keeps the earliest due time. One condition
variable, no polling: ``get`` sleeps until the earliest due key or ``stop``.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Callable


class WorkQueue:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._cond = threading.Condition()
        self._due: dict[str, float] = {}
        self._heap: list[tuple[float, str]] = []
        self._active: set[str] = set()
        self._again: dict[str, float] = {}
        self._stopped = False

    def add(self, key: str, at: float | None = None) -> None:
        """Queue ``key`` for ``at`` (default now); an earlier due time wins."""
        when = self._clock() if at is None else at
        with self._cond:
            if key in self._active:
                self._again[key] = min(when, self._again.get(key, when))
                return
            if key in self._due and self._due[key] <= when:
                return
            self._due[key] = when
            heapq.heappush(self._heap, (when, key))
            self._cond.notify()

    def get(self) -> str | None:
        """The next due key (marked active until ``done``), or None once stopped."""
        with self._cond:
            while not self._stopped:
                while self._heap and self._due.get(self._heap[0][1]) != self._heap[0][0]:
                    heapq.heappop(self._heap)  # superseded by an earlier add
                if self._heap:
                    when, key = self._heap[0]
                    wait = when - self._clock()
                    if wait <= 0:
                        heapq.heappop(self._heap)
                        del self._due[key]
                        self._active.add(key)
                        return key
                    self._cond.wait(wait)
                else:
                    self._cond.wait()
            return None

    def done(self, key: str) -> None:
        with self._cond:
            self._active.discard(key)
            again = self._again.pop(key, None)
        if again is not None:
            self.add(key, again)

    def forget(self, key: str) -> None:
        """Drop a queued (not active) key: its pod is gone or no longer ours."""
        with self._cond:
            self._due.pop(key, None)
            self._again.pop(key, None)

    def __len__(self) -> int:
        with self._cond:
            return len(self._due) + len(self._active)

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
