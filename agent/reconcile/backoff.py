"""Capped exponential backoff with jitter, mirroring client-go's reflector.

client-go's reflector backs off relists from 800 ms, doubling, capped at 30 s, with jitter
1.0 (each delay is ``d + rand*d``), and resets after 2 minutes without errors; it settles at
a [30, 60) s interval per agent against an unhealthy API server (kubernetes-api.md
section 4). ``Retry-After`` from a 429/503 replaces the computed delay.

Clock, sleep and random are injected so tests run the real policy with tiny sleeps.
"""

from __future__ import annotations

import random as _random
import time
from dataclasses import dataclass
from typing import Callable

INITIAL_DELAY = 0.8
MAX_DELAY = 30.0
FACTOR = 2.0
JITTER = 1.0
RESET_AFTER = 120.0
MAX_RETRY_AFTER = 120.0
"""Upper bound on a server-sent Retry-After we will obey (APF sends at most 32 s)."""


@dataclass(frozen=True)
class BackoffSettings:
    initial: float = INITIAL_DELAY
    maximum: float = MAX_DELAY
    factor: float = FACTOR
    jitter: float = JITTER
    reset_after: float = RESET_AFTER


class Backoff:
    """Stateful delay generator: ``next_delay()`` after each failure, ``success()`` after a
    success. The step count resets when ``reset_after`` seconds passed since the last failure."""

    def __init__(
        self,
        settings: BackoffSettings = BackoffSettings(),
        *,
        clock: Callable[[], float] = time.monotonic,
        random: Callable[[], float] = _random.random,
    ) -> None:
        self.settings = settings
        self._clock = clock
        self._random = random
        self._steps = 0
        self._last_failure: float | None = None

    @property
    def steps(self) -> int:
        return self._steps

    def next_delay(self, retry_after: float | None = None) -> float:
        """Register a failure and return how long to wait before the next try."""
        now = self._clock()
        if self._last_failure is not None and now - self._last_failure >= self.settings.reset_after:
            self._steps = 0
        self._last_failure = now
        base = min(self.settings.maximum, self.settings.initial * self.settings.factor ** self._steps)
        self._steps += 1
        if retry_after is not None and retry_after >= 0:
            return min(float(retry_after), MAX_RETRY_AFTER)
        return base + self._random() * base * self.settings.jitter

    def success(self) -> None:
        """A success does not reset at once (a flapping server would defeat the cap); the
        reset happens ``reset_after`` seconds after the last failure, as in client-go."""
        if self._last_failure is not None and self._clock() - self._last_failure >= self.settings.reset_after:
            self._steps = 0
            self._last_failure = None

    def reset(self) -> None:
        self._steps = 0
        self._last_failure = None


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
