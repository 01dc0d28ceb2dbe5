"""A real laptop's recorded sysfs (systemd's ``test/sys-script.py``) replayed through discovery.

``fixtures/sysfs/thinkpad-t60p-recorded/`` is a Lenovo ThinkPad T60p on Linux 2.6.27-rc7, cut
from systemd's recording by ``fixtures/recorded/extract_sys_script.py`` (source, blob and what
was kept: the fixture's README).  Every expected value below was written from the recorded
files (``cat`` of the fixture) and NFD's code applied by hand (node-feature-discovery
``76e6cc8c``: ``source/pci``, ``source/usb``, ``source/storage``, ``source/network``,
``source/memory``, ``source/kernel``, ``source/system``), not from our output; the IDs are
named from hwdata's ``pci.ids`` 2023.04.10 and ``usb.ids`` 2025.07.26.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from pathlib import Path

import pytest

from agent.cli import build_parser
from agent.config import discovery_config, selected_sources
from agent.discovery import discover
from agent.features import NFD_PREFIX
from agent.hostfs import HostFS
from agent.snapshot import Recording
from tests.conftest import FIXTURES, REPO
from tests.support.recorded_tools import recorded_tool

ROOT = FIXTURES / "thinkpad-t60p-recorded"

#: NFD's labels on this host, each with the reason NFD emits it (the *only* two).
NFD_LABELS = {
    # pci: default deviceClassWhitelist ["03", "0b40", "12"], deviceLabelFields [class, vendor].
    # 0000:01:00.0 class 0x030000 -> "0300" (NFD keeps 4 digits), vendor 0x1002:
    # ATI RV530/M66 GL [Mobility FireGL V5250] (1002:71d4).  The other 19 functions are
    # 0600/0604/0601/0607 bridges, 0403 audio, 0c03 UHCI, 0c05 SMBus, 0101/0106 storage,
    # 0200 Ethernet, 0280 wireless: none starts with 03, 0b40 or 12.  No sriov_totalvfs
    # anywhere, so no .sriov.capable.
    "pci-0300_1002.present": "true",
    # usb: default deviceClassWhitelist ["0e", "ef", "fe", "ff"], fields [class, vendor, device].
    # 4-2 (STMicroelectronics 0483:2016 "Fingerprint Reader") has bDeviceClass 00, so NFD
    # takes the class of its one interface 4-2:1.0, bInterfaceClass ff.
    "usb-ff_0483_2016.present": "true",
    # Not labelled: 4-1 Broadcom BCM2045B 0a5c:2110 has bDeviceClass e0 (not 00), so its
    # interfaces' ff and fe classes are never looked at; 3-1 Logitech 046d:c03e (00 -> 03 HID),
    # 5-1 1043:8012 flash disk (00 -> 08), 5-2 Nokia N78 0421:007b (02), root hubs (09).
    # storage: Linux 2.6.27 has no queue/rotational (added in 2.6.29): no nonrotationaldisk.
    # network: no sriov_* files: no sriov labels.  memory: no bus/node (NFD: error, no numa
    # attribute), no /proc/swaps (no swap attribute).  kernel: no /proc (no version, config,
    # modules), no fs/selinux/enforce (enabled=false, no label).  system: no os-release.
    # cpu: NFD reads CPUID from the CPU it runs on; nothing to replay (README).
}

#: NFD's usb.device instances (attributes class, vendor, device, serial-if-non-empty).
NFD_USB = [
    {"class": "03", "vendor": "046d", "device": "c03e"},  # 3-1 (00) via 3-1:1.0
    {"class": "e0", "vendor": "0a5c", "device": "2110"},  # 4-1, one instance: class is not 00
    {"class": "ff", "vendor": "0483", "device": "2016"},  # 4-2 (00) via 4-2:1.0
    {"class": "08", "vendor": "1043", "device": "8012"},  # 5-1 (00) via 5-1:1.0
    {"class": "02", "vendor": "0421", "device": "007b", "serial": "354172020305000"},  # 5-2
    *({"class": "09", "vendor": "1d6b", "device": "0001", "serial": f"0000:00:1d.{n}"} for n in range(4)),
    {"class": "09", "vendor": "1d6b", "device": "0002", "serial": "0000:00:1d.7"},  # usb5, EHCI
]

#: NFD's pci.device instances: (address, class, vendor, device, subsystem_vendor, subsystem_device).
#: 0000:00:1d.7 (EHCI, 8086:27cc) is in sys/devices but not in the recorded sys/bus/pci/devices
#: listing, so NFD (which lists bus/pci/devices) does not see it.
NFD_PCI = [
    ("0000:00:00.0", "0600", "8086", "27a0", "17aa", "2015"),
    ("0000:00:01.0", "0604", "8086", "27a1", "0000", "0000"),
    ("0000:00:1b.0", "0403", "8086", "27d8", "17aa", "2010"),
    ("0000:00:1c.0", "0604", "8086", "27d0", "0000", "0000"),
    ("0000:00:1c.1", "0604", "8086", "27d2", "0000", "0000"),
    ("0000:00:1c.2", "0604", "8086", "27d4", "0000", "0000"),
    ("0000:00:1c.3", "0604", "8086", "27d6", "0000", "0000"),
    ("0000:00:1d.0", "0c03", "8086", "27c8", "17aa", "200a"),
    ("0000:00:1d.1", "0c03", "8086", "27c9", "17aa", "200a"),
    ("0000:00:1d.2", "0c03", "8086", "27ca", "17aa", "200a"),
    ("0000:00:1d.3", "0c03", "8086", "27cb", "17aa", "200a"),
    ("0000:00:1e.0", "0604", "8086", "2448", "0000", "0000"),
    ("0000:00:1f.0", "0601", "8086", "27b9", "17aa", "2009"),
    ("0000:00:1f.1", "0101", "8086", "27df", "17aa", "200c"),
    ("0000:00:1f.2", "0106", "8086", "27c5", "17aa", "200d"),
    ("0000:00:1f.3", "0c05", "8086", "27da", "17aa", "200f"),
    ("0000:01:00.0", "0300", "1002", "71d4", "17aa", "20a4"),
    ("0000:02:00.0", "0200", "8086", "109a", "17aa", "2001"),
    ("0000:03:00.0", "0280", "8086", "4227", "8086", "1011"),
    ("0000:15:00.0", "0607", "104c", "ac56", "17aa", "2012"),
]

#: NFD's system.dmiid: the 16 names it asks for, minus product_family and product_sku (not in
#: 2.6.27's DMI class); values TrimSpace'd, the empty board_asset_tag kept (NFD keeps "").
NFD_DMI = {
    "bios_date": "09/19/2007", "bios_vendor": "LENOVO", "bios_version": "7IET31WW (1.12 )",
    "board_asset_tag": "", "board_name": "8741C4G", "board_vendor": "LENOVO", "board_version": "Not Available",
    "chassis_asset_tag": "No Asset Information", "chassis_type": "10", "chassis_vendor": "LENOVO",
    "chassis_version": "Not Available", "product_name": "8741C4G", "product_version": "ThinkPad T60p",
    "sys_vendor": "LENOVO",
}


@pytest.fixture(scope="module")
def result():
    args = build_parser().parse_args(["discover", "--host-root", str(ROOT), "--node-name", "fixture-node"])
    return discover(HostFS(args.host_root), discovery_config(args), selected_sources(args))


def instances(result, feature: str) -> list[dict[str, str]]:
    return [dict(i.attributes) for i in result.features[feature].instances]


def test_labels_are_exactly_nfds(result):
    assert dict(result.labels) == {NFD_PREFIX + key: value for key, value in NFD_LABELS.items()}


def test_usb_instances_as_nfd_makes_them(result):
    """Class-00 devices expand per interface, class e0 does not; serial only where the file is."""
    nfd_view = [{k: v for k, v in attrs.items() if k in ("class", "vendor", "device", "serial")}
                for attrs in instances(result, "usb.device")]
    key = lambda attrs: tuple(sorted(attrs.items()))  # noqa: E731 - a sort key
    assert Counter(map(key, nfd_view)) == Counter(map(key, NFD_USB))


def test_usb_root_hub_interfaces_and_bluetooth_interfaces(result):
    """Root hubs' interfaces are named ``1-0:1.0`` (not ``usb1:1.0``); the hub driver is found
    through them; the Bluetooth adapter's ff/fe interfaces add no instance."""
    by_name = {}
    for attrs in instances(result, "usb.device"):
        by_name.setdefault(attrs["sysfs_name"], []).append(attrs)
    assert [a.get("driver") for a in by_name["usb1"]] == ["hub"]
    assert len(by_name["4-1"]) == 1 and "driver" not in by_name["4-1"][0]  # no interface driver bound
    assert [(a["interface"], a.get("driver")) for a in by_name["5-1"]] == [("5-1:1.0", "usb-storage")]


