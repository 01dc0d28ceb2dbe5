"""This node's ResourceSlices of the driver, as a watch sees them: the reflector's handler
(``agent.kube.reflector``: LIST, then WATCH from its version, with the field selector
``spec.nodeName=<node>,spec.driver=<driver>``, which kube-apiserver serves for ResourceSlices,
``ResourceSliceToSelectableFields`` in ``pkg/registry/resource/resourceslice/strategy.go``).

What the writer may rely on (``state``):

- nothing before the first LIST completed (``NotYet``: wait, no request), nor while the last
  word from the loop was a failure (``ReadFailed``: held, nothing written on what was not read);
- nothing while a write of ours has not come back through the watch (the version a PUT or POST
  answered, or a DELETE's object gone), nor after a write the server refused with 409 (or 404)
  until the watch shows that slice's newer version (or its deletion): ``NotYet``. A complete
  LIST is the server's current state and settles both. Each wait has an end (``ECHO_WAIT``,
  ``REFUSED_WAIT``) for an answer no watch event follows (a proxy's 409): the writer then goes
  on from what the watch holds, and a stale version meets a 409 again.

Only objects whose ``spec.driver`` and ``spec.nodeName`` are ours are kept, whatever the server
sent. A change of one of our slices that is not the echo of our own write is someone else's
(another writer, a ``kubectl edit``, a delete): ``on_change(True)``, so the writer compares at
once and puts its content back; every other delivery is ``on_change(False)``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from agent.dra.names import DRIVER
from agent.kube.light_core import LightCoreV1Api
from agent.kube.reflector import Reflector, ReflectorSettings

log = logging.getLogger(__name__)

Json = dict[str, Any]

#: the watch of a node's few slices: the Node watch's timings (a LIST's read allows for 8 full slices)
SETTINGS = ReflectorSettings(request_timeout=(3.0, 10.0), max_delay=5.0)
ECHO_WAIT = 10.0
"""Seconds a write of ours waits for its watch event at most."""
REFUSED_WAIT = 2.0
"""Seconds a refused write waits for the watch to show the slice's newer version at most."""


class ReadFailed(Exception):
    """The slices could not be read; nothing is written on what was not read."""


class NotYet(Exception):
    """The watched state is not known yet, or is behind a write of ours: wait for the watch."""


def slices_path(version: str) -> str:
    return f"/apis/resource.k8s.io/{version}/resourceslices"


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def _version(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


class WatchedSlices:
    """The reflector's handler for one node's slices of the driver."""

    def __init__(self, api_client: Any, node_name: str, version: str, *,
                 on_change: Callable[[bool], None] = lambda _foreign: None,
                 settings: ReflectorSettings = SETTINGS,
                 on_ignored: Callable[[str, str], None] | None = None) -> None:
        self.node_name = node_name
        self.on_change = on_change
        self.reflector = Reflector(LightCoreV1Api(api_client), slices_path(version), "ResourceSlice", self,
                                   name="resourceslice watch", settings=settings,
                                   field_selector=f"spec.nodeName={node_name},spec.driver={DRIVER}",
                                   on_ignored=on_ignored, node=node_name, on_readable=self._readable)
        self._lock = threading.Lock()
        self._slices: dict[str, Json] = {}
        self.listed = False
        self.unreadable: str | None = None
        # name -> (the version our write made, None: deleted; until when it is waited for)
        self._expected: dict[str, tuple[str | None, float]] = {}
        self._refused: dict[str, tuple[str, float]] = {}  # name -> (the version a write was refused on, until)

    # -- public -------------------------------------------------------------------------------
    def start(self) -> WatchedSlices:
        self.reflector.start()
        return self

    def alive(self) -> bool:
        return self.reflector.alive()

    def stop(self, timeout: float = 2.0) -> None:
        self.reflector.stop(timeout)

    def list_once(self) -> list[Json]:
        """One LIST in the caller's thread (``clean``); ``ReadFailed`` when it fails."""
        try:
            self.reflector.list_once()
        except Exception as exc:
            raise ReadFailed(f"listing ResourceSlices failed: {exc}") from exc
        return self.state()

    def state(self) -> list[Json]:
        """The slices as watched, by name; ``NotYet`` or ``ReadFailed`` when they cannot be relied on."""
        with self._lock:
            if self.unreadable is not None:
                raise ReadFailed(f"the ResourceSlice watch cannot be read: {self.unreadable}")
            if not self.listed:
                raise NotYet("the first LIST of the node's ResourceSlices has not completed")
            now = time.monotonic()
            for waits in (self._expected, self._refused):
                for name in [n for n, (_v, until) in waits.items() if until <= now]:
                    del waits[name]
            if self._expected or self._refused:
                raise NotYet("a write of ours has not come back through the watch yet")
            return [self._slices[name] for name in sorted(self._slices)]

    def wait_hint(self) -> float | None:
        """Seconds until the longest a pending wait may last (None: nothing pending)."""
        with self._lock:
            ends = [until for _v, until in (*self._expected.values(), *self._refused.values())]
        return max(0.0, min(ends) - time.monotonic()) if ends else None

    def wrote(self, name: str, answer: Any, deleted: bool = False) -> None:
        """A write of ours succeeded: wait for its echo (a no-op write has none: its version is held)."""
        if not name:
            return  # an answer without a name: the watch's ADDED is then taken as someone else's
        with self._lock:
            until = time.monotonic() + ECHO_WAIT
            if deleted:
                if name in self._slices:
                    self._expected[name] = (None, until)
                return
            version = _version(answer) if isinstance(answer, Mapping) else ""
            if version and _version(self._slices.get(name) or {}) != version:
                self._expected[name] = (version, until)

    def refused(self, name: str, version: str) -> None:
        """A write of ours on ``version`` was refused (409, 404): wait for the watch to show newer."""
        with self._lock:
            if name in self._slices and _version(self._slices[name]) == version:
                self._refused[name] = (version, time.monotonic() + REFUSED_WAIT)

    # -- what the reflector delivers -----------------------------------------------------------
    def _ours(self, obj: Mapping[str, Any]) -> bool:
        spec = obj.get("spec")
        return isinstance(spec, Mapping) and spec.get("driver") == DRIVER \
            and spec.get("nodeName") == self.node_name and bool(_name(obj))

    def replace(self, objects: list[Json]) -> None:
        with self._lock:
            self._slices = {_name(o): o for o in objects if self._ours(o)}
            self.listed = True
            self._expected.clear()  # a LIST is the server's current state: every write is in it
            self._refused.clear()
        self.on_change(False)

    def event(self, kind: str, obj: Json) -> None:
        if not self._ours(obj):
            return  # not ours (a server ignoring the field selector)
        name, version = _name(obj), _version(obj)
        with self._lock:
            gone = kind == "DELETED"
            if gone:
                self._slices.pop(name, None)
            else:
                self._slices[name] = obj
            own = name in self._expected and self._expected[name][0] == (None if gone else version)
            if own:
                del self._expected[name]
            elif name in self._refused and (gone or self._refused[name][0] != version):
                del self._refused[name]
        self.on_change(not own)

    def absent(self, status: int) -> None:
        """Never called: this watch has no absent-collection policy (403/404 are failures)."""

    def _readable(self, why: str | None) -> None:
        with self._lock:
            changed = why != self.unreadable
            self.unreadable = why
        if changed:
            self.on_change(False)
