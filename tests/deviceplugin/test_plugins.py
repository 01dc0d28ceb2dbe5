"""The plugin against the kubelet stand-in over real unix sockets and real gRPC calls."""

from __future__ import annotations

import os
import threading

import grpc
import pytest

from agent.deviceplugin.model import DeviceNode, HostMount, PluginDevice, ResourceDevices
from agent.deviceplugin.plugins import DevicePlugins
from tests.deviceplugin.kubelet_standin import KubeletStandIn
from tests.runtime.helpers import wait_for

TPU = "node-feature-agent.io/edgetpu"
HAILO = "node-feature-agent.io/hailo8"


def usb_tpu(device_id="usb-0000:00:14.0-2-2", node="/dev/bus/usb/002/003", why=""):
    return PluginDevice(device_id, (DeviceNode(node, node, "rw"),), why=why)


def pcie_tpu():
    return PluginDevice("pci-0000:01:00.0", (DeviceNode("/dev/apex_0", "/dev/apex_0", "rw"),), numa_node=0)


@pytest.fixture
def events():
    return []


@pytest.fixture
def plugins(socket_dir, events):
    dp = DevicePlugins(socket_dir, check_interval=0.1, vanished_grace=0.5,
                       on_registration=lambda r, x: events.append(("register", r, x)),
                       on_allocation=lambda r, x: events.append(("allocate", r, x))).start()
    yield dp
    dp.stop()


def test_registers_each_resource_and_lists_its_devices(kubelet, plugins):
    plugins.publish({TPU: ResourceDevices(TPU, (usb_tpu(), pcie_tpu())),
                     HAILO: ResourceDevices(HAILO, (PluginDevice("pci-0000:02:00.0", (DeviceNode("/dev/hailo0", "/dev/hailo0"),)),))})
    kubelet.wait_for(lambda: set(kubelet.registered()) == {TPU, HAILO})
    kubelet.wait_list(TPU, [("pci-0000:01:00.0", "Healthy"), ("usb-0000:00:14.0-2-2", "Healthy")])
    kubelet.wait_list(HAILO, [("pci-0000:02:00.0", "Healthy")])
    request = next(r for r in kubelet.registrations if r.resource_name == TPU)
    assert request.version == "v1beta1"
    assert request.endpoint == "node-feature-agent-io-edgetpu.sock"
    assert os.path.exists(os.path.join(kubelet.dir, request.endpoint))
    assert kubelet.options[TPU].get_preferred_allocation_available


def test_allocate_returns_the_device_nodes_with_permissions_env_and_mounts(kubelet, plugins, events):
    state = ResourceDevices(TPU, (usb_tpu(), pcie_tpu()), env={"EDGETPU": "1"},
                            mounts=(HostMount("/usr/lib/libedgetpu", "/opt/edgetpu", True),))
    plugins.publish({TPU: state})
    kubelet.wait_list(TPU, [("pci-0000:01:00.0", "Healthy"), ("usb-0000:00:14.0-2-2", "Healthy")])
    response = kubelet.allocate(TPU, ["pci-0000:01:00.0"], ["usb-0000:00:14.0-2-2"])
    first, second = response.container_responses
    assert [(d.host_path, d.container_path, d.permissions) for d in first.devices] == [("/dev/apex_0", "/dev/apex_0", "rw")]
    assert [(d.host_path, d.permissions) for d in second.devices] == [("/dev/bus/usb/002/003", "rw")]
    assert dict(first.envs) == {"EDGETPU": "1"}
    assert [(m.host_path, m.container_path, m.read_only) for m in first.mounts] == [("/usr/lib/libedgetpu", "/opt/edgetpu", True)]
    assert ("allocate", TPU, "allocated") in events


def test_allocate_refuses_unknown_and_unhealthy_devices(kubelet, plugins, events):
    plugins.publish({TPU: ResourceDevices(TPU, (usb_tpu(why="firmware not loaded"), pcie_tpu()))})
    kubelet.wait_list(TPU, [("pci-0000:01:00.0", "Healthy"), ("usb-0000:00:14.0-2-2", "Unhealthy")])
    for ids in (["usb-0000:00:14.0-2-2"], ["pci-0000:01:00.0", "pci-0000:09:00.0"]):
        with pytest.raises(grpc.RpcError) as err:
            kubelet.allocate(TPU, ids)
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert events.count(("allocate", TPU, "refused")) == 2


def test_hotplug_updates_the_stream_and_a_removed_device_turns_unhealthy_then_goes(kubelet, plugins):
    plugins.publish({TPU: ResourceDevices(TPU, (pcie_tpu(),))})
    kubelet.wait_list(TPU, [("pci-0000:01:00.0", "Healthy")])
    plugins.publish({TPU: ResourceDevices(TPU, (pcie_tpu(), usb_tpu()))})  # plugged
    kubelet.wait_list(TPU, [("pci-0000:01:00.0", "Healthy"), ("usb-0000:00:14.0-2-2", "Healthy")])
    plugins.publish({TPU: ResourceDevices(TPU, (pcie_tpu(),))})  # unplugged
    kubelet.wait_list(TPU, [("pci-0000:01:00.0", "Healthy"), ("usb-0000:00:14.0-2-2", "Unhealthy")])
    kubelet.wait_list(TPU, [("pci-0000:01:00.0", "Healthy")])  # after vanished_grace, without a pass
    with pytest.raises(grpc.RpcError):
        kubelet.allocate(TPU, ["usb-0000:00:14.0-2-2"])


