"""Run one of NFD's own rule-test cases through our engine: the rule parsed by the same parser
rule files go through, evaluated by ``run_rule`` over a feature set built from the case.

A case (``tests/data/nfd/``) gives a feature as NFD's three sets (``flags``, ``attributes``,
``instances``; a set that is absent is a nil Go map: the feature is not of that kind), a
``matchExpressions`` set and/or a ``matchName``, and NFD's answer. Go's ``nil`` and empty
slices of matched elements are the same answer here (no element).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from agent.features import Feature, Instance
from agent.rules.evaluate import run_rule
from agent.rules.nfr_parser import parse_rule_file

FEATURE = "test.feature"
GO_ONLY_OP = ""  # NFD's MatchAny: internal, the CRD's enum refuses it


@dataclass(frozen=True)
class Answer:
    matched: bool
    error: bool
    elements: list[dict[str, str]]
    labels: dict[str, str]
    vars: dict[str, str]


def build_feature(spec: dict[str, Any]) -> Feature | None:
    """NFD's three sets -> our Feature; None when the feature exists in none of them."""
    kinds: dict[str, Any] = {}
    if spec.get("flags") is not None:
        kinds["flags"] = frozenset(spec["flags"])
    if spec.get("attributes") is not None:
        kinds["attributes"] = dict(spec["attributes"])
    if spec.get("instances") is not None:
        kinds["instances"] = [Instance(attrs) for attrs in spec["instances"]]
    return Feature(**kinds) if kinds else None


def build_features(specs: dict[str, dict[str, Any]]) -> dict[str, Feature]:
    out = {}
    for name, spec in specs.items():
        feature = build_feature(spec)
        if feature is not None:
            out[name] = feature
    return out


def uses_go_only_op(case: dict[str, Any]) -> bool:
    exprs = list((case.get("matchExpressions") or {}).values())
    if case.get("matchName") is not None:
        exprs.append(case["matchName"])
    return any(e.get("op") == GO_ONLY_OP for e in exprs)


def rule_document(rule: dict[str, Any]) -> str:
    return yaml.safe_dump({
        "apiVersion": "nfd.k8s-sigs.io/v1alpha1", "kind": "NodeFeatureRule",
        "metadata": {"name": "nfd-unit-test"}, "spec": {"rules": [rule]},
    }, sort_keys=False)


def run_document(rule: dict[str, Any], features: dict[str, Feature]) -> Answer:
    """Parse and run one rule; a rule the parser refuses is NFD's error."""
    rule_sets, problems = parse_rule_file("nfd-unit-test.yaml", rule_document(rule))
    if problems:
        return Answer(False, True, [], {}, {})
    (parsed,) = rule_sets[0].rules
    result = run_rule(parsed, features)
    elements = [e.template_item() for t in result.terms for e in t.elements] if result.matched else []
    return Answer(result.matched, bool(result.error), elements,
                  {o.key: o.value for o in result.labels}, {o.key: o.value for o in result.vars})


def run_case(case: dict[str, Any]) -> Answer:
    term: dict[str, Any] = {"feature": FEATURE}
    if "matchExpressions" in case:
        term["matchExpressions"] = case["matchExpressions"]
    if "matchName" in case:
        term["matchName"] = case["matchName"]
    return run_document({"name": case["name"], "labels": {"matched": "true"}, "matchFeatures": [term]},
                        build_features({FEATURE: case["feature"]}))
