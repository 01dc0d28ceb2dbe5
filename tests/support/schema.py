"""Drop the fields a typed Node does not have, as the real API server does when it decodes a
request body into its Go struct (unknown fields vanish; with ``fieldValidation=Strict`` they
would be an error instead). The field list is the official client's model of the API
(``kubernetes.client.models``: ``openapi_types`` and ``attribute_map``, generated from the
API's OpenAPI spec), not a list written here."""

from __future__ import annotations

import re
from functools import cache
from typing import Any

from kubernetes.client import models

_LIST = re.compile(r"^[Ll]ist\[(.+)\]$")  # "List[V1Taint]" (newer clients) or "list[V1Taint]"
_DICT = re.compile(r"^[Dd]ict[\[(]str, (.+)[\])]$")  # "Dict[str, str]" or "dict(str, str)"


@cache
def _fields(model: str) -> dict[str, str] | None:
    """JSON field name -> type name of a client model (None: not a model, keep as is)."""
    cls = getattr(models, model, None)
    if cls is None or not hasattr(cls, "openapi_types"):
        return None
    return {cls.attribute_map[attr]: kind for attr, kind in cls.openapi_types.items()}


def prune(value: Any, kind: str = "V1Node") -> Any:
    """``value`` with every field unknown to ``kind`` removed, recursively."""
    if value is None:
        return None
    if match := _LIST.match(kind):
        return [prune(item, match.group(1)) for item in value] if isinstance(value, list) else value
    if match := _DICT.match(kind):
        return {k: prune(v, match.group(1)) for k, v in value.items()} if isinstance(value, dict) else value
    fields = _fields(kind)
    if fields is None or not isinstance(value, dict):
        return value
    return {key: prune(item, fields[key]) for key, item in value.items() if key in fields}


_GO_SCALARS = {"str": "string", "int": "int64", "bool": "bool", "datetime": "string", "float": "float64"}
_QUANTITY_MAPS = {("status", "capacity"), ("status", "allocatable")}  # resource.Quantity: checked in quantity.py


def _json_type(value: Any) -> str:
    """The JSON type name Go's encoding/json puts in an UnmarshalTypeError."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _go_type(kind: str) -> str:
    if match := _LIST.match(kind):
        return "[]" + _go_type(match.group(1))
    if match := _DICT.match(kind):
        return "map[string]" + _go_type(match.group(1))
    if kind in _GO_SCALARS:
        return _GO_SCALARS[kind]
    return "v1." + kind[2:] if kind.startswith("V1") else kind


def type_problem(value: Any, kind: str = "V1Node", path: tuple[str, ...] = (), owner: str = "") -> str | None:
    """The error Go's JSON decoding into the typed Node gives for the first wrong-typed field
    (``json: cannot unmarshal number into Go struct field ObjectMeta.metadata.labels of type
    string``), or None. JSON null is every type's zero value; quantities are left to
    ``quantity.parse``. The text follows encoding/json's UnmarshalTypeError (the struct that
    holds the field, the field's dotted JSON path, the Go type), not checked against a server."""
    if value is None or path in _QUANTITY_MAPS:
        return None

    def wrong() -> str:
        where = f"Go struct field {owner}.{'.'.join(path)}" if path else "Go value"
        return f"json: cannot unmarshal {_json_type(value)} into {where} of type {_go_type(kind)}"

    if match := _LIST.match(kind):
        if not isinstance(value, list):
            return wrong()
        return next((p for item in value if (p := type_problem(item, match.group(1), path, owner))), None)
    if match := _DICT.match(kind):
        if not isinstance(value, dict):
            return wrong()
        return next((p for item in value.values() if (p := type_problem(item, match.group(1), path, owner))), None)
    if kind in ("str", "datetime"):
        return None if isinstance(value, str) else wrong()
    if kind == "int":
        return None if isinstance(value, int) and not isinstance(value, bool) else wrong()
    if kind == "bool":
        return None if isinstance(value, bool) else wrong()
    fields = _fields(kind)
    if fields is None:  # "object": any JSON
        return None
    if not isinstance(value, dict):
        return wrong()
    struct = kind[2:] if kind.startswith("V1") else kind
    for key, item in value.items():
        if key in fields and (problem := type_problem(item, fields[key], path + (key,), struct)):
            return problem
    return None
