"""Watch streams: chunked JSON lines ``{"type": ..., "object": ...}`` fed from the store.

Semantics follow the real apiserver (reference section 3.1):

* no ``resourceVersion`` or ``"0"``: synthetic ``ADDED`` for every matching object, then changes;
* a specific version: only changes after it; older than the compaction point gives an
  in-stream ``ERROR`` event with a 410 ``Expired`` Status (or HTTP 410 when the server's
  ``watch_410`` is ``"http"``);
* ``allowWatchBookmarks``: ``BOOKMARK`` events (an empty object with ``metadata.resourceVersion``)
  every ``bookmark_interval`` seconds, on ``send_bookmarks()``, and just before a timeout;
* ``timeoutSeconds``: the stream ends cleanly after that long.

Tests can end streams (``drop``: cleanly with the final chunk, or ``abrupt``ly by closing
the socket) or expire them (an ``ERROR`` 410, then the end).
"""

from __future__ import annotations

import copy
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.support.store import Store, WatchEvent

KINDS = {"nodes": "Node", "pods": "Pod", "events": "Event", "nodefeaturerules": "NodeFeatureRule",
         "nodefeatures": "NodeFeature",
         "resourceslices.resource.k8s.io": "ResourceSlice", "deviceclasses.resource.k8s.io": "DeviceClass"}


def gone(rv: int, oldest_minus_one: int) -> dict[str, Any]:
    """A watch started from a compacted version: the watch cache's
    ``errors.NewResourceExpired(fmt.Sprintf("too old resource version: %d (%d)", rv, oldest-1))``."""
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": f"too old resource version: {rv} ({oldest_minus_one})", "reason": "Expired", "code": 410}


def compacted_midstream() -> dict[str, Any]:
    """An open watch whose revision etcd compacted: etcd3 ``interpretWatchError`` turns
    ``ErrCompacted`` into this ERROR event."""
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "The resourceVersion for the provided watch is too old.", "reason": "Expired", "code": 410}


@dataclass
class Watcher:
    resource: str
    namespace: str | None
    match: Callable[[dict[str, Any]], bool]
    since: int | None  # None: start with the current state
    bookmarks: bool
    deadline: float
    started: float = field(default_factory=time.monotonic)
    drop: str | None = None  # "clean" or "abrupt"
    expired: bool = False
    bookmark_due: bool = False
    sent: int = 0

    def wanted(self, obj: dict[str, Any]) -> bool:
        meta = obj.get("metadata") or {}
        return (self.namespace is None or meta.get("namespace", "") == self.namespace) and self.match(obj)


