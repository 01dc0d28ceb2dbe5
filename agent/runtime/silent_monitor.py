"""Device events that never arrive.

A monitor can open fine and still deliver nothing: udevd's events go only to the host's network
namespace, a user-namespaced pod gets no uevents at all, a runtime may filter netlink. Nothing
fails, so nothing says so, and hotplug is silently noticed only at the next resync. This check
turns that into evidence: when a resync finds the USB or PCI devices changed although no USB or
PCI event has arrived since those sources were last read, the monitor is not delivering, and
the agent must say so and poll (see ``Agent._events_silent``). Only USB and PCI count: adding or
removing such a device always makes the kernel send a uevent, while network or block state can
change without one.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping

WATCHED = ("pci", "usb")


class SilentMonitorCheck:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events = 0  # USB/PCI device events received (monitor thread)
        self._at_last_read = 0  # value of _events when USB/PCI were last rediscovered

    def event(self, sources: Iterable[str]) -> None:
        if set(sources) & set(WATCHED):
            with self._lock:
                self._events += 1

    def mark(self) -> int:
        """Call before a pass's discovery: the events seen so far are covered by it."""
        with self._lock:
            return self._events

    def judge(self, mark: int, resync: bool, rerun: Iterable[str], before: Mapping[str, object] | None,
              after: Mapping[str, object]) -> list[str]:
        """After a pass: the watched sources a resync found changed with no event since they
        were last read ([] when events are flowing, or nothing changed, or not a resync)."""
        rerun = set(rerun) & set(WATCHED)
        if not rerun:
            return []
        with self._lock:
            quiet = self._events == self._at_last_read
            self._at_last_read = mark
        if not resync or before is None or not quiet:
            return []
        return sorted(s for s in rerun if before.get(s) != after.get(s))