def test_pci_instances_as_nfd_reads_them(result):
    fields = ("address", "class", "vendor", "device", "subsystem_vendor", "subsystem_device")
    got = sorted(tuple(attrs[f] for f in fields) for attrs in instances(result, "pci.device"))
    assert got == NFD_PCI
    for attrs in instances(result, "pci.device"):
        # 2.6.27: no revision file, no numa_node, no IOMMU, no SR-IOV
        assert not {"sriov_totalvfs", "iommu_group/type", "iommu/intel-iommu/version", "revision",
                    "numa_node"} & set(attrs), attrs


def test_pci_driver_names_as_the_old_kernel_wrote_them(result):
    """2.6.27's driver directories are named after the driver structs: a space in one."""
    drivers = {attrs["address"]: attrs.get("driver") for attrs in instances(result, "pci.device")}
    assert drivers["0000:00:1b.0"] == "HDA Intel"
    assert drivers["0000:00:01.0"] == "pcieport-driver"
    assert drivers["0000:01:00.0"] is None  # the FireGL has no driver bound


def test_block_devices_have_no_queue_attributes(result):
    """NFD reads queue/{dax,rotational,nr_zones,zoned}: 2.6.27 has none of them, and the idle
    loop and md devices have no queue directory at all; each device is still an instance."""
    assert sorted(tuple(sorted(a.items())) for a in instances(result, "storage.block")) == sorted(
        (("name", name),) for name in ("loop0", "loop1", "loop2", "loop3", "loop4", "loop5", "loop6",
                                         "loop7", "md0", "sda", "sdb", "sr0"))


