"""The bounds on what the slice watch keeps (``agent.dra.watched.SliceBounds``), against the test
API server through the real client: anyone allowed to create ResourceSlices can create slices
naming this driver and node. Past a bound the writer neither writes nor deletes (it cannot know
what it did not read), says so once (``on_bounded``: the Warning Event and the gauge in
``DraService``) and keeps at most the bound; once the excess goes it writes again."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from agent.dra.names import DRIVER
from agent.dra.publisher import SlicePublisher
from agent.dra.slices import Node
from agent.dra.watched import MAX_SLICE_BYTES, MAX_SLICES, MAX_SLICES_BYTES, SliceBounds
from agent.kube.backoff import BackoffSettings
from agent.kube.reflector import ReflectorSettings
from agent.rules.budget import MAX_PAGE_BYTES
from agent.runtime.dra_service import REASON_BOUNDED, DraService
from agent.runtime.metrics import AgentMetrics
from tests.dra.test_slices import pci, resources, slice_writes, stored
from tests.runtime.helpers import wait_for
from tests.support.apiserver import FakeApiServer

#: the shipped LIST paging and page bound, fast retries
FAST = ReflectorSettings(backoff=BackoffSettings(initial=0.02, maximum=0.1), max_delay=0.1, watch_timeout=30,
                         page_size=MAX_SLICES, max_page_bytes=MAX_PAGE_BYTES)
QUICK_RELIST = BackoffSettings(initial=0.05, maximum=0.2, jitter=0.0)

# the API's limits (k8s.io/api/resource/v1/types.go; pkg/apis/resource/validation/validation.go)
RESOURCE_SLICE_MAX_DEVICES = 128  # ResourceSliceMaxDevices
MAX_ATTRIBUTES_AND_CAPACITIES = 32  # ResourceSliceMaxAttributesAndCapacitiesPerDevice
DEVICE_MAX_DOMAIN_LENGTH = 63  # DeviceMaxDomainLength
DEVICE_MAX_ID_LENGTH = 32  # DeviceMaxIDLength
ATTRIBUTE_MAX_VALUE_LENGTH = 64  # DeviceAttributeMaxValueLength
DNS_LABEL_MAX = 63  # a device's name is a DNS label


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        server.add_node("n1")
        yield server


def rapi(api: FakeApiServer) -> client.ResourceV1Api:
    return client.ResourceV1Api(client.ApiClient(api.client_configuration()))


def foreign(name: str, devices: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A slice someone else creates naming this driver and node n1."""
    return {"metadata": {"name": name}, "spec": {
        "driver": DRIVER, "nodeName": "n1", "pool": {"name": "n1", "generation": 0, "resourceSliceCount": 1},
        "devices": devices if devices is not None else [{"name": "x"}]}}


def largest_devices() -> list[dict[str, Any]]:
    """128 devices of 32 attributes each, every name and value at the API's longest."""
    domain = "d" * (DEVICE_MAX_DOMAIN_LENGTH - 4) + ".com"
    return [{"name": f"d{i:03d}".ljust(DNS_LABEL_MAX, "x"),
             "attributes": {f"{domain}/{'a' * (DEVICE_MAX_ID_LENGTH - 2)}{k:02d}": {"string": "v" * ATTRIBUTE_MAX_VALUE_LENGTH}
                            for k in range(MAX_ATTRIBUTES_AND_CAPACITIES)}}
            for i in range(RESOURCE_SLICE_MAX_DEVICES)]


class Told:
    """What the publisher told: its bound episodes and its syncs' results."""

    def __init__(self) -> None:
        self.bounded: list[str | None] = []
        self.syncs: list[str] = []


def publisher(api: FakeApiServer, told: Told, bounds: SliceBounds) -> SlicePublisher:
    uid = api.node("n1")["metadata"]["uid"]
    return SlicePublisher(client.ApiClient(api.client_configuration()), Node("n1", uid), "v1", taints=False,
                          watch_settings=FAST, bounds=bounds, on_bounded=told.bounded.append,
                          on_sync=told.syncs.append).start()


def delete(api: FakeApiServer, name: str) -> None:
    try:
        rapi(api).delete_resource_slice(name)
    except client.exceptions.NotFoundException:
        pass  # the agent, back within the bound, deleted it as an extra of its pool


def devices_on(api: FakeApiServer) -> list[str]:
    return sorted(d["name"] for s in stored(api) for d in s["spec"]["devices"])


def test_the_largest_slice_the_api_accepts_with_128_devices_fits_the_bound(api: FakeApiServer) -> None:
    """The per-slice bound is above what the API admits for 128 devices of 32 attributes: the
    server takes this slice, and its spec is within ``MAX_SLICE_BYTES``."""
    created = rapi(api).create_resource_slice(foreign("largest", largest_devices()))
    spec = client.ApiClient().sanitize_for_serialization(created)["spec"]
    size = len(json.dumps(spec, separators=(",", ":")).encode())
    assert 600_000 < size <= MAX_SLICE_BYTES
    assert 2 * size <= MAX_SLICES_BYTES  # two such slices are kept


