"""LIST and WATCH one collection of NFD's custom resources (``nfd.k8s-sigs.io/v1alpha1``).

One ``CollectionWatch`` per kind and agent: ``nodefeaturerules`` (cluster-scoped, every
object) and ``nodefeatures`` (all namespaces, only this node's, by the
``nfd.node.kubernetes.io/node-name`` label). The loop is the Node watch's
(``node_watch``): LIST (paged), WATCH from its resourceVersion with bookmarks, LIST again on
410, back off on errors. What it keeps is bounded: a digest of each object's spec, at most
``max_objects`` (one over the bound is left out with a warning); the objects themselves go to
``on_change`` trimmed to kind, name, namespace and spec (no managedFields) and are not kept.

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
from typing import Any

from agent.kube.backoff import Backoff, BackoffSettings
from agent.reconcile.node_api import DEFAULT_REQUEST_TIMEOUT
from agent.runtime.node_watch import (
    DEFAULT_READ_TIMEOUT,
    DEFAULT_WATCH_TIMEOUT,
    MAX_WATCH_DELAY,
    WatchExpired,
    _describe,
    _retry_after,
    consume,
)

log = logging.getLogger(__name__)

GROUP_PATH = "/apis/nfd.k8s-sigs.io/v1alpha1"
ABSENT_RETRY = BackoffSettings(initial=10.0, maximum=300.0, jitter=0.2)
PAGE = 500
DEFAULT_BACKOFF = BackoffSettings()

Key = tuple[str, str]  # (namespace, name); namespace "" for cluster-scoped objects


def trimmed(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What is kept of an object: kind, name, namespace, spec."""
    metadata: Mapping[str, Any] = obj["metadata"] if isinstance(obj.get("metadata"), Mapping) else {}
    return {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"),
            "metadata": {"name": metadata.get("name"), "namespace": metadata.get("namespace")},
            "spec": obj.get("spec")}


def _key(obj: Mapping[str, Any]) -> Key:
    metadata = obj.get("metadata") or {}
    return str(metadata.get("namespace") or ""), str(metadata.get("name") or "")


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
                 timeout_seconds: int = DEFAULT_WATCH_TIMEOUT, read_timeout: float = DEFAULT_READ_TIMEOUT,
                 backoff: BackoffSettings = DEFAULT_BACKOFF, absent_backoff: BackoffSettings | None = None) -> None:
        self.core, self.kind, self.on_change = core, kind, on_change
        self.path = f"{GROUP_PATH}/{plural}"
        self.node_name = node_name
        self.label_selector = label_selector
        self.max_objects = max_objects
        self.timeout_seconds, self.read_timeout = timeout_seconds, read_timeout
        self.backoff, self.absent_backoff = Backoff(backoff), Backoff(absent_backoff or ABSENT_RETRY)
        self.digests: dict[Key, str] = {}
        self.resource_version = ""
        self.absent: int | None = None  # the status while the collection cannot be read
        self.lists = self.watches = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._response: Any = None
        self._thread = threading.Thread(target=self._run, name=f"watch-{plural}", daemon=True)

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
            except WatchExpired:
                need_list = True
            except CollectionAbsent as exc:
                self._wait(self._absent(exc.status))
                need_list = True
            except Exception as exc:  # noqa: BLE001 - any failure: back off and try again
                if self._stop.is_set():
                    return
                delay = min(self.backoff.next_delay(getattr(exc, "retry_after", None)), MAX_WATCH_DELAY)
                log.warning("%s watch failed (%s); retrying in %.1fs", self.kind, _describe(exc), delay,
                            extra={"node": self.node_name, "event": "watch-error"})
                self._wait(delay)
                need_list = need_list or not self.resource_version

    def _wait(self, seconds: float) -> None:
        self._stop.wait(seconds)

    def _absent(self, status: int) -> float:
        delay = self.absent_backoff.next_delay()
        if self.absent != status:
            level, why = (logging.INFO, "the CRD is not installed") if status == 404 else \
                (logging.WARNING, "not allowed to list it (RBAC)")
            log.log(level, "%s objects not read: %s (HTTP %d); the agent works without them and looks again "
                    "with backoff", self.kind, why, status, extra={"node": self.node_name, "event": "crd-absent"})
            self.absent = status
        if self.digests:
            self._replace({})  # a CRD deleted with its objects: they are gone
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
                raise WatchExpired() from exc
            exc.retry_after = _retry_after(exc)  # type: ignore[attr-defined]
            raise

    def list_once(self) -> None:
        """One (paged) LIST, for a command that reads the cluster once (``plan --kubeconfig``);
        ``CollectionAbsent`` when the CRD is not installed or not readable."""
        self._list()

    def _list(self) -> None:
        found: dict[Key, dict[str, Any]] = {}
        token = ""
        while True:
            self.lists += 1
            body = json.loads(self._get(limit=PAGE, continue_=token or None,
                                        _request_timeout=DEFAULT_REQUEST_TIMEOUT).data)
            for item in body.get("items") or []:
                if isinstance(item, dict):
                    self._keep(found, item, {})
            metadata = body.get("metadata") or {}
            token = str(metadata.get("continue") or "")
            if not token:
                break
        self.resource_version = str(metadata.get("resourceVersion") or "")
        if self.absent is not None:
            log.info("%s objects readable again", self.kind, extra={"node": self.node_name, "event": "crd-present"})
            self.absent = None
        self.absent_backoff.reset()
        self._replace(found)

    def _keep(self, into: dict[Key, dict[str, Any]], obj: Mapping[str, Any], known: Mapping[Key, str]) -> None:
        key = _key(obj)
        if key not in known and key not in into and len(known) + len(into) >= self.max_objects:
            log.warning("more than %d %s objects; %s/%s left out", self.max_objects, self.kind, *key,
                        extra={"node": self.node_name, "event": "objects-bounded"})
            return
        into[key] = trimmed(obj)

    def _replace(self, found: dict[Key, dict[str, Any]]) -> None:
        digests = {key: _digest(obj) for key, obj in found.items()}
        if digests != self.digests:
            self.digests = digests
            self.on_change(dict(found), True)

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
            count = consume(response, self._stop, self._event)
        finally:
            with self._lock:
                self._response = None
        if count == 0 and time.monotonic() - started < 1.0:
            self._wait(1.0)  # a server ending watches at once: no hot loop

    def _event(self, line: bytes) -> None:
        try:
            event = json.loads(line)
        except ValueError:
            return
        if not isinstance(event, dict) or not isinstance(event.get("object"), dict):
            return
        kind, obj = event.get("type"), event["object"]
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise WatchExpired()
            raise RuntimeError(f"watch error {obj.get('code')}: {obj.get('message', '')}")
        rv = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        if rv:
            self.resource_version = rv
        if kind not in ("ADDED", "MODIFIED", "DELETED"):
            return
        key = _key(obj)
        if kind == "DELETED":
            if self.digests.pop(key, None) is not None:
                self.on_change({key: None}, False)
            return
        changed: dict[Key, dict[str, Any]] = {}
        self._keep(changed, obj, self.digests)
        if key in changed and self.digests.get(key) != (digest := _digest(changed[key])):
            self.digests[key] = digest
            self.on_change(changed, False)
