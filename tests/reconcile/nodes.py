"""Test helpers: Node dicts shaped like the API's, and a local applier of our two patch types
(RFC 7386 merge patch, shared with the in-repo API server; RFC 6902 JSON patch via ``jsonpatch``) for pure convergence tests."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jsonpatch

from tests.support.patching import merge_patch


def node(labels=None, annotations=None, taints=None, capacity=None, allocatable=None, *, uid="uid-1", rv="1",
         name="node-a", status=True) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "uid": uid, "resourceVersion": rv, "labels": dict(labels or {}),
                     "annotations": dict(annotations or {})},
        "spec": {},
    }
    if taints:
        obj["spec"]["taints"] = [dict(t) for t in taints]
    if status:
        obj["status"] = {}
        if capacity is not None:
            obj["status"]["capacity"] = dict(capacity)
        if allocatable is not None:
            obj["status"]["allocatable"] = dict(allocatable)
    return obj


def apply_merge(obj: dict, patch: Mapping) -> dict:
    """Merge patch as the server applies it, with the resourceVersion precondition."""
    wanted_rv = (patch.get("metadata") or {}).get("resourceVersion")
    if wanted_rv is not None and wanted_rv != obj["metadata"]["resourceVersion"]:
        raise AssertionError("conflict")
    out = merge_patch(obj, patch)
    out["metadata"]["resourceVersion"] = str(int(obj["metadata"]["resourceVersion"]) + 1)
    return out


def apply_json(obj: dict, ops) -> dict:
    out = jsonpatch.apply_patch(obj, [dict(op) for op in ops])
    out["metadata"]["resourceVersion"] = str(int(obj["metadata"]["resourceVersion"]) + 1)
    return out
