"""The reconciler against the in-repo API server, over real HTTP with the official client.

Write counts come from the server's request log. Backoff sleeps are injected (recorded, not
slept) so faults are survived without waiting; nothing here asserts on timing.
"""

from __future__ import annotations

import json

import pytest

from agent.desired import (
    ANNOTATION_OWNED_LABELS,
    ANNOTATION_OWNED_RESOURCES,
    ANNOTATION_OWNED_TAINTS,
    OWNERSHIP_ANNOTATIONS,
    DesiredNodeState,
    Taint,
)
from agent.reconcile import NodeApi, Reconciler

# a plain import: a broken API server module must fail these tests, never skip them
from tests.support.apiserver import FakeApiServer

NODE = "node-a"
EDGETPU = "accelerators/edgetpu"
TPU_RES = "google.com/edgetpu"
OUR_TAINT = Taint("example.com/edgetpu", "NoSchedule", "present")
FOREIGN_TAINT = {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": "2024-05-01T10:00:00Z"}

WANT = DesiredNodeState(
    labels={EDGETPU: "true", "feature.node.kubernetes.io/usb-fe_1a6e_089a.present": "true"},
    extended_resources={TPU_RES: "2"},
    taints=(OUR_TAINT,),
)


class Sleeps:
    """Injected sleep: records delays; runs ``after(n)`` hooks so a fault can clear mid-retry."""

    def __init__(self):
        self.delays: list[float] = []
        self.hooks: dict[int, callable] = {}

    def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)
        hook = self.hooks.pop(len(self.delays), None)
        if hook:
            hook()


@pytest.fixture
def server():
    with FakeApiServer() as srv:
        srv.add_node(NODE, labels={"kubernetes.io/hostname": NODE, "team.example.com/owner": "infra"},
                     annotations={"kubeadm.alpha.kubernetes.io/cri-socket": "unix:///run/containerd/containerd.sock"},
                     taints=[FOREIGN_TAINT], capacity={"cpu": "4", "memory": "8Gi", "pods": "110"})
        yield srv


@pytest.fixture
def sleeps():
    return Sleeps()


def make(server, sleeps, **kw) -> Reconciler:
    api = NodeApi.from_configuration(server.client_configuration(), request_timeout=kw.pop("request_timeout", (2.0, 5.0)))
    return Reconciler(api, NODE, sleep=sleeps, random=lambda: 0.0, **kw)


def plan_of(desired):
    return lambda _foreign: desired


def node_writes(server):
    return list(server.writes(NODE))


def test_apply_then_remove_everything_we_own(server, sleeps):
    rec = make(server, sleeps)
    outcome = rec.reconcile(plan_of(WANT))
    assert outcome.ok and outcome.changed
    assert outcome.writes == 2 == len(node_writes(server))  # metadata (labels, taint, record) + status
    node = server.get_node(NODE)
    labels, ann = node["metadata"]["labels"], node["metadata"]["annotations"]
    assert labels[EDGETPU] == "true" and labels["team.example.com/owner"] == "infra"
    assert ann[ANNOTATION_OWNED_LABELS] == f"{EDGETPU},feature.node.kubernetes.io/usb-fe_1a6e_089a.present"
    assert ann[ANNOTATION_OWNED_RESOURCES] == TPU_RES
    assert ann[ANNOTATION_OWNED_TAINTS] == "example.com/edgetpu=present:NoSchedule"
    assert node["status"]["capacity"][TPU_RES] == "2" and node["status"]["allocatable"][TPU_RES] == "2"
    assert FOREIGN_TAINT in node["spec"]["taints"]
    assert any(line == "added label accelerators/edgetpu=true" for line in outcome.applied)

    server.reset_requests()
    outcome = rec.reconcile(plan_of(DesiredNodeState()))
    assert outcome.ok and outcome.writes == 2 == len(node_writes(server))  # status removal, then labels+taints+record
    node = server.get_node(NODE)
    assert EDGETPU not in node["metadata"]["labels"]
    assert node["metadata"]["labels"]["team.example.com/owner"] == "infra"
    assert not set(OWNERSHIP_ANNOTATIONS) & set(node["metadata"]["annotations"])
    assert node["metadata"]["annotations"]["kubeadm.alpha.kubernetes.io/cri-socket"]
    assert TPU_RES not in node["status"]["capacity"] and TPU_RES not in node["status"].get("allocatable", {})
    assert node["spec"]["taints"] == [FOREIGN_TAINT]


def test_restarted_agent_sends_zero_writes(server, sleeps):
    assert make(server, sleeps).reconcile(plan_of(WANT)).writes == 2
    server.reset_requests()
    outcome = make(server, sleeps).reconcile(plan_of(WANT))  # a new process: no memory but the Node
    assert outcome.ok and not outcome.changed and outcome.writes == 0
    assert node_writes(server) == []


