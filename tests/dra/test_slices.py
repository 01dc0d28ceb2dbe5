"""The ResourceSlice writer against the test API server (real validation, real client):
content-compared writes, the pool's generation, the 128/64 split, unready devices, held reads,
the attribute bound, and slices of other drivers and nodes left alone. Each writer reads the
slices through its own watch (``agent.dra.watched``), as the publisher's does."""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from kubernetes import client

from agent.deviceplugin.model import DeviceNode, PluginDevice, ResourceDevices
from agent.dra.names import DRIVER
from agent.dra.slices import (
    MAX_ATTRIBUTES,
    NOT_READY_TAINT,
    PAST_BOUND,
    TOO_LONG,
    Node,
    NotYet,
    ReadFailed,
    SliceWriter,
    bounded,
    published_devices,
)
from agent.dra.watched import WatchedSlices
from agent.kube.backoff import BackoffSettings
from agent.kube.reflector import ReflectorSettings
from tests.runtime.helpers import wait_for
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


FAST = ReflectorSettings(backoff=BackoffSettings(initial=0.02, maximum=0.1), max_delay=0.1, watch_timeout=30)
_started: list[WatchedSlices] = []


@pytest.fixture(autouse=True)
def _stop_watches() -> Iterator[None]:
    yield
    while _started:
        _started.pop().stop()


@pytest.fixture
def api():
    with FakeApiServer() as server:
        server.add_node("n1")
        yield server


def writer(api: FakeApiServer, version: str = "v1", *, start: bool = True) -> SliceWriter:
    """A writer on its own watch of node n1's slices (started: LIST, then WATCH)."""
    node = api.node("n1")
    api_client = client.ApiClient(api.client_configuration())
    watched = WatchedSlices(api_client, "n1", version, settings=FAST)
    if start:
        _started.append(watched.start())
    return SliceWriter(api_client, Node("n1", node["metadata"]["uid"]), version, watched)


