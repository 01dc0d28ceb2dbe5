"""``FakeApiServer``: a Kubernetes API server in-process, for the official client and kubectl.

Real HTTP on 127.0.0.1 (random port), plain ``http``, optional bearer-token check. Serves
discovery, ``nodes`` (GET/LIST/WATCH/POST/PUT/PATCH/DELETE), ``nodes/status`` (GET/PUT/PATCH),
``pods`` (LIST/GET/DELETE, eviction), and ``events`` (core v1 and events.k8s.io/v1).

Behaviour a node agent depends on, as the real server does it (each behaviour's upstream source
is in tests/support/README.md): one cluster-wide monotonically increasing
resourceVersion; ``metadata.resourceVersion`` in a PATCH/PUT body is a precondition (409);
a no-op write keeps the version and emits no event; the main resource ignores ``status``
and ``/status`` ignores ``spec``; validation failures are 422 Status bodies with field
causes; quantities are stored canonical; empty maps/lists are omitted (Go ``omitempty``);
after a capacity change, capacity is copied into allocatable as kubelet would.

Tests drive it with ``add_node``/``edit_node``/``delete_node``/``add_pod``, read it with
``node``/``events``/``requests``/``writes``, and break it with ``faults``, ``drop_watches``,
``expire_resource_versions`` and ``second_writer``.
"""

from __future__ import annotations

import copy
import json
import logging
import random
import socket
import string
import struct
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from tests.support import discovery, patching, quantity, schema, selectors, validation
from tests.support.custom_resources import NOT_MINE, CustomResources
from tests.support.faults import Fault, Faults
from tests.support.store import AlreadyExists, Conflict, NotFound, Store, now_stamp
from tests.support.watch import Watcher, WatchRegistry, gone, stream

log = logging.getLogger(__name__)

REASONS = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 405: "MethodNotAllowed",
           409: "Conflict", 410: "Expired", 413: "RequestEntityTooLarge", 415: "UnsupportedMediaType",
           422: "Invalid", 429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable", 504: "Timeout"}
DEFAULT_MESSAGES = {403: 'nodes is forbidden: User "system:serviceaccount:test:agent" cannot do this',
                    429: "Cannot evict pod as it would violate the pod's disruption budget.",
                    500: "Internal error occurred: injected fault", 503: "the server is currently unable to handle the request",
                    504: "the server was unable to return a response in the time allotted"}
KUBELET_ANNOTATIONS = {"node.alpha.kubernetes.io/ttl": "0",
                       "volumes.kubernetes.io/controller-managed-attach-detach": "true"}
MAX_BODY = 3 * 1024 * 1024


def status_body(code: int, message: str, *, reason: str | None = None, name: str | None = None,
                kind: str | None = None, causes: Iterable[dict[str, str]] = (), retry_after: float | None = None
                ) -> dict[str, Any]:
    """A ``Status`` failure body as the real server sends it."""
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                            "message": message, "reason": reason or REASONS.get(code, "Unknown"), "code": code}
    details: dict[str, Any] = {}
    if name is not None:
        details["name"] = name
    if kind is not None:
        details["kind"] = kind
    causes = list(causes)
    if causes:
        details["causes"] = causes
    if retry_after is not None:
        details["retryAfterSeconds"] = int(retry_after)
    if details:
        body["details"] = details
    return body


Route = Callable[["FakeApiServer", str, list[str], dict[str, str], Any, str], "tuple[int, Any] | None"]



def _namespaced(rest: list[str]) -> tuple[str | None, list[str]]:
    """``namespaces/<ns>/...`` -> (ns, the rest); any other path -> (None, itself)."""
    if len(rest) >= 2 and rest[0] == "namespaces":
        return rest[1], rest[2:]
    return None, rest


