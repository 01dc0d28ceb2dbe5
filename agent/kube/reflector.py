"""The one LIST + WATCH loop under every watch the agent and placement run.

Modelled on client-go's Reflector (``k8s.io/client-go/tools/cache/reflector.go``:
``ListAndWatch``, ``watchHandler``/``handleWatch``) and the API's contract
(https://kubernetes.io/docs/reference/using-api/api-concepts/#efficient-detection-of-changes):

* LIST the collection (paged with ``limit``/``continue`` when ``page_size`` is set, with the
  label and field selectors), hand the whole of it to the handler (``replace``) and remember
  its resourceVersion; a ``PagedHandler`` (a collection larger than it keeps) takes it page by
  page instead (``listing()``), so no more than one page is held in memory;
* WATCH from that version with ``allowWatchBookmarks`` and ``timeoutSeconds``; each event's
  version is remembered (bookmarks only move it); when the server ends a stream, watch again
  from the last version;
* LIST again on 410 Gone, whether it comes as the HTTP answer or as an in-stream ERROR;
* on any other failure wait (``Backoff``: the handler's settings, each wait at most
  ``max_delay``; a ``Retry-After`` from a 429/503 replaces the computed wait, bounded by
  ``backoff.MAX_RETRY_AFTER``) and watch again, or LIST again if there is no version yet.

Every line of a stream is hostile input. An event counts only when it decodes to
``{"type", "object"}`` with an object of the watched ``kind`` (a missing kind is allowed only on
a BOOKMARK) that carries ``metadata.uid`` (client-go's ``expectedType``/``expectedGVK``
check); anything else (junk, an HTML page, a Pod on a Node watch, an object without uid) is
ignored, counted in ``ignored`` by reason and reported to ``on_ignored`` (a metric). A
stream that carried lines but no usable event is an error (backoff), so a proxy answering
with junk cannot make the loop spin; a stream that ends within ``QUICK_END`` seconds with no
line at all is client-go's "very short watch", which client-go backs off as an error; here the
first is re-watched at once (a server restarting, a load balancer ending idle streams: the
Node watch is the agent's eyes), the following ones wait 50 ms doubling to
``quick_end_max_wait``, so even that is no hot loop. A LIST answer must
be a ``<Kind>List``; its items are checked like events.

``max_page_bytes`` (optional) bounds what one LIST page may cost to read: a page over it is
asked again, from the same ``continue`` token, for an eighth of the objects, down to one; a
page of one object still over it is *not read*: the LIST ends there incomplete
(``Listing.end(False)``), so what the handler holds stays (never "the rest is absent"), and
the watch follows from the version of the pages read.

``gate`` (optional) is held while the reflector decodes what it read and hands it over (a LIST
page, a watch line, the end of a LIST), never while it waits on the network: a handler whose
readers must not be interrupted by that work (the agent's pass) shares it with them, and they
wait for at most one page's work.

A handler's ``event`` may raise ``Relist``: the stream is closed, the handler's pause runs (a
tenant's churn then costs one LIST per pause, not a LIST storm), and the collection is listed
again.

``absent_backoff`` (optional) is the policy for a collection that may not exist: a 404 (CRD
not installed) or 403 (not allowed) then goes to the handler's ``absent(status)`` and the LIST
is tried again on that slower backoff; without it those are errors like any other.

``on_readable`` (optional) is told whether the collection can be read now: the failure's
description after a LIST or WATCH failed (the handler's state may be behind the server until
the loop recovers), None once a LIST completed or a WATCH was answered (from then on every
change after the version held arrives, in order). A handler that writes what it watched (the
ResourceSlice writer) holds its writes while the last word was a failure.

``stop()`` closes the open stream (a blocked read returns at once) and joins the thread;
``alive()`` is what ``/healthz`` asks.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from kubernetes.client.exceptions import ApiException

from agent.kube.backoff import Backoff, BackoffSettings, parse_retry_after
from agent.kube.light_core import LightCoreV1Api

log = logging.getLogger(__name__)

Json = dict[str, Any]
MAX_LINE = 16 * 1024 * 1024
QUICK_END = 1.0
"""A watch that ends sooner than this without a line is "very short" (client-go's 1 s)."""


@dataclass(frozen=True)
class ReflectorSettings:
    watch_timeout: int = 900
    """Server-side watch length, seconds (``timeoutSeconds``)."""
    read_timeout: float = 330.0
    """No byte for this long means the connection is dead (bookmarks come about every minute)."""
    request_timeout: tuple[float, float] = (3.0, 5.0)
    """(connect, read) seconds of a LIST request."""
    page_size: int = 0
    """LIST page size (``limit``); 0: one unpaged LIST."""
    max_page_bytes: int = 0
    """The most bytes one LIST page may have (a larger one is asked again with fewer objects);
    0: no bound. Needs ``page_size``."""
    backoff: BackoffSettings = BackoffSettings()  # noqa: RUF009 - frozen, shared safely
    max_delay: float = 5.0
    """The longest wait after an error (Retry-After excepted)."""
    absent_backoff: BackoffSettings | None = None
    """When set, 403/404 mean "the collection is absent": ``absent()`` and retry on this backoff."""
    initial_delay: float = 0.0
    """Wait before the first LIST (a rollout's startup jitter)."""
    quick_end_max_wait: float = 1.0

    def __post_init__(self) -> None:
        if self.max_page_bytes and not self.page_size:
            raise ValueError("max_page_bytes needs page_size: a page over it is asked again with fewer objects")


class EventHandler(Protocol):
    """What every handler does with a watch's events; the reflector calls it from its thread."""

    def event(self, kind: str, obj: Json) -> None:
        """``ADDED``, ``MODIFIED`` or ``DELETED`` of one checked object; may raise ``Relist``."""

    def absent(self, status: int) -> None:
        """The collection cannot be read (404 or 403), with ``absent_backoff`` set."""


class Handler(EventHandler, Protocol):
    """A handler that takes each LIST whole."""

    def replace(self, objects: list[Json]) -> None:
        """After each complete LIST: the whole collection (objects not in it are gone)."""


class Listing(Protocol):
    """One LIST as it is read, page by page."""

    def page(self, objects: list[Json]) -> None:
        """One page's checked objects, in the collection's order."""

    def end(self, complete: bool) -> None:
        """The LIST is over: every page read (``complete``), or a page of one object over
        ``max_page_bytes`` stopped it (the objects after it were not read: not gone)."""


@runtime_checkable
class PagedHandler(EventHandler, Protocol):
    """A handler that takes each LIST page by page (a collection larger than it keeps)."""

    def listing(self) -> Listing:
        """A LIST starts: where its pages go."""


class Collected:
    """The ``Listing`` of a ``Handler``: the pages collected, handed to ``replace`` when every
    one was read (an incomplete LIST replaces nothing: the handler holds what it had)."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.objects: list[Json] = []

    def page(self, objects: list[Json]) -> None:
        self.objects.extend(objects)

    def end(self, complete: bool) -> None:
        if complete:
            self.handler.replace(self.objects)


class Expired(Exception):
    """410 Gone: the resourceVersion is too old; LIST again."""


class Absent(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status


class NothingUsable(Exception):
    """A stream (or LIST) that carried nothing usable: an error, backed off like one."""


class Relist(Exception):
    """Raised by a handler's ``event``: close the stream, run ``pause`` (the handler's wait, in
    the reflector's thread; it must end when the handler stops) and LIST again."""

    def __init__(self, pause: Callable[[], object] = lambda: None) -> None:
        super().__init__("relist")
        self.pause = pause


def describe(exc: BaseException) -> str:
    status = getattr(exc, "status", None)
    if status:
        return f"HTTP {status} {getattr(exc, 'reason', '') or ''}".strip()
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:300]


