"""The ResourceSlice admission policy (daemonset.yaml and the chart), evaluated with cel-python
as the API server evaluates a ValidatingAdmissionPolicy: match conditions, variables in order,
validations. The slices under review are the ones the real writer sends to the in-repo API
server (create, update, delete). Allowed: this node's slices; denied: another node's, a token
without a node claim; other users are not matched."""

from __future__ import annotations

from typing import Any

import celpy
import pytest
import yaml
from kubernetes import client

from agent.dra.slices import Node, SliceWriter, published_devices
from agent.dra.watched import WatchedSlices
from tests.conftest import REPO
from tests.dra.test_slices import pci, resources, sync
from tests.support.apiserver import FakeApiServer

AGENT = "system:serviceaccount:node-feature-agent:node-feature-agent"
CHART = REPO / "deploy/helm/node-feature-agent/templates/dra-admission-policy.yaml"


def _policy() -> dict[str, Any]:
    (policy,) = [d for d in yaml.safe_load_all((REPO / "daemonset.yaml").read_text())
                 if d and d["kind"] == "ValidatingAdmissionPolicy" and d["metadata"]["name"].endswith("-own-slices")]
    return policy


def review(policy: dict[str, Any], operation: str, obj: dict | None, old: dict | None, *, user: str = AGENT,
           node: str | None = "n1") -> list[str]:
    env = celpy.Environment()
    extra = {"authentication.kubernetes.io/node-name": [node]} if node else {}
    activation: dict[str, Any] = {
        "request": celpy.json_to_cel({"operation": operation, "userInfo": {"username": user, "extra": extra}}),
        "object": celpy.json_to_cel(obj), "oldObject": celpy.json_to_cel(old)}
    spec = policy["spec"]
    if not all(bool(env.program(env.compile(c["expression"])).evaluate(activation)) for c in spec["matchConditions"]):
        return []
    values: dict[str, Any] = {}
    for variable in spec["variables"]:
        values[variable["name"]] = env.program(env.compile(variable["expression"])).evaluate(
            {**activation, "variables": celpy.celtypes.MapType({celpy.celtypes.StringType(k): v
                                                                for k, v in values.items()})})
    activation["variables"] = celpy.celtypes.MapType({celpy.celtypes.StringType(k): v for k, v in values.items()})
    failed = []
    for validation in spec["validations"]:
        result = env.program(env.compile(validation["expression"])).evaluate(activation)
        assert not isinstance(result, celpy.CELEvalError), result
        if not bool(result):
            failed.append(validation["reason"])
    return failed


@pytest.fixture(scope="module")
def writes() -> list[tuple[str, dict | None, dict | None]]:
    """(operation, object, oldObject) of each write the real writer makes: create, update, delete."""
    with FakeApiServer() as api:
        uid = api.add_node("n1")["metadata"]["uid"]
        api_client = client.ApiClient(api.client_configuration())
        w = SliceWriter(api_client, Node("n1", uid), "v1", WatchedSlices(api_client, "n1", "v1").start())
        try:
            sync(w, published_devices(resources(pci(1)), taints=False).devices)
            sync(w, published_devices(resources(pci(1), pci(2)), taints=False).devices)
            stored = api.store.list("resourceslices.resource.k8s.io")[0][0]
            w.delete_all()
        finally:
            w.watched.stop()
        bodies = [r.body for r in api.requests if "/resourceslices" in r.path and r.method in ("POST", "PUT")]
    return [("CREATE", bodies[0], None), ("UPDATE", bodies[1], stored), ("DELETE", None, stored)]


def test_the_agents_own_writes_are_admitted(writes):
    for operation, obj, old in writes:
        assert review(_policy(), operation, obj, old) == [], operation


def test_another_nodes_slices_and_a_token_without_a_node_are_denied(writes):
    for operation, obj, old in writes:
        assert review(_policy(), operation, obj, old, node="n2") == ["Forbidden"], operation
        assert "Forbidden" in review(_policy(), operation, obj, old, node=None)


def test_other_users_are_not_matched(writes):
    for operation, obj, old in writes:
        assert review(_policy(), operation, obj, old, user="system:serviceaccount:kube-system:other", node="n2") == []


def test_the_chart_ships_the_same_rules():
    text = CHART.read_text()
    for validation in _policy()["spec"]["validations"]:
        assert validation["expression"] in text
    for variable in _policy()["spec"]["variables"]:
        assert variable["expression"] in text
