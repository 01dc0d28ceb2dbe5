"""A device shared N ways on a server with consumable capacity: published once, allocated to N
claims at once by the scheduler stand-in (each result with its shareID and consumedCapacity, the
(N+1)th refused by the allocator's arithmetic on the published capacity), all N prepared at once
by the plugin over kubelet's sockets, each with its own CDI spec; unpreparing one leaves the
others; a restart keeps the shares in the checkpoint."""

from __future__ import annotations

import json

import pytest

from agent.deviceplugin.model import ResourceDevices
from agent.dra import cdi
from agent.dra.names import device_name
from agent.dra.publisher import SlicePublisher
from agent.dra.slices import Node
from tests.dra.plugin.conftest import APEX, NODE, NS, TPU, Bed
from tests.support.apiserver import FakeApiServer

SHARES = 3
SHARED = {TPU: ResourceDevices(TPU, (APEX,), env={"EDGETPU": "1"}, shares=SHARES)}
NAME = device_name(TPU, APEX.id)


@pytest.fixture
def shared_bed(socket_dir):
    with FakeApiServer(dra_consumable_capacity=True) as server:
        uid = server.add_node(NODE)["metadata"]["uid"]
        bed = Bed(socket_dir, server)
        publisher = SlicePublisher(bed.api_client, Node(NODE, uid), "v1", taints=False).start()
        publisher.publish(SHARED)
        assert publisher.synced.wait(10)
        yield bed
        publisher.stop()
        bed.close()


def spec_of(bed: Bed, uid: str) -> dict:
    with open(cdi.spec_path(bed.cdi_dir, uid)) as handle:
        return json.load(handle)  # type: ignore[no-any-return]


def claim(bed: Bed, name: str, requests: list[str]) -> tuple[tuple[str, str, str], object]:
    uid = bed.kubelet.create_claim(NS, name, requests)["metadata"]["uid"]
    return (NS, name, uid), bed.kubelet.allocate_share(NS, name, requests, NODE, NAME)


def test_n_claims_hold_one_published_device_at_once(shared_bed):
    bed = shared_bed
    (device,) = [d for s in bed.server.store.list("resourceslices.resource.k8s.io")[0] for d in s["spec"]["devices"]]
    assert device["name"] == NAME and device["allowMultipleAllocations"] is True
    plugin = bed.start_plugin(devices=SHARED)
    bed.kubelet.start().wait_registered()
    refs = []
    for i in range(SHARES):
        ref, allocated = claim(bed, f"c{i}", ["tpu"])
        assert allocated is not None
        refs.append(ref)
    _, fourth = claim(bed, "c3", ["tpu"])
    assert fourth is None  # three shares taken: the allocator cannot give the device a fourth time
    results = [bed.server.store.get("resourceclaims.resource.k8s.io", n, NS)["status"]["allocation"]["devices"]
               ["results"][0] for _ns, n, _uid in refs]
    assert len({r["shareID"] for r in results}) == SHARES and {r["device"] for r in results} == {NAME}
    assert all(r["consumedCapacity"] == {"shares": "1"} for r in results)

    answers = bed.kubelet.prepare(*refs).claims
    for _ns, _name, uid in refs:
        assert answers[uid].error == ""
        (answered,) = answers[uid].devices
        assert answered.device_name == NAME and answered.cdi_device_ids == [cdi.qualified(cdi.cdi_name(uid, NAME))]
        (spec_device,) = spec_of(bed, uid)["devices"]
        assert spec_device["containerEdits"]["deviceNodes"] == [
            {"path": "/dev/apex_0", "hostPath": "/dev/null", "permissions": "rw"}]
    assert plugin.prepared() == frozenset(uid for _ns, _n, uid in refs)

    first = refs[0]
    assert bed.kubelet.unprepare(first).claims[first[2]].error == ""
    assert cdi.claim_specs(bed.cdi_dir) == {u for _n, _m, u in refs[1:]}
    assert plugin.prepared() == frozenset(u for _n, _m, u in refs[1:])

    # the checkpoint keeps each claim's share: a restarted plugin prepares them again unchanged
    plugin.stop(1.0)
    seen = len(bed.kubelet.infos)
    bed.start_plugin(devices=SHARED)
    bed.kubelet.wait_registered(after=seen)
    with open(bed.plugin.checkpoint_path) as handle:  # type: ignore[union-attr]
        kept = json.load(handle)["claims"]
    assert {tuple(kept[u]["results"][0]) for _n, _m, u in refs[1:]} == {
        ("tpu", NODE, NAME, r["shareID"]) for r in results[1:]}
    again = bed.kubelet.prepare(*refs[1:]).claims
    assert all(again[u].error == "" for _n, _m, u in refs[1:])


def test_two_shares_of_one_device_in_one_claim_are_one_cdi_device(shared_bed):
    bed = shared_bed
    bed.start_plugin(devices=SHARED)
    bed.kubelet.start().wait_registered()
    ref, allocated = claim(bed, "pair", ["a", "b"])
    assert allocated is not None
    answer = bed.kubelet.prepare(ref).claims[ref[2]]
    assert answer.error == ""
    assert [(list(d.request_names), d.device_name) for d in answer.devices] == [(["a"], NAME), (["b"], NAME)]
    assert len(spec_of(bed, ref[2])["devices"]) == 1


def test_a_checkpoint_entry_from_before_share_ids_reads_as_unshared():
    from agent.dra.plugin import Prepared

    old = Prepared.from_dict({"namespace": NS, "name": "c", "results": [["tpu", NODE, NAME]], "spec": {}})
    assert old.results == (("tpu", NODE, NAME, ""),)
    with pytest.raises(ValueError):
        Prepared.from_dict({"namespace": NS, "name": "c", "results": [["tpu", NODE]], "spec": {}})
