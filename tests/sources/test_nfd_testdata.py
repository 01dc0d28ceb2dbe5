"""NFD's own test data replayed through our sources, checked against NFD's own test values.

The trees under ``fixtures/nfd-testdata/`` are copied unchanged from
kubernetes-sigs/node-feature-discovery (commit and paths in its README); every expected
value below is copied from the NFD test named beside it, not from our output.
"""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agent.features import NFD_PREFIX
from agent.hostfs import HostFS
from agent.sources import local, memory, pci
from tests.conftest import REPO

NFD = REPO / "fixtures" / "nfd-testdata"


# -- source/local/local_test.go TestGetExpirationDate ------------------------------------------
def local_result():
    root = NFD / "source/local/testdata"
    return local.discover(HostFS(root), local.Config(features_dir="/features.d"),
                          now=datetime.now(UTC))


def test_local_counts_as_nfd():
    """``expectedFeaturesLen := 7``, ``expectedLabelsLen := 8``."""
    result = local_result()
    assert len(result.features["feature"].attributes) == 7
    assert len(result.features["label"].attributes) == 8
    assert len(result.labels) == 8


def test_local_keys_as_nfd_logic_gives_by_hand():
    """The sets behind NFD's counts (README: NFD's parseFeatureFile applied by hand)."""
    result = local_result()
    assert dict(result.features["feature"].attributes) == {
        "featureKeyValid": "featureValue", "featureKeyRandomComment": "featureValue", "my-feature": "value",
        "foo": "baz", "featureKey2": "featureValue2", "featureKey3": "featureValue3",
        "featureKeyUnparsable": "featureValue"}
    assert result.labels == {NFD_PREFIX + k: v for k, v in {
        "featureKeyValid": "featureValue", "featureKeyRandomComment": "featureValue", "label-only": "value",
        "label-only-2": "value", "my-feature": "value", "featureKey2": "featureValue2",
        "featureKey3": "featureValue3", "featureKeyUnparsable": "featureValue"}.items()}
    # the three problems NFD logs too: big_file over the limit, the unparsable expiry directive
    messages = sorted((e.path.rsplit("/", 1)[-1], e.message.split(":")[0]) for e in result.errors)
    assert messages == [("big_file", "larger than 65536 bytes; file skipped"),
                        ("unparsable_expiry_comment:1", "bad expiry-time directive")]


# -- source/memory/memory_test.go ---------------------------------------------------------------
def sys_root(tmp_path: Path, sysfs: Path | None) -> Path:
    """A host root whose /sys is ``sysfs`` (NFD points ``hostpath.SysfsDir`` at it)."""
    (tmp_path / "proc").mkdir()
    if sysfs is not None:
        shutil.copytree(sysfs, tmp_path / "sys")
    return tmp_path


def test_hugepages_as_nfd(tmp_path):
    """TestDetectHugePages "With configured 1Gi huge pages size"."""
    root = sys_root(tmp_path, NFD / "source/memory/testdata/hugepages")
    result = memory.discover(HostFS(root))
    assert dict(result.features["hugepages"].attributes) == {
        "enabled": "true", "hugepages-1Gi": "2", "hugepages-2Mi": "0"}


def test_no_hugepages_directory_is_enabled_false(tmp_path):
    """TestDetectHugePages "With invalid directory structure"."""
    result = memory.discover(HostFS(sys_root(tmp_path, None)))
    assert dict(result.features["hugepages"].attributes) == {"enabled": "false"}


@pytest.mark.parametrize("name, lines, swap", [("swap", 2, True), ("noswap", 1, False)])
def test_swaps_as_nfd(tmp_path, name, lines, swap):
    """TestGetNumberofLinesFromFile (2 and 1 lines); NFD labels swap when lines > 1."""
    text = (NFD / "source/memory/testdata" / name).read_text()
    assert memory.count_nonempty_lines(text) == lines
    root = sys_root(tmp_path, None)
    (root / "proc/swaps").write_text(text)
    result = memory.discover(HostFS(root))
    assert result.features["swap"].attributes["enabled"] == str(swap).lower()
    assert (NFD_PREFIX + "memory-swap" in result.labels) is swap


# -- source/pci/pci_test.go TestPciSource --------------------------------------------------------
#: expectedFeatures["rootfs-1"]: NFD's attributes of each instance
NFD_PCI_INSTANCES = [
    {"class": "0880", "device": "2021", "subsystem_device": "35cf", "subsystem_vendor": "8086", "vendor": "8086"},
    {"class": "ff00", "device": "a1ed", "subsystem_device": "35cf", "subsystem_vendor": "8086", "vendor": "8086"},
    {"class": "0106", "device": "a1d2", "subsystem_device": "35cf", "subsystem_vendor": "8086", "vendor": "8086"},
    {"class": "1180", "device": "a1b1", "subsystem_device": "35cf", "subsystem_vendor": "8086", "vendor": "8086"},
    {"class": "0780", "device": "a1ba", "subsystem_device": "35cf", "subsystem_vendor": "8086", "vendor": "8086"},
    {"class": "0604", "device": "a193", "subsystem_device": "35cf", "subsystem_vendor": "8086", "vendor": "8086"},
    {"class": "0c80", "device": "a1a4", "subsystem_device": "35cf", "subsystem_vendor": "8086", "vendor": "8086"},
    {"class": "0300", "device": "2000", "subsystem_device": "2000", "subsystem_vendor": "1a03", "vendor": "1a03"},
    {"class": "0b40", "device": "37c8", "iommu/intel-iommu/version": "1:0", "iommu_group/type": "identity",
     "sriov_totalvfs": "16", "subsystem_device": "35cf", "subsystem_vendor": "8086", "vendor": "8086"},
    {"class": "0200", "device": "37d2", "sriov_totalvfs": "32", "subsystem_device": "35cf", "subsystem_vendor": "8086",
     "vendor": "8086"},
]
NFD_PCI_KEYS = {"class", "vendor", "device", "subsystem_vendor", "subsystem_device", "sriov_totalvfs",
                "iommu_group/type", "iommu/intel-iommu/version"}


def pci_result(**config):
    return pci.discover(HostFS(NFD / "testdata/source/pci/rootfs-1"), pci.Config(**config))


def test_pci_instances_as_nfd():
    result = pci_result()
    ours = [{k: v for k, v in i.attributes.items() if k in NFD_PCI_KEYS} for i in result.features["device"].instances]
    key = lambda attrs: sorted(attrs.items())  # noqa: E731
    assert sorted(ours, key=key) == sorted(NFD_PCI_INSTANCES, key=key)


@pytest.mark.parametrize("config, labels", [
    ({}, {"0300_1a03.present", "0b40_8086.present", "0b40_8086.sriov.capable"}),
    ({"device_class_whitelist": ("0c",), "device_label_fields": ()}, {"0c80_8086.present"}),
    ({"device_class_whitelist": ("0c",), "device_label_fields": ("foo", "bar")}, {"0c80_8086.present"}),
    ({"device_class_whitelist": ("0c",), "device_label_fields": ("foo", "class")}, {"0c80.present"}),
], ids=["default", "empty-fields", "only-invalid-fields", "some-invalid-fields"])
def test_pci_labels_as_nfd(config, labels):
    result = pci_result(**config)
    assert result.labels == {NFD_PREFIX + "pci-" + k: "true" for k in labels}
