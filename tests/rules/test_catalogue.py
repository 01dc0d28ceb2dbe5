"""The shipped catalogue (labels/) against the recorded hosts, and Intel's vendor rules unchanged."""

from __future__ import annotations

import hashlib

import pytest

from agent import rules
from agent.discovery import discover
from agent.hostfs import HostFS
from agent.k8s_validation import label_value_errors, qualified_name_errors
from tests.conftest import FIXTURES, LABELS_DIR, REPO
from tests.rules.helpers import instances

CATALOGUE = rules.load_catalogue([str(LABELS_DIR)])
INTEL = "intel.feature.node.kubernetes.io/"


def plan_fixture(case, node=None, catalogue=CATALOGUE):
    found = discover(HostFS(FIXTURES / case))
    return rules.derive(found.features, found.labels, node or {}, catalogue, label_origins=found.label_origins)


def test_shipped_catalogue_is_clean():
    assert CATALOGUE.problems == () and CATALOGUE.warnings == ()
    assert len(list(CATALOGUE.rules())) >= 15


#: sha256 of deployments/nfd/overlays/node-feature-rules/node-feature-rules.yaml in
#: intel/intel-device-plugins-for-kubernetes at 05bb8ef15605f57429ac658a75c72a0276832ca4
#: (2024-05-02), as ``git show <commit>:<path> | sha256sum`` prints it
INTEL_PUBLISHED_SHA256 = "f3b8e32f968f6d3846770713edbe21c5e7f8a19a69445db69281a7e9fef1ec87"


def test_intel_vendor_file_is_the_published_file_unchanged():
    """Our copy is Intel's published file byte for byte below its three-line header."""
    text = (LABELS_DIR / "vendor/intel-device-plugins.node-feature-rules.yaml").read_bytes()
    header, body = text.split(b"\n", 3)[:3], text.split(b"\n", 3)[3]
    assert all(line.startswith(b"#") for line in header)
    assert hashlib.sha256(body).hexdigest() == INTEL_PUBLISHED_SHA256


def test_intel_vendor_rules_on_the_intel_server():
    intel_only = rules.load_catalogue([str(LABELS_DIR / "vendor")])
    assert intel_only.problems == ()
    state = plan_fixture("intel-server", catalogue=intel_only).state
    produced = {k: v for k, v in state.labels.items() if k.startswith(INTEL)}
    # fixture README: QAT 4940 + intel_qat + vfio_pci, DSA 0b25 / IAA 0cfe + idxd, Flex 170 + i915, SGX; no DLB, no FPGA
    assert produced == {INTEL + n: "true" for n in ("qat", "dsa", "iaa", "gpu", "sgx")}
    assert state.extended_resources == {"sgx.intel.com/epc": "137170518016"}
    assert state.provenance["sgx.intel.com/epc"].host_path  # the EPC size is traced to a host file
    assert state.problems == ()


@pytest.mark.parametrize("case", ["coral-usb-boot", "coral-usb", "coral-pcie", "coral-devboard",
                                  "coral-devboard-vendor-recorded"])
def test_every_coral_form_yields_edgetpu_and_a_device_count(case):
    state = plan_fixture(case).state
    assert state.labels["accelerators/edgetpu"] == "true"
    assert state.extended_resources["node-feature-agent.io/edgetpu"] == "1"


def test_coral_dev_board_on_a_mainline_kernel_is_a_board_without_a_usable_edge_tpu():
    """Mainline imx8mq-phanbell.dts: root compatible "google,imx8mq-phanbell" and both PCIe
    controllers disabled, so no PCI device exists and nothing could open the TPU: the board label
    comes from the device tree, the Edge TPU label and count do not (labels/README.md)."""
    state = plan_fixture("coral-devboard-mainline").state
    assert state.labels["boards/coral-dev-board"] == "true"
    assert state.provenance["boards/coral-dev-board"].feature_instance == "devicetree.compatible.google,imx8mq-phanbell"
    assert state.provenance["boards/coral-dev-board"].host_path == "/sys/firmware/devicetree/base/compatible"
    assert "accelerators/edgetpu" not in state.labels
    assert "node-feature-agent.io/edgetpu" not in state.extended_resources
    assert not any(k.startswith(("boards/raspberry-pi", "boards/nvidia")) for k in state.labels)
    assert state.problems == ()


def test_coral_dev_board_on_its_vendor_kernel_counts_the_recorded_pci_tpu_once():
    """The recorded Mendel board (fixture README): the Edge TPU is the PCI function 0001:01:00.0
    (1ac1:089a, apex), the board is known by "fsl,imx8mq-phanbell" with the Phanbell model."""
    state = plan_fixture("coral-devboard-vendor-recorded").state
    assert state.labels["boards/coral-dev-board"] == "true"
    assert state.labels["accelerators/edgetpu"] == "true"
    assert state.extended_resources["node-feature-agent.io/edgetpu"] == "1"
    assert state.provenance["accelerators/edgetpu"].feature_instance.startswith("pci.device[address=0001:01:00.0")
    assert state.problems == ()


def test_coral_pcie_outside_nfd_class_whitelist_still_matches_by_raw_device():
    found = discover(HostFS(FIXTURES / "coral-pcie"))
    assert "feature.node.kubernetes.io/pci-0880_1ac1.present" not in found.labels
    state = plan_fixture("coral-pcie").state
    assert state.provenance["accelerators/edgetpu"].feature_instance.startswith("pci.device[address=0000:01:00.0")


