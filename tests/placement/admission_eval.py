"""A MutatingAdmissionPolicy and a MutatingWebhookConfiguration evaluated as kube-apiserver
evaluates them, for tests: ``matchConstraints``/``rules`` (operation, resource), the
namespace and object label selectors, ``matchConditions`` in CEL, and for the policy its
``ApplyConfiguration`` mutation merged into the object.

CEL runs on cel-python (an implementation of the CEL spec nobody here wrote). Kubernetes adds
typed object construction (``Object{...}``, ``Object.spec{...}``; the doc string of
``ApplyConfiguration`` in k8s.io/api ``admissionregistration/v1beta1/types.go``): here
``Object`` is a value that can both be called (construct) and navigated (``Object.spec``),
and constructions become plain JSON objects.

The merge is server-side apply's for the fields the policy may touch, from the Pod's schema
markers (k8s.io/api ``core/v1/types.go``): maps (``metadata.labels``) merge key by key;
``spec.schedulingGates`` is ``+listType=map +listMapKey=name`` (merge by name). Any other list
is refused, as an apply configuration may not modify atomic lists.

Not checked here: that kube-apiserver's type checker accepts the expressions (its CEL has
Kubernetes' extensions and a typed environment; these stay within standard CEL).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import celpy
from celpy import celtypes
from celpy.adapter import json_to_cel
from celpy.evaluation import CELEvalError

from tests.support.scheduling import requirement_matches

LIST_MAP_KEYS: dict[tuple[str, ...], str] = {("spec", "schedulingGates"): "name"}
ENV = celpy.Environment()


def to_json(value: Any) -> Any:
    if isinstance(value, (celtypes.BoolType, bool)):
        return bool(value)
    if isinstance(value, (celtypes.IntType, celtypes.UintType)):
        return int(value)
    if isinstance(value, celtypes.StringType):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    return value


class ObjectType(celtypes.MessageType):
    """``Object``, ``Object.spec``...: navigable by field (the evaluator's ``member_dot`` asks a
    message ``get``) and callable with field initialisers (its ``member_object``)."""

    def __init__(self, path: tuple[str, ...] = ()) -> None:
        super().__init__(None)
        self.path = path

    def get(self, name: Any, default: Any = None) -> Any:
        return ObjectType(self.path + (str(name),))

    def __call__(self, fields: Any = None) -> celtypes.MapType:
        return celtypes.MapType(fields or {})


def _program(expression: str) -> Any:
    return ENV.program(ENV.compile(expression))


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A ``metav1.LabelSelector`` (matchLabels and matchExpressions); nil matches everything."""
    if not selector:
        return True
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    return all(requirement_matches(e, labels) for e in selector.get("matchExpressions") or [])


def _rules_match(rules: list[Mapping[str, Any]], operation: str) -> bool:
    return any(operation in r.get("operations", []) and "pods" in r.get("resources", [])
               and "" in r.get("apiGroups", []) for r in rules)


class Admission:
    """One policy (``kind: MutatingAdmissionPolicy``) or one webhook entry of a
    MutatingWebhookConfiguration (its selectors and conditions; the mutation is the webhook's)."""

    def __init__(self, doc: Mapping[str, Any]) -> None:
        if doc.get("kind") == "MutatingAdmissionPolicy":
            spec = doc["spec"]
            self.rules = spec["matchConstraints"]["resourceRules"]
            self.namespace_selector = spec["matchConstraints"].get("namespaceSelector")
            self.object_selector = spec["matchConstraints"].get("objectSelector")
            self.mutations = [_program(m["applyConfiguration"]["expression"]) for m in spec["mutations"]]
        else:
            spec = doc
            self.rules, self.mutations = spec["rules"], []
            self.namespace_selector, self.object_selector = spec.get("namespaceSelector"), spec.get("objectSelector")
        self.conditions = [(c["name"], _program(c["expression"])) for c in spec.get("matchConditions", [])]

    def matches(self, pod: Mapping[str, Any], namespace_labels: Mapping[str, str], operation: str = "CREATE") -> bool:
        if not _rules_match(self.rules, operation):
            return False
        if not selector_matches(self.namespace_selector, namespace_labels):
            return False
        if not selector_matches(self.object_selector, (pod.get("metadata") or {}).get("labels") or {}):
            return False
        activation = {"object": json_to_cel(dict(pod)), "oldObject": None,
                      "request": json_to_cel({"operation": operation})}
        for name, program in self.conditions:
            result = program.evaluate(activation)
            assert not isinstance(result, CELEvalError), f"matchCondition {name}: CEL error: {result}"
            if not bool(result):
                return False
        return True

    def mutate(self, pod: Mapping[str, Any]) -> dict[str, Any]:
        out = copy.deepcopy(dict(pod))
        activation = {"object": json_to_cel(dict(pod)), "Object": ObjectType()}
        for program in self.mutations:
            config = program.evaluate(activation)
            assert not isinstance(config, CELEvalError), f"mutation: CEL error: {config}"
            out = apply_configuration(out, to_json(config))
        return out


def apply_configuration(obj: Any, config: Any, path: tuple[str, ...] = ()) -> Any:
    if isinstance(config, dict):
        base = dict(obj) if isinstance(obj, dict) else {}
        for key, value in config.items():
            base[key] = apply_configuration(base.get(key), value, path + (key,))
        return base
    if isinstance(config, list):
        key = LIST_MAP_KEYS.get(path)
        if key is None:
            raise AssertionError(f"an apply configuration may not set the atomic list {'.'.join(path)}")
        merged = [dict(item) for item in (obj or [])]
        for item in config:
            found = next((m for m in merged if m.get(key) == item.get(key)), None)
            if found is None:
                merged.append(item)
            else:
                found.update(item)
        return merged
    return config
