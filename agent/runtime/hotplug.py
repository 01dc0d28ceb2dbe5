"""Two ways to notice hardware change, both calling ``on_event(UEvent)``:

``HotplugMonitor``: a thread blocked in ``select`` on the event source's descriptor and a
stop pipe. Idle cost is zero (no timeout, no wake-ups); ``stop`` writes to the pipe.

``Poller``: the fallback when no event source can be opened (no netlink in the pod's netns,
user-namespaced pods) and ``--udev-mode=poll``. Every ``interval`` seconds it lists a few
cheap directories (PCI and USB devices, net interfaces, block devices, the device tree's
top levels) and the loaded module names, through ``HostFS``, and emits one synthetic
``poll`` event for each subsystem whose fingerprint changed. No API requests; a few dozen
``readdir`` calls per tick.
"""

from __future__ import annotations

import hashlib
import logging
import os
import select
import threading
from collections.abc import Callable

from agent.hostfs import HostFileError, HostFS
from agent.runtime.event_sources import EventSource
from agent.runtime.subsystems import POLL_FILES, POLL_LISTINGS
from agent.runtime.uevent import UEvent

log = logging.getLogger(__name__)

EventHandler = Callable[[UEvent], None]
MAX_DT_CHILDREN = 256


class HotplugMonitor:
    """Reads ``source`` in a daemon thread until ``stop``."""

    def __init__(self, source: EventSource, on_event: EventHandler) -> None:
        self.source = source
        self.on_event = on_event
        self._stop_r, self._stop_w = os.pipe()
        self._thread = threading.Thread(target=self._run, name="hotplug-monitor", daemon=True)
        self.failed: Exception | None = None

    def start(self) -> HotplugMonitor:
        self._thread.start()
        return self

    def alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        try:
            while True:
                readable, _, _ = select.select([self.source.fileno(), self._stop_r], [], [])
                if self._stop_r in readable:
                    return
                for event in self.source.receive():
                    try:
                        self.on_event(event)
                    except Exception:  # a handler bug must not kill event delivery
                        log.exception("handling %s %s failed", event.action, event.devpath)
        except (OSError, ValueError) as exc:  # descriptor closed under us
            self.failed = exc
            log.error("hotplug monitor stopped: %s", exc, extra={"event": "monitor-failed"})
        finally:
            self.source.close()

    def stop(self, timeout: float = 2.0) -> None:
        try:
            os.write(self._stop_w, b"x")
        except OSError:
            pass
        if self._thread.is_alive():
            self._thread.join(timeout)
        for fd in (self._stop_r, self._stop_w):
            try:
                os.close(fd)
            except OSError:
                pass


def _listing(host: HostFS, path: str) -> list[str]:
    try:
        return sorted(host.listdir(path))
    except HostFileError as err:  # unreadable counts as a state of its own
        return [f"!{err}"]


def fingerprints(host: HostFS) -> dict[str, str]:
    """subsystem -> digest of its listings/files (missing paths count as empty)."""
    host.clear_cache()
    out: dict[str, str] = {}
    for subsystem, paths in POLL_LISTINGS.items():
        digest = hashlib.sha1()
        for path in paths:
            names = _listing(host, path)
            digest.update(f"{path}:{','.join(names)}\n".encode())
            if subsystem == "platform":  # device-tree overlays add nodes one level down
                for name in names[:MAX_DT_CHILDREN]:
                    child = f"{path}/{name}"
                    try:
                        nested = host.is_dir(child)
                    except HostFileError as err:  # unreadable counts as a state of its own
                        digest.update(f"{child}:!{err}\n".encode())
                        continue
                    if nested:
                        digest.update(f"{child}:{','.join(_listing(host, child))}\n".encode())
        out[subsystem] = digest.hexdigest()
    for subsystem, paths in POLL_FILES.items():
        digest = hashlib.sha1()
        for path in paths:
            try:
                text = host.read_text(path, max_bytes=1 << 20)
            except HostFileError as err:
                text = f"!{err}"
            digest.update(" ".join(sorted(line.split(" ", 1)[0] for line in text.splitlines())).encode())
        out[subsystem] = digest.hexdigest()
    return out


class Poller:
    """Fingerprint the cheap listings every ``interval`` s; emit ``poll`` events on change."""

    def __init__(self, host: HostFS, on_event: EventHandler, interval: float = 5.0) -> None:
        self.host = host
        self.on_event = on_event
        self.interval = max(0.05, float(interval))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="hotplug-poller", daemon=True)
        self._last = fingerprints(host)

    def start(self) -> Poller:
        self._thread.start()
        return self

    def alive(self) -> bool:
        return self._thread.is_alive()

    def tick(self) -> list[str]:
        """One comparison; returns the subsystems that changed (and reports them)."""
        try:
            now = fingerprints(self.host)
        except Exception:  # hostile host tree: keep polling, say why
            log.exception("polling the host for device changes failed")
            return []
        changed = sorted(s for s in now if now[s] != self._last.get(s))
        self._last = now
        for subsystem in changed:
            self.on_event(UEvent("poll", subsystem, "", {"SOURCE": "poll"}))
        return changed

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.tick()

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