def test_network_as_nfd_splits_it(result):
    """``device`` link -> physical (eth0, wlan0 and the mac80211 master wmaster0), else virtual;
    2.6.27 has no ``speed`` file, and nothing reports it as an error."""
    nfd_keys = ("name", "operstate", "speed", "sriov_numvfs", "sriov_totalvfs", "mtu")
    physical = sorted(tuple(sorted((k, v) for k, v in a.items() if k in nfd_keys))
                      for a in instances(result, "network.device"))
    assert physical == [(("mtu", "1500"), ("name", "eth0"), ("operstate", "down")),
                        (("mtu", "1500"), ("name", "wlan0"), ("operstate", "up")),
                        (("mtu", "1500"), ("name", "wmaster0"), ("operstate", "unknown"))]
    assert instances(result, "network.virtual") == [{"name": "lo", "operstate": "unknown", "mtu": "16436"}]


def test_dmi_as_nfd_reads_it(result):
    assert dict(result.features["system.dmiid"].attributes) == NFD_DMI


def test_absent_files_give_nfds_defaults_and_only_the_proc_errors(result):
    assert dict(result.features["memory.hugepages"].attributes) == {"enabled": "false"}
    assert dict(result.features["kernel.selinux"].attributes) == {"enabled": "false"}
    assert "memory.numa" not in result.features and "memory.swap" not in result.features
    # the recording has no /proc: cpuinfo and the kernel release are reported missing, and
    # nothing else is an error (no old-format file is mistaken for a damaged one)
    assert sorted((e.source, e.path) for e in result.errors) == [
        ("cpu", "/proc/cpuinfo"), ("kernel", "/proc/sys/kernel/osrelease")]


