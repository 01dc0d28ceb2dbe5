"""LIST and WATCH one collection of NFD's custom resources (``nfd.k8s-sigs.io/v1alpha1``).

One ``CollectionWatch`` per kind and agent: ``nodefeaturerules`` (cluster-scoped, every
object) and ``nodefeatures`` (all namespaces, only this node's, by the
``nfd.node.kubernetes.io/node-name`` label). The loop follows the reflector's contract
(``agent.kube.reflector``: LIST (paged), WATCH from its resourceVersion with bookmarks, LIST
again on 410, back off on errors) and uses its parts (stream lines, ``Expired``, Retry-After),
but pages and relists itself, for the bounds below. What it keeps is a digest and the size of each object's spec; the
objects themselves go to ``on_change`` trimmed to kind, name, namespace and spec (no
managedFields) and are not kept.

Bounds (``agent.rules.budget``, kept by ``cluster_bounds.CollectionBounds``): a LIST reads
every page, whatever the objects are named, each page at most ``max_page_bytes`` (a larger one
is asked again with fewer objects); an object whose spec is over ``max_object_bytes`` arrives
with no spec and its size (``specBytes``), for the caller to refuse. When the objects are more
than ``max_objects`` or their specs more than ``max_bytes``, the collection is *bounded*: only
the objects delivered before (known by digest) are still followed, nothing new is delivered,
and ``on_bounded(why)`` says so (``on_bounded(None)`` once a LIST fits again). A deletion
while bounded is the way back under the bound: it starts a new LIST after a pause (``RELIST``:
10 s doubling to 5 min while the collection stays bounded, from 10 s again once a LIST fits),
so a tenant creating and deleting objects costs each agent at most one LIST per pause.

``gate`` is held while the thread works on what it read (parsing a page or an event and
delivering it), never while it waits on the network: the agent holds it for a pass, so a pass
waits for at most one page's work however many objects arrive meanwhile (a parse holds the
interpreter until it ends).

The CRDs may not be installed (a cluster without NFD): the server answers 404 for the
collection. That is one Info line, then a LIST every ``ABSENT_RETRY`` (doubling from 10 s
to 5 min) until the CRD appears; nothing else waits for it and readiness does not depend on
it. A 403 (RBAC not granted) is a Warning, retried the same way.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from agent.kube.backoff import Backoff, BackoffSettings
from agent.kube.reflector import Expired, NothingUsable, ReflectorSettings, describe, retry_after_of, stream_lines
from agent.reconcile.node_api import DEFAULT_REQUEST_TIMEOUT
from agent.rules.budget import MAX_COLLECTION_BYTES, MAX_OBJECT_BYTES, MAX_PAGE_BYTES
from agent.runtime.cluster_bounds import CollectionBounds

log = logging.getLogger(__name__)

GROUP_PATH = "/apis/nfd.k8s-sigs.io/v1alpha1"
ABSENT_RETRY = BackoffSettings(initial=10.0, maximum=300.0, jitter=0.2)
RELIST = BackoffSettings(initial=10.0, maximum=300.0, jitter=0.2)
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


class Relist(Exception):
    """A deletion while bounded: LIST again, after the pause ``RELIST`` sets."""


class CollectionAbsent(Exception):
    """404 on the collection: the CRD is not installed (or 403: not allowed to read it)."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


Changes = Mapping[Key, "dict[str, Any] | None"]  # key -> the object now (trimmed), None: deleted


