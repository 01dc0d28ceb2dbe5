"""The reconcile queue: many triggers in, one coalesced batch out, nothing done while idle.

Why one worker thread and a condition variable (not asyncio): every piece of work the loop
does is blocking (sysfs reads through ``HostFS``, the official ``kubernetes`` client over
urllib3, ``watchfiles``' Rust watcher, pyudev's netlink socket). asyncio would push each of
them into an executor anyway; a single worker that owns discovery and the Reconciler keeps
them single-threaded (neither is thread-safe) while the event sources run in their own
small threads and only ever call ``put``.

Coalescing: everything that arrives while a batch is pending joins it. The batch records
why (``kinds``), which discovery sources need rerunning (``sources``; ``None`` = all), and
the newest Node the watch delivered. Its due time is the latest "not before" of its parts.

Hotplug settles on a short quiet gap: a USB plug is a burst of 3-6 uevents within a few
milliseconds (device add, interface adds, driver binds), and one pass should see all of it.
Each event moves the burst's settle time to ``now + debounce`` (the quiet gap), never later
than ``debounce_max`` after the burst's first event (an endless burst still gets a pass).
An event that is known to end its burst (``settled``: the ``bind`` or ``remove`` of a USB
device, which the kernel sends after all of its interfaces; see
``subsystems.ends_burst``) settles it after ``settled_gap`` only, just long enough for
datagrams already in the socket to join. Other parts' delays (``delay``) are kept apart
(``not_before``), so a hotplug can never shorten them and they never stretch a hotplug's gap.
``get`` blocks on the condition until the batch is due or ``stop`` is called: no polling.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

STARTUP, HOTPLUG, RULES, NODE, RESYNC, RETRY = "startup", "hotplug", "rules", "node", "resync", "retry"
KINDS = (STARTUP, HOTPLUG, RULES, NODE, RESYNC, RETRY)


@dataclass
class Batch:
    """What to do in one pass."""

    kinds: set[str] = field(default_factory=set)
    sources: set[str] | None = field(default_factory=set)  # None: rediscover everything
    node: Mapping[str, Any] | None = None
    due: float = 0.0
    burst_started: float | None = None
    created: float = 0.0
    not_before: float = 0.0  # the latest ``delay`` of the non-hotplug parts
    settle_at: float | None = None  # when the hotplug burst counts as settled


class TriggerQueue:
    """Thread-safe coalescing queue with one consumer."""

    def __init__(self, *, debounce: float = 0.04, debounce_max: float = 0.25, settled_gap: float = 0.005,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if debounce < 0 or debounce_max < debounce:
            raise ValueError("need 0 <= debounce <= debounce_max")
        self.debounce = debounce
        self.debounce_max = debounce_max
        self.settled_gap = min(max(0.0, settled_gap), debounce)
        self._clock = clock
        self._cond = threading.Condition()
        self._pending: Batch | None = None
        self._stopped = False

    @property
    def stopped(self) -> bool:
        return self._stopped

    def put(self, kind: str, *, sources: Iterable[str] | None = (), node: Mapping[str, Any] | None = None,
            delay: float = 0.0, expedite: bool = False, settled: bool = False) -> bool:
        """Add a trigger; ``sources=None`` asks for a full rediscovery. False once stopped.
        ``expedite``: the batch is due now, even if an earlier part (a retry's backoff) said later.
        ``settled`` (hotplug): this event ends its burst; settle after ``settled_gap``."""
        if kind not in KINDS:
            raise ValueError(f"unknown trigger {kind!r}")
        with self._cond:
            if self._stopped:
                return False
            now = self._clock()
            batch = self._pending
            if batch is None:
                batch = self._pending = Batch(due=now, created=now)
            batch.kinds.add(kind)
            if sources is None or batch.sources is None:
                batch.sources = None
            else:
                batch.sources.update(sources)
            if node is not None:
                batch.node = node
            if kind == HOTPLUG:
                if batch.burst_started is None:
                    batch.burst_started = now
                gap = self.settled_gap if settled else self.debounce
                batch.settle_at = min(now + gap, batch.burst_started + self.debounce_max)
            else:
                batch.not_before = max(batch.not_before, now + max(0.0, delay))
            if expedite:
                batch.not_before = batch.due = now
                batch.settle_at = None
            else:
                batch.due = max(batch.not_before, batch.settle_at if batch.settle_at is not None else now)
            self._cond.notify_all()
            return True

    def get(self, timeout: float | None = None) -> Batch | None:
        """Block until a batch is due (and return it), ``timeout`` passes or ``stop`` (None)."""
        deadline = None if timeout is None else self._clock() + max(0.0, timeout)
        with self._cond:
            while not self._stopped:
                now = self._clock()
                batch = self._pending
                if batch is not None and batch.due <= now:
                    self._pending = None
                    return batch
                waits = [t - now for t in (batch.due if batch else None, deadline) if t is not None]
                if deadline is not None and deadline <= now:
                    return None
                self._cond.wait(min(waits) if waits else None)
            return None

    def pending(self) -> Batch | None:
        with self._cond:
            return self._pending

    def stop(self) -> None:
        """Refuse further triggers and wake the consumer."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
