"""Watch this Node only and report changes that matter to the loop.

The loop (as client-go's reflector runs it, ``tools/cache/reflector.go``; the API's contract in
https://kubernetes.io/docs/reference/using-api/api-concepts/#efficient-detection-of-changes):
LIST with ``fieldSelector=metadata.name=<node>``
(gives the Node, or nothing if it is not registered yet, and a resourceVersion); WATCH from
that version with ``allowWatchBookmarks`` and ``timeoutSeconds``; on each event remember the
version; when the server ends the stream, watch again from the last version at once; on 410 Gone
(HTTP or an in-stream ERROR) LIST again; on network errors and 5xx back off (client-go's
reflector policy, ``agent.kube.backoff``) and watch again. The stream is parsed here
(not with ``kubernetes.watch.Watch``, whose 410 and bookmark handling varies by version).
A client-side read timeout longer than the server's silences (bookmarks about every minute,
kubelet's status report at most every 5 minutes) catches half-open connections.

What counts as a change: a Node's labels, annotations, taints, ``status.capacity`` and uid
(``relevant``). Kubelet's heartbeats (conditions, ``lastHeartbeatTime``, images, ...) change
none of them and are ignored, so an idle node costs nothing but the watch itself.
"""

from __future__ import annotations

import collections
import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from agent.kube.backoff import Backoff, BackoffSettings
from agent.reconcile.node_api import DEFAULT_REQUEST_TIMEOUT

log = logging.getLogger(__name__)

DEFAULT_WATCH_TIMEOUT = 900
"""Server-side watch length, seconds: ~4 reconnects an hour on a quiet node."""
DEFAULT_READ_TIMEOUT = 330.0
"""No byte for this long means the connection is dead (kubelet reports status every <= 5 min)."""
MAX_LINE = 16 * 1024 * 1024
QUICK_END_MAX_WAIT = 1.0
"""Pause between watches a server keeps ending at once without an event (50 ms doubling)."""


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


class WatchExpired(Exception):
    """410 Gone: the resourceVersion is too old; LIST again."""


