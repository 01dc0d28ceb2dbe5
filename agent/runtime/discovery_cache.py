"""Discovery results kept between passes; a hotplug reruns only the sources it can change.

``refresh(None)`` runs every enabled source; ``refresh({"usb", "network"})`` reruns those and
keeps the cached results of the others. ``generation`` increases on every refresh so the
loop knows to rebuild its plan function (the Reconciler caches plans per function).
"""

from __future__ import annotations

import logging
import time
from typing import Iterable

from agent.discovery import Discovery, DiscoveryConfig, discover
from agent.hostfs import HostFS

log = logging.getLogger(__name__)


class DiscoveryCache:
    def __init__(self, host: HostFS, config: DiscoveryConfig, sources: Iterable[str], *, observe=None) -> None:
        self.host = host
        self.config = config
        self.sources = tuple(sorted(sources))
        self.observe = observe  # observe(source, seconds)
        self.current: Discovery | None = None
        self.generation = 0

    def refresh(self, sources: Iterable[str] | None) -> tuple[str, ...]:
        """Rediscover ``sources`` (None or no cache yet: all); returns the names rerun."""
        if sources is None or self.current is None:
            names = self.sources
        else:
            names = tuple(sorted(set(sources) & set(self.sources)))
        if not names:
            return ()
        started = time.perf_counter()
        found = discover(self.host, self.config, names)
        if self.observe is not None:
            for name, seconds in found.durations.items():
                self.observe(name, seconds)
        if self.current is None or set(names) == set(self.sources):
            self.current = found
        else:
            self.current = Discovery({**self.current.results, **found.results},
                                     {**self.current.durations, **found.durations})
        self.generation += 1
        log.debug("rediscovered %s in %.1f ms", ",".join(names), (time.perf_counter() - started) * 1000)
        return names
