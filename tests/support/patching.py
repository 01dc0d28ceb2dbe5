"""The three PATCH flavours the API server accepts, with its error mapping.

* JSON merge patch (RFC 7386): maps merge, ``null`` deletes, lists replace.
* Strategic merge patch: like merge patch, except lists whose Go field has a
  ``patchMergeKey`` merge by that key. ``NodeSpec.Taints`` has none, so a taints list is
  replaced wholesale (reference section 2.4); conditions/addresses merge by ``type``.
  Directives ``$patch`` (replace/delete), ``$retainKeys``, ``$setElementOrder/...`` and
  ``$deleteFromPrimitiveList/...`` are honoured enough for kubectl.
* JSON patch (RFC 6902) as evanphx/json-patch v4 applies it (the library kube-apiserver
  uses). An op that cannot apply (failed ``test``, remove of a missing key, add under a
  missing parent) is a 422 built as ``patch.go`` builds it:
  ``errors.NewGenericServerResponse(422, "", GroupResource{}, "", err.Error(), 0, false)``,
  i.e. reason ``Invalid``, the generic message, ``details: {}`` and no causes: the library's
  text never reaches the client. A body that is not a list of objects is a 400 with Go's
  decoding text (``errors.NewBadRequest``).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY = "application/apply-patch+yaml"
MAX_JSON_PATCH_OPS = 10_000
GENERIC_422 = "the server rejected our request due to an error in our request"

# Go ``patchMergeKey`` tags on the Node (and Pod) fields a test could touch; None = set of primitives
MERGE_KEYS: dict[tuple[str, ...], str | None] = {
    ("status", "conditions"): "type",
    ("status", "addresses"): "type",
    ("metadata", "ownerReferences"): "uid",
    ("metadata", "finalizers"): None,
    ("spec", "containers"): "name",
    ("spec", "initContainers"): "name",
    ("spec", "schedulingGates"): "name",  # k8s.io/api core/v1 PodSpec: patchMergeKey:"name"
    ("spec", "tolerations"): None,  # no merge key upstream either: listed so nothing else guesses
}
NO_MERGE = {("spec", "tolerations"), ("spec", "taints")}


class PatchError(Exception):
    """A patch the server refuses: ``code`` 400/413/415/422 and the text for the Status."""

    def __init__(self, code: int, message: str, detail: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.detail = detail


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result = copy.deepcopy(dict(target)) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target: Any, patch: Any, path: tuple[str, ...] = ()) -> Any:
    """Kubernetes strategic merge patch for the fields listed in ``MERGE_KEYS``."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    directive = patch.get("$patch")
    if directive == "delete":
        return None
    base = {} if directive == "replace" or not isinstance(target, Mapping) else copy.deepcopy(dict(target))
    retain = patch.get("$retainKeys")
    for key, value in patch.items():
        if key in ("$patch", "$retainKeys") or key.startswith("$setElementOrder/"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            if isinstance(base.get(field), list) and isinstance(value, list):
                base[field] = [v for v in base[field] if v not in value]
            continue
        child = path + (key,)
        if value is None:
            base.pop(key, None)
        elif isinstance(value, list) and child in MERGE_KEYS and child not in NO_MERGE:
            base[key] = _merge_list(base.get(key), value, MERGE_KEYS[child], child)
        else:
            merged = strategic_merge_patch(base.get(key), value, child)
            if merged is None:
                base.pop(key, None)
            else:
                base[key] = merged
    if isinstance(retain, list):
        base = {k: v for k, v in base.items() if k in retain}
    return base


def _merge_list(existing: Any, patch: list[Any], key: str | None, path: tuple[str, ...]) -> list[Any]:
    current: list[Any] = copy.deepcopy(existing) if isinstance(existing, list) else []
    if key is None:  # a set of primitives
        return current + [v for v in patch if v not in current]
    if any(isinstance(item, Mapping) and item.get("$patch") == "replace" for item in patch):
        return [copy.deepcopy(i) for i in patch if not (isinstance(i, Mapping) and i.get("$patch"))]
    for item in patch:
        if not isinstance(item, Mapping) or key not in item:
            raise PatchError(400, f"map: {item!r} does not contain declared merge key: {key}")
        index = next((n for n, old in enumerate(current) if isinstance(old, Mapping) and old.get(key) == item[key]), None)
        if item.get("$patch") == "delete":
            if index is not None:
                current.pop(index)
            continue
        if index is None:
            current.append(strategic_merge_patch({}, item, path))
        else:
            current[index] = strategic_merge_patch(current[index], item, path)
    return current


_INT = re.compile(r"^[+-]?[0-9]+$")  # what Go's strconv.Atoi accepts (leading zeros and a sign too)
_MISSING = object()


class _OpFailed(Exception):
    """One JSON-patch op that does not apply (the server answers 422, without this text)."""


def _atoi(key: str) -> int:
    if not _INT.match(key):
        raise _OpFailed(f'strconv.Atoi: parsing "{key}": invalid syntax')
    return int(key)


def _unescape(token: str) -> str:
    """RFC 6901 in one left-to-right pass (``~01`` is ``~1``), as Go's strings.Replacer does."""
    return re.sub(r"~[01]", lambda m: "/" if m.group(0) == "~1" else "~", token)


def _get(container: Any, key: str) -> Any:
    """evanphx ``get``: an object's missing key is null, not an error; array indexes may be
    negative (counted from the end) and must be in range."""
    if isinstance(container, dict):
        return container.get(key)
    index = _atoi(key)
    if index < 0:
        if index < -len(container):
            raise _OpFailed(f"Unable to access invalid index: {index}")
        index += len(container)
    if index >= len(container):
        raise _OpFailed(f"Unable to access invalid index: {index}")
    return container[index]


def _add(container: Any, key: str, value: Any) -> None:
    if isinstance(container, dict):
        container[key] = value
        return
    if key == "-":
        container.append(value)
        return
    index = _atoi(key)
    size = len(container) + 1
    if index >= size or index < -size:
        raise _OpFailed(f"Unable to access invalid index: {index}")
    container.insert(index + size if index < 0 else index, value)


def _remove(container: Any, key: str) -> None:
    if isinstance(container, dict):
        if key not in container:
            raise _OpFailed(f"Unable to remove nonexistent key: {key}")
        del container[key]
        return
    index = _atoi(key)
    if index >= len(container) or index < -len(container):
        raise _OpFailed(f"Unable to access invalid index: {index}")
    del container[index]


def _set(container: Any, key: str, value: Any) -> None:
    if isinstance(container, dict):
        container[key] = value
        return
    index = _atoi(key)
    container[index + len(container) if index < 0 else index] = value


def _parent(doc: Any, path: str) -> tuple[Any, str] | None:
    """evanphx ``findObject``: the container holding the last token, or None when a step on
    the way is missing, null or not a container."""
    tokens = path.split("/")
    if len(tokens) < 2:
        return None
    node = doc
    for token in tokens[1:-1]:
        try:
            node = _get(node, _unescape(token))
        except _OpFailed:
            return None
        if not isinstance(node, (dict, list)):
            return None
    return node, _unescape(tokens[-1])


def _equal(a: Any, b: Any) -> bool:
    """Deep equality without Python's ``1 == 1.0 == True`` (Go compares the JSON texts)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def _field(op: Mapping[str, Any], name: str, kind: str) -> str:
    value = op.get(name)
    if not isinstance(value, str):
        raise _OpFailed(f"{kind} operation failed to decode {name}")
    return value


def _apply_op(doc: Any, op: Mapping[str, Any]) -> Any:
    kind = op.get("op") if isinstance(op.get("op"), str) else "unknown"
    value = copy.deepcopy(op.get("value"))  # absent and null are both null in Go
    if kind in ("add", "remove", "replace", "test"):
        path = _field(op, "path", kind)
        if kind == "replace" and path == "":
            if not isinstance(value, (dict, list)):
                raise _OpFailed("replace operation value must be object or array")
            return value
        if kind == "test" and path == "":
            if not _equal(doc, value):
                raise _OpFailed(f"testing value {path} failed: test failed")
            return doc
        found = _parent(doc, path)
        if found is None:
            raise _OpFailed(f"{kind} operation does not apply: doc is missing path: {path}")
        container, key = found
        if kind == "add":
            _add(container, key, value)
        elif kind == "remove":
            _remove(container, key)
        elif kind == "replace":
            _get(container, key)
            _set(container, key, value)
        else:
            current = _get(container, key)
            if current is None:
                if op.get("value") is not None:
                    raise _OpFailed(f"testing value {path} failed: test failed")
            elif "value" not in op or not _equal(current, value):
                raise _OpFailed(f"testing value {path} failed: test failed")
        return doc
    if kind in ("move", "copy"):
        return _move_or_copy(doc, op, kind)
    raise _OpFailed(f"Unexpected kind: {kind}")


def _move_or_copy(doc: Any, op: Mapping[str, Any], kind: str) -> Any:
    source = _field(op, "from", kind)
    found = _parent(doc, source)
    if found is None:
        raise _OpFailed(f"{kind} operation does not apply: doc is missing from path: {source}")
    container, key = found
    moved = _get(container, key)
    if kind == "move":
        _remove(container, key)
    else:
        moved = copy.deepcopy(moved)
    path = _field(op, "path", kind)
    found = _parent(doc, path)
    if found is None:
        raise _OpFailed(f"{kind} operation does not apply: doc is missing destination path: {path}")
    _add(found[0], found[1], moved)
    return doc


def _go_json_type(value: Any) -> str:
    """The JSON type name Go's encoding/json puts in an UnmarshalTypeError."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def json_patch(target: Any, ops: Any) -> Any:
    """RFC 6902 as kube-apiserver applies it (evanphx/json-patch v4, checked against that
    library's answers to the RFC 6902 test suite: tests/data/k8s/evanphx_patch_corpus.json),
    atomically: ``target`` is not modified. Where evanphx departs from the RFC, this follows
    evanphx: negative array indexes count from the end, ``00`` is index 0, a missing ``value``
    is null, ``replace`` of a missing object key adds it, ``copy`` from a missing key copies
    null, ``add`` at the root path is an error."""
    if ops is None:  # JSON null decodes to an empty Patch
        ops = []
    if not isinstance(ops, list):
        raise PatchError(400, f"json: cannot unmarshal {_go_json_type(ops)} into Go value of type jsonpatch.Patch")
    for op in ops:
        if op is not None and not isinstance(op, Mapping):
            raise PatchError(400, f"json: cannot unmarshal {_go_json_type(op)} into Go value of type "
                                  "jsonpatch.Operation")
    ops = [op or {} for op in ops]  # a null op decodes to an empty map: "Unexpected kind: unknown"
    if len(ops) > MAX_JSON_PATCH_OPS:
        raise PatchError(413, f"Request entity too large: The allowed maximum operations in a JSON patch is "
                              f"{MAX_JSON_PATCH_OPS}, got {len(ops)}")
    if not isinstance(target, (dict, list)):
        raise PatchError(422, GENERIC_422, "json: cannot unmarshal into Go value of type jsonpatch.partialDoc")
    doc = copy.deepcopy(target)
    for op in ops:
        try:
            doc = _apply_op(doc, op)
        except _OpFailed as err:
            raise PatchError(422, GENERIC_422, str(err)) from err
    return doc


def apply(content_type: str, target: Mapping[str, Any], body: Any) -> dict[str, Any]:
    """Apply a PATCH body of ``content_type`` to ``target``; raises ``PatchError``."""
    kind = (content_type or "").split(";")[0].strip().lower()
    if kind == JSON_PATCH:
        result = json_patch(target, body)
    elif kind == MERGE:
        if not isinstance(body, (Mapping, list)):  # evanphx ErrBadJSONPatch -> errors.NewBadRequest
            raise PatchError(400, "Invalid JSON Patch")
        if not isinstance(body, Mapping):  # evanphx returns the array; the Node decoding fails (not checked)
            raise PatchError(400, "json: cannot unmarshal array into Go value of type v1.Node")
        result = merge_patch(target, body)
    elif kind == STRATEGIC:
        if not isinstance(body, Mapping):  # patch.go: json.Unmarshal into a map -> errors.NewBadRequest
            shape = "array" if isinstance(body, list) else "string" if isinstance(body, str) else "number"
            raise PatchError(400, f"json: cannot unmarshal {shape} into Go value of type map[string]interface {{}}")
        result = strategic_merge_patch(target, body)
    else:
        raise PatchError(415, f"the body of the request was in an unknown format - accepted media types include: "
                              f"{JSON_PATCH}, {MERGE}, {STRATEGIC}, {APPLY}")
    if not isinstance(result, dict):
        raise PatchError(422, GENERIC_422,
                         "the patched document is not an object")
    return result
