"""``plan --device-plugin on``: the preview of what ``run --device-plugin=on`` serves."""

from __future__ import annotations

import json

from agent.cli import main
from tests.conftest import FIXTURES


def plan(capsys, case, *extra):
    assert main(["plan", "--host-root", str(FIXTURES / case), *extra]) == 0
    return capsys.readouterr().out


def test_preview_moves_served_resources_to_kubelet_and_lists_devices(capsys):
    body = json.loads(plan(capsys, "edge-ai", "--device-plugin", "on"))
    assert "node-feature-agent.io/edgetpu" not in body["extended_resources"]
    assert body["devices"]["node-feature-agent.io/hailo8"] == [
        {"id": "pci-0000:04:00.0", "health": "Healthy", "nodes": ["/dev/hailo0"], "basis": "its PCI address"}]
    assert [d["nodes"] for d in body["devices"]["node-feature-agent.io/edgetpu"]] == [["/dev/apex_0"],
                                                                                     ["/dev/bus/usb/002/002"]]
    off = json.loads(plan(capsys, "edge-ai"))
    assert off["extended_resources"]["node-feature-agent.io/edgetpu"] == "2" and "devices" not in off


def test_preview_table_says_why_a_device_is_not_allocatable(capsys):
    text = plan(capsys, "coral-usb-boot", "--device-plugin", "on", "--format", "table")
    assert "usb-0000:00:14.0-1-2  Unhealthy  /dev/bus/usb/001/003   (Coral USB Accelerator still in its boot" in text
