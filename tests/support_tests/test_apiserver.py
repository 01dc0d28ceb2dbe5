"""The fake API server against the official ``kubernetes`` client (and kubectl when installed).

Each behaviour the agent's e2e tests rely on is checked here over real HTTP, so a wrong fake
cannot make the agent look right. Every watch has a server-side timeout and a client read
timeout; the server is stopped in fixture teardown.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import threading

import pytest
import urllib3
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from tests.support.apiserver import FakeApiServer
from tests.support.quantity import canonical

MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
TIMEOUT = (2.0, 5.0)


@pytest.fixture
def api():
    with FakeApiServer(bookmark_interval=30) as server:
        server.add_node("n1", labels={"kubernetes.io/hostname": "n1", "team.example.com/owner": "infra"},
                        taints=[{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}],
                        capacity={"cpu": "4", "memory": "8Gi", "pods": "110"})
        server.add_node("n2")
        yield server


@pytest.fixture
def core(api):
    return client.CoreV1Api(client.ApiClient(api.client_configuration()))


def raw(response) -> dict:
    return json.loads(response.data)


def patch(core, body, content_type=MERGE, status=False, name="n1"):
    call = core.patch_node_status if status else core.patch_node
    return raw(call(name, body, _content_type=content_type, _preload_content=False, _request_timeout=TIMEOUT))


def error(call) -> tuple[int, dict, object]:
    with pytest.raises(ApiException) as info:
        call()
    return info.value.status, json.loads(info.value.body), info.value.headers


def send(api, method: str, path: str, body, content_type: str = "application/json") -> tuple[int, dict]:
    """A raw request (bodies the typed client refuses to send); returns (status, parsed JSON body)."""
    http = urllib3.PoolManager()
    answer = http.request(method, api.url + path, body=json.dumps(body).encode(), timeout=5.0, retries=False,
                          headers={"Content-Type": content_type, "Authorization": "Bearer fake-token"})
    return answer.status, json.loads(answer.data)


def test_kubeconfig_works_with_the_python_client(api, tmp_path):
    path = api.kubeconfig(tmp_path / "kubeconfig")
    v1 = client.CoreV1Api(config.new_client_from_config(str(path)))
    names = [n.metadata.name for n in v1.list_node(_request_timeout=TIMEOUT).items]
    assert names == ["n1", "n2"]
    assert client.VersionApi(config.new_client_from_config(str(path))).get_code().git_version.startswith("v1.")


def test_token_is_required_when_configured(tmp_path):
    with FakeApiServer(token="s3cret") as api:
        api.add_node("n1")
        good = client.CoreV1Api(config.new_client_from_config(str(api.kubeconfig(tmp_path / "k"))))
        assert good.read_node("n1").metadata.name == "n1"
        cfg = api.client_configuration()
        cfg.api_key = {"authorization": "Bearer wrong"}
        status, body, _ = error(lambda: client.CoreV1Api(client.ApiClient(cfg)).read_node("n1"))
        assert status == 401 and body["reason"] == "Unauthorized"


def test_list_selectors(api, core):
    by_name = core.list_node(field_selector="metadata.name=n2", _request_timeout=TIMEOUT)
    assert [n.metadata.name for n in by_name.items] == ["n2"]
    by_label = core.list_node(label_selector="team.example.com/owner=infra", _request_timeout=TIMEOUT)
    assert [n.metadata.name for n in by_label.items] == ["n1"]
    assert core.list_node(label_selector="!team.example.com/owner", _request_timeout=TIMEOUT).items[0].metadata.name == "n2"
    status, body, _ = error(lambda: core.read_node("nope"))
    assert status == 404 and body["reason"] == "NotFound" and body["message"] == 'nodes "nope" not found'


def test_merge_patch_null_deletes_and_versions_increase(api, core):
    before = api.node("n1")
    after = patch(core, {"metadata": {"labels": {"a.example.com/x": "1", "team.example.com/owner": None}}})
    assert after["metadata"]["labels"] == {"kubernetes.io/hostname": "n1", "a.example.com/x": "1"}
    assert int(after["metadata"]["resourceVersion"]) > int(before["metadata"]["resourceVersion"])
    assert after["metadata"]["uid"] == before["metadata"]["uid"]
    assert after["metadata"]["creationTimestamp"] == before["metadata"]["creationTimestamp"]
    again = patch(core, {"metadata": {"labels": {"a.example.com/x": "1", "gone.example.com/y": None}}})
    assert again["metadata"]["resourceVersion"] == after["metadata"]["resourceVersion"]  # no-op: no new version
    n2 = patch(core, {"metadata": {"labels": {"b": "2"}}}, name="n2")
    assert int(n2["metadata"]["resourceVersion"]) > int(after["metadata"]["resourceVersion"])  # cluster-wide counter


def test_strategic_merge_patch_replaces_the_taints_list(api, core):
    body = {"metadata": {"labels": {"s.example.com/x": "1"}},
            "spec": {"taints": [{"key": "example.com/mine", "value": "v", "effect": "NoSchedule"}]}}
    node = raw(core.patch_node("n1", body, _preload_content=False))  # dict body: the client sends SMP
    assert api.requests[-1].content_type == "application/strategic-merge-patch+json"
    assert node["metadata"]["labels"]["team.example.com/owner"] == "infra"  # maps merge
    assert node["spec"]["taints"] == [{"key": "example.com/mine", "value": "v", "effect": "NoSchedule"}]


def test_json_patch_ops_and_failures_are_atomic(api, core):
    node = patch(core, [
        {"op": "add", "path": "/metadata/labels/j.example.com~1a", "value": "1"},
        {"op": "copy", "from": "/metadata/labels/j.example.com~1a", "path": "/metadata/labels/j.example.com~1b"},
        {"op": "move", "from": "/metadata/labels/j.example.com~1b", "path": "/metadata/labels/j.example.com~1c"},
        {"op": "replace", "path": "/metadata/labels/j.example.com~1a", "value": "2"},
        {"op": "test", "path": "/metadata/labels/j.example.com~1c", "value": "1"},
        {"op": "remove", "path": "/metadata/labels/team.example.com~1owner"},
    ], JSON_PATCH)
    labels = node["metadata"]["labels"]
    assert labels["j.example.com/a"] == "2" and labels["j.example.com/c"] == "1"
    assert "j.example.com/b" not in labels and "team.example.com/owner" not in labels
    rv = node["metadata"]["resourceVersion"]
    for ops in ([{"op": "add", "path": "/metadata/labels/x", "value": "1"},
                 {"op": "test", "path": "/metadata/resourceVersion", "value": "1"}],
                [{"op": "add", "path": "/metadata/labels/x", "value": "1"},
                 {"op": "remove", "path": "/status/capacity/example.com~1missing"}],
                [{"op": "add", "path": "/status/nothere/x", "value": "1"}],
                [{"op": "frobnicate", "path": "/x"}]):
        status, body, _ = error(functools.partial(patch, core, ops, JSON_PATCH, status=True))
        # patch.go: errors.NewGenericServerResponse(422, "", GroupResource{}, "", err.Error(), 0, false):
        # the library's text is dropped, details is present and empty
        assert status == 422 and body == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                          "message": "the server rejected our request due to an error in our request",
                                          "reason": "Invalid", "details": {}, "code": 422}
    assert api.node("n1")["metadata"]["resourceVersion"] == rv and "x" not in api.node("n1")["metadata"]["labels"]
    # evanphx/json-patch v4 (what the real server runs): replace of a missing object key adds it,
    # a negative index counts from the end (for add, of the list one longer: -1 appends)
    node = patch(core, [{"op": "replace", "path": "/status/capacity/example.com~1new", "value": "2"}], JSON_PATCH,
                 status=True)
    assert node["status"]["capacity"]["example.com/new"] == "2"
    node = patch(core, [{"op": "add", "path": "/spec/taints/-1", "value": {"key": "k.example.com/x",
                                                                           "effect": "NoSchedule"}}], JSON_PATCH)
    assert [t["key"] for t in node["spec"]["taints"]] == ["node.kubernetes.io/unreachable", "k.example.com/x"]
    for body, code, message in (({"op": "add"}, 400, "json: cannot unmarshal object into Go value of type jsonpatch.Patch"),
                                ([1], 400, "json: cannot unmarshal number into Go value of type jsonpatch.Operation"),
                                ([{"op": "test", "path": "/x"}] * 10_001, 413,
                                 ("Request entity too large: The allowed maximum operations in a JSON patch is 10000, "
                                  "got 10001"))):
        status, answer = send(api, "PATCH", "/api/v1/nodes/n1", body, JSON_PATCH)
        assert (status, answer["message"], answer["reason"]) == (code, message, {400: "BadRequest",
                                                                                   413: "RequestEntityTooLarge"}[code])


def test_unknown_patch_type_is_415(core):
    status, body, _ = error(lambda: patch(core, {"metadata": {}}, "application/apply-patch+yaml"))
    assert status == 415 and body["reason"] == "UnsupportedMediaType"


def test_resource_version_precondition_gives_409(api, core):
    stale = api.node("n1")["metadata"]["resourceVersion"]
    api.edit_node("n1", lambda n: n["metadata"]["labels"].update({"other": "x"}))
    for call in (lambda: patch(core, {"metadata": {"resourceVersion": stale, "labels": {"a": "b"}}}),
                 lambda: patch(core, [{"op": "replace", "path": "/metadata/resourceVersion", "value": stale}], JSON_PATCH),
                 lambda: core.replace_node("n1", dict(api.node("n1"), metadata=dict(api.node("n1")["metadata"],
                                                                                    resourceVersion=stale)))):
        status, body, _ = error(call)
        assert status == 409 and body["reason"] == "Conflict"
        assert "the object has been modified" in body["message"] and body["details"]["name"] == "n1"
    fresh = api.node("n1")
    fresh["metadata"]["labels"]["put.example.com/x"] = "1"
    put = raw(core.replace_node("n1", fresh, _preload_content=False))
    assert put["metadata"]["labels"]["put.example.com/x"] == "1"
    assert "a" not in api.node("n1")["metadata"]["labels"]


@pytest.mark.parametrize("body, reason, field, fragment", [
    ({"metadata": {"labels": {"bad key": "x"}}}, "FieldValueInvalid", "metadata.labels",
     'Invalid value: "bad key": name part must consist of alphanumeric characters'),
    ({"metadata": {"labels": {"ok.example.com/k": "-bad"}}}, "FieldValueInvalid", "metadata.labels",
     'Invalid value: "-bad": a valid label must be an empty string'),
    ({"metadata": {"labels": {"ok.example.com/k": "v" * 64}}}, "FieldValueInvalid", "metadata.labels",
     "must be no more than 63 characters"),
    ({"metadata": {"labels": {"Upper.Example.com/k": "v"}}}, "FieldValueInvalid", "metadata.labels",
     "prefix part a lowercase RFC 1123 subdomain"),
    ({"metadata": {"annotations": {"example.com/huge": "x" * 300_000}}}, "FieldValueTooLong", "metadata.annotations",
     "Too long: must have at most 262144 bytes"),
    ({"spec": {"taints": [{"key": "example.com/t", "effect": "Sometimes"}]}}, "FieldValueNotSupported",
     "metadata.taints[0].effect", 'Unsupported value: "Sometimes": supported values: "NoSchedule"'),
    ({"spec": {"taints": [{"key": "example.com/t"}]}}, "FieldValueRequired", "metadata.taints[0].effect", "Required value"),
    ({"spec": {"taints": [{"key": "example.com/t", "value": "a", "effect": "NoSchedule"},
                          {"key": "example.com/t", "value": "b", "effect": "NoSchedule"}]}},
     "FieldValueDuplicate", "metadata.taints[1]", "taints must be unique by key and effect pair"),
    ({"spec": {"taints": [{"key": "a/b/c", "effect": "NoSchedule"}]}}, "FieldValueInvalid", "metadata.taints[0].key",
     "a qualified name must consist of"),
])
def test_validation_errors_are_422_status_bodies(api, core, body, reason, field, fragment):
    rv = api.node("n1")["metadata"]["resourceVersion"]
    status, got, _ = error(lambda: patch(core, body))
    assert status == 422 and got["kind"] == "Status" and got["reason"] == "Invalid" and got["code"] == 422
    assert got["message"].startswith('Node "n1" is invalid: ')
    assert got["details"]["name"] == "n1" and got["details"]["kind"] == "Node"
    causes = got["details"]["causes"]
    assert any(c["reason"] == reason and c["field"] == field and fragment in c["message"] for c in causes), causes
    assert api.node("n1")["metadata"]["resourceVersion"] == rv


def test_main_resource_update_reports_metadata_causes_twice_and_status_once(api, core):
    """nodeStrategy.ValidateUpdate = ValidateNode + ValidateNodeUpdate, both validating the
    ObjectMeta; nodeStatusStrategy.ValidateUpdate = ValidateNodeUpdate alone. NewInvalid puts
    every cause in details.causes; the message comes from ToAggregate(), which drops repeats."""
    status, got, _ = error(lambda: patch(core, {"metadata": {"labels": {"bad key": "x"}},
                                                "spec": {"taints": [{"key": "example.com/t", "effect": "Nope"}]}}))
    fields = [c["field"] for c in got["details"]["causes"]]
    assert status == 422 and fields == ["metadata.labels", "metadata.taints[0].effect", "metadata.labels"]
    assert got["details"]["causes"][0] == got["details"]["causes"][2]
    assert got["message"] == ('Node "n1" is invalid: [metadata.labels: ' + got["details"]["causes"][0]["message"]
                              + ", metadata.taints[0].effect: " + got["details"]["causes"][1]["message"] + "]")
    status, got, _ = error(lambda: patch(core, [{"op": "add", "path": "/status/capacity/example.com~1x",
                                                 "value": "-1"}], JSON_PATCH, status=True))
    assert status == 422 and [c["field"] for c in got["details"]["causes"]] == ["status.capacity.example.com/x"]
    assert got["message"] == 'Node "n1" is invalid: status.capacity.example.com/x: ' + got["details"]["causes"][0]["message"]
    # a bad label written through /status: ValidateNodeUpdate checks the metadata too, once
    status, got, _ = error(lambda: patch(core, {"metadata": {"labels": {"bad key": "x"}}}, status=True))
    assert status == 422 and [c["field"] for c in got["details"]["causes"]] == ["metadata.labels"]


def test_same_taint_key_with_two_effects_is_fine(core):
    taints = [{"key": "example.com/t", "effect": "NoSchedule"}, {"key": "example.com/t", "effect": "NoExecute"}]
    assert patch(core, {"spec": {"taints": taints}})["spec"]["taints"] == taints


@pytest.mark.parametrize("name, value, fragment", [
    ("example.com/half", "1500m", "must be an integer"),
    ("pods", "1500m", "must be an integer"),  # helper.IsIntegerResourceName: pods is an integer resource
    ("example.com/neg", "-1", "must be greater than or equal to 0"),
    ("requests.example.com/thing", "1", "doesn't follow extended resource name standard"),
    ("Example.com/x", "1", "prefix part a lowercase RFC 1123 subdomain"),
    ("dongle", "1", "must be a standard resource type or fully qualified"),
])
def test_extended_resource_rules(core, name, value, fragment):
    escaped = name.replace("/", "~1")
    status, body, _ = error(lambda: patch(core, [{"op": "add", "path": f"/status/capacity/{escaped}", "value": value}],
                                          JSON_PATCH, status=True))
    assert status == 422
    assert any(c["field"] == f"status.capacity.{name}" and fragment in c["message"] for c in body["details"]["causes"])


def test_prefixed_native_resource_names_are_ones_a_pod_may_request(core):
    """``validateContainerResourceName`` checks a prefixed name for the extended-name standard
    only when it is not native (``IsNativeResource``: contains ``kubernetes.io/``), so NFD's
    ``feature.node.kubernetes.io/nons`` is requestable and stored; whole numbers are not required
    of it (``IsIntegerResourceName`` is the integer set or extended names)."""
    node = patch(core, [{"op": "add", "path": "/status/capacity/feature.node.kubernetes.io~1nons", "value": "123"}],
                 JSON_PATCH, status=True)
    assert node["status"]["capacity"]["feature.node.kubernetes.io/nons"] == "123"


def test_resource_names_pass_when_name_checks_are_off():
    with FakeApiServer(check_resource_names=False) as api:  # what a real server does (reference 1.5)
        api.add_node("n1")
        core = api.core_api()
        node = patch(core, [{"op": "add", "path": "/status/capacity/Example.com~1x", "value": "1"}], JSON_PATCH, status=True)
        assert node["status"]["capacity"]["Example.com/x"] == "1"


def test_status_subresource_and_kubelet_allocatable_copy(api, core):
    ignored = patch(core, {"status": {"capacity": {"example.com/x": "3"}}, "metadata": {"labels": {"m": "1"}}})
    assert "example.com/x" not in ignored["status"]["capacity"] and ignored["metadata"]["labels"]["m"] == "1"
    node = patch(core, [{"op": "add", "path": "/status/capacity/example.com~1x", "value": "1000"}], JSON_PATCH, status=True)
    assert node["status"]["capacity"]["example.com/x"] == "1k"  # stored canonical
    assert node["status"]["allocatable"]["example.com/x"] == "1k"
    assert node["status"]["allocatable"]["cpu"] == "4"
    spec_ignored = patch(core, {"spec": {"taints": []}, "metadata": {"labels": {"via-status": "yes"}}}, status=True)
    assert spec_ignored["spec"]["taints"] and spec_ignored["metadata"]["labels"]["via-status"] == "yes"
    gone = patch(core, [{"op": "remove", "path": "/status/capacity/example.com~1x"}], JSON_PATCH, status=True)
    assert "example.com/x" not in gone["status"]["capacity"] and "example.com/x" not in gone["status"]["allocatable"]
    assert raw(core.read_node_status("n1", _preload_content=False))["status"]["capacity"]["cpu"] == "4"


def test_status_json_patch_applies_metadata_with_the_capacity_atomically(api, core):
    """``nodeStatusStrategy.PrepareForUpdate`` sets ``newNode.Spec = oldNode.Spec`` and its
    ``GetResetFields`` lists only ``spec`` (kubernetes pkg/registry/core/node/strategy.go):
    metadata in a /status write is applied, as ``ValidateNodeUpdate``
    checks it. The agent relies on this to trim its ownership record in the same JSON patch
    that removes the resource; a patch whose one op fails changes nothing (RFC 6902 5)."""
    record = "/metadata/annotations/node-feature-agent.io~1owned-extended-resources"
    patch(core, [{"op": "add", "path": "/status/capacity/example.com~1old", "value": "1"}], JSON_PATCH, status=True)
    patch(core, {"metadata": {"annotations": {"node-feature-agent.io/owned-extended-resources": "example.com/old"}}})
    swapped = patch(core, [{"op": "add", "path": "/status/capacity/example.com~1new", "value": "1"},
                           {"op": "remove", "path": "/status/capacity/example.com~1old"},
                           {"op": "add", "path": record, "value": "example.com/new"}], JSON_PATCH, status=True)
    assert swapped["metadata"]["annotations"]["node-feature-agent.io/owned-extended-resources"] == "example.com/new"
    assert "example.com/old" not in swapped["status"]["capacity"] and swapped["status"]["capacity"]["example.com/new"] == "1"
    before = api.node("n1")
    status, _body, _ = error(lambda: patch(core, [{"op": "remove", "path": record},
                                                   {"op": "remove", "path": "/status/capacity/example.com~1gone"}],
                                           JSON_PATCH, status=True))
    assert status == 422 and api.node("n1") == before  # the record stays with the resource it names
    status, body, _ = error(lambda: patch(core, [{"op": "add", "path": "/metadata/labels/bad key", "value": "x"}],
                                          JSON_PATCH, status=True))
    assert status == 422 and [c["field"] for c in body["details"]["causes"]] == ["metadata.labels"]


def test_quantities_are_canonical():
    assert [canonical(q) for q in ("2", "1000", "2000m", "1024Mi", "1.5", "1536Ki", 3)] == \
        ["2", "1k", "2", "1Gi", "1500m", "1536Ki", "3"]


def test_empty_maps_are_omitted_like_go(api, core):
    node = patch(core, {"metadata": {"labels": None, "annotations": None}, "spec": {"taints": None}})
    assert "labels" not in node["metadata"] and "annotations" not in node["metadata"] and "taints" not in node["spec"]
    status, _body, _ = error(lambda: patch(core, [{"op": "add", "path": "/metadata/annotations/a", "value": "b"}], JSON_PATCH))
    assert status == 422  # the parent map is gone, as on a real server


def test_watch_from_a_version_sees_changes_and_bookmarks(api, core):
    rv = core.list_node(_request_timeout=TIMEOUT).metadata.resource_version
    got: list[tuple[str, str]] = []
    bookmarks: list[dict] = []
    w = watch.Watch()

    def consume():
        for event in w.stream(core.list_node, field_selector="metadata.name=n1", resource_version=rv,
                              allow_watch_bookmarks=True, timeout_seconds=5, _request_timeout=TIMEOUT):
            obj = event["raw_object"]
            got.append((event["type"], obj["metadata"].get("labels", {}).get("w", "")))
            if event["type"] == "BOOKMARK":
                bookmarks.append(obj)
                w.stop()

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    _wait(lambda: api.watches.count() == 1)
    api.edit_node("n2", lambda n: n["metadata"]["labels"].update({"w": "other node"}))
    api.edit_node("n1", lambda n: n["metadata"]["labels"].update({"w": "1"}))
    _wait(lambda: got)
    api.send_bookmarks()
    thread.join(10)
    assert not thread.is_alive()
    assert got == [("MODIFIED", "1"), ("BOOKMARK", "")]
    assert w.resource_version == str(api.store.rv)  # the client took the bookmark's (latest) version
    [mark] = bookmarks  # an empty Node as Go serializes one: no name, no uid, the version
    assert mark["metadata"] == {"resourceVersion": str(api.store.rv), "creationTimestamp": None}
    assert mark["kind"] == "Node" and mark["spec"] == {} and mark["status"]["nodeInfo"]["machineID"] == ""
    watches = [r for r in api.requests if r.query.get("watch") == "true"]
    assert watches[0].query["resourceVersion"] == rv and watches[0].query["allowWatchBookmarks"] == "true"


def test_watch_without_version_starts_with_added_and_ends_at_timeout(api, core):
    events = list(watch.Watch().stream(core.list_node, timeout_seconds=1, _request_timeout=TIMEOUT))
    assert [(e["type"], e["object"].metadata.name) for e in events] == [("ADDED", "n1"), ("ADDED", "n2")]


def test_watch_length_follows_timeout_seconds_not_the_servers_default():
    """kube-apiserver closes a watch after the ``timeoutSeconds`` the client asked for; only a
    watch without it gets the server's own length, so a client's long idle watch is renewed when
    it asked, as against a real server."""
    import time

    with FakeApiServer(watch_timeout=0.5, bookmark_interval=60) as srv:
        srv.add_node("n1")
        core = client.CoreV1Api(client.ApiClient(srv.client_configuration()))
        started = time.monotonic()
        list(watch.Watch().stream(core.list_node, timeout_seconds=2, _request_timeout=(2.0, 10.0)))
        assert time.monotonic() - started >= 1.9
        started = time.monotonic()
        resp = core.list_node(watch=True, _preload_content=False, _request_timeout=(2.0, 10.0))
        resp.read()
        assert time.monotonic() - started < 1.5  # no timeoutSeconds: the server's 0.5 s


def test_deleted_and_recreated_node_has_a_new_uid_and_watch_events(api, core):
    rv = core.read_node("n1").metadata.resource_version
    old_uid = api.node("n1")["metadata"]["uid"]
    api.delete_node("n1")
    api.add_node("n1")
    events = list(watch.Watch().stream(core.list_node, field_selector="metadata.name=n1", resource_version=rv,
                                       timeout_seconds=1, _request_timeout=TIMEOUT))
    assert [e["type"] for e in events] == ["DELETED", "ADDED"]
    assert events[1]["object"].metadata.uid != old_uid == events[0]["object"].metadata.uid


def test_expired_versions_give_410(api, core):
    rv = core.read_node("n1").metadata.resource_version
    api.edit_node("n1", lambda n: None)
    api.expire_resource_versions()
    with pytest.raises(ApiException) as info:  # the client retries the in-stream 410 once, then raises
        list(watch.Watch().stream(core.list_node, resource_version=rv, _request_timeout=TIMEOUT))
    assert info.value.status == 410 and "too old resource version" in str(info.value.reason)
    fresh = core.read_node("n1").metadata.resource_version  # a new read is fine again
    assert list(watch.Watch().stream(core.list_node, resource_version=fresh, timeout_seconds=1,
                                     _request_timeout=TIMEOUT)) == []


def test_open_watches_expire_or_drop(api, core):
    w_rv = core.list_node().metadata.resource_version
    outcome: dict[str, object] = {}

    def consume(key):
        try:
            outcome[key] = list(watch.Watch().stream(core.list_node, resource_version=w_rv, timeout_seconds=10,
                                                     _request_timeout=TIMEOUT))
        except ApiException as exc:
            outcome[key] = exc.status

    thread = threading.Thread(target=consume, args=("expired",), daemon=True)
    thread.start()
    _wait(lambda: api.watches.count() == 1)
    api.expire_resource_versions()
    thread.join(10)
    assert outcome["expired"] == 410
    # the client returns on the ERROR event; the server lets go of that watch just after. Until
    # it has, "one open watch" below would be that one, and the drop would miss the new stream
    _wait(lambda: api.watches.count() == 0)

    w_rv = core.list_node().metadata.resource_version
    thread = threading.Thread(target=consume, args=("dropped",), daemon=True)
    thread.start()
    _wait(lambda: api.watches.count() == 1)
    assert api.drop_watches() == 1
    thread.join(10)
    assert outcome["dropped"] == []  # ended cleanly mid-stream, long before its timeout


def test_watch_410_texts_and_periodic_compaction(core):
    """A watch from a compacted version: the watch cache's "too old resource version: %d (%d)"
    with oldest-1, whatever the selector (getAllEventsSinceLocked); an open watch whose revision
    etcd compacts: etcd3 interpretWatchError's text. With compact_interval the compactor
    compacts to the revision it recorded one tick earlier."""
    with FakeApiServer(compact_interval=0.2) as api:
        api.add_node("n1")
        api.add_node("n2")
        core = api.core_api()
        old = core.list_node(field_selector="metadata.name=n1").metadata.resource_version
        api.edit_node("n2", lambda n: None)  # a change the n1 watch does not even select
        _wait(lambda: api.compactions >= 2)
        floor = api.store.oldest_minus_one()
        assert floor > int(old)
        response = core.list_node(field_selector="metadata.name=n1", watch=True, resource_version=old,
                                  _preload_content=False, _request_timeout=TIMEOUT)
        [line] = [json.loads(x) for x in response.data.splitlines() if x.strip()]
        assert line == {"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "metadata": {},
                                                    "status": "Failure", "reason": "Expired", "code": 410,
                                                    "message": f"too old resource version: {old} ({floor})"}}
        fresh = core.list_node(field_selector="metadata.name=n1").metadata.resource_version
        assert list(watch.Watch().stream(core.list_node, field_selector="metadata.name=n1", resource_version=fresh,
                                         timeout_seconds=1, _request_timeout=TIMEOUT)) == []


def test_http_410_mode():
    with FakeApiServer(watch_410="http") as api:
        api.add_node("n1")
        api.edit_node("n1", lambda n: None)
        api.expire_resource_versions()
        status, body, _ = error(lambda: api.core_api().list_node(watch=True, resource_version="1", _preload_content=False))
        assert status == 410 and body["reason"] == "Expired"


def test_faults_fail_throttle_and_scope(api, core):
    api.faults.fail(503, count=2, retry_after=2)
    for _ in range(2):
        status, body, headers = error(lambda: core.read_node("n1"))
        assert status == 503 and body["reason"] == "ServiceUnavailable" and headers["Retry-After"] == "2"
    assert core.read_node("n1").metadata.name == "n1"
    api.faults.throttle(retry_after=3, count=1)
    with pytest.raises(ApiException) as info:
        core.read_node("n1")
    # the flow-control filter's http.Error: plain text, Retry-After, no Status
    assert info.value.status == 429 and info.value.headers["Retry-After"] == "3"
    assert info.value.body == b"Too many requests, please try again later.\n" or \
        info.value.body == "Too many requests, please try again later.\n"
    assert info.value.headers["Content-Type"] == "text/plain; charset=utf-8"
    api.faults.fail(500, count=1, verb="PATCH", path="/status")
    assert core.read_node("n1")  # not matched: a GET
    assert patch(core, {"metadata": {"labels": {"x": "1"}}})  # not matched: main resource
    status, _body, _ = error(lambda: patch(core, {"metadata": {"labels": {"y": "1"}}}, status=True))
    assert status == 500 and api.faults.pending() == 0


def test_refused_and_slow_requests(api, core):
    api.faults.refuse_connections(count=1)
    with pytest.raises(urllib3.exceptions.HTTPError):
        core.read_node("n1", _request_timeout=TIMEOUT)
    api.faults.refuse_connections(count=1, reset=True)
    with pytest.raises((urllib3.exceptions.HTTPError, OSError)):
        core.read_node("n1", _request_timeout=TIMEOUT)
    api.faults.slow(1.0, count=1)
    with pytest.raises(urllib3.exceptions.HTTPError):
        core.read_node("n1", _request_timeout=(2.0, 0.2))
    assert core.read_node("n1", _request_timeout=TIMEOUT).metadata.name == "n1"
    _wait(lambda: len(api.requests) == 4)  # the slow one is logged when the server answers it
    log = sorted(api.requests, key=lambda r: r.at)
    assert [r.fault for r in log] == ["refuse", "refuse", "slow", None]
    assert [r.status for r in log] == [0, 0, 200, 200]


def test_request_log_and_write_counts(api, core):
    api.clear_requests()
    core.read_node("n1")
    patch(core, {"metadata": {"labels": {"x": "1"}}})
    patch(core, [{"op": "add", "path": "/status/capacity/example.com~1x", "value": "1"}], JSON_PATCH, status=True)
    error(lambda: patch(core, {"metadata": {"labels": {"bad key": "1"}}}))
    patch(core, {"metadata": {"labels": {"x": "1"}}}, name="n2")
    log = api.requests
    assert [(r.method, r.path, r.status) for r in log] == [
        ("GET", "/api/v1/nodes/n1", 200), ("PATCH", "/api/v1/nodes/n1", 200), ("PATCH", "/api/v1/nodes/n1/status", 200),
        ("PATCH", "/api/v1/nodes/n1", 422), ("PATCH", "/api/v1/nodes/n2", 200)]
    assert log[1].body == {"metadata": {"labels": {"x": "1"}}} and log[1].content_type == MERGE
    assert log[2].content_type == JSON_PATCH and log[0].body is None
    assert len(api.writes("n1")) == 2 and len(api.writes()) == 3
    api.reset_requests()
    assert api.requests == [] and api.writes() == []


def test_events_core_and_events_k8s_io(api, core):
    body = {"metadata": {"generateName": "n1."}, "involvedObject": {"kind": "Node", "name": "n1"},
            "reason": "Tested", "message": "hello", "type": "Normal"}
    created = raw(core.create_namespaced_event("default", body, _preload_content=False))
    assert created["metadata"]["name"].startswith("n1.") and created["metadata"]["namespace"] == "default"
    events_api = client.EventsV1Api(client.ApiClient(api.client_configuration()))
    events_api.create_namespaced_event("default", {"metadata": {"name": "e2"}, "regarding": {"kind": "Node", "name": "n1"},
                                                   "reason": "Tested", "note": "new api", "action": "Test",
                                                   "reportingController": "x", "reportingInstance": "y",
                                                   "eventTime": "2024-01-01T00:00:00.000000Z"})
    assert [e["reason"] for e in api.events()] == ["Tested", "Tested"]
    listed = core.list_event_for_all_namespaces(field_selector="involvedObject.name=n1").items
    assert [e.message for e in listed] == ["hello"]
    nameless = urllib3.PoolManager().request("POST", f"{api.url}/api/v1/namespaces/default/events",
                                             json={"involvedObject": {"name": "n1"}}, timeout=5.0)
    got = json.loads(nameless.data)
    assert nameless.status == 422 and got["details"]["causes"][0]["field"] == "metadata.name"


def test_pods_listing_and_eviction(api, core):
    api.add_pod("apps", "p1", "n1", node_selector={"accelerators/edgetpu": "true"})
    api.add_pod("apps", "p2", "n2")
    pods = core.list_pod_for_all_namespaces(field_selector="spec.nodeName=n1").items
    assert [p.metadata.name for p in pods] == ["p1"] and pods[0].spec.node_selector == {"accelerators/edgetpu": "true"}
    core.create_namespaced_pod_eviction("p1", "apps", {"apiVersion": "policy/v1", "kind": "Eviction",
                                                       "metadata": {"name": "p1", "namespace": "apps"}})
    assert [p["metadata"]["name"] for p in api.pods()] == ["p2"]
    status, _body, _ = error(lambda: core.create_namespaced_pod_eviction("p1", "apps", {"metadata": {"name": "p1"}}))
    assert status == 404


def test_second_writer_races_and_stops(api, core):
    with api.second_writer("n1", interval=0.01) as writer:
        _wait(lambda: writer.edits >= 3)
        stale = core.read_node("n1").metadata.resource_version
        _wait(lambda: api.node("n1")["metadata"]["resourceVersion"] != stale)
        status, _body, _ = error(lambda: patch(core, {"metadata": {"resourceVersion": stale, "labels": {"a": "b"}}}))
        assert status == 409
    edits = writer.edits
    node = api.node("n1")
    assert node["metadata"]["labels"][writer.LABEL] == str(edits) and writer.errors == []
    assert {"key": writer.TAINT, "value": str(edits), "effect": "NoSchedule"} in node["spec"]["taints"]
    assert {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"} in node["spec"]["taints"]


def test_a_watch_from_the_current_state_streams_later_changes_on_the_same_connection():
    """Without a resourceVersion a watch starts with ADDED for what exists, then streams the
    changes on the same connection (it once broke at the first change: the stream's event
    encoder was shadowed by the loop that sent the initial events)."""
    with FakeApiServer() as api:
        api.add_node("n1")
        core = api.core_api()
        seen: list[str] = []

        def consume() -> None:
            for event in watch.Watch().stream(core.list_node, timeout_seconds=30, _request_timeout=(2.0, 30.0)):
                seen.append(event["type"])
                if len(seen) == 2:
                    return

        threading.Thread(target=consume, daemon=True).start()
        _wait(lambda: seen == ["ADDED"])
        api.edit_node("n1", lambda node: node["metadata"].setdefault("labels", {}).update(x="1"))
        _wait(lambda: len(seen) == 2)
        assert seen == ["ADDED", "MODIFIED"]
        assert [r.status for r in api.requests if r.query.get("watch") == "true"] == [200]


def test_stop_ends_open_watches_without_hanging():
    api = FakeApiServer().start()
    api.add_node("n1")
    core = api.core_api()
    ended = threading.Event()

    def consume():
        try:
            list(watch.Watch().stream(core.list_node, timeout_seconds=60, _request_timeout=(2.0, 30.0)))
        except Exception:  # noqa: BLE001, S110 - the connection is cut: any error is fine, hanging is not
            pass
        ended.set()

    threading.Thread(target=consume, daemon=True).start()
    _wait(lambda: api.watches.count() == 1)
    api.stop()
    assert ended.wait(10)


@pytest.mark.skipif(not shutil.which("kubectl"), reason="kubectl is not installed here: the kubectl test is skipped")
def test_kubectl_get_label_patch(api, tmp_path):
    kubeconfig = api.kubeconfig(tmp_path / "kubeconfig")

    def kubectl(*args: str) -> str:
        done = subprocess.run(["kubectl", "--kubeconfig", str(kubeconfig), "--cache-dir", str(tmp_path / "cache"), *args],
                              capture_output=True, text=True, timeout=60, env=dict(os.environ, HOME=str(tmp_path)))
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert [i["metadata"]["name"] for i in json.loads(kubectl("get", "nodes", "-o", "json"))["items"]] == ["n1", "n2"]
    assert "n1" in kubectl("get", "nodes") and "Ready" in kubectl("get", "nodes")
    kubectl("label", "node", "n1", "kubectl.example.com/x=y")
    assert kubectl("get", "node", "n1", "-o", "jsonpath={.metadata.labels.kubectl\\.example\\.com/x}") == "y"
    kubectl("patch", "node", "n1", "--subresource=status", "--type=json",
            "-p", '[{"op":"add","path":"/status/capacity/example.com~1dongle","value":"4"}]')
    assert "example.com/dongle: \"4\"" in kubectl("get", "node", "n1", "-o", "yaml")
    assert api.node("n1")["status"]["allocatable"]["example.com/dongle"] == "4"
    kubectl("taint", "node", "n1", "kubectl.example.com/t=v:NoSchedule")
    assert {"key": "kubectl.example.com/t", "value": "v", "effect": "NoSchedule"} in api.node("n1")["spec"]["taints"]
    assert len(api.writes("n1")) == 3


def _wait(predicate, timeout: float = 10.0) -> None:
    """Poll until ``predicate()`` (bounded: a stuck condition fails, never hangs)."""
    done = threading.Event()
    deadline = timeout
    step = 0.01
    while not predicate():
        if deadline <= 0:
            raise AssertionError("condition not reached within the bound")
        done.wait(step)
        deadline -= step


def test_an_unsupported_field_selector_is_a_400_as_on_a_real_server():
    """pkg/apis/core/v1/conversion.go: nodes support metadata.name and spec.unschedulable
    (plus metadata.namespace); anything else is "field label not supported"."""
    import urllib.error
    import urllib.request

    with FakeApiServer() as server:
        server.add_node("n1")
        host = server.client_configuration().host
        with urllib.request.urlopen(f"{host}/api/v1/nodes?fieldSelector=metadata.name%3Dn1") as answer:
            assert answer.status == 200
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"{host}/api/v1/nodes?fieldSelector=metadata.nam%3Dn1")
        assert err.value.code == 400 and "field label not supported: metadata.nam" in err.value.read().decode()


def test_unknown_fields_in_a_patch_are_dropped_as_the_real_server_decodes_them():
    """A body is decoded into the Go Node struct: fields the type does not have vanish (the
    field list is the official client's generated model, tests/support/schema.py)."""
    import json
    import urllib.request

    with FakeApiServer() as server:
        server.add_node("n1")
        body = {"metadata": {"labels": {"example.com/a": "b"}, "bogus": 1},
                "spec": {"bogusField": 1, "taints": [{"key": "example.com/t", "effect": "NoSchedule", "x": 1}]}}
        request = urllib.request.Request(f"{server.client_configuration().host}/api/v1/nodes/n1",
                                         data=json.dumps(body).encode(), method="PATCH",
                                         headers={"Content-Type": "application/merge-patch+json"})
        with urllib.request.urlopen(request) as answer:
            assert answer.status == 200
        node = server.node("n1")
        assert node["metadata"]["labels"]["example.com/a"] == "b"
        assert "bogus" not in node["metadata"] and "bogusField" not in node["spec"]
        assert node["spec"]["taints"] == [{"key": "example.com/t", "effect": "NoSchedule"}]


@pytest.mark.parametrize("patch_body, go_error", [
    ({"metadata": {"labels": {"a.example.com/x": 1}}},
     "json: cannot unmarshal number into Go struct field ObjectMeta.metadata.labels of type string"),
    ({"metadata": {"annotations": {"a.example.com/x": True}}},
     "json: cannot unmarshal bool into Go struct field ObjectMeta.metadata.annotations of type string"),
    ({"spec": {"taints": [{"key": 7, "effect": "NoSchedule"}]}},
     "json: cannot unmarshal number into Go struct field Taint.spec.taints.key of type string"),
    ({"spec": {"unschedulable": "yes"}},
     "json: cannot unmarshal string into Go struct field NodeSpec.spec.unschedulable of type bool"),
    ({"spec": {"podCIDRs": "10.0.0.0/24"}},
     "json: cannot unmarshal string into Go struct field NodeSpec.spec.podCIDRs of type []string"),
    ({"metadata": {"finalizers": [1]}},
     "json: cannot unmarshal number into Go struct field ObjectMeta.metadata.finalizers of type string"),
])
def test_a_wrong_typed_field_is_422_on_patch_and_400_on_put_and_post(api, patch_body, go_error):
    """PATCH: handlers/patch.go decodes the patched JSON and answers NewInvalid(GroupKind{}, "",
    [Invalid(field "patch", <patched JSON>, err)]), a 422 with no kind or name; PUT/POST:
    transformDecodeError's 400. Any field of the type, not only labels."""
    rv = api.node("n1")["metadata"]["resourceVersion"]
    status, body = send(api, "PATCH", "/api/v1/nodes/n1", patch_body, MERGE)
    assert status == 422 and body["reason"] == "Invalid"
    [cause] = body["details"]["causes"]
    assert cause["field"] == "patch" and cause["reason"] == "FieldValueInvalid"
    assert cause["message"].startswith('Invalid value: "{') and cause["message"].endswith("}\": " + go_error)
    assert body["message"] == ' "" is invalid: patch: ' + cause["message"]
    assert "kind" not in body["details"] and "name" not in body["details"]
    node = api.node("n1")
    for section, values in patch_body.items():
        node.setdefault(section, {}).update(values)
    status, body = send(api, "PUT", "/api/v1/nodes/n1", node)
    assert (status, body["reason"]) == (400, "BadRequest")
    assert body["message"] == 'Node in version "v1" cannot be handled as a Node: ' + go_error
    node = dict(node, metadata=dict(node["metadata"], name="n9", resourceVersion=None, uid=None))
    status, body = send(api, "POST", "/api/v1/nodes", node)
    assert (status, body["message"]) == (400, 'Node in version "v1" cannot be handled as a Node: ' + go_error)
    assert api.node("n1")["metadata"]["resourceVersion"] == rv


def test_a_watch_asked_for_tables_gets_one_table_per_event_headers_first(api):
    """handlers/watch.go's Fixup turns each event's object into a Table and sets
    TableOptions.NoHeaders after the first, so only the first carries column definitions."""
    rv = api.node("n2")["metadata"]["resourceVersion"]
    result: dict[str, object] = {}

    def consume():
        http = urllib3.PoolManager()
        answer = http.request("GET", api.url + f"/api/v1/nodes?watch=true&resourceVersion={rv}&timeoutSeconds=2",
                              headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
                                       "Authorization": "Bearer fake-token"}, timeout=10.0, retries=False)
        result["type"] = answer.headers["Content-Type"]
        result["events"] = [json.loads(x) for x in answer.data.splitlines() if x.strip()]

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    _wait(lambda: api.watches.count() == 1)
    api.edit_node("n1", lambda n: n["metadata"]["labels"].update({"t": "1"}))
    api.edit_node("n2", lambda n: n["metadata"]["labels"].update({"t": "2"}))
    thread.join(10)
    events = result["events"]
    assert result["type"] == "application/json;as=Table;v=v1;g=meta.k8s.io"
    assert [e["type"] for e in events] == ["MODIFIED", "MODIFIED"]
    assert all(e["object"]["kind"] == "Table" and e["object"]["apiVersion"] == "meta.k8s.io/v1" for e in events)
    assert [c["name"] for c in events[0]["object"]["columnDefinitions"]][:2] == ["Name", "Status"]
    assert events[1]["object"]["columnDefinitions"] is None
    assert [e["object"]["rows"][0]["cells"][0] for e in events] == ["n1", "n2"]


