"""The catalogue on boards and GPUs: the Coral Dev Board under either kernel, and GPUs only
with a compute driver bound.

Device-tree strings: mainline Linux ``arch/arm64/boot/dts/freescale/imx8mq-phanbell.dts``
(``model = "Google i.MX8MQ Phanbell"``, ``compatible = "google,imx8mq-phanbell", "fsl,imx8mq"``)
and Coral's vendor kernel ``fsl-imx8mq-phanbell.dts`` (``"Freescale i.MX8MQ Phanbell"``,
``"fsl,imx8mq-phanbell", "fsl,imx8mq"``), as a real Mendel board's device tree records
(fixtures/sysfs/coral-devboard-vendor-recorded). The Edge TPU label needs the TPU itself (its PCI
function), never the device tree alone (labels/README.md, "Coral Dev Board and its Edge TPU").
"""

from __future__ import annotations

import pytest

from agent import rules
from tests.conftest import LABELS_DIR
from tests.rules.helpers import attrs, flags, instances

CATALOGUE = rules.load_catalogue([str(LABELS_DIR)])
DT = "/sys/firmware/devicetree/base"


def board(compatible: tuple[str, ...], model: str) -> dict:
    return {"devicetree.compatible": flags(*compatible, origin=f"{DT}/compatible"),
            "devicetree.model": attrs(origin=f"{DT}/model", model=model)}


def labels_of(features: dict) -> dict[str, str]:
    return dict(rules.desired_state(features, {}, {}, CATALOGUE).labels)


@pytest.mark.parametrize("compatible, model", [
    (("google,imx8mq-phanbell", "fsl,imx8mq"), "Google i.MX8MQ Phanbell"),     # mainline
    (("fsl,imx8mq-phanbell", "fsl,imx8mq"), "Freescale i.MX8MQ Phanbell"),     # vendor (Mendel)
], ids=["mainline", "vendor"])
def test_coral_dev_board_under_either_kernel(compatible, model):
    labels = labels_of(board(compatible, model))
    assert labels["boards/coral-dev-board"] == "true"
    assert "accelerators/edgetpu" not in labels   # no TPU device seen: nothing a workload could open


# the recorded board's TPU: 0001:01:00.0 1ac1:089a, class 0x0880ff, apex (fixture README)
DEVBOARD_TPU = {"address": "0001:01:00.0", "vendor": "1ac1", "device": "089a", "class": "0880", "driver": "apex"}


@pytest.mark.parametrize("compatible, model", [
    (("google,imx8mq-phanbell", "fsl,imx8mq"), "Google i.MX8MQ Phanbell"),     # mainline with PCIe enabled
    (("fsl,imx8mq-phanbell", "fsl,imx8mq"), "Freescale i.MX8MQ Phanbell"),     # vendor (Mendel)
], ids=["mainline", "vendor"])
def test_dev_board_with_its_pci_tpu_has_one_edge_tpu(compatible, model):
    features = {**board(compatible, model), "pci.device": instances(DEVBOARD_TPU)}
    state = rules.desired_state(features, {}, {}, CATALOGUE)
    assert state.labels["boards/coral-dev-board"] == "true" and state.labels["accelerators/edgetpu"] == "true"
    assert state.extended_resources["node-feature-agent.io/edgetpu"] == "1"


def test_device_tree_labels_on_the_node_do_not_make_an_edge_tpu():
    """k8s-dt-node-labeller's labels (or our own devicetree labels) name the board only."""
    node = {"beta.devicetree.org/fsl-imx8mq-phanbell": "1", "beta.devicetree.org/google-imx8mq-phanbell": "1"}
    state = rules.desired_state({}, {}, node, CATALOGUE)
    assert "accelerators/edgetpu" not in state.labels


@pytest.mark.parametrize("compatible, model", [
    (("fsl,imx8mq-phanbell", "fsl,imx8mq"), "Some Vendor i.MX8MQ Carrier"),    # vendor string reused
    (("fsl,imx8mq-evk", "fsl,imx8mq"), "NXP i.MX8MQ EVK"),                     # same SoC, other board
    (("fsl,imx8mq-phanbell", "fsl,imx8mq"), ""),                               # no usable model
])
def test_other_boards_are_not_coral_dev_boards(compatible, model):
    features = board(compatible, model) if model else {"devicetree.compatible": flags(*compatible)}
    labels = labels_of(features)
    assert "boards/coral-dev-board" not in labels and "accelerators/edgetpu" not in labels


def gpu(vendor: str, device: str, cls: str, driver: str | None, address: str = "0000:01:00.0") -> dict:
    item = {"vendor": vendor, "device": device, "class": cls, "address": address}
    if driver:
        item["driver"] = driver
    return item


@pytest.mark.parametrize("device, label", [
    # pci.ids: 1002:7149 RV515/M52 [Mobility Radeon X1300] (a 2006 laptop part), no driver
    (gpu("1002", "7149", "0300", None), "accelerators/amd-gpu"),
    (gpu("1002", "7149", "0300", "radeon"), "accelerators/amd-gpu"),            # display only, no ROCm
    (gpu("10de", "1c82", "0300", "nouveau"), "accelerators/nvidia-gpu"),       # GP107, no CUDA
    (gpu("10de", "20b0", "0302", "vfio-pci"), "accelerators/nvidia-gpu"),      # A100 passed to a VM
])
def test_display_adapters_without_a_compute_driver_are_not_gpus(device, label):
    labels = labels_of({"pci.device": instances(device)})
    assert label not in labels and "accelerators/gpu" not in labels


@pytest.mark.parametrize("device, label", [
    (gpu("1002", "740f", "0380", "amdgpu"), "accelerators/amd-gpu"),           # Instinct MI210
    (gpu("10de", "20b0", "0302", "nvidia"), "accelerators/nvidia-gpu"),        # A100
])
def test_gpus_with_their_compute_driver(device, label):
    labels = labels_of({"pci.device": instances(device)})
    assert labels[label] == "true" and labels["accelerators/gpu"] == "true"


def test_gpu_count_counts_only_driven_devices():
    labels = labels_of({"pci.device": instances(gpu("10de", "20b0", "0302", "nvidia", "0000:03:00.0"),
                                                gpu("10de", "20b0", "0302", "vfio-pci", "0000:05:00.0"))})
    assert labels["accelerators/nvidia-gpu.count"] == "1"
