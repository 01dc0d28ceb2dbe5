"""The ResourceSlice writer against the test API server (real validation, real client):
content-compared writes, the pool's generation, the 128/64 split, unready devices, held reads,
and slices of other drivers and nodes left alone."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from kubernetes import client

from agent.deviceplugin.model import DeviceNode, PluginDevice, ResourceDevices
from agent.dra.names import DRIVER
from agent.dra.slices import NOT_READY_TAINT, Node, ReadFailed, SliceWriter, published_devices
from tests.support.apiserver import FakeApiServer

SLICES = "resourceslices.resource.k8s.io"
EDGETPU = "node-feature-agent.io/edgetpu"


def pci(n: int, why: str = "", serial: str = "") -> PluginDevice:
    address = f"0000:{n // 256:02x}:{n % 256 // 8:02x}.{n % 8}"
    attrs = {"address": address, "bus": "pci", "vendor": "1ac1", "device": "089a", "class": "0880",
             "driver": "apex", "pcie_root": "pci0000:00"}
    if serial:
        attrs["serial"] = serial
    return PluginDevice(f"pci-{address}", (DeviceNode(f"/dev/apex_{n}", f"/dev/apex_{n}"),), why, 0,
                        attributes=tuple(sorted(attrs.items())))


def resources(*devices: PluginDevice, shares: int = 1) -> dict[str, ResourceDevices]:
    return {EDGETPU: ResourceDevices(EDGETPU, devices, shares=shares)}


def slice_writes(api: FakeApiServer) -> list[Any]:
    return [r for r in api.requests if "/resourceslices" in r.path and r.method in ("POST", "PUT", "DELETE", "PATCH")]


def stored(api: FakeApiServer) -> list[dict[str, Any]]:
    return api.store.list(SLICES)[0]


@pytest.fixture
def api():
    with FakeApiServer() as server:
        server.add_node("n1")
        yield server


def writer(api: FakeApiServer, version: str = "v1") -> SliceWriter:
    node = api.node("n1")
    return SliceWriter(client.ApiClient(api.client_configuration()), Node("n1", node["metadata"]["uid"]), version)


def test_one_slice_with_the_fields_the_api_requires(api: FakeApiServer) -> None:
    assert writer(api).sync(published_devices(resources(pci(1)), taints=False).devices) == 1
    [item] = stored(api)
    spec = item["spec"]
    assert (spec["driver"], spec["nodeName"], spec["pool"]) == (DRIVER, "n1", {"name": "n1", "generation": 0,
                                                                              "resourceSliceCount": 1})
    assert item["metadata"]["ownerReferences"][0]["uid"] == api.node("n1")["metadata"]["uid"]
    attrs = spec["devices"][0]["attributes"]
    assert attrs["resource.kubernetes.io/pciBusID"] == {"string": "0000:00:00.1"}
    assert attrs["resource.kubernetes.io/pcieRoot"] == {"string": "pci0000:00"}
    assert attrs["resource.kubernetes.io/numaNode"] == {"int": 0}
    assert attrs["class"] == {"string": "edgetpu"} and attrs["ready"] == {"bool": True}


def test_zero_writes_at_steady_state_and_across_a_restart(api: FakeApiServer) -> None:
    devices = published_devices(resources(pci(1), pci(2)), taints=False).devices
    writer(api).sync(devices)
    api.clear_requests()
    assert writer(api).sync(devices) == 0  # a new writer: the agent restarted
    assert writer(api).sync(copy.deepcopy(devices)) == 0
    assert slice_writes(api) == []


def test_one_write_per_device_change_and_the_generation_bumped(api: FakeApiServer) -> None:
    w = writer(api)
    w.sync(published_devices(resources(pci(1)), taints=False).devices)
    api.clear_requests()
    assert w.sync(published_devices(resources(pci(1), pci(2)), taints=False).devices) == 1
    assert [r.method for r in slice_writes(api)] == ["PUT"]
    [item] = stored(api)
    assert item["spec"]["pool"]["generation"] == 1 and len(item["spec"]["devices"]) == 2


def test_shares_publish_one_device_per_replica(api: FakeApiServer) -> None:
    writer(api).sync(published_devices(resources(pci(1), shares=3), taints=False).devices)
    names = [d["name"] for d in stored(api)[0]["spec"]["devices"]]
    assert names == ["edgetpu-pci-0000-00-00-1", "edgetpu-pci-0000-00-00-1-r1", "edgetpu-pci-0000-00-00-1-r2"]


def test_split_at_128_and_back(api: FakeApiServer) -> None:
    w = writer(api)
    w.sync(published_devices(resources(*(pci(i) for i in range(200))), taints=False).devices)
    slices = stored(api)
    assert sorted(len(s["spec"]["devices"]) for s in slices) == [72, 128]
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in slices} == {2}
    api.clear_requests()
    w.sync(published_devices(resources(pci(1)), taints=False).devices)
    assert sorted(r.method for r in slice_writes(api)) == ["DELETE", "PUT"]
    [left] = stored(api)
    assert left["spec"]["pool"] == {"name": "n1", "generation": 1, "resourceSliceCount": 1}


def test_unready_devices_left_out_without_device_taints(api: FakeApiServer) -> None:
    published = published_devices(resources(pci(1), pci(2, why="firmware not loaded")), taints=False)
    writer(api).sync(published.devices)
    assert [d["name"] for d in stored(api)[0]["spec"]["devices"]] == ["edgetpu-pci-0000-00-00-1"]
    assert published.left_out == {"edgetpu-pci-0000-00-00-2": "firmware not loaded"}


def test_unready_devices_tainted_where_the_api_has_device_taints() -> None:
    with FakeApiServer(dra_device_taints=True) as api:
        api.add_node("n1")
        devices = published_devices(resources(*(pci(i, why="x" if i == 0 else "") for i in range(100))),
                                    taints=True).devices
        w = writer(api)
        w.sync(devices)
        slices = stored(api)
        assert sorted(len(s["spec"]["devices"]) for s in slices) == [36, 64]  # 64 with a taint
        tainted = [d for s in slices for d in s["spec"]["devices"] if d.get("taints")]
        assert [t["key"] for d in tainted for t in d["taints"]] == [NOT_READY_TAINT]
        api.clear_requests()
        assert w.sync(devices) == 0


def test_attribute_values_too_long_are_left_out(api: FakeApiServer) -> None:
    writer(api).sync(published_devices(resources(pci(1, serial="S" * 65), pci(2, serial="ABC")), taints=False).devices)
    by_name = {d["name"]: d["attributes"] for d in stored(api)[0]["spec"]["devices"]}
    assert "serial" not in by_name["edgetpu-pci-0000-00-00-1"]
    assert by_name["edgetpu-pci-0000-00-00-2"]["serial"] == {"string": "ABC"}


def test_slices_of_other_drivers_and_nodes_are_never_touched(api: FakeApiServer) -> None:
    rapi = client.ResourceV1Api(client.ApiClient(api.client_configuration()))
    for driver, node in (("gpu.example.com", "n1"), (DRIVER, "n2")):
        rapi.create_resource_slice({"metadata": {"name": f"{driver}-{node}"}, "spec": {
            "driver": driver, "nodeName": node, "pool": {"name": node, "generation": 5, "resourceSliceCount": 1},
            "devices": [{"name": "x"}]}})
    before = {s["metadata"]["name"]: s for s in stored(api)}
    w = writer(api)
    w.sync(published_devices(resources(pci(1)), taints=False).devices)
    w.sync([])
    w.delete_all()
    after = {s["metadata"]["name"]: s for s in stored(api)}
    assert after == before


def test_a_hostile_answer_is_a_held_read(api: FakeApiServer) -> None:
    w = writer(api)
    w.sync(published_devices(resources(pci(1)), taints=False).devices)
    before = stored(api)
    api.clear_requests()
    for arm in (lambda: api.faults.fail(500, verb="GET", path="/resourceslices"),
                lambda: api.faults.answer({"kind": "NodeList", "items": []}, verb="GET", path="/resourceslices"),
                lambda: api.faults.answer({"kind": "ResourceSliceList", "items": [{"x": 1}]}, verb="GET",
                                          path="/resourceslices"),
                lambda: api.faults.refuse_connections(verb="GET", path="/resourceslices")):
        arm()
        with pytest.raises(ReadFailed):
            w.sync([])
    assert slice_writes(api) == [] and stored(api) == before


def test_v1beta1_round_trip(api: FakeApiServer) -> None:
    with FakeApiServer(dra_versions=("v1beta1",)) as old:
        old.add_node("n1")
        w = writer(old, "v1beta1")
        devices = published_devices(resources(pci(1), pci(2)), taints=False).devices
        assert w.sync(devices) == 1
        assert w.sync(devices) == 0
        assert len(stored(old)[0]["spec"]["devices"]) == 2


def test_delete_all_removes_this_nodes_slices(api: FakeApiServer) -> None:
    w = writer(api)
    w.sync(published_devices(resources(*(pci(i) for i in range(130))), taints=False).devices)
    assert w.delete_all() == 2
    assert stored(api) == []
