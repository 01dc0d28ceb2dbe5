"""Namespaces, Secrets and coordination.k8s.io Leases: the other objects the placement
controller reads or writes, with no validation beyond what a client can notice.

* ``GET /api/v1/namespaces/{name}`` (cluster-scoped); tests create them with
  ``FakeApiServer.add_namespace``;
* ``GET /api/v1/namespaces/{ns}/secrets/{name}``; tests create them with ``add_secret``;
* ``/apis/coordination.k8s.io/v1/namespaces/{ns}/leases[/{name}]``: GET, LIST, POST, PUT,
  PATCH (the three patch types) and DELETE. A write carrying ``metadata.resourceVersion`` is
  conditional (409 Conflict when stale) and one without it is unconditional, because the
  lease strategy allows unconditional updates (``AllowUnconditionalUpdate``,
  ``pkg/registry/coordination/lease/strategy.go``).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tests.support import patching
from tests.support.apiserver import ApiError, status_body
from tests.support.store import AlreadyExists, Conflict

if TYPE_CHECKING:
    from tests.support.apiserver import FakeApiServer

LEASES = ["apis", "coordination.k8s.io", "v1", "namespaces"]
LEASE = "leases.coordination.k8s.io"  # the store key: NotFound/Conflict texts name the group resource


def _leases(server: FakeApiServer, method: str, namespace: str, rest: list[str], body: Any,
            content_type: str) -> tuple[int, Any]:
    store = server.store
    if not rest:
        if method == "GET":
            items, rv = store.list(LEASE, namespace)
            return 200, {"kind": "LeaseList", "apiVersion": "coordination.k8s.io/v1",
                         "metadata": {"resourceVersion": str(rv)}, "items": items}
        if method == "POST":
            lease = copy.deepcopy(body) if isinstance(body, dict) else {}
            meta = lease.setdefault("metadata", {})
            if not meta.get("name"):
                raise ApiError(422, status_body(422, 'Lease "" is invalid: metadata.name: Required value'))
            meta["namespace"] = namespace
            lease["kind"], lease["apiVersion"] = "Lease", "coordination.k8s.io/v1"
            try:
                return 201, store.create(LEASE, lease)
            except AlreadyExists as err:
                raise ApiError(409, status_body(409, f'{LEASE} "{meta["name"]}" already exists',
                                                reason="AlreadyExists", name=meta["name"], kind="leases")) from err
        raise ApiError(405, status_body(405, "the server does not allow this method on the requested resource"))
    name = rest[0]
    if method == "GET":
        return 200, store.get(LEASE, name, namespace)
    if method == "DELETE":
        return 200, store.delete(LEASE, name, namespace)
    if method not in ("PUT", "PATCH") or (method == "PUT" and not isinstance(body, dict)):
        raise ApiError(405, status_body(405, "the server does not allow this method on the requested resource"))

    def replace(current: dict[str, Any]) -> dict[str, Any]:
        new = copy.deepcopy(body) if method == "PUT" else patching.apply(content_type, current, body)
        wanted = (new.get("metadata") or {}).get("resourceVersion")
        if wanted not in (None, "") and str(wanted) != current["metadata"]["resourceVersion"]:
            raise Conflict(LEASE, name)
        new["kind"], new["apiVersion"] = "Lease", "coordination.k8s.io/v1"
        return new

    try:
        return 200, store.update(LEASE, name, replace, namespace)[0]
    except Conflict as err:
        raise ApiError(409, status_body(409, str(err), name=name, kind=LEASE)) from err


def route(server: FakeApiServer, method: str, parts: list[str], query: Mapping[str, str], body: Any,
          content_type: str) -> tuple[int, Any] | None:
    del query
    if parts[:4] == LEASES and len(parts) >= 6 and parts[5] == "leases":
        return _leases(server, method, parts[4], parts[6:], body, content_type)
    if parts[:3] == ["api", "v1", "namespaces"] and len(parts) == 4 and method == "GET":
        return 200, server.store.get("namespaces", parts[3])
    if parts[:3] == ["api", "v1", "namespaces"] and len(parts) == 6 and parts[4] == "secrets" and method == "GET":
        return 200, server.store.get("secrets", parts[5], parts[3])
    return None
