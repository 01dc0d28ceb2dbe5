"""Per-test fault injection for the fake API server, thread-safe.

Each fault is a rule with a remaining ``count`` and an optional scope (HTTP ``verb`` and a
``path`` substring); every incoming request takes the first matching rule and consumes one
of its count. Kinds:

* ``fail``    answer ``status`` with a Status body (and ``Retry-After`` when given);
* ``refuse``  read the request, then close the socket without answering (``reset=True``
              sends a TCP RST instead of a FIN);
* ``slow``    wait ``seconds`` before handling (``after=True``: handle, then wait before
              answering, so the change is made but the client may time out);
* ``answer``  answer ``status`` with ``body`` instead of handling (what a proxy or a broken
              server in front of the API could send: a 200 that is not the object asked for);
* ``stream``  answer 200 with ``body`` (chunked, as a watch is sent: junk lines, an HTML page,
              events of another kind, nothing at all) and end the stream cleanly.

``watch`` scopes a rule to watch requests (True) or to everything else (False).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any


@dataclass
class Fault:
    kind: str
    count: int
    status: int = 0
    retry_after: float | None = None
    seconds: float = 0.0
    after: bool = False
    reset: bool = False
    verb: str | None = None
    path: str | None = None
    message: str | None = None
    exact: bool = False  # ``path`` must equal the request path (``/nodes/x`` but not ``/nodes/x/status``)
    watch: bool | None = None
    body: Any = None  # ``answer``: the JSON sent; ``stream``: the bytes sent
    content_type: str = "application/json"

    def matches(self, method: str, path: str, watch: bool = False) -> bool:
        if self.path is not None and (path != self.path if self.exact else self.path not in path):
            return False
        if self.watch is not None and self.watch != watch:
            return False
        return self.verb is None or self.verb.upper() == method.upper()


class Faults:
    """The switchboard a test flips; consumed by the request handler."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rules: list[Fault] = []
        self.injected: list[tuple[str, str, str]] = []  # (kind, method, path) for each fault served

    def _add(self, fault: Fault) -> Fault:
        if fault.count < 1:
            raise ValueError("count must be at least 1")
        with self._lock:
            self._rules.append(fault)
        return fault

    def fail(self, status: int, count: int = 1, retry_after: float | None = None, *, verb: str | None = None,
             path: str | None = None, message: str | None = None, exact: bool = False,
             watch: bool | None = None) -> Fault:
        """The next ``count`` matching requests get HTTP ``status`` (e.g. 500, 503, 403)."""
        return self._add(Fault("fail", count, status=status, retry_after=retry_after, verb=verb, path=path,
                               message=message, exact=exact, watch=watch))

    def throttle(self, retry_after: float = 1, count: int = 1, *, verb: str | None = None,
                 path: str | None = None, watch: bool | None = None) -> Fault:
        """429 Too Many Requests with ``Retry-After`` (as API Priority and Fairness sends)."""
        return self.fail(429, count, retry_after, verb=verb, path=path, watch=watch)

    def refuse_connections(self, count: int = 1, *, reset: bool = False, verb: str | None = None,
                           path: str | None = None) -> Fault:
        """Close the connection without a response for the next ``count`` requests."""
        return self._add(Fault("refuse", count, reset=reset, verb=verb, path=path))

    def slow(self, seconds: float, count: int = 1, *, after: bool = False, verb: str | None = None,
             path: str | None = None) -> Fault:
        """Delay the next ``count`` responses by ``seconds``."""
        return self._add(Fault("slow", count, seconds=seconds, after=after, verb=verb, path=path))

    def answer(self, body: Any, status: int = 200, count: int = 1, *, verb: str | None = None,
               path: str | None = None, exact: bool = False) -> Fault:
        """The next ``count`` matching requests are answered ``status`` with the JSON ``body``,
        unhandled (nothing the request asked for is done)."""
        return self._add(Fault("answer", count, status=status, verb=verb, path=path, exact=exact, body=body))

    def stream(self, body: bytes, count: int = 1, *, path: str | None = None,
               content_type: str = "application/json") -> Fault:
        """The next ``count`` watch requests (on ``path``) get ``body`` as a 200 stream, then its end."""
        return self._add(Fault("stream", count, verb="GET", path=path, watch=True, body=body,
                               content_type=content_type))

    def take(self, method: str, path: str, watch: bool = False) -> Fault | None:
        """The fault for this request (consuming one of its count), or None."""
        with self._lock:
            for rule in self._rules:
                if rule.count > 0 and rule.matches(method, path, watch):
                    rule.count -= 1
                    if rule.count == 0:
                        self._rules.remove(rule)
                    self.injected.append((rule.kind, method, path))
                    return rule
        return None

    def pending(self) -> int:
        """How many faults are still to be served."""
        with self._lock:
            return sum(rule.count for rule in self._rules)

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()
