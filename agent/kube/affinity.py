"""A pod's required node placement: read it, and does it hold on a node? (pure; the pod guard
asks whether it still holds, placement reads the terms it tightens)

Scheduling rules a pod *requires* of its node: ``spec.nodeSelector`` (every key=value must be
a node label) and ``spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution``
(``nodeSelectorTerms`` are ORed; in a term, every ``matchExpressions``/``matchFields``
requirement must hold). Operators as the scheduler implements them
(``k8s.io/apimachinery/pkg/labels`` and ``component-helpers/scheduling/corev1``):
``In``/``NotIn`` (values), ``Exists``/``DoesNotExist`` (no values), ``Gt``/``Lt`` (exactly
one integer value compared with an integer label value; a non-integer label does not match).
An empty term, or an empty term list, matches nothing. ``matchFields`` supports
``metadata.name`` only, as the scheduler does.

Pod specs come from the API and are treated as hostile: a shape the scheduler would have
refused gives ``None`` ("cannot tell"), and the guard leaves such a pod alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")


class MalformedAffinity(ValueError):
    """The spec is malformed: no verdict."""


def _as_int(text: object) -> int | None:
    if not isinstance(text, str) or not text.strip():
        return None
    try:
        return int(text.strip(), 10)
    except ValueError:
        return None


def _requirement(expression: Any) -> tuple[str, str, list[str]]:
    """(key, operator, values) of a well-formed requirement; ``MalformedAffinity`` otherwise."""
    if not isinstance(expression, Mapping):
        raise MalformedAffinity("expression is not an object")
    key, operator, values = expression.get("key"), expression.get("operator"), expression.get("values") or []
    if not isinstance(key, str) or not key or operator not in OPERATORS or not isinstance(values, list) \
            or not all(isinstance(v, str) for v in values):
        raise MalformedAffinity(f"bad requirement {expression!r}")
    wrong = _values_problem(str(operator), values)
    if wrong:
        raise MalformedAffinity(f"{operator} {wrong}")
    return key, str(operator), values


def _values_problem(operator: str, values: list[str]) -> str:
    """What is wrong with the values for this operator ("" when nothing)."""
    if operator in ("In", "NotIn"):
        return "" if values else "needs values"
    if operator in ("Exists", "DoesNotExist"):
        return "takes no values" if values else ""
    return "" if len(values) == 1 and _as_int(values[0]) is not None else "needs one integer value"


def requirement_matches(expression: Any, values_by_key: Mapping[str, str]) -> bool:
    """One ``{key, operator, values}`` against a key -> value map; ``MalformedAffinity`` if malformed."""
    key, operator, values = _requirement(expression)
    present = key in values_by_key
    value = values_by_key.get(key)
    if operator == "In":
        return present and value in values
    if operator == "NotIn":
        return not present or value not in values
    if operator in ("Exists", "DoesNotExist"):
        return present if operator == "Exists" else not present
    number, bound = _as_int(value), _as_int(values[0])
    if number is None or bound is None:  # absent, or not an integer: no match
        return False
    return number > bound if operator == "Gt" else number < bound


def term_matches(term: Any, labels: Mapping[str, str], node_name: str) -> bool:
    if not isinstance(term, Mapping):
        raise MalformedAffinity("term is not an object")
    expressions = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not isinstance(expressions, list) or not isinstance(fields, list):
        raise MalformedAffinity("matchExpressions/matchFields must be lists")
    if not expressions and not fields:
        return False
    for field_req in fields:
        if not isinstance(field_req, Mapping) or field_req.get("key") != "metadata.name" \
                or field_req.get("operator") not in ("In", "NotIn"):
            raise MalformedAffinity(f"unsupported matchFields {field_req!r}")
    results = [requirement_matches(e, labels) for e in expressions]
    results += [requirement_matches(f, {"metadata.name": node_name}) for f in fields]
    return all(results)


def node_selector_matches(pod_spec: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    selector = pod_spec.get("nodeSelector") or {}
    if not isinstance(selector, Mapping):
        raise MalformedAffinity("nodeSelector is not an object")
    return all(isinstance(v, str) and labels.get(k) == v for k, v in selector.items())


def required_terms(pod_spec: Mapping[str, Any]) -> list[Any] | None:
    """The required nodeSelectorTerms, or None when the pod has no required node affinity."""
    affinity = pod_spec.get("affinity") or {}
    if not isinstance(affinity, Mapping):
        raise MalformedAffinity("affinity is not an object")
    node_affinity = affinity.get("nodeAffinity") or {}
    if not isinstance(node_affinity, Mapping):
        raise MalformedAffinity("nodeAffinity is not an object")
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is None:
        return None
    if not isinstance(required, Mapping):
        raise MalformedAffinity("required node affinity is not an object")
    terms = required.get("nodeSelectorTerms") or []
    if not isinstance(terms, list):
        raise MalformedAffinity("nodeSelectorTerms is not a list")
    return terms


def node_selector_terms(pod_spec: Mapping[str, Any]) -> list[Any]:
    """The required nodeSelectorTerms ([] when the pod has none); ``MalformedAffinity`` when
    the spec has a shape the API server would not have accepted."""
    return required_terms(pod_spec) or []


def pod_fits_node(pod_spec: Any, labels: Mapping[str, str], node_name: str = "") -> bool | None:
    """True if the pod's required placement matches the node's labels, False if not, None
    if the spec is malformed (do nothing with such a pod)."""
    if not isinstance(pod_spec, Mapping):
        return None
    try:
        if not node_selector_matches(pod_spec, labels):
            return False
        terms = required_terms(pod_spec)
        if terms is None:
            return True
        return any(term_matches(t, labels, node_name) for t in terms)
    except MalformedAffinity:
        return None


def referenced_label_keys(pod_spec: Any) -> frozenset[str]:
    """Label keys the pod's required placement mentions (to ask "did it depend on X?")."""
    if not isinstance(pod_spec, Mapping):
        return frozenset()
    keys: set[str] = set()
    selector = pod_spec.get("nodeSelector")
    if isinstance(selector, Mapping):
        keys.update(k for k in selector if isinstance(k, str))
    try:
        terms = required_terms(pod_spec) or []
    except MalformedAffinity:
        return frozenset(keys)
    for term in terms:
        if isinstance(term, Mapping) and isinstance(term.get("matchExpressions"), list):
            keys.update(e["key"] for e in term["matchExpressions"] if isinstance(e, Mapping) and isinstance(e.get("key"), str))
    return frozenset(keys)
