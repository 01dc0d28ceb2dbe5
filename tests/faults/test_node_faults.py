"""Faults on the Node object and on the agent process: the node deleted and recreated,
someone else editing it (our label removed, theirs changed), SIGTERM while a write is in
flight. Same checks as the API faults: convergence, ledger clean, foreign parts intact."""

from __future__ import annotations

import os

from agent.reconcile.ownership import parse_ownership
from tests.conftest import LABELS_DIR
from tests.faults.harness import NODE, STARTUP_TAINT, expected_state, foreign_view, seed_node, seeded_foreign, stable
from tests.runtime.helpers import EDGETPU_LABEL, EDGETPU_RESOURCE, has_edgetpu, wait_for
from tests.runtime.test_run_subprocess import AgentProcess


def test_node_deleted_and_recreated_gets_everything_again_on_the_new_uid(server, ledger, make_harness):
    h = make_harness().start()
    want = h.wait_converged()
    old_uid = server.node(NODE)["metadata"]["uid"]
    server.delete_node(NODE)
    new_uid = seed_node(server)["metadata"]["uid"]  # kubelet registers it again, startup taint included
    assert new_uid != old_uid
    h.wait_converged(want, what="labels, resources re-applied and startup taint removed on the new node")
    wait_for(lambda: h.agent.last_outcome and h.agent.last_outcome.node_uid == new_uid, what="agent on the new uid")
    ledger.assert_clean(want.labels, want.extended_resources)
    assert foreign_view(server.node(NODE)) == seeded_foreign()


def test_owned_label_deleted_by_someone_else_is_restored_and_their_edit_kept(server, ledger, make_harness):
    h = make_harness().start()
    want = h.wait_converged()

    def someone_else(node):
        labels = node["metadata"]["labels"]
        labels.pop(EDGETPU_LABEL)  # ours: must come back
        labels["team.example.com/owner"] = "platform"  # theirs: must stay as they set it
        labels["new.example.com/rack"] = "r7"
        node["spec"]["taints"] = [t for t in node["spec"]["taints"] if t["key"] != "example.com/maintenance"]
        node["status"]["capacity"].pop(EDGETPU_RESOURCE)

    server.edit_node(NODE, someone_else)
    h.wait_converged(want, what="owned label and resource restored")
    ledger.assert_clean()
    expected = seeded_foreign({"team.example.com/owner": "platform", "new.example.com/rack": "r7"})
    expected["taints"] = [t for t in expected["taints"] if t[0] != "example.com/maintenance"]
    assert foreign_view(server.node(NODE)) == expected


def test_sigterm_during_a_patch_exits_0_and_leaves_whole_writes_only(tmp_path, server, ledger, make_harness):
    agent = AgentProcess(tmp_path, server)
    try:
        wait_for(lambda: has_edgetpu(server.node(NODE)) == (True, True), timeout=60, what="startup labels")
        wait_for(lambda: not [t for t in server.node(NODE)["spec"].get("taints", []) if t["key"] == STARTUP_TAINT["key"]],
                 what="startup taint removed")
        wait_for(lambda: os.path.exists(agent.socket_path), what="inject socket")
        # the next write is applied by the server, which then holds its answer back 5 s: the
        # agent is inside that PATCH call when SIGTERM arrives
        server.faults.slow(5, count=1, after=True, verb="PATCH")
        agent.host.unplug()
        agent.inject("remove")
        wait_for(lambda: server.faults.injected, what="the write to reach the server")
        code, took = agent.terminate()
        assert code == 0 and took < 15
    finally:
        agent.close()
    node = server.node(NODE)
    after = expected_state(agent.host.root, LABELS_DIR, node)
    agent.host.plug()
    before = expected_state(agent.host.root, LABELS_DIR, node)
    agent.host.unplug()
    # whole writes only: each section is in its old state or its new one, never a mix, and the
    # ownership record (sent in the same merge patch as the labels) matches the labels present
    keys = set(before.labels) | set(after.labels)
    labels = {k: v for k, v in node["metadata"]["labels"].items() if k in keys}
    capacity = node["status"]["capacity"]
    resources = {k: capacity[k] for k in set(before.extended_resources) | set(after.extended_resources) if k in capacity}
    assert labels in (before.labels, after.labels)
    assert resources in ({k: str(v) for k, v in before.extended_resources.items()},
                         {k: str(v) for k, v in after.extended_resources.items()})
    assert parse_ownership(node["metadata"]["annotations"]).labels == set(labels)
    assert (labels, has_edgetpu(node)[1]) != (before.labels, True), "the in-flight write did not land: nothing tested"
    # the restarted agent finishes the job from whatever it finds
    h = make_harness()
    h.host.unplug()
    h.start()
    h.wait_converged(after, what="restarted agent converged")
    ledger.assert_clean(*stable(before, after))
    assert foreign_view(server.node(NODE)) == seeded_foreign()