def test_plan_sees_only_foreign_labels(server, sleeps):
    rec = make(server, sleeps)
    seen = []

    def plan(foreign):
        seen.append(dict(foreign))
        return WANT

    rec.reconcile(plan)
    make(server, sleeps).reconcile(plan)
    assert all(EDGETPU not in labels for labels in seen)
    assert seen[-1]["team.example.com/owner"] == "infra"


def test_foreign_label_clash_is_left_alone_and_reported_once(server, sleeps):
    server.edit_node(NODE, lambda n: n["metadata"]["labels"].update({EDGETPU: "false"}))
    rec = make(server, sleeps)
    first = rec.reconcile(plan_of(WANT))
    second = rec.reconcile(plan_of(WANT))
    assert server.get_node(NODE)["metadata"]["labels"][EDGETPU] == "false"
    assert EDGETPU not in server.get_node(NODE)["metadata"]["annotations"][ANNOTATION_OWNED_LABELS].split(",")
    assert any(EDGETPU in p.item for p in first.problems) and any(EDGETPU in p.item for p in second.problems)
    clash_events = [r for r in server.requests if r.method == "POST" and "events" in r.path
                    and "ForeignValueKept" in str(r.body)]
    assert len(clash_events) == 1


def test_capacity_zeroed_by_kubelet_reregistration_is_restored_with_one_write(server, sleeps):
    rec = make(server, sleeps)
    rec.reconcile(plan_of(WANT))

    def kubelet_reset(node):
        node["status"]["capacity"][TPU_RES] = "0"
        node["status"]["allocatable"][TPU_RES] = "0"

    server.edit_node(NODE, kubelet_reset)
    server.reset_requests()
    outcome = rec.reconcile(plan_of(WANT))
    assert outcome.ok and outcome.writes == 1 == len(node_writes(server))
    assert any(line.startswith(f"restored extended resource {TPU_RES} to 2") for line in outcome.applied)
    status = server.get_node(NODE)["status"]
    assert status["capacity"][TPU_RES] == "2" and status["allocatable"][TPU_RES] == "2"


def test_node_deleted_then_recreated_gets_everything_again(server, sleeps):
    rec = make(server, sleeps)
    first = rec.reconcile(plan_of(WANT))
    server.delete_node(NODE)
    gone = rec.reconcile(plan_of(WANT))
    assert not gone.ok and "not found" in gone.error and gone.writes == 0 and gone.retry_after > 0
    server.add_node(NODE, labels={"kubernetes.io/hostname": NODE}, capacity={"cpu": "4"})
    server.reset_requests()
    again = rec.reconcile(plan_of(WANT))
    assert again.ok and again.writes == 2 and again.node_uid != first.node_uid
    node = server.get_node(NODE)
    assert node["metadata"]["labels"][EDGETPU] == "true" and node["status"]["capacity"][TPU_RES] == "2"


def test_recreated_node_keeps_foreign_values_it_came_back_with(server, sleeps):
    rec = make(server, sleeps)
    rec.reconcile(plan_of(WANT))
    server.delete_node(NODE)
    server.add_node(NODE, labels={EDGETPU: "admin-set"}, capacity={"cpu": "4"})
    outcome = rec.reconcile(plan_of(WANT))
    assert outcome.ok
    node = server.get_node(NODE)
    assert node["metadata"]["labels"][EDGETPU] == "admin-set"  # not ours on the new node
    assert node["metadata"]["labels"]["feature.node.kubernetes.io/usb-fe_1a6e_089a.present"] == "true"


def test_conflict_from_a_concurrent_taint_edit_is_reread_and_retried(server, sleeps):
    rec = make(server, sleeps)
    stale = server.get_node(NODE)
    added = {"key": "admin.example.com/maintenance", "effect": "NoSchedule"}
    server.edit_node(NODE, lambda n: n["spec"].setdefault("taints", []).append(added))
    server.reset_requests()
    outcome = rec.reconcile(plan_of(WANT), live_node=stale)
    assert outcome.ok and outcome.writes == 2
    taints = server.get_node(NODE)["spec"]["taints"]
    assert added in taints and FOREIGN_TAINT in taints
    assert {"key": OUR_TAINT.key, "effect": OUR_TAINT.effect, "value": OUR_TAINT.value} in taints
    patches = [r for r in server.requests if r.method == "PATCH" and r.path.endswith(f"/nodes/{NODE}")]
    assert len(patches) == 2  # the refused one (409) and the retry after a fresh GET


def test_startup_taint_is_removed_after_the_first_successful_reconcile(server, sleeps):
    startup = {"key": "node-feature-agent.io/not-ready", "effect": "NoSchedule"}
    server.edit_node(NODE, lambda n: n["spec"]["taints"].append(startup))
    rec = make(server, sleeps, startup_taints=[Taint("node-feature-agent.io/not-ready", "NoSchedule")])
    outcome = rec.reconcile(plan_of(WANT))
    assert outcome.ok and outcome.writes == 3  # labels, resources, then the startup taint
    taints = server.get_node(NODE)["spec"]["taints"]
    assert startup not in taints and FOREIGN_TAINT in taints
    assert any("startup taint" in line for line in outcome.applied)
    # an operator re-adding it later is their business: not removed again on this node
    server.edit_node(NODE, lambda n: n["spec"]["taints"].append(startup))
    assert rec.reconcile(plan_of(WANT)).writes == 0