@pytest.mark.parametrize("case,expected,absent", [
    ("coral-devboard", {"boards/coral-dev-board": "true"}, ["boards/raspberry-pi"]),
    ("raspberry-pi-4", {"boards/raspberry-pi": "true", "boards/raspberry-pi-model": "4-model-b"}, ["accelerators/edgetpu", "boards/nvidia-jetson"]),
    ("jetson-nano", {"boards/nvidia-jetson": "true", "boards/nvidia-tegra-soc": "tegra210"}, ["boards/raspberry-pi"]),
    # mainline device trees (fixtures/recorded/make_dt_boards.py; each README names the DTS)
    ("raspberry-pi-4-recorded", {"boards/raspberry-pi": "true", "boards/raspberry-pi-model": "4-model-b"},
     ["accelerators/edgetpu", "boards/nvidia-jetson", "boards/coral-dev-board"]),
    ("jetson-nano-mainline", {"boards/nvidia-jetson": "true", "boards/nvidia-tegra-soc": "tegra210"},
     ["boards/raspberry-pi", "boards/coral-dev-board", "accelerators/edgetpu"]),
    ("coral-devboard-mainline", {"boards/coral-dev-board": "true"},
     ["boards/raspberry-pi", "boards/nvidia-jetson", "accelerators/edgetpu"]),
    # recorded boards (fixtures/recorded/make_dt_boards.py; each README names the recording)
    ("coral-devboard-vendor-recorded", {"boards/coral-dev-board": "true", "accelerators/edgetpu": "true"},
     ["boards/raspberry-pi", "boards/nvidia-jetson"]),
    ("jetson-nano-l4t-recorded", {"boards/nvidia-jetson": "true", "boards/nvidia-tegra-soc": "tegra210"},
     ["boards/raspberry-pi", "boards/coral-dev-board", "accelerators/edgetpu"]),
    ("nvidia-8gpu", {"accelerators/nvidia-gpu": "true", "accelerators/gpu": "true", "accelerators/nvidia-gpu.count": "8"}, ["accelerators/amd-gpu"]),
    ("amd-gpu", {"accelerators/amd-gpu": "true", "accelerators/gpu": "true", "accelerators/amd-gpu.count": "2"}, ["accelerators/nvidia-gpu"]),
    ("intel-server", {INTEL + "qat": "true", INTEL + "sgx": "true"}, ["accelerators/edgetpu", "accelerators/gpu"]),
    ("minimal", {}, ["accelerators/edgetpu", "accelerators/gpu", "boards/raspberry-pi"]),
    # a real 2006 laptop (systemd's recording): its ATI Mobility FireGL V5250 (1002:71d4) has no
    # driver bound, so it is a display adapter, not a GPU accelerator (fixture README)
    ("thinkpad-t60p-recorded", {}, ["accelerators/gpu", "accelerators/amd-gpu", "accelerators/edgetpu",
                                    "boards/raspberry-pi", "boards/nvidia-jetson", "boards/coral-dev-board"]),
])
def test_catalogue_entries_on_fixtures(case, expected, absent):
    state = plan_fixture(case).state
    for key, value in expected.items():
        assert state.labels.get(key) == value, key
    for key in absent:
        assert key not in state.labels
    assert state.problems == ()
    for key, value in state.labels.items():
        assert not qualified_name_errors(key) and not label_value_errors(value)


def test_edgetpu_label_file_keeps_device_plugin_setups_working():
    state = plan_fixture("minimal", node={"kkohtaka.org/edgetpu": "1"}).state
    assert state.labels["accelerators/edgetpu"] == "true"
    assert state.provenance["accelerators/edgetpu"].rule.startswith("label file")
    assert "node-feature-agent.io/edgetpu" not in state.extended_resources  # no device seen: no count


@pytest.mark.parametrize("usb,key,resource", [
    ({"vendor": "03e7", "device": "2485", "class": "00", "sysfs_name": "1-1"}, "accelerators/ncs2", "node-feature-agent.io/ncs2"),
    ({"vendor": "03e7", "device": "f63b", "class": "ff", "sysfs_name": "1-1"}, "accelerators/ncs2", "node-feature-agent.io/ncs2"),
])
def test_ncs2_without_a_recorded_fixture(usb, key, resource):
    """No fixture records an NCS2; the ids come from OpenVINO's udev rules (README)."""
    features = {"usb.device": instances(usb, dict(usb, sysfs_name="2-1"), origin="/sys/bus/usb/devices")}
    state = rules.desired_state(features, {}, {}, CATALOGUE)
    assert state.labels[key] == "true" and state.extended_resources[resource] == "2"


def test_hailo8_without_a_recorded_fixture():
    features = {"pci.device": instances({"vendor": "1e60", "device": "2864", "class": "1200", "address": "0000:02:00.0"})}
    state = rules.desired_state(features, {}, {}, CATALOGUE)
    assert state.labels["accelerators/hailo8"] == "true" and state.extended_resources["node-feature-agent.io/hailo8"] == "1"


def test_optional_taint_rules_load_after_the_catalogue():
    catalogue = rules.load_catalogue([str(LABELS_DIR), str(REPO / "deploy/optional-rules")])
    assert catalogue.problems == ()
    state = plan_fixture("coral-usb", node={"kubernetes.io/arch": "amd64"}, catalogue=catalogue).state
    assert sorted(t.to_string() for t in state.taints) == ["node-feature-agent.io/arch=amd64:NoSchedule", "node-feature-agent.io/edgetpu:NoSchedule"]
    assert plan_fixture("coral-usb").state.taints == ()  # not loaded by default