def test_reregisters_after_kubelet_restart_and_serves_a_fresh_socket(kubelet, plugins, events):
    plugins.publish({TPU: ResourceDevices(TPU, (pcie_tpu(),))})
    kubelet.wait_list(TPU, [("pci-0000:01:00.0", "Healthy")])
    kubelet.restart()  # wipes our socket too, as kubelet's start-up does
    kubelet.wait_for(lambda: kubelet.registered().count(TPU) == 2)
    kubelet.wait_for(lambda: len(kubelet.lists[TPU]) >= 2)
    assert kubelet.latest(TPU) == [("pci-0000:01:00.0", "Healthy")]
    assert kubelet.allocate(TPU, ["pci-0000:01:00.0"]).container_responses[0].devices[0].host_path == "/dev/apex_0"
    # the plugin reports a registration once kubelet's answer is back, after kubelet recorded it
    wait_for(lambda: events.count(("register", TPU, "registered")) >= 2, what="the second registration reported")
    assert events.count(("register", TPU, "registered")) == 2


def test_survives_kubelet_absent_at_start_and_registers_when_it_appears(socket_dir, plugins):
    plugins.publish({TPU: ResourceDevices(TPU, (pcie_tpu(),))})
    wait_for(lambda: plugins.served() == {TPU}, what="the resource served")
    assert plugins.registered() == set()
    assert plugins.alive()
    kubelet = KubeletStandIn(socket_dir).start(wipe=False)
    try:
        kubelet.wait_list(TPU, [("pci-0000:01:00.0", "Healthy")])
    finally:
        kubelet.stop()


def test_refused_registration_is_retried_and_counted(socket_dir, events):
    kubelet = KubeletStandIn(socket_dir).start()
    bad = "kubernetes.io/edgetpu"  # kubelet refuses names in the kubernetes.io domain
    dp = DevicePlugins(socket_dir, check_interval=0.1,
                       on_registration=lambda r, x: events.append((r, x))).start()
    try:
        dp.publish({bad: ResourceDevices(bad, (pcie_tpu(),)), TPU: ResourceDevices(TPU, (pcie_tpu(),))})
        kubelet.wait_list(TPU, [("pci-0000:01:00.0", "Healthy")])
        wait_for(lambda: events.count((bad, "failed")) >= 2, what="the refused registration retried")
        assert (bad, "registered") not in events
    finally:
        dp.stop()
        kubelet.stop()


def test_publish_never_waits_for_kubelet(socket_dir):
    """A kubelet that takes the Register call and does not answer must not stall the worker:
    publish returns while the call is held (one that waited would return only after it)."""
    inside, release, answered = threading.Event(), threading.Event(), threading.Event()

    def hold(_request):
        inside.set()
        release.wait(120)
        answered.set()

    kubelet = KubeletStandIn(socket_dir, on_register=hold).start()
    dp = DevicePlugins(socket_dir, check_interval=0.1, register_timeout=180.0).start()
    try:
        dp.publish({TPU: ResourceDevices(TPU, (pcie_tpu(),))})
        assert inside.wait(60), "the Register call never reached kubelet"
        for _ in range(20):
            dp.publish({TPU: ResourceDevices(TPU, (pcie_tpu(),))})
        assert not answered.is_set() and dp.registered() == set()  # still inside Register
        release.set()
        kubelet.wait_list(TPU, [("pci-0000:01:00.0", "Healthy")])  # and the registration completes
    finally:
        release.set()
        dp.stop(timeout=6)
        kubelet.stop()


def test_stopping_removes_our_sockets(socket_dir, kubelet):
    dp = DevicePlugins(socket_dir, check_interval=0.1).start()
    dp.publish({TPU: ResourceDevices(TPU, (pcie_tpu(),))})
    kubelet.wait_list(TPU, [("pci-0000:01:00.0", "Healthy")])
    dp.stop()
    assert sorted(os.listdir(socket_dir)) == ["kubelet.sock"]



def test_preferred_allocation_keeps_to_one_numa_node_and_honours_must_include(kubelet, plugins):
    from agent.deviceplugin.v1beta1 import api_pb2

    devices = tuple(PluginDevice(f"pci-0000:0{i}:00.0", (DeviceNode(f"/dev/apex_{i}", f"/dev/apex_{i}"),),
                                 numa_node=0 if i < 2 else 1) for i in range(4))
    plugins.publish({TPU: ResourceDevices(TPU, devices)})
    kubelet.wait_for(lambda: kubelet.latest(TPU) and len(kubelet.latest(TPU)) == 4)
    ids = [d.id for d in devices]
    request = api_pb2.PreferredAllocationRequest(container_requests=[
        api_pb2.ContainerPreferredAllocationRequest(available_deviceIDs=ids, must_include_deviceIDs=[ids[3]],
                                                    allocation_size=2),
        api_pb2.ContainerPreferredAllocationRequest(available_deviceIDs=ids[1:], allocation_size=1)])
    first, second = kubelet.stub(TPU).GetPreferredAllocation(request, timeout=5).container_responses
    assert list(first.deviceIDs) == [ids[3], ids[2]]  # the must-include device's NUMA node
    assert list(second.deviceIDs) == [ids[1]]