class ApiError(Exception):
    """Raised inside a handler: becomes a Status response."""

    def __init__(self, code: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        super().__init__(body.get("message"))
        self.code, self.body, self.headers = code, body, headers or {}


def invalid_error(kind: str, name: str, causes: list[validation.Cause]) -> ApiError:
    """``errors.NewInvalid``: every cause in ``details.causes`` (repeats included), the message
    from ``ErrorList.ToAggregate()``, which drops repeated texts and brackets two or more."""
    unique = list(dict.fromkeys(str(c) for c in causes))
    text = unique[0] if len(unique) == 1 else "[" + ", ".join(unique) + "]"
    return ApiError(422, status_body(422, f'{kind} "{name}" is invalid: {text}', name=name, kind=kind, causes=[c.as_dict() for c in causes]))


def decode_error(problem: str, node: Any, *, put_body: Any = None) -> ApiError:
    """A body that does not decode into the typed Node. POST/PUT: ``transformDecodeError`` in
    handlers/rest.go, a 400. PATCH: the patched JSON fails ``runtime.DecodeInto`` in
    handlers/patch.go, which answers ``errors.NewInvalid(schema.GroupKind{}, "",
    {field.Invalid(field.NewPath("patch"), string(patchedJS), err.Error())})``, a 422 whose
    kind and name are empty (strategic merge patch: the value is Go's ``%+v`` of the patch
    map there; here the JSON, not checked)."""
    if put_body is not None:
        if isinstance(put_body, dict) and put_body.get("kind"):
            version = str(put_body.get("apiVersion") or "").rpartition("/")[2]
            message = f'{put_body["kind"]} in version "{version}" cannot be handled as a Node: {problem}'
        else:
            text = json.dumps(put_body, separators=(",", ":"))
            summary = text if len(text) <= 30 or not text.startswith("{") else text[:30] + " ..."
            message = f"the object provided is unrecognized (must be of type Node): {problem} ({summary})"
        return ApiError(400, status_body(400, message))
    cause = validation.invalid("patch", json.dumps(node, separators=(",", ":")), problem)
    body = status_body(422, f' "" is invalid: {cause}', causes=[cause.as_dict()])
    return ApiError(422, body)


@dataclass
class RequestRecord:
    """One request the server received (recorded when answered; refused ones have status 0)."""

    method: str
    path: str
    query: dict[str, str]
    body: Any
    content_type: str
    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    fault: str | None = None
    at: float = field(default_factory=time.monotonic)

    @property
    def node(self) -> str | None:
        parts = self.path.strip("/").split("/")
        if parts[:3] == ["api", "v1", "nodes"] and len(parts) >= 4:
            return parts[3]
        return None

    @property
    def subresource(self) -> str | None:
        parts = self.path.strip("/").split("/")
        return parts[4] if parts[:3] == ["api", "v1", "nodes"] and len(parts) >= 5 else None


class SecondWriter:
    """Another controller editing its own label and taint on a node every ``interval`` seconds
    (through the store, so the agent's reads/writes race with it and meet 409s)."""

    LABEL = "second-writer.example.com/counter"
    TAINT = "second-writer.example.com/flap"

    def __init__(self, server: FakeApiServer, node: str, interval: float = 0.05) -> None:
        self.server, self.node, self.interval = server, node, interval
        self.edits = 0
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"second-writer-{node}", daemon=True)

    def _edit(self, node: dict[str, Any]) -> None:
        n = self.edits + 1
        node["metadata"].setdefault("labels", {})[self.LABEL] = str(n)
        taints = [t for t in node["spec"].get("taints", []) if t.get("key") != self.TAINT]
        node["spec"]["taints"] = taints + [{"key": self.TAINT, "value": str(n), "effect": "NoSchedule"}]

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.server.edit_node(self.node, self._edit)
                self.edits += 1
            except NotFound:
                pass  # the node is being recreated: keep trying
            except Exception as exc:  # noqa: BLE001 - surfaced through .errors, never lost
                self.errors.append(exc)
                return
            self._stop.wait(self.interval)

    @property
    def last_value(self) -> str:
        return str(self.edits)

    def start(self) -> SecondWriter:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)

    def __enter__(self) -> SecondWriter:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()


