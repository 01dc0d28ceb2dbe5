"""Intel's current NodeFeatureRule (``tests/data/intel``, 03a0a5b1) as a cluster object named as
the shipped file (``intel-dp-devices``): the object overrides the file, so a cluster admin
updates Intel's rules without rebuilding the image.

Expected labels come from Intel's rule file and each recorded host's PCI devices and modules:
``intel.gpu`` is vendor 8086, class 0300/0380, with i915 (or xe) loaded; the server's DSA 0b25,
IAA 0cfe, QAT 4940 (class 0b40) and SGX; ``intel.npu`` (new in that file) is vendor 8086, class
1200, one of seven device ids, with ``intel_vpu`` loaded. No recorded host has an NPU, so a copy
of the Intel server gets one (8086:7d1d, class 0x120000, and the module), end to end.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from agent.discovery import DiscoveryConfig, discover
from agent.hostfs import HostFS
from agent.rules import RuleOptions, derive, load_catalogue
from agent.rules.cluster_rules import parse_rule_object, with_cluster_rules
from tests.conftest import FIXTURES, LABELS_DIR, REPO
from tests.support.recorded_tools import recorded_tool

CURRENT = yaml.safe_load((Path(__file__).resolve().parents[1] / "data" / "intel" / "node-feature-rules.yaml").read_text())
GPU = {"intel.feature.node.kubernetes.io/gpu": "true"}
SERVER = {**GPU, **{f"intel.feature.node.kubernetes.io/{n}": "true" for n in ("dsa", "iaa", "qat", "sgx")}}
#: every recorded host with a device Intel's rules name, and what they give it
HOSTS = {"coral-pcie": GPU, "coral-usb": GPU, "coral-usb-boot": GPU, "edge-ai": GPU, "homelab": GPU, "homelab-replugged": GPU, "intel-server": SERVER}
NPU = "intel.feature.node.kubernetes.io/npu"


def intel_labels(host_root: Path, *, with_object: bool) -> dict[str, str]:
    files = load_catalogue([str(LABELS_DIR)], RuleOptions())
    catalogue = files
    if with_object:
        rule_set, problems = parse_rule_object(CURRENT)
        assert rule_set is not None and not problems, problems
        catalogue = with_cluster_rules(files, [rule_set])
        assert [r.origin for r in catalogue.rule_sets if r.name == "intel-dp-devices"] == \
            ["NodeFeatureRule/intel-dp-devices:metadata.name"]
    found = discover(HostFS(str(host_root)), DiscoveryConfig(node_name="n"))
    state = derive(found.features, found.labels, {}, catalogue, RuleOptions()).state
    return {k: v for k, v in state.labels.items() if k.startswith("intel.")}


def test_the_recorded_hosts_with_intel_devices_are_exactly_these(tmp_path: Path) -> None:
    """So the per-host cases below cover every one (a host added later gets a case): the
    recorded trees of fixtures/sysfs and the umockdev recordings of fixtures/recorded (USB
    devices behind Intel USB controllers, none a device Intel's rules name)."""
    found = {host.name for host in sorted((FIXTURES).iterdir()) if host.is_dir()
             and intel_labels(host, with_object=False)}
    assert found == set(HOSTS)
    builder = recorded_tool("umockdev_tree")
    for recording in sorted((REPO / "fixtures" / "recorded" / "umockdev").glob("*.umockdev")):
        root = tmp_path / recording.stem
        builder.build(recording.read_text(), root)
        assert intel_labels(root, with_object=True) == {}, recording.name


@pytest.mark.parametrize("host", sorted(HOSTS))
def test_the_current_object_overrides_the_shipped_file_on_each_host(host: str) -> None:
    assert intel_labels(FIXTURES / host, with_object=False) == HOSTS[host]
    assert intel_labels(FIXTURES / host, with_object=True) == HOSTS[host]


def add_npu(tmp_path: Path) -> Path:
    root = Path(shutil.copytree(FIXTURES / "intel-server", tmp_path / "host", symlinks=True))
    device = root / "sys" / "devices" / "pci0000:00" / "0000:00:0b.0"
    device.mkdir(parents=True)
    for name, value in {"vendor": "0x8086", "device": "0x7d1d", "class": "0x120000",
                        "subsystem_vendor": "0x8086", "subsystem_device": "0x0000"}.items():
        (device / name).write_text(value + "\n")
    (root / "sys" / "bus" / "pci" / "devices" / "0000:00:0b.0").symlink_to("../../../devices/pci0000:00/0000:00:0b.0")
    with (root / "proc" / "modules").open("a") as modules:
        modules.write("intel_vpu 131072 0 - Live 0x0000000000000000\n")
    return root


def test_the_npu_rule_only_the_current_object_has_labels_an_npu_host(tmp_path: Path) -> None:
    root = add_npu(tmp_path)
    assert NPU not in intel_labels(root, with_object=False)  # the shipped file has no NPU rule
    assert intel_labels(root, with_object=True) == {**SERVER, NPU: "true"}