def test_clean_removes_only_what_we_own(server, sleeps):
    make(server, sleeps).reconcile(plan_of(WANT))
    outcome = make(server, sleeps).clean()
    assert outcome.clean and outcome.writes == 2
    node = server.get_node(NODE)
    assert node["metadata"]["labels"] == {"kubernetes.io/hostname": NODE, "team.example.com/owner": "infra"}
    assert node["spec"]["taints"] == [FOREIGN_TAINT]
    assert TPU_RES not in node["status"]["capacity"]
    assert make(server, sleeps).clean().writes == 0


def test_concurrent_second_writer_keeps_its_labels_and_taints(server, sleeps):
    """Another controller edits its own label and taint over real HTTP while we reconcile; we
    converge and every one of its values survives (its taint edits force our 409 path)."""
    import threading

    from kubernetes import client as k8s

    core = k8s.CoreV1Api(k8s.ApiClient(server.client_configuration()))
    stop = threading.Event()
    last: dict[str, int] = {"n": 0}

    errors: list[BaseException] = []

    def other_controller():
        while not stop.is_set():
            n = last["n"] + 1
            try:
                node = json.loads(core.read_node(NODE, _preload_content=False).data)
                taints = [t for t in node["spec"].get("taints", []) if t["key"] != "other.example.com/flap"]
                body = {"metadata": {"labels": {"other.example.com/counter": str(n)},
                                     "resourceVersion": node["metadata"]["resourceVersion"]},
                        "spec": {"taints": taints + [{"key": "other.example.com/flap", "value": str(n), "effect": "NoSchedule"}]}}
                core.patch_node(NODE, body, _content_type="application/merge-patch+json", _preload_content=False)
                last["n"] = n
            except k8s.ApiException as exc:
                if exc.status != 409:
                    errors.append(exc)
            except Exception as exc:  # noqa: BLE001 - surfaced by the assertion below, never lost
                errors.append(exc)
                return
            stop.wait(0.005)

    writer = threading.Thread(target=other_controller, daemon=True)
    writer.start()
    for _ in range(500):  # bounded: the other controller has written once before we start racing it
        if last["n"] or errors:
            break
        stop.wait(0.01)
    rec = make(server, sleeps, max_conflicts=50)
    try:
        variants = [WANT, DesiredNodeState(labels={EDGETPU: "true"}, taints=(Taint("example.com/x", "NoExecute"),)), WANT]
        outcomes = [rec.reconcile(plan_of(v)) for v in variants]
    finally:
        stop.set()
        writer.join(5)
    assert errors == [] and last["n"] > 0
    assert all(o.ok for o in outcomes), [o.error for o in outcomes]
    final = rec.reconcile(plan_of(WANT))
    assert final.ok and final.writes == 0
    node = server.get_node(NODE)
    assert node["metadata"]["labels"]["other.example.com/counter"] == str(last["n"])
    flap = [t for t in node["spec"]["taints"] if t["key"] == "other.example.com/flap"]
    assert flap == [{"key": "other.example.com/flap", "value": str(last["n"]), "effect": "NoSchedule"}]
    assert node["metadata"]["labels"][EDGETPU] == "true" and node["metadata"]["labels"]["team.example.com/owner"] == "infra"
    assert not [t for t in node["spec"]["taints"] if t["key"] == "example.com/x"]


@pytest.mark.parametrize("handed", ["pod", "other-node", "no-uid", "status"])
def test_a_watched_object_that_is_not_the_node_is_not_planned_on(server, sleeps, handed):
    """The object handed in (the watch's) is used only when it is this Node; else a GET."""
    rec = make(server, sleeps)
    assert rec.reconcile(plan_of(WANT)).ok
    node = server.get_node(NODE)
    meta = node["metadata"]
    wrong = {"pod": {**node, "kind": "Pod"},
             "other-node": {**node, "metadata": {**meta, "name": "node-b", "labels": {}, "annotations": {}}},
             "no-uid": {**node, "metadata": {k: v for k, v in meta.items() if k not in ("uid", "labels")}},
             "status": {"kind": "Status", "apiVersion": "v1", "status": "Success"}}[handed]
    server.reset_requests()
    outcome = rec.reconcile(plan_of(WANT), live_node=wrong)
    assert outcome.ok and outcome.writes == 0 and outcome.applied == ()
    assert [(r.method, r.path) for r in server.requests] == [("GET", f"/api/v1/nodes/{NODE}")]
    assert server.get_node(NODE) == node