def sync(w: SliceWriter, devices: Sequence[dict[str, Any]], timeout: float = 20.0) -> int:
    """``w.sync`` once its watch holds the slices (the first LIST, the echo of its last write)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return w.sync(devices)
        except NotYet:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def test_one_slice_with_the_fields_the_api_requires(api: FakeApiServer) -> None:
    assert sync(writer(api), published_devices(resources(pci(1)), taints=False).devices) == 1
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
    sync(writer(api), devices)
    api.clear_requests()
    assert sync(writer(api), devices) == 0  # a new writer: the agent restarted
    assert sync(writer(api), copy.deepcopy(devices)) == 0
    assert slice_writes(api) == []


def test_one_write_per_device_change_and_the_generation_bumped(api: FakeApiServer) -> None:
    w = writer(api)
    sync(w, published_devices(resources(pci(1)), taints=False).devices)
    api.clear_requests()
    assert sync(w, published_devices(resources(pci(1), pci(2)), taints=False).devices) == 1
    assert [r.method for r in slice_writes(api)] == ["PUT"]
    [item] = stored(api)
    assert item["spec"]["pool"]["generation"] == 1 and len(item["spec"]["devices"]) == 2


def test_shares_publish_one_device_per_replica(api: FakeApiServer) -> None:
    sync(writer(api), published_devices(resources(pci(1), shares=3), taints=False).devices)
    names = [d["name"] for d in stored(api)[0]["spec"]["devices"]]
    assert names == ["edgetpu-pci-0000-00-00-1", "edgetpu-pci-0000-00-00-1-r1", "edgetpu-pci-0000-00-00-1-r2"]


def test_split_at_128_and_back(api: FakeApiServer) -> None:
    w = writer(api)
    sync(w, published_devices(resources(*(pci(i) for i in range(200))), taints=False).devices)
    slices = stored(api)
    assert sorted(len(s["spec"]["devices"]) for s in slices) == [72, 128]
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in slices} == {2}
    api.clear_requests()
    sync(w, published_devices(resources(pci(1)), taints=False).devices)
    assert sorted(r.method for r in slice_writes(api)) == ["DELETE", "PUT"]
    [left] = stored(api)
    assert left["spec"]["pool"] == {"name": "n1", "generation": 1, "resourceSliceCount": 1}


def test_unready_devices_left_out_without_device_taints(api: FakeApiServer) -> None:
    published = published_devices(resources(pci(1), pci(2, why="firmware not loaded")), taints=False)
    sync(writer(api), published.devices)
    assert [d["name"] for d in stored(api)[0]["spec"]["devices"]] == ["edgetpu-pci-0000-00-00-1"]
    assert published.left_out == {"edgetpu-pci-0000-00-00-2": "firmware not loaded"}


def test_unready_devices_tainted_where_the_api_has_device_taints() -> None:
    with FakeApiServer(dra_device_taints=True) as api:
        api.add_node("n1")
        devices = published_devices(resources(*(pci(i, why="x" if i == 0 else "") for i in range(100))),
                                    taints=True).devices
        w = writer(api)
        sync(w, devices)
        slices = stored(api)
        assert sorted(len(s["spec"]["devices"]) for s in slices) == [36, 64]  # 64 with a taint
        tainted = [d for s in slices for d in s["spec"]["devices"] if d.get("taints")]
        assert [t["key"] for d in tainted for t in d["taints"]] == [NOT_READY_TAINT]
        api.clear_requests()
        assert sync(w, devices) == 0


def test_attribute_values_too_long_are_left_out(api: FakeApiServer) -> None:
    sync(writer(api), published_devices(resources(pci(1, serial="S" * 65), pci(2, serial="ABC")), taints=False).devices)
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
    sync(w, published_devices(resources(pci(1)), taints=False).devices)
    sync(w, [])
    w.delete_all()
    after = {s["metadata"]["name"]: s for s in stored(api)}
    assert after == before


def test_a_hostile_answer_is_a_held_read(api: FakeApiServer) -> None:
    """A LIST that fails or is no ResourceSliceList is not read: nothing is written on it."""
    first = writer(api)
    sync(first, published_devices(resources(pci(1)), taints=False).devices)
    first.watched.stop()  # its watch would take the faults
    before = stored(api)
    api.clear_requests()
    for arm in (lambda: api.faults.fail(500, verb="GET", path="/resourceslices"),
                lambda: api.faults.answer({"kind": "NodeList", "items": []}, verb="GET", path="/resourceslices"),
                lambda: api.faults.answer("<html>proxy</html>", verb="GET", path="/resourceslices"),
                lambda: api.faults.refuse_connections(verb="GET", path="/resourceslices")):
        arm()
        w = writer(api, start=False)
        with pytest.raises(ReadFailed):
            w.watched.list_once()
        with pytest.raises(NotYet):  # never listed: nothing to compare with
            w.sync([])
    assert slice_writes(api) == [] and stored(api) == before


def test_a_watch_that_cannot_be_read_holds_until_it_recovers(api: FakeApiServer) -> None:
    w = writer(api)
    devices = published_devices(resources(pci(1)), taints=False).devices
    sync(w, devices)
    api.faults.fail(503, count=10_000, verb="GET", path="/resourceslices")
    api.drop_watches()
    wait_for(lambda: w.watched.unreadable is not None, what="the watch failing")
    api.clear_requests()
    with pytest.raises(ReadFailed):
        w.sync([])
    assert slice_writes(api) == []
    api.faults.clear()
    wait_for(lambda: w.watched.unreadable is None, what="the watch back")
    assert sync(w, devices) == 0 and sync(w, []) == 1 and stored(api) == []


def test_v1beta1_round_trip(api: FakeApiServer) -> None:
    with FakeApiServer(dra_versions=("v1beta1",)) as old:
        old.add_node("n1")
        w = writer(old, "v1beta1")
        devices = published_devices(resources(pci(1), pci(2)), taints=False).devices
        assert sync(w, devices) == 1
        assert sync(w, devices) == 0
        assert len(stored(old)[0]["spec"]["devices"]) == 2


def test_delete_all_removes_this_nodes_slices(api: FakeApiServer) -> None:
    w = writer(api)
    sync(w, published_devices(resources(*(pci(i) for i in range(130))), taints=False).devices)
    assert w.delete_all() == 2
    assert stored(api) == []


def test_past_32_attributes_and_capacities_the_same_ones_go(api: FakeApiServer) -> None:
    """The API refuses a device with more than 32 attributes + capacities
    (``ResourceSliceMaxAttributesAndCapacitiesPerDevice``, k8s.io/api resource/v1 types.go);
    ``bounded`` keeps what the DeviceClasses select on and drops the last in its order, the
    same ones whatever order they came in."""
    [device] = published_devices(resources(pci(1, serial="ABC")), taints=False).devices
    extra = {f"extra{i:02d}": {"int": i} for i in range(30)}
    entry = dict(device, attributes={**device["attributes"], **extra}, capacity={"slots": {"value": "4"}})
    rapi = client.ResourceV1Api(client.ApiClient(api.client_configuration()))
    body = {"metadata": {"name": "too-many"}, "spec": {"driver": "other.example.com", "nodeName": "n1",
                                                         "pool": {"name": "n1", "generation": 0, "resourceSliceCount": 1},
                                                         "devices": [entry]}}
    with pytest.raises(client.ApiException) as refused:
        rapi.create_resource_slice(body)
    assert refused.value.status == 422
    dropped: dict[str, str] = {}
    kept = bounded(entry, dropped)
    assert len(kept["attributes"]) + len(kept["capacity"]) == MAX_ATTRIBUTES
    assert {"class", "resource", "stableID", "ready", "replica", "serial"} <= set(kept["attributes"])
    assert kept["capacity"] == {"slots": {"value": "4"}}
    total = len(device["attributes"]) + 30 + 1
    assert sorted(dropped) == [f"extra{i:02d}" for i in range(30)][-(total - MAX_ATTRIBUTES):]
    assert set(dropped.values()) == {PAST_BOUND}
    shuffled = dict(entry, attributes=dict(reversed(list(entry["attributes"].items()))))
    assert bounded(shuffled, {}) == kept
    assert sync(writer(api), [kept]) == 1  # the API takes what is left


def test_every_attribute_left_out_is_told_with_its_reason() -> None:
    published = published_devices(resources(pci(1, serial="S" * 65), pci(2, serial="ABC")), taints=False)
    assert published.dropped == {"edgetpu-pci-0000-00-00-1": {"serial": TOO_LONG}}
