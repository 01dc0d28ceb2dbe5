"""LightCoreV1Api sends what the generated CoreV1Api sends and fails the same way."""

import json

import pytest
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from agent.kube.connect import load_configuration
from agent.kube.light_core import LightCoreV1Api
from agent.reconcile.node_api import Conflict, NodeApi, NodeNotFound, Throttled
from tests.support.apiserver import FakeApiServer

RAW = {"_preload_content": False, "_request_timeout": (5, 10)}


@pytest.fixture
def server():
    with FakeApiServer() as srv:
        srv.add_node("n1", labels={"a": "1"})
        srv.add_pod("ns", "p", "n1", node_selector={"a": "1"})
        yield srv


def both(server):
    return LightCoreV1Api(ApiClient(server.client_configuration())), server.core_api()


def strip(record):
    return (record.method, record.path, dict(record.query), record.body, record.headers.get("Content-Type"),
            record.headers.get("Authorization"))


def test_same_requests_and_answers_as_the_generated_client(server):
    light, generated = both(server)
    calls = [
        lambda c: c.read_node("n1", **RAW),
        lambda c: c.list_node(field_selector="metadata.name=n1", **RAW),
        lambda c: c.patch_node("n1", {"metadata": {"labels": {"b": "2"}}}, _content_type="application/merge-patch+json", **RAW),
        lambda c: c.patch_node_status("n1", [{"op": "add", "path": "/status/capacity/example.com~1x", "value": "1"}],
                                      _content_type="application/json-patch+json", **RAW),
        lambda c: c.list_pod_for_all_namespaces(field_selector="spec.nodeName=n1", **RAW),
    ]
    for call in calls:
        server.clear_requests()
        light_body = json.loads(call(light).data)
        (light_request,) = server.requests
        server.clear_requests()
        generated_body = json.loads(call(generated).data)
        (generated_request,) = server.requests
        assert strip(light_request) == strip(generated_request)
        for body in (light_body, generated_body):
            body.get("metadata", {}).pop("resourceVersion", None)
            body.get("metadata", {}).pop("managedFields", None)
        assert light_body.keys() == generated_body.keys()


def test_errors_raise_api_exception_with_status_body_and_headers(server):
    light, generated = both(server)
    for client in (light, generated):
        with pytest.raises(ApiException) as info:
            client.read_node("missing", **RAW)
        assert info.value.status == 404 and b"missing" in (info.value.body if isinstance(info.value.body, bytes) else info.value.body.encode())
        server.faults.throttle(retry_after=3, verb="GET")
        with pytest.raises(ApiException) as info:
            client.read_node("n1", **RAW)
        assert info.value.status == 429 and info.value.headers.get("Retry-After") == "3"


def test_node_api_on_the_light_client(server, tmp_path):
    api = NodeApi.from_configuration(load_configuration(str(server.kubeconfig(tmp_path / "kc"))))
    assert isinstance(api, NodeApi)
    node = api.get_node("n1")
    assert node["metadata"]["labels"]["a"] == "1"
    with pytest.raises(NodeNotFound):
        api.get_node("nope")
    with pytest.raises(Conflict):
        api.patch_metadata("n1", {"metadata": {"resourceVersion": "1", "labels": {"c": "3"}}})
    server.faults.throttle(retry_after=2)
    with pytest.raises(Throttled) as info:
        api.patch_metadata("n1", {"metadata": {"labels": {"c": "3"}}})
    assert info.value.retry_after == 2
    assert api.patch_metadata("n1", {"metadata": {"labels": {"c": "3"}}})["metadata"]["labels"]["c"] == "3"
    event = api.create_event("default", {"metadata": {"generateName": "n1."}, "involvedObject": {"kind": "Node", "name": "n1"},
                                         "reason": "Test", "message": "m", "type": "Normal"})
    assert event["reason"] == "Test"
    evicted = api.core.create_namespaced_pod_eviction("p", "ns", {"apiVersion": "policy/v1", "kind": "Eviction",
                                                                  "metadata": {"name": "p", "namespace": "ns"}}, **RAW)
    assert evicted.status == 201 and not server.pods("n1")


def test_only_raw_responses():
    light = LightCoreV1Api(ApiClient())
    with pytest.raises(ValueError):
        light.read_node("n1", _preload_content=True)
