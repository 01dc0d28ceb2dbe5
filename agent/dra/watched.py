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
sent.

Bounds (``SliceBounds``, kept by ``agent.kube.bounds.CollectionBounds`` as the NFD-object
watches' are): anyone allowed to create ResourceSlices (every DRA driver's service account: RBAC
cannot restrict by field) can create slices naming this driver and node, so what is kept is
bounded, never what the writer needs to be right: past ``max_slices`` slices, ``max_bytes`` of
their specs together, a LIST page over ``max_page_bytes`` (``SETTINGS``), or one slice whose
spec is over ``max_slice_bytes`` (larger than any slice the API accepts with 128 devices of 32
attributes: not one of ours), the slices are *bounded*: ``state`` raises ``Bounded`` (the
writer neither writes nor deletes: it cannot know what it did not read), ``on_bounded(why)`` is
told once, and only slices kept before are still followed. While bounded, a deletion or a
change of a slice not kept (the way back under the bounds) starts a new LIST after a pause
(``RELIST``: 10 s doubling to 5 min), and ``on_bounded(None)`` once a LIST fits again. A change of one of our slices that is not the echo of our own write is someone else's
(another writer, a ``kubectl edit``, a delete): ``on_change(True)``, so the writer compares at
once and puts its content back; every other delivery is ``on_change(False)``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from agent.dra.names import DRIVER
from agent.kube.backoff import Backoff, BackoffSettings
from agent.kube.bounds import RELIST, SHOWN, CollectionBounds, Key, Listing, cost
from agent.kube.light_core import LightCoreV1Api
from agent.kube.reflector import Reflector, ReflectorSettings, Relist
from agent.rules.budget import MAX_PAGE_BYTES

log = logging.getLogger(__name__)

Json = dict[str, Any]

KIND = "ResourceSlice"
MAX_SLICES = 16
"""Slices of this driver and node kept: the agent writes one per 128 devices (a node's few)."""
MAX_SLICE_BYTES = 1024 * 1024
"""One slice's spec as compact JSON. The largest the API admits with 128 devices
(``ResourceSliceMaxDevices``) of 32 attributes (``ResourceSliceMaxAttributesAndCapacitiesPerDevice``)
at the longest names (a 63-character device name, ``DeviceMaxDomainLength`` 63 + "/" +
``DeviceMaxIDLength`` 32) and values (``DeviceAttributeMaxValueLength`` 64) is about 740 KB
(``k8s.io/api/resource/v1/types.go``, ``pkg/apis/resource/validation/validation.go``); the
agent's own are far smaller. A larger one is not the agent's, whoever named it so."""
MAX_SLICES_BYTES = 2 * 1024 * 1024
"""The kept slices' specs together: 2 to 7 times that once parsed (1.8 for the largest slice
the API accepts, 6.6 for the agent's own of 128 devices), under 15 MiB of the 128 MiB limit."""
PAGE = MAX_SLICES
#: the watch of a node's few slices: the Node watch's timings, LIST pages of at most 2 MiB
SETTINGS = ReflectorSettings(request_timeout=(3.0, 10.0), max_delay=5.0, page_size=PAGE,
                             max_page_bytes=MAX_PAGE_BYTES)
ECHO_WAIT = 10.0
"""Seconds a write of ours waits for its watch event at most."""
REFUSED_WAIT = 2.0
"""Seconds a refused write waits for the watch to show the slice's newer version at most."""


class ReadFailed(Exception):
    """The slices could not be read; nothing is written on what was not read."""


class NotYet(Exception):
    """The watched state is not known yet, or is behind a write of ours: wait for the watch."""


class Bounded(ReadFailed):
    """The slices are past a bound (``SliceBounds``): not read whole, held."""


@dataclass(frozen=True)
class SliceBounds:
    max_slices: int = MAX_SLICES
    max_bytes: int = MAX_SLICES_BYTES
    max_slice_bytes: int = MAX_SLICE_BYTES
    relist: BackoffSettings = RELIST
    """The pause before a LIST that a deletion or a change while bounded asks for."""