def _digest(obj: Mapping[str, Any]) -> str:
    return hashlib.sha1(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


class CollectionWatch:
    """The loop in a daemon thread; ``on_change(changes, everything)`` after a LIST
    (``everything``: the changes are the whole collection, keys absent are gone) or an event
    changed an object."""

    def __init__(self, core: Any, plural: str, kind: str, on_change: Callable[[Changes, bool], None], *,
                 node_name: str = "", label_selector: str | None = None, max_objects: int = 1000,
                 max_bytes: int = MAX_COLLECTION_BYTES, max_object_bytes: int = MAX_OBJECT_BYTES,
                 max_page_bytes: int = MAX_PAGE_BYTES, on_bounded: Callable[[str | None], None] | None = None,
                 timeout_seconds: int = DEFAULT_WATCH_TIMEOUT, read_timeout: float = DEFAULT_READ_TIMEOUT,
                 backoff: BackoffSettings = DEFAULT_BACKOFF, absent_backoff: BackoffSettings | None = None,
                 gate: AbstractContextManager[Any] | None = None,
                 on_ignored: Callable[[str, str], None] | None = None) -> None:
        self.core, self.kind, self.on_change = core, kind, on_change
        self.path = f"{GROUP_PATH}/{plural}"
        self.node_name = node_name
        self.label_selector = label_selector
        self.bounds = CollectionBounds(kind, max_objects, max_bytes, max_object_bytes, on_bounded)
        self.max_page_bytes = max_page_bytes
        self.gate = gate if gate is not None else nullcontext()
        self.on_ignored = on_ignored
        self.name = f"watch-{plural}"
        self.timeout_seconds, self.read_timeout = timeout_seconds, read_timeout
        self.backoff, self.absent_backoff = Backoff(backoff), Backoff(absent_backoff or ABSENT_RETRY)
        self.relist_backoff = Backoff(RELIST)
        self.digests: dict[Key, str] = {}
        self.delivered = False  # a whole collection went to on_change once (the first read, even empty)
        self.resource_version = ""
        self.absent: int | None = None  # the status while the collection cannot be read
        self.lists = self.watches = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._response: Any = None
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)

    def start(self) -> CollectionWatch:
        self._thread.start()
        return self

    def alive(self) -> bool:
        return self._thread.is_alive()

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        with self._lock:
            response = self._response
        if response is not None:
            try:
                response.shutdown()  # unblocks a read in progress
            except Exception as exc:  # noqa: BLE001 - already closed
                log.debug("closing the %s watch: %s", self.kind, exc)
        if self._thread.is_alive():
            self._thread.join(timeout)

    # -- the loop -------------------------------------------------------------------------
    def _run(self) -> None:
        need_list = True
        while not self._stop.is_set():
            try:
                if need_list:
                    self._list()
                    need_list = False
                self._watch()
                self.backoff.success()
            except Expired:
                need_list = True
            except Relist:
                need_list = True
                self._pause()
            except CollectionAbsent as exc:
                self._wait(self._absent(exc.status))
                need_list = True
            except Exception as exc:  # noqa: BLE001 - any failure: back off and try again
                if self._stop.is_set():
                    return
                delay = min(self.backoff.next_delay(getattr(exc, "retry_after", None)), MAX_WATCH_DELAY)
                log.warning("%s watch failed (%s); retrying in %.1fs", self.kind, describe(exc), delay,
                            extra={"node": self.node_name, "event": "watch-error"})
                self._wait(delay)
                need_list = need_list or not self.resource_version

    def _wait(self, seconds: float) -> None:
        self._stop.wait(seconds)

    def _pause(self) -> None:
        """Before a LIST that a deletion while bounded asked for."""
        self._wait(self.relist_backoff.next_delay())

    def _absent(self, status: int) -> float:
        delay = self.absent_backoff.next_delay()
        if self.absent != status:
            level, why = (logging.INFO, "the CRD is not installed") if status == 404 else \
                (logging.WARNING, "not allowed to list it (RBAC)")
            log.log(level, "%s objects not read: %s (HTTP %d); the agent works without them and looks again "
                    "with backoff", self.kind, why, status, extra={"node": self.node_name, "event": "crd-absent"})
            self.absent = status
        if status == 404:  # no CRD, no objects: a read (a 403 is not one: what was read stays)
            self._replace({})
            self.bounds.report(None)
        return delay

    def _get(self, **query: Any) -> Any:
        from kubernetes.client.exceptions import ApiException

        try:
            return self.core.list_collection(self.path, label_selector=self.label_selector, _preload_content=False,
                                             **query)
        except ApiException as exc:
            if exc.status in (403, 404):
                raise CollectionAbsent(exc.status) from exc
            if exc.status == 410:
                raise Expired() from exc
            exc.retry_after = retry_after_of(exc)  # type: ignore[attr-defined]
            raise

    def list_once(self) -> None:
        """One (paged) LIST, for a command that reads the cluster once (``plan --kubeconfig``);
        ``CollectionAbsent`` when the CRD is not installed or not readable."""
        self._list()

    def _list(self) -> None:
        listing = self.bounds.listing(self.digests)
        token, limit = "", PAGE
        metadata: Mapping[str, Any] = {}
        while True:
            self.lists += 1
            raw = self._page(limit, token)
            if raw is None:  # a page over max_page_bytes: ask again for fewer objects
                if limit > 1:
                    limit = max(1, limit // 8)
                    continue
                listing.unreadable(self.max_page_bytes)
                break
            with self.gate:
                body = json.loads(raw)
                for item in body.get("items") or []:
                    if isinstance(item, dict):
                        listing.add(_key(item), trimmed(item, self.bounds.max_object_bytes))
            metadata = body.get("metadata") or {}
            token = str(metadata.get("continue") or "")
            if not token:
                break
        self.resource_version = str(metadata.get("resourceVersion") or "")
        if self.absent is not None:
            log.info("%s objects readable again", self.kind, extra={"node": self.node_name, "event": "crd-present"})
            self.absent = None
        self.absent_backoff.reset()
        with self.gate:
            if listing.bounded is None:
                self.relist_backoff.reset()
                self._replace(listing.found)
            else:
                self._apply(listing.known_changes())
            self.bounds.report(listing.bounded)

    def _page(self, limit: int, token: str) -> bytes | None:
        """One LIST page's body, or None when it is over ``max_page_bytes`` (not read on)."""
        response = self._get(limit=limit, continue_=token or None, _request_timeout=DEFAULT_REQUEST_TIMEOUT)
        chunks, size = [], 0
        try:
            while chunk := response.read(256 * 1024):
                size += len(chunk)
                if size > self.max_page_bytes:
                    return None
                chunks.append(chunk)
        finally:
            response.close()
        return b"".join(chunks)

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

    def _watch(self) -> None:
        self.watches += 1
        response = self._get(watch=True, allow_watch_bookmarks=True, resource_version=self.resource_version or None,
                             timeout_seconds=self.timeout_seconds,
                             _request_timeout=(DEFAULT_REQUEST_TIMEOUT[0], self.read_timeout))
        with self._lock:
            self._response = response
        if self._stop.is_set():
            response.shutdown()
        started = time.monotonic()
        try:
            lines, usable = _consume(response, self._stop, self._event)
        finally:
            with self._lock:
                self._response = None
        if lines and not usable and not self._stop.is_set():
            # junk, an HTML page, objects of another kind: an error, backed off as one (no hot loop)
            raise NothingUsable(f"watch of {self.path}: {lines} line(s), none a usable {self.kind} event")
        if lines == 0 and time.monotonic() - started < 1.0:
            self._wait(1.0)  # a server ending watches at once: no hot loop

    def _event(self, line: bytes) -> bool:
        with self.gate:
            return self._handle(line)

    def _handle(self, line: bytes) -> bool:
        """Apply one watch line; False when it was not a usable event of this kind."""
        try:
            event = json.loads(line)
        except ValueError:
            event = None
        if not isinstance(event, dict) or not isinstance(event.get("object"), dict):
            self._ignore("undecodable")
            return False
        kind, obj = event.get("type"), event["object"]
        if kind in ("ADDED", "MODIFIED", "DELETED") and obj.get("kind") not in (None, self.kind):
            self._ignore("wrong-kind")
            return False
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise Expired()
            raise RuntimeError(f"watch error {obj.get('code')}: {obj.get('message', '')}")
        rv = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        if rv:
            self.resource_version = rv
        if kind not in ("ADDED", "MODIFIED", "DELETED"):
            return kind == "BOOKMARK"
        key = _key(obj)
        if kind == "DELETED":
            self._apply({key: None})
            if self.bounds.bounded is not None:
                raise Relist()  # room again, perhaps: a LIST tells
            return True
        found = trimmed(obj, self.bounds.max_object_bytes)
        if self.bounds.admit(key, found, known=key in self.digests):
            self._apply({key: found})
        return True

    def _ignore(self, reason: str) -> None:
        """A watch line that is not an event of this kind: skipped, and counted (a metric)."""
        if self.on_ignored is not None:
            self.on_ignored(self.name, reason)


def _consume(response: Any, stop: threading.Event, handle: Callable[[bytes], bool]) -> tuple[int, int]:
    """Hand each event line of a watch response to ``handle`` until the stream ends or ``stop``
    is set; returns how many lines, and how many ``handle`` found usable. The connection goes
    back to the pool either way."""
    lines = usable = 0
    try:
        for line in stream_lines(response):
            if stop.is_set():
                break
            lines += 1
            usable += handle(line)
    finally:
        response.release_conn()
    return lines, usable
