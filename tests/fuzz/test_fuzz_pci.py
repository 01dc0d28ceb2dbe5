"""Fuzz the pci source: /sys/bus/pci/devices entries and every attribute file it reads."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from agent.sources import pci
from tests.fuzz.hosttree import attribute_files, fuzz, hex_id, host_tree, merge, rebase, slots, value_bytes
from tests.fuzz.properties import check_source

ADDRESSES = ["0000:00:02.0", "0000:3b:00.0", "0000:3b:00.1", "0000:af:00.7", "10000:01:00.0",
             "weird name", "0000:00:1f.8", "..x", "-", "\u00e9"]
CLASSES = ["0x030000", "0x030200", "0x0b4000", "0x120000", "0x020000", "0x060400", "0x0300", "0x03000000"]
NUMA = ["-1", "0", "1", "3", "007", "-2", "1e3", "", "65536"]
COUNTS = ["0", "8", "64", "-1", "0x10", "", "18446744073709551616000"]

DEVICE_FILES = attribute_files({
    "class": st.sampled_from(CLASSES),
    "vendor": st.one_of(st.sampled_from(["0x10de", "0x8086", "0x1ac1", "0x1AC1"]), hex_id(4, prefixed=True)),
    "device": hex_id(4, prefixed=True),
    "subsystem_vendor": hex_id(4, prefixed=True),
    "subsystem_device": hex_id(4, prefixed=True),
    "sriov_totalvfs": st.sampled_from(COUNTS),
    "sriov_numvfs": st.sampled_from(COUNTS),
    "numa_node": st.sampled_from(NUMA),
    "revision": hex_id(2, prefixed=True),
}, wrong={name: hex_id(n, prefixed=True, wrong=True) for name, n in (
    ("class", 6), ("vendor", 4), ("device", 4), ("subsystem_vendor", 4), ("subsystem_device", 4), ("revision", 2))})
GROUP_TYPE = slots({"type": value_bytes(["DMA", "DMA-FQ", "identity"])})
DMAR_VERSION = slots({"intel-iommu/version": value_bytes(["1:0", "6:0"])})
ENTRY_KINDS = st.sampled_from(["relative"] * 4 + ["absolute", "loop", "gone", "dir", "file"])
EXTRAS = st.lists(st.sampled_from(["driver", "iommu_group", "physfn", "iommu"]), unique=True)
EXTRA_KIND = st.sampled_from(["link", "loop", "dir"])


@st.composite
def pci_device(draw, address: str) -> dict:
    devdir = f"/sys/devices/pci0000:00/{address}"
    spec = rebase(draw(DEVICE_FILES), devdir)
    entry = f"/sys/bus/pci/devices/{address}"
    spec[entry] = {
        "relative": ("link", f"../../../devices/pci0000:00/{address}"),
        "absolute": ("link", devdir),
        "loop": ("link", address),
        "gone": ("link", "../../../devices/gone"),
        "dir": ("dir",),                                 # not a link: read in place (empty)
        "file": ("file", b"0x10de\n"),
    }[draw(ENTRY_KINDS)]
    group = draw(st.sampled_from(["7", "12", "x", "", "\u00b2"]))
    extras = draw(EXTRAS)
    for extra in extras:
        target = {"driver": "../../../bus/pci/drivers/nvidia", "physfn": "../0000:3b:00.0",
                  "iommu_group": f"../../../kernel/iommu_groups/{group}",
                  "iommu": "../../virtual/iommu/dmar0"}[extra]
        spec[f"{devdir}/{extra}"] = {"link": ("link", target), "loop": ("link", extra), "dir": ("dir",)}[draw(EXTRA_KIND)]
    if "iommu_group" in extras:
        spec.update(rebase(draw(GROUP_TYPE), f"/sys/kernel/iommu_groups/{group}"))
    if "iommu" in extras:
        spec.update(rebase(draw(DMAR_VERSION), "/sys/devices/virtual/iommu/dmar0"))
    return spec


@st.composite
def pci_tree(draw) -> dict:
    addresses = draw(st.lists(st.sampled_from(ADDRESSES), min_size=0, max_size=3, unique=True))
    spec = merge(*(draw(pci_device(a)) for a in addresses))
    if not addresses:
        spec.update(draw(st.sampled_from([{}, {"/sys/bus/pci/devices": ("file", b"x")},
                                          {"/sys/bus/pci/devices": ("link", "devices")}])))
    return spec


CONFIGS = st.builds(
    pci.Config,
    device_class_whitelist=st.sampled_from([("03", "0b40", "12"), ("02",), ("0300", "FF"), ()]),
    device_label_fields=st.sampled_from([("class", "vendor"), ("vendor", "device", "subsystem_vendor", "subsystem_device"),
                                      ("nonsense",), ()]),
)


@fuzz(300)
@given(spec=pci_tree(), config=CONFIGS)
def test_pci_source_survives_any_tree(spec, config):
    with host_tree(spec) as root:
        result = check_source("pci", root, config)
    for instance in result.features["device"].instances if "device" in result.features else ():
        attrs = instance.attributes
        # instances only exist for devices whose five IDs were well-formed hex
        assert len(attrs["vendor"]) == 4 and len(attrs["class"]) == 4
        assert int(attrs["vendor"], 16) >= 0
        if "numa_node" in attrs:
            assert attrs["numa_node"].isascii() and attrs["numa_node"].isdigit()
