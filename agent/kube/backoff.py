"""Capped exponential backoff with jitter for one agent's own Node.

client-go's reflector backs off from 800 ms to 30 s and resets only 2 minutes after the last
error (``tools/cache/reflector.go``: ``NewExponentialBackoffManager(800ms, 30s, 2min, 2.0, 1.0)``)
— tuned for thousands of informers re-listing whole
collections. One agent patching one Node is a different trade: with a fault every ~30 s
that policy kept the agent blind for most of the time. So here: 0.5 s doubling,
capped at 5 s, jitter downwards (each delay is ``d - rand*d/2``, in (d/2, d], so never more
than 5 s: a retry lands at most 5 s after the API is healthy again), reset on the first
success. A fleet stays spread by the jitter; ``Retry-After`` from a 429/503 replaces
the computed delay (bounded), so an overloaded server still sets the pace.

Random is injected so tests check the real policy's delays exactly.
"""

from __future__ import annotations

import random as _random
from collections.abc import Callable
from dataclasses import dataclass

INITIAL_DELAY = 0.5
MAX_DELAY = 5.0
FACTOR = 2.0
JITTER = 0.5
"""Fraction of a delay that is randomised away (spreads a fleet without exceeding the cap)."""
MAX_RETRY_AFTER = 120.0
"""Upper bound on a server-sent Retry-After we will obey (APF sends at most 32 s)."""


@dataclass(frozen=True)
class BackoffSettings:
    initial: float = INITIAL_DELAY
    maximum: float = MAX_DELAY
    factor: float = FACTOR
    jitter: float = JITTER


class Backoff:
    """Stateful delay generator: ``next_delay()`` after each failure, ``success()`` after a
    success (which starts the next failure from the initial delay again)."""

    def __init__(
        self,
        settings: BackoffSettings = BackoffSettings(),
        *,
        random: Callable[[], float] = _random.random,
    ) -> None:
        self.settings = settings
        self._random = random
        self._steps = 0

    @property
    def steps(self) -> int:
        return self._steps

    def next_delay(self, retry_after: float | None = None) -> float:
        """Register a failure and return how long to wait before the next try."""
        base = min(self.settings.maximum, self.settings.initial * self.settings.factor ** self._steps)
        self._steps += 1
        if retry_after is not None and retry_after >= 0:
            return min(float(retry_after), MAX_RETRY_AFTER)
        return base - self._random() * base * self.settings.jitter

    def success(self) -> None:
        """Reset at once: the cap is a few seconds, so a flapping server costs at most one
        request per capped delay anyway, and a healthy one should be used at once."""
        self.reset()

    def reset(self) -> None:
        self._steps = 0


def parse_retry_after(value: object) -> float | None:
    """Seconds from a ``Retry-After`` header (integer seconds; HTTP dates are not sent by the
    API server and are ignored)."""
    if value is None:
        return None
    try:
        seconds = float(str(value).strip())
    except ValueError:
        return None
    return seconds if seconds >= 0 else None