class NodeWatcher:
    """Runs the list/watch loop in a daemon thread; ``on_change(node)`` for relevant changes."""

    def __init__(self, core: Any, node_name: str, on_change: Callable[[dict[str, Any]], None], *,
                 timeout_seconds: int = DEFAULT_WATCH_TIMEOUT, read_timeout: float = DEFAULT_READ_TIMEOUT,
                 backoff: BackoffSettings = BackoffSettings(),  # noqa: B008 - frozen, shared safely
                 on_deleted: Callable[[], None] | None = None,
                 initial_delay: float = 0.0) -> None:
        self.core = core
        self.node_name = node_name
        self.on_change = on_change
        self.on_deleted = on_deleted
        self.timeout_seconds = max(1, int(timeout_seconds))
        self.read_timeout = read_timeout
        self.initial_delay = max(0.0, initial_delay)
        self.backoff = Backoff(backoff)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._response: Any = None
        self._thread = threading.Thread(target=self._run, name="node-watch", daemon=True)
        self.resource_version = ""
        self.latest: dict[str, Any] | None = None
        self.last_activity = 0.0
        self.lists = self.watches = 0
        self._seen: collections.deque[str] = collections.deque(maxlen=512)

    # -- public ---------------------------------------------------------------------------
    def start(self) -> NodeWatcher:
        self._thread.start()
        return self

    def alive(self) -> bool:
        return self._thread.is_alive()

    def fresh_node(self, max_age: float) -> dict[str, Any] | None:
        """The last Node seen, if the watch has heard from the server within ``max_age`` s."""
        with self._lock:
            if self.latest is not None and time.monotonic() - self.last_activity <= max_age:
                return self.latest
        return None

    def node_after(self, resource_version: str, max_age: float) -> dict[str, Any] | None:
        """The last Node seen, if it is fresh (``fresh_node``) and the watch has delivered the
        version ``resource_version`` (our last write) at some point: events arrive in order, so
        the latest one is then at least as new as that write. Otherwise None (caller GETs)."""
        with self._lock:
            if self.latest is None or time.monotonic() - self.last_activity > max_age:
                return None
            if resource_version and resource_version not in self._seen:
                return None
            return self.latest

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        with self._lock:
            response = self._response
        if response is not None:
            with contextlib.suppress(Exception):  # best effort: the thread ends within its read timeout anyway
                response.shutdown()  # unblocks a read in progress (urllib3 >= 2.3)
        if self._thread.is_alive():
            self._thread.join(timeout)

    # -- the loop -------------------------------------------------------------------------
    def _run(self) -> None:
        need_list = True
        quick_ends = 0
        if self.initial_delay:
            self._wait(self.initial_delay)  # the agent's startup jitter: spread a rollout's first LISTs
        while not self._stop.is_set():
            try:
                if need_list:
                    self._list()
                    need_list = False
                started = time.monotonic()
                events = self._watch()
                self.backoff.success()  # a clean end is no error: reconnect from the last version at once
                if events == 0 and time.monotonic() - started < 1.0:
                    quick_ends += 1  # a server ending watches at once: no hot loop, but no error backoff
                    if quick_ends > 1:
                        self._wait(min(QUICK_END_MAX_WAIT, 0.05 * 2 ** (quick_ends - 2)))
                else:
                    quick_ends = 0
            except WatchExpired:
                log.info("node watch: resourceVersion %s expired (410); listing again", self.resource_version,
                         extra={"node": self.node_name, "event": "watch-expired"})
                need_list = True
            except Exception as exc:  # noqa: BLE001 - any failure of a watch is retried after the backoff
                if self._stop.is_set():
                    return
                delay = min(self.backoff.next_delay(getattr(exc, "retry_after", None)), MAX_WATCH_DELAY)
                log.warning("node watch failed (%s); retrying in %.1fs", _describe(exc), delay,
                            extra={"node": self.node_name, "event": "watch-error"})
                self._wait(delay)
                need_list = need_list or not self.resource_version

    def _wait(self, seconds: float) -> None:
        self._stop.wait(seconds)

    def _list(self) -> None:
        from kubernetes.client.exceptions import ApiException

        self.lists += 1
        try:
            response = self.core.list_node(field_selector=f"metadata.name={self.node_name}",
                                           _preload_content=False, _request_timeout=DEFAULT_REQUEST_TIMEOUT)
            body = json.loads(response.data)
        except ApiException as exc:
            exc.retry_after = _retry_after(exc)  # type: ignore[attr-defined]
            raise
        items = [i for i in (body.get("items") or []) if isinstance(i, dict)]
        self.resource_version = str((body.get("metadata") or {}).get("resourceVersion") or "")
        node = items[0] if items else None
        if node is not None:
            node.setdefault("kind", "Node")
            node.setdefault("apiVersion", "v1")
        self._deliver(node)

    def _watch(self) -> int:
        """One watch request; returns the number of events read. Raises WatchExpired on 410."""
        from kubernetes.client.exceptions import ApiException

        self.watches += 1
        try:
            response = self.core.list_node(
                field_selector=f"metadata.name={self.node_name}", watch=True, allow_watch_bookmarks=True,
                resource_version=self.resource_version or None, timeout_seconds=self.timeout_seconds,
                _preload_content=False, _request_timeout=(DEFAULT_REQUEST_TIMEOUT[0], self.read_timeout))
        except ApiException as exc:
            if exc.status == 410:
                raise WatchExpired() from exc
            exc.retry_after = _retry_after(exc)  # type: ignore[attr-defined]
            raise
        with self._lock:
            self._response = response
        if self._stop.is_set():
            response.shutdown()
        try:
            return consume(response, self._stop, self._event)
        finally:
            with self._lock:
                self._response = None

    def _event(self, line: bytes) -> None:
        try:
            event = json.loads(line)
        except ValueError:
            log.warning("node watch: undecodable event %r; ignored", line[:100], extra={"node": self.node_name})
            return
        if not isinstance(event, dict) or not isinstance(event.get("object"), dict):
            log.warning("node watch: event without an object %r; ignored", line[:100], extra={"node": self.node_name})
            return
        kind, obj = event.get("type"), event["object"]
        with self._lock:
            self.last_activity = time.monotonic()
        if kind == "ERROR":
            code = obj.get("code")
            if code == 410:
                raise WatchExpired()
            raise RuntimeError(f"watch error {code}: {obj.get('message', '')}")
        rv = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        if rv:
            self.resource_version = rv
        if kind == "BOOKMARK":
            return
        if (obj.get("metadata") or {}).get("name") != self.node_name:
            return  # not ours (a server ignoring the field selector)
        if kind == "DELETED":
            log.warning("node %s was deleted; waiting for it to register again", self.node_name,
                        extra={"node": self.node_name, "event": "node-deleted"})
            with self._lock:
                self.latest = None
            if self.on_deleted:
                self.on_deleted()
            return
        if kind in ("ADDED", "MODIFIED"):
            obj.setdefault("kind", "Node")
            obj.setdefault("apiVersion", "v1")
            self._deliver(obj)

    def _deliver(self, node: dict[str, Any] | None) -> None:
        with self._lock:
            previous = self.latest
            if node is not None:
                self._seen.append(str((node.get("metadata") or {}).get("resourceVersion") or ""))
            self.latest = node
            self.last_activity = time.monotonic()
        if node is not None and relevant(node) != relevant(previous):
            self.on_change(node)


def consume(response: Any, stop: threading.Event, handle: Callable[[bytes], None]) -> int:
    """Hand each event line of a watch response to ``handle`` until the stream ends or ``stop``
    is set; returns how many. The connection goes back to the pool either way."""
    count = 0
    try:
        for line in _lines(response):
            if stop.is_set():
                break
            count += 1
            handle(line)
    finally:
        response.release_conn()
    return count


def _lines(response: Any) -> Iterator[bytes]:
    """Newline-delimited JSON from a chunked watch response (partial lines are buffered)."""
    buffer = b""
    for chunk in response.stream(amt=None, decode_content=False):
        buffer += chunk
        if len(buffer) > MAX_LINE:
            raise RuntimeError("watch event larger than 16 MiB")
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            if line.strip():
                yield line
    if buffer.strip():
        yield buffer


def _retry_after(exc: Any) -> float | None:
    from agent.kube.backoff import parse_retry_after

    headers = getattr(exc, "headers", None) or {}
    try:
        return parse_retry_after(headers.get("Retry-After"))
    except Exception:  # noqa: BLE001 - a header of any shape from a failed request: no hint then
        return None


def _describe(exc: Exception) -> str:
    status = getattr(exc, "status", None)
    if status:
        return f"HTTP {status} {getattr(exc, 'reason', '')}".strip()
    return f"{type(exc).__name__}: {exc}"[:300]
