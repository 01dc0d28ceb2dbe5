"""DRA fed by the catalogue, on recorded hosts: a pod's ``node-feature-agent.io/edgetpu: 1``
reaches a container through allocation, NodePrepareResources, CDI and podman with the device
nodes the device plugin's Allocate gives for the same host; and the Coral USB Accelerator's
two identities (1a6e:089a before its firmware, 18d1:9302 after, on another port and device
number: fixtures coral-usb-boot and coral-usb, recorded from one device).

The recorded hosts' /dev nodes do not exist here, so each is replayed by a char device made
with the same name under a scratch /dev (``replay``), for the device plugin and for DRA alike."""

from __future__ import annotations

import dataclasses
import json
import os
import stat

from agent import rules
from agent.deviceplugin.model import DeviceNode, ResourceDevices
from agent.deviceplugin.plugins import DevicePlugins
from agent.deviceplugin.resolve import resolve_claims
from agent.discovery import discover
from agent.dra import cdi
from agent.dra.names import DRIVER, device_name
from agent.hostfs import HostFS
from tests.conftest import FIXTURES, LABELS_DIR
from tests.deviceplugin.kubelet_standin import KubeletStandIn
from tests.dra.plugin import podman
from tests.dra.plugin.cdi_schema import problems
from tests.dra.plugin.conftest import NODE, NS, TPU

CATALOGUE = rules.load_catalogue([str(LABELS_DIR)])
MEM_NULL = os.makedev(1, 3)


def catalogue_devices(case: str) -> dict[str, ResourceDevices]:
    """What the agent publishes for a recorded host: discovery, the catalogue, resolution."""
    root = FIXTURES / case
    found = discover(HostFS(root))
    state = rules.desired_state(found.features, found.labels, {}, CATALOGUE)
    return resolve_claims(HostFS(root), state.device_claims)


def replay(resources: dict[str, ResourceDevices], dev_root: str) -> dict[str, ResourceDevices]:
    """Every host node ``/dev/X`` becomes ``<dev_root>/X``, a char device 1,3 made here."""
    out = {}
    for name, state in resources.items():
        devices = []
        for device in state.devices:
            nodes = []
            for node in device.nodes:
                host = dev_root + node.host_path
                if not os.path.exists(host):
                    os.makedirs(os.path.dirname(host), exist_ok=True)
                    os.mknod(host, 0o666 | stat.S_IFCHR, MEM_NULL)
                nodes.append(DeviceNode(host, node.container_path, node.permissions))
            devices.append(dataclasses.replace(device, nodes=tuple(nodes)))
        out[name] = dataclasses.replace(state, devices=tuple(devices))
    return out


def pod_requests(pod: dict, resource: str) -> int:
    return sum(int(c.get("resources", {}).get("limits", {}).get(resource, 0)) for c in pod["spec"]["containers"])


def schedule(bed, pod: dict, published: dict[str, ResourceDevices], resource: str) -> tuple[str, str, str]:
    """The scheduler's part for an extended resource backed by DRA (KEP-5004): a claim for the
    pod with one request per device asked, allocated to healthy devices of this node's pool
    by their published names."""
    count = pod_requests(pod, resource)
    healthy = [device_name(resource, d.id) for d in published[resource].devices if d.healthy]
    assert len(healthy) >= count, "the scheduler would not place this pod here"
    requests = [f"container-0-request-{i}" for i in range(count)]
    created = bed.kubelet.create_claim(NS, f"{pod['metadata']['name']}-extended-resources", requests)
    bed.kubelet.allocate(NS, created["metadata"]["name"], [
        {"request": r, "driver": DRIVER, "pool": NODE, "device": d} for r, d in zip(requests, healthy, strict=False)])
    return NS, created["metadata"]["name"], created["metadata"]["uid"]


