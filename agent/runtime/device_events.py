"""Where device events come from: the configured monitor, its fallback, and polling.

``--udev-mode`` names a source (``agent.runtime.event_sources``). When it cannot open, no
event is silently lost: ``udev`` without udevd's socket falls back to kernel uevents (they
reach a pod's own network namespace), anything else to polling the device listings every
``--poll-interval``; either way a log line, ``nfa_udev_fallback_active`` and a not-ready
reason (``degraded``) say so. A monitor that opens but never delivers is caught later, at a
resync (``silent_monitor``): then ``events_silent`` starts polling as well, and says so.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from agent.hostfs import HostFS
from agent.runtime.event_sources import (
    EventSource,
    EventSourceError,
    open_source,
    parse_mode,
)
from agent.runtime.hotplug import HotplugMonitor, Poller
from agent.runtime.metrics import AgentMetrics
from agent.runtime.silent_monitor import SilentMonitorCheck
from agent.runtime.subsystems import SUBSYSTEM_SOURCES
from agent.runtime.uevent import UEvent

log = logging.getLogger(__name__)


class DeviceEvents:
    def __init__(self, mode: str, host_root: str, poll_interval: float, sources: Sequence[str], node_name: str,
                 metrics: AgentMetrics, on_event: Callable[[UEvent], None], source: EventSource | None = None) -> None:
        self.mode, self.host_root, self.poll_interval = mode, host_root, poll_interval
        self.sources, self.node_name, self.metrics, self.on_event = sources, node_name, metrics, on_event
        self._source = source
        self.monitor: HotplugMonitor | None = None
        self.poller: Poller | None = None
        self.silent = SilentMonitorCheck()
        self.degraded = ""  # why events come from a fallback (not ready while set)

    def start(self) -> DeviceEvents:
        mode, _path = parse_mode(self.mode)
        source = self._source
        if source is None and mode not in ("poll", "off"):
            try:
                source = open_source(self.mode, self._monitored())
            except EventSourceError as err:
                source = self._fallback(mode, err)
                mode = "kernel" if source is not None else "poll"
        if source is not None:
            self.monitor = HotplugMonitor(source, self.on_event).start()
        elif mode == "poll":
            self._poll()
        return self

    def _fallback(self, mode: str, err: EventSourceError) -> EventSource | None:
        source = None
        if mode == "udev":
            try:
                source = open_source("kernel", self._monitored())
            except EventSourceError as kernel_err:
                err = EventSourceError(f"{err}; kernel uevents: {kernel_err}")
        instead = ("kernel uevents instead" if source is not None else
                   f"polling PCI/USB/net/block/device-tree listings every {self.poll_interval:.0f}s instead")
        log.warning("cannot receive device events (%s); %s", err, instead,
                    extra={"node": self.node_name, "event": "udev-fallback"})
        self.metrics.udev_fallback.set(1)
        self.degraded = f"HotplugFallback: --udev-mode={mode} unusable ({err}); using {instead}"
        return source

    def events_silent(self, sources: list[str]) -> None:
        """The monitor opened but delivers nothing: poll as well, and say so."""
        why = (f"a resync found {'/'.join(s.upper() for s in sources)} devices changed that no device event "
               f"announced (--udev-mode={self.mode} delivers nothing in this pod)")
        log.warning("%s; polling every %.0fs as well", why, self.poll_interval,
                    extra={"node": self.node_name, "event": "udev-fallback"})
        self.metrics.udev_fallback.set(1)
        self.degraded = f"HotplugSilent: {why}; polling every {self.poll_interval:.0f}s as well"
        self._poll()

    def _poll(self) -> None:
        self.poller = Poller(HostFS(self.host_root), self.on_event, self.poll_interval).start()

    def _monitored(self) -> list[str]:
        return sorted(k for k, v in SUBSYSTEM_SOURCES.items() if set(v) & set(self.sources))

    def stop(self, timeout: float) -> None:
        for part in (self.monitor, self.poller):
            if part is not None:
                part.stop(timeout=timeout)

    def dead(self) -> str:
        """The name of a thread that died ("" while all live)."""
        for name, part in (("hotplug monitor", self.monitor), ("poller", self.poller)):
            if part is not None and not part.alive():
                return name
        return ""