def slices_path(version: str) -> str:
    return f"/apis/resource.k8s.io/{version}/resourceslices"


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def _version(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def _entry(obj: Json, max_slice_bytes: int) -> Json:
    """What the bounds count of a slice: its spec's size as compact JSON (``specBytes``), its
    spec (None: over ``max_slice_bytes``) and the slice itself."""
    spec = obj.get("spec")
    size = len(json.dumps(spec, separators=(",", ":"), default=str).encode())
    return {"spec": spec if size <= max_slice_bytes else None, "specBytes": size, "slice": obj}


def _too_large(name: str, entry: Mapping[str, Any], limit: int) -> str:
    return f"{KIND} {name} is {entry['specBytes']} bytes, over the bound of {limit} bytes (larger than any slice of the agent's); not read"


class WatchedSlices:
    """The reflector's handler for one node's slices of the driver."""

    def __init__(self, api_client: Any, node_name: str, version: str, *,
                 on_change: Callable[[bool], None] = lambda _foreign: None,
                 settings: ReflectorSettings = SETTINGS, bounds: SliceBounds = SliceBounds(),
                 on_ignored: Callable[[str, str], None] | None = None,
                 on_bounded: Callable[[str | None], None] = lambda _why: None) -> None:
        self.node_name = node_name
        self.on_change = on_change
        self.on_bounded = on_bounded
        self.settings = settings
        self.bounds = CollectionBounds(KIND, bounds.max_slices, bounds.max_bytes, bounds.max_slice_bytes,
                                       self._bounded)
        self.relist_backoff = Backoff(bounds.relist)
        self._stop = threading.Event()  # ends a relist pause
        self.reflector = Reflector(LightCoreV1Api(api_client), slices_path(version), KIND, self,
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
        self._stop.set()
        self.reflector.stop(timeout)

    def kept(self) -> tuple[int, int]:
        """The slices kept and their specs' bytes (what the bounds hold to)."""
        with self._lock:
            return len(self._slices), sum(self.bounds.sizes.values())

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
            if self.bounds.bounded is not None:
                raise Bounded(f"the node's ResourceSlices are past a bound: {self.bounds.bounded}")
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

    def listing(self) -> SliceListing:
        return SliceListing(self)

    def list_ended(self, listing: Listing, why: str | None) -> None:
        """A LIST is over: within the bounds (``why`` None) the server's current state, which
        settles every write's wait; past one only the slices kept before, as it found them."""
        with self._lock:
            if why is None:
                self._slices = {key[1]: entry["slice"] for key, entry in listing.found.items()}
                self.bounds.sizes = {key: cost(entry) for key, entry in listing.found.items()}
                self.listed = True
                self._expected.clear()
                self._refused.clear()
                self.relist_backoff.reset()
            else:
                for key, entry in listing.known_changes().items():
                    self._keep(key, entry)
        self.bounds.report(why)
        self.on_change(False)

    def _keep(self, key: Key, entry: Mapping[str, Any] | None) -> None:
        if entry is None:
            self._slices.pop(key[1], None)
            self.bounds.sizes.pop(key, None)
        else:
            self._slices[key[1]] = entry["slice"]
            self.bounds.sizes[key] = cost(entry)

    def event(self, kind: str, obj: Json) -> None:
        if not self._ours(obj):
            return  # not ours (a server ignoring the field selector)
        name = _name(obj)
        gone = kind == "DELETED"
        was_bounded = self.bounds.bounded is not None
        entry = None if gone else self._admitted(name, _entry(obj, self.bounds.max_object_bytes))
        with self._lock:
            self._keep(("", name), entry)
            own = (entry is not None or gone) and self._settled(name, None if gone else _version(obj))
        if was_bounded and entry is None:
            raise Relist(self._pause)  # a deletion or a change while bounded: room again, perhaps; a LIST tells
        self.on_change(not own)

    def _admitted(self, name: str, entry: Json) -> Json | None:
        """``entry`` if it is kept; else None, and the bound it passes is reported."""
        if entry["spec"] is None:
            self.bounds.report(_too_large(name, entry, self.bounds.max_object_bytes))
            return None
        known = name in self._slices
        if self.bounds.admit(("", name), entry, known=known):
            return entry
        if known:  # its new version cannot be followed (admit reports only new slices)
            self.bounds.report(f"{KIND} {name} changed past the bounds; not read")
        return None

    def _settled(self, name: str, version: str | None) -> bool:
        """Whether this delivery (``version``; None: deleted) is the echo of our own write; a
        refused write's wait ends on any newer version. Under the lock."""
        if name in self._expected and self._expected[name][0] == version:
            del self._expected[name]
            return True
        if name in self._refused and (version is None or self._refused[name][0] != version):
            del self._refused[name]
        return False

    def _pause(self) -> None:
        """Before a LIST that a deletion or a change while bounded asked for."""
        self._stop.wait(self.relist_backoff.next_delay())

    def _bounded(self, why: str | None) -> None:
        self.on_bounded(why)
        self.on_change(False)

    def absent(self, status: int) -> None:
        """Never called: this watch has no absent-collection policy (403/404 are failures)."""

    def _readable(self, why: str | None) -> None:
        with self._lock:
            changed = why != self.unreadable
            self.unreadable = why
        if changed:
            self.on_change(False)


class SliceListing:
    """One LIST of the slices as the reflector reads it, page by page, into the bounds'
    ``Listing`` (only slices of this driver and node count; no page is kept)."""

    def __init__(self, watched: WatchedSlices) -> None:
        self.watched = watched
        with watched._lock:
            known = dict.fromkeys((("", name) for name in watched._slices), "")
        self.listing = watched.bounds.listing(known)
        self.too_large: list[str] = []
        self.too_large_count = 0

    def page(self, objects: list[Json]) -> None:
        limit = self.watched.bounds.max_object_bytes
        for obj in objects:
            if not self.watched._ours(obj):
                continue
            entry = _entry(obj, limit)
            if entry["spec"] is None:
                self.too_large_count += 1
                if len(self.too_large) < SHOWN:
                    self.too_large.append(_too_large(_name(obj), entry, limit))
                continue
            self.listing.add(("", _name(obj)), entry)

    def end(self, complete: bool) -> None:
        if not complete:
            self.listing.unreadable(self.watched.settings.max_page_bytes)
        why = self.listing.bounded
        if why is None and self.too_large:
            more = self.too_large_count - len(self.too_large)
            why = "; ".join(self.too_large) + (f"; and {more} more" if more > 0 else "")
        self.watched.list_ended(self.listing, why)
