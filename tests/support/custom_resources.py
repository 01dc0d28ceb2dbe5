"""Custom resources for the test API server, defined by CustomResourceDefinitions as a real
server serves them: NFD's own CRDs (``tests/data/nfd/nfd-api-crds.yaml``, recorded unchanged
from kubernetes-sigs/node-feature-discovery 76e6cc8c ``deployment/base/nfd-crds/``).

What apiextensions-apiserver does and this module does too (tests/support/README.md lists
the rest): routes ``/apis/<group>/<version>[/namespaces/<ns>]/<plural>[/<name>]`` by the
CRD's scope; LIST (label selector, ``limit``/``continue`` paging) and WATCH (the server's
watch machinery), GET, POST, PUT, merge-patch PATCH, DELETE; on every write the structural
schema of ``openAPIV3Schema`` is applied as the real server applies it: unknown fields pruned
(``pkg/apiserver/schema/pruning``), non-nullable nulls without a default dropped
(``pkg/apiserver/schema/defaulting/prunenulls.go``), then types, ``required``, ``enum`` validated, each failure a
cause in a 422 ``Invalid`` (field path, ``Required value``, ``Unsupported value``, ``must be of
type``; the texts of ``k8s.io/apimachinery/pkg/util/validation/field`` and kube-openapi's
``validate``); ``metadata.name`` must be a DNS-1123 subdomain. A CRD not installed is a 404,
as for any unknown resource; ``uninstall`` removes a CRD with its objects.
"""

from __future__ import annotations

import base64
import copy
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

import yaml

from tests.support import patching, selectors, validation

if TYPE_CHECKING:
    from tests.support.apiserver import FakeApiServer, _Handler

NFD_CRDS = Path(__file__).resolve().parents[1] / "data" / "nfd" / "nfd-api-crds.yaml"
NOT_MINE = object()
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_TYPES: dict[str, type | tuple[type, ...]] = {"object": dict, "array": list, "string": str, "boolean": bool, "integer": int, "number": (int, float)}


def load_crds(path: Path = NFD_CRDS) -> dict[str, dict[str, Any]]:
    """plural -> CRD, for every CustomResourceDefinition in the file."""
    return {d["spec"]["names"]["plural"]: d for d in yaml.safe_load_all(path.read_text())
            if d and d.get("kind") == "CustomResourceDefinition"}


def prune(schema: dict[str, Any], value: Any) -> Any:
    """Drop fields the structural schema does not specify (no ``x-kubernetes-preserve-unknown-fields``)."""
    if isinstance(value, dict) and schema.get("type") == "object" and not schema.get("x-kubernetes-preserve-unknown-fields"):
        props, extra = schema.get("properties"), schema.get("additionalProperties")
        if props is not None:
            return {k: prune(props[k], v) for k, v in value.items() if k in props}
        if isinstance(extra, dict):
            return {k: prune(extra, v) for k, v in value.items()}
        return {} if extra is None and "metadata" not in schema else value
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [prune(schema["items"], v) for v in value]
    return value


