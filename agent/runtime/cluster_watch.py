"""LIST and WATCH one collection of NFD's custom resources (``nfd.k8s-sigs.io/v1alpha1``).

One ``CollectionWatch`` per kind and agent: ``nodefeaturerules`` (cluster-scoped, every
object) and ``nodefeatures`` (all namespaces, only this node's, by the
``nfd.node.kubernetes.io/node-name`` label). The loop is ``agent.kube.reflector``'s (paged
LIST, WATCH with bookmarks, LIST again on 410, backoff on errors and on streams with nothing
usable); what is NFD's own is the bookkeeping (``Digests``): a digest of each object's spec,
at most ``max_objects``; the objects themselves go to ``on_change`` trimmed to kind, name,
namespace and spec (no managedFields) and are not kept.

The CRDs may not be installed (a cluster without NFD): the server answers 404 for the
collection. That is one Info line, then a LIST every ``ABSENT_RETRY`` (doubling from 10 s
to 5 min) until the CRD appears; nothing else waits for it and readiness does not depend on
it. A 403 (RBAC not granted) is a Warning, retried the same way.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

from agent.kube.backoff import BackoffSettings
from agent.kube.reflector import Reflector, ReflectorSettings

log = logging.getLogger(__name__)

GROUP_PATH = "/apis/nfd.k8s-sigs.io/v1alpha1"
ABSENT_RETRY = BackoffSettings(initial=10.0, maximum=300.0, jitter=0.2)
PAGE = 500
DEFAULT_BACKOFF = BackoffSettings()
MAX_WATCH_DELAY = 5.0
"""The longest wait after an error, as the Node watch's."""
REQUEST_TIMEOUT = (3.0, 5.0)
"""(connect, read) seconds of each LIST page."""

Key = tuple[str, str]  # (namespace, name); namespace "" for cluster-scoped objects
Changes = Mapping[Key, "dict[str, Any] | None"]  # key -> the object now (trimmed), None: deleted


def trimmed(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What is kept of an object: kind, name, namespace, spec."""
    metadata: Mapping[str, Any] = obj["metadata"] if isinstance(obj.get("metadata"), Mapping) else {}
    return {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"),
            "metadata": {"name": metadata.get("name"), "namespace": metadata.get("namespace")},
            "spec": obj.get("spec")}


def _key(obj: Mapping[str, Any]) -> Key:
    metadata = obj.get("metadata") or {}
    return str(metadata.get("namespace") or ""), str(metadata.get("name") or "")


def _digest(obj: Mapping[str, Any]) -> str:
    return hashlib.sha1(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


class Digests:
    """The bookkeeping of one collection: a digest per object, at most ``max_objects`` (one over
    the bound is left out with a warning). Each method returns the changes to hand on, or
    None when nothing changed."""

    def __init__(self, kind: str, max_objects: int, node_name: str = "") -> None:
        self.kind, self.max_objects, self.node_name = kind, max_objects, node_name
        self.digests: dict[Key, str] = {}

    def replace(self, objects: list[dict[str, Any]]) -> dict[Key, dict[str, Any]] | None:
        """A whole LIST (or ``[]``: the collection is gone)."""
        found: dict[Key, dict[str, Any]] = {}
        for obj in objects:
            self._keep(found, obj, {})
        digests = {key: _digest(obj) for key, obj in found.items()}
        if digests == self.digests:
            return None
        self.digests = digests
        return found

    def update(self, obj: Mapping[str, Any]) -> dict[Key, dict[str, Any]] | None:
        changed: dict[Key, dict[str, Any]] = {}
        self._keep(changed, obj, self.digests)
        key = _key(obj)
        if key not in changed or self.digests.get(key) == (digest := _digest(changed[key])):
            return None
        self.digests[key] = digest
        return changed

    def delete(self, obj: Mapping[str, Any]) -> dict[Key, None] | None:
        key = _key(obj)
        return {key: None} if self.digests.pop(key, None) is not None else None

    def _keep(self, into: dict[Key, dict[str, Any]], obj: Mapping[str, Any], known: Mapping[Key, str]) -> None:
        key = _key(obj)
        if key not in known and key not in into and len(known) + len(into) >= self.max_objects:
            log.warning("more than %d %s objects; %s/%s left out", self.max_objects, self.kind, *key,
                        extra={"node": self.node_name, "event": "objects-bounded"})
            return
        into[key] = trimmed(obj)


class CollectionWatch:
    """The reflector handler of one NFD kind; ``on_change(changes, everything)`` after a LIST
    (``everything``: the changes are the whole collection, keys absent are gone) or an event
    changed an object."""

    def __init__(self, core: Any, plural: str, kind: str, on_change: Callable[[Changes, bool], None], *,
                 node_name: str = "", label_selector: str | None = None, max_objects: int = 1000,
                 timeout_seconds: int = 900, read_timeout: float = 330.0,
                 backoff: BackoffSettings = DEFAULT_BACKOFF, absent_backoff: BackoffSettings | None = None,
                 on_ignored: Callable[[str, str], None] | None = None) -> None:
        self.kind, self.on_change, self.node_name = kind, on_change, node_name
        self.book = Digests(kind, max_objects, node_name)
        self.absent_status: int | None = None  # the status while the collection cannot be read
        settings = ReflectorSettings(watch_timeout=timeout_seconds, read_timeout=read_timeout,
                                     request_timeout=REQUEST_TIMEOUT, page_size=PAGE, backoff=backoff,
                                     max_delay=MAX_WATCH_DELAY, absent_backoff=absent_backoff or ABSENT_RETRY)
        self.reflector = Reflector(core, f"{GROUP_PATH}/{plural}", kind, self, name=f"{kind} watch",
                                   settings=settings, label_selector=label_selector, on_ignored=on_ignored,
                                   node=node_name)

    @property
    def digests(self) -> dict[Key, str]:
        return self.book.digests

    def start(self) -> CollectionWatch:
        self.reflector.start()
        return self

    def alive(self) -> bool:
        return self.reflector.alive()

    def stop(self, timeout: float = 2.0) -> None:
        self.reflector.stop(timeout)

    def list_once(self) -> None:
        """One (paged) LIST, for a command that reads the cluster once (``plan --kubeconfig``);
        ``agent.kube.reflector.Absent`` when the CRD is not installed or not readable."""
        self.reflector.list_once()

    # -- what the reflector delivers ---------------------------------------------------------
    def replace(self, objects: list[dict[str, Any]]) -> None:
        if self.absent_status is not None:
            log.info("%s objects readable again", self.kind, extra={"node": self.node_name, "event": "crd-present"})
            self.absent_status = None
        self._hand_on(self.book.replace(objects), everything=True)

    def event(self, kind: str, obj: dict[str, Any]) -> None:
        self._hand_on(self.book.delete(obj) if kind == "DELETED" else self.book.update(obj), everything=False)

    def absent(self, status: int) -> None:
        if self.absent_status != status:
            level, why = (logging.INFO, "the CRD is not installed") if status == 404 else \
                (logging.WARNING, "not allowed to list it (RBAC)")
            log.log(level, "%s objects not read: %s (HTTP %d); the agent works without them and looks again "
                    "with backoff", self.kind, why, status, extra={"node": self.node_name, "event": "crd-absent"})
            self.absent_status = status
        self._hand_on(self.book.replace([]), everything=True)  # a CRD deleted with its objects: they are gone

    def _hand_on(self, changes: Changes | None, *, everything: bool) -> None:
        if changes is not None:
            self.on_change(dict(changes), everything)
