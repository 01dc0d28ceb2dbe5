"""A device the catalogue shares N ways, on API servers with and without consumable capacity
(KEP-5075, gate ``DRAConsumableCapacity``): one device with ``allowMultipleAllocations`` and the
``shares`` capacity where the server keeps the fields, N replica devices where it drops them
(the in-repo server drops them as ``dropDisabledDRAConsumableCapacityFields`` does), decided by
a dry-run create (``agent.dra.sharing``); every switch between the two is one write, and
nothing is written again at steady state or across a restart."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from agent.dra.publisher import SlicePublisher
from agent.dra.slices import Node
from agent.kube.backoff import BackoffSettings
from tests.dra.test_slices import SLICES, pci, resources
from tests.runtime.helpers import wait_for
from tests.support.apiserver import FakeApiServer

NODE = "n1"
SHARED = "edgetpu-pci-0000-00-00-1"
REPLICAS = [SHARED, f"{SHARED}-r1", f"{SHARED}-r2"]


def devices(api: FakeApiServer) -> list[dict[str, Any]]:
    return sorted((d for s in api.store.list(SLICES)[0] for d in s["spec"]["devices"]), key=lambda d: d["name"])


def writes(api: FakeApiServer) -> list[tuple[str, str]]:
    """The ResourceSlice writes the server stored (a dry run stores nothing and is left out)."""
    return [(r.method, r.path) for r in api.requests if "/resourceslices" in r.path and r.method != "GET"
            and r.query.get("dryRun") is None and 200 <= r.status < 300]


def runs(results: list[str]) -> list[str]:
    """The sync results with repeats collapsed: a write's watch echo is one more (request-free)
    ``unchanged`` sync, a write waiting for it one more ``written``."""
    return [r for i, r in enumerate(results) if i == 0 or r != results[i - 1]]


def probes(api: FakeApiServer) -> int:
    return sum(1 for r in api.requests if "/resourceslices" in r.path and r.query.get("dryRun") == "All")


def run_once(api: FakeApiServer, uid: str, shares: int = 3, results: list[str] | None = None) -> SlicePublisher:
    """A publisher (an agent process) publishing one device shared ``shares`` ways, twice."""
    publisher = SlicePublisher(client.ApiClient(api.client_configuration()), Node(NODE, uid), "v1", taints=False,
                               on_sync=(results if results is not None else []).append, backoff=BackoffSettings(initial=0.05, maximum=0.1, jitter=0.0)).start()
    try:
        for _ in range(2):
            publisher.publish(resources(pci(1), shares=shares))
            assert publisher.synced.wait(10)
    finally:
        publisher.stop()
    return publisher


def test_with_consumable_capacity_a_shared_device_is_one_device_taken_one_share_at_a_time() -> None:
    with FakeApiServer(dra_consumable_capacity=True) as api:
        uid = api.add_node(NODE)["metadata"]["uid"]
        results: list[str] = []
        run_once(api, uid, results=results)
        (device,) = devices(api)
        assert device["name"] == SHARED and device["allowMultipleAllocations"] is True
        assert device["capacity"] == {"shares": {"value": "3", "requestPolicy": {"default": "1", "validValues": ["1"]}}}
        assert device["attributes"]["replica"] == {"int": 0}
        assert writes(api) == [("POST", "/apis/resource.k8s.io/v1/resourceslices")] and probes(api) == 1
        assert runs(results) == ["written", "unchanged"]
        api.clear_requests()
        run_once(api, uid)  # a restarted agent asks again and writes nothing
        assert writes(api) == [] and probes(api) == 1


def test_without_it_the_device_is_one_device_per_share_as_before() -> None:
    with FakeApiServer(dra_consumable_capacity=False) as api:
        uid = api.add_node(NODE)["metadata"]["uid"]
        results: list[str] = []
        run_once(api, uid, results=results)
        assert [d["name"] for d in devices(api)] == REPLICAS
        assert all("allowMultipleAllocations" not in d and "capacity" not in d for d in devices(api))
        assert writes(api) == [("POST", "/apis/resource.k8s.io/v1/resourceslices")] and probes(api) == 1
        assert runs(results) == ["written", "unchanged"]
        api.clear_requests()
        run_once(api, uid)
        assert writes(api) == [] and probes(api) == 1


def test_an_unshared_device_asks_nothing_and_v1beta1_never_asks() -> None:
    with FakeApiServer(dra_consumable_capacity=True) as api:
        uid = api.add_node(NODE)["metadata"]["uid"]
        run_once(api, uid, shares=1)
        assert probes(api) == 0 and [d["name"] for d in devices(api)] == [SHARED]
    with FakeApiServer(dra_versions=("v1beta1",), dra_consumable_capacity=True) as api:  # 1.32-1.33: replicas
        uid = api.add_node(NODE)["metadata"]["uid"]
        publisher = SlicePublisher(client.ApiClient(api.client_configuration()), Node(NODE, uid), "v1beta1",
                                   taints=False).start()
        try:
            publisher.publish(resources(pci(1), shares=3))
            assert publisher.synced.wait(10)
        finally:
            publisher.stop()
        assert probes(api) == 0 and [d["name"] for d in devices(api)] == REPLICAS


def test_switching_form_when_the_server_changes_is_one_write_each_way() -> None:
    """The gate turned on (an upgrade to 1.36) under replicas a previous agent wrote: the next
    agent writes the shared device once; turned off again: the replicas, once."""
    with FakeApiServer(dra_consumable_capacity=False) as api:
        uid = api.add_node(NODE)["metadata"]["uid"]
        run_once(api, uid)
        api.dra_consumable_capacity = True
        api.clear_requests()
        run_once(api, uid)
        assert [d["name"] for d in devices(api)] == [SHARED] and devices(api)[0]["allowMultipleAllocations"] is True
        assert writes(api) == [("PUT", f"/apis/resource.k8s.io/v1/resourceslices/{api.store.list(SLICES)[0][0]['metadata']['name']}")]
        api.dra_consumable_capacity = False
        api.clear_requests()
        run_once(api, uid)
        assert [d["name"] for d in devices(api)] == REPLICAS
        assert len(writes(api)) == 1 and writes(api)[0][0] == "PUT"


def test_a_probe_that_said_yes_wrongly_is_corrected_by_one_more_write() -> None:
    """The probe's answer says the server keeps the field (here a fault answers it: an HA control
    plane whose API servers differ mid-upgrade), the write's server drops it: the slices read back
    show it, the replicas are written once, and nothing after."""
    with FakeApiServer(dra_consumable_capacity=False) as api:
        uid = api.add_node(NODE)["metadata"]["uid"]
        kept = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "x"},
                "spec": {"devices": [{"name": "probe", "allowMultipleAllocations": True}]}}
        api.faults.answer(kept, 201, verb="POST", path="/resourceslices")
        results: list[str] = []
        run_once(api, uid, results=results)
        # the correction may be the sync that answers the second publish: wait for the state
        wait_for(lambda: [d["name"] for d in devices(api)] == REPLICAS, what="the replicas written")
        assert [m for m, _p in writes(api)] == ["POST", "PUT"]
        assert results[0] == "written" and set(results) <= {"written", "unchanged"}


def test_a_probe_that_fails_holds_the_sync_and_a_refused_one_means_replicas() -> None:
    with FakeApiServer(dra_consumable_capacity=True) as api:
        uid = api.add_node(NODE)["metadata"]["uid"]
        api.faults.fail(503, verb="POST", path="/resourceslices")
        results: list[str] = []
        run_once(api, uid, results=results)
        assert results[0] == "held" and "written" in results  # undetermined: nothing written, retried
        assert [d["name"] for d in devices(api)] == [SHARED] and probes(api) == 2
    with FakeApiServer(dra_consumable_capacity=True) as api:
        uid = api.add_node(NODE)["metadata"]["uid"]
        api.faults.answer({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 422,
                           "reason": "Invalid", "message": "no"}, 422, verb="POST", path="/resourceslices")
        run_once(api, uid)
        assert [d["name"] for d in devices(api)] == REPLICAS
        api.faults.answer({"kind": "Status"}, 200, verb="POST", path="/resourceslices")  # not a ResourceSlice
        results = []
        run_once(api, uid, shares=2, results=results)
        assert results[0] == "held"


def test_explain_shows_both_forms(tmp_path) -> None:
    import shutil
    import subprocess
    import sys

    from tests.conftest import FIXTURES, LABELS_DIR, REPO

    shutil.copy(REPO / "deploy" / "optional-rules" / "homelab-devices.yaml", tmp_path)
    done = subprocess.run([sys.executable, "-m", "agent", "explain", "node-feature-agent.io/fuse", "--host-root",
                           str(FIXTURES / "homelab"), "--rules", str(LABELS_DIR), "--rules", str(tmp_path)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert "fuse-dev-fuse-r9: slice 1 of 1" in done.stdout
    assert ("shared 10 ways: where the API server has consumable capacity (1.36+) one device each, "
            "allowMultipleAllocations and capacity shares=10 (fuse-dev-fuse)") in done.stdout
