"""The ownership record is a claim to check, not an order.

Whoever holds a node's credentials can edit its annotations; NodeRestriction still forbids a
kubelet to touch ``node-restriction.kubernetes.io/`` labels or ``node-role`` labels, and the
control plane owns ``node.kubernetes.io/*`` taints. A tampered record must never make the agent
remove those (an escalation), and a deleted record must be rebuilt, not forgotten. Real client,
real HTTP, the in-repo API server.
"""

from __future__ import annotations

import pytest

from agent.config import claim_policy
from agent.desired import (
    ANNOTATION_OWNED_LABELS,
    ANNOTATION_OWNED_RESOURCES,
    ANNOTATION_OWNED_TAINTS,
    OWNERSHIP_ANNOTATIONS,
    DesiredNodeState,
    Taint,
)
from agent.reconcile import NodeApi, Reconciler
from agent.reconcile.claims import ClaimPolicy
from agent.rules import RuleOptions, load_catalogue
from tests.conftest import REPO
from tests.support.apiserver import FakeApiServer

NODE = "node-a"
EDGETPU = "accelerators/edgetpu"
OUR_TAINT = Taint("example.com/edgetpu", "NoSchedule", "present")
WANT = DesiredNodeState(labels={EDGETPU: "true", "feature.node.kubernetes.io/usb-fe_1a6e_089a.present": "true"},
                        extended_resources={"node-feature-agent.io/edgetpu": "1"}, taints=(OUR_TAINT,))

