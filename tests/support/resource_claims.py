"""``resource.k8s.io`` ResourceClaims: what a DRA kubelet plugin reads and what a scheduler
writes (``status.allocation``), validated as kube-apiserver validates them.

* ``/apis/resource.k8s.io/{version}/namespaces/{ns}/resourceclaims[/{name}[/status]]``: GET,
  LIST, POST, PUT, PATCH (the three patch types), DELETE; ``/status`` GET/PUT/PATCH, in each
  version the server serves (``FakeApiServer(dra_versions=...)``). Stored in the ``v1`` shape;
  a ``v1beta1`` body and answer are converted (``dra_resources.to_stored``/``from_stored``: a
  request's fields inline instead of under ``exactly``); a ``v1beta1`` PATCH is applied to the
  stored ``v1`` object, which is exact for ``/status`` (the allocation has one shape in both).
* The main resource ignores ``status`` and ``/status`` ignores ``spec``
  (``pkg/registry/resource/resourceclaim/strategy.go``: ``PrepareForUpdate`` keeps the old
  status, ``statusStrategy.PrepareForUpdate`` the old spec).
* ``spec`` is immutable (``ValidateResourceClaimUpdate``: ``ValidateImmutableField(spec)``), and
  so is ``status.allocation`` once set, though it may be removed
  (``ValidateResourceClaimStatusUpdate``), both ``field is immutable``.
* Each allocation result (``validateDeviceRequestAllocationResult``, ``pkg/apis/resource/
  validation/validation.go``): ``request`` names a request of ``spec.devices.requests`` (or
  ``request/subrequest``), ``driver`` a DNS subdomain of at most 63 characters
  (``validateDriverName``), ``pool`` '/'-separated DNS subdomains of at most 253 characters in
  all (``validatePoolName``), ``device`` a DNS label (``validateDeviceName``), ``shareID``
  (a share of a device with ``allowMultipleAllocations``) a UUID in RFC 4122 normalized form
  (``validateUID``: 36 characters, lower-case hex; the ``error validating uid`` text for one
  that does not parse is paraphrased); at most 32 results (``AllocationResultsMaxSize``,
  ``pkg/apis/resource/types.go``). ``consumedCapacity`` is stored as given.

Everything else in the spec (selectors, CEL, config) is stored unvalidated.
"""

from __future__ import annotations

import copy
import re
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tests.support import patching, validation
from tests.support.apiserver import ApiError, invalid_error, status_body
from tests.support.store import Conflict

if TYPE_CHECKING:
    from tests.support.apiserver import FakeApiServer

GROUP_VERSION = "resource.k8s.io/v1"
PREFIX = ["apis", "resource.k8s.io", "v1", "namespaces"]
CLAIMS = "resourceclaims.resource.k8s.io"  # the store key: NotFound texts name the group resource
KIND = "ResourceClaim.resource.k8s.io"
ALLOCATION_RESULTS_MAX = 32
_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL_TEXT = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
               "start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
               "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')")
_SUBDOMAIN_TEXT = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
                   "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
                   "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")


def _name_causes(value: Any, field: str, *, label: bool, max_len: int) -> list[validation.Cause]:
    if not isinstance(value, str) or not value:
        return [validation.Cause("FieldValueRequired", "Required value", field)]
    causes = []
    if len(value) > max_len:
        causes.append(validation.Cause("FieldValueTooLong", f"Too long: may not be more than {max_len} bytes",
                                       field))
    pattern = _LABEL if label else _SUBDOMAIN
    if not pattern.fullmatch(value):
        causes.append(validation.invalid(field, value, _LABEL_TEXT if label else _SUBDOMAIN_TEXT))
    return causes


def _uid_causes(value: Any, field: str) -> list[validation.Cause]:
    """``validateUID`` (``pkg/apis/resource/validation/validation.go``)."""
    text = str(value)
    try:
        uuid.UUID(text)
    except ValueError:
        return [validation.invalid(field, text, "error validating uid: invalid UUID format")]
    if len(text) != 36 or text != text.lower():
        return [validation.invalid(field, text, "uid must be in RFC 4122 normalized form, "
                                   "`xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` with lowercase hexadecimal characters")]
    return []


def _request_names(claim: Mapping[str, Any]) -> set[str]:
    names: set[str] = set()
    for request in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
        if isinstance(request, dict) and isinstance(request.get("name"), str):
            names.add(request["name"])
            names |= {f"{request['name']}/{s.get('name')}" for s in request.get("firstAvailable") or []
                      if isinstance(s, dict)}
    return names


def validate_allocation(claim: Mapping[str, Any]) -> list[validation.Cause]:
    allocation = (claim.get("status") or {}).get("allocation")
    if allocation is None:
        return []
    results = ((allocation.get("devices") or {}).get("results") or []) if isinstance(allocation, dict) else []
    path = "status.allocation.devices.results"
    if len(results) > ALLOCATION_RESULTS_MAX:
        return [validation.Cause("FieldValueTooMany",
                                 f"Too many: {len(results)}: must have at most {ALLOCATION_RESULTS_MAX} items", path)]
    known, causes = _request_names(claim), []
    for index, result in enumerate(results):
        at = f"{path}[{index}]"
        if not isinstance(result, dict):
            causes.append(validation.invalid(at, result, "must be an object"))
            continue
        if result.get("request") not in known:
            causes.append(validation.invalid(f"{at}.request", result.get("request"),
                                             "must be the name of a request in the claim or the name of a request "
                                             "and a subrequest separated by '/'"))
        causes += _name_causes(result.get("driver"), f"{at}.driver", label=False, max_len=63)
        pool = result.get("pool")
        if isinstance(pool, str) and pool and len(pool) <= 253:
            causes += [c for part in pool.split("/") for c in _name_causes(part, f"{at}.pool", label=False,
                                                                             max_len=253)]
        else:
            causes += _name_causes(pool, f"{at}.pool", label=False, max_len=253)
        causes += _name_causes(result.get("device"), f"{at}.device", label=True, max_len=63)
        if result.get("shareID") is not None:
            causes += _uid_causes(result["shareID"], f"{at}.shareID")
    return causes


