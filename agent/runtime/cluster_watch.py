"""LIST and WATCH one collection of NFD's custom resources (``nfd.k8s-sigs.io/v1alpha1``).

One ``CollectionWatch`` per kind and agent: ``nodefeaturerules`` (cluster-scoped, every
object) and ``nodefeatures`` (all namespaces, only this node's, by the
``nfd.node.kubernetes.io/node-name`` label). The loop is ``agent.kube.reflector``'s (LIST
paged, WATCH from its resourceVersion with bookmarks, LIST again on 410, back off on errors
and on streams with nothing usable; objects of another kind or without uid are ignored and
counted); this module is its handler. What it keeps is a digest and the size of each object's
spec; the objects themselves go to ``on_change`` trimmed to kind, name, namespace and spec (no
managedFields) and are not kept.

Bounds (``agent.rules.budget``, kept by ``agent.kube.bounds.CollectionBounds``): a LIST reads
every page, whatever the objects are named, each page at most ``max_page_bytes`` (the
reflector asks a larger one again with fewer objects; a page of one object over it stops the
LIST, which is then bounded: what was delivered is held); an object whose spec is over
``max_object_bytes`` arrives with no spec and its size (``specBytes``), for the caller to
refuse. When the objects are more than ``max_objects`` or their specs more than ``max_bytes``,
the collection is *bounded*: only the objects delivered before (known by digest) are still
followed, nothing new is delivered, and ``on_bounded(why)`` says so (``on_bounded(None)`` once
a LIST fits again). A deletion while bounded is the way back under the bound: it starts a new
LIST (``Relist``) after a pause (``RELIST``: 10 s doubling to 5 min while the collection stays
bounded, from 10 s again once a LIST fits), so a tenant creating and deleting objects costs
each agent at most one LIST per pause.

``gate`` is the reflector's: held while it decodes and delivers what it read (a page, an event),
never while it waits on the network; the agent holds it for a pass, so a pass waits for at most
one page's work however many objects arrive meanwhile (a parse holds the interpreter until it
ends).

The CRDs may not be installed (a cluster without NFD): the server answers 404 for the
collection. That is one Info line, then a LIST every ``ABSENT_RETRY`` (doubling from 10 s
to 5 min) until the CRD appears; nothing else waits for it and readiness does not depend on
it. A 404 is a read (no CRD, no objects); a 403 (RBAC not granted) is a Warning and not a read
(what was read stays), retried the same way.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import Any

from agent.kube.backoff import Backoff, BackoffSettings
from agent.kube.bounds import RELIST, CollectionBounds, Listing
from agent.kube.reflector import Reflector, ReflectorSettings, Relist
from agent.reconcile.node_api import DEFAULT_REQUEST_TIMEOUT
from agent.rules.budget import MAX_COLLECTION_BYTES, MAX_OBJECT_BYTES, MAX_PAGE_BYTES

log = logging.getLogger(__name__)

GROUP_PATH = "/apis/nfd.k8s-sigs.io/v1alpha1"
ABSENT_RETRY = BackoffSettings(initial=10.0, maximum=300.0, jitter=0.2)
PAGE = 500
DEFAULT_BACKOFF = BackoffSettings()
DEFAULT_WATCH_TIMEOUT = ReflectorSettings.watch_timeout
DEFAULT_READ_TIMEOUT = ReflectorSettings.read_timeout
MAX_WATCH_DELAY = ReflectorSettings.max_delay

Key = tuple[str, str]  # (namespace, name); namespace "" for cluster-scoped objects


def trimmed(obj: Mapping[str, Any], max_object_bytes: int | None = None) -> dict[str, Any]:
    """What is kept of an object: kind, name, namespace, spec, and the spec's size as compact
    JSON (``specBytes``); over ``max_object_bytes`` the spec itself is left out (None)."""
    metadata: Mapping[str, Any] = obj["metadata"] if isinstance(obj.get("metadata"), Mapping) else {}
    spec = obj.get("spec")
    size = len(json.dumps(spec, separators=(",", ":"), default=str).encode())
    return {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"),
            "metadata": {"name": metadata.get("name"), "namespace": metadata.get("namespace")},
            "spec": spec if max_object_bytes is None or size <= max_object_bytes else None, "specBytes": size}


def _key(obj: Mapping[str, Any]) -> Key:
    metadata = obj.get("metadata") or {}
    return str(metadata.get("namespace") or ""), str(metadata.get("name") or "")


Changes = Mapping[Key, "dict[str, Any] | None"]  # key -> the object now (trimmed), None: deleted


def _digest(obj: Mapping[str, Any]) -> str:
    return hashlib.sha1(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


class CollectionWatch:
    """The reflector's handler for one collection; ``on_change(changes, everything)`` after a
    LIST (``everything``: the changes are the whole collection, keys absent are gone) or an
    event changed an object."""

    def __init__(self, core: Any, plural: str, kind: str, on_change: Callable[[Changes, bool], None], *,
                 node_name: str = "", label_selector: str | None = None, max_objects: int = 1000,
                 max_bytes: int = MAX_COLLECTION_BYTES, max_object_bytes: int = MAX_OBJECT_BYTES,
                 max_page_bytes: int = MAX_PAGE_BYTES, on_bounded: Callable[[str | None], None] | None = None,
                 timeout_seconds: int = DEFAULT_WATCH_TIMEOUT, read_timeout: float = DEFAULT_READ_TIMEOUT,
                 backoff: BackoffSettings = DEFAULT_BACKOFF, absent_backoff: BackoffSettings | None = None,
                 gate: AbstractContextManager[Any] | None = None,
                 on_ignored: Callable[[str, str], None] | None = None) -> None:
        self.kind, self.on_change = kind, on_change
        self.node_name = node_name
        self.bounds = CollectionBounds(kind, max_objects, max_bytes, max_object_bytes, on_bounded)
        self.max_page_bytes = max_page_bytes
        self.relist_backoff = Backoff(RELIST)
        self.digests: dict[Key, str] = {}
        self.delivered = False  # a whole collection went to on_change once (the first read, even empty)
        self.absent_status: int | None = None  # the status while the collection cannot be read
        self._stop = threading.Event()  # ends a relist pause
        settings = ReflectorSettings(watch_timeout=max(1, int(timeout_seconds)), read_timeout=read_timeout,
                                     request_timeout=DEFAULT_REQUEST_TIMEOUT, page_size=PAGE,
                                     max_page_bytes=max_page_bytes, backoff=backoff, max_delay=MAX_WATCH_DELAY,
                                     absent_backoff=absent_backoff or ABSENT_RETRY)
        self.reflector = Reflector(core, f"{GROUP_PATH}/{plural}", kind, self, name=f"watch-{plural}",
                                   settings=settings, label_selector=label_selector, on_ignored=on_ignored,
                                   node=node_name, gate=gate)

    # -- public -------------------------------------------------------------------------------
    def start(self) -> CollectionWatch:
        self.reflector.start()
        return self

    def alive(self) -> bool:
        return self.reflector.alive()

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        self.reflector.stop(timeout)

    def list_once(self) -> None:
        """One (paged) LIST, for a command that reads the cluster once (``plan --kubeconfig``);
        the reflector's ``Absent`` when the CRD is not installed or not readable."""
        self.reflector.list_once()

    @property
    def lists(self) -> int:
        return self.reflector.lists

    @property
    def watches(self) -> int:
        return self.reflector.watches

    @property
    def resource_version(self) -> str:
        return self.reflector.resource_version

    # -- what the reflector delivers -------------------------------------------------------------
    def listing(self) -> ListRead:
        return ListRead(self)

    def event(self, kind: str, obj: dict[str, Any]) -> None:
        key = _key(obj)
        if kind != "DELETED":
            found = trimmed(obj, self.bounds.max_object_bytes)
            if self.bounds.admit(key, found, known=key in self.digests):
                self._apply({key: found})
            return
        self._apply({key: None})
        if self.bounds.bounded is not None:
            raise Relist(self._pause)  # room again, perhaps: a LIST tells

    def absent(self, status: int) -> None:
        if self.absent_status != status:
            level, why = (logging.INFO, "the CRD is not installed") if status == 404 else \
                (logging.WARNING, "not allowed to list it (RBAC)")
            log.log(level, "%s objects not read: %s (HTTP %d); the agent works without them and looks again "
                    "with backoff", self.kind, why, status, extra={"node": self.node_name, "event": "crd-absent"})
            self.absent_status = status
        if status == 404:  # no CRD, no objects: a read (a 403 is not one: what was read stays)
            self._replace({})
            self.bounds.report(None)

    def _pause(self) -> None:
        """Before a LIST that a deletion while bounded asked for."""
        self._stop.wait(self.relist_backoff.next_delay())

    def listed(self, listing: Listing, complete: bool) -> None:
        """A LIST is over: the whole collection within the bounds, or only the known objects."""
        if not complete:
            listing.unreadable(self.max_page_bytes)
        if self.absent_status is not None:
            log.info("%s objects readable again", self.kind, extra={"node": self.node_name, "event": "crd-present"})
            self.absent_status = None
        if listing.bounded is None:
            self.relist_backoff.reset()
            self._replace(listing.found)
        else:
            self._apply(listing.known_changes())
        self.bounds.report(listing.bounded)

    def _replace(self, found: dict[Key, dict[str, Any]]) -> None:
        digests = {key: _digest(obj) for key, obj in found.items()}
        self.bounds.sizes = {key: int(obj.get("specBytes") or 0) for key, obj in found.items()}
        if digests != self.digests or not self.delivered:
            self.digests, self.delivered = digests, True
            self.on_change(dict(found), True)

    def _apply(self, changes: Mapping[Key, dict[str, Any] | None]) -> None:
        """Deliver the changes that differ from what was delivered before."""
        delivered: dict[Key, dict[str, Any] | None] = {}
        for key, obj in changes.items():
            if obj is None:
                if self.digests.pop(key, None) is not None:
                    self.bounds.sizes.pop(key, None)
                    delivered[key] = None
            elif self.digests.get(key) != (digest := _digest(obj)):
                self.digests[key] = digest
                self.bounds.sizes[key] = int(obj.get("specBytes") or 0)
                delivered[key] = obj
        if delivered:
            self.on_change(delivered, False)


class ListRead:
    """One LIST of a ``CollectionWatch`` as the reflector reads it: each page's objects trimmed
    into the bounds' ``Listing`` (no page is kept), delivered when the LIST ends."""

    def __init__(self, watch: CollectionWatch) -> None:
        self.watch = watch
        self.listing = watch.bounds.listing(watch.digests)

    def page(self, objects: list[dict[str, Any]]) -> None:
        for obj in objects:
            self.listing.add(_key(obj), trimmed(obj, self.watch.bounds.max_object_bytes))

    def end(self, complete: bool) -> None:
        self.watch.listed(self.listing, complete)
