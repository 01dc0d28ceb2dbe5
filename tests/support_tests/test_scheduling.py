"""``tests/support/scheduling.py`` against Kubernetes' own cases: component-helpers
``scheduling/corev1/nodeaffinity/nodeaffinity_test.go`` (kubernetes 04791b49)
``TestPodMatchesNodeSelectorAndAffinityTerms`` and ``TestNodeSelectorMatch``, transcribed to
the v1 JSON form with upstream names and answers."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.scheduling import affinity_matches, feasible_nodes, tolerates


def required(*terms: dict[str, Any]) -> dict[str, Any]:
    return {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}}}


def expr(key: str, op: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": op, **({"values": list(values)} if values else {})}


CASES: list[tuple[str, dict[str, Any], dict[str, str], str, bool]] = [
    ("no selector", {}, {}, "", True),
    ("missing labels", {"nodeSelector": {"foo": "bar"}}, {}, "", False),
    ("same labels", {"nodeSelector": {"foo": "bar"}}, {"foo": "bar"}, "", True),
    ("node labels are superset", {"nodeSelector": {"foo": "bar"}}, {"foo": "bar", "baz": "blah"}, "", True),
    ("node labels are subset", {"nodeSelector": {"foo": "bar", "baz": "blah"}}, {"foo": "bar"}, "", False),
    ("Pod with matchExpressions using In operator that matches the existing node",
     required({"matchExpressions": [expr("foo", "In", "bar", "value2")]}), {"foo": "bar"}, "", True),
    ("Pod with matchExpressions using Gt operator that matches the existing node",
     required({"matchExpressions": [expr("kernel-version", "Gt", "0204")]}), {"kernel-version": "0206"}, "", True),
    ("Pod with matchExpressions using NotIn operator that matches the existing node",
     required({"matchExpressions": [expr("mem-type", "NotIn", "DDR", "DDR2")]}), {"mem-type": "DDR3"}, "", True),
    ("Pod with matchExpressions using Exists operator that matches the existing node",
     required({"matchExpressions": [expr("GPU", "Exists")]}), {"GPU": "NVIDIA-GRID-K1"}, "", True),
    ("Pod with affinity that don't match node's labels won't schedule onto the node",
     required({"matchExpressions": [expr("foo", "In", "value1", "value2")]}), {"foo": "bar"}, "", False),
    ("Pod with a nil []NodeSelectorTerm in affinity, can't match the node's labels and won't schedule onto the node",
     {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": None}}}},
     {"foo": "bar"}, "", False),
    ("Pod with an empty []NodeSelectorTerm in affinity, can't match the node's labels and won't schedule onto the node",
     required(), {"foo": "bar"}, "", False),
    ("node matches field selector, but not labels (TestNodeSelectorMatch)",
     required({"matchExpressions": [expr("label_1", "In", "label_1_val")],
               "matchFields": [expr("metadata.name", "In", "host_1")]}), {}, "host_1", False),
    ("node matches field selector and label selector (TestNodeSelectorMatch)",
     required({"matchExpressions": [expr("label_1", "In", "label_1_val")],
               "matchFields": [expr("metadata.name", "In", "host_1")]}), {"label_1": "label_1_val"}, "host_1", True),
    ("second term matches (TestNodeSelectorMatch)",
     required({"matchExpressions": [expr("label_1", "In", "label_1_val")]},
              {"matchFields": [expr("metadata.name", "In", "host_1")]}), {}, "host_1", True),
]


@pytest.mark.parametrize(("name", "spec", "labels", "node_name", "want"), CASES, ids=[c[0] for c in CASES])
def test_upstream_node_affinity_cases(name: str, spec: dict[str, Any], labels: dict[str, str], node_name: str,
                                      want: bool) -> None:
    node = {"metadata": {"name": node_name or "node", "labels": labels}}
    assert affinity_matches({"spec": spec}, node) is want


def test_taints_need_a_matching_toleration_and_gated_pods_go_nowhere() -> None:
    taint = {"key": "node-feature-agent.io/arch", "value": "arm64", "effect": "NoSchedule"}
    assert tolerates({"key": "node-feature-agent.io/arch", "operator": "Equal", "value": "arm64", "effect": "NoSchedule"}, taint)
    assert not tolerates({"key": "node-feature-agent.io/arch", "operator": "Equal", "value": "amd64"}, taint)
    assert tolerates({"operator": "Exists"}, taint)
    nodes: list[dict[str, Any]] = [{"metadata": {"name": "a"}, "spec": {"taints": [taint]}}, {"metadata": {"name": "b"}},
             {"metadata": {"name": "c"}, "spec": {"taints": [dict(taint, effect="PreferNoSchedule")]}}]
    assert feasible_nodes({"spec": {}}, nodes) == ["b", "c"]
    assert feasible_nodes({"spec": {"schedulingGates": [{"name": "x.io/y"}]}}, nodes) == []
