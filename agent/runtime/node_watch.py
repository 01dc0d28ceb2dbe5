"""Watch this Node only and report changes that matter to the loop.

The loop is ``agent.kube.reflector``'s (LIST with ``fieldSelector=metadata.name=<node>``, which
gives the Node or nothing if it is not registered yet; WATCH from its version with bookmarks;
LIST again on 410; back off on errors and on streams with nothing usable). What is the Node's
own: only an object of kind Node with this name and a uid is taken as the Node (a Pod or
anything else under its name is ignored by the reflector), and a client-side read timeout
longer than the server's silences (bookmarks about every minute, kubelet's status report at
most every 5 minutes) catches half-open connections.

What counts as a change: a Node's labels, annotations, taints, ``status.capacity`` and uid
(``relevant``). Kubelet's heartbeats (conditions, ``lastHeartbeatTime``, images, ...) change
none of them and are ignored, so an idle node costs nothing but the watch itself.
"""

from __future__ import annotations

import collections
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from agent.kube.backoff import BackoffSettings
from agent.kube.reflector import Reflector, ReflectorSettings

log = logging.getLogger(__name__)

DEFAULT_WATCH_TIMEOUT = 900
"""Server-side watch length, seconds: ~4 reconnects an hour on a quiet node."""
DEFAULT_READ_TIMEOUT = 330.0
"""No byte for this long means the connection is dead (kubelet reports status every <= 5 min)."""
REQUEST_TIMEOUT = (3.0, 5.0)
"""(connect, read) seconds of the LIST, as the agent's other Node requests."""

#: the longest the watch waits before reconnecting after an error: a watch is the agent's eyes
#: on its Node; the agent's writes have their own backoff (client-go's reflector caps relists at
#: 30 s; the agent only watches one object, so a few seconds cost the API server little)
MAX_WATCH_DELAY = 5.0


def relevant(node: Mapping[str, Any] | None) -> tuple[object, ...] | None:
    """The parts of a Node the agent reacts to (None for no node)."""
    if not node:
        return None
    meta = node.get("metadata") or {}
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    taints = spec.get("taints") or []
    return (meta.get("uid"),
            json.dumps(meta.get("labels") or {}, sort_keys=True),
            json.dumps(meta.get("annotations") or {}, sort_keys=True),
            json.dumps(taints, sort_keys=True),
            json.dumps(status.get("capacity") or {}, sort_keys=True))


class NodeWatcher:
    """The Node's reflector handler; ``on_change(node)`` for relevant changes."""

    def __init__(self, core: Any, node_name: str, on_change: Callable[[dict[str, Any]], None], *,
                 timeout_seconds: int = DEFAULT_WATCH_TIMEOUT, read_timeout: float = DEFAULT_READ_TIMEOUT,
                 backoff: BackoffSettings = BackoffSettings(),  # noqa: B008 - frozen, shared safely
                 on_deleted: Callable[[], None] | None = None,
                 initial_delay: float = 0.0, on_ignored: Callable[[str, str], None] | None = None) -> None:
        self.node_name = node_name
        self.on_change = on_change
        self.on_deleted = on_deleted
        self.initial_delay = max(0.0, initial_delay)
        settings = ReflectorSettings(watch_timeout=max(1, int(timeout_seconds)), read_timeout=read_timeout,
                                     request_timeout=REQUEST_TIMEOUT, backoff=backoff, max_delay=MAX_WATCH_DELAY,
                                     initial_delay=self.initial_delay)
        self.reflector = Reflector(core, "/api/v1/nodes", "Node", self, name="node watch", settings=settings,
                                   field_selector=f"metadata.name={node_name}", on_ignored=on_ignored,
                                   node=node_name)
        self._lock = threading.Lock()
        self.latest: dict[str, Any] | None = None
        self._seen: collections.deque[str] = collections.deque(maxlen=512)

    # -- public ---------------------------------------------------------------------------
    def start(self) -> NodeWatcher:
        self.reflector.start()
        return self

    def alive(self) -> bool:
        return self.reflector.alive()

    def stop(self, timeout: float = 2.0) -> None:
        self.reflector.stop(timeout)

    @property
    def lists(self) -> int:
        return self.reflector.lists

    @property
    def watches(self) -> int:
        return self.reflector.watches

    @property
    def resource_version(self) -> str:
        return self.reflector.resource_version

    def fresh_node(self, max_age: float) -> dict[str, Any] | None:
        """The last Node seen, if the watch has heard from the server within ``max_age`` s."""
        with self._lock:
            if self.latest is not None and self._fresh(max_age):
                return self.latest
        return None

    def node_after(self, resource_version: str, max_age: float) -> dict[str, Any] | None:
        """The last Node seen, if it is fresh (``fresh_node``) and the watch has delivered the
        version ``resource_version`` (our last write) at some point: events arrive in order, so
        the latest one is then at least as new as that write. Otherwise None (caller GETs)."""
        with self._lock:
            if self.latest is None or not self._fresh(max_age):
                return None
            if resource_version and resource_version not in self._seen:
                return None
            return self.latest

    def _fresh(self, max_age: float) -> bool:
        return time.monotonic() - self.reflector.last_activity <= max_age

    # -- what the reflector delivers ---------------------------------------------------------
    def replace(self, objects: list[dict[str, Any]]) -> None:
        self._deliver(next((o for o in objects if self._ours(o)), None))

    def event(self, kind: str, obj: dict[str, Any]) -> None:
        if not self._ours(obj):
            return  # not ours (a server ignoring the field selector)
        if kind == "DELETED":
            log.warning("node %s was deleted; waiting for it to register again", self.node_name,
                        extra={"node": self.node_name, "event": "node-deleted"})
            with self._lock:
                self.latest = None
            if self.on_deleted:
                self.on_deleted()
            return
        self._deliver(obj)

    def absent(self, status: int) -> None:
        """Never called: the Node watch has no absent-collection policy (403/404 are errors)."""

    def _ours(self, obj: Mapping[str, Any]) -> bool:
        return (obj.get("metadata") or {}).get("name") == self.node_name

    def _deliver(self, node: dict[str, Any] | None) -> None:
        if node is not None:
            node.setdefault("apiVersion", "v1")
        with self._lock:
            previous = self.latest
            if node is not None:
                self._seen.append(str((node.get("metadata") or {}).get("resourceVersion") or ""))
            self.latest = node
        if node is not None and relevant(node) != relevant(previous):
            self.on_change(node)
