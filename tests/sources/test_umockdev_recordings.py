"""Real USB devices recorded with umockdev, replayed through discovery, checked against NFD by hand.

The recordings under ``fixtures/recorded/umockdev/`` are copied unchanged from
martinpitt/umockdev ``devices/`` (commit ``39f785a7``) and, named ``libfprint-*``, from
freedesktop/libfprint ``tests/<driver>/device`` (commit ``1f5e0821``): real fingerprint
readers recorded with umockdev-record for libfprint's own tests (paths and blobs in
``fixtures/recorded/README.md`` and :data:`BLOBS`).  Each test builds the ``/sys`` tree umockdev's testbed would
build (``fixtures/recorded/umockdev_tree.py``) and runs discovery on it.  Expected values are
read from the recording's ``A:`` lines and NFD's ``source/usb`` / ``source/pci``
(node-feature-discovery ``76e6cc8c``) applied by hand; IDs named from hwdata's usb.ids/pci.ids.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from pathlib import Path

import pytest

from agent.discovery import DiscoveryConfig, discover
from agent.features import NFD_PREFIX
from agent.hostfs import HostFS
from agent.sources import pci, usb
from tests.conftest import REPO
from tests.support.recorded_tools import recorded_tool

RECORDINGS = REPO / "fixtures" / "recorded" / "umockdev"
#: file -> git blob at martinpitt/umockdev 39f785a7 (the copies must stay byte-identical)
BLOBS = {"fido2.umockdev": "4df0d013086b5360629a6778eb3bfe131eae4a3b",
         "canon-powershot-sx200.umockdev": "68893e3e7a97685b16f940325511b93a9d7ab261",
         # freedesktop/libfprint 1f5e0821: tests/synaptics/device, tests/goodixmoc/device
         "libfprint-synaptics.umockdev": "e56e37d910208d2a99e8730e9b4e42f3660dcb95",
         "libfprint-goodixmoc.umockdev": "a076caa1b0b861bc8dfe7a0f3169c674f5e949da"}


def _tree_builder():
    return recorded_tool("umockdev_tree")


def replay(name: str, tmp_path: Path) -> Path:
    root = tmp_path / name
    _tree_builder().build((RECORDINGS / f"{name}.umockdev").read_text(), root)
    return root


def nfd_view(instances, keys) -> Counter:
    return Counter(tuple(sorted((k, v) for k, v in i.attributes.items() if k in keys)) for i in instances)


def as_counter(dicts) -> Counter:
    return Counter(tuple(sorted(d.items())) for d in dicts)


USB_KEYS = ("class", "vendor", "device", "serial")
PCI_KEYS = ("class", "vendor", "device", "subsystem_vendor", "subsystem_device",
            "sriov_totalvfs", "iommu_group/type", "iommu/intel-iommu/version")


@pytest.mark.parametrize("name", sorted(BLOBS))
def test_recordings_are_umockdevs_files_unchanged(name):
    data = (RECORDINGS / name).read_bytes()
    assert hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest() == BLOBS[name]


# -- devices/hidraw/fido2.umockdev: a Yubico Security Key behind a Realtek hub on an AMD xHCI ----
def test_fido2_key_as_nfd_sees_it(tmp_path):
    """1-2.3 (Yubico 1050:0120 "Security Key by Yubico") has bDeviceClass 00: NFD takes the class
    of its one interface 1-2.3:1.0, bInterfaceClass 03 (HID); it has no ``serial`` file.  The hub
    1-2 (Realtek 0bda:5411 RTS5411) and root hub usb1 (1d6b:0002, serial = the controller's PCI
    address) are class 09.  None is in NFD's default whitelist (0e, ef, fe, ff): no label."""
    result = discover(HostFS(str(replay("fido2", tmp_path))), DiscoveryConfig())
    assert nfd_view(result.features["usb.device"].instances, USB_KEYS) == as_counter([
        {"class": "09", "vendor": "1d6b", "device": "0002", "serial": "0000:05:00.3"},
        {"class": "09", "vendor": "0bda", "device": "5411"},
        {"class": "03", "vendor": "1050", "device": "0120"},
    ])
    # PCI: the xHCI 1022:15e0 (class 0x0c0330) and its bridge 1022:15db (0x060400); their
    # iommu_group links point at /sys/kernel/iommu_groups/N, which was not recorded, so NFD's
    # ``iommu_group/type`` read fails and the attribute is absent (on the real host it was there)
    assert nfd_view(result.features["pci.device"].instances, PCI_KEYS) == as_counter([
        {"class": "0c03", "vendor": "1022", "device": "15e0", "subsystem_vendor": "1849", "subsystem_device": "7914"},
        {"class": "0604", "vendor": "1022", "device": "15db", "subsystem_vendor": "1022", "subsystem_device": "0000"},
    ])
    assert not [k for k in result.labels if k.startswith((NFD_PREFIX + "usb-", NFD_PREFIX + "pci-"))]
    # a dangling iommu_group/iommu link is not an error: NFD treats the optional file as absent
    assert sorted(e.source for e in result.errors) == ["cpu", "kernel"]  # no /proc recorded


