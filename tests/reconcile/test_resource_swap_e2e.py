"""A pass that swaps one extended resource for another, against the in-repo API server.

A changed node costs at most 3 writes in all, Events included (the API server's load grows with
the fleet). The swap is
the costliest change: the label write widens the ownership record to old+new (a resource of
ours is recorded before it is written), then one ``/status`` JSON patch adds the new resource,
removes the old one and trims the record (metadata applies on ``/status``: the node status
strategy resets only ``spec``, Kubernetes' ``pkg/registry/core/node/strategy.go``). Each step leaves a state a later pass
(or a restarted agent) converges from without touching foreign resources.
"""

from __future__ import annotations

import pytest

from agent.desired import ANNOTATION_OWNED_LABELS, ANNOTATION_OWNED_RESOURCES, DesiredNodeState
from agent.reconcile import NodeApi, Reconciler
from tests.reconcile.test_reconciler_e2e import Sleeps
from tests.support.apiserver import FakeApiServer

NODE = "node-a"
LABEL = "accelerators/edgetpu"
OLD = "node-feature-agent.io/edgetpu-usb"
NEW = "node-feature-agent.io/edgetpu-pcie"
FOREIGN = "example.com/fpga"  # another agent's resource: never touched
BEFORE = DesiredNodeState(labels={LABEL: "true", "feature.node.kubernetes.io/usb-fe_1a6e_089a.present": "true"},
                          extended_resources={OLD: "1"})
AFTER = DesiredNodeState(labels={LABEL: "true", "feature.node.kubernetes.io/pci-0880_1ac1.present": "true"},
                         extended_resources={NEW: "1"})


@pytest.fixture
def server():
    with FakeApiServer() as srv:
        srv.add_node(NODE, labels={"kubernetes.io/hostname": NODE}, capacity={"cpu": "4", "pods": "110", FOREIGN: "2"})
        yield srv


def make(server, **kw) -> Reconciler:
    api = NodeApi.from_configuration(server.client_configuration(), request_timeout=(2.0, 5.0))
    return Reconciler(api, NODE, sleep=Sleeps(), random=lambda: 0.0, **kw)


def plan_of(desired):
    return lambda _foreign: desired


def event_posts(server) -> int:
    return sum(1 for r in server.requests if r.method == "POST" and r.path.endswith("/events") and 200 <= r.status < 300)


def node_writes(server) -> list:
    return list(server.writes(NODE))


def record(server) -> str | None:
    return (server.node(NODE)["metadata"].get("annotations") or {}).get(ANNOTATION_OWNED_RESOURCES)


def capacity(server) -> dict:
    return server.node(NODE)["status"]["capacity"]


def assert_swapped(server) -> None:
    node = server.node(NODE)
    assert record(server) == NEW
    assert node["status"]["capacity"] == {"cpu": "4", "pods": "110", FOREIGN: "2", NEW: "1"}
    assert node["status"]["allocatable"].get(FOREIGN) == "2" and OLD not in node["status"]["allocatable"]
    assert "feature.node.kubernetes.io/usb-fe_1a6e_089a.present" not in node["metadata"]["labels"]
    assert node["metadata"]["annotations"][ANNOTATION_OWNED_LABELS] == (
        f"{LABEL},feature.node.kubernetes.io/pci-0880_1ac1.present")


def test_a_swap_is_two_patches_and_one_event(server):
    rec = make(server)
    assert rec.reconcile(plan_of(BEFORE)).ok
    server.reset_requests()
    outcome = rec.reconcile(plan_of(AFTER))
    assert outcome.ok and outcome.writes == 2
    writes = node_writes(server)
    assert [w.subresource for w in writes] == [None, "status"]  # record widened first, then status + trim
    assert event_posts(server) == 1 and len(writes) + event_posts(server) == 3
    assert_swapped(server)
    (event,) = [e for e in server.events() if "edgetpu-pcie" in e["message"]]
    assert f"set extended resource {NEW} to 1" in event["message"] and f"removed extended resource {OLD}" in event["message"]
    server.reset_requests()
    assert make(server).reconcile(plan_of(AFTER)).writes == 0  # a restarted agent: nothing left to do


def test_crash_after_the_label_write_leaves_both_recorded_and_the_next_agent_finishes_in_one_write(server):
    first = make(server, max_attempts=1)
    assert first.reconcile(plan_of(BEFORE)).ok
    server.faults.fail(503, count=1, verb="PATCH", path=f"/nodes/{NODE}/status")
    broken = first.reconcile(plan_of(AFTER))  # the process "dies" after its first write
    assert not broken.ok and broken.writes == 1
    assert record(server) == f"{NEW},{OLD}" and OLD in capacity(server) and NEW not in capacity(server)
    server.reset_requests()
    outcome = make(server).reconcile(plan_of(AFTER))  # a new process: only the Node to go by
    assert outcome.ok and [w.subresource for w in node_writes(server)] == ["status"]
    assert_swapped(server)


@pytest.mark.parametrize("status", [409, 422, 500])
def test_a_refused_status_write_changes_nothing_and_the_pass_or_the_next_converges(server, status):
    """409 (re-read, recompute), a 422 naming no item (a stale view: re-read once), 5xx (the
    pass ends, the next one finishes): the JSON patch is atomic, so the record never loses the
    old resource while it is still in capacity, and the foreign resource is never touched."""
    rec = make(server, max_attempts=1)
    assert rec.reconcile(plan_of(BEFORE)).ok
    server.faults.fail(status, count=1, verb="PATCH", path=f"/nodes/{NODE}/status")
    outcome = rec.reconcile(plan_of(AFTER))
    if status == 500:
        assert not outcome.ok and outcome.writes == 1
        assert record(server) == f"{NEW},{OLD}" and capacity(server)[OLD] == "1" and capacity(server)[FOREIGN] == "2"
        outcome = rec.reconcile(plan_of(AFTER))
        assert outcome.ok and outcome.writes == 1
    else:
        assert outcome.ok and outcome.writes == 2
    assert_swapped(server)


def test_unplug_removes_the_resource_and_its_record_entry_in_one_status_write(server):
    rec = make(server, emit_events=False)
    assert rec.reconcile(plan_of(BEFORE)).ok
    server.reset_requests()
    outcome = rec.reconcile(plan_of(DesiredNodeState()))
    assert outcome.ok and [w.subresource for w in node_writes(server)] == ["status", None]
    assert record(server) is None and OLD not in capacity(server) and capacity(server)[FOREIGN] == "2"
