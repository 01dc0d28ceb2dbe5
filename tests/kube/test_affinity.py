"""The pod guard's placement matcher against the scheduler's rules."""

import pytest

from agent.kube.affinity import pod_fits_node, referenced_label_keys

LABELS = {"accelerators/edgetpu": "true", "kubernetes.io/arch": "amd64", "cores": "8", "zone": "a"}


def required(*terms):
    return {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}}}


def expr(key, op, *values):
    out = {"key": key, "operator": op}
    if values:
        out["values"] = list(values)
    return out


@pytest.mark.parametrize("spec, fits", [
    ({}, True),
    ({"nodeSelector": {"accelerators/edgetpu": "true"}}, True),
    ({"nodeSelector": {"accelerators/edgetpu": "false"}}, False),
    ({"nodeSelector": {"accelerators/hailo": "true"}}, False),
    (required({"matchExpressions": [expr("accelerators/edgetpu", "Exists")]}), True),
    (required({"matchExpressions": [expr("accelerators/hailo", "Exists")]}), False),
    (required({"matchExpressions": [expr("accelerators/hailo", "DoesNotExist")]}), True),
    (required({"matchExpressions": [expr("zone", "In", "a", "b")]}), True),
    (required({"matchExpressions": [expr("zone", "In", "b")]}), False),
    (required({"matchExpressions": [expr("zone", "NotIn", "b")]}), True),
    (required({"matchExpressions": [expr("missing", "NotIn", "b")]}), True),
    (required({"matchExpressions": [expr("cores", "Gt", "4")]}), True),
    (required({"matchExpressions": [expr("cores", "Gt", "8")]}), False),
    (required({"matchExpressions": [expr("cores", "Lt", "9")]}), True),
    (required({"matchExpressions": [expr("zone", "Gt", "1")]}), False),    # non-integer label
    (required({"matchExpressions": [expr("missing", "Lt", "1")]}), False),
    # terms are ORed, expressions ANDed
    (required({"matchExpressions": [expr("zone", "In", "b")]}, {"matchExpressions": [expr("cores", "In", "8")]}), True),
    (required({"matchExpressions": [expr("zone", "In", "a"), expr("accelerators/hailo", "Exists")]}), False),
    (required(), False),                        # no terms: matches nothing
    (required({}), False),                      # empty term: matches nothing
    (required({"matchFields": [expr("metadata.name", "In", "node-a")]}), True),
    (required({"matchFields": [expr("metadata.name", "NotIn", "node-a")]}), False),
    # nodeSelector and affinity must both hold
    ({"nodeSelector": {"zone": "b"}, **required({"matchExpressions": [expr("zone", "Exists")]})}, False),
])
def test_placement(spec, fits):
    assert pod_fits_node(spec, LABELS, "node-a") is fits


@pytest.mark.parametrize("spec", [
    "not a dict",
    {"nodeSelector": ["x"]},
    {"affinity": "x"},
    required("term"),
    required({"matchExpressions": [expr("zone", "Bogus", "a")]}),
    required({"matchExpressions": [expr("zone", "In")]}),
    required({"matchExpressions": [expr("zone", "Exists", "a")]}),
    required({"matchExpressions": [expr("cores", "Gt", "x")]}),
    required({"matchExpressions": [expr("cores", "Gt", "1", "2")]}),
    required({"matchExpressions": [{"key": 5, "operator": "Exists"}]}),
    required({"matchFields": [expr("spec.unschedulable", "In", "x")]}),
    {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": "x"}}}},
])
def test_malformed_specs_give_no_verdict(spec):
    assert pod_fits_node(spec, LABELS, "node-a") is None


def test_referenced_keys():
    spec = {"nodeSelector": {"a": "1"}, **required({"matchExpressions": [expr("b", "Exists"), {"bad": 1}]},
                                                  {"matchExpressions": [expr("c", "In", "x")]})}
    assert referenced_label_keys(spec) == {"a", "b", "c"}
    assert referenced_label_keys(None) == frozenset()
