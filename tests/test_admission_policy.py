"""The ValidatingAdmissionPolicy shipped in daemonset.yaml, evaluated with ``cel-python`` (an
implementation of the CEL spec nobody here wrote) the way the API server does: match
conditions first, then variables, then every validation against ``request``, ``object`` (the
Node after the patch) and ``oldObject``.

Allowed: every write the real agent makes (recorded from the in-process agent against the
in-repo API server: first labelling with the startup taint, unplug, plug, clean) and edits in
the agent's namespaces. Denied: another Node, a token without a node claim, kubelet's and the
control plane's labels, node-restriction labels, foreign taints, core resources, conditions,
cordoning, finalizers. Other users (kubelet) are not matched at all.

Not checked here: that a real API server compiles these expressions (its CEL has Kubernetes'
library extensions and a type checker; we keep to standard CEL: has, all, exists, matches,
in). The manifests' schema test checks the object shape.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import Any

import celpy
import pytest
import yaml

from tests.conftest import REPO
from tests.faults.harness import NODE, Ledger, seed_node
from tests.runtime.helpers import wait_for
from tests.support.apiserver import FakeApiServer

DAEMONSET = REPO / "daemonset.yaml"
CHART_POLICY = REPO / "deploy/helm/node-feature-agent/templates/validatingadmissionpolicy.yaml"
AGENT_USER = "system:serviceaccount:node-feature-agent:node-feature-agent"
RESOURCES_RECORD = "node-feature-agent.io/owned-extended-resources"


def _policy_from(text: str) -> dict:
    (policy,) = [d for d in yaml.safe_load_all(text) if d and d["kind"] == "ValidatingAdmissionPolicy"
                 and d["metadata"]["name"].endswith("-own-node")]
    return policy


POLICY = _policy_from(DAEMONSET.read_text())
ENV = celpy.Environment()


def _program(expression: str):
    return ENV.program(ENV.compile(expression))


class Admission:
    """The policy's CEL, compiled once; ``review`` answers like the API server would."""

    def __init__(self, policy: dict) -> None:
        spec = policy["spec"]
        self.conditions = [_program(c["expression"]) for c in spec.get("matchConditions", [])]
        self.variables = [(v["name"], _program(v["expression"])) for v in spec.get("variables", [])]
        self.validations = [(_program(v["expression"]), v.get("message") or v.get("messageExpression"))
                            for v in spec["validations"]]

    def review(self, old: dict, new: dict, *, user: str = AGENT_USER, node_claim: str | None = NODE,
               subresource: str = "") -> list[str]:
        """Messages of the validations that fail; [] = admitted (or not matched)."""
        extra = {"authentication.kubernetes.io/node-name": [node_claim]} if node_claim else {}
        request = {"operation": "UPDATE", "subResource": subresource, "userInfo": {"username": user, "extra": extra}}
        activation: dict[str, Any] = {"request": celpy.json_to_cel(request), "object": celpy.json_to_cel(new),
                                      "oldObject": celpy.json_to_cel(old)}
        if not all(bool(c.evaluate(activation)) for c in self.conditions):
            return []
        values = {}
        for name, program in self.variables:
            values[name] = program.evaluate({**activation, "variables": celpy.json_to_cel(dict(values))})
        activation["variables"] = celpy.celtypes.MapType({celpy.celtypes.StringType(k): v for k, v in values.items()})
        failed = []
        for program, message in self.validations:
            result = program.evaluate(activation)
            if isinstance(result, celpy.CELEvalError):
                raise AssertionError(f"CEL error (the API server would deny with failurePolicy Fail): {result}")
            if not bool(result):
                failed.append(message)
        return failed


ADMISSION = Admission(POLICY)


def converged_node() -> dict:
    """A labelled Node as the agent leaves it (from the in-process agent run below)."""
    return copy.deepcopy(AGENT_WRITES[-1][1]) if AGENT_WRITES else {}


def _record_agent_writes() -> list[tuple[dict, dict]]:
    import tempfile
    from pathlib import Path

    from tests.faults.harness import Harness

    with FakeApiServer() as server, tempfile.TemporaryDirectory() as tmp:
        seed_node(server)
        ledger = Ledger(server)
        harness = Harness(Path(tmp), server, retries=1)
        try:
            harness.start()
            harness.wait_converged(what="first labelling")
            harness.unplug()
            harness.wait_converged(what="unplugged")
            harness.plug()
            harness.wait_converged(what="plugged")
        finally:
            harness.close()
        pairs = ledger.agent_writes()
        labelled = pairs[-1][1]
        # clean: the agent removes everything it owns
        from agent.reconcile import Reconciler
        from agent.reconcile.node_api import NodeApi

        Reconciler(NodeApi.from_configuration(server.client_configuration()), NODE, emit_events=False).clean()
        wait_for(lambda: len(ledger.agent_writes()) > len(pairs), what="clean wrote")
        return ledger.agent_writes() + [(labelled, labelled)]


