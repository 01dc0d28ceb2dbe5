"""Discovery documents (``/api``, ``/api/v1``, ``/apis``, ``/version``, ``/openapi/v3``) and the server-side
``Table`` that ``kubectl get`` asks for, so kubectl works against the fake server."""

from __future__ import annotations

import datetime as _dt
import functools
import gzip
import hashlib
from pathlib import Path
from typing import Any

VERSION = {"major": "1", "minor": "32", "gitVersion": "v1.32.0-fake", "gitCommit": "0" * 40,
           "gitTreeState": "clean", "buildDate": "2025-01-01T00:00:00Z", "goVersion": "go1.23.0",
           "compiler": "gc", "platform": "linux/amd64"}

_RW = ["create", "delete", "get", "list", "patch", "update", "watch"]
CORE_RESOURCES = [
    {"name": "nodes", "singularName": "node", "namespaced": False, "kind": "Node", "verbs": _RW, "shortNames": ["no"]},
    {"name": "nodes/status", "singularName": "", "namespaced": False, "kind": "Node", "verbs": ["get", "patch", "update"]},
    {"name": "pods", "singularName": "pod", "namespaced": True, "kind": "Pod", "verbs": _RW, "shortNames": ["po"],
     "categories": ["all"]},
    {"name": "pods/eviction", "singularName": "", "namespaced": True, "group": "policy", "version": "v1",
     "kind": "Eviction", "verbs": ["create"]},
    {"name": "events", "singularName": "event", "namespaced": True, "kind": "Event", "verbs": _RW, "shortNames": ["ev"]},
]
GROUPS = {
    "events.k8s.io": [{"name": "events", "singularName": "event", "namespaced": True, "kind": "Event", "verbs": _RW,
                       "shortNames": ["ev"]}],
    "policy": [],
}


def api_versions(address: str) -> dict[str, Any]:
    return {"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": address}]}


def resource_list(group_version: str) -> dict[str, Any] | None:
    if group_version == "v1":
        resources = CORE_RESOURCES
    else:
        group, _, version = group_version.partition("/")
        if group not in GROUPS or version != "v1":
            return None
        resources = GROUPS[group]
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version,
            "resources": [dict(r, storageVersionHash="fake") for r in resources]}


def group_list() -> dict[str, Any]:
    groups = []
    for name in GROUPS:
        gv = {"groupVersion": f"{name}/v1", "version": "v1"}
        groups.append({"name": name, "versions": [gv], "preferredVersion": gv})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def _age(stamp: str | None) -> str:
    if not stamp:
        return "<unknown>"
    try:
        then = _dt.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=_dt.UTC)
    except ValueError:
        return "<unknown>"
    seconds = int((_dt.datetime.now(_dt.UTC) - then).total_seconds())
    return f"{seconds}s" if seconds < 120 else f"{seconds // 60}m"


def _node_cells(node: dict[str, Any]) -> list[Any]:
    labels = node["metadata"].get("labels") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                for c in (node.get("status") or {}).get("conditions") or [])
    roles = ",".join(sorted(k.split("/", 1)[1] for k in labels if k.startswith("node-role.kubernetes.io/"))) or "<none>"
    version = ((node.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion", "")
    return [node["metadata"]["name"], "Ready" if ready else "NotReady", roles,
            _age(node["metadata"].get("creationTimestamp")), version]


def table(resource: str, items: list[dict[str, Any]], rv: int) -> dict[str, Any]:
    """A ``meta.k8s.io/v1`` Table (what kubectl's default output prints)."""
    if resource == "nodes":
        names = ["Name", "Status", "Roles", "Age", "Version"]
        rows = [_node_cells(i) for i in items]
    else:
        names = ["Name", "Age"]
        rows = [[i["metadata"]["name"], _age(i["metadata"].get("creationTimestamp"))] for i in items]
    columns = [{"name": n, "type": "string", "format": "name" if n == "Name" else "", "description": n, "priority": 0}
               for n in names]
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": str(rv)},
            "columnDefinitions": columns,
            "rows": [{"cells": cells, "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                                                 "metadata": item["metadata"]}}
                     for cells, item in zip(rows, items, strict=True)]}


# The real OpenAPI v3 document of the core group, recorded by Kubernetes itself: client-go's
# openapi/openapitest/testdata/api__v1_openapi.json (kubernetes/client-go a63d339, 2026-02-13),
# gzipped. kubectl apply needs it (validation, and the schema its patch is built from).
OPENAPI_V1 = Path(__file__).resolve().parent.parent / "data" / "k8s" / "openapi" / "api__v1_openapi.json.gz"


@functools.lru_cache(maxsize=1)
def openapi_v3_core() -> bytes:
    """The recorded document, as bytes (served unchanged)."""
    return gzip.decompress(OPENAPI_V1.read_bytes())


def openapi_v3_root() -> dict[str, Any]:
    """``/openapi/v3``: each group-version's document by a content-hashed URL, as
    kube-openapi's ``handler3`` lists them (kubectl uses the URL as given; only the core group's
    document is recorded, so only ``api/v1`` is listed)."""
    digest = hashlib.sha512(openapi_v3_core()).hexdigest().upper()
    return {"paths": {"api/v1": {"serverRelativeURL": f"/openapi/v3/api/v1?hash={digest}"}}}
