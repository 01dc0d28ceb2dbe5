"""The test API server's ResourceClaims, through the official client, against the rules of
``pkg/apis/resource/validation/validation.go`` and the claim strategies (tests/support/README.md)."""

from __future__ import annotations

import pytest
from kubernetes.client import CustomObjectsApi
from kubernetes.client.api_client import ApiClient
from kubernetes.client.exceptions import ApiException

from tests.support.apiserver import FakeApiServer
from tests.support.kubelet_dra import claim_body

G, V, P = "resource.k8s.io", "v1", "resourceclaims"


@pytest.fixture
def api():
    with FakeApiServer() as server:
        yield CustomObjectsApi(ApiClient(server.client_configuration()))


def result(device="edgetpu-pci-0000-01-00-0", request="tpu", driver="node-feature-agent.io", pool="edge-ai-1"):
    return {"request": request, "driver": driver, "pool": pool, "device": device}


def allocate(api, *results, name="c"):
    return api.patch_namespaced_custom_object_status(G, V, "default", P, name,
                                                     {"status": {"allocation": {"devices": {"results": list(results)}}}})


def causes(err):
    import json

    return [(c["field"], c["message"]) for c in json.loads(err.body)["details"]["causes"]]


def test_create_drops_status_and_status_writes_keep_the_spec(api):
    body = claim_body("c", ["tpu"]) | {"status": {"allocation": {"devices": {"results": [result()]}}}}
    created = api.create_namespaced_custom_object(G, V, "default", P, body)
    assert "status" not in created and created["metadata"]["namespace"] == "default"
    allocated = allocate(api, result())
    assert allocated["status"]["allocation"]["devices"]["results"] == [result()]
    assert allocated["spec"] == created["spec"]
    got = api.get_namespaced_custom_object(G, V, "default", P, "c")
    assert got["status"] == allocated["status"]


def test_spec_and_allocation_are_immutable_but_the_allocation_may_be_removed(api):
    api.create_namespaced_custom_object(G, V, "default", P, claim_body("c", ["tpu"]))
    with pytest.raises(ApiException) as err:
        api.patch_namespaced_custom_object(G, V, "default", P, "c", {"spec": {"devices": {"requests": []}}})
    assert err.value.status == 422 and causes(err.value)[0][0] == "spec"
    allocate(api, result())
    with pytest.raises(ApiException) as err:
        allocate(api, result(device="edgetpu-usb-0000-00-14-0-2-2"))
    ((field, message),) = causes(err.value)
    assert err.value.status == 422 and field == "status.allocation" and "field is immutable" in message
    cleared = api.patch_namespaced_custom_object_status(G, V, "default", P, "c", {"status": {"allocation": None}})
    assert "allocation" not in (cleared.get("status") or {})
    assert allocate(api, result(device="edgetpu-usb-0000-00-14-0-2-2"))["status"]["allocation"]


def test_allocation_results_are_validated(api):
    api.create_namespaced_custom_object(G, V, "default", P, claim_body("c", ["tpu"]))
    with pytest.raises(ApiException) as err:
        allocate(api, result(request="nope", driver="Not_A_Domain", pool="edge-ai-1/", device="Bad.Name"))
    fields = [f for f, _m in causes(err.value)]
    base = "status.allocation.devices.results[0]"
    assert fields == [f"{base}.request", f"{base}.driver", f"{base}.pool", f"{base}.device"]
    with pytest.raises(ApiException) as err:
        allocate(api, *[result()] * 33)
    assert causes(err.value) == [("status.allocation.devices.results", "Too many: 33: must have at most 32 items")]
    assert allocate(api, *[result()] * 32)


def test_a_share_id_is_a_normalized_uuid(api):
    """validateUID: a share of a device that allows multiple allocations is named by a UUID in
    RFC 4122 normalized form (36 characters, lower case); consumedCapacity is kept as given."""
    api.create_namespaced_custom_object(G, V, "default", P, claim_body("c", ["tpu"]))
    base = "status.allocation.devices.results"
    for bad, why in (("not-a-uuid", "error validating uid"),
                     ("0E8B1D7C-4C2A-4D0F-9C52-1A2B3C4D5E6F", "RFC 4122 normalized form"),
                     ("0e8b1d7c4c2a4d0f9c521a2b3c4d5e6f", "RFC 4122 normalized form")):
        with pytest.raises(ApiException) as err:
            allocate(api, result() | {"shareID": bad})
        ((field, message),) = causes(err.value)
        assert field == f"{base}[0].shareID" and why in message
    share = result() | {"shareID": "0e8b1d7c-4c2a-4d0f-9c52-1a2b3c4d5e6f", "consumedCapacity": {"shares": "1"}}
    assert allocate(api, share)["status"]["allocation"]["devices"]["results"] == [share]


def test_missing_claims_are_404(api):
    with pytest.raises(ApiException) as err:
        api.get_namespaced_custom_object(G, V, "default", P, "absent")
    assert err.value.status == 404
