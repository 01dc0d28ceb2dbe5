"""The opt-in driver label presets (deploy/optional-rules/driver-labels.yaml) against every
recorded and constructed host in fixtures/sysfs.

Expected labels come from the hosts' READMEs (nvidia-8gpu and dgx-usb-lab: eight A100s,
10de:20b0, class 0302; edge-ai: a Hailo-8, 1e60:2864) and the labels from the vendors' charts
and README cited in the rule file (NVIDIA k8s-device-plugin and k8s-dra-driver-gpu values.yaml
affinity; gllm-dev/hailo-device-plugin README)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from agent import rules
from agent.cli import main
from agent.discovery import discover
from agent.hostfs import HostFS
from tests.conftest import FIXTURES, LABELS_DIR, REPO

OPTIONAL = REPO / "deploy" / "optional-rules"
CATALOGUE = rules.load_catalogue([str(LABELS_DIR), str(OPTIONAL)])
NVIDIA = {"feature.node.kubernetes.io/pci-10de.present": "true", "nvidia.com/gpu.present": "true"}
HAILO = {"hailo.ai/device": "present"}
EXPECTED = {"nvidia-8gpu": NVIDIA, "dgx-usb-lab": NVIDIA, "edge-ai": HAILO}
HOSTS = sorted(p.name for p in FIXTURES.iterdir() if (p / "proc").is_dir())


@pytest.mark.parametrize("case", HOSTS)
def test_driver_labels_only_where_the_device_is(case):
    found = discover(HostFS(FIXTURES / case))
    state = rules.desired_state(found.features, found.labels, {}, CATALOGUE)
    got = {k: v for k, v in state.labels.items() if k in NVIDIA or k in HAILO}
    assert got == EXPECTED.get(case, {})


def test_the_presets_cover_every_case_they_name():
    assert set(EXPECTED) <= set(HOSTS)


def test_a_hailo_10h_gets_the_hailo_label_and_is_not_counted_as_a_hailo_8(tmp_path):
    """The edge-ai host with its Hailo module's device ID changed to the Hailo-10H's, 0x45C4
    (hailo-ai/hailort-drivers v5.3.0 common/pcie_common.h:44, PCI_DEVICE_ID_HAILO_HAILO10H);
    gllm-dev/hailo-device-plugin serves the Hailo-10H by default (its README, "Supported
    Devices"). The hailo_pci driver of the Hailo-8 family binds only 0x2864 (branch hailo8,
    linux/pcie/src/pcie.c:1453), so the device is no ``hailo8``."""
    root = Path(shutil.copytree(FIXTURES / "edge-ai", tmp_path / "host", symlinks=True))
    function = root / "sys/bus/pci/devices/0000:04:00.0"
    for name in ("device", "subsystem_device"):
        (function / name).write_text("0x45c4\n")
    labels = {}
    for host in (FIXTURES / "edge-ai", root):
        found = discover(HostFS(host))
        labels[host] = rules.desired_state(found.features, found.labels, {}, CATALOGUE).labels
    assert {k: v for k, v in labels[root].items() if k in HAILO} == HAILO
    assert "accelerators/hailo8" in labels[FIXTURES / "edge-ai"] and "accelerators/hailo8" not in labels[root]


def test_explain_says_why_a_node_lacks_each_driver_label(capsys):
    args = ["explain", "--host-root", str(FIXTURES / "edge-ai"), "--rules", str(LABELS_DIR), "--rules", str(OPTIONAL)]
    assert main([*args, "nvidia.com/gpu.present", "feature.node.kubernetes.io/pci-10de.present"]) == 0
    text = capsys.readouterr().out
    for label in ("nvidia.com/gpu.present", "feature.node.kubernetes.io/pci-10de.present"):
        assert f"{label}: not produced\n  rule 70-driver-labels/nvidia gpu driver labels" in text
    assert "vendor In [10de] fails for 20 of 20 instance(s)" in text
    assert main(["explain", "--host-root", str(FIXTURES / "nvidia-8gpu"), "--rules", str(LABELS_DIR), "--rules",
          str(OPTIONAL), "hailo.ai/device"]) == 0
    text = capsys.readouterr().out
    assert "hailo.ai/device: not produced\n  rule 70-driver-labels/hailo device plugin label" in text
    assert "vendor In [1e60] fails for 400 of 400 instance(s)" in text