# -- the extractor: the script is data, and only what the sources read is kept ------------------
def _extractor():
    return recorded_tool("extract_sys_script")


MINI_SCRIPT = b"""import os, sys
os.system('touch /tmp/never-run')
d('sys', 0o755)
d('sys/devices', 0o755)
d('sys/devices/pci0000:00', 0o755)
d('sys/devices/pci0000:00/0000:00:02.0', 0o755)
f('sys/devices/pci0000:00/0000:00:02.0/vendor', 0o644, b'0x8086\\n')
f('sys/devices/pci0000:00/0000:00:02.0/config', 0o644, b'\\x86\\x80')
l('sys/devices/pci0000:00/0000:00:02.0/driver', '../../../bus/pci/drivers/i915')
l('sys/devices/pci0000:00/0000:00:02.0/firmware_node', '../../LNXSYSTM:00')
d('sys/devices/pci0000:00/0000:00:02.0/power', 0o755)
f('sys/devices/pci0000:00/0000:00:02.0/power/wakeup', 0o644, b'\\n')
d('sys/devices/LNXSYSTM:00', 0o755)
d('sys/bus', 0o755)
d('sys/bus/pci', 0o755)
d('sys/bus/pci/devices', 0o755)
l('sys/bus/pci/devices/0000:00:02.0', '../../../devices/pci0000:00/0000:00:02.0')
d('sys/bus/pci/drivers', 0o755)
d('sys/bus/pci/drivers/i915', 0o755)
f('sys/bus/pci/drivers/i915/bind', 0o200, b'')
l('sys/bus/pci/drivers/i915/0000:00:02.0', '../../../../devices/pci0000:00/0000:00:02.0')
l('sys/bus/pci/drivers/i915/module', '../../../../module/i915')
"""


def test_extractor_keeps_what_sources_read_and_never_runs_the_script(tmp_path):
    extractor = _extractor()
    recording = extractor.parse(MINI_SCRIPT)
    extractor.write(recording, extractor.select(recording), tmp_path)
    kept = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if not p.is_dir() or p.is_symlink())
    assert kept == ["sys/bus/pci/devices/0000:00:02.0", "sys/bus/pci/drivers/i915/0000:00:02.0",
                    "sys/bus/pci/drivers/i915/bind", "sys/devices/pci0000:00/0000:00:02.0/config",
                    "sys/devices/pci0000:00/0000:00:02.0/driver", "sys/devices/pci0000:00/0000:00:02.0/vendor"]
    assert (tmp_path / "sys/devices/pci0000:00/0000:00:02.0/config").read_bytes() == b"\x86\x80"
    assert (tmp_path / "sys/bus/pci/devices/0000:00:02.0/driver").resolve().name == "i915"
    with pytest.raises(extractor.NotASysScript):
        extractor.parse(b"f('sys/x', 0o644, open('/etc/passwd', 'rb').read())\n")


def test_extractor_refuses_another_version_of_the_script(tmp_path):
    script = tmp_path / "sys-script.py"
    script.write_bytes(MINI_SCRIPT)
    assert _extractor().main([str(script), str(tmp_path / "out")]) == 1
    assert not (tmp_path / "out").exists()


# -- the committed recording: the cut is the extractor's output, and it is complete --------------
#: ``git hash-object`` of systemd's test/sys-script.py as fetched (README), written here rather
#: than read from the extractor so that a changed constant there cannot pass this check.
SYSTEMD_SCRIPT_BLOB = "e9ce6653135258449560d62ce0f50db3b4d5cb79"
SCRIPT_XZ = REPO / "fixtures" / "recorded" / "sources" / "systemd-sys-script.py.xz"


@pytest.fixture(scope="module")
def script() -> bytes:
    import lzma

    return lzma.decompress(SCRIPT_XZ.read_bytes())


@pytest.fixture(scope="module")
def whole(script, tmp_path_factory) -> Path:
    """Every d/f/l entry of the recording, materialized as data (the script is never run)."""
    extractor = _extractor()
    recording = extractor.parse(script)
    out = tmp_path_factory.mktemp("t60p-whole")
    extractor.write(recording, extractor.everything(recording), out)
    return out