def retry_after_of(exc: BaseException) -> float | None:
    headers = getattr(exc, "headers", None) or {}
    try:
        return parse_retry_after(headers.get("Retry-After"))
    except Exception:  # noqa: BLE001 - a header of any shape from a failed request: no hint then
        return None


class Reflector:
    """One LIST + WATCH loop in a daemon thread, feeding ``handler``."""

    def __init__(self, client: Any, path: str, kind: str, handler: Handler | PagedHandler, *, name: str,
                 settings: ReflectorSettings = ReflectorSettings(),
                 label_selector: str | None = None, field_selector: str | None = None,
                 on_ignored: Callable[[str, str], None] | None = None, node: str = "",
                 gate: AbstractContextManager[Any] | None = None,
                 on_readable: Callable[[str | None], None] | None = None) -> None:
        self.client = client  # a LightCoreV1Api, or any client with its ``api_client`` (the generated API)
        self.path, self.kind, self.handler, self.name = path, kind, handler, name
        self.settings = settings
        self.label_selector, self.field_selector = label_selector, field_selector
        self.on_ignored = on_ignored
        self.node = node  # for the log lines' ``node`` field
        self.gate = gate if gate is not None else nullcontext()
        self.on_readable = on_readable
        self.backoff = Backoff(settings.backoff)
        self.absent_backoff = Backoff(settings.absent_backoff or BackoffSettings())
        self.resource_version = ""
        self.last_activity = 0.0  # monotonic time of the last usable answer from the server
        self.lists = self.watches = self.relists = 0
        self.ignored: Counter[str] = Counter()
        self._quick_ends = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._response: Any = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    # -- public -------------------------------------------------------------------------------
    def start(self) -> Reflector:
        self._thread.start()
        return self

    def alive(self) -> bool:
        return self._thread.is_alive()

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        with self._lock:
            response = self._response
        if response is not None:
            with contextlib.suppress(Exception):  # already closed: the thread ends either way
                response.shutdown()  # unblocks a read in progress (urllib3 >= 2.3)
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def list_once(self) -> None:
        """One LIST into the handler, in the caller's thread (a command that reads once);
        ``Absent`` for a 403/404."""
        self._list()

    # -- the loop -------------------------------------------------------------------------------
    def _run(self) -> None:
        if self.settings.initial_delay:
            self._wait(self.settings.initial_delay)
        need_list = True
        while not self._stop.is_set():
            try:
                if need_list:
                    self._list()
                    need_list = False
                self._watch()
            except Expired:
                log.info("%s: resourceVersion %s expired (410); listing again", self.name, self.resource_version,
                         extra={"node": self.node, "event": "watch-expired"})
                self.relists += 1
                need_list = True
            except Relist as exc:
                self.relists += 1
                exc.pause()
                need_list = True
            except Absent as exc:
                self.handler.absent(exc.status)
                self._wait(self.absent_backoff.next_delay())
                need_list = True
            except Exception as exc:  # noqa: BLE001 - any failure of a watch is retried after the backoff
                if self._stop.is_set():
                    return
                self._readable(describe(exc))
                self._error(exc)
                need_list = need_list or not self.resource_version

    def _readable(self, why: str | None, complete: bool = True) -> None:
        if self.on_readable is not None:
            self.on_readable(why if complete else "a LIST page over max_page_bytes was not read")

    def _wait(self, seconds: float) -> None:
        """Every pause of the loop (ends at once on ``stop``)."""
        self._stop.wait(seconds)

    def _error(self, exc: Exception) -> None:
        retry_after = retry_after_of(exc)
        delay = self.backoff.next_delay(retry_after)
        if retry_after is None:
            delay = min(delay, self.settings.max_delay)
        log.warning("%s failed (%s); retrying in %.1fs", self.name, describe(exc), delay,
                    extra={"node": self.node, "event": "watch-error"})
        self._wait(delay)

    def _request(self, **query: Any) -> Any:
        client = self.client if isinstance(self.client, LightCoreV1Api) else LightCoreV1Api(self.client.api_client)
        try:
            return client.list_collection(self.path, label_selector=self.label_selector,
                                               field_selector=self.field_selector, _preload_content=False, **query)
        except ApiException as exc:
            if exc.status == 410:
                raise Expired() from exc
            if exc.status in (403, 404) and self.settings.absent_backoff is not None:
                raise Absent(exc.status) from exc
            raise

    def _list(self) -> None:
        listing = self.handler.listing() if isinstance(self.handler, PagedHandler) else Collected(self.handler)
        metadata: Mapping[str, Any] = {}
        token, limit, complete = "", self.settings.page_size or None, True
        while True:
            self.lists += 1
            data = self._page(limit, token)
            if data is None:  # over max_page_bytes: the same page again, with fewer objects
                if limit is not None and limit > 1:
                    limit = max(1, limit // 8)
                    continue
                complete = False  # one object over the bound: the rest of the LIST is not read
                break
            with self.gate:
                body = self._list_body(data)
                listing.page([o for o in body.get("items") or [] if self._usable(o, listed=True)])
            metadata = body["metadata"] if isinstance(body.get("metadata"), Mapping) else {}
            token = str(metadata.get("continue") or "") if limit else ""
            if not token:
                break
        self.resource_version = str(metadata.get("resourceVersion") or "")
        self.absent_backoff.reset()
        self._touch()
        with self.gate:
            listing.end(complete)
        self._readable(None, complete)

    def _page(self, limit: int | None, token: str) -> bytes | None:
        """One LIST page's body, or None when it is over ``max_page_bytes`` (read no further)."""
        response = self._request(limit=limit, continue_=token or None, _request_timeout=self.settings.request_timeout)
        cap = self.settings.max_page_bytes
        chunks, size = [], 0
        try:
            while chunk := response.read(256 * 1024):
                size += len(chunk)
                if cap and size > cap:
                    response.close()  # the rest unread: the connection cannot go back to the pool
                    return None
                chunks.append(chunk)
        except BaseException:
            response.close()
            raise
        response.release_conn()
        return b"".join(chunks)

    def _list_body(self, data: bytes) -> Json:
        try:
            body = json.loads(data)
        except ValueError as exc:
            raise NothingUsable(f"LIST of {self.path}: not JSON") from exc
        if not isinstance(body, dict) or body.get("kind") not in (None, f"{self.kind}List") \
                or not isinstance(body.get("items", []), list):
            raise NothingUsable(f"LIST of {self.path}: not a {self.kind}List")
        return body

    def _watch(self) -> None:
        self.watches += 1
        settings = self.settings
        response = self._request(watch=True, allow_watch_bookmarks=True, resource_version=self.resource_version or None,
                                 timeout_seconds=max(1, int(settings.watch_timeout)),
                                 _request_timeout=(settings.request_timeout[0], settings.read_timeout))
        with self._lock:
            self._response = response
        if self._stop.is_set():
            response.shutdown()
        self._readable(None)
        started = time.monotonic()
        lines = usable = 0
        ended = False
        try:
            for line in stream_lines(response):
                if self._stop.is_set():
                    return
                lines += 1
                with self.gate:
                    usable += self._line(line)
            ended = True
        finally:
            if ended:
                response.release_conn()
            else:  # left mid-stream (stop, 410, an error, a handler's Relist): the server must see it end
                response.close()
            with self._lock:
                self._response = None
        self._after_stream(lines, usable, time.monotonic() - started)

    def _after_stream(self, lines: int, usable: int, lasted: float) -> None:
        if usable:
            self.backoff.success()
            self._quick_ends = 0
        elif lines:
            raise NothingUsable(f"watch of {self.path}: {lines} line(s), none a usable {self.kind} event")
        elif lasted < QUICK_END:
            self._quick_ends += 1  # client-go's "very short watch": paced, not a hot loop
            if self._quick_ends > 1:
                self._wait(min(self.settings.quick_end_max_wait, 0.05 * 2 ** (self._quick_ends - 2)))
        else:
            self.backoff.success()  # a quiet stream the server ended at its timeout: healthy
            self._quick_ends = 0

    def _line(self, line: bytes) -> int:
        """Handle one event line; 1 if it was a usable event, else 0 (ignored and counted)."""
        try:
            event = json.loads(line)
        except ValueError:
            return self._ignore("undecodable", line[:100])
        if not isinstance(event, dict) or not isinstance(event.get("object"), dict):
            return self._ignore("undecodable", line[:100])
        kind, obj = event.get("type"), event["object"]
        if kind == "ERROR":
            code = obj.get("code")
            if code == 410:
                raise Expired()
            raise RuntimeError(f"watch error {code}: {str(obj.get('message', ''))[:200]}")
        if kind == "BOOKMARK":
            if obj.get("kind") not in (None, self.kind):
                return self._ignore("wrong-kind", obj.get("kind"))
            self._advance(obj)
            return 1
        if kind not in ("ADDED", "MODIFIED", "DELETED"):
            return self._ignore("undecodable", line[:100])
        if not self._usable(obj, listed=False):
            return 0
        self._advance(obj)
        self.handler.event(str(kind), obj)
        return 1

    def _usable(self, obj: Any, *, listed: bool) -> bool:
        """An object of our kind with a uid (a LIST's items carry no kind: theirs is the List's)."""
        if not isinstance(obj, dict) or not isinstance(obj.get("metadata"), dict):
            return self._ignore("undecodable", repr(obj)[:100]) > 0
        found = obj.get("kind")
        if (found is None and not listed) or found not in (None, self.kind):
            return self._ignore("wrong-kind", found) > 0
        if not obj["metadata"].get("uid"):
            return self._ignore("no-uid", obj["metadata"].get("name")) > 0
        if listed:
            obj.setdefault("kind", self.kind)
        return True

    def _advance(self, obj: Mapping[str, Any]) -> None:
        rv = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        if rv:
            self.resource_version = rv
        self._touch()

    def _touch(self) -> None:
        with self._lock:
            self.last_activity = time.monotonic()

    def _ignore(self, reason: str, what: object) -> int:
        """Count an ignored line or object; 0 (the number of usable events it was)."""
        self.ignored[reason] += 1
        if self.ignored[reason] == 1:
            log.warning("%s: ignored a %s event (%r); counted from now on", self.name, reason, what,
                        extra={"node": self.node, "event": "watch-ignored"})
        if self.on_ignored is not None:
            self.on_ignored(self.name, reason)
        return 0


def stream_lines(response: Any) -> Iterator[bytes]:
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
