"""The opt-in driver label presets (deploy/optional-rules/driver-labels.yaml) against every
recorded and constructed host in fixtures/sysfs.

Expected labels come from the hosts' READMEs (nvidia-8gpu and dgx-usb-lab: eight A100s,
10de:20b0, class 0302; edge-ai: a Hailo-8, 1e60:2864) and the labels from the vendors' charts
and README cited in the rule file (NVIDIA k8s-device-plugin and k8s-dra-driver-gpu values.yaml
affinity; gllm-dev/hailo-device-plugin README)."""

from __future__ import annotations

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
