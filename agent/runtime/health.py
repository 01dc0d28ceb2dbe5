"""HTTP endpoints for Prometheus and the kubelet probes, on ``--metrics-port``.

``/metrics``  the agent's registry (text exposition format)
``/healthz``  200 while the worker is alive and not stuck in one pass for longer than its
              limit and every part of the agent (``agent.runtime.parts``: each watch, the
              hotplug monitor, the device plugin) is alive; 500 naming what is not
              (liveness: kubelet restarts a wedged agent)
``/readyz``   200 once the first reconcile of this node succeeded, else 503 (readiness)

Anyone who can reach the port may connect, so the server is bounded: whatever clients do, it
holds at most ``max_connections`` descriptors (an eighth of the process's descriptor limit, at
most 64), so discovery always has the rest; a request head must arrive whole within
``REQUEST_TIMEOUT`` seconds and at most ``MAX_REQUEST_HEAD`` bytes, and a response must be taken
within ``WRITE_TIMEOUT``. At the cap, a new connection closes the oldest one still sending its
request, so idle or half-sent clients cannot keep a kubelet probe out; one that finds every
slot answering is closed at once. One thread serves every connection over non-blocking sockets
(the standard library's ``selectors``, which the process loads anyway: no thread per client, and
no ``asyncio``, whose import alone holds 1.5 MiB); each answer is ``Connection: close``.
Port 0 binds an ephemeral port (tests); ``port`` reports the one bound.
"""

from __future__ import annotations

import contextlib
import logging
import resource
import selectors
import socket
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

Check = Callable[[], tuple[bool, str]]

REQUEST_TIMEOUT = 5.0
WRITE_TIMEOUT = 10.0
MAX_REQUEST_HEAD = 8192
BACKLOG = 16  # also how many connections one wake-up accepts: a flood's overshoot of the cap
_REASONS = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 500: "Internal Server Error",
            503: "Service Unavailable"}


