"""The ownership record never outgrows the Node's annotation budget: a write that would take
the annotations past the API server's 256 KiB (``ValidateAnnotationsSize``, which the in-repo
server enforces in bytes) is refused before it is sent, with one Warning Event; the Node is left
as it is and no 422 comes back."""

from __future__ import annotations

from agent.desired import DesiredNodeState
from agent.reconcile import NodeApi, Reconciler
from tests.support.apiserver import FakeApiServer

NODE = "node-a"
FOREIGN = {"example.com/foreign": "x" * (256 * 1024 - 4000)}  # someone else's, most of the budget


def test_a_record_over_the_annotation_budget_is_not_sent() -> None:
    # 400 labels of 60-byte keys: a labels record of ~24 KiB, over what the foreign annotation leaves
    want = DesiredNodeState(labels={f"example.com/{'k' * 40}-{i:05d}": "true" for i in range(400)})
    with FakeApiServer() as server:
        server.add_node(NODE, annotations=dict(FOREIGN))
        before = server.get_node(NODE)["metadata"]["resourceVersion"]
        api = NodeApi.from_configuration(server.client_configuration())
        reconciler = Reconciler(api, NODE, sleep=lambda _s: None, random=lambda: 0.0)
        for _ in range(3):  # every pass refuses; one Event
            outcome = reconciler.reconcile(lambda _foreign: want)
            assert outcome.error is None and outcome.writes == 0
            assert any(p.item == "annotations" and "262144-byte budget" in p.reason for p in outcome.problems)
        assert server.get_node(NODE)["metadata"]["resourceVersion"] == before
        assert not [r for r in server.requests if r.method == "PATCH"]
        events = [e for e in server.events() if e.get("reason") == "AnnotationBudgetExceeded"]
        assert len(events) == 1 and events[0]["type"] == "Warning"
        # fewer labels fit: written as usual
        small = DesiredNodeState(labels={"example.com/one": "true"})
        assert reconciler.reconcile(lambda _foreign: small).writes == 1
        assert server.get_node(NODE)["metadata"]["labels"]["example.com/one"] == "true"