def test_fido2_key_with_hid_whitelisted_as_nfd_labels_it(tmp_path):
    """NFD with ``deviceClassWhitelist: ["03"]`` (usb) and ``["0c03"]`` (pci), default fields."""
    host = HostFS(str(replay("fido2", tmp_path)))
    assert dict(usb.discover(host, usb.Config(device_class_whitelist=("03",))).labels) == {
        NFD_PREFIX + "usb-03_1050_0120.present": "true"}
    assert dict(pci.discover(host, pci.Config(device_class_whitelist=("0c03",))).labels) == {
        NFD_PREFIX + "pci-0c03_1022.present": "true"}


# -- devices/cameras/canon-powershot-sx200.umockdev: a camera whose interface was not recorded ---
def test_class_00_device_without_recorded_interfaces_yields_no_instance(tmp_path):
    """The Canon PowerShot SX200 (04a9:31c0) is bDeviceClass 00 and its interface (class 06,
    per the recorded ID_USB_INTERFACES) has no directory in the recording: NFD's glob
    ``1-1.5.2.3/*/bInterfaceClass`` finds nothing, so the camera gives no instance at all.
    The hubs (Intel 8087:0020, Lenovo 17ef:1005, NEC 0409:0058) and the root hub are class 09.
    This older recording stores most values without a trailing newline."""
    result = discover(HostFS(str(replay("canon-powershot-sx200", tmp_path))), DiscoveryConfig())
    assert nfd_view(result.features["usb.device"].instances, USB_KEYS) == as_counter([
        {"class": "09", "vendor": "1d6b", "device": "0002", "serial": "0000:00:1a.0"},
        {"class": "09", "vendor": "8087", "device": "0020"},
        {"class": "09", "vendor": "17ef", "device": "1005"},
        {"class": "09", "vendor": "0409", "device": "0058"},
    ])
    # the EHCI controller 8086:3b3c, "0x0c0320" recorded without a newline
    assert nfd_view(result.features["pci.device"].instances, PCI_KEYS) == as_counter([
        {"class": "0c03", "vendor": "8086", "device": "3b3c", "subsystem_vendor": "17aa", "subsystem_device": "2163"},
    ])
    assert not [k for k in result.labels if k.startswith((NFD_PREFIX + "usb-", NFD_PREFIX + "pci-"))]
    assert sorted(e.source for e in result.errors) == ["cpu", "kernel"]