AGENT_WRITES = _record_agent_writes()


def test_every_write_the_real_agent_makes_is_admitted():
    assert len(AGENT_WRITES) >= 6  # labels+record, status, startup taint; unplug x2; plug x2; clean
    kinds = set()
    for old, new in AGENT_WRITES:
        kinds |= {k for k in ("labels", "annotations") if old["metadata"].get(k) != new["metadata"].get(k)}
        kinds |= {"taints"} if old["spec"].get("taints") != new["spec"].get("taints") else set()
        kinds |= {"capacity"} if old["status"].get("capacity") != new["status"].get("capacity") else set()
        assert ADMISSION.review(old, new) == [], f"rv {new['metadata']['resourceVersion']}"
    assert kinds == {"labels", "annotations", "taints", "capacity"}  # the run exercised every kind
    # the unplug's /status write removes the resource and trims the ownership record in one patch
    assert any(old["status"].get("capacity") != new["status"].get("capacity")
               and old["metadata"]["annotations"].get(RESOURCES_RECORD) != new["metadata"]["annotations"].get(RESOURCES_RECORD)
               for old, new in AGENT_WRITES)


def test_the_policy_judges_metadata_on_the_status_subresource_too():
    """/status applies metadata (``nodeStatusStrategy`` resets only ``spec``: kubernetes
    ``pkg/registry/core/node/strategy.go``), so ``nodes/status`` patch alone could
    edit any label: the policy matches ``nodes/status`` with the same rules. Admitted: our
    record trimmed with the resource it names; denied: kubelet's annotation or label."""
    assert "nodes/status" in POLICY["spec"]["matchConstraints"]["resourceRules"][0]["resources"]
    old, new = _edit(lambda n: (n["status"]["capacity"].pop("node-feature-agent.io/edgetpu"),
                                n["status"]["allocatable"].pop("node-feature-agent.io/edgetpu"),
                                n["metadata"]["annotations"].pop(RESOURCES_RECORD)))
    assert ADMISSION.review(old, new, subresource="status") == []
    for name in ("change kubelet's annotation", "change kubernetes.io/hostname", "add a node-restriction label"):
        fn, word = DENIED[name]
        failed = ADMISSION.review(*_edit(fn), subresource="status")
        assert any(word in m for m in failed), (name, failed)


def _edit(fn: Callable[[dict], None]) -> tuple[dict, dict]:
    old = converged_node()
    new = copy.deepcopy(old)
    fn(new)
    return old, new


ALLOWED = {
    "add a label in an NFD namespace": lambda n: n["metadata"]["labels"].update({"feature.node.kubernetes.io/x": "1"}),
    "add a label in a subdomain of it": lambda n: n["metadata"]["labels"].update({"intel.feature.node.kubernetes.io/gpu": "true"}),
    "change a generalized label": lambda n: n["metadata"]["labels"].update({"accelerators/edgetpu": "false"}),
    "remove a generalized label": lambda n: n["metadata"]["labels"].pop("accelerators/edgetpu"),
    "own annotation": lambda n: n["metadata"]["annotations"].update({"node-feature-agent.io/owned-labels": ""}),
    "add an extended resource": lambda n: (n["status"]["capacity"].update({"node-feature-agent.io/ncs2": "1"}),
                                          n["status"]["allocatable"].update({"node-feature-agent.io/ncs2": "1"})),
    "remove its extended resource": lambda n: (n["status"]["capacity"].pop("node-feature-agent.io/edgetpu"),
                                              n["status"]["allocatable"].pop("node-feature-agent.io/edgetpu")),
    "add a taint in its namespace": lambda n: n["spec"].setdefault("taints", []).append(
        {"key": "node-feature-agent.io/edgetpu", "effect": "NoSchedule"}),
    "add an NFD taint": lambda n: n["spec"].setdefault("taints", []).append(
        {"key": "feature.node.kubernetes.io/fpga", "value": "true", "effect": "PreferNoSchedule"}),
    "nothing": lambda n: None,
}


@pytest.mark.parametrize("name", sorted(ALLOWED))
def test_edits_in_the_agents_own_namespaces_are_admitted(name):
    assert ADMISSION.review(*_edit(ALLOWED[name])) == []


def _conditions(n):
    n["status"]["conditions"][0]["status"] = "False"


