"""A 2xx answer to the agent's Node GET or PATCH that is not its Node, end to end.

A proxy or a broken server in front of the API can answer 200 with a ``Status`` body, another
kind of object under the Node's name, another Node, or a Node without a uid. Read as the Node,
every owned label looks "removed by someone else": the agent would charge the contest tracker,
rewrite everything, and drop owned items from its ownership record. The whole agent loop runs
against the in-repo API server (``answer`` faults: the request is not handled); each such
answer is a transient error, retried with backoff: nothing is written because of it, no revert
is counted, the ownership record stays as it was in every version of the Node, and the agent
converges once the answers are right again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest

from agent.reconcile.ownership import parse_ownership
from tests.faults.harness import NODE, foreign_view, seeded_foreign, stable
from tests.runtime.helpers import EDGETPU_LABEL, EDGETPU_RESOURCE, wait_for

NODE_PATH = f"/api/v1/nodes/{NODE}"
WRONG = 4
"""Wrong answers served in a row: more than the harness's 3 tries in one pass, so a pass also
fails on them and the next is scheduled with backoff."""


def _status(node: dict) -> dict:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 200}


def _pod(node: dict) -> dict:
    return {"kind": "Pod", "apiVersion": "v1", "metadata": {"name": NODE, "namespace": "default",
                                                            "uid": "0f1e2d3c-0000-4000-8000-000000000001"},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}, "status": {"phase": "Running"}}


def _other_node(node: dict) -> dict:
    other = {**node, "metadata": {**node["metadata"], "name": "edge-2", "labels": {"kubernetes.io/hostname": "edge-2"},
                                  "annotations": {}}}
    return other


def _no_uid(node: dict) -> dict:
    metadata = {k: v for k, v in node["metadata"].items() if k != "uid"}
    metadata["labels"] = {k: v for k, v in metadata["labels"].items() if k == "kubernetes.io/hostname"}
    metadata["annotations"] = {}
    return {**node, "metadata": metadata}


ANSWERS: dict[str, Callable[[dict], dict[str, Any]]] = {
    "status": _status, "pod": _pod, "other-node": _other_node, "node-without-uid": _no_uid}


def reverts(caplog) -> list[str]:
    """Revert notices logged (a contest strike each)."""
    return [r.getMessage() for r in caplog.records if getattr(r, "event", None) in ("reverted", "contested")]


def owned_labels_in_every_version(ledger) -> list[frozenset[str]]:
    return [parse_ownership(e.object["metadata"].get("annotations")).labels for e in ledger.versions()
            if e.type != "DELETED"]


@pytest.mark.parametrize("answer", list(ANSWERS))
def test_a_get_answered_with_something_else_is_retried_and_writes_nothing(server, ledger, make_harness, caplog,
                                                                           answer):
    caplog.set_level(logging.INFO)
    h = make_harness(watch_node=False).start()  # every pass reads the Node with a GET
    want = h.wait_converged()
    node = server.node(NODE)
    owned = parse_ownership(node["metadata"]["annotations"])
    assert EDGETPU_LABEL in owned.labels
    writes, versions = len(server.writes(NODE)), len(ledger.versions())
    server.faults.answer(ANSWERS[answer](node), verb="GET", path=NODE_PATH, exact=True, count=WRONG)
    h.inject("change")  # a pass that finds the host as it was
    wait_for(lambda: server.faults.pending() == 0, timeout=30, what="every wrong answer served")
    passes = h.metric('nfa_reconcile_total{result="unchanged"}') or 0
    wait_for(lambda: (h.metric('nfa_reconcile_total{result="unchanged"}') or 0) > passes, timeout=30,
             what="a pass that reads the Node again")
    assert len(server.writes(NODE)) == writes and len(ledger.versions()) == versions, "a wrong answer caused a write"
    assert server.node(NODE) == node
    assert reverts(caplog) == []
    assert (h.metric('nfa_reconcile_total{result="error"}') or 0) >= 1  # the pass out of tries failed, and said so

    h.unplug()  # and it still decides: the card gone is removed
    after = h.wait_converged(what="unplug applied after the wrong answers")
    assert EDGETPU_LABEL not in after.labels and EDGETPU_RESOURCE not in after.extended_resources
    ledger.assert_clean(*stable(want, after))
    assert foreign_view(server.node(NODE)) == seeded_foreign()


@pytest.mark.parametrize("path", [NODE_PATH, NODE_PATH + "/status"])
@pytest.mark.parametrize("answer", list(ANSWERS))
def test_a_patch_answered_with_something_else_is_retried_and_counts_no_revert(server, ledger, make_harness, caplog,
                                                                              answer, path):
    caplog.set_level(logging.INFO)
    h = make_harness().start()
    before = h.wait_converged()
    node = server.node(NODE)
    owned = parse_ownership(node["metadata"]["annotations"])
    assert EDGETPU_LABEL in owned.labels
    server.clear_requests()
    server.faults.answer(ANSWERS[answer](node), verb="PATCH", path=path, exact=True, count=WRONG)
    h.unplug()  # the pass that removes the card writes, and is answered wrongly
    after = h.wait_converged(timeout=30, what="unplug applied after the wrong answers")
    assert server.faults.pending() == 0
    assert EDGETPU_LABEL not in after.labels and EDGETPU_RESOURCE not in after.extended_resources
    assert reverts(caplog) == []
    # each wrong answer was retried; every write that went in was the unplug's own
    patches = [r for r in server.requests if r.method == "PATCH" and r.path == path]
    assert [r.fault for r in patches[:WRONG]] == ["answer"] * WRONG
    handled = [r for r in server.writes(NODE) if r.fault is None]
    assert len(handled) <= 2, [(r.path, r.body) for r in handled]  # capacity, then labels: nothing written twice
    # the ownership record only ever lost what the unplug removed, nothing came and went
    gone = owned.labels - parse_ownership(server.node(NODE)["metadata"]["annotations"]).labels
    assert EDGETPU_LABEL in gone and gone == owned.labels & (set(before.labels) - set(after.labels))
    for labels in owned_labels_in_every_version(ledger):
        assert labels in (owned.labels, owned.labels - gone), sorted(labels ^ owned.labels)
    ledger.assert_clean(*stable(before, after))
    assert foreign_view(server.node(NODE)) == seeded_foreign()
