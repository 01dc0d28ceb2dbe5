"""Drop the fields a typed Node does not have, as the real API server does when it decodes a
request body into its Go struct (unknown fields vanish; with ``fieldValidation=Strict`` they
would be an error instead). The field list is the official client's model of the API
(``kubernetes.client.models``: ``openapi_types`` and ``attribute_map``, generated from the
API's OpenAPI spec), not a list written here."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from kubernetes.client import models

_LIST = re.compile(r"^[Ll]ist\[(.+)\]$")  # "List[V1Taint]" (newer clients) or "list[V1Taint]"
_DICT = re.compile(r"^[Dd]ict[\[(]str, (.+)[\])]$")  # "Dict[str, str]" or "dict(str, str)"


@lru_cache(maxsize=None)
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