# -- libfprint's recordings: vendor-class readers NFD labels with its defaults -------------------
def test_synaptics_reader_is_labelled_as_nfd_labels_it(tmp_path):
    """06cb:00bd (Synaptics "Prometheus MIS Touch Fingerprint Reader") has bDeviceClass ff, in
    NFD's default whitelist: one instance, label class_vendor_device.  The root hub is 09; the
    xHCI 8086:9ded (0x0c0330) is not in the default PCI whitelist."""
    host = HostFS(str(replay("libfprint-synaptics", tmp_path)))
    result = discover(host, DiscoveryConfig())
    assert nfd_view(result.features["usb.device"].instances, USB_KEYS) == as_counter([
        {"class": "ff", "vendor": "06cb", "device": "00bd", "serial": "c087f7d72126"},
        {"class": "09", "vendor": "1d6b", "device": "0002", "serial": "0000:00:14.0"},
    ])
    assert nfd_view(result.features["pci.device"].instances, PCI_KEYS) == as_counter([
        {"class": "0c03", "vendor": "8086", "device": "9ded", "subsystem_vendor": "17aa", "subsystem_device": "2292"},
    ])
    assert {k: v for k, v in result.labels.items() if k.startswith((NFD_PREFIX + "usb-", NFD_PREFIX + "pci-"))} == {
        NFD_PREFIX + "usb-ff_06cb_00bd.present": "true"}
    # deviceLabelFields [serial, vendor]: NFD orders fields canonically (class vendor device serial)
    labels = usb.discover(host, usb.Config(device_label_fields=("serial", "vendor"))).labels
    assert dict(labels) == {NFD_PREFIX + "usb-06cb_c087f7d72126.present": "true"}


def test_goodix_reader_of_class_ef_is_labelled_as_nfd_labels_it(tmp_path):
    """27c6:5840 (Goodix, "Goodix USB2.0 MISC") has bDeviceClass ef (Miscellaneous), in NFD's
    default whitelist; its serial, ``UIDE1AD5CBA_XXXX_MOC_B0``, joins the label when the label
    fields name it.  Only the two USB devices were recorded (no PCI)."""
    host = HostFS(str(replay("libfprint-goodixmoc", tmp_path)))
    result = discover(host, DiscoveryConfig())
    assert nfd_view(result.features["usb.device"].instances, USB_KEYS) == as_counter([
        {"class": "ef", "vendor": "27c6", "device": "5840", "serial": "UIDE1AD5CBA_XXXX_MOC_B0"},
        {"class": "09", "vendor": "1d6b", "device": "0002", "serial": "0000:00:14.0"},
    ])
    assert "pci.device" not in result.features  # no sys/bus/pci at all, as for NFD (listing fails)
    assert {k: v for k, v in result.labels.items() if k.startswith((NFD_PREFIX + "usb-", NFD_PREFIX + "pci-"))} == {
        NFD_PREFIX + "usb-ef_27c6_5840.present": "true"}
    labels = usb.discover(host, usb.Config(device_label_fields=("class", "vendor", "device", "serial"))).labels
    assert dict(labels) == {NFD_PREFIX + "usb-ef_27c6_5840_UIDE1AD5CBA_XXXX_MOC_B0.present": "true"}


def test_tree_builder_lays_out_links_as_umockdev_does(tmp_path):
    root = replay("fido2", tmp_path)
    sysfs = root / "sys"
    assert (sysfs / "bus/usb/devices/1-2.3").readlink().as_posix() == \
        "../../../devices/pci0000:00/0000:00:08.1/0000:05:00.3/usb1/1-2/1-2.3"
    assert (sysfs / "class/hidraw/hidraw5").resolve().name == "hidraw5"
    assert (sysfs / "bus/usb/devices/1-2.3/bDeviceClass").read_bytes() == b"00\n"
    assert (sysfs / "bus/usb/devices/1-2.3/configuration").read_bytes() == b""
    # H: lines are binary: the USB device descriptor starts with bLength 18, type 1
    assert (sysfs / "bus/usb/devices/1-2.3/descriptors").read_bytes()[:2] == b"\x12\x01"
    assert (sysfs / "devices/pci0000:00/0000:00:08.1/0000:05:00.3/driver").readlink().as_posix() == \
        "../../../../bus/pci/drivers/xhci_hcd"


def test_g_strcompress_as_glib():
    builder = _tree_builder()
    assert builder.g_strcompress(r"a\nb\tc\\d\101\x") == b"a\nb\tc\\dAx"
    with pytest.raises(builder.NotARecording):
        builder.parse("A: orphan=1\n")
    with pytest.raises(builder.NotARecording):
        builder.parse("P: /devices/x\nA: a=1\n")  # no SUBSYSTEM, which umockdev refuses too
