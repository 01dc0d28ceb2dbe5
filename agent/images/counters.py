"""Counters a caller turns into metrics: registry requests by host and answer, cache hits and
misses by cache. Plain integers behind a lock, so this package needs no metrics library; a
Prometheus collector reads :meth:`Counters.snapshot` at scrape time."""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field


@dataclass(frozen=True)
class CounterSnapshot:
    """Totals since the resolver was made.

    ``requests``: ``(host, answer)`` -> count, where ``answer`` is the HTTP status as a string
    (``"200"``, ``"401"``, ``"429"``) or ``"error"`` when no answer came (refused, timeout,
    TLS); token server requests count under the token server's host. ``cache``:
    ``(cache, outcome)`` -> count, ``cache`` being ``"tag"`` (tag -> digest) or
    ``"platforms"`` (digest -> platforms), ``outcome`` ``"hit"`` or ``"miss"``.
    """

    requests: dict[tuple[str, str], int] = field(default_factory=dict)
    cache: dict[tuple[str, str], int] = field(default_factory=dict)


class Counters:
    """Thread-safe counters; one per resolver."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: Counter[tuple[str, str]] = Counter()
        self._cache: Counter[tuple[str, str]] = Counter()

    def request(self, host: str, answer: str) -> None:
        with self._lock:
            self._requests[(host, answer)] += 1

    def cache(self, name: str, hit: bool) -> None:
        with self._lock:
            self._cache[(name, "hit" if hit else "miss")] += 1

    def snapshot(self) -> CounterSnapshot:
        with self._lock:
            return CounterSnapshot(dict(self._requests), dict(self._cache))
