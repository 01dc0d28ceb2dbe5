"""The calls the agent makes on its own Node, over ``LightCoreV1Api`` (``light_core``).

Responses come back as plain JSON dicts (exactly what the server sent, so the diff compares
real values, e.g. canonical quantities). Every failure is turned into one typed
``NodeApiError`` subclass, so callers decide by type, not by poking at HTTP codes:

===========================  =====================================  ==========================
``Transient``                5xx, timeouts, resets, refused          retried with backoff here
``Throttled``                429 (and ``Retry-After``)               retried after Retry-After
``Conflict``                 409 (resourceVersion precondition)      caller re-reads, recomputes
``Invalid``                  422 with the Status ``causes``          caller skips the bad item
``Forbidden``                403 (RBAC / admission policy)           caller logs, no hot loop
``NodeNotFound``             404                                     caller waits
``RequestRejected``          400, 401, 413, 415, other              caller reports
===========================  =====================================  ==========================

A 2xx answer to a Node GET or PATCH is the Node only when it says so: ``kind: Node``, the
name asked for and a ``metadata.uid`` (:func:`node_answer_problem`). Anything else (a
``Status``, another kind, another Node, a proxy's page) is ``Transient``: read as the Node,
every owned label would look removed by someone else.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import urllib3
from kubernetes import client as k8s_client
from kubernetes.client.api_client import ApiClient
from kubernetes.client.exceptions import ApiException

from agent.kube.backoff import Backoff, parse_retry_after
from agent.kube.light_core import LightCoreV1Api

log = logging.getLogger(__name__)

T = TypeVar("T")
DEFAULT_REQUEST_TIMEOUT = (3.0, 5.0)
"""(connect, read) seconds: without a read timeout a half-open connection blocks forever, and
a long one keeps the single worker from seeing newer events (a Node GET or PATCH answers in
milliseconds). The watch has its own long read timeout (``node_watch``)."""
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


@dataclass(frozen=True)
class StatusCause:
    """One entry of a Status ``details.causes`` list (which field, why)."""

    reason: str
    message: str
    field: str


class NodeApiError(Exception):
    """An API call failed; ``status`` is the HTTP code (0 for network errors)."""

    def __init__(self, operation: str, status: int, message: str, *, retry_after: float | None = None,
                 causes: Sequence[StatusCause] = ()) -> None:
        super().__init__(f"{operation}: {status or 'network'}: {message}")
        self.operation = operation
        self.status = status
        self.message = message
        self.retry_after = retry_after
        self.causes = tuple(causes)


class Transient(NodeApiError):
    """Worth retrying after a backoff: server errors and network failures."""


class Throttled(Transient):
    """429 Too Many Requests: wait ``retry_after`` seconds."""


class Conflict(NodeApiError):
    """409: the node changed since we read it."""


class Invalid(NodeApiError):
    """422: the server refused some field; ``causes`` name it."""


class Forbidden(NodeApiError):
    """403: RBAC or an admission policy denies the call."""


class NodeNotFound(NodeApiError):
    """404: the node does not exist (deleted, not yet registered, or a wrong --node-name)."""


class RequestRejected(NodeApiError):
    """Any other client-side error (400, 401, 413, 415 ...): a bug or misconfiguration."""


def _status_body(body: object) -> dict[str, Any]:
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    if isinstance(body, str) and body:
        try:
            parsed = json.loads(body)
        except ValueError:
            return {"message": body[:500]}
        return parsed if isinstance(parsed, dict) else {}
    return {}


def _header(headers: object, name: str) -> object:
    if headers is None:
        return None
    getter = getattr(headers, "get", None)
    if getter is None:
        return None
    value = getter(name)
    if value is None and isinstance(headers, Mapping):
        for key, val in headers.items():
            if str(key).lower() == name.lower():
                return val
    return value


def classify(operation: str, exc: BaseException) -> NodeApiError:
    """Map a client/urllib3/socket exception to the typed error callers act on."""
    if isinstance(exc, NodeApiError):
        return exc
    if isinstance(exc, ApiException):
        status = int(exc.status or 0)
        body = _status_body(exc.body)
        message = str(body.get("message") or exc.reason or "")
        details = body.get("details")
        listed = details.get("causes") if isinstance(details, dict) else None
        causes = [StatusCause(str(c.get("reason", "")), str(c.get("message", "")), str(c.get("field", "")))
                  for c in (listed if isinstance(listed, list) else []) if isinstance(c, dict)]
        retry_after = parse_retry_after(_header(exc.headers, "Retry-After"))
        kind: type[NodeApiError]
        if status == 429:
            kind = Throttled
        elif status == 0 or status >= 500:
            kind = Transient
        else:
            kind = {409: Conflict, 422: Invalid, 403: Forbidden, 404: NodeNotFound}.get(status, RequestRejected)
        return kind(operation, status, message, retry_after=retry_after, causes=causes)
    if isinstance(exc, (urllib3.exceptions.HTTPError, OSError)):
        return Transient(operation, 0, f"{type(exc).__name__}: {exc}")
    raise TypeError(f"not an API error: {exc!r}") from exc


def node_answer_problem(answer: Mapping[str, Any], name: str) -> str:
    """Why ``answer`` is not the Node ``name`` as the API server returns it ("" when it is):
    ``kind: Node``, ``metadata.name`` the name asked for, a non-empty ``metadata.uid``
    (every object the API server stores has one: ObjectMeta, k8s.io/apimachinery)."""
    kind = answer.get("kind")
    if kind != "Node":
        return f"kind {str(kind)[:40]!r}, not Node"
    metadata = answer.get("metadata")
    if not isinstance(metadata, dict):
        return "no metadata"
    if metadata.get("name") != name:
        return f"Node {str(metadata.get('name'))[:63]!r}, not {name!r}"
    uid = metadata.get("uid")
    if not isinstance(uid, str) or not uid:
        return "no metadata.uid"
    return ""



class NodeApi:
    """The handful of calls the agent makes on its own Node, returning JSON dicts."""

    def __init__(self, core: LightCoreV1Api, *, request_timeout: tuple[float, float] = DEFAULT_REQUEST_TIMEOUT) -> None:
        self.core = core
        self.request_timeout = request_timeout

    @classmethod
    def from_configuration(cls, configuration: k8s_client.Configuration, *,
                           request_timeout: tuple[float, float] = DEFAULT_REQUEST_TIMEOUT) -> NodeApi:
        """A ``NodeApi`` on a fresh ``ApiClient`` for ``configuration`` (``agent.kube.connect``)."""
        return cls(LightCoreV1Api(ApiClient(configuration)), request_timeout=request_timeout)

    def _json(self, operation: str, call: Callable[..., Any], *args: Any, node: str = "", **kwargs: Any
              ) -> dict[str, Any]:
        """The answer's JSON object; ``node``: it must be that Node (:func:`node_answer_problem`)."""
        try:
            response = call(*args, _preload_content=False, _request_timeout=self.request_timeout, **kwargs)
            data = response.data
        except Exception as exc:  # classified and re-raised typed; TypeError for anything else
            raise classify(operation, exc) from exc
        status = int(getattr(response, "status", 0) or 0)
        try:
            parsed = json.loads(data)
        except ValueError as exc:
            raise Transient(operation, status, f"response was not JSON: {data[:200]!r}") from exc
        if not isinstance(parsed, dict):
            raise Transient(operation, status, "response was not a JSON object")
        problem = node_answer_problem(parsed, node) if node else ""
        if problem:
            raise Transient(operation, status, f"the answer is not the Node: {problem}")
        return parsed

    def get_node(self, name: str) -> dict[str, Any]:
        return self._json(f"GET node {name}", self.core.read_node, name, node=name)

    def patch_metadata(self, name: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """JSON merge patch on the main resource: labels, annotations, spec.taints."""
        return self._json(f"PATCH node {name}", self.core.patch_node, name, dict(body), node=name,
                          _content_type=MERGE_PATCH)

    def patch_status(self, name: str, ops: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """JSON patch on ``/status`` (capacity, allocatable)."""
        return self._json(f"PATCH node {name}/status", self.core.patch_node_status, name, [dict(op) for op in ops],
                          node=name, _content_type=JSON_PATCH)

    def create_event(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return self._json(f"POST event in {namespace}", self.core.create_namespaced_event, namespace, dict(body))


def call_with_retries(
    operation: Callable[[], T],
    backoff: Backoff,
    sleep: Callable[[float], None],
    *,
    max_attempts: int,
    describe: str,
) -> T:
    """Run ``operation``; on ``Transient``/``Throttled`` wait and retry up to ``max_attempts``
    tries in total, then re-raise the last error. Other errors propagate at once."""
    attempt = 0
    while True:
        attempt += 1
        try:
            result = operation()
        except Transient as err:
            if attempt >= max_attempts:
                log.warning("%s failed %d times, giving up for now: %s", describe, attempt, err)
                raise
            delay = backoff.next_delay(err.retry_after if isinstance(err, Throttled) or err.status == 503 else None)
            log.warning("%s failed (%s); retry %d/%d in %.2fs", describe, err, attempt, max_attempts - 1, delay)
            sleep(delay)
            continue
        backoff.success()
        return result
