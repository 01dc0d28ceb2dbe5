"""The ledger must catch what it claims to catch, or every clean fault case proves nothing:
a rogue client writing through the API (as a buggy agent would) trips each invariant."""

from __future__ import annotations

from agent.desired import ANNOTATION_OWNED_LABELS
from tests.faults.harness import NODE, Ledger, foreign_view, seeded_foreign

MERGE = "application/merge-patch+json"
OWNED = "accelerators/edgetpu"


def _patch(server, body, status=False):
    core = server.core_api()
    call = core.patch_node_status if status else core.patch_node
    call(NODE, body, _content_type="application/json-patch+json" if status else MERGE, _preload_content=False)


def _own_one_label(server):
    _patch(server, {"metadata": {"labels": {OWNED: "true"}, "annotations": {ANNOTATION_OWNED_LABELS: OWNED}}})


def test_clean_writes_pass(server, ledger):
    _own_one_label(server)
    assert ledger.assert_clean({OWNED: "true"}) == 1
    assert foreign_view(server.node(NODE))["labels"] == seeded_foreign()["labels"]


def test_foreign_label_changed_or_removed_is_caught(server, ledger):
    _patch(server, {"metadata": {"labels": {"team.example.com/owner": "someone-else"}}})
    _patch(server, {"metadata": {"labels": {"topology.kubernetes.io/zone": None}}})
    problems = ledger.violations()
    assert any("foreign label team.example.com/owner changed" in p for p in problems)
    assert any("foreign label topology.kubernetes.io/zone changed 'zone-a' -> None" in p for p in problems)


def test_foreign_taint_dropped_and_unrecorded_additions_are_caught(server, ledger):
    node = server.node(NODE)
    kept = [t for t in node["spec"]["taints"] if t["key"] != "dedicated.example.com/team"]
    _patch(server, {"spec": {"taints": kept + [{"key": "x.example.com/new", "effect": "NoSchedule"}]},
                    "metadata": {"labels": {"new.example.com/unrecorded": "1"}}})
    problems = ledger.violations()
    assert any("foreign taint ('dedicated.example.com/team', 'NoSchedule') changed" in p for p in problems)
    assert any("taint ('x.example.com/new', 'NoSchedule') added without an ownership record" in p for p in problems)
    assert any("label new.example.com/unrecorded added without an ownership record" in p for p in problems)


def test_the_startup_taint_alone_may_be_removed(server, ledger):
    node = server.node(NODE)
    _patch(server, {"spec": {"taints": [t for t in node["spec"]["taints"] if t["key"] != "node-feature-agent.io/not-ready"]}})
    assert ledger.violations() == []


def test_owned_label_flap_is_caught_in_history_and_in_requests(server, ledger):
    _own_one_label(server)
    _patch(server, {"metadata": {"labels": {OWNED: None}}})
    _patch(server, {"metadata": {"labels": {OWNED: "true"}}})
    problems = ledger.violations({OWNED: "true"})
    assert any(f"owned label {OWNED} flapped 'true' -> None" in p for p in problems)
    assert any(f"PATCH sent {OWNED}=None" in p for p in problems)


def test_owned_resource_removal_is_caught(server, ledger):
    _patch(server, [{"op": "add", "path": "/status/capacity/example.com~1thing", "value": "1"}], status=True)
    ledger = Ledger(server)
    _patch(server, [{"op": "remove", "path": "/status/capacity/example.com~1thing"}], status=True)
    problems = ledger.violations({}, {"example.com/thing"})
    assert any("owned resource example.com/thing flapped" in p for p in problems)
    assert any("PATCH /status removes /status/capacity/example.com~1thing" in p for p in problems)


def test_test_side_edits_are_not_blamed_on_the_agent(server):
    ledger = Ledger(server)
    server.edit_node(NODE, lambda n: n["metadata"]["labels"].pop("team.example.com/owner") and None)
    assert ledger.violations() == [] and ledger.agent_writes() == []
