"""Catalogue claims + recorded hosts -> plugin devices with the right /dev nodes and IDs.

Expected nodes come from the kernel's naming, not from our code: ``usb_devnode`` names USB
devices ``bus/usb/%03d/%03d`` from busnum/devnum; gasket names ``apex_%d``; hailo_pci names
``hailo%d`` (fixtures' READMEs)."""

from __future__ import annotations

import shutil

import pytest

from agent import rules
from agent.device_claims import MatchedDevice
from agent.deviceplugin.resolve import device_id, resolve_claims
from agent.discovery import discover
from agent.hostfs import HostFS
from tests.conftest import FIXTURES, LABELS_DIR

CATALOGUE = rules.load_catalogue([str(LABELS_DIR)])
TPU, HAILO = "node-feature-agent.io/edgetpu", "node-feature-agent.io/hailo8"


def plugin_devices(root):
    host = HostFS(root)
    found = discover(host)
    state = rules.desired_state(found.features, found.labels, {}, CATALOGUE)
    resolved = resolve_claims(HostFS(root), state.device_claims)
    return state, {name: [(d.id, [n.host_path for n in d.nodes], d.why) for d in r.devices]
                   for name, r in resolved.items()}


def test_edge_ai_host_serves_usb_and_pcie_tpus_and_the_hailo():
    state, devices = plugin_devices(FIXTURES / "edge-ai")
    assert devices == {
        TPU: [("pci-0000:01:00.0", ["/dev/apex_0"], ""), ("usb-0000:00:14.0-2-2", ["/dev/bus/usb/002/002"], "")],
        HAILO: [("pci-0000:04:00.0", ["/dev/hailo0"], "")],
    }
    assert state.extended_resources[TPU] == "2" and state.extended_resources[HAILO] == "1"


def test_coral_in_dfu_state_is_counted_but_not_ready():
    _, devices = plugin_devices(FIXTURES / "coral-usb-boot")
    ((ident, nodes, why),) = devices[TPU]
    assert (ident, nodes) == ("usb-0000:00:14.0-1-2", ["/dev/bus/usb/001/003"])
    assert "boot (DFU) state" in why


def test_apex_node_without_a_uevent_file_takes_the_class_directory_name():
    _, devices = plugin_devices(FIXTURES / "coral-pcie")
    assert devices[TPU] == [("pci-0000:01:00.0", ["/dev/apex_0"], "")]


def test_recorded_dev_board_serves_its_on_som_tpu():
    """A real Mendel board (fixtures/sysfs/coral-devboard-vendor-recorded): the TPU in PCI domain
    0001 behind the second controller, its apex class device under the PCI device, one device."""
    state, devices = plugin_devices(FIXTURES / "coral-devboard-vendor-recorded")
    assert devices[TPU] == [("pci-0001:01:00.0", ["/dev/apex_0"], "")]
    assert not any(found for name, found in devices.items() if name != TPU)
    assert state.extended_resources[TPU] == "1"


def test_dev_board_on_a_mainline_kernel_has_no_tpu_to_serve():
    """Mainline DT, no PCIe link, no apex driver: nothing to count or hand to a container."""
    state, devices = plugin_devices(FIXTURES / "coral-devboard-mainline")
    assert not devices.get(TPU) and TPU not in state.extended_resources


def test_a_device_whose_driver_made_no_node_is_unhealthy(tmp_path):
    root = tmp_path / "host"
    shutil.copytree(FIXTURES / "edge-ai", root, symlinks=True)
    shutil.rmtree(root / "sys/devices/virtual/hailo_chardev")
    (root / "sys/class/hailo_chardev/hailo0").unlink()
    _, devices = plugin_devices(root)
    ((ident, nodes, why),) = devices[HAILO]
    assert ident == "pci-0000:04:00.0" and nodes == [] and "no device node found (class hailo_chardev)" in why


def test_devname_from_uevent_is_used_and_a_hostile_one_is_not(tmp_path):
    root = tmp_path / "host"
    shutil.copytree(FIXTURES / "edge-ai", root, symlinks=True)
    uevent = root / "sys/devices/virtual/hailo_chardev/hailo0/uevent"
    uevent.write_text("MAJOR=236\nMINOR=0\nDEVNAME=hailo/accel0\n")
    assert plugin_devices(root)[1][HAILO][0][1] == ["/dev/hailo/accel0"]
    uevent.write_text("MAJOR=236\nMINOR=0\nDEVNAME=../etc/shadow\n")
    assert plugin_devices(root)[1][HAILO][0][1] == ["/dev/hailo0"]


@pytest.mark.parametrize("attributes,origin,expected", [
    ({"address": "0000:01:00.0"}, "/sys/devices/pci0000:00/0000:00:1c.0/0000:01:00.0", "pci-0000:01:00.0"),
    ({"sysfs_name": "2-2"}, "/sys/devices/pci0000:00/0000:00:14.0/usb2/2-2", "usb-0000:00:14.0-2-2"),
    ({"sysfs_name": "1-1.4"}, "/sys/devices/platform/soc/fe980000.usb/usb1/1-1/1-1.4/1-1.4:1.0", "usb-fe980000.usb-1-1.4"),
    ({"sysfs_name": "3-1.2.3.4.1.2.3"}, "/sys/devices/platform/" + "x" * 60 + "/usb3/3-1", None),
])
def test_device_ids_name_where_the_device_sits(attributes, origin, expected):
    ident = device_id(MatchedDevice("usb.device", attributes, origin))
    assert len(ident) <= 63
    if expected is not None:
        assert ident == expected
    else:  # too long: shortened with a hash of the whole, still stable
        assert ident == device_id(MatchedDevice("usb.device", attributes, origin)) and ident.startswith("usb-xxx")


def test_junk_in_a_class_device_makes_that_device_unhealthy_not_the_pass_fail(tmp_path):
    root = tmp_path / "host"
    shutil.copytree(FIXTURES / "edge-ai", root, symlinks=True)
    (root / "sys/devices/virtual/hailo_chardev/hailo0/uevent").write_bytes(b"MAJOR=236\x00\xff\xfe DEVNAME=hailo0")
    (root / "sys/devices/pci0000:00/0000:00:1c.0/0000:01:00.0/apex/apex_0/dev").unlink()  # vanished mid-scan
    _, devices = plugin_devices(root)
    assert devices[HAILO][0][1] == [] and devices[HAILO][0][2]
    apex = next(d for d in devices[TPU] if d[0] == "pci-0000:01:00.0")
    assert apex[1] == [] and "no device node found" in apex[2]
    assert next(d for d in devices[TPU] if d[0].startswith("usb-"))[2] == ""  # the others are unaffected