def tree(root: Path) -> dict[str, tuple]:
    """Every entry under ``root/sys``, links not followed: ("dir",), ("file", bytes) or ("link", target)."""
    entries: dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(root / "sys"):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = path.relative_to(root).as_posix()
            if path.is_symlink():
                entries[rel] = ("link", os.readlink(path))
            elif path.is_dir():
                entries[rel] = ("dir",)
            else:
                entries[rel] = ("file", path.read_bytes())
    return entries


def test_committed_script_is_systemds_blob(script):
    """The committed .xz decompresses to exactly the blob the README names (LGPL-2.1-or-later)."""
    assert hashlib.sha1(b"blob %d\0" % len(script) + script).hexdigest() == SYSTEMD_SCRIPT_BLOB
    assert len(script) == 1_190_529
    header = script.decode().splitlines()[:7]
    assert header[1] == "# SPDX-License-Identifier: LGPL-2.1-or-later"
    assert header[5] == "# © 2017 Canonical Ltd."


def test_committed_tree_is_the_extractors_output(tmp_path):
    """Run as a person would (`extract_sys_script.py <the .xz> OUT`): files, directories and symlink
    targets under sys/ equal the committed fixture's, byte for byte; nothing else is committed."""
    assert _extractor().main([str(SCRIPT_XZ), str(tmp_path)]) == 0
    fresh, committed = tree(tmp_path), tree(ROOT)
    assert len(committed) > 1000 and sum(kind == ("dir",) for kind in committed.values()) > 50
    differing = sorted(k for k in fresh.keys() | committed.keys() if fresh.get(k) != committed.get(k))
    assert not differing, f"run `python fixtures/recorded/extract_sys_script.py`: {differing[:10]}"
    assert sorted(p.name for p in ROOT.iterdir()) == ["README.md", "expected.json", "sys"]


def test_whole_recording_discovers_exactly_as_the_cut(whole, result):
    """Discovery on the laptop's whole recorded /sys gives the same features, labels and errors
    as on the cut: nothing a source reads was left out."""
    entries = tree(whole)
    assert Counter(kind[0] for kind in entries.values()) == {"file": 7991, "link": 1592, "dir": 1632}
    assert "sys/module" in entries and "sys/module" not in tree(ROOT)  # really more than the cut
    args = build_parser().parse_args(["discover", "--host-root", str(whole), "--node-name", "fixture-node"])
    on_whole = discover(HostFS(args.host_root), discovery_config(args), selected_sources(args))
    assert json.dumps(on_whole.to_json(), sort_keys=True) == json.dumps(result.to_json(), sort_keys=True)


def test_whole_recording_reads_nothing_outside_the_cut(whole):
    """Every path discovery touches on the whole recording resolves, in the cut, to the same place
    with the same kind and bytes (or is absent from both) — but one: cpuidle's
    ``current_driver`` (``acpi_idle``; NFD's cstate needs ``intel_idle``, so it yields nothing
    either way: the test above), left out with the rest of the CPU.  Entries of listed
    directories that nobody read through (``subsystem``, ``power``, ``ep_00``, ...) are the only
    other difference, and they are not touched."""
    args = build_parser().parse_args(["discover", "--host-root", str(whole), "--node-name", "fixture-node"])
    host = Recording()
    discover(HostFS(whole, recorder=host), discovery_config(args), selected_sources(args))

    def seen(root: Path, host_path: str):
        real = Path(os.path.realpath(root / host_path.lstrip("/")))
        if not real.exists():
            return None
        place = real.relative_to(root.resolve()).as_posix()
        return (place, "dir") if real.is_dir() else (place, real.read_bytes())

    assert len(host.touched) > 300 and len(host.contents) > 200
    differing = {p: seen(whole, p) for p in host.touched if seen(whole, p) != seen(ROOT, p)}
    assert differing == {"/sys/devices/system/cpu/cpuidle/current_driver": (
        "sys/devices/system/cpu/cpuidle/current_driver", b"acpi_idle\n")}
