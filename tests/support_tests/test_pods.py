"""Pods, leases and selector watches of the in-repo API server, over real HTTP with the
official client: scheduling gates, gated-pod mutability, resourceVersion preconditions and
label-selector watch transitions, each against its upstream source (tests/support/README.md).

Kubernetes' own ``TestValidatePodUpdate`` cases for gated pods (``tests/data/k8s/
pod_update_gated_cases.json``) run twice: against ``pod_validation`` directly, and as a PUT
to the server after the old pod was created through it.
"""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from tests.conftest import REPO
from tests.support import pod_validation
from tests.support.apiserver import FakeApiServer

CASES = json.loads((REPO / "tests/data/k8s/pod_update_gated_cases.json").read_text())
MERGE = "application/merge-patch+json"
TIMEOUT = (2.0, 5.0)


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    with FakeApiServer(bookmark_interval=30) as server:
        yield server


@pytest.fixture
def core(api: FakeApiServer) -> Any:  # the generated client's stubs want models; these tests send JSON
    return client.CoreV1Api(client.ApiClient(api.client_configuration()))


def pod(name: str, spec: dict[str, Any] | None = None, labels: dict[str, str] | None = None) -> dict[str, Any]:
    full = copy.deepcopy(CASES["base"])
    full.update(copy.deepcopy(spec or {}))
    meta: dict[str, Any] = {"name": name}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": full}


def failure(call: Any) -> tuple[int, dict[str, Any]]:
    with pytest.raises(ApiException) as info:
        call()
    return info.value.status, json.loads(str(info.value.body))


def raw(response: Any) -> dict[str, Any]:
    return dict(json.loads(response.data))


@pytest.mark.parametrize("case", CASES["cases"], ids=[c["test"] for c in CASES["cases"]])
def test_kubernetes_gated_update_cases_against_the_validator(case: dict[str, Any]) -> None:
    old, new = pod("foo", case["old"]), pod("foo", case["new"])
    messages = [str(c) for c in pod_validation.validate_update(new, old)]
    if case["err"]:
        assert any(case["err"] in m for m in messages), messages
    else:
        assert messages == []


@pytest.mark.parametrize("case", CASES["cases"], ids=[c["test"] for c in CASES["cases"]])
def test_kubernetes_gated_update_cases_over_http(api: FakeApiServer, core: Any,
                                                 case: dict[str, Any]) -> None:
    created = raw(core.create_namespaced_pod("ns", pod("foo", case["old"]), _preload_content=False))
    new = pod("foo", case["new"])
    new["metadata"]["resourceVersion"] = created["metadata"]["resourceVersion"]
    if not case["err"]:
        stored = raw(core.replace_namespaced_pod("foo", "ns", new, _preload_content=False))
        assert pod_validation.semantic(stored["spec"].get("schedulingGates")) == \
            pod_validation.semantic(case["new"].get("schedulingGates"))
        return
    code, body = failure(lambda: core.replace_namespaced_pod("foo", "ns", new, _preload_content=False))
    assert code == 422 and body["reason"] == "Invalid" and body["details"]["kind"] == "Pod"
    assert case["err"] in body["message"]


def test_a_gated_pod_is_created_pending_with_the_scheduling_gated_condition(core: Any) -> None:
    """``PrepareForCreate``: status reset to Pending (whatever the client sent), generation 1,
    ``PodScheduled=False/SchedulingGated`` while gates remain; pull policy defaulted."""
    body = pod("gated", {"schedulingGates": [{"name": "example.com/wait"}],
                         "containers": [{"name": "a", "image": "busybox"}, {"name": "b", "image": "busybox:1.36"},
                                        {"name": "c", "image": "busybox@sha256:" + "a" * 64}]})
    body["status"] = {"phase": "Running"}
    created = raw(core.create_namespaced_pod("ns", body, _preload_content=False))
    assert created["status"]["phase"] == "Pending" and created["metadata"]["generation"] == 1
    (condition,) = created["status"]["conditions"]
    assert (condition["type"], condition["status"], condition["reason"]) == ("PodScheduled", "False", "SchedulingGated")
    assert [c["imagePullPolicy"] for c in created["spec"]["containers"]] == ["Always", "IfNotPresent", "IfNotPresent"]
    plain = raw(core.create_namespaced_pod("ns", pod("plain"), _preload_content=False))
    assert "conditions" not in plain["status"]


def test_a_gate_and_a_node_name_are_refused_at_create(core: Any) -> None:
    code, body = failure(lambda: core.create_namespaced_pod(
        "ns", pod("bound", {"nodeName": "n1", "schedulingGates": [{"name": "example.com/wait"}]}), _preload_content=False))
    assert code == 422
    assert body["details"]["causes"] == [{"reason": "FieldValueForbidden", "field": "spec.nodeName",
                                          "message": "Forbidden: cannot be set until all schedulingGates have been cleared"}]
    code, body = failure(lambda: core.create_namespaced_pod(
        "ns", pod("dup", {"schedulingGates": [{"name": "a.io/x"}, {"name": "a.io/x"}]}), _preload_content=False))
    assert code == 422 and body["details"]["causes"][0]["reason"] == "FieldValueDuplicate"