def test_a_flood_of_slices_holds_the_writes_keeps_the_bound_and_recovers(api: FakeApiServer) -> None:
    """The agent's slice written, then (the agent down: while it runs it would delete slices
    within the bound as extras of its pool) more slices naming its driver and node than the
    bound; the agent restarted holds, keeps at most the bound, and writes once the excess goes."""
    told = Told()
    bounds = SliceBounds(relist=QUICK_RELIST)
    first = publisher(api, told, bounds)
    first.publish(resources(pci(1)))
    wait_for(lambda: len(devices_on(api)) == 1, what="the agent's slice")
    first.stop()
    flood = [f"flood-{i:02d}" for i in range(MAX_SLICES + 8)]
    for name in flood:
        rapi(api).create_resource_slice(foreign(name))
    told = Told()
    api.clear_requests()
    p = publisher(api, told, bounds)
    try:
        p.publish(resources(pci(1), pci(2)))
        wait_for(lambda: told.syncs.count("bounded") > 0, what="a sync held")
        assert told.bounded == [told.bounded[0]] and told.bounded[0] is not None  # told once
        assert f"{len(flood) + 1} ResourceSlice objects, over the bound of {MAX_SLICES}" in told.bounded[0]
        assert slice_writes(api) == []  # no write, no delete
        count, size = p.watched.kept()
        assert count <= MAX_SLICES and size <= MAX_SLICES_BYTES
        for name in flood[2:]:  # the excess goes (the agent, within the bound again, deletes the rest)
            delete(api, name)
        wait_for(lambda: told.bounded[-1] is None, what="within the bounds again")
        wait_for(lambda: devices_on(api) == ["edgetpu-pci-0000-00-00-1", "edgetpu-pci-0000-00-00-2"]
                 and len(stored(api)) == 1, what="the agent's slices written, the leftovers deleted")
    finally:
        p.stop()


def test_slices_added_past_the_bound_while_watched_are_not_kept(api: FakeApiServer) -> None:
    """The watch's events: a slice past the bound is not kept, the writer holds."""
    told = Told()
    p = publisher(api, told, SliceBounds(relist=QUICK_RELIST, max_slices=2))
    try:
        wait_for(lambda: p.watched.listed, what="the first LIST")
        for i in range(6):
            rapi(api).create_resource_slice(foreign(f"flood-{i}"))
        wait_for(lambda: told.bounded and told.bounded[-1] is not None, what="the bound passed")
        wait_for(lambda: p.watched.reflector.lists > 1, what="a LIST after an event past the bound")
        assert p.watched.kept()[0] <= 2
        api.clear_requests()
        p.publish(resources(pci(1)))
        wait_for(lambda: told.syncs.count("bounded") > 0, what="a sync held")
        assert slice_writes(api) == []
    finally:
        p.stop()


def test_one_slice_larger_than_any_of_ours_holds_until_it_goes(api: FakeApiServer) -> None:
    told = Told()
    bounds = SliceBounds(relist=QUICK_RELIST, max_slice_bytes=64 * 1024)  # under the largest valid slice
    p = publisher(api, told, bounds)
    try:
        p.publish(resources(pci(1)))
        wait_for(lambda: len(devices_on(api)) == 1, what="the agent's slice")
        rapi(api).create_resource_slice(foreign("huge", largest_devices()))
        wait_for(lambda: told.bounded and told.bounded[-1] is not None, what="the bound passed")
        assert "huge is" in (told.bounded[-1] or "")
        api.clear_requests()
        held = told.syncs.count("bounded")
        p.publish(resources(pci(1), pci(2)))
        wait_for(lambda: told.syncs.count("bounded") > held, what="a sync held")
        assert slice_writes(api) == []
        count, size = p.watched.kept()
        assert count == 1 and size <= bounds.max_slice_bytes  # the huge one is not kept
        rapi(api).delete_resource_slice("huge")
        wait_for(lambda: told.bounded[-1] is None, what="within the bounds again")
        wait_for(lambda: devices_on(api) == ["edgetpu-pci-0000-00-00-1", "edgetpu-pci-0000-00-00-2"],
                 what="the agent writes again")
    finally:
        p.stop()


def test_a_first_list_past_the_bound_is_held_and_the_event_and_gauge_are_set(api: FakeApiServer) -> None:
    """Through ``DraService``'s wiring (shipped bounds): the slices already past the bound when
    the agent starts; one Warning Event of its reason, the gauge 1, nothing written."""
    for i in range(MAX_SLICES + 1):
        rapi(api).create_resource_slice(foreign(f"flood-{i:02d}"))
    metrics = AgentMetrics()
    warnings: list[tuple[str, str]] = []
    service = DraService(client.ApiClient(api.client_configuration()), "/", "n1", "v1", taints=False,
                         metrics=metrics, on_warning=lambda reason, text: warnings.append((reason, text)))
    api.clear_requests()
    p = service._publisher(api.node("n1")["metadata"]["uid"])
    try:
        p.publish(resources(pci(1)))
        wait_for(lambda: metrics.registry.get_sample_value("nfa_dra_slices_bounded") == 1, what="the gauge")
        wait_for(lambda: (metrics.registry.get_sample_value("nfa_dra_syncs_total", {"result": "bounded"}) or 0) > 0,
                 what="a sync held")
        assert [r for r, _t in warnings] == [REASON_BOUNDED]
        assert f"{MAX_SLICES + 1} ResourceSlice objects, over the bound of {MAX_SLICES}" in warnings[0][1]
        assert slice_writes(api) == []
        assert p.watched.kept()[0] == 0  # nothing was kept before: none is now
    finally:
        service.stop()
