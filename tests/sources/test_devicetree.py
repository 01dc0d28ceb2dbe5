"""devicetree source: board compatibles as beta.devicetree.org/ labels (k8s-dt-node-labeller
form), model, extra nodes, and hostile property contents."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.discovery import DiscoveryConfig, run_source
from agent.hostfs import HostFS
from agent.k8s_validation import label_value_errors, qualified_name_errors
from agent.sources import devicetree
from agent.sources.devicetree import split_string_list
from tests.support.hostfiles import put

BASE = "/sys/firmware/devicetree/base"
B = "beta.devicetree.org/"


def board(root: Path, compatible: bytes, model: bytes | None = None, base: str = BASE) -> None:
    put(root, f"{base}/compatible", compatible)
    put(root, f"{base}/name", b"\0")
    put(root, f"{base}/#address-cells", b"\0\0\0\2")
    if model is not None:
        put(root, f"{base}/model", model)
    if base == BASE:  # real hosts: /proc/device-tree -> /sys/firmware/devicetree/base (absolute)
        (root / "proc").mkdir(exist_ok=True)
        os.symlink(BASE, root / "proc/device-tree")


def run(root: Path, **config):
    return devicetree.discover(HostFS(root), devicetree.Config(**config))


def test_coral_dev_board(tmp_path):
    board(tmp_path, b"fsl,imx8mq-phanbell\0fsl,imx8mq\0", b"Freescale i.MX8MQ Phanbell\0")
    result = run(tmp_path)
    assert result.errors == ()
    assert result.labels == {B + "fsl-imx8mq-phanbell": "1", B + "fsl-imx8mq": "1"}
    assert result.features["compatible"].flags == {"fsl,imx8mq-phanbell", "fsl,imx8mq"}
    assert dict(result.features["model"].attributes) == {"model": "Freescale i.MX8MQ Phanbell"}
    assert result.label_origins[B + "fsl-imx8mq-phanbell"] == f"{BASE}/compatible"
    assert set(result.features) == {"compatible", "model"}


def test_raspberry_pi_4_with_serial_number(tmp_path):
    board(tmp_path, b"raspberrypi,4-model-b\0brcm,bcm2711\0", b"Raspberry Pi 4 Model B Rev 1.4\0")
    put(tmp_path, f"{BASE}/serial-number", b"10000000a3b4c5d6\0")
    result = run(tmp_path)
    assert result.labels == {B + "raspberrypi-4-model-b": "1", B + "brcm-bcm2711": "1"}
    model = result.features["model"]
    assert dict(model.attributes) == {"model": "Raspberry Pi 4 Model B Rev 1.4", "serial-number": "10000000a3b4c5d6"}
    assert model.origin_of("serial-number") == f"{BASE}/serial-number"


#: an L4T Jetson Nano's root compatible, as recorded (fixtures/sysfs/jetson-nano-l4t-recorded/README.md);
#: the first string has a "+", which no label key may contain
L4T_NANO = b"nvidia,p3449-0000-b00+p3448-0000-b00\0nvidia,jetson-nano\0nvidia,tegra210\0"
PLUS_STRING_ERROR = ("compatible 'nvidia,p3449-0000-b00+p3448-0000-b00' cannot be a label key")


def test_only_proc_device_tree(tmp_path):
    """Some hosts/containers expose only /proc/device-tree as a directory."""
    board(tmp_path, L4T_NANO, base="/proc/device-tree")
    result = run(tmp_path)
    assert result.labels == {B + "nvidia-jetson-nano": "1", B + "nvidia-tegra210": "1"}
    assert "nvidia,p3449-0000-b00+p3448-0000-b00" in result.features["compatible"].flags
    assert result.label_origins[B + "nvidia-tegra210"] == "/proc/device-tree/compatible"
    assert "model" not in result.features


def jetson_nano(root: Path) -> None:
    board(root, L4T_NANO, b"NVIDIA Jetson Nano Developer Kit\0")
    put(root, f"{BASE}/gpu@57000000/compatible", b"nvidia,tegra210-gm20b\0nvidia,gm20b\0")
    put(root, f"{BASE}/gpu@57000000/status", b"okay\0")
    put(root, f"{BASE}/pwm-fan/compatible", b"pwm-fan\0")
    put(root, f"{BASE}/host1x@50000000/vi@54080000/compatible", b"nvidia,tegra210-vi\0")
    put(root, f"{BASE}/chosen/bootargs", b"console=ttyS0,115200n8\0")


def test_extra_nodes_like_dt_node_labeller_n_flag(tmp_path):
    jetson_nano(tmp_path)
    result = run(tmp_path, extra_nodes=("gpu", "pwm-fan"))
    assert [e.message.startswith(PLUS_STRING_ERROR) for e in result.errors] == [True]
    # exactly the labeller README's `-n gpu pwm-fan` output on a Jetson Nano
    assert result.labels == {B + "nvidia-jetson-nano": "1", B + "nvidia-tegra210": "1",
                             B + "nvidia-tegra210-gm20b": "1", B + "nvidia-gm20b": "1", B + "pwm-fan": "1"}
    assert [dict(i.attributes) for i in result.features["node"].instances] == [
        {"name": "gpu@57000000", "path": "/gpu@57000000", "compatible": "nvidia,tegra210-gm20b",
         "compatible.all": "nvidia,tegra210-gm20b nvidia,gm20b", "status": "okay"},
        {"name": "pwm-fan", "path": "/pwm-fan", "compatible": "pwm-fan", "compatible.all": "pwm-fan"},
    ]
    assert result.label_origins[B + "nvidia-gm20b"] == f"{BASE}/gpu@57000000/compatible"


def test_extra_nodes_by_path_nested_and_missing(tmp_path):
    jetson_nano(tmp_path)
    result = run(tmp_path, extra_nodes=("/host1x@50000000/vi@54080000", "vi", "npu", "/chosen"))
    paths = [i.attributes["path"] for i in result.features["node"].instances]
    assert paths == ["/host1x@50000000/vi@54080000", "/chosen"]  # found once, chosen has no compatible
    assert B + "nvidia-tegra210-vi" in result.labels
    assert [(e.path, e.message) for e in result.errors if not e.message.startswith(PLUS_STRING_ERROR)] == [
        (BASE, "device-tree node 'npu' not found")]


def test_no_device_tree_on_x86(tmp_path):
    put(tmp_path, "/sys/firmware/acpi/tables/DSDT", b"DSDT")
    result = run(tmp_path, extra_nodes=("gpu",))
    assert result.features == {} and result.labels == {} and result.errors == ()


@pytest.mark.parametrize("data, labels, flags, problems", [
    (b"fsl,imx8mq-phanbell\0\0fsl,imx8mq\0", {"fsl-imx8mq-phanbell", "fsl-imx8mq"}, None,
     ["empty string in the list ignored"]),
    (b"fsl,imx8mq-phanbell\0fsl,\x01imx\0", {"fsl-imx8mq-phanbell"}, {"fsl,imx8mq-phanbell"},
     ["entry 'fsl,\\x01imx' has control characters; ignored"]),
    (b"fsl,imx8mq-phanbell\0\xff\xfe\0", {"fsl-imx8mq-phanbell"}, {"fsl,imx8mq-phanbell"},
     ["entry b'\\xff\\xfe' is not UTF-8; ignored"]),
    (b"acme,board rev2\0acme,soc\0", {"acme-soc"}, {"acme,soc"},
     ["compatible 'acme,board rev2' contains whitespace; ignored"]),
    (b"acme," + b"x" * 70 + b"\0acme,soc\0", {"acme-soc"}, {"acme," + "x" * 70, "acme,soc"},
     ["cannot be a label key (name part must be no more than 63 characters); not labelled"]),
    (b"acme,a/b\0-acme\0", set(), {"acme,a/b", "-acme"}, ["cannot be a label key", "cannot be a label key"]),
    (b"\0", set(), None, ["empty string in the list ignored"]),
    (b"", set(), None, []),
])
def test_hostile_compatible(tmp_path, data, labels, flags, problems):
    board(tmp_path, data)
    result = run(tmp_path)
    assert set(result.labels) == {B + key for key in labels}
    if flags is not None:
        assert result.features["compatible"].flags == flags
    assert len(result.errors) == len(problems)
    for error, fragment in zip(result.errors, problems, strict=True):
        assert error.path == f"{BASE}/compatible" and fragment in error.message


def test_a_compatible_cut_short_is_undetermined(tmp_path):
    """No final NUL: the last string may be a prefix of the real one (``fsl,imx8m`` of
    ``fsl,imx8mq``), so nothing is decided from it."""
    board(tmp_path, b"fsl,imx8mq-phanbell\0fsl,imx8m", b"Coral\0")
    result = run(tmp_path)
    assert result.labels == {} and "compatible" not in result.features
    assert [(e.path, e.message) for e in result.errors] == [(f"{BASE}/compatible", "incomplete: cut mid-string (no final NUL)")]
    assert dict(result.undetermined) == {"compatible": (B + "*",)}
    board_model = tmp_path / BASE.lstrip("/") / "model"
    board_model.write_bytes(b"Cor")
    assert "model" in run(tmp_path).undetermined


def test_huge_compatible_is_refused(tmp_path):
    board(tmp_path, b"acme,board\0" * 1000, b"Acme\0")
    result = run(tmp_path)
    assert result.labels == {} and "compatible" not in result.features
    assert [e.message for e in result.errors] == [
        "larger than 4096 bytes, not a device-tree string list; ignored"]
    assert result.features["model"].attributes["model"] == "Acme"


def test_unreadable_compatible_and_junk_model(tmp_path):
    board(tmp_path, b"", b"\xff\xfeboard\0")
    (tmp_path / BASE.lstrip("/") / "compatible").unlink()
    (tmp_path / BASE.lstrip("/") / "compatible").mkdir()
    result = run(tmp_path)
    assert result.features == {} and result.labels == {}
    assert sorted((e.path.rsplit("/", 1)[-1], e.message) for e in result.errors) == [
        ("compatible", "unreadable: Is a directory"),
        ("model", "entry b'\\xff\\xfeboard' is not UTF-8; ignored")]


def test_model_with_two_strings_uses_the_first(tmp_path):
    board(tmp_path, b"acme,board\0", b"Acme Board\0Rev B\0")
    result = run(tmp_path)
    assert result.features["model"].attributes["model"] == "Acme Board"
    assert [e.message for e in result.errors] == ["2 strings where one was expected; using the first"]


def test_run_source_keeps_only_valid_labels(tmp_path):
    board(tmp_path, b"fsl,imx8mq-phanbell\0fsl,imx8mq\0Fsl,IMX\0")
    result = run_source("devicetree", HostFS(tmp_path), DiscoveryConfig())
    assert result.labels == {B + "fsl-imx8mq-phanbell": "1", B + "fsl-imx8mq": "1", B + "Fsl-IMX": "1"}


# -- properties -----------------------------------------------------------------------------------
@given(st.binary(max_size=200))
def test_split_string_list_returns_only_clean_strings(data):
    strings, problems = split_string_list(data)
    for text in strings:
        assert text and text.isprintable() and "\0" not in text
        assert text.encode() in data
    if data.endswith(b"\0") and b"\0\0" not in data and not problems:
        assert "\0".join(strings).encode() + b"\0" == data


@given(st.lists(st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7e), min_size=1, max_size=30),
                min_size=1, max_size=5))
def test_split_string_list_round_trips_kernel_format(strings):
    data = b"".join(s.encode() + b"\0" for s in strings)
    assert split_string_list(data) == (strings, [])


@settings(max_examples=60, deadline=None)
@given(st.one_of(st.binary(max_size=300),
                 st.lists(st.text(max_size=70), max_size=6).map(lambda xs: "\0".join(xs).encode("utf-8", "replace"))))
def test_any_compatible_bytes_give_only_valid_labels(data):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        put(root, f"{BASE}/compatible", data)
        result = devicetree.discover(HostFS(root))
        for key, value in result.labels.items():
            assert key.startswith(B) and not qualified_name_errors(key) and not label_value_errors(value)