def test_gates_can_only_be_removed_and_the_generation_follows_the_spec(core: Any) -> None:
    core.create_namespaced_pod("ns", pod("p", {"schedulingGates": [{"name": "a.io/one"}, {"name": "b.io/two"}]}))
    code, body = failure(lambda: core.patch_namespaced_pod(
        "p", "ns", {"spec": {"schedulingGates": [{"name": "a.io/one"}, {"name": "b.io/two"}, {"name": "c.io/new"}]}},
        _content_type=MERGE))
    assert code == 422 and "only deletion is allowed, but found new scheduling gate 'c.io/new'" in body["message"]
    out = raw(core.patch_namespaced_pod("p", "ns", {"spec": {"schedulingGates": [{"name": "b.io/two"}]}},
                                        _content_type=MERGE, _preload_content=False))
    assert out["spec"]["schedulingGates"] == [{"name": "b.io/two"}] and out["metadata"]["generation"] == 2
    out = raw(core.patch_namespaced_pod("p", "ns", {"metadata": {"labels": {"x": "y"}}}, _content_type=MERGE,
                                        _preload_content=False))
    assert out["metadata"]["generation"] == 2  # metadata only: no bump
    # strategic merge patch merges schedulingGates by name ($patch: delete removes one)
    out = raw(core.patch_namespaced_pod("p", "ns", {"spec": {"schedulingGates": [{"name": "b.io/two", "$patch": "delete"}]}},
                                        _preload_content=False))
    assert "schedulingGates" not in out["spec"]


def test_a_stale_resource_version_is_a_409_and_the_pod_is_unchanged(api: FakeApiServer, core: Any) -> None:
    created = raw(core.create_namespaced_pod("ns", pod("p", {"schedulingGates": [{"name": "a.io/g"}]}), _preload_content=False))
    core.patch_namespaced_pod("p", "ns", {"metadata": {"labels": {"touched": "yes"}}}, _content_type=MERGE)
    code, body = failure(lambda: core.patch_namespaced_pod(
        "p", "ns", {"metadata": {"resourceVersion": created["metadata"]["resourceVersion"]},
                    "spec": {"schedulingGates": None}}, _content_type=MERGE))
    assert code == 409 and body["reason"] == "Conflict" and body["details"] == {"name": "p", "kind": "pods"}
    assert api.pod("ns", "p")["spec"]["schedulingGates"] == [{"name": "a.io/g"}]


def test_a_label_selector_watch_sees_objects_enter_and_leave_the_selection(core: Any) -> None:
    """``cacheWatcher.convertToWatchEvent``: entering the selection is ADDED, staying MODIFIED,
    leaving it DELETED with the old object at the new resourceVersion; others are not sent."""
    seen: list[tuple[str, str, str, str]] = []
    ready = threading.Event()
    rv = raw(core.list_namespaced_pod("ns", _preload_content=False))["metadata"]["resourceVersion"]

    def run() -> None:
        watcher: Any = watch.Watch()  # type: ignore[no-untyped-call]
        stream = watcher.stream(core.list_namespaced_pod, "ns", label_selector="gate=pending",
                                resource_version=rv, timeout_seconds=5, _request_timeout=TIMEOUT)
        ready.set()
        for event in stream:
            obj = event["raw_object"]
            seen.append((event["type"], obj["metadata"]["name"], (obj["metadata"].get("labels") or {}).get("gate", ""),
                         obj["metadata"]["resourceVersion"]))
            if len(seen) == 4:
                return

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    ready.wait(5)
    core.create_namespaced_pod("ns", pod("other", labels={"gate": "done"}))
    core.create_namespaced_pod("ns", pod("p", labels={"gate": "pending"}))
    core.patch_namespaced_pod("p", "ns", {"metadata": {"annotations": {"a": "b"}}}, _content_type=MERGE)
    left = raw(core.patch_namespaced_pod("p", "ns", {"metadata": {"labels": {"gate": None}}}, _content_type=MERGE,
                                         _preload_content=False))
    core.patch_namespaced_pod("other", "ns", {"metadata": {"labels": {"gate": "pending"}}}, _content_type=MERGE)
    thread.join(10)
    assert [(t, n, g) for t, n, g, _ in seen] == [("ADDED", "p", "pending"), ("MODIFIED", "p", "pending"),
                                                  ("DELETED", "p", "pending"), ("ADDED", "other", "pending")]
    assert seen[2][3] == left["metadata"]["resourceVersion"]


def test_leases_namespaces_and_secrets(api: FakeApiServer) -> None:
    api.add_namespace("team", annotations={"example.com/x": "1"})
    api.add_secret("team", "pull", {".dockerconfigjson": "e30="}, "kubernetes.io/dockerconfigjson")
    core: Any = api.core_api()
    assert core.read_namespace("team").metadata.annotations == {"example.com/x": "1"}
    assert core.read_namespaced_secret("pull", "team").data == {".dockerconfigjson": "e30="}
    assert failure(lambda: core.read_namespaced_secret("nope", "team"))[0] == 404
    leases: Any = client.CoordinationV1Api(client.ApiClient(api.client_configuration()))
    body = {"metadata": {"name": "leader", "namespace": "team"}, "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}}
    created = leases.create_namespaced_lease("team", body)
    assert failure(lambda: leases.create_namespaced_lease("team", body))[0] == 409
    stale = created.metadata.resource_version
    created.spec.holder_identity = "b"
    updated = leases.replace_namespaced_lease("leader", "team", created)
    assert updated.spec.holder_identity == "b"
    created.metadata.resource_version = stale
    created.spec.holder_identity = "c"
    code, answer = failure(lambda: leases.replace_namespaced_lease("leader", "team", created))
    assert code == 409 and answer["details"]["kind"] == "leases.coordination.k8s.io"
    assert leases.read_namespaced_lease("leader", "team").spec.holder_identity == "b"