def prune_nulls(schema: dict[str, Any] | None, value: Any) -> Any:
    """Drop a ``null`` field whose schema is not ``nullable`` and has no ``default``, as
    apiextensions-apiserver does before defaulting and validation
    (``pkg/apiserver/schema/defaulting/prunenulls.go`` ``PruneNonNullableNullsWithoutDefaults``,
    called by ``unstructuredDefaulter.Default`` in ``pkg/apiserver/customresource_handler.go``).
    A field with no schema (unknown, already pruned) is left as it is; list items are walked
    with the ``items`` schema, and a null list item is kept (validation refuses it)."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            sub = _field_schema(schema, key)
            if item is None and sub is not None and not sub.get("nullable") and "default" not in sub:
                continue
            out[key] = prune_nulls(sub, item)
        return out
    if isinstance(value, list):
        items = schema.get("items") if isinstance(schema, dict) else None
        return [prune_nulls(items if isinstance(items, dict) else None, item) for item in value]
    return value


def _field_schema(schema: dict[str, Any] | None, key: str) -> dict[str, Any] | None:
    if not isinstance(schema, dict):
        return None
    props, extra = schema.get("properties") or {}, schema.get("additionalProperties")
    if key in props:
        return dict(props[key])
    return extra if isinstance(extra, dict) else None


def _type_name(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer",
            float: "number", type(None): "null"}.get(type(value), "unknown")


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def validate(schema: dict[str, Any], value: Any, path: str) -> list[validation.Cause]:
    wanted = schema.get("type")
    if wanted and not (isinstance(value, _TYPES[wanted]) and not (wanted in ("integer", "number") and isinstance(value, bool))):
        shown = value if isinstance(value, str) else _type_name(value)
        return [validation.Cause("FieldValueTypeInvalid", f'Invalid value: "{_type_name(value)}": {path} in body must be '
                                 f'of type {wanted}: "{shown if wanted != "object" else _type_name(value)}"', path)]
    causes: list[validation.Cause] = []
    if "enum" in schema and value not in schema["enum"]:
        supported = ", ".join(json.dumps(e) for e in schema["enum"])
        causes.append(validation.Cause("FieldValueNotSupported",
                                       f"Unsupported value: {json.dumps(value)}: supported values: {supported}", path))
    if isinstance(value, dict):
        for name in schema.get("required", []):
            if name not in value or value[name] is None:
                causes.append(validation.Cause("FieldValueRequired", "Required value", _join(path, name)))
        props, extra = schema.get("properties") or {}, schema.get("additionalProperties")
        for key, item in value.items():
            sub = props.get(key) if key in props else (extra if isinstance(extra, dict) else None)
            if sub is not None:
                causes += validate(sub, item, _join(path, key))
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            causes += validate(schema["items"], item, f"{path}[{index}]")
    return causes


class CustomResources:
    """The CRDs one ``FakeApiServer`` serves; ``install``/``uninstall`` change them at run time."""

    def __init__(self, server: FakeApiServer, crds: dict[str, dict[str, Any]] | None = None) -> None:
        self.server = server
        self.available = crds if crds is not None else load_crds()
        self.installed: set[str] = set(self.available)

    def install(self, *plurals: str) -> None:
        self.installed |= set(plurals or self.available)

    def uninstall(self, *plurals: str) -> None:
        for plural in plurals or tuple(self.installed):
            self.installed.discard(plural)
            for (namespace, name) in list(self.server.store.objects.get(plural, {})):
                self.server.store.delete(plural, name, namespace)

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Create or replace ``obj`` (as ``kubectl apply`` ends), through the same validation."""
        plural, namespace = self._plural_of(obj), (obj.get("metadata") or {}).get("namespace")
        name = obj["metadata"]["name"]
        try:
            self.server.store.get(plural, name, namespace or "")
        except Exception:  # noqa: BLE001 - not found: create
            return self._write("POST", plural, namespace, None, obj)
        return self._write("PUT", plural, namespace, name, obj)

    def delete(self, kind: str, name: str, namespace: str = "") -> None:
        self.server.store.delete(self._plural_of({"kind": kind}), name, namespace)

    def _plural_of(self, obj: dict[str, Any]) -> str:
        return next(p for p, crd in self.available.items() if crd["spec"]["names"]["kind"] == obj.get("kind"))

    # -- routing --------------------------------------------------------------------------
    def dispatch(self, method: str, parts: list[str], query: dict[str, str], body: Any, content_type: str,
                 handler: _Handler) -> Any:
        """The answer for a request under ``/apis``, None after a watch streamed, or ``NOT_MINE``."""
        rest = parts[3:]
        namespace = None
        if len(rest) >= 2 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        crd = self.available.get(rest[0]) if rest else None
        if crd is None or parts[1] != crd["spec"]["group"]:
            return NOT_MINE
        version = crd["spec"]["versions"][0]["name"]
        plural = rest[0]
        namespaced = crd["spec"]["scope"] == "Namespaced"
        if parts[2] != version or plural not in self.installed or (namespace is not None and not namespaced) \
                or len(rest) > 2:
            from tests.support.apiserver import ApiError, status_body

            raise ApiError(404, status_body(404, "the server could not find the requested resource"))
        if len(rest) == 1:
            if method == "GET":
                return self._list(plural, namespace, query, handler)
            return 201, self._write("POST", plural, namespace, None, body)
        name = rest[1]
        if method == "GET":
            return 200, self.server.store.get(plural, name, namespace or "")
        if method == "DELETE":
            return 200, self.server.store.delete(plural, name, namespace or "")
        if method == "PATCH":
            current = self.server.store.get(plural, name, namespace or "")
            return 200, self._write("PUT", plural, namespace, name, patching.apply(content_type, current, body))
        return 200, self._write(method, plural, namespace, name, body)

    def _list(self, plural: str, namespace: str | None, query: dict[str, str], handler: _Handler) -> Any:
        match = selectors.selector(None, query.get("labelSelector"))
        if query.get("watch") in ("true", "1"):
            self.server._watch(plural, namespace, match, query, handler)
            return None
        start = int(base64.b64decode(query["continue"]).decode()) if query.get("continue") else 0
        limit = int(query["limit"]) if query.get("limit") else None
        page, rv = self.server.store.list(plural, namespace, match, start=start,
                                          limit=None if limit is None else limit + 1, shared=True)
        metadata: dict[str, Any] = {"resourceVersion": str(rv)}
        if limit is not None and len(page) > limit:
            page = page[:limit]
            metadata["continue"] = base64.b64encode(str(start + limit).encode()).decode()
        kind = self.available[plural]["spec"]["names"]["listKind"]
        group = self.available[plural]["spec"]["group"]
        version = self.available[plural]["spec"]["versions"][0]["name"]
        envelope = json.dumps({"apiVersion": f"{group}/{version}", "kind": kind, "metadata": metadata, "items": []},
                              separators=(",", ":")).encode()
        self._stream_list(handler, query, envelope.removesuffix(b"[]}") + b"[", page)
        return None

    def _stream_list(self, handler: _Handler, query: dict[str, str], head: bytes, items: list[dict[str, Any]]) -> None:
        """Send a LIST one object at a time (chunked), as kube-apiserver streams list encoding: a
        client that stops reading (a page it finds too large) stops the encoding, and a large LIST
        does not hold up the server's other requests."""
        from tests.support.apiserver import RequestRecord

        self.server._record(RequestRecord("GET", unquote(urlsplit(handler.path).path), query, None, "", 200,
                                          headers=dict(handler.headers.items())))
        try:
            handler.start_stream()
            handler.send_chunk(head)
            for index, item in enumerate(items):
                handler.send_chunk((b"," if index else b"") + json.dumps(item, separators=(",", ":")).encode())
            handler.send_chunk(b"]}")
            handler.end_stream("clean")
        except OSError:  # the client went away
            handler.close_connection = True

    def _write(self, method: str, plural: str, namespace: str | None, name: str | None, body: Any) -> dict[str, Any]:
        from tests.support.apiserver import ApiError, invalid_error, status_body

        crd = self.available[plural]
        names, group = crd["spec"]["names"], crd["spec"]["group"]
        version = crd["spec"]["versions"][0]
        if not isinstance(body, dict):
            raise ApiError(400, status_body(400, f"the body of the request must be a {names['kind']} object"))
        schema = version["schema"]["openAPIV3Schema"]
        obj = prune_nulls(schema, prune(schema, copy.deepcopy(body)))
        obj["apiVersion"], obj["kind"] = f"{group}/{version['name']}", names["kind"]
        meta: dict[str, Any] = body["metadata"] if isinstance(body.get("metadata"), dict) else {}
        obj["metadata"] = {k: v for k, v in meta.items() if k in ("name", "namespace", "labels", "annotations",
                                                                    "resourceVersion", "ownerReferences")}
        if crd["spec"]["scope"] == "Namespaced":
            obj["metadata"]["namespace"] = namespace or meta.get("namespace") or "default"
        else:
            obj["metadata"].pop("namespace", None)
        obj_name = obj["metadata"].get("name") or name or ""
        causes = [] if _SUBDOMAIN.fullmatch(obj_name) and len(obj_name) <= 253 else [validation.Cause(
            "FieldValueInvalid", f'Invalid value: "{obj_name}": a lowercase RFC 1123 subdomain must consist of lower '
            "case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
            "metadata.name")]
        causes += validate({k: v for k, v in schema.items() if k != "properties"} | {"properties": {
            k: v for k, v in schema["properties"].items() if k != "metadata"}}, obj, "")
        if causes:
            raise invalid_error(f"{names['kind']}.{group}", obj_name, causes)
        store, ns = self.server.store, obj["metadata"].get("namespace", "")
        if method == "POST":
            _fits_etcd(obj)
            return store.create(plural, obj)
        expected = obj["metadata"].pop("resourceVersion", None)

        def replace(current: dict[str, Any]) -> dict[str, Any]:
            if expected and expected != current["metadata"]["resourceVersion"]:
                raise ApiError(409, status_body(409, f'Operation cannot be fulfilled on {plural}.{group} "{obj_name}": '
                                                     "the object has been modified; please apply your changes to the "
                                                     "latest version and try again", name=obj_name, kind=plural))
            return _fits_etcd({**obj, "metadata": {**current["metadata"], **obj["metadata"]}})
        return store.update(plural, obj_name, replace, ns)[0]


#: etcd's ``--max-request-bytes`` default (``DefaultMaxRequestBytes = 1.5 * 1024 * 1024``, etcd
#: ``server/embed/config.go``); a custom resource is stored as JSON, so its JSON is what counts
ETCD_MAX_REQUEST_BYTES = 1536 * 1024


def _fits_etcd(obj: dict[str, Any]) -> dict[str, Any]:
    """A custom resource etcd would refuse: the 500 kube-apiserver answers with etcd's text
    (kubernetes/kubernetes #74600, #112152: ``etcdserver: request is too large``, code 500)."""
    from tests.support.apiserver import ApiError, status_body

    if len(json.dumps(obj, separators=(",", ":")).encode()) > ETCD_MAX_REQUEST_BYTES:
        raise ApiError(500, status_body(500, "etcdserver: request is too large"))
    return obj
