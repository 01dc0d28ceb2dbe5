"""The slice publisher: this pass's devices -> the node's ResourceSlices, in its own thread.

``publish(resources)`` takes the same ``Mapping[resource, ResourceDevices]`` the device plugin
and the kubelet DRA plugin take, keeps only the latest, and returns at once; the thread syncs
it (``SliceWriter.sync``), shared devices in the form the server keeps (``agent.dra.sharing``).
A failed read or write is retried after a backoff (1 s doubling to 30 s) unless a newer publish
comes first; what the server holds stays as it is meanwhile. The
writer needs nothing of the kubelet plugin: slices are published whether or not it runs.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from agent.deviceplugin.model import ResourceDevices
from agent.dra.sharing import SharingProbe
from agent.dra.slices import Node, Published, ReadFailed, SliceWriter, published_devices

log = logging.getLogger(__name__)


class SlicePublisher:
    def __init__(self, api_client: Any, node: Node, version: str, *, taints: bool,
                 on_write: Callable[[str], None] = lambda _op: None,
                 on_sync: Callable[[str], None] = lambda _result: None,
                 backoff: tuple[float, float] = (1.0, 30.0)) -> None:
        self.writer = SliceWriter(api_client, node, version, on_write=on_write)
        self.sharing = SharingProbe(self.writer._call, node, version)
        self.taints = taints
        self.on_sync = on_sync
        self.backoff = backoff
        self.published: Published | None = None  # the last devices handed over (for explain, metrics)
        self.synced = threading.Event()  # set after a sync of the latest publish succeeded
        self._pending: Mapping[str, ResourceDevices] | None = None
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dra-slices", daemon=True)

    def start(self) -> SlicePublisher:
        self._thread.start()
        return self

    def alive(self) -> bool:
        return self._thread.is_alive()

    def stop(self, timeout: float = 1.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def publish(self, resources: Mapping[str, ResourceDevices]) -> None:
        """Hand over this pass's devices (never waits on the API server)."""
        with self._lock:
            self._pending = dict(resources)
            self.synced.clear()
        self._wake.set()

    def _run(self) -> None:
        delay = 0.0
        latest: Mapping[str, ResourceDevices] | None = None
        while not self._stop.is_set():
            if not self._wake.wait(delay if delay else None):
                pass  # the backoff ran out: retry the latest
            self._wake.clear()
            if self._stop.is_set():
                return
            with self._lock:
                if self._pending is not None:
                    latest, self._pending = self._pending, None
            if latest is None:
                continue
            delay = self._sync(latest, delay)

    def _sync(self, resources: Mapping[str, ResourceDevices], delay: float) -> float:
        """One sync; returns the delay before a retry (0: none needed)."""
        try:
            consumable = self.sharing.consumable(resources)
            self.published = published_devices(resources, taints=self.taints, consumable=consumable)
            writes = self.writer.sync(self.published.devices)
            if consumable and writes and not self.sharing.verify(self.writer.read()):
                self.published = published_devices(resources, taints=self.taints, consumable=False)
                writes += self.writer.sync(self.published.devices)
        except ReadFailed as exc:
            log.warning("ResourceSlices not read (%s); they are held as they are", exc,
                        extra={"node": self.writer.node.name, "event": "dra-held"})
            self.on_sync("held")
        except Exception as exc:  # noqa: BLE001 - a refused write, a lost connection: retry
            log.warning("writing ResourceSlices failed (%s); retrying", exc,
                        extra={"node": self.writer.node.name, "event": "dra-error"})
            self.on_sync("error")
        else:
            self.on_sync("written" if writes else "unchanged")
            with self._lock:
                if self._pending is None:
                    self.synced.set()
            return 0.0
        first, cap = self.backoff
        return min(cap, delay * 2) if delay else first
