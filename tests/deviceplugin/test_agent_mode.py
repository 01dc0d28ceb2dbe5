"""``run --device-plugin=on`` end to end: the agent in-process against the in-repo API server,
a writable copy of the edge-ai host, and the kubelet stand-in on real unix sockets."""

from __future__ import annotations

import os
import shutil
import socket

import grpc
import pytest

from agent.reconcile import BackoffSettings
from agent.reconcile.node_api import NodeApi
from agent.runtime.agent import Agent, Settings
from agent.runtime.event_sources import SocketSource
from agent.runtime.uevent import encode_kernel_uevent
from tests.conftest import FIXTURES, LABELS_DIR
from tests.deviceplugin.kubelet_standin import KubeletStandIn
from tests.runtime.helpers import CORAL_DEVPATH, CoralHost, wait_for
from tests.support.apiserver import FakeApiServer

NODE = "edge-ai-1"
TPU, HAILO = "node-feature-agent.io/edgetpu", "node-feature-agent.io/hailo8"
OWNED_RESOURCES = "node-feature-agent.io/owned-extended-resources"
USB_TPU, PCIE_TPU, HAILO_8 = "usb-0000:00:14.0-2-2", "pci-0000:01:00.0", "pci-0000:04:00.0"


class Harness:
    def __init__(self, tmp_path, server, socket_dir, device_plugin=True, case="edge-ai"):
        self.server = server
        tmp_path.mkdir(exist_ok=True)
        self.host = CoralHost(tmp_path, case)
        self.sender, receiver = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        settings = Settings(node_name=NODE, rules_dirs=[str(LABELS_DIR)], host_root=str(self.host.root),
                            metrics_port=None, debounce=0.05, debounce_max=0.5, watch_timeout=30,
                            backoff=BackoffSettings(initial=0.05, maximum=0.2), watch_rules=False,
                            device_plugin=device_plugin, device_plugin_dir=socket_dir)
        self.agent = Agent(settings, NodeApi.from_configuration(server.client_configuration()), event_source=SocketSource(receiver))

    def start(self):
        self.agent.start()
        wait_for(self.agent.ready.is_set, what="first reconcile")
        return self

    def inject(self, action, devpath=CORAL_DEVPATH, subsystem="usb"):
        self.sender.send(encode_kernel_uevent(action, devpath, subsystem))

    def metric(self, line_start):
        for line in self.agent.metrics.render().decode().splitlines():
            if line.startswith(line_start):
                return float(line.rsplit(" ", 1)[1])
        return None

    def close(self):
        self.agent.stop(timeout=5)
        self.sender.close()


@pytest.fixture
def server():
    with FakeApiServer(bookmark_interval=0.5) as srv:
        srv.add_node(NODE)
        yield srv


def capacity(server):
    return server.node(NODE)["status"]["capacity"]


def test_three_devices_two_resources_registered_and_allocated(tmp_path, server, socket_dir, kubelet):
    h = Harness(tmp_path, server, socket_dir).start()
    try:
        kubelet.wait_list(TPU, [(PCIE_TPU, "Healthy"), (USB_TPU, "Healthy")])
        kubelet.wait_list(HAILO, [(HAILO_8, "Healthy")])
        labels = server.node(NODE)["metadata"]["labels"]
        assert labels["accelerators/edgetpu"] == "true" and labels["accelerators/hailo8"] == "true"
        # kubelet owns these counts now: the agent wrote neither, nor recorded them as its own
        assert TPU not in capacity(server) and HAILO not in capacity(server)
        assert TPU not in server.node(NODE)["metadata"]["annotations"].get(OWNED_RESOURCES, "")
        pcie, usb = kubelet.allocate(TPU, [PCIE_TPU], [USB_TPU]).container_responses
        assert [(d.host_path, d.container_path, d.permissions) for d in pcie.devices] == [("/dev/apex_0", "/dev/apex_0", "rw")]
        assert [(d.host_path, d.permissions) for d in usb.devices] == [("/dev/bus/usb/002/002", "rw")]
        (hailo,) = kubelet.allocate(HAILO, [HAILO_8]).container_responses
        assert [d.host_path for d in hailo.devices] == ["/dev/hailo0"]
        assert h.metric(f'nfa_device_plugin_registrations_total{{resource="{TPU}",result="registered"}}') == 1.0
        assert h.metric(f'nfa_device_plugin_allocations_total{{resource="{TPU}",result="allocated"}}') == 1.0
        assert h.metric(f'nfa_device_plugin_devices{{health="Healthy",resource="{TPU}"}}') == 2.0
    finally:
        h.close()


