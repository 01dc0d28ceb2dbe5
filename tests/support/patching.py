"""The three PATCH flavours the API server accepts, with its error mapping.

* JSON merge patch (RFC 7386): maps merge, ``null`` deletes, lists replace.
* Strategic merge patch: like merge patch, except lists whose Go field has a
  ``patchMergeKey`` merge by that key. ``NodeSpec.Taints`` has none, so a taints list is
  replaced wholesale (reference section 2.4); conditions/addresses merge by ``type``.
  Directives ``$patch`` (replace/delete), ``$retainKeys``, ``$setElementOrder/...`` and
  ``$deleteFromPrimitiveList/...`` are honoured enough for kubectl.
* JSON patch (RFC 6902) via ``jsonpatch``: any op that cannot apply (failed ``test``,
  remove/replace of a missing path, add under a missing parent) is a 422 whose message is
  the server's generic text and whose cause carries the library's detail.
"""

from __future__ import annotations

import copy
from typing import Any, Mapping

import jsonpatch
import jsonpointer

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


def _merge_list(current: Any, patch: list, key: str | None, path: tuple[str, ...]) -> list:
    current = copy.deepcopy(current) if isinstance(current, list) else []
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


def json_patch(target: Any, ops: Any) -> Any:
    """RFC 6902, atomically (the target is not modified)."""
    if not isinstance(ops, list):
        raise PatchError(400, GENERIC_422,
                         "json: cannot unmarshal object into Go value of type jsonpatch.Patch")
    if len(ops) > MAX_JSON_PATCH_OPS:
        raise PatchError(413, f"The allowed maximum operations in a JSON patch is {MAX_JSON_PATCH_OPS}, "
                              f"got {len(ops)}")
    for op in ops:
        if not isinstance(op, Mapping) or op.get("op") not in ("add", "remove", "replace", "move", "copy", "test"):
            raise PatchError(422, GENERIC_422,
                             f"Unexpected kind: {op.get('op') if isinstance(op, Mapping) else op!r}")
    doc = copy.deepcopy(target)
    for op in ops:
        path = str(op.get("path", ""))
        try:
            doc = jsonpatch.JsonPatch([dict(op)]).apply(doc, in_place=True)
        except jsonpatch.JsonPatchTestFailed as err:
            raise PatchError(422, GENERIC_422, f"testing value {path} failed: test failed") from err
        except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException, KeyError, IndexError,
                TypeError, ValueError) as err:
            raise PatchError(422, GENERIC_422, _library_text(op["op"], path, op.get("from"))) from err
    return doc


def _library_text(op: str, path: str, source: Any) -> str:
    """evanphx/json-patch wording for an op that does not apply."""
    if op == "remove":
        return f"Unable to remove nonexistent key: {path.rsplit('/', 1)[-1]}: missing value"
    if op == "replace":
        return f"replace operation does not apply: doc is missing key: {path}: missing value"
    if op in ("move", "copy"):
        return f"{op} operation does not apply: doc is missing from path: {source}: missing value"
    return f"{op} operation does not apply: doc is missing path: \"{path}\": missing value"


def apply(content_type: str, target: Mapping[str, Any], body: Any) -> dict[str, Any]:
    """Apply a PATCH body of ``content_type`` to ``target``; raises ``PatchError``."""
    kind = (content_type or "").split(";")[0].strip().lower()
    if kind == JSON_PATCH:
        result = json_patch(target, body)
    elif kind == MERGE:
        if not isinstance(body, Mapping):
            raise PatchError(400, GENERIC_422,
                             "json: cannot unmarshal array into Go value of type map[string]interface {}")
        result = merge_patch(target, body)
    elif kind == STRATEGIC:
        if not isinstance(body, Mapping):
            raise PatchError(400, GENERIC_422,
                             "json: cannot unmarshal array into Go value of type map[string]interface {}")
        result = strategic_merge_patch(target, body)
    else:
        raise PatchError(415, f"the body of the request was in an unknown format - accepted media types include: "
                              f"{JSON_PATCH}, {MERGE}, {STRATEGIC}, {APPLY}")
    if not isinstance(result, dict):
        raise PatchError(422, GENERIC_422,
                         "the patched document is not an object")
    return result
