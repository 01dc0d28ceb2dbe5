"""HTTP endpoints for Prometheus and the kubelet probes, on ``--metrics-port``.

``/metrics``  the agent's registry (text exposition format)
``/healthz``  200 while the worker is alive and not stuck in one pass for longer than its
              limit; 500 otherwise (liveness: kubelet restarts a wedged agent)
``/readyz``   200 once the first reconcile of this node succeeded, else 503 (readiness)

Anyone who can reach the port may connect, so the server is bounded: whatever clients do, it
holds at most ``max_connections`` descriptors (an eighth of the process's descriptor limit, at
most 64), so discovery always has the rest; a request head must arrive whole within
``REQUEST_TIMEOUT`` seconds and at most ``MAX_REQUEST_HEAD`` bytes, and a response must be taken
within ``WRITE_TIMEOUT``. At the cap, a new connection closes the oldest one still sending its
request, so idle or half-sent clients cannot keep a kubelet probe out; one that finds every
slot answering is closed at once. One asyncio loop in one thread serves every connection (the
standard library's streams: no thread per client); each answer is ``Connection: close``.
Port 0 binds an ephemeral port (tests); ``port`` reports the one bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import resource
import socket
import threading
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


class HealthServer:
    def __init__(self, port: int, render_metrics: Callable[[], bytes], healthy: Check, ready: Check,
                 host: str = "", max_connections: int | None = None) -> None:
        self.render_metrics = render_metrics
        self.healthy = healthy
        self.ready = ready
        self.max_connections = max_connections or connection_cap()
        self._sock = _listen(host, port)
        self._port: int = self._sock.getsockname()[1]
        self._loop = asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None
        self._open: dict[asyncio.StreamWriter, bool] = {}  # oldest first; True while its request is read
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
            with contextlib.suppress(RuntimeError):  # the loop ended meanwhile
                self._loop.call_soon_threadsafe(self._request_stop)
            self._thread.join(timeout)
        self._sock.close()

    def _request_stop(self) -> None:
        if self._stop is not None:
            self._stop.set()

    # -- the loop's thread ----------------------------------------------------------------
    def _serve(self) -> None:
        try:
            self._loop.run_until_complete(self._main())
        finally:
            self._loop.close()

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        server = await asyncio.start_server(self._client, sock=self._sock, limit=MAX_REQUEST_HEAD, backlog=BACKLOG)
        async with server:
            await self._stop.wait()
            for writer in list(self._open):
                writer.transport.abort()

    def _admit(self, writer: asyncio.StreamWriter) -> bool:
        """Make room for a new connection; False when every slot is busy answering."""
        if len(self._open) >= self.max_connections:
            oldest = next((w for w, reading in self._open.items() if reading), None)
            if oldest is None:
                return False
            oldest.transport.abort()
            del self._open[oldest]
        self._open[writer] = True
        return True

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self._admit(writer):
            writer.transport.abort()
            return
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), REQUEST_TIMEOUT)
            if writer in self._open:
                self._open[writer] = False
            writer.write(self._answer(head))
            await asyncio.wait_for(writer.drain(), WRITE_TIMEOUT)
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError) as err:
            log.debug("http: client %s: %s", writer.get_extra_info("peername"), type(err).__name__)
        finally:
            self._open.pop(writer, None)
            writer.close()

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
