"""The test API server's ``resource.k8s.io`` through the official client: discovery by
version, and each validation rule of ``dra_resources.py`` against its upstream limit."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client

from tests.support.apiserver import FakeApiServer


def _slice(devices: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    body = {"driver": "node-feature-agent.io", "nodeName": "n1",
            "pool": {"name": "n1", "generation": 0, "resourceSliceCount": 1}, "devices": devices}
    body.update(spec)
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"generateName": "n1-"},
            "spec": {k: v for k, v in body.items() if v is not None}}


def _refused(api: FakeApiServer, body: dict[str, Any]) -> list[dict[str, str]]:
    with pytest.raises(client.ApiException) as err:
        client.ResourceV1Api(client.ApiClient(api.client_configuration())).create_resource_slice(body)
    assert err.value.status == 422
    return json.loads(err.value.body)["details"]["causes"]  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def api():
    with FakeApiServer() as server:
        yield server


def test_discovery_lists_the_served_versions() -> None:
    for versions in (("v1", "v1beta1"), ("v1beta1",), ()):
        with FakeApiServer(dra_versions=versions) as server:
            groups = client.ApisApi(client.ApiClient(server.client_configuration())).get_api_versions().groups
            served = [g for g in groups if g.name == "resource.k8s.io"]
            assert [v.version for g in served for v in g.versions] == list(versions)


def test_a_valid_slice_round_trips_in_both_versions(api: FakeApiServer) -> None:
    c = client.ApiClient(api.client_configuration())
    attrs = {"resource.kubernetes.io/pciBusID": {"string": "0000:01:00.0"}, "class": {"string": "edgetpu"},
             "numaNode": {"int": 0}, "ready": {"bool": True}, "fw": {"version": "1.2.3-rc.1+b7"}}
    made = client.ResourceV1Api(c).create_resource_slice(_slice([{"name": "edgetpu-pci-0000-01-00-0",
                                                                 "attributes": attrs}]))
    seen = client.ResourceV1beta1Api(c).read_resource_slice(made.metadata.name)
    assert seen.spec.devices[0].basic.attributes["numaNode"].int == 0  # v1beta1: under ``basic``
    assert made.metadata.name.startswith("n1-")


@pytest.mark.parametrize(("name", "ok"), [
    ("a" * 32, True), ("a" * 33, False),  # DeviceMaxIDLength = 32
    ("_x9", True), ("9x", False), ("x-y", False),  # IsCIdentifier
    ("example.com/ok", True), ("Example.com/ok", True),  # the domain is checked lower-cased (ValidateCSIDriverName)
    ("/x", False), ("example.com/", False), ("a" * 64 + "/x", False),  # DeviceMaxDomainLength = 63
])
def test_attribute_names(api: FakeApiServer, name: str, ok: bool) -> None:
    body = _slice([{"name": "d", "attributes": {name: {"bool": True}}}])
    if ok:
        client.ResourceV1Api(client.ApiClient(api.client_configuration())).create_resource_slice(body)
    else:
        assert any(c["field"] == "spec.devices[0].attributes" for c in _refused(api, body))


@pytest.mark.parametrize("value", [{}, {"int": 1, "bool": True}, {"string": "x" * 65}, {"version": "1.2"},
                                   {"version": "01.2.3"}])
def test_attribute_values_refused(api: FakeApiServer, value: dict[str, Any]) -> None:
    causes = _refused(api, _slice([{"name": "d", "attributes": {"a": value}}]))
    assert all(c["field"].startswith("spec.devices[0].attributes[a]") for c in causes)


def test_caps(api: FakeApiServer) -> None:
    many = {f"a{i}": {"int": i} for i in range(33)}  # ResourceSliceMaxAttributesAndCapacitiesPerDevice = 32
    assert _refused(api, _slice([{"name": "d", "attributes": many}]))[0]["field"] == "spec.devices[0]"
    devices = [{"name": f"d{i}"} for i in range(129)]  # ResourceSliceMaxDevices = 128
    assert _refused(api, _slice(devices))[0]["message"].startswith("Too many: 129")
    c = client.ResourceV1Api(client.ApiClient(api.client_configuration()))
    c.create_resource_slice(_slice(devices[:128]))


def test_devices_with_taints_cap_at_64_and_need_the_feature() -> None:
    taint = [{"key": "node-feature-agent.io/not-ready", "effect": "NoSchedule"}]
    devices = [{"name": f"d{i}", "taints": taint} for i in range(65)]
    with FakeApiServer(dra_device_taints=True) as server:
        assert _refused(server, _slice(devices))[0]["message"].startswith("Too many: 65")  # ...WithAdvancedFeatures
        made = client.ResourceV1Api(client.ApiClient(server.client_configuration())).create_resource_slice(
            _slice(devices[:64]))
        assert made.spec.devices[0].taints[0].effect == "NoSchedule"
    with FakeApiServer(dra_device_taints=False) as server:  # dropDisabledFields: the field is dropped
        made = client.ResourceV1Api(client.ApiClient(server.client_configuration())).create_resource_slice(
            _slice(devices[:64]))
        assert made.spec.devices[0].taints is None


def test_pool_node_and_driver_rules(api: FakeApiServer) -> None:
    fields = {c["field"] for c in _refused(api, _slice([], driver="Bad_Driver!", pool={"name": "", "generation": -1,
                                                                                      "resourceSliceCount": 0}))}
    assert fields == {"spec.driver", "spec.pool.name", "spec.pool.generation", "spec.pool.resourceSliceCount"}
    both = _refused(api, _slice([], allNodes=True))
    assert "but multiple fields are set" in both[0]["message"]
    assert "is required" in _refused(api, _slice([], nodeName=None))[0]["message"]
    assert _refused(api, _slice([{"name": "Not_A_Label"}]))[0]["field"] == "spec.devices[0].name"
    assert _refused(api, _slice([{"name": "d"}, {"name": "d"}]))[0]["reason"] == "FieldValueDuplicate"


def test_update_keeps_pool_driver_and_node(api: FakeApiServer) -> None:
    c = client.ResourceV1Api(client.ApiClient(api.client_configuration()))
    made = c.create_resource_slice(_slice([]))
    body = client.ApiClient().sanitize_for_serialization(c.read_resource_slice(made.metadata.name))
    body["spec"]["nodeName"] = "n2"
    with pytest.raises(client.ApiException) as err:
        c.replace_resource_slice(made.metadata.name, body)
    assert err.value.status == 422 and "spec.nodeName" in err.value.body


def test_field_selectors(api: FakeApiServer) -> None:
    c = client.ResourceV1Api(client.ApiClient(api.client_configuration()))
    c.create_resource_slice(_slice([], nodeName="other"))
    names = {s.spec.node_name for s in c.list_resource_slice(field_selector="spec.nodeName=other").items}
    assert names == {"other"}
    with pytest.raises(client.ApiException) as err:
        c.list_resource_slice(field_selector="spec.devices=x")
    assert err.value.status == 400


def test_device_class_rules(api: FakeApiServer) -> None:
    c = client.ResourceV1Api(client.ApiClient(api.client_configuration()))
    good = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "edgetpu"},
            "spec": {"selectors": [{"cel": {"expression": 'device.driver == "node-feature-agent.io"'}}],
                     "extendedResourceName": "node-feature-agent.io/edgetpu"}}
    assert c.create_device_class(good).spec.extended_resource_name == "node-feature-agent.io/edgetpu"
    bad = dict(good, metadata={"name": "bad"}, spec={"selectors": [{"cel": {"expression": ""}}],
                                                      "extendedResourceName": "kubernetes.io/x"})
    with pytest.raises(client.ApiException) as err:
        c.create_device_class(bad)
    causes = {x["field"] for x in json.loads(err.value.body)["details"]["causes"]}
    assert causes == {"spec.selectors[0].cel.expression", "spec.extendedResourceName"}


def test_unserved_version_is_404() -> None:
    with FakeApiServer(dra_versions=("v1beta1",)) as server:
        with pytest.raises(client.ApiException) as err:
            client.ResourceV1Api(client.ApiClient(server.client_configuration())).list_resource_slice()
        assert err.value.status == 404



def test_a_watch_with_field_selectors_streams_the_version_watched() -> None:
    """WATCH of ResourceSlices with ``spec.nodeName``/``spec.driver`` (``ResourceSliceToSelectableFields``,
    ``pkg/registry/resource/resourceslice/strategy.go``): only matching slices, each object in
    the version watched (``v1beta1``: the device's fields under ``basic``), bookmarks of the
    watched kind."""
    import urllib.request

    with FakeApiServer(bookmark_interval=0.05) as server:
        c = client.ResourceV1Api(client.ApiClient(server.client_configuration()))
        c.create_resource_slice(_slice([{"name": "d0", "attributes": {"class": {"string": "edgetpu"}}}]))
        c.create_resource_slice(_slice([{"name": "d1"}], nodeName="other"))
        url = (f"{server.url}/apis/resource.k8s.io/v1beta1/resourceslices?watch=true&allowWatchBookmarks=true"
               "&timeoutSeconds=1&fieldSelector=spec.nodeName%3Dn1,spec.driver%3Dnode-feature-agent.io")
        with urllib.request.urlopen(url, timeout=10) as answer:
            events = [json.loads(line) for line in answer.read().splitlines() if line.strip()]
    added = [e["object"] for e in events if e["type"] == "ADDED"]
    assert [o["spec"]["nodeName"] for o in added] == ["n1"]
    assert added[0]["apiVersion"] == "resource.k8s.io/v1beta1"
    assert added[0]["spec"]["devices"] == [{"name": "d0", "basic": {"attributes": {"class": {"string": "edgetpu"}}}}]
    assert {e["object"]["kind"] for e in events if e["type"] == "BOOKMARK"} <= {"ResourceSlice"}
# -- consumable capacity (KEP-5075) -----------------------------------------------------------
def _shared(policy: dict[str, Any] | None = None, value: str = "4", multiple: bool | None = True) -> dict[str, Any]:
    capacity: dict[str, Any] = {"value": value}
    if policy is not None:
        capacity["requestPolicy"] = policy
    device: dict[str, Any] = {"name": "d", "capacity": {"shares": capacity}}
    if multiple is not None:
        device["allowMultipleAllocations"] = multiple
    return device


@pytest.mark.parametrize(("policy", "field", "text"), [
    ({"default": "1", "validValues": ["1"], "validRange": {"min": "1"}}, "spec.devices[0].capacity[shares].requestPolicy",
     'cannot specify "validValues" and "validRange" at the same time'),
    ({"validValues": ["1"]}, "spec.devices[0].capacity[shares].requestPolicy.default", "required when validValues"),
    ({"default": "2", "validValues": ["2", "1"]}, "spec.devices[0].capacity[shares].requestPolicy.validValues[1]",
     "sorted in ascending order"),
    ({"default": "1", "validValues": ["1", "8"]}, "spec.devices[0].capacity[shares].requestPolicy.validValues[1]",
     "option is larger than capacity value: 4"),
    ({"default": "3", "validValues": ["1", "2"]}, "spec.devices[0].capacity[shares].requestPolicy.validValues",
     "default value is not valid according to the requestPolicy"),
    ({"default": "1", "validValues": [str(i) for i in range(11)]},
     "spec.devices[0].capacity[shares].requestPolicy.validValues", "must have at most 10 items"),
    ({"validRange": {"min": "1"}}, "spec.devices[0].capacity[shares].requestPolicy.default", "required when validRange"),
    ({"default": "1", "validRange": {"min": "5"}}, "spec.devices[0].capacity[shares].requestPolicy.validRange.min",
     "min is larger than capacity value: 4"),
    ({"default": "1", "validRange": {"min": "2"}}, "spec.devices[0].capacity[shares].requestPolicy.validRange.min",
     "default is less than min: 2"),
    ({"default": "3", "validRange": {"min": "1", "max": "2"}},
     "spec.devices[0].capacity[shares].requestPolicy.validRange.max", "default is more than max: 2"),
    ({"default": "1", "validRange": {"min": "1", "max": "8"}},
     "spec.devices[0].capacity[shares].requestPolicy.validRange.max", "max is larger than capacity value: 4"),
    ({"default": "2", "validRange": {"min": "1", "step": "2"}},
     "spec.devices[0].capacity[shares].requestPolicy.validRange.step", "not a multiple of a given step (2) from (1)"),
])
def test_request_policy_rules(policy: dict[str, Any], field: str, text: str) -> None:
    with FakeApiServer(dra_consumable_capacity=True) as server:
        causes = _refused(server, _slice([_shared(policy)]))
        assert any(c["field"] == field and text in c["message"] for c in causes), causes


def test_a_request_policy_needs_allow_multiple_allocations_and_the_feature_keeps_both() -> None:
    one_share = {"default": "1", "validValues": ["1"]}
    with FakeApiServer(dra_consumable_capacity=True) as server:
        (cause,) = _refused(server, _slice([_shared(one_share, multiple=None)]))
        assert cause == {"reason": "FieldValueForbidden", "message": "Forbidden: allowMultipleAllocations must be true",
                         "field": "spec.devices[0].capacity[shares].requestPolicy"}
        made = client.ResourceV1Api(client.ApiClient(server.client_configuration())).create_resource_slice(
            _slice([_shared({"default": "1000m", "validRange": {"min": "1", "max": "1"}})]))
        (device,) = made.spec.devices
        assert device.allow_multiple_allocations is True
        assert device.capacity["shares"].value == "4"
        assert device.capacity["shares"].request_policy.default == "1"  # stored canonical
        assert device.capacity["shares"].request_policy.valid_range.max == "1"


def test_without_the_feature_both_fields_are_dropped_unless_the_stored_slice_uses_them() -> None:
    """dropDisabledDRAConsumableCapacityFields: create drops them (the capacity's value stays);
    an update keeps them when the stored slice already has them (draConsumableCapacityFeatureInUse)."""
    body = _slice([_shared({"default": "1", "validValues": ["1"]})])
    with FakeApiServer(dra_consumable_capacity=False) as server:
        c = client.ResourceV1Api(client.ApiClient(server.client_configuration()))
        made = c.create_resource_slice(body)
        (device,) = made.spec.devices
        assert device.allow_multiple_allocations is None and device.capacity["shares"].request_policy is None
        assert device.capacity["shares"].value == "4"
        replaced = c.replace_resource_slice(made.metadata.name, dict(body, metadata={"name": made.metadata.name}))
        assert replaced.spec.devices[0].allow_multiple_allocations is None
    with FakeApiServer(dra_consumable_capacity=True) as server:
        c = client.ResourceV1Api(client.ApiClient(server.client_configuration()))
        made = c.create_resource_slice(body)
        server.dra_consumable_capacity = False  # the gate turned off later: stored slices keep theirs
        replaced = c.replace_resource_slice(made.metadata.name, dict(body, metadata={"name": made.metadata.name}))
        assert replaced.spec.devices[0].allow_multiple_allocations is True


def test_dry_run_answers_what_would_be_stored_and_stores_nothing() -> None:
    body = _slice([_shared({"default": "1", "validValues": ["1"]})])
    for gate in (True, False):
        with FakeApiServer(dra_consumable_capacity=gate) as server:
            c = client.ResourceV1Api(client.ApiClient(server.client_configuration()))
            made = c.create_resource_slice(body, dry_run="All")
            assert made.metadata.name.startswith("n1-")
            assert made.spec.devices[0].allow_multiple_allocations is (True if gate else None)
            assert server.store.list("resourceslices.resource.k8s.io")[0] == []
            with pytest.raises(client.ApiException) as err:
                c.create_resource_slice(body, dry_run="Some")
            assert err.value.status == 422
            assert json.loads(err.value.body)["details"]["causes"] == [
                {"reason": "FieldValueNotSupported", "message": 'Unsupported value: "Some": supported values: "All"',
                 "field": "dryRun"}]
            bad = _slice([_shared({"default": "9", "validValues": ["1"]})])
            if gate:  # validated as a real write is
                with pytest.raises(client.ApiException) as err:
                    c.create_resource_slice(bad, dry_run="All")
                assert err.value.status == 422
            else:  # the policy is dropped before validation
                assert c.create_resource_slice(bad, dry_run="All").spec.devices[0].capacity["shares"].request_policy is None
            assert server.store.list("resourceslices.resource.k8s.io")[0] == []
