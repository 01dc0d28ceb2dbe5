"""The fake server's storage: objects, one cluster-wide resourceVersion, and the watch history.

Like etcd behind the apiserver: every change bumps a single monotonically increasing
``resourceVersion`` and appends a watch event; a change that leaves the object identical
(a no-op patch) writes nothing and keeps the version. History older than ``compacted`` is
gone, so watches from there get 410. One re-entrant lock guards everything; ``changed``
(a Condition on it) wakes watch streams.
"""

from __future__ import annotations

import copy
import datetime as _dt
import threading
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

HISTORY_LIMIT = 10_000


class NotFound(Exception):
    def __init__(self, resource: str, name: str) -> None:
        super().__init__(f'{resource} "{name}" not found')
        self.resource, self.name = resource, name


class AlreadyExists(Exception):
    def __init__(self, resource: str, name: str) -> None:
        super().__init__(f'{resource} "{name}" already exists')
        self.resource, self.name = resource, name


class Conflict(Exception):
    def __init__(self, resource: str, name: str) -> None:
        super().__init__(f'Operation cannot be fulfilled on {resource} "{name}": the object has been modified; '
                         "please apply your changes to the latest version and try again")
        self.resource, self.name = resource, name


@dataclass(frozen=True)
class WatchEvent:
    rv: int
    resource: str
    type: str  # ADDED, MODIFIED, DELETED
    object: dict[str, Any]
    previous: dict[str, Any] | None = None  # the object before a MODIFIED (selector transitions)


def now_stamp() -> str:
    return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _strip_empty(obj: dict[str, Any]) -> dict[str, Any]:
    """Go ``omitempty``: empty label/annotation maps, taint lists, resource lists vanish."""
    meta = obj.get("metadata") or {}
    for key in ("labels", "annotations", "finalizers", "ownerReferences"):
        if key in meta and not meta[key]:
            del meta[key]
    spec = obj.get("spec")
    if isinstance(spec, dict) and "taints" in spec:
        if not spec["taints"]:
            del spec["taints"]
        else:
            for taint in spec["taints"]:
                for field in ("value", "timeAdded"):
                    if field in taint and taint[field] in ("", None):
                        del taint[field]
    status = obj.get("status")
    if isinstance(status, dict):
        for key in ("capacity", "allocatable"):
            if key in status and not status[key]:
                del status[key]
    return obj


class Store:
    """Objects by resource and (namespace, name); every mutation under ``lock``, and a stored
    object is replaced on a change, never changed in place."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.rv = 1
        self.compacted = 0  # compact(): watching from before this is 410
        self.trimmed = 0  # history dropped for size: watching from before this is always 410
        self.objects: dict[str, dict[tuple[str, str], dict[str, Any]]] = {}
        self.history: deque[WatchEvent] = deque()

    # -- reads ----------------------------------------------------------------------------
    def get(self, resource: str, name: str, namespace: str = "") -> dict[str, Any]:
        with self.lock:
            obj = self.objects.get(resource, {}).get((namespace, name))
            if obj is None:
                raise NotFound(resource, name)
            return copy.deepcopy(obj)

    def list(self, resource: str, namespace: str | None = None,
             match: Callable[[dict[str, Any]], bool] = lambda _o: True, *, start: int = 0,
             limit: int | None = None, shared: bool = False) -> tuple[list[dict[str, Any]], int]:
        """Copies of the matching objects in key order, from the ``start``-th, at most ``limit``
        (``shared``: the stored objects themselves, for a caller that only serializes them)."""
        with self.lock:
            found = [o for (ns, _n), o in sorted(self.objects.get(resource, {}).items())
                     if (namespace is None or ns == namespace) and match(o)]
            found = found[start:None if limit is None else start + limit]
            rv = self.rv
        # copied outside the lock (a stored object is replaced, never changed in place): a large
        # LIST does not stall every other request, as it does not on a real API server
        return (found if shared else [copy.deepcopy(o) for o in found]), rv

    def events_after(self, rv: int) -> Iterator[WatchEvent]:
        with self.lock:
            return iter([e for e in self.history if e.rv > rv])

    # -- writes ---------------------------------------------------------------------------
    def _record(self, resource: str, kind: str, obj: dict[str, Any], previous: dict[str, Any] | None = None) -> None:
        self.history.append(WatchEvent(self.rv, resource, kind, copy.deepcopy(obj), copy.deepcopy(previous)))
        while len(self.history) > HISTORY_LIMIT:
            self.trimmed = self.history.popleft().rv
        self.changed.notify_all()

    def create(self, resource: str, obj: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            meta = obj.setdefault("metadata", {})
            key = (meta.get("namespace", ""), meta["name"])
            bucket = self.objects.setdefault(resource, {})
            if key in bucket:
                raise AlreadyExists(resource, meta["name"])
            self.rv += 1
            meta["uid"] = str(uuid.uuid4())
            meta["resourceVersion"] = str(self.rv)
            meta.setdefault("creationTimestamp", now_stamp())
            bucket[key] = _strip_empty(copy.deepcopy(obj))
            self._record(resource, "ADDED", bucket[key])
            return copy.deepcopy(bucket[key])

    def update(self, resource: str, name: str, mutate: Callable[[dict[str, Any]], dict[str, Any] | None],
               namespace: str = "", *, force_bump: bool = False) -> tuple[dict[str, Any], bool]:
        """Replace an object with ``mutate(copy)`` (its return value, or the mutated copy).
        ``mutate`` may raise to refuse. Returns (stored object, whether it changed)."""
        with self.lock:
            bucket = self.objects.get(resource, {})
            old = bucket.get((namespace, name))
            if old is None:
                raise NotFound(resource, name)
            work = copy.deepcopy(old)
            new = mutate(work)
            new = _strip_empty(work if new is None else new)
            for field in ("name", "namespace", "uid", "creationTimestamp"):
                if field in old["metadata"]:
                    new["metadata"][field] = old["metadata"][field]
            new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
            if new == old and not force_bump:
                return copy.deepcopy(old), False
            self.rv += 1
            new["metadata"]["resourceVersion"] = str(self.rv)
            bucket[(namespace, name)] = new
            self._record(resource, "MODIFIED", new, old)
            return copy.deepcopy(new), True

    def delete(self, resource: str, name: str, namespace: str = "") -> dict[str, Any]:
        with self.lock:
            bucket = self.objects.get(resource, {})
            obj = bucket.pop((namespace, name), None)
            if obj is None:
                raise NotFound(resource, name)
            self.rv += 1
            obj = {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(self.rv)}}
            self._record(resource, "DELETED", obj)
            return copy.deepcopy(obj)

    def compact(self, upto: int | None = None) -> int:
        """Compact history up to ``upto`` (default: now), as etcd compaction and the watch
        cache's sliding window do: a watch from an older resourceVersion is 410."""
        with self.lock:
            self.compacted = max(self.compacted, self.rv if upto is None else min(upto, self.rv))
            self.changed.notify_all()
            return self.rv

    def oldest_minus_one(self) -> int:
        """The version below which history is gone: the watch cache's ``oldest-1``."""
        with self.lock:
            return max(self.trimmed, self.compacted)

    def too_old(self, since: int) -> bool:
        """Whether a watch from ``since`` is 410 Gone: ``resourceVersion < oldest-1`` in the
        watch cache (``getAllEventsSinceLocked``), whatever the watch's selector; a version read
        after the compaction (a LIST's, or an object's unchanged since) is still fine."""
        with self.lock:
            return since < self.oldest_minus_one()

    def wake(self) -> None:
        with self.lock:
            self.changed.notify_all()
