"""Kubernetes' own node validation cases (core ``validation_test.go``: TestValidateNode and
TestValidateNodeUpdate, their label, taint and resource cases; data in
tests/data/k8s/core_node_validation_cases.json with the source named), run against both
validators we have: the in-repo API server's (tests/support/validation.py, also over HTTP)
and the agent's (agent/k8s_validation.py and the reconciler's refusal step, which decide what
is never sent). The agent may be stricter than Kubernetes (it only ever writes whole-number
extended resources) but must refuse everything Kubernetes refuses.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
from kubernetes.client.exceptions import ApiException

from agent import k8s_validation as agent_side
from agent.desired import Provenance
from agent.reconcile.quantity import canonical_count
from agent.rules.desired_state import _Builder
from agent.rules.model import RuleOptions
from tests.support import validation as server_side
from tests.support.apiserver import FakeApiServer
from tests.support.store import NotFound

DATA = json.loads((Path(__file__).parent / "data" / "k8s" / "core_node_validation_cases.json").read_text())
CASES = DATA["cases"]


def server_causes(case: dict) -> list[server_side.Cause]:
    if case["validator"] == "ValidateNode":
        return server_side.validate_node(case["node"])
    return server_side.validate_node_update_only(case["node"])


def agent_refusals(node: dict) -> list[str]:
    """Everything the agent would refuse to send from this node's labels, taints and
    extended resources (the reconciler's own checks, in the order it runs them)."""
    meta, spec, status = node.get("metadata") or {}, node.get("spec") or {}, node.get("status") or {}
    reasons: list[str] = []
    for key, value in (meta.get("labels") or {}).items():
        reasons += agent_side.qualified_name_errors(key) + agent_side.label_value_errors(value)
    # Kubernetes' taint rules, as the builder of the desired state applies them (its namespace
    # policy, stricter than Kubernetes, is not the question here); the builder keeps one taint
    # per key and effect
    builder = _Builder(RuleOptions())
    taints = spec.get("taints") or []
    for taint in taints:
        key, value, effect = taint.get("key", ""), taint.get("value", ""), taint.get("effect", "")
        reasons += agent_side.taint_errors(key, value, effect)
        admitted = key if "/" in key else f"example.com/{key}"  # a namespace the policy admits
        builder.taint(admitted, value, effect, Provenance("case"))
    if len(builder.taints) + len(builder.problems) < len(taints):  # it keeps one taint per key and effect
        reasons.append("a second taint with one key and effect is not sent")
    for section in ("capacity", "allocatable"):
        for name, quantity in (status.get(section) or {}).items():
            if "/" in name:  # an extended resource: the only kind the agent writes
                reasons += agent_side.extended_resource_name_errors(name)
                if canonical_count(quantity) is None:
                    reasons.append(f"{name}={quantity}: not a whole number")
    return reasons


def test_the_data_names_its_source():
    assert "validation_test.go" in DATA["source"] and len(CASES) == 14


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["name"])
def test_the_api_servers_validation_agrees_with_kubernetes(case):
    causes = server_causes(case)
    if case["valid"]:
        assert causes == []
    else:
        assert causes and case["field"] in [c.field for c in causes], causes


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["name"])
def test_the_agent_refuses_what_kubernetes_refuses(case):
    reasons = agent_refusals(case["node"])
    assert bool(reasons) == (not case["valid"]), reasons


@pytest.fixture(scope="module")
def api():
    with FakeApiServer() as server:
        yield server


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["name"])
def test_over_http_the_test_api_server_answers_as_kubernetes(api, case):
    """The case's metadata and spec through a PUT of the main resource, its status through a
    PUT of /status (ValidateNode + ValidateNodeUpdate, and ValidateNodeUpdate: both run the
    label and resource rules)."""
    name = case["node"]["metadata"]["name"]
    with contextlib.suppress(NotFound):
        api.delete_node(name)
    api.add_node(name, labels={}, capacity={})
    core = api.core_api()
    current = json.loads(core.read_node(name, _preload_content=False).data)
    body = dict(current, metadata=dict(current["metadata"], labels=case["node"]["metadata"].get("labels") or {}),
                spec=dict(current["spec"], **(case["node"].get("spec") or {})))
    fields: list[str] = []
    for call, payload in ((core.replace_node, body), (core.replace_node_status, None)):
        if payload is None:
            fresh = json.loads(core.read_node(name, _preload_content=False).data)
            payload = dict(fresh, status=dict(fresh.get("status") or {}, **(case["node"].get("status") or {})))
        try:
            call(name, payload, _preload_content=False)
        except ApiException as err:
            assert err.status == 422, err.body
            fields += [c["field"] for c in json.loads(err.body)["details"]["causes"]]
    if case["valid"]:
        assert fields == []
    else:
        assert case["field"] in fields, fields


@pytest.mark.parametrize("key, value, effect, field", [
    ("dedicated\n", "x", "NoSchedule", "metadata.taints[0].key"),
    ("example.com/dedicated\n", "x", "NoSchedule", "metadata.taints[0].key"),
    ("dedicated", "true\n", "NoSchedule", "metadata.taints[0].value"),
    ("dedicated", "x", "NoSchedule\n", "metadata.taints[0].effect"),
])
def test_a_trailing_newline_in_a_taint_is_refused_on_both_sides(key, value, effect, field):
    """Go's ``$`` is the end of the text; Python's ``re`` ``$`` also matches before a final
    newline. Both validators use fullmatch, so these are refused as kube-apiserver refuses them."""
    node = {"metadata": {"name": "n"}, "spec": {"taints": [{"key": key, "value": value, "effect": effect}]}}
    assert field in [c.field for c in server_side.validate_node(node)]
    assert agent_refusals(node)
