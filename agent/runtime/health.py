"""HTTP endpoints for Prometheus and the kubelet probes, on ``--metrics-port``.

``/metrics``  the agent's registry (text exposition format)
``/healthz``  200 while the worker is alive and not stuck in one pass for longer than its
              limit; 500 otherwise (liveness: kubelet restarts a wedged agent)
``/readyz``   200 once the first reconcile of this node succeeded, else 503 (readiness)

A ``ThreadingHTTPServer`` with daemon threads, served from a select on the listening socket
and a stop pipe (no periodic wake-ups); ``stop`` ends it and closes the socket.
Port 0 binds an ephemeral port (tests); ``port`` reports the one bound.
"""

from __future__ import annotations

import logging
import os
import select
import threading
import socket
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

log = logging.getLogger(__name__)

Check = Callable[[], tuple[bool, str]]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def server_bind(self) -> None:
        if self.address_family == socket.AF_INET6:
            # dual stack: "::" also takes IPv4 (v4-mapped) where the kernel allows it
            try:
                self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            except OSError:
                pass
        super().server_bind()

    def handle_error(self, request, client_address) -> None:  # noqa: ANN001 - socketserver's hook
        """A probe that hangs up mid-request is routine: one debug line, never a traceback on
        stderr (which would break the JSON log stream)."""
        kind, error, _ = sys.exc_info()
        log.debug("http: client %s: %s: %s", client_address, kind.__name__ if kind else "error", error)


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


class HealthServer:
    def __init__(self, port: int, render_metrics: Callable[[], bytes], healthy: Check, ready: Check,
                 host: str = "") -> None:
        self.render_metrics = render_metrics
        self.healthy = healthy
        self.ready = ready
        outer = self

        class Handler(BaseHTTPRequestHandler):
            timeout = 10  # a slow or silent client cannot hold a thread forever

            def log_message(self, fmt, *args):  # noqa: ANN001 - probes every few seconds: keep logs quiet
                log.debug("http: " + fmt, *args)

            def do_GET(self) -> None:  # noqa: N802
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    self._send(200, outer.render_metrics(), "text/plain; version=0.0.4; charset=utf-8")
                elif path in ("/healthz", "/livez"):
                    ok, why = outer.healthy()
                    self._send(200 if ok else 500, (why or "ok").encode() + b"\n")
                elif path == "/readyz":
                    ok, why = outer.ready()
                    self._send(200 if ok else 503, (why or "ok").encode() + b"\n")
                else:
                    self._send(404, b"not found\n")

            def _send(self, code: int, body: bytes, content_type: str = "text/plain; charset=utf-8") -> None:
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        family, address = bind_address(host)
        server_class = type("_BoundServer", (_Server,), {"address_family": family})
        self._httpd = server_class((address, port), Handler)
        self._stop_r, self._stop_w = os.pipe()
        self._thread = threading.Thread(target=self._serve, name="metrics-http", daemon=True)

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    def start(self) -> "HealthServer":
        self._thread.start()
        return self

    def alive(self) -> bool:
        return self._thread.is_alive()

    def _serve(self) -> None:
        """``serve_forever`` wakes every poll interval to look for shutdown; this blocks until
        a connection or ``stop`` arrives."""
        listener = self._httpd.fileno()
        while True:
            try:
                readable, _, _ = select.select([listener, self._stop_r], [], [])
            except (OSError, ValueError):
                return
            if self._stop_r in readable:
                return
            self._httpd._handle_request_noblock()  # accept + hand to a daemon thread

    def stop(self, timeout: float = 2.0) -> None:
        try:
            os.write(self._stop_w, b"x")
        except OSError:
            pass
        if self._thread.is_alive():
            self._thread.join(timeout)
        self._httpd.server_close()
        for fd in (self._stop_r, self._stop_w):
            try:
                os.close(fd)
            except OSError:
                pass
