"""The mutating admission webhook for clusters without MutatingAdmissionPolicy (1.30-1.33).

``POST /mutate`` takes an ``admission.k8s.io/v1`` AdmissionReview and answers with the same
static mutation the policy makes (``admission.gate_patch``), or none; it never refuses a pod
(``allowed: true`` always) and never calls out, so its latency is that of parsing one JSON
body. The API server calls it over TLS (``--tls-cert-file``/``--tls-key-file``, the Service's
certificate) with ``failurePolicy: Ignore`` and ``timeoutSeconds: 2``: if this server is
down or slow, pods are created ungated and simply scheduled as before.

A body that is not an AdmissionReview gets 400; anything else we do not handle (another
kind, another operation) is allowed unchanged.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from agent.placement import admission

log = logging.getLogger(__name__)
MAX_BODY = 3 * 1024 * 1024


def review_response(review: Any, own_namespace: str) -> dict[str, Any]:
    """The AdmissionReview answer for one request (TypeError: not an AdmissionReview)."""
    if not isinstance(review, dict) or not isinstance(review.get("request"), dict):
        raise TypeError("not an admission.k8s.io/v1 AdmissionReview")
    request = review["request"]
    response: dict[str, Any] = {"uid": request.get("uid", ""), "allowed": True}
    pod = request.get("object")
    kind = (request.get("kind") or {}).get("kind")
    if request.get("operation") == "CREATE" and kind == "Pod" and isinstance(pod, dict):
        namespace = str(request.get("namespace") or (pod.get("metadata") or {}).get("namespace") or "")
        if admission.skip_reason(pod, namespace, own_namespace) is None:
            patch = json.dumps(admission.gate_patch(pod), separators=(",", ":")).encode()
            response["patchType"] = "JSONPatch"
            response["patch"] = base64.b64encode(patch).decode()
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}


class WebhookServer:
    """Listens at once; serves TLS while the certificate files exist, and picks up a renewed
    certificate (cert-manager rewrites the mounted Secret) within ``reload_interval``."""

    def __init__(self, port: int, cert_file: str, key_file: str, own_namespace: str, host: str = "",
                 reload_interval: float = 30.0) -> None:
        self.cert_file, self.key_file, self.own_namespace = cert_file, key_file, own_namespace
        self.reload_interval = reload_interval
        self.context: ssl.SSLContext | None = None
        self._loaded: tuple[float, float] | None = None
        self._stop = threading.Event()
        self.requests = 0
        self.reload()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = 10
            disable_nagle_algorithm = True  # headers and body are two writes: no 40 ms delayed-ACK stall

            def log_message(self, fmt: str, *args: Any) -> None:
                log.debug("webhook: %s", fmt % args)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if self.path.split("?", 1)[0] != "/mutate" or not 0 < length <= MAX_BODY:
                    self._send(404 if length else 400, {"error": "POST an AdmissionReview to /mutate"})
                    return
                try:
                    answer = review_response(json.loads(self.rfile.read(length)), outer.own_namespace)
                except (ValueError, TypeError) as exc:  # not JSON, or not an AdmissionReview
                    self._send(400, {"error": str(exc)})
                    return
                outer.requests += 1
                self._send(200, answer)

            def _send(self, code: int, body: dict[str, Any]) -> None:
                data = json.dumps(body, separators=(",", ":")).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def get_request(self) -> Any:
                sock, addr = super().get_request()
                context = outer.context
                if context is None:  # no certificate yet: the API server's call fails, failurePolicy Ignore
                    sock.close()
                    raise OSError("webhook certificate not available yet")
                # the handshake runs in the handler's thread, on its first read: a slow client
                # never holds up the accept loop
                return context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False), addr

            def handle_error(self, request: Any, client_address: Any) -> None:
                log.debug("webhook: connection from %s failed", client_address, exc_info=True)  # noqa: LOG014 - called from the except

        self._server = Server((host, port), Handler)
        self._threads = [threading.Thread(target=self._server.serve_forever, name="placement-webhook", daemon=True),
                         threading.Thread(target=self._watch_certificate, name="placement-webhook-tls", daemon=True)]

    def reload(self) -> bool:
        """Load the certificate when its files are new or changed; True when serving TLS."""
        try:
            stamp = (os.stat(self.cert_file).st_mtime, os.stat(self.key_file).st_mtime)
        except OSError:
            if self._loaded is None:
                log.info("webhook certificate %s not there (yet): not serving the webhook", self.cert_file)
                self._loaded = (-1.0, -1.0)
            return self.context is not None
        if stamp == self._loaded:
            return True
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            context.load_cert_chain(self.cert_file, self.key_file)
        except (OSError, ssl.SSLError) as exc:
            log.warning("webhook certificate %s unusable: %s", self.cert_file, exc)
            return self.context is not None
        self.context, self._loaded = context, stamp
        log.info("webhook serving TLS with %s", self.cert_file, extra={"event": "webhook-certificate"})
        return True

    def _watch_certificate(self) -> None:
        while not self._stop.wait(self.reload_interval):
            self.reload()

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> WebhookServer:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._server.shutdown()
        self._server.server_close()
