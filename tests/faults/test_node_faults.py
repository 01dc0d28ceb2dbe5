"""Faults on the Node object and on the agent process: the node deleted and recreated,
someone else editing it (our label removed, theirs changed; our label reverted after every
write), SIGTERM while a write is in flight. Same checks as the API faults: convergence, ledger clean, foreign parts intact."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time

import pytest

from agent.desired import ANNOTATION_OWNED_LABELS, ANNOTATION_OWNED_RESOURCES
from agent.reconcile.contest import ContestSettings
from agent.reconcile.ownership import parse_ownership
from tests.conftest import LABELS_DIR, REPO
from tests.faults.harness import (
    NODE,
    STARTUP_TAINT,
    expected_state,
    foreign_view,
    seed_node,
    seeded_foreign,
    stable,
)
from tests.runtime.helpers import EDGETPU_LABEL, EDGETPU_RESOURCE, CoralHost, has_edgetpu, wait_for
from tests.runtime.test_run_subprocess import AgentProcess
from tests.support.reverter import Reverter


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


def _contested(server) -> list[dict]:
    return [e for e in server.events() if e["reason"] == "LabelContested" or "LabelContested: " in e["message"]]


def _label_writes(server, since: float) -> list[float]:
    """When the agent's accepted PATCHes that set the Coral's label were answered."""
    return [r.at for r in server.requests if r.method == "PATCH" and r.at >= since and 200 <= r.status < 300
            and isinstance(r.body, dict) and EDGETPU_LABEL in ((r.body.get("metadata") or {}).get("labels") or {})]


def test_a_label_another_writer_reverts_is_rewritten_with_backoff_then_left_alone(server, ledger, make_harness):
    """Another controller sets its own value for a label the agent owns and
    reverts every write of the agent's. Before: one PATCH per revert, 751-892 in 10 s, no Event.
    Now: the first revert is rewritten at once, the next ones after a doubling delay, and the
    limit-th ends the contest with a LabelContested Warning naming the value found; the label
    stays as the other writer set it (and in the record) until the agent's own value changes."""
    contest = ContestSettings(initial=0.2, maximum=1.0, limit=4, window=60.0)
    h = make_harness(contest=contest).start()
    h.wait_converged()
    started = time.monotonic()
    with Reverter(server, NODE, EDGETPU_LABEL, "false") as reverter:
        wait_for(lambda: _contested(server), timeout=30, what="the LabelContested Event")
        wait_for(lambda: h.metric("nfa_contested_keys") == 1.0, what="nfa_contested_keys")
        rewrites = _label_writes(server, started)
        assert len(rewrites) == contest.limit - 1, rewrites  # reverts 1..3 rewritten, the 4th given up
        gaps = [b - a for a, b in itertools.pairwise(rewrites)]
        assert all(gap >= contest.delay(n + 2) for n, gap in enumerate(gaps)), gaps  # 0.2 s, then 0.4 s
        assert "set to 'false' by someone else after the agent wrote 'true'" in _contested(server)[0]["message"]
        # left alone: a pass on its own event writes nothing
        passes = h.agent.passes
        h.inject("add", "/devices/virtual/net/contest0", "net")
        wait_for(lambda: h.agent.passes > passes, what="a pass after the contest")
        assert _label_writes(server, started) == rewrites and reverter.errors == []
    node = server.node(NODE)
    assert node["metadata"]["labels"][EDGETPU_LABEL] == "false"
    assert EDGETPU_LABEL in parse_ownership(node["metadata"]["annotations"]).labels
    # the agent's own value changes (the Coral leaves): the label is the agent's to remove again
    h.unplug()
    wait_for(lambda: EDGETPU_LABEL not in server.node(NODE)["metadata"]["labels"], what="the label removed")
    wait_for(lambda: h.metric("nfa_contested_keys") == 0.0, what="the contest over")
    ledger.assert_clean()


def _apply(tmp_path, server, host) -> subprocess.CompletedProcess[str]:
    """``node-feature-agent apply`` as a process, the catalogue the harness uses."""
    kubeconfig = server.kubeconfig(tmp_path / "kubeconfig")
    env = {k: v for k, v in os.environ.items() if k != "NODE_FEATURE_AGENT_RULES"}
    return subprocess.run([sys.executable, "-m", "agent", "--log-format", "json", "apply", "--host-root", str(host.root),
                           "--rules", str(LABELS_DIR), "--node-name", NODE, "--kubeconfig", str(kubeconfig)],
                          cwd=REPO, env={**env, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(("part", "damage"), [(ANNOTATION_OWNED_LABELS, "deleted"),
                                              (ANNOTATION_OWNED_RESOURCES, "deleted"),
                                              (ANNOTATION_OWNED_LABELS, "damaged")])
def test_one_part_of_the_ownership_record_deleted_or_damaged_is_rebuilt(tmp_path, server, ledger, part, damage):
    """Owned-labels deleted while owned-extended-resources stays. Before: the
    next apply wrote nothing (the labels already matched), the record stayed gone, and a later
    unplug left the device's labels on the Node for ever. Now each record annotation missing or
    damaged is rebuilt from what the agent manages, with the OwnershipRecordRebuilt Event."""
    host = CoralHost(tmp_path)
    assert _apply(tmp_path, server, host).returncode == 0
    before = server.node(NODE)["metadata"]["annotations"][part]

    def hurt(node: dict) -> None:
        annotations = node["metadata"]["annotations"]
        if damage == "deleted":
            del annotations[part]
        else:
            annotations[part] = "!!! not, a record ,,,"  # overwritten: every entry lost, junk in its place

    server.edit_node(NODE, hurt)
    done = _apply(tmp_path, server, host)
    assert done.returncode == 0, done.stderr[-2000:]
    assert server.node(NODE)["metadata"]["annotations"].get(part) == before
    assert any(e["reason"] == "OwnershipRecordRebuilt" and part in e["message"] for e in server.events())
    host.unplug()
    assert _apply(tmp_path, server, host).returncode == 0
    node = server.node(NODE)
    assert not has_edgetpu(node)[0] and not has_edgetpu(node)[1], "the Coral's label or resource stayed after it left"
    ledger.assert_clean()