def _immutable(field: str, value: Any) -> validation.Cause:
    return validation.invalid(field, value, "field is immutable")


def _write(server: FakeApiServer, method: str, namespace: str, name: str | None, sub: str | None, body: Any,
           content_type: str) -> tuple[int, Any]:
    store = server.store
    if method == "POST":
        claim = copy.deepcopy(body) if isinstance(body, dict) else {}
        meta = claim.setdefault("metadata", {})
        meta["namespace"] = namespace
        claim["kind"], claim["apiVersion"] = "ResourceClaim", GROUP_VERSION
        claim.pop("status", None)  # strategy.go PrepareForCreate: the status is the scheduler's
        causes = _name_causes(meta.get("name"), "metadata.name", label=False, max_len=253)
        if causes:
            raise invalid_error(KIND, str(meta.get("name") or ""), causes)
        return 201, store.create(CLAIMS, claim)
    assert name is not None

    def replace(current: dict[str, Any]) -> dict[str, Any]:
        new = copy.deepcopy(body) if method == "PUT" else patching.apply(content_type, current, body)
        if not isinstance(new, dict):
            raise ApiError(400, status_body(400, "the body of the request must be a ResourceClaim object"))
        wanted = (new.get("metadata") or {}).get("resourceVersion")
        if wanted not in (None, "") and str(wanted) != current["metadata"]["resourceVersion"]:
            raise Conflict(CLAIMS, name)
        new["kind"], new["apiVersion"] = "ResourceClaim", GROUP_VERSION
        if sub == "status":
            new["spec"] = current.get("spec")
            old_allocation = (current.get("status") or {}).get("allocation")
            new_allocation = (new.get("status") or {}).get("allocation")
            causes = validate_allocation(new)
            if old_allocation is not None and new_allocation is not None and new_allocation != old_allocation:
                causes.append(_immutable("status.allocation", new_allocation))
        else:
            new["status"] = current.get("status")
            causes = [_immutable("spec", new.get("spec"))] if new.get("spec") != current.get("spec") else []
        if causes:
            raise invalid_error(KIND, name, causes)
        return new

    try:
        return 200, store.update(CLAIMS, name, replace, namespace)[0]
    except Conflict as err:
        raise ApiError(409, status_body(409, str(err), name=name, kind=CLAIMS)) from err


def route(server: FakeApiServer, method: str, parts: list[str], query: Mapping[str, str], body: Any,
          content_type: str) -> tuple[int, Any] | None:
    from tests.support import dra_resources

    if parts[:2] != PREFIX[:2] or len(parts) < 6 or parts[3] != "namespaces" or parts[5] != "resourceclaims" \
            or len(parts) > 8:
        return None
    version = parts[2]
    if version not in server.dra_versions:
        raise ApiError(404, status_body(404, "the server could not find the requested resource"))
    if version == "v1":
        return _route_v1(server, method, parts, query, body, content_type)
    if method in ("POST", "PUT") and isinstance(body, dict):
        body = dra_resources.to_stored(body, version)
    code, answer = _route_v1(server, method, PREFIX + parts[4:], query, body, content_type)
    if isinstance(answer, dict) and answer.get("kind") == "ResourceClaim":
        answer = dra_resources.from_stored(answer, version, "ResourceClaim")
    elif isinstance(answer, dict) and answer.get("kind") == "ResourceClaimList":
        answer = dict(answer, apiVersion=f"resource.k8s.io/{version}",
                      items=[dra_resources.from_stored(i, version, "ResourceClaim") for i in answer["items"]])
    return code, answer


def _route_v1(server: FakeApiServer, method: str, parts: list[str], query: Mapping[str, str], body: Any,
              content_type: str) -> tuple[int, Any]:
    del query
    namespace, rest = parts[4], parts[6:]
    if not rest:
        if method == "GET":
            items, rv = server.store.list(CLAIMS, namespace)
            return 200, {"kind": "ResourceClaimList", "apiVersion": GROUP_VERSION,
                         "metadata": {"resourceVersion": str(rv)}, "items": items}
        if method == "POST":
            return _write(server, method, namespace, None, None, body, content_type)
    else:
        name, sub = rest[0], rest[1] if len(rest) > 1 else None
        if sub not in (None, "status"):
            raise ApiError(404, status_body(404, "the server could not find the requested resource"))
        if method == "GET":
            return 200, server.store.get(CLAIMS, name, namespace)
        if method == "DELETE" and sub is None:
            return 200, server.store.delete(CLAIMS, name, namespace)
        if method in ("PUT", "PATCH"):
            return _write(server, method, namespace, name, sub, body, content_type)
    raise ApiError(405, status_body(405, "the server does not allow this method on the requested resource"))