class WatchRegistry:
    """Open watch streams, so tests can drop, expire or bookmark them all at once."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._lock = threading.Lock()
        self.open: list[Watcher] = []
        self.started = 0

    def add(self, watcher: Watcher) -> None:
        with self._lock:
            self.open.append(watcher)
            self.started += 1

    def remove(self, watcher: Watcher) -> None:
        with self._lock:
            if watcher in self.open:
                self.open.remove(watcher)

    def _flag(self, setter: Callable[[Watcher], None]) -> int:
        with self._lock:
            watchers = list(self.open)
        for watcher in watchers:
            setter(watcher)
        self.store.wake()
        return len(watchers)

    def drop_all(self, abrupt: bool = False) -> int:
        return self._flag(lambda w: setattr(w, "drop", "abrupt" if abrupt else "clean"))

    def expire_all(self) -> int:
        return self._flag(lambda w: setattr(w, "expired", True))

    def bookmark_all(self) -> int:
        return self._flag(lambda w: setattr(w, "bookmark_due", True))

    def count(self) -> int:
        with self._lock:
            return len(self.open)


_NODE_INFO_FIELDS = ("machineID", "systemUUID", "bootID", "kernelVersion", "osImage", "containerRuntimeVersion",
                     "kubeletVersion", "kubeProxyVersion", "operatingSystem", "architecture")


def bookmark(kind: str, rv: int) -> dict[str, Any]:
    """A BOOKMARK's object: an empty object of the watched kind carrying only the version, as
    Go serializes an empty typed object: ``creationTimestamp: null`` (metav1.Time has no
    omitempty effect) and, for a Node, the struct-valued status fields that ``omitempty``
    cannot drop (``daemonEndpoints``, ``nodeInfo`` with its string fields). The pattern
    (``creationTimestamp: null``, zero spec/status) is from a recorded Pod bookmark; the Node
    fields are read from the k8s.io/api struct tags, not recorded."""
    obj: dict[str, Any] = {"kind": kind, "apiVersion": "v1",
                           "metadata": {"resourceVersion": str(rv), "creationTimestamp": None}}
    if kind == "Node":
        obj["spec"] = {}
        obj["status"] = {"daemonEndpoints": {"kubeletEndpoint": {"Port": 0}},
                         "nodeInfo": dict.fromkeys(_NODE_INFO_FIELDS, "")}
    return obj


def _converted(watcher: Watcher, event: WatchEvent) -> tuple[str, dict[str, Any]] | None:
    """What a selecting watcher sees of a change, as the watch cache's ``convertToWatchEvent``
    decides it (apiserver ``pkg/storage/cacher/cache_watcher.go``, kubernetes 04d6b4f1): an
    object that starts matching is ``ADDED``; one that stops matching is ``DELETED`` (the
    previous object at the new resourceVersion); one that matches before and after is
    ``MODIFIED``; a real delete is ``DELETED`` when the object matched."""
    now = event.type != "DELETED" and watcher.wanted(event.object)
    before = event.previous is not None and watcher.wanted(event.previous)
    if event.type == "DELETED":
        return ("DELETED", event.object) if watcher.wanted(event.object) else None
    if now:
        return ("MODIFIED" if before else "ADDED", event.object)
    if before and event.previous is not None:
        gone_object = copy.deepcopy(event.previous)
        gone_object.setdefault("metadata", {})["resourceVersion"] = str(event.rv)
        return "DELETED", gone_object
    return None


def _line(kind: str, obj: dict[str, Any]) -> bytes:
    return json.dumps({"type": kind, "object": obj}, separators=(",", ":")).encode() + b"\n"


def _wait_for_work(store: Store, watcher: Watcher, stopping: threading.Event, cursor: int,
                   next_bookmark: float) -> None:
    """Wait (``store.lock`` held) until there is something to send or to decide."""
    while True:
        now = time.monotonic()
        if (stopping.is_set() or watcher.drop or watcher.expired or store.rv > cursor
                or now >= watcher.deadline or watcher.bookmark_due
                or (watcher.bookmarks and now >= next_bookmark)):
            return
        wake_at = min(watcher.deadline, next_bookmark) if watcher.bookmarks else watcher.deadline
        store.changed.wait(max(0.0, min(wake_at - now, 1.0)))


def _start(store: Store, watcher: Watcher,
           line: Callable[[str, dict[str, Any]], bytes]) -> tuple[list[bytes] | None, int, int]:
    """(``store.lock`` held) the initial events (None: the resource version is too old), the
    resource version the stream starts after, and the oldest one still in the history."""
    if watcher.since is None:
        items = [o for (_k, o) in sorted(store.objects.get(watcher.resource, {}).items()) if watcher.wanted(o)]
        initial: list[bytes] | None = [line("ADDED", o) for o in items]
        cursor = store.rv
    elif store.too_old(watcher.since):
        initial, cursor = None, watcher.since
    else:
        initial, cursor = [], watcher.since
    return initial, cursor, store.oldest_minus_one()


def stream(store: Store, watcher: Watcher, send: Callable[[bytes], None], *, stopping: threading.Event,
           bookmark_interval: float, transform: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> str:
    """Feed ``watcher`` until it ends; returns how: ``timeout``, ``clean``, ``abrupt``,
    ``expired`` or ``stopped``. ``send`` raises OSError when the client went away.
    ``transform`` turns each ADDED/MODIFIED/DELETED object into what the client asked for
    (a ``Table``: the watch handler's ``Fixup``)."""
    def line(kind: str, obj: dict[str, Any]) -> bytes:
        if transform is not None and kind in ("ADDED", "MODIFIED", "DELETED"):
            obj = transform(obj)
        return _line(kind, obj)

    kind = KINDS.get(watcher.resource, "Object")
    with store.lock:
        initial, cursor, floor = _start(store, watcher, line)
    if initial is None:
        send(line("ERROR", gone(cursor, floor)))  # the cursor is the expired version asked for
        return "expired"
    for data in initial:
        send(data)
    next_bookmark = time.monotonic() + bookmark_interval
    while True:
        with store.lock:
            _wait_for_work(store, watcher, stopping, cursor, next_bookmark)
            lost = cursor < store.trimmed
            events = [e for e in store.history if e.rv > cursor and e.resource == watcher.resource]
            cursor = max(cursor, store.rv)
        if stopping.is_set():
            return "stopped"
        if lost:
            watcher.expired = True
        for event in events:
            converted = None if watcher.expired else _converted(watcher, event)
            if converted is not None:
                send(line(*converted))
                watcher.sent += 1
        if watcher.expired:
            send(line("ERROR", compacted_midstream()))
            return "expired"
        if watcher.drop:
            return watcher.drop
        now = time.monotonic()
        timed_out = now >= watcher.deadline
        if watcher.bookmarks and (watcher.bookmark_due or now >= next_bookmark or timed_out):
            watcher.bookmark_due = False
            next_bookmark = now + bookmark_interval
            send(line("BOOKMARK", bookmark(kind, cursor)))
        watcher.bookmark_due = False
        if timed_out:
            return "timeout"