class _HttpServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, fake: FakeApiServer) -> None:
        self.fake = fake
        self.connections: set[socket.socket] = set()
        self.threads: list[threading.Thread] = []
        self.conn_lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Handler)

    # a TCP server's requests are its connections' sockets (socketserver also types UDP's)
    def process_request(self, request: socket.socket,  # type: ignore[override]
                        client_address: tuple[str, int]) -> None:
        with self.conn_lock:
            self.connections.add(request)
            self.threads = [t for t in self.threads if t.is_alive()]
            thread = threading.Thread(target=self.process_request_thread, args=(request, client_address), daemon=True)
            self.threads.append(thread)
        thread.start()

    def shutdown_request(self, request: socket.socket) -> None:  # type: ignore[override]
        with self.conn_lock:
            self.connections.discard(request)
        super().shutdown_request(request)

    def handle_error(self, request: socket.socket | tuple[bytes, socket.socket],
                     client_address: tuple[str, int]) -> None:  # keep test output quiet
        # socketserver calls this inside its except block, so exc_info is the error's
        log.debug("connection from %s ended with an error", client_address, exc_info=True)  # noqa: LOG014


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fake-kube-apiserver/1.0"
    disable_nagle_algorithm = True  # headers and body go out as separate writes
    timeout = 60
    server: _HttpServer

    def log_message(self, fmt: str, *args: Any) -> None:  # quiet: the request log is the record
        log.debug("%s %s", self.address_string(), fmt % args)

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def do_PUT(self) -> None:
        self._serve()

    def do_PATCH(self) -> None:
        self._serve()

    def do_DELETE(self) -> None:
        self._serve()

    # -- plumbing -------------------------------------------------------------------------
    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            self.rfile.read(length)
            raise ApiError(413, status_body(413, "Request entity too large: limit is 3145728"))
        return self.rfile.read(length) if length else b""

    def _send_json(self, code: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body, separators=(",", ":")).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-cache, private")
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _send_text(self, code: int, text: str, headers: dict[str, str]) -> None:
        data = text.encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _send_failure(self, fault: Fault, path: str) -> None:
        """The answer of an injected failure: a Status, or what the apiserver's filters send;
        an ``answer`` fault's own body."""
        if fault.kind == "answer":
            self._send_json(fault.status, fault.body)
            return
        code = fault.status
        headers = {"Retry-After": str(int(fault.retry_after))} if fault.retry_after is not None else {}
        if code == 429 and fault.message is None and not path.endswith("/eviction"):
            # the apiserver's max-in-flight / priority-and-fairness filters answer
            # before any handler: http.Error(w, "Too many requests, please try again
            # later.", 429) with Retry-After set, a plain-text body, not a Status
            self._send_text(429, "Too many requests, please try again later.\n",
                            {"Retry-After": headers.get("Retry-After", "1"), "X-Content-Type-Options": "nosniff"})
            return
        self._send_json(code, status_body(code, fault.message or DEFAULT_MESSAGES.get(code, "injected fault"),
                                          retry_after=fault.retry_after), headers)

    def _serve(self) -> None:
        fake = self.server.fake
        parts = urlsplit(self.path)
        path = unquote(parts.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        content_type = self.headers.get("Content-Type", "")
        record = RequestRecord(self.command, path, query, None, content_type, headers=dict(self.headers.items()))
        try:
            raw = self._read_body()
        except ApiError as err:
            record.status = err.code
            fake._record(record)
            self._send_json(err.code, err.body)
            return
        if raw:
            try:
                record.body = json.loads(raw)
            except ValueError:
                record.body = raw.decode("utf-8", "replace")
        fault = fake.faults.take(self.command, path, watch=query.get("watch") in ("true", "1") or "/watch/" in path)
        if fault is not None and self._answered_by(fault, record, path):
            return
        try:
            if fake.token and self.headers.get("Authorization") != f"Bearer {fake.token}":
                raise ApiError(401, status_body(401, "Unauthorized"))
            result = fake._route(self.command, path, query, record.body if raw else None, content_type,
                                 self.headers.get("Accept", ""), raw, self)
        except ApiError as err:
            if fault is not None and fault.kind == "slow" and fault.after:
                fake._stopping.wait(fault.seconds)
            record.status = err.code
            fake._record(record)
            self._send_json(err.code, err.body, err.headers)
            return
        except Exception as exc:  # a bug in the fake: answer 500 and keep serving
            log.exception("fake API server failed on %s %s", self.command, path)
            record.status = 500
            fake._record(record)
            self._send_json(500, status_body(500, f"fake server bug: {exc}"))
            return
        if result is None:  # a watch: already streamed and recorded
            return
        code, body = result
        if fault is not None and fault.kind == "slow" and fault.after:
            fake._stopping.wait(fault.seconds)
        record.status = code
        fake._record(record)
        if isinstance(body, (bytes, str)):  # a recorded JSON document byte for byte, or plain text
            data, kind = (body, "application/json") if isinstance(body, bytes) else (body.encode(), "text/plain")
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self._send_json(code, body)

    def _answered_by(self, fault: Fault, record: RequestRecord, path: str) -> bool:
        """Serve an injected fault; True when it is the whole answer (``slow`` only delays)."""
        fake = self.server.fake
        record.fault = fault.kind
        if fault.kind == "refuse":
            fake._record(record)
            self._refuse(fault.reset)
            return True
        if fault.kind in ("fail", "answer"):
            record.status = fault.status
            fake._record(record)
            self._send_failure(fault, path)
            return True
        if fault.kind == "stream":
            self._send_stream(fault, record)
            return True
        if fault.kind == "slow" and not fault.after:
            fake._stopping.wait(fault.seconds)
        return False

    def _send_stream(self, fault: Fault, record: RequestRecord) -> None:
        """An injected watch answer: ``fault.body`` as a 200 stream, then a clean end."""
        record.status = 200
        self.server.fake._record(record)
        self.start_stream(fault.content_type)
        if fault.body:
            self.send_chunk(fault.body)
        self.end_stream("clean")

    def _refuse(self, reset: bool) -> None:
        self.close_connection = True
        try:
            if reset:
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.connection.close()
            else:
                self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def start_stream(self, content_type: str = "application/json") -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        self.wfile.flush()

    def send_chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def end_stream(self, how: str) -> None:
        """A watch that ends (timeout, ERROR, a clean drop) writes the last chunk and keeps the
        connection for the next request, as Go's net/http does; the client's pool reuses it.
        Closing it without a ``Connection: close`` header made the next pooled request fail
        with RemoteDisconnected. Only ``abrupt`` (and server stop) cut the socket."""
        try:
            if how in ("abrupt", "stopped"):
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
            else:
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
        except OSError:
            self.close_connection = True


class FakeApiServer:
    """An in-process Kubernetes API server; ``with FakeApiServer() as api:`` starts and stops it.

    Options: ``token`` (require ``Authorization: Bearer <token>``), ``check_resource_names``
    (refuse capacity names pods could not request — the real server stores them, see the
    reference 1.5; on by default so a test notices the agent sending one), ``kubelet`` (copy
    capacity into allocatable after a capacity change), ``bookmark_interval`` seconds,
    ``watch_timeout`` (the server's own cap when a watch has no ``timeoutSeconds``),
    ``watch_410`` (``"event"``: 200 then an in-stream ERROR, as the watch cache does; ``"http"``:
    a plain 410 response), ``compact_interval`` (seconds; compact history on a timer as
    kube-apiserver's etcd compactor does; off by default so a test decides when versions expire),
    ``nfd_crds`` (serve NFD's CRDs from the start; ``custom.install()``/``uninstall()`` later),
    ``dra_versions`` (the ``resource.k8s.io`` versions served, preferred first; ``()``: none) and
    ``dra_device_taints`` (the ``DRADeviceTaints`` feature: device taints kept and
    ``devicetaintrules`` discovered), ``dra_consumable_capacity`` (the ``DRAConsumableCapacity``
    feature: a device's ``allowMultipleAllocations`` and capacities' ``requestPolicy`` kept), see
    ``dra_resources.py``.
    """

    def __init__(self, *, token: str | None = None, check_resource_names: bool = True, kubelet: bool = True,
                 bookmark_interval: float = 1.0, watch_timeout: float = 300.0, watch_410: str = "event",
                 compact_interval: float | None = None, nfd_crds: bool = False,
                 dra_versions: tuple[str, ...] = ("v1", "v1beta1"), dra_device_taints: bool = False,
                 dra_consumable_capacity: bool = False) -> None:
        self.token = token
        self.dra_versions = tuple(dra_versions)
        self.dra_device_taints = dra_device_taints
        self.dra_consumable_capacity = dra_consumable_capacity
        self.check_resource_names = check_resource_names
        self.kubelet = kubelet
        self.bookmark_interval = bookmark_interval
        self.watch_timeout = watch_timeout
        self.watch_410 = watch_410
        self.compact_interval = compact_interval
        self.compactions = 0
        self.store = Store()
        self.faults = Faults()
        self.watches = WatchRegistry(self.store)
        self.custom = CustomResources(self)
        if not nfd_crds:
            self.custom.installed.clear()
        self._requests: list[RequestRecord] = []
        self._requests_lock = threading.Lock()
        self._stopping = threading.Event()
        self._writers: list[SecondWriter] = []
        self._httpd: _HttpServer | None = None
        self._thread: threading.Thread | None = None
        from tests.support import objects, pods, resource_claims  # they build on this module's errors

        self.routes: list[Route] = [pods.route, objects.route, resource_claims.route]

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> FakeApiServer:
        if self._httpd is not None:
            return self
        self._stopping.clear()
        self._httpd = _HttpServer(self)
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fake-apiserver", daemon=True)
        self._thread.start()
        if self.compact_interval:
            threading.Thread(target=self._compactor, name="fake-apiserver-compactor", daemon=True).start()
        return self

    def _compactor(self) -> None:
        """kube-apiserver's etcd compactor (``--etcd-compaction-interval``, 5 min by default):
        each tick compacts to the revision recorded at the previous tick, so history younger
        than one interval survives; open watches (served by the watch cache) go on."""
        recorded = None
        while not self._stopping.wait(self.compact_interval):
            if recorded is not None:
                self.store.compact(recorded)
                self.compactions += 1
            recorded = self.store.rv

    def stop(self) -> None:
        """Stop serving, end every open stream and connection, join the threads (bounded)."""
        httpd = self._httpd
        if httpd is None:
            return
        self._stopping.set()
        for writer in list(self._writers):
            writer.stop()
        self.store.wake()
        httpd.shutdown()
        with httpd.conn_lock:
            connections, threads = list(httpd.connections), list(httpd.threads)
        for conn in connections:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        httpd.server_close()
        deadline = time.monotonic() + 5
        for thread in threads + [self._thread]:
            if thread is not None:
                thread.join(max(0.0, deadline - time.monotonic()))
        self._httpd = None

    def __enter__(self) -> FakeApiServer:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("the server is not running")
        return self._httpd.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- client configuration -------------------------------------------------------------
    def kubeconfig_dict(self) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Config", "current-context": "fake", "preferences": {},
                "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
                "users": [{"name": "fake", "user": {"token": self.token or "fake-token"}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}]}

    def kubeconfig(self, path: str | Path) -> Path:
        """Write a kubeconfig (plain http, bearer token) that the Python client and kubectl accept."""
        path = Path(path)
        path.write_text(json.dumps(self.kubeconfig_dict(), indent=2))
        return path

    write_kubeconfig = kubeconfig

    def client_configuration(self) -> Any:  # a kubernetes.client.Configuration
        """A client Configuration for this server, with urllib3 retries off (as
        ``load_configuration`` does) so request counts are exact."""
        from kubernetes import client

        configuration = client.Configuration()
        configuration.host = self.url
        configuration.api_key = {"authorization": f"Bearer {self.token or 'fake-token'}"}
        configuration.retries = False
        return configuration

    def core_api(self) -> Any:  # a kubernetes.client.CoreV1Api
        from kubernetes import client

        return client.CoreV1Api(client.ApiClient(self.client_configuration()))

    # -- test-side object access ----------------------------------------------------------
    def add_node(self, name: str, labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
                 taints: list[dict[str, Any]] | None = None, capacity: dict[str, Any] | None = None,
                 register_taints: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """Register a node as kubelet would (new uid each time). ``labels``/``annotations``
        None: kubelet's defaults; ``register_taints``: ``--register-with-taints``."""
        if labels is None:
            labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
        if annotations is None:
            annotations = dict(KUBELET_ANNOTATIONS)
        capacity = {"cpu": "4", "memory": "8Gi", "pods": "110"} if capacity is None else capacity
        capacity = {k: quantity.canonical(v) for k, v in capacity.items()}
        node = {"kind": "Node", "apiVersion": "v1",
                "metadata": {"name": name, "labels": dict(labels), "annotations": dict(annotations)},
                "spec": {"taints": [dict(t) for t in (taints or [])] + [dict(t) for t in (register_taints or [])]},
                "status": {"capacity": dict(capacity), "allocatable": dict(capacity),
                           "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                           "message": "kubelet is posting ready status",
                                           "lastHeartbeatTime": now_stamp(), "lastTransitionTime": now_stamp()}],
                           "addresses": [{"type": "Hostname", "address": name}],
                           "nodeInfo": {"machineID": "0" * 32, "systemUUID": "00000000-0000-0000-0000-000000000000",
                                        "bootID": "00000000-0000-0000-0000-000000000001",
                                        "kernelVersion": "6.1.0", "osImage": "Debian GNU/Linux 12 (bookworm)",
                                        "containerRuntimeVersion": "containerd://1.7.0",
                                        "kubeletVersion": "v1.32.0", "kubeProxyVersion": "v1.32.0",
                                        "operatingSystem": "linux", "architecture": "amd64"}}}
        return self.store.create("nodes", node)

    def node(self, name: str) -> dict[str, Any]:
        """A deep copy of the stored Node (raises ``store.NotFound``)."""
        return self.store.get("nodes", name)

    get_node = node

    def nodes(self) -> list[dict[str, Any]]:
        return self.store.list("nodes")[0]

    def edit_node(self, name: str, fn: Callable[[dict[str, Any]], dict[str, Any] | None], *,
                  kubelet: bool = True) -> dict[str, Any]:
        """Change a node behind the agent's back: ``fn`` mutates a copy (or returns a new dict);
        always bumps resourceVersion and emits MODIFIED. ``kubelet``: copy capacity changes
        into allocatable as for API writes."""
        def mutate(current: dict[str, Any]) -> dict[str, Any]:
            before = copy.deepcopy(current)
            out = fn(current)
            new = current if out is None else out
            if kubelet:
                self._kubelet_sync(before, new)
            return new

        return self.store.update("nodes", name, mutate, force_bump=True)[0]

    def delete_node(self, name: str) -> dict[str, Any]:
        return self.store.delete("nodes", name)

    def add_pod(self, namespace: str, name: str, node_name: str | None, node_selector: dict[str, str] | None = None,
                affinity: dict[str, Any] | None = None, labels: dict[str, str] | None = None) -> dict[str, Any]:
        spec: dict[str, Any] = {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.9"}]}
        if node_name:
            spec["nodeName"] = node_name
        if node_selector:
            spec["nodeSelector"] = dict(node_selector)
        if affinity:
            spec["affinity"] = copy.deepcopy(affinity)
        pod = {"kind": "Pod", "apiVersion": "v1",
               "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})},
               "spec": spec, "status": {"phase": "Running" if node_name else "Pending"}}
        return self.store.create("pods", pod)

    def generated_name(self, prefix: str) -> str:
        """``generateName``: the prefix and five random characters (``names.SimpleNameGenerator``)."""
        return prefix + "".join(random.choices(string.ascii_lowercase + string.digits, k=5))

    def create_pod(self, namespace: str, pod: dict[str, Any]) -> dict[str, Any]:
        """Create a pod through the pod registry (defaults, ``PrepareForCreate``, validation),
        as a POST would; raises ``ApiError`` when the real server would refuse it."""
        from tests.support import pods

        return pods.create(self, namespace, pod, dry_run=False)[1]

    def pod(self, namespace: str, name: str) -> dict[str, Any]:
        return self.store.get("pods", name, namespace)

    def add_namespace(self, name: str, annotations: dict[str, str] | None = None,
                      labels: dict[str, str] | None = None) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": name, "labels": {"kubernetes.io/metadata.name": name, **(labels or {})}}
        if annotations:
            meta["annotations"] = dict(annotations)
        return self.store.create("namespaces", {"kind": "Namespace", "apiVersion": "v1", "metadata": meta,
                                                "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}})

    def add_secret(self, namespace: str, name: str, data: dict[str, str], kind: str) -> dict[str, Any]:
        """A Secret with base64 ``data`` (``kind``: e.g. ``kubernetes.io/dockerconfigjson``)."""
        return self.store.create("secrets", {"kind": "Secret", "apiVersion": "v1", "type": kind, "data": dict(data),
                                             "metadata": {"name": name, "namespace": namespace}})

    def pods(self, node_name: str | None = None) -> list[dict[str, Any]]:
        match = (lambda p: p["spec"].get("nodeName") == node_name) if node_name else (lambda _p: True)
        return self.store.list("pods", None, match)[0]

    def events(self) -> list[dict[str, Any]]:
        """Every Event posted (core v1 and events.k8s.io/v1), oldest first."""
        items = self.store.list("events")[0]
        return sorted(items, key=lambda e: int(e["metadata"]["resourceVersion"]))

    # -- faults beyond single requests ----------------------------------------------------
    def drop_watches(self, abrupt: bool = False) -> int:
        """End every open watch stream now (cleanly, or by closing the socket); returns how many."""
        return self.watches.drop_all(abrupt)

    def expire_resource_versions(self) -> int:
        """Compact history: open watches get an ERROR 410 and end; a new watch from an earlier
        resourceVersion that would miss a change is 410 Gone (re-reading gives a usable one).
        Returns the compaction point."""
        rv = self.store.compact()
        self.watches.expire_all()
        return rv

    def send_bookmarks(self) -> int:
        """Ask every open watch with bookmarks allowed to send one now."""
        return self.watches.bookmark_all()

    def second_writer(self, node: str, interval: float = 0.05) -> SecondWriter:
        """A concurrent foreign writer; use as a context manager (or ``.start()``/``.stop()``)."""
        writer = SecondWriter(self, node, interval)
        self._writers.append(writer)
        return writer

    # -- request log ----------------------------------------------------------------------
    def _record(self, record: RequestRecord) -> None:
        with self._requests_lock:
            self._requests.append(record)

    @property
    def requests(self) -> list[RequestRecord]:
        with self._requests_lock:
            return list(self._requests)

    def clear_requests(self) -> None:
        with self._requests_lock:
            self._requests.clear()

    reset_requests = clear_requests

    def writes(self, node: str | None = None) -> list[RequestRecord]:
        """Successful PATCH/PUT requests to nodes (main resource and ``/status``)."""
        return [r for r in self.requests
                if r.method in ("PATCH", "PUT") and 200 <= r.status < 300 and r.node is not None
                and (node is None or r.node == node) and r.subresource in (None, "status")]

    # -- node writes ----------------------------------------------------------------------
    def _kubelet_sync(self, before: dict[str, Any], after: dict[str, Any]) -> None:
        """kubelet's MachineInfo setter: allocatable follows capacity (no reservations here);
        extended resources that left capacity leave allocatable."""
        if not self.kubelet:
            return
        old = (before.get("status") or {}).get("capacity") or {}
        status = after.setdefault("status", {})
        new = status.get("capacity") or {}
        if old == new:
            return
        allocatable = status.setdefault("allocatable", {})
        for key, value in new.items():
            if old.get(key) != value or key not in allocatable:
                allocatable[key] = value
        for key in old:
            if key not in new and validation.is_extended_resource_name(key):
                allocatable.pop(key, None)

    def _write_node(self, name: str, subresource: str | None, compute: Callable[[dict[str, Any]], Any],
                    dry_run: bool, body: Any = None) -> dict[str, Any]:
        def mutate(current: dict[str, Any]) -> dict[str, Any]:
            before = copy.deepcopy(current)
            candidate = compute(current)
            problem = schema.type_problem(candidate) or validation.decode_problem(candidate)
            if problem:
                raise decode_error(problem, candidate, put_body=body)
            node: dict[str, Any] = schema.prune(candidate)  # decoding into the Go struct drops unknown fields
            wanted_rv = node["metadata"].get("resourceVersion")
            if wanted_rv not in (None, "") and str(wanted_rv) != before["metadata"]["resourceVersion"]:
                raise Conflict("nodes", name)
            if node["metadata"].get("name", name) != name:
                raise ApiError(400, status_body(400, f"the name of the object ({node['metadata']['name']}) does "
                                                     f"not match the name on the URL ({name})"))
            if subresource == "status":
                node["spec"] = copy.deepcopy(before.get("spec") or {})
            else:
                node["status"] = copy.deepcopy(before.get("status") or {})
            node["kind"], node["apiVersion"] = "Node", "v1"
            node.setdefault("spec", {})
            status = node.setdefault("status", {})
            for section in ("capacity", "allocatable"):
                if isinstance(status.get(section), dict):
                    status[section] = {k: quantity.canonical(v) for k, v in status[section].items()}
            causes = validation.validate_node_write(node, subresource,
                                                    check_resource_names=self.check_resource_names)
            if causes:
                raise invalid_error("Node", name, causes)
            self._kubelet_sync(before, node)  # kubelet's own later write: never part of the 422
            return node

        try:
            if dry_run:
                with self.store.lock:
                    current = self.store.get("nodes", name)
                    return mutate(current)
            return self.store.update("nodes", name, mutate)[0]
        except Conflict as err:
            raise ApiError(409, status_body(409, str(err), name=name, kind="nodes")) from err

    # -- routing --------------------------------------------------------------------------
    def _route(self, method: str, path: str, query: dict[str, str], body: Any, content_type: str, accept: str,
               raw: bytes, handler: _Handler) -> tuple[int, Any] | None:
        parts = [p for p in path.split("/") if p]
        try:
            return self._dispatch(method, parts, query, body, content_type, accept, raw, handler)
        except NotFound as err:
            raise ApiError(404, status_body(404, str(err), name=err.name, kind=err.resource)) from err
        except AlreadyExists as err:
            raise ApiError(409, status_body(409, str(err), reason="AlreadyExists", name=err.name,
                                            kind=err.resource)) from err
        except patching.PatchError as err:
            if err.code == 422:  # patch.go: NewGenericServerResponse(422, ..., err.Error(), 0, false)
                body = status_body(422, patching.GENERIC_422)
                body["details"] = {}  # a non-nil StatusDetails with every field empty: no causes
                raise ApiError(422, body) from err
            raise ApiError(err.code, status_body(err.code, err.message)) from err
        except ValueError as err:
            raise ApiError(400, status_body(400, str(err))) from err

    def _dispatch(self, method: str, parts: list[str], query: dict[str, str], body: Any, content_type: str,
                  accept: str, raw: bytes, handler: _Handler) -> tuple[int, Any] | None:
        from tests.support import dra_resources  # it builds on this module's errors

        document = self._discovery(parts)
        if document is not None:
            return document
        if raw and body is not None and isinstance(body, str):
            raise ApiError(400, status_body(400, "the body of the request could not be decoded as JSON"))
        if parts[:2] == ["apis", dra_resources.GROUP] and len(parts) > 3 and parts[3] != "namespaces":
            # resource.k8s.io's cluster-scoped kinds (dra_resources.py); ResourceClaims are a route
            return dra_resources.route(self, method, parts, query, body, content_type, handler)
        for route in self.routes:  # resources served by their own modules (pods.py, objects.py)
            answer = route(self, method, parts, query, body, content_type)
            if answer is not None:
                return answer
        if parts[:2] == ["api", "v1"]:
            rest = parts[2:]
            if rest and rest[0] == "watch":
                rest = rest[1:]
                query = dict(query, watch="true")
            namespace, rest = _namespaced(rest)
            if rest and rest[0] in ("nodes", "pods", "events"):
                return self._resource(method, rest[0], namespace, rest[1:], query, body, content_type, accept, handler)
        if parts[:1] == ["apis"] and len(parts) > 3:  # NFD's custom resources (custom_resources.py)
            custom = self.custom.dispatch(method, parts, query, body, content_type, handler)
            if custom is not NOT_MINE:
                return custom  # type: ignore[no-any-return]
        if parts[:3] == ["apis", "events.k8s.io", "v1"]:
            namespace, rest = _namespaced(parts[3:])
            if rest and rest[0] == "events":
                return self._resource(method, "events", namespace, rest[1:], query, body, content_type, accept,
                                      handler, api_version="events.k8s.io/v1")
        raise ApiError(404, status_body(404, "the server could not find the requested resource"))

    def _discovery(self, parts: list[str]) -> tuple[int, Any] | None:
        """The version, health and discovery documents, or None for any other path."""
        from tests.support import dra_resources

        if parts == ["version"]:
            return 200, discovery.VERSION
        if parts in (["healthz"], ["livez"], ["readyz"]):
            return 200, "ok"
        if parts == ["api"]:
            return 200, discovery.api_versions(f"127.0.0.1:{self.port}")
        if parts == ["apis"]:
            groups = discovery.group_list()
            dra_group = dra_resources.group(self.dra_versions)
            if dra_group is not None:
                groups["groups"].append(dra_group)
            return 200, groups
        if parts == ["apis", dra_resources.GROUP] and self.dra_versions:
            return 200, {"kind": "APIGroup", "apiVersion": "v1", **dra_resources.group(self.dra_versions)}  # type: ignore[dict-item]
        if len(parts) == 3 and parts[:2] == ["apis", dra_resources.GROUP] and parts[2] in self.dra_versions:
            return 200, {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{parts[1]}/{parts[2]}",
                         "resources": dra_resources.resources(parts[2], self.dra_device_taints)}
        if parts == ["openapi", "v3"]:
            return 200, discovery.openapi_v3_root()
        if parts == ["openapi", "v3", "api", "v1"]:
            return 200, discovery.openapi_v3_core()  # bytes: the recorded document, unchanged
        if parts == ["api", "v1"]:
            return 200, discovery.resource_list("v1")
        if len(parts) == 3 and parts[0] == "apis":
            doc = discovery.resource_list(f"{parts[1]}/{parts[2]}")
            if doc is not None:
                return 200, doc
        return None

    def _resource(self, method: str, resource: str, namespace: str | None, rest: list[str], query: dict[str, str],
                  body: Any, content_type: str, accept: str, handler: _Handler,
                  api_version: str = "v1") -> tuple[int, Any] | None:
        kind = {"nodes": "Node", "pods": "Pod", "events": "Event"}[resource]
        dry_run = query.get("dryRun") == "All"
        if resource == "nodes" and namespace is not None:
            raise ApiError(404, status_body(404, "the server could not find the requested resource"))
        if not rest:
            return self._collection(method, resource, kind, namespace, query, body, accept, handler, api_version)
        name, sub = rest[0], rest[1] if len(rest) > 1 else None
        ns = namespace or ""
        if len(rest) > 2 or (sub and (resource, sub) not in (("nodes", "status"), ("pods", "eviction"), ("pods", "status"))):
            raise ApiError(404, status_body(404, "the server could not find the requested resource"))
        if sub == "eviction":
            return self._evict(method, name, ns, dry_run)
        if method == "GET":
            obj = self.store.get(resource, name, ns)
            if "as=Table" in accept:
                return 200, discovery.table(resource, [obj], int(obj["metadata"]["resourceVersion"]))
            return 200, obj
        if method == "DELETE":
            if dry_run:
                return 200, self.store.get(resource, name, ns)
            return 200, self.store.delete(resource, name, ns)
        if resource != "nodes" or method not in ("PATCH", "PUT"):
            raise ApiError(405, status_body(405, "the server does not allow this method on the requested resource"))
        if method == "PUT":
            if not isinstance(body, dict):
                raise ApiError(400, status_body(400, "the body of the request must be a Node object"))
            if body.get("kind") not in (None, "Node"):
                raise ApiError(400, status_body(400, f"the kind of the body ({body.get('kind')}) is not Node"))
            compute = lambda _current: copy.deepcopy(body)  # noqa: E731
            if not isinstance(body.get("metadata"), dict):
                raise ApiError(400, status_body(400, "metadata is required"))
        else:
            compute = lambda current: patching.apply(content_type, current, body)  # noqa: E731
        return 200, self._write_node(name, sub, compute, dry_run, body if method == "PUT" else None)

    def _collection(self, method: str, resource: str, kind: str, namespace: str | None, query: dict[str, str],
                    body: Any, accept: str, handler: _Handler, api_version: str) -> tuple[int, Any] | None:
        """A list, a watch (answered on the connection: None) or a create."""
        if method == "GET":
            match = selectors.selector(query.get("fieldSelector"), query.get("labelSelector"), resource)
            if query.get("watch") in ("true", "1"):
                self._watch(resource, namespace, match, query, handler)
                return None
            items, rv = self.store.list(resource, namespace, match)
            if "as=Table" in accept:
                return 200, discovery.table(resource, items, rv)
            for item in items:
                item.pop("kind", None)
                item.pop("apiVersion", None)
            return 200, {"kind": f"{kind}List", "apiVersion": api_version,
                         "metadata": {"resourceVersion": str(rv)}, "items": items}
        if method == "POST":
            return self._create(resource, kind, namespace, body, query.get("dryRun") == "All", api_version)
        raise ApiError(405, status_body(405, "the server does not allow this method on the requested resource"))

    def _evict(self, method: str, name: str, namespace: str, dry_run: bool) -> tuple[int, Any]:
        if method != "POST":
            raise ApiError(405, status_body(405, "the server does not allow this method on the requested resource"))
        if not dry_run:
            self.store.delete("pods", name, namespace)
        else:
            self.store.get("pods", name, namespace)
        return 201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}

    def _create(self, resource: str, kind: str, namespace: str | None, body: Any, dry_run: bool,
                api_version: str) -> tuple[int, Any]:
        if not isinstance(body, dict):
            raise ApiError(400, status_body(400, f"the body of the request must be a {kind} object"))
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise ApiError(400, status_body(400, "metadata must be an object"))
        if resource != "nodes":
            if namespace is None:
                raise ApiError(405, status_body(405, "the server does not allow this method on the requested resource"))
            if meta.get("namespace") not in (None, "", namespace):
                raise ApiError(400, status_body(400, "the namespace of the provided object does not match the "
                                                     "namespace sent on the request"))
            meta["namespace"] = namespace
        if not meta.get("name"):
            if meta.get("generateName"):
                meta["name"] = self.generated_name(meta["generateName"])
            else:
                raise invalid_error(kind, "", [validation.Cause("FieldValueRequired",
                                                                "Required value: name or generateName is required",
                                                                "metadata.name")])
        obj.setdefault("kind", kind)
        obj.setdefault("apiVersion", api_version)
        if resource == "nodes":
            obj.setdefault("spec", {})
            obj.setdefault("status", {})
            problem = schema.type_problem(obj) or validation.decode_problem(obj)
            if problem:
                raise decode_error(problem, obj, put_body=body)
            causes = validation.validate_node(obj, check_resource_names=self.check_resource_names)
            if causes:
                raise invalid_error("Node", meta["name"], causes)
        if dry_run:
            return 201, obj
        return 201, self.store.create(resource, obj)

    def _watch(self, resource: str, namespace: str | None, match: Callable[[dict[str, Any]], bool],
               query: dict[str, str], handler: _Handler,
               convert: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> None:
        """Stream a watch; ``convert`` turns each stored object into the version asked for."""
        rv_text = query.get("resourceVersion", "")
        try:
            since = int(rv_text) if rv_text not in ("", "0") else None
        except ValueError as err:
            raise ApiError(400, status_body(400, f"invalid resource version: {rv_text}")) from err
        try:
            timeout = float(query["timeoutSeconds"]) if query.get("timeoutSeconds") else self.watch_timeout
        except ValueError as err:
            raise ApiError(400, status_body(400, "invalid timeoutSeconds")) from err
        watcher = Watcher(resource, namespace, match, since, query.get("allowWatchBookmarks") in ("true", "1"),
                          time.monotonic() + timeout)  # honoured as asked, like a real server (reference 3)
        if since is not None and self.watch_410 == "http" and self.store.too_old(since):
            raise ApiError(410, gone(since, self.store.oldest_minus_one()))
        record = RequestRecord("GET", unquote(urlsplit(handler.path).path), query, None, "", 200,
                               headers=dict(handler.headers.items()))
        self._record(record)
        self.watches.add(watcher)
        how = "abrupt"
        try:
            transform: Callable[[dict[str, Any]], dict[str, Any]] | None = convert
            as_table = "as=Table" in handler.headers.get("Accept", "")
            if as_table:
                # handlers/watch.go Fixup: each object becomes a Table; the column
                # definitions go with the first one only (TableOptions.NoHeaders after it)
                headers_sent = [False]

                def to_table(obj: dict[str, Any]) -> dict[str, Any]:
                    table = discovery.table(resource, [obj], int(obj["metadata"]["resourceVersion"]))
                    if headers_sent[0]:
                        table["columnDefinitions"] = None
                    headers_sent[0] = True
                    return table

                transform = to_table
            handler.start_stream("application/json;as=Table;v=v1;g=meta.k8s.io" if as_table else "application/json")
            how = stream(self.store, watcher, handler.send_chunk, stopping=self._stopping,
                         bookmark_interval=self.bookmark_interval, transform=transform)
        except OSError:
            how = "abrupt"  # the client went away
        finally:
            self.watches.remove(watcher)
            handler.end_stream(how)
