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
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

log = logging.getLogger(__name__)

Check = Callable[[], tuple[bool, str]]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


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

        self._httpd = _Server((host, port), Handler)
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