FOREIGN_LABELS = {
    "kubernetes.io/hostname": NODE,
    "node-role.kubernetes.io/control-plane": "",
    "node-restriction.kubernetes.io/secure-zone": "true",
    "topology.kubernetes.io/zone": "z1",
    "team.k8s.io/owner": "infra",
}
FOREIGN_TAINTS = [
    {"key": "dedicated", "value": "secure", "effect": "NoSchedule"},
    {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": "2024-05-01T10:00:00Z"},
]


@pytest.fixture
def server():
    with FakeApiServer() as srv:
        srv.add_node(NODE, labels=dict(FOREIGN_LABELS), taints=[dict(t) for t in FOREIGN_TAINTS],
                     capacity={"cpu": "4", "memory": "8Gi", "pods": "110"})
        yield srv


def make(server, claims: ClaimPolicy = ClaimPolicy()) -> Reconciler:  # noqa: B008 - frozen, shared safely
    api = NodeApi.from_configuration(server.client_configuration(), request_timeout=(2.0, 5.0))
    return Reconciler(api, NODE, sleep=lambda _s: None, random=lambda: 0.0, claims=claims)


def plan_of(desired):
    return lambda _foreign: desired


def tamper(server, **records):
    def edit(node):
        node["metadata"].setdefault("annotations", {}).update(records)
        return node
    server.edit_node(NODE, edit)


def reasons(server) -> list[str]:
    return [e.get("reason") for e in server.events()]


def catalogue_policy(*startup: Taint) -> ClaimPolicy:
    """The shipped catalogue (it sets no taints) plus ``startup`` as ``--startup-taint``s."""
    catalogue = load_catalogue([str(REPO / "labels")], RuleOptions())
    return claim_policy(RuleOptions(), lambda: catalogue, startup)


@pytest.mark.parametrize("policy", [ClaimPolicy(), catalogue_policy(OUR_TAINT)], ids=["default", "catalogue"])
def test_a_tampered_record_never_removes_foreign_labels_or_taints(server, policy):
    rec = make(server, policy)
    assert rec.reconcile(plan_of(WANT)).ok
    labels_record = ",".join(sorted([EDGETPU, *FOREIGN_LABELS]))
    taints_record = ",".join(sorted([OUR_TAINT.to_string(), "dedicated=secure:NoSchedule",
                                     "node-role.kubernetes.io/control-plane:NoSchedule",
                                     "node.kubernetes.io/unreachable:NoExecute"]))
    tamper(server, **{ANNOTATION_OWNED_LABELS: labels_record, ANNOTATION_OWNED_TAINTS: taints_record,
                      ANNOTATION_OWNED_RESOURCES: "node-feature-agent.io/edgetpu,cpu,pods"})

    outcome = rec.reconcile(plan_of(DesiredNodeState()))  # the device left: remove what is ours
    assert outcome.ok
    node = server.node(NODE)
    labels = node["metadata"]["labels"]
    for key, value in FOREIGN_LABELS.items():
        assert labels.get(key) == value, key
    assert EDGETPU not in labels  # ours still goes
    taints = node["spec"].get("taints", [])
    for foreign in FOREIGN_TAINTS:
        assert foreign in taints
    assert all(t["key"] != OUR_TAINT.key for t in taints)
    assert node["status"]["capacity"]["cpu"] == "4" and node["status"]["capacity"]["pods"] == "110"
    # the record no longer lists what is not ours, and the operator is told
    assert not set(OWNERSHIP_ANNOTATIONS) & set(node["metadata"].get("annotations", {}))
    assert "OwnershipRecordRejected" in reasons(server)
    assert any("kubernetes.io/hostname" in str(p) for p in outcome.problems)


def test_an_unproducible_taint_key_is_not_claimed_under_the_catalogue_policy(server):
    """example.com/… passes the namespace policy but no shipped rule produces it."""
    rec = make(server, catalogue_policy())
    server.edit_node(NODE, lambda n: {**n, "spec": {**n["spec"], "taints": n["spec"]["taints"] + [
        {"key": "example.com/maintenance", "value": "x", "effect": "NoExecute"}]}})
    tamper(server, **{ANNOTATION_OWNED_TAINTS: "example.com/maintenance=x:NoExecute"})
    assert rec.reconcile(plan_of(DesiredNodeState())).ok
    assert {"key": "example.com/maintenance", "value": "x", "effect": "NoExecute"} in server.node(NODE)["spec"]["taints"]


@pytest.mark.parametrize("damage", ["deleted", "garbage"])
def test_a_missing_or_damaged_record_is_rebuilt_and_removal_works_again(server, damage):
    rec = make(server)
    assert rec.reconcile(plan_of(WANT)).ok

    def edit(node):
        ann = node["metadata"]["annotations"]
        for name in OWNERSHIP_ANNOTATIONS:
            if damage == "deleted":
                ann.pop(name, None)
            else:
                ann[name] = "!!! not, a record ,,, \u0000"
        return node
    server.edit_node(NODE, edit)

    restarted = make(server)  # a new process: no memory but the Node
    outcome = restarted.reconcile(plan_of(WANT))
    assert outcome.ok and outcome.writes >= 1
    ann = server.node(NODE)["metadata"]["annotations"]
    assert EDGETPU in ann[ANNOTATION_OWNED_LABELS].split(",")
    assert ann[ANNOTATION_OWNED_RESOURCES] == "node-feature-agent.io/edgetpu"
    # a taint on the Node is not adopted by a process that never held it: it may be an
    # identical one an admin set (agent.reconcile.claims); it stays, and is not the agent's
    assert ANNOTATION_OWNED_TAINTS not in ann
    assert "OwnershipRecordRebuilt" in reasons(server)

    assert restarted.reconcile(plan_of(DesiredNodeState())).ok  # unplugged: stale labels go
    node = server.node(NODE)
    assert EDGETPU not in node["metadata"]["labels"]
    assert "node-feature-agent.io/edgetpu" not in node["status"]["capacity"]
    assert node["metadata"]["labels"]["kubernetes.io/hostname"] == NODE
    assert OUR_TAINT.to_json() in node["spec"]["taints"]


def test_a_taint_record_deleted_under_a_running_agent_is_rebuilt_from_its_memory(server):
    producible = {OUR_TAINT.key}  # what the rules produce, edited below as a rule file would be
    rec = make(server, ClaimPolicy(taint_keys=lambda: frozenset(producible)))
    assert rec.reconcile(plan_of(WANT)).ok
    server.edit_node(NODE, lambda n: {**n, "metadata": {**n["metadata"], "annotations": {
        k: v for k, v in n["metadata"]["annotations"].items() if k != ANNOTATION_OWNED_TAINTS}}})
    assert rec.reconcile(plan_of(WANT)).ok
    assert server.node(NODE)["metadata"]["annotations"][ANNOTATION_OWNED_TAINTS] == OUR_TAINT.to_string()
    # and the rule gone (no rule, no --startup-taint produces the key now): the taint goes
    producible.clear()
    assert rec.reconcile(plan_of(DesiredNodeState())).ok
    node = server.node(NODE)
    assert all(t["key"] != OUR_TAINT.key for t in node["spec"]["taints"])
    for foreign in FOREIGN_TAINTS:
        assert foreign in node["spec"]["taints"]


def test_clean_without_a_record_says_what_it_could_not_attribute(server):
    rec = make(server)
    assert rec.reconcile(plan_of(WANT)).ok
    server.edit_node(NODE, lambda n: {**n, "metadata": {**n["metadata"], "annotations": {
        k: v for k, v in n["metadata"]["annotations"].items() if k not in OWNERSHIP_ANNOTATIONS}}})
    outcome = make(server).clean()
    assert not outcome.clean
    text = " ".join(str(p) for p in outcome.problems)
    assert "no ownership record" in text or "in no ownership record" in text
    assert EDGETPU in text
    assert server.node(NODE)["metadata"]["labels"][EDGETPU] == "true"  # left in place, not guessed


def test_a_taint_set_while_the_cluster_objects_are_held_goes_with_its_rule(server):
    """A pass that holds every owned item (the cluster's objects not read yet) still sets the
    taints the rules read so far produce; they are the agent's, so once the rule is gone (read
    in a later, determined pass) the taint is removed, NoExecute included, not left as an
    unattributable record entry."""
    evict = Taint("example.com/evict", "NoExecute", "true")
    producible = {evict.key}
    rec = make(server, ClaimPolicy(taint_keys=lambda: frozenset(producible)))
    held = DesiredNodeState(taints=(evict,), hold_everything=True)
    assert rec.reconcile(plan_of(held)).ok
    node = server.node(NODE)
    assert evict.to_json() in node["spec"]["taints"]
    assert node["metadata"]["annotations"][ANNOTATION_OWNED_TAINTS] == evict.to_string()
    producible.clear()  # the rule deleted before any determined pass ran
    outcome = rec.reconcile(plan_of(DesiredNodeState()))
    assert outcome.ok
    node = server.node(NODE)
    assert all(t["key"] != evict.key for t in node["spec"]["taints"])
    assert ANNOTATION_OWNED_TAINTS not in node["metadata"]["annotations"]
    assert "OwnershipRecordRejected" not in reasons(server)
    for foreign in FOREIGN_TAINTS:
        assert foreign in node["spec"]["taints"]