def test_unplug_and_plug_reach_list_and_watch_in_the_pass_that_relabels(tmp_path, server, socket_dir, kubelet):
    h = Harness(tmp_path, server, socket_dir, case="coral-usb").start()
    coral = "usb-0000:00:14.0-2-2"
    try:
        kubelet.wait_list(TPU, [(coral, "Healthy")])
        passes = h.agent.passes
        h.host.unplug()
        h.inject("remove", CORAL_DEVPATH + "/2-2:1.0")
        h.inject("remove")
        kubelet.wait_list(TPU, [(coral, "Unhealthy")])
        wait_for(lambda: "accelerators/edgetpu" not in server.node(NODE)["metadata"]["labels"], what="label removed")
        wait_for(lambda: h.agent.passes > passes, what="the pass counted")  # counted once it has ended
        assert h.agent.passes == passes + 1  # one debounced pass did both
        h.host.plug()
        h.inject("add")
        h.inject("add", CORAL_DEVPATH + "/2-2:1.0")
        h.inject("bind", CORAL_DEVPATH + "/2-2:1.0")
        kubelet.wait_list(TPU, [(coral, "Healthy")])
        wait_for(lambda: "accelerators/edgetpu" in server.node(NODE)["metadata"]["labels"], what="label back")
        wait_for(lambda: h.agent.passes > passes + 1, what="the pass counted")
        assert h.agent.passes == passes + 2
        assert kubelet.allocate(TPU, [coral]).container_responses[0].devices[0].host_path == "/dev/bus/usb/002/002"
    finally:
        h.close()


def test_capacity_hand_off_removes_the_agents_entry_before_registering(tmp_path, server, socket_dir):
    before = Harness(tmp_path, server, socket_dir, device_plugin=False).start()
    before.close()
    assert capacity(server)[TPU] == "2" and TPU in server.node(NODE)["metadata"]["annotations"][OWNED_RESOURCES]

    seen_at_registration = {}

    def probe(request):
        node = server.node(NODE)
        seen_at_registration[request.resource_name] = (
            request.resource_name in node["status"]["capacity"],
            request.resource_name in node["metadata"]["annotations"].get(OWNED_RESOURCES, ""))

    kubelet = KubeletStandIn(socket_dir, on_register=probe).start()
    h = Harness(tmp_path / "again", server, socket_dir)
    try:
        h.start()
        kubelet.wait_list(TPU, [(PCIE_TPU, "Healthy"), (USB_TPU, "Healthy")])
        assert seen_at_registration[TPU] == (False, False)  # gone from capacity and from the record first
        # kubelet now writes the count from ListAndWatch; the agent must leave it alone
        server.edit_node(NODE, lambda n: n["status"]["capacity"].update({TPU: "2", HAILO: "1"}))
        passes = h.agent.passes
        h.inject("change", "/devices/pci0000:00/0000:00:1d.1/0000:04:00.0", "pci")
        wait_for(lambda: h.agent.passes > passes, what="another pass")
        assert capacity(server)[TPU] == "2" and capacity(server)[HAILO] == "1"
        assert TPU not in server.node(NODE)["metadata"]["annotations"].get(OWNED_RESOURCES, "")
    finally:
        h.close()
        kubelet.stop()