DENIED = {
    "change kubernetes.io/hostname": (lambda n: n["metadata"]["labels"].update({"kubernetes.io/hostname": "x"}), "labels"),
    "add the control-plane role label": (lambda n: n["metadata"]["labels"].update(
        {"node-role.kubernetes.io/control-plane": ""}), "labels"),
    "add a node-restriction label": (lambda n: n["metadata"]["labels"].update(
        {"node-restriction.kubernetes.io/secure": "true"}), "labels"),
    "remove a topology label": (lambda n: n["metadata"]["labels"].pop("topology.kubernetes.io/zone"), "labels"),
    "add an unprefixed label": (lambda n: n["metadata"]["labels"].update({"gpu": "true"}), "labels"),
    "change kubelet's annotation": (lambda n: n["metadata"]["annotations"].update(
        {"node.alpha.kubernetes.io/ttl": "30"}), "annotations"),
    "remove a team's taint": (lambda n: n["spec"].update(taints=[t for t in n["spec"]["taints"]
                                                                if t["key"] != "dedicated.example.com/team"]), "taints"),
    "change a team's taint": (lambda n: next(t for t in n["spec"]["taints"] if t["key"] == "dedicated.example.com/team")
                              .update(value="other"), "taints"),
    "taint outside the taint namespaces": (lambda n: n["spec"]["taints"].append(
        {"key": "accelerators/edgetpu", "value": "true", "effect": "NoSchedule"}), "taints"),
    "add the control-plane taint": (lambda n: n["spec"]["taints"].append(
        {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}), "taints"),
    "remove node.kubernetes.io/unreachable": (None, "taints"),
    "add an unprefixed taint": (lambda n: n["spec"]["taints"].append({"key": "dedicated", "value": "secure",
                                                                      "effect": "NoSchedule"}), "taints"),
    "cordon": (lambda n: n["spec"].update(unschedulable=True), "unschedulable"),
    "add a finalizer": (lambda n: n["metadata"].update(finalizers=["example.com/keep"]), "finalizers"),
    "change pods capacity": (lambda n: n["status"]["capacity"].update(pods="1000"), "extended resources"),
    "remove memory from allocatable": (lambda n: n["status"]["allocatable"].pop("memory"), "extended resources"),
    "add hugepages": (lambda n: n["status"]["capacity"].update({"hugepages-2Mi": "1Gi"}), "extended resources"),
    "change a condition": (_conditions, "status"),
    "change addresses": (lambda n: n["status"]["addresses"].append({"type": "InternalIP", "address": "10.0.0.9"}), "status"),
}


@pytest.mark.parametrize("name", sorted(DENIED))
def test_edits_outside_what_the_agent_owns_are_denied(name):
    fn, word = DENIED[name]
    if fn is None:  # the node controller's taint, present before: the agent may not remove it
        old = converged_node()
        old["spec"]["taints"].append({"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"})
        new = copy.deepcopy(old)
        new["spec"]["taints"].pop()
    else:
        old, new = _edit(fn)
    failed = ADMISSION.review(old, new)
    assert failed, f"{name} was admitted"
    assert any(word in m for m in failed), failed


def test_another_node_and_a_token_without_a_node_claim_are_denied():
    old, new = _edit(ALLOWED["add a label in an NFD namespace"])
    assert any("only modify the Node its pod runs on" in m for m in ADMISSION.review(old, new, node_claim="edge-2"))
    assert any("node-name claim" in m for m in ADMISSION.review(old, new, node_claim=None))


def test_other_users_are_not_matched():
    old, new = _edit(DENIED["cordon"][0])
    assert ADMISSION.review(old, new, user="system:node:edge-1", node_claim=None) == []
    assert ADMISSION.review(old, new, user="system:serviceaccount:kube-system:node-controller") == []


def test_the_chart_ships_the_same_policy():
    """The Helm template differs only in names (release, service account): same CEL."""
    text = re.sub(r"\{\{-? */\*.*?\*/ *-?\}\}", "", CHART_POLICY.read_text(), flags=re.S)  # template comments
    body = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("{{"))
    body = re.sub(r"\{\{.*?\}\}", "TEMPLATED", body)  # names and the service-account username
    chart = _policy_from(body.split("\n---\n")[0] if "\n---\n" in body else body)
    mine, theirs = POLICY["spec"], chart["spec"]
    assert theirs["variables"] == mine["variables"]
    assert theirs["validations"] == mine["validations"]
    assert theirs["matchConstraints"] == mine["matchConstraints"] and theirs["failurePolicy"] == "Fail"
    assert [c["name"] for c in theirs["matchConditions"]] == [c["name"] for c in mine["matchConditions"]]
    assert "nfa.serviceAccountName" in text and ".Release.Namespace" in text