def test_kubectl_watch_and_apply(api, tmp_path):
    """kubectl as a second client: `get -w` prints the Table events; plain `apply` reads the
    OpenAPI v3 documents (the core group's, recorded by Kubernetes in client-go's testdata)
    and patches with server-side field validation asked for."""
    kubeconfig = api.kubeconfig(tmp_path / "kubeconfig")
    base = ["kubectl", "--kubeconfig", str(kubeconfig), "--cache-dir", str(tmp_path / "cache")]
    env = dict(os.environ, HOME=str(tmp_path))
    watcher = subprocess.Popen(base + ["get", "nodes", "-w", "--request-timeout=5s"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=env)
    try:
        _wait(lambda: api.watches.count() == 1)
        api.add_node("n3")
        out, _err = watcher.communicate(timeout=15)  # --request-timeout ends the watch
    finally:
        if watcher.poll() is None:
            watcher.kill()
            watcher.communicate()
    lines = [line.split()[0] for line in out.splitlines()]
    assert lines[0] == "NAME" and lines.count("NAME") == 1 and "n3" in lines[3:], out
    manifest = tmp_path / "node.json"
    manifest.write_text(json.dumps({"apiVersion": "v1", "kind": "Node",
                                    "metadata": {"name": "n1", "labels": {"apply.example.com/x": "1"}}}))
    for _ in range(2):
        done = subprocess.run(base + ["apply", "-f", str(manifest)], capture_output=True, text=True,
                              timeout=60, env=env)
        assert done.returncode == 0, done.stderr
    fetched = [r.path for r in api.requests if r.path.startswith("/openapi/")]
    assert "/openapi/v3" in fetched and "/openapi/v3/api/v1" in fetched, fetched
    labels = api.node("n1")["metadata"]["labels"]
    assert labels["apply.example.com/x"] == "1" and labels["team.example.com/owner"] == "infra"
    assert "kubectl.kubernetes.io/last-applied-configuration" in api.node("n1")["metadata"]["annotations"]
    assert done.stdout.strip() == "node/n1 unchanged"


def test_404_and_409_status_bodies_as_apimachinery_builds_them(api, core):
    """errors.NewNotFound / NewConflict / NewAlreadyExists: details carry the name and the
    resource (not the kind) as "kind"; an empty group is omitted."""
    status, body = send(api, "GET", "/api/v1/nodes/nope", None)
    assert status == 404 and body == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                      "message": 'nodes "nope" not found', "reason": "NotFound",
                                      "details": {"name": "nope", "kind": "nodes"}, "code": 404}
    stale = api.node("n1")["metadata"]["resourceVersion"]
    api.edit_node("n1", lambda n: None)
    status, body = send(api, "PATCH", "/api/v1/nodes/n1", {"metadata": {"resourceVersion": stale}}, MERGE)
    assert status == 409 and body == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "reason": "Conflict",
        "message": 'Operation cannot be fulfilled on nodes "n1": the object has been modified; please apply your '
                   "changes to the latest version and try again",
        "details": {"name": "n1", "kind": "nodes"}, "code": 409}
    status, body = send(api, "POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n2"}})
    assert status == 409 and body["reason"] == "AlreadyExists" and body["message"] == 'nodes "n2" already exists'
    assert body["details"] == {"name": "n2", "kind": "nodes"}