def test_kubelet_restart_and_absence_do_not_touch_the_labelling_loop(tmp_path, server, socket_dir):
    h = Harness(tmp_path, server, socket_dir).start()  # no kubelet yet
    try:
        assert server.node(NODE)["metadata"]["labels"]["accelerators/hailo8"] == "true"
        # only the directory watch (inotify) can notice kubelet from now on: no periodic look
        h.agent.devices.plugins.check_interval = 3600
        h.agent.devices.plugins.wake()
        kubelet = KubeletStandIn(socket_dir).start(wipe=True)  # wipes our sockets, as kubelet's start does
        try:
            kubelet.wait_list(HAILO, [(HAILO_8, "Healthy")])
            kubelet.restart()
            kubelet.wait_for(lambda: kubelet.registered().count(HAILO) >= 2)
            kubelet.wait_list(HAILO, [(HAILO_8, "Healthy")])
            assert kubelet.allocate(HAILO, [HAILO_8]).container_responses[0].devices[0].host_path == "/dev/hailo0"
        finally:
            kubelet.stop()
        assert h.agent.healthy() == (True, "ok")
    finally:
        h.close()


def test_off_by_default_keeps_patching_capacity(tmp_path, server, socket_dir, kubelet):
    h = Harness(tmp_path, server, socket_dir, device_plugin=False).start()
    try:
        assert capacity(server)[TPU] == "2" and capacity(server)[HAILO] == "1"
        assert kubelet.registered() == [] and h.agent.devices is None
    finally:
        h.close()


def test_coral_usb_re_enumeration_boot_state_is_never_allocated_and_the_loaded_one_is(tmp_path, server, socket_dir,
                                                                                     kubelet):
    """1a6e:089a on 1-2 (boot/DFU state, fixture coral-usb-boot) -> firmware loaded on the host ->
    18d1:9302 on 2-2 (fixture coral-usb): the sysfs entries of one replaced by the other's."""
    h = Harness(tmp_path, server, socket_dir, case="coral-usb-boot").start()
    boot, loaded = "usb-0000:00:14.0-1-2", "usb-0000:00:14.0-2-2"
    try:
        kubelet.wait_list(TPU, [(boot, "Unhealthy")])
        with pytest.raises(grpc.RpcError):  # kubelet never gets the DFU node
            kubelet.allocate(TPU, [boot])
        root, new = h.host.root, FIXTURES / "coral-usb"
        for entry in ("sys/bus/usb/devices/1-2:1.0", "sys/bus/usb/devices/1-2",
                      "sys/devices/pci0000:00/0000:00:14.0/usb1/1-2"):
            path = root / entry
            path.unlink() if path.is_symlink() else shutil.rmtree(path)
        shutil.copytree(new / "sys/devices/pci0000:00/0000:00:14.0/usb2/2-2",
                        root / "sys/devices/pci0000:00/0000:00:14.0/usb2/2-2", symlinks=True)
        for entry in ("sys/bus/usb/devices/2-2", "sys/bus/usb/devices/2-2:1.0"):
            (root / entry).symlink_to(os.readlink(new / entry))
        h.inject("remove", "/devices/pci0000:00/0000:00:14.0/usb1/1-2/1-2:1.0")
        h.inject("remove", "/devices/pci0000:00/0000:00:14.0/usb1/1-2")
        h.inject("add", CORAL_DEVPATH)
        h.inject("add", CORAL_DEVPATH + "/2-2:1.0")
        h.inject("bind", CORAL_DEVPATH)
        kubelet.wait_list(TPU, [(boot, "Unhealthy"), (loaded, "Healthy")])
        (response,) = kubelet.allocate(TPU, [loaded]).container_responses
        assert [d.host_path for d in response.devices] == ["/dev/bus/usb/002/002"]
        assert server.node(NODE)["metadata"]["labels"]["accelerators/edgetpu"] == "true"
    finally:
        h.close()


