"""A 422 on ``/status`` names the refused resource the way the real server does
(``status.capacity.<name>``, dotted, from ``field.NewPath("status", "capacity", name)``), and
the reconciler blames exactly that resource. The cause comes from the in-repo API server."""

from __future__ import annotations

import pytest

from agent.reconcile import Invalid, NodeApi
from agent.reconcile.rejections import rejected_items

# a plain import: a broken API server module must fail these tests, never skip them
from tests.support.apiserver import FakeApiServer


def test_dotted_capacity_path_blames_that_resource_only():
    ops = [{"op": "add", "path": "/status/capacity/example.com~1half", "value": "1500m"},
           {"op": "add", "path": "/status/capacity/example.com~1fine", "value": "2"}]
    with FakeApiServer() as server:
        server.add_node("n1")
        api = NodeApi.from_configuration(server.client_configuration(), request_timeout=(2.0, 5.0))
        with pytest.raises(Invalid) as info:
            api.patch_status("n1", ops)
    causes = info.value.causes
    assert [c.field for c in causes] == ["status.capacity.example.com/half"]
    assert rejected_items(causes, info.value.message, status_ops=ops) == {("resource", "example.com/half")}


def test_allocatable_path_too():
    from agent.reconcile.node_api import StatusCause

    ops = [{"op": "add", "path": "/status/allocatable/example.com~1x", "value": "-1"}]
    cause = StatusCause("FieldValueInvalid", 'Invalid value: "-1": must be greater than or equal to 0',
                        "status.allocatable.example.com/x")
    assert rejected_items([cause], "", status_ops=ops) == {("resource", "example.com/x")}


def test_real_shapes_from_the_main_resource_blame_the_right_items():
    """The main resource's 422 as the real server shapes it (strategy.go: ValidateNode +
    ValidateNodeUpdate): a bad label reported twice, a taint under metadata.taints[i]. The
    blame is the same set of items as with one cause each."""
    patch = {"metadata": {"labels": {"ok.example.com/a": "1", "bad key": "x"}},
             "spec": {"taints": [{"key": "example.com/t", "value": "v", "effect": "Nope"}]}}
    with FakeApiServer() as server:
        server.add_node("n1")
        api = NodeApi.from_configuration(server.client_configuration(), request_timeout=(2.0, 5.0))
        with pytest.raises(Invalid) as info:
            api.patch_metadata("n1", patch)
    causes = info.value.causes
    assert [c.field for c in causes] == ["metadata.labels", "metadata.taints[0].effect", "metadata.labels"]
    assert rejected_items(causes, info.value.message, metadata_patch=patch, our_taints=["example.com/t:Nope"]) == {
        ("label", "bad key"), ("taint", "example.com/t:Nope")}


def test_a_failed_json_patch_names_nothing_so_the_caller_rereads():
    """patch.go answers a JSON-patch op that does not apply with 422, the generic message and
    no causes: no item is blamed (the reconciler re-reads the node: its view was stale)."""
    ops = [{"op": "remove", "path": "/status/capacity/example.com~1gone"}]
    with FakeApiServer() as server:
        server.add_node("n1")
        api = NodeApi.from_configuration(server.client_configuration(), request_timeout=(2.0, 5.0))
        with pytest.raises(Invalid) as info:
            api.patch_status("n1", ops)
    assert info.value.causes == () and info.value.message == \
        "the server rejected our request due to an error in our request"
    assert rejected_items(info.value.causes, info.value.message, status_ops=ops) == set()