def test_a_pod_asking_for_an_edgetpu_gets_the_device_plugins_nodes_through_dra(bed, socket_dir):
    published = replay(catalogue_devices("edge-ai"), f"{bed.root}/hostdev")
    pod = {"metadata": {"name": "detector", "namespace": NS},
           "spec": {"containers": [{"name": "infer", "image": "busybox", "resources": {"limits": {TPU: "1"}}}]}}
    # the device plugin's answer for the same host and device (its own stand-in kubelet)
    dp_dir = f"{socket_dir}/dp"
    os.makedirs(dp_dir)
    kubelet_dp = KubeletStandIn(dp_dir).start()
    plugins = DevicePlugins(dp_dir, check_interval=0.1).start()
    try:
        plugins.publish(published)
        first = published[TPU].devices[0]
        kubelet_dp.wait_list(TPU, [(d.id, "Healthy") for d in published[TPU].devices])
        (allocated,) = kubelet_dp.allocate(TPU, [first.id]).container_responses
        expected = sorted((d.host_path, d.container_path, d.permissions) for d in allocated.devices)
    finally:
        plugins.stop(1.0)
        kubelet_dp.stop()
    # DRA: allocation, prepare, CDI, podman
    bed.start_plugin(devices=published, cdi_dir=podman.RUNTIME_CDI_DIR)
    bed.kubelet.start().wait_registered()
    ref = schedule(bed, pod, published, TPU)
    try:
        answer = bed.kubelet.prepare(ref).claims[ref[2]]
        assert answer.error == "" and [d.device_name for d in answer.devices] == [device_name(TPU, first.id)]
        with open(cdi.spec_path(podman.RUNTIME_CDI_DIR, ref[2])) as handle:
            spec = json.load(handle)
        assert problems(spec) == []
        (device,) = spec["devices"]
        nodes = sorted((n["hostPath"], n["path"], n["permissions"]) for n in device["containerEdits"]["deviceNodes"])
        assert nodes == expected and [n[1] for n in nodes] == ["/dev/apex_0"]
        ids = [i for d in answer.devices for i in d.cdi_device_ids]
        seen = podman.run(ids, "stat -c '%n %F %t,%T' " + " ".join(n[1] for n in nodes))
        assert seen.splitlines() == [f"{n[1]} character special file 1,3" for n in nodes]
    finally:
        assert bed.kubelet.unprepare(ref).claims[ref[2]].error == ""


def test_coral_usb_in_dfu_state_is_refused_with_what_to_do_and_served_once_its_firmware_is_loaded(bed):
    """The decision: in DRA mode a Coral USB Accelerator is served only after its firmware is
    loaded on the host. Its DFU-state identity (1a6e:089a) is published notReady by the
    catalogue; a claim allocated to it is refused saying why and what to do, and never gets the
    DFU node (the device would re-enumerate under the container, leaving it a dead node). Once
    loaded it is another USB device (18d1:9302, USB 3 port 2-2, device 002/002): another DRA
    device; a claim allocated to the old name is refused as gone, a new one is served."""
    boot = catalogue_devices("coral-usb-boot")
    (dfu,) = boot[TPU].devices
    assert (dfu.id, [n.host_path for n in dfu.nodes]) == ("usb-0000:00:14.0-1-2", ["/dev/bus/usb/001/003"])
    plugin = bed.start_plugin(devices=boot)
    bed.kubelet.start().wait_registered()
    early = bed.claim("early", [device_name(TPU, dfu.id)])
    error = bed.kubelet.prepare(early).claims[early[2]].error
    assert "boot (DFU) state" in error and "load its firmware on the host" in error
    assert cdi.claim_specs(bed.cdi_dir) == set()
    # firmware loaded on the host (udev + dfu-util, or libedgetpu's host package): the next pass
    loaded = catalogue_devices("coral-usb")
    (tpu,) = loaded[TPU].devices
    assert (tpu.id, [n.host_path for n in tpu.nodes], tpu.why) == ("usb-0000:00:14.0-2-2", ["/dev/bus/usb/002/002"], "")
    plugin.publish(loaded)
    error = bed.kubelet.prepare(early).claims[early[2]].error
    assert "not among this node's devices" in error and "re-enumerated" in error
    later = bed.claim("later", [device_name(TPU, tpu.id)])
    answer = bed.kubelet.prepare(later).claims[later[2]]
    assert answer.error == ""
    with open(cdi.spec_path(bed.cdi_dir, later[2])) as handle:
        (device,) = json.load(handle)["devices"]
    assert device["containerEdits"]["deviceNodes"] == [
        {"path": "/dev/bus/usb/002/002", "hostPath": "/dev/bus/usb/002/002", "permissions": "rw"}]
