"""Fuzz the network and storage sources: /sys/class/net/* and /sys/block/*/queue attributes."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz.hosttree import attribute_files, fuzz, host_tree, merge, rebase
from tests.fuzz.properties import check_source

IFACES = ["eth0", "ens1f0", "lo", "bond0", "bonding_masters", "x y", "\u00e9"]
COUNTS = ["0", "8", "64", "-1", "0x10", "", "\u00b2", "99999999999999999999"]
NET_FILES = attribute_files({
    "operstate": st.sampled_from(["up", "down", "unknown"]), "speed": st.sampled_from(["10000", "-1", "1000"]),
    "mtu": st.sampled_from(["1500", "9000", "65536"]),
})
SRIOV_FILES = attribute_files({"sriov_numvfs": st.sampled_from(COUNTS), "sriov_totalvfs": st.sampled_from(COUNTS)})
DEVICE_KIND = st.sampled_from(["pci", "pci", "usb", "none", "loop", "gone", "file"])
ENTRY_KIND = st.sampled_from(["link", "link", "link", "dir", "loop", "gone", "file"])


@st.composite
def net_tree(draw) -> dict:
    spec: dict = {}
    for iface in draw(st.lists(st.sampled_from(IFACES), unique=True, max_size=3)):
        pci = draw(st.sampled_from(["0000:3b:00.0", "0000:3b:00.1", "bogus"]))
        ifdir = f"/sys/devices/pci0000:00/{pci}/net/{iface}"
        kind = draw(ENTRY_KIND)
        entry = f"/sys/class/net/{iface}"
        if kind == "dir":
            ifdir = entry
        else:
            spec[entry] = {"link": ("link", f"../../devices/pci0000:00/{pci}/net/{iface}"), "loop": ("link", iface),
                           "gone": ("link", "../../devices/gone"), "file": ("file", b"x")}[kind]
        spec.update(rebase(draw(NET_FILES), ifdir))
        device = draw(DEVICE_KIND)
        if device == "pci":
            spec[f"{ifdir}/device"] = ("link", "../../../" + pci)
            spec.update(rebase(draw(SRIOV_FILES), f"/sys/devices/pci0000:00/{pci}"))
            if draw(st.booleans()):
                spec[f"/sys/devices/pci0000:00/{pci}/driver"] = ("link", "../../../bus/pci/drivers/ice")
        elif device != "none":
            spec[f"{ifdir}/device"] = {"usb": ("link", "../../../1-1:1.0"), "loop": ("link", "device"),
                                       "gone": ("link", "../../../gone"), "file": ("file", b"")}[device]
    return spec


@fuzz(300)
@given(spec=net_tree())
def test_network_source_survives_any_tree(spec):
    with host_tree(spec) as root:
        check_source("network", root)


BLOCK_FILES = attribute_files({
    "rotational": st.sampled_from(["0", "1", "2", ""]), "dax": st.sampled_from(["0", "1"]),
    "nr_zones": st.sampled_from(["0", "128"]), "zoned": st.sampled_from(["none", "host-managed"]),
})
DISKS = ["nvme0n1", "sda", "zram0", "loop0", "x y", "\u00e9"]


@st.composite
def block_tree(draw) -> dict:
    spec: dict = {}
    for disk in draw(st.lists(st.sampled_from(DISKS), unique=True, max_size=3)):
        devdir = f"/sys/devices/virtual/block/{disk}"
        kind = draw(ENTRY_KIND)
        entry = f"/sys/block/{disk}"
        if kind == "dir":
            devdir = entry
        else:
            spec[entry] = {"link": ("link", f"../devices/virtual/block/{disk}"), "loop": ("link", disk),
                           "gone": ("link", "../devices/gone"), "file": ("file", b"x")}[kind]
        queue = draw(st.sampled_from(["dir", "dir", "dir", "file", "loop"]))
        if queue == "dir":
            spec.update(rebase(draw(BLOCK_FILES), f"{devdir}/queue"))
        else:
            spec[f"{devdir}/queue"] = ("file", b"0") if queue == "file" else ("link", "queue")
    return merge(spec, draw(st.sampled_from([{}, {}, {"/sys/block": ("file", b"")}])) if not spec else {})


@fuzz(300)
@given(spec=block_tree())
def test_storage_source_survives_any_tree(spec):
    with host_tree(spec) as root:
        result = check_source("storage", root)
    if result.labels:
        assert result.labels == {"feature.node.kubernetes.io/storage-nonrotationaldisk": "true"}