def test_stop_with_plugins_serving_ends_cleanly_within_the_shutdown_budget(tmp_path, server, socket_dir, kubelet):
    """run's SIGTERM path gives agent.stop 0.8 s (the process ends within 1 s of SIGTERM): with plugins serving and kubelet
    streaming from them, the worker still finishes in it and our sockets are gone."""
    h = Harness(tmp_path, server, socket_dir).start()
    kubelet.wait_list(HAILO, [(HAILO_8, "Healthy")])
    finished = h.agent.stop(timeout=0.8)
    h.sender.close()
    assert finished
    assert sorted(os.listdir(socket_dir)) == ["kubelet.sock"]


def test_a_tpu_whose_vendor_file_cannot_be_read_keeps_its_plugin_devices(tmp_path, server, socket_dir, kubelet):
    """The PCIe Edge TPU's ``vendor`` becomes a directory (EISDIR) while its device directory is
    still listed: passes that cannot read it keep ``pci.device`` as the pass before had it, so
    the plugin keeps advertising the card, healthy, and the label stays; a pass that reads the
    card gone again (unplugged) takes it away."""
    h = Harness(tmp_path, server, socket_dir).start()
    pcie = "sys/devices/pci0000:00/0000:00:1c.0/0000:01:00.0"
    try:
        kubelet.wait_list(TPU, [(PCIE_TPU, "Healthy"), (USB_TPU, "Healthy")])
        vendor = h.host.root / pcie / "vendor"
        vendor.unlink()
        vendor.mkdir()
        for _ in range(3):
            passes = h.agent.passes
            h.inject("change", "/" + pcie.removeprefix("sys/"), "pci")
            wait_for(lambda: h.agent.passes > passes, what="a pass that cannot read the card")  # noqa: B023
            assert kubelet.latest(TPU) == [(PCIE_TPU, "Healthy"), (USB_TPU, "Healthy")]
            assert server.node(NODE)["metadata"]["labels"]["accelerators/edgetpu"] == "true"
        assert h.metric('nfa_feature_undetermined{feature="pci.device"}') == 1.0
        shutil.rmtree(h.host.root / pcie)
        os.unlink(h.host.root / "sys/bus/pci/devices/0000:01:00.0")
        h.inject("remove", "/" + pcie.removeprefix("sys/"), "pci")
        kubelet.wait_list(TPU, [(PCIE_TPU, "Unhealthy"), (USB_TPU, "Healthy")])  # gone: unhealthy for its grace
        assert h.metric('nfa_feature_undetermined{feature="pci.device"}') == 0.0
    finally:
        h.close()


def test_a_fresh_agent_that_cannot_read_a_tpu_serves_no_shorter_list(tmp_path, server, socket_dir, kubelet):
    """A fresh agent whose first pass cannot read the PCIe TPU has no earlier answer to keep:
    the resources that card's feature decides (the TPUs, and the Hailo-8 found by the same
    ``pci.device``) are not handed to their plugins until a pass reads it, so kubelet never
    gets a TPU list without the card."""
    h = Harness(tmp_path, server, socket_dir)
    pcie = "sys/devices/pci0000:00/0000:00:1c.0/0000:01:00.0"
    vendor = h.host.root / pcie / "vendor"
    content = vendor.read_bytes()
    vendor.unlink()
    vendor.mkdir()
    h.start()
    try:
        wait_for(lambda: h.agent.passes >= 1, what="the first pass, devices published")
        assert h.metric(f'nfa_device_plugin_devices{{health="Healthy",resource="{TPU}"}}') is None
        vendor.rmdir()
        vendor.write_bytes(content)
        h.inject("change", "/" + pcie.removeprefix("sys/"), "pci")
        kubelet.wait_list(TPU, [(PCIE_TPU, "Healthy"), (USB_TPU, "Healthy")])
        assert kubelet.lists.get(TPU) == [[(PCIE_TPU, "Healthy"), (USB_TPU, "Healthy")]]
    finally:
        h.close()
