"""``fieldSelector`` and ``labelSelector`` query parameters, as far as tests need them.

Field selectors: ``a.b=x``, ``a.b==x``, ``a.b!=x`` over dotted paths (``metadata.name``,
``spec.nodeName``, ``involvedObject.name``...). Label selectors: ``k=v``, ``k==v``, ``k!=v``,
``k``, ``!k``, ``k in (a,b)``, ``k notin (a,b)``. A malformed selector is a ``ValueError``
(the handler answers 400, as the real server does).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

Matcher = Callable[[Mapping[str, Any]], bool]
_SET_RE = re.compile(r"^\s*([^\s!=]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")


def _split(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for char in text:
        depth += char == "("
        depth -= char == ")"
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return [p.strip() for p in parts if p.strip()]


def _lookup(obj: Mapping[str, Any], path: str) -> str:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return "" if value is None else str(value)


# The field labels each resource supports (pkg/apis/core/v1/conversion.go
# AddFieldLabelConversionFunc); any other is a 400 "field label not supported: <label>".
SUPPORTED_FIELDS = {
    "nodes": {"metadata.name", "metadata.namespace", "spec.unschedulable"},
    "pods": {"metadata.name", "metadata.namespace", "spec.nodeName", "spec.restartPolicy", "spec.schedulerName",
             "spec.serviceAccountName", "spec.hostNetwork", "status.phase", "status.podIP", "status.podIPs",
             "status.nominatedNodeName"},
    "events": {"metadata.name", "metadata.namespace", "involvedObject.kind", "involvedObject.namespace",
               "involvedObject.name", "involvedObject.uid", "involvedObject.apiVersion",
               "involvedObject.resourceVersion", "involvedObject.fieldPath", "reason", "reportingComponent",
               "source", "type"},
}


def field_selector(text: str | None, resource: str | None = None) -> Matcher:
    terms = []
    for term in _split(text or ""):
        match = re.match(r"^([A-Za-z0-9_.]+)\s*(==|!=|=)\s*(.*)$", term)
        if not match:
            raise ValueError(f"invalid selector: '{text}'; can't understand '{term}'")
        if resource in SUPPORTED_FIELDS and match.group(1) not in SUPPORTED_FIELDS[resource]:
            raise ValueError(f"field label not supported: {match.group(1)}")
        terms.append((match.group(1), match.group(2) == "!=", match.group(3)))
    return lambda obj: all((_lookup(obj, path) != value) if negate else (_lookup(obj, path) == value)
                           for path, negate, value in terms)


def _value_in(key: str, values: set[str], labels: Mapping[str, str]) -> bool:
    return labels.get(key) in values


def _value_not_in(key: str, values: set[str], labels: Mapping[str, str]) -> bool:
    return labels.get(key) not in values


def _value_is(key: str, value: str, labels: Mapping[str, str]) -> bool:
    return key in labels and labels[key] == value


def _value_not(key: str, value: str, labels: Mapping[str, str]) -> bool:
    return labels.get(key) != value


def _absent(key: str, labels: Mapping[str, str]) -> bool:
    return key not in labels


def _present(key: str, labels: Mapping[str, str]) -> bool:
    return key in labels


def label_selector(text: str | None) -> Matcher:
    checks: list[Callable[[Mapping[str, str]], bool]] = []
    for term in _split(text or ""):
        set_match = _SET_RE.match(term)
        if set_match:
            key, op, values = set_match.group(1), set_match.group(2), {v.strip() for v in set_match.group(3).split(",")}
            checks.append(partial(_value_in if op == "in" else _value_not_in, key, values))
            continue
        match = re.match(r"^([^\s!=]+)\s*(==|!=|=)\s*([^\s=!]*)$", term)
        if match:
            key, op, value = match.groups()
            checks.append(partial(_value_not if op == "!=" else _value_is, key, value))
        elif re.match(r"^![^\s!=()]+$", term):
            checks.append(partial(_absent, term[1:]))
        elif re.match(r"^[^\s!=()]+$", term):
            checks.append(partial(_present, term))
        else:
            raise ValueError(f"unable to parse requirement: {term!r}")
    return lambda obj: all(check((obj.get("metadata") or {}).get("labels") or {}) for check in checks)


def selector(field: str | None, label: str | None, resource: str | None = None) -> Matcher:
    by_field, by_label = field_selector(field, resource), label_selector(label)
    return lambda obj: by_field(obj) and by_label(obj)