def connection_cap() -> int:
    """An eighth of the soft descriptor limit, between 4 and 64: the rest stays for discovery."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    limit = soft if soft != resource.RLIM_INFINITY else 65536
    return max(4, min(64, limit // 8))


def bind_address(host: str) -> tuple[int, str]:
    """(address family, host) for ``--metrics-address``: an IPv6 literal binds IPv6 (``::`` dual
    stack); empty means every address, dual stack where the kernel has IPv6, else IPv4."""
    if ":" in host:
        return socket.AF_INET6, host.strip("[]")
    if host:
        return socket.AF_INET, host
    return (socket.AF_INET6, "::") if socket.has_ipv6 and _ipv6_usable() else (socket.AF_INET, "")


def _ipv6_usable() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
            probe.bind(("::", 0))
        return True
    except OSError:
        return False


def _listen(host: str, port: int) -> socket.socket:
    family, address = bind_address(host)
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:  # dual stack: "::" also takes IPv4 where the kernel allows it
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind((address, port))
        sock.listen(BACKLOG)
    except OSError:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


class _Client:
    """One connection: the request head as it arrives, then the answer left to send."""

    __slots__ = ("deadline", "head", "out", "peer", "sock")

    def __init__(self, sock: socket.socket, peer: object) -> None:
        self.sock, self.peer = sock, peer
        self.head = b""
        self.out: memoryview | None = None  # None while the request is read
        self.deadline = time.monotonic() + REQUEST_TIMEOUT


class HealthServer:
    def __init__(self, port: int, render_metrics: Callable[[], bytes], healthy: Check, ready: Check,
                 host: str = "", max_connections: int | None = None) -> None:
        self.render_metrics = render_metrics
        self.healthy = healthy
        self.ready = ready
        self.max_connections = max_connections or connection_cap()
        self._sock = _listen(host, port)
        self._port: int = self._sock.getsockname()[1]
        self._selector = selectors.DefaultSelector()
        self._wake, self._waker = socket.socketpair()  # a byte on it ends the loop
        self._open: dict[socket.socket, _Client] = {}  # oldest first
        self._thread = threading.Thread(target=self._serve, name="metrics-http", daemon=True)

    @property
    def port(self) -> int:
        return self._port

    def start(self) -> HealthServer:
        self._thread.start()
        return self

    def alive(self) -> bool:
        return self._thread.is_alive()

    def open_connections(self) -> int:
        return len(self._open)

    def stop(self, timeout: float = 2.0) -> None:
        if self._thread.is_alive():
            self._waker.send(b"x")
            self._thread.join(timeout)
        for sock in (self._sock, self._wake, self._waker):
            sock.close()
        self._selector.close()

    # -- the loop's thread ----------------------------------------------------------------
    def _serve(self) -> None:
        self._selector.register(self._sock, selectors.EVENT_READ)
        self._selector.register(self._wake, selectors.EVENT_READ)
        while True:
            deadline = min((c.deadline for c in self._open.values()), default=None)
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            for key, _events in self._selector.select(timeout):
                if key.fileobj is self._wake:
                    for client in list(self._open.values()):
                        self._close(client)
                    return
                if key.fileobj is self._sock:
                    self._accept()
                else:
                    self._step(key.data)
            now = time.monotonic()
            for client in [c for c in self._open.values() if c.deadline <= now]:
                log.debug("http: client %s: timed out", client.peer)
                self._close(client)

    def _accept(self) -> None:
        for _ in range(BACKLOG):
            try:
                sock, peer = self._sock.accept()
            except (BlockingIOError, ConnectionAbortedError):
                return
            except OSError as err:  # out of descriptors: the socket stays readable, so wait, never spin
                log.debug("http: accept: %s", err)
                time.sleep(0.1)
                return
            sock.setblocking(False)
            if self._admit():
                self._open[sock] = _Client(sock, peer)
                self._selector.register(sock, selectors.EVENT_READ, self._open[sock])
            else:
                sock.close()

    def _admit(self) -> bool:
        """Make room for a new connection; False when every slot is busy answering."""
        if len(self._open) >= self.max_connections:
            oldest = next((c for c in self._open.values() if c.out is None), None)
            if oldest is None:
                return False
            self._close(oldest)
        return True

    def _step(self, client: _Client) -> None:
        """Read what the client sent, or send it what is left of the answer."""
        if client.sock not in self._open:  # closed earlier in this wake-up (evicted)
            return
        try:
            if client.out is None:
                chunk = client.sock.recv(MAX_REQUEST_HEAD)
                head, end, _ = (client.head + chunk).partition(b"\r\n\r\n")
                if not chunk or len(head) + len(end) > MAX_REQUEST_HEAD:
                    raise ConnectionError("request head incomplete or too long")
                client.head = head
                if end:
                    client.out = memoryview(self._answer(head))
                    client.deadline = time.monotonic() + WRITE_TIMEOUT
                    self._selector.modify(client.sock, selectors.EVENT_WRITE, client)
                return
            client.out = client.out[client.sock.send(client.out):]
            if client.out:
                return
        except BlockingIOError:
            return
        except OSError as err:
            log.debug("http: client %s: %s", client.peer, type(err).__name__)
        except Exception:  # a check or the metrics render failed: this answer is lost, not the server
            log.exception("http: answering %s failed", client.peer)
        self._close(client)

    def _close(self, client: _Client) -> None:
        del self._open[client.sock]
        self._selector.unregister(client.sock)
        client.sock.close()

    def _answer(self, head: bytes) -> bytes:
        method, _, rest = head.split(b"\r\n", 1)[0].decode("latin-1").partition(" ")
        path = rest.split(" ", 1)[0].split("?", 1)[0]
        content_type = "text/plain; charset=utf-8"
        if method != "GET":
            code, body = 405, b"only GET\n"
        elif path == "/metrics":
            code, body = 200, self.render_metrics()
            content_type = "text/plain; version=0.0.4; charset=utf-8"
        elif path in ("/healthz", "/livez"):
            ok, why = self.healthy()
            code, body = (200 if ok else 500), (why or "ok").encode() + b"\n"
        elif path == "/readyz":
            ok, why = self.ready()
            code, body = (200 if ok else 503), (why or "ok").encode() + b"\n"
        else:
            code, body = 404, b"not found\n"
        header = (f"HTTP/1.0 {code} {_REASONS[code]}\r\nContent-Type: {content_type}\r\n"
                  f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n")
        return header.encode() + body
