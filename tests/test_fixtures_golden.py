"""Golden tests for the recorded host trees in ``fixtures/sysfs/<case>/``.

For every case, ``discover --host-root <case> --format json --node-name fixture-node`` must
produce exactly ``expected.json`` (labels, features and errors).  Rewrite the goldens after a
deliberate change with::

    UPDATE_GOLDENS=1 python -m pytest -q tests/test_fixtures_golden.py

and review the diff: a golden is only right if it agrees with the case's README.  The hand-
checked facts in ``EXPECTATIONS`` are asserted independently of the goldens, so a wrong golden
cannot be accepted silently.  The trees themselves are checked against ``fixtures/generate.py``
(committed tree == generator output) and for the real-host link shapes sources rely on.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import sys
from pathlib import Path

import pytest

from agent.cli import build_parser
from agent.config import discovery_config, selected_sources
from agent.discovery import discover
from agent.features import NFD_PREFIX
from agent.hostfs import HostFS
from tests.conftest import FIXTURES, REPO
from tests.support.recorded_tools import recorded_tool

NODE_NAME = "fixture-node"
UPDATE = os.environ.get("UPDATE_GOLDENS", "") not in ("", "0")
CASES = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir()) if FIXTURES.is_dir() else []
REQUIRED_CASES = {
    "coral-usb-boot", "coral-usb", "coral-pcie", "coral-devboard", "raspberry-pi-4",
    "intel-server", "nvidia-8gpu", "amd-gpu", "minimal", "dgx-usb-lab",
}

#: case -> reason, for a source known to be wrong on that case (the golden then holds the
#: *correct* output and the comparison is expected to fail until the source is fixed).
KNOWN_WRONG: dict[str, str] = {}


def _n(key: str) -> str:
    return key if "/" in key else NFD_PREFIX + key


#: Facts checked by hand from each README: labels that must / must not be present (value
#: None = any value), and feature instances that must exist (attribute subsets).
EXPECTATIONS: dict[str, dict] = {
    "coral-usb-boot": {
        "labels": {"usb-fe_1a6e_089a.present": "true", "pci-0300_8086.present": "true",
                   "storage-nonrotationaldisk": "true", "memory-swap": "true", "kernel-config.NO_HZ": "true",
                   "kernel-config.NO_HZ_FULL": "true", "system-os_release.ID": "ubuntu",
                   "system-os_release.VERSION_ID": "22.04", "system-os_release.VERSION_ID.major": "22",
                   "system-os_release.VERSION_ID.minor": "04", "kernel-version.full": "5.15.0-91-generic",
                   "kernel-version.major": "5", "kernel-version.minor": "15", "kernel-version.revision": "0"},
        "absent": ["usb-ff_18d1_9302.present", "memory-numa", "kernel-config.PREEMPT", "kernel-config.NO_HZ_IDLE",
                   "usb-09_1d6b_0002.present", "usb-e0_8087_0026.present"],
        "instances": {"usb.device": [{"class": "fe", "vendor": "1a6e", "device": "089a"},
                                     {"class": "09", "vendor": "1d6b", "device": "0002"},
                                     {"class": "09", "vendor": "1d6b", "device": "0003"}],
                      "pci.device": [{"class": "0300", "vendor": "8086", "device": "9a49"}]},
    },
    "coral-usb": {
        "labels": {"usb-ff_18d1_9302.present": "true", "pci-0300_8086.present": "true"},
        "absent": ["usb-fe_1a6e_089a.present"],
        "instances": {"usb.device": [{"class": "ff", "vendor": "18d1", "device": "9302"}]},
    },
    "coral-pcie": {
        "labels": {"pci-0300_8086.present": "true"},
        "absent": ["pci-0880_1ac1.present", "usb-fe_1a6e_089a.present"],
        "instances": {"pci.device": [{"class": "0880", "vendor": "1ac1", "device": "089a",
                                      "subsystem_vendor": "1ac1", "subsystem_device": "089a"}]},
        "flags": {"kernel.loadedmodule": ["apex", "gasket"]},
    },
    "edge-ai": {
        "labels": {"pci-0b40_1e60.present": "true", "usb-ff_18d1_9302.present": "true"},
        "absent": ["pci-0880_1ac1.present"],
        "instances": {"pci.device": [{"class": "0880", "vendor": "1ac1", "device": "089a"},
                                     {"class": "0b40", "vendor": "1e60", "device": "2864", "revision": "01"}],
                      "usb.device": [{"class": "ff", "vendor": "18d1", "device": "9302"}]},
        "flags": {"kernel.loadedmodule": ["hailo_pci", "apex", "gasket"]},
    },
    "coral-devboard": {
        "labels": {"system-os_release.ID": "mendel",
                   "kernel-config.PREEMPT": "true", "kernel-config.NO_HZ_IDLE": "true",
                   "kernel-version.full": "4.14.98-imx"},
        # Mendel's os-release has no VERSION_ID (recorded; fixtures/recorded/os-release.mendel-5)
        "absent": ["pci-0880_1ac1.present", "memory-numa", "memory-swap", "system-os_release.VERSION_ID",
                   "system-os_release.VERSION_ID.major"],
        "instances": {"pci.device": [{"class": "0880", "vendor": "1ac1", "device": "089a", "driver": "apex"},
                                     {"class": "0280", "vendor": "168c", "device": "003e", "driver": "hif_pci"}]},
        "flags": {"kernel.loadedmodule": ["apex", "gasket"]},
        "mentions": {"devicetree": ["fsl,imx8mq-phanbell", "fsl,imx8mq"]},
    },
    # mainline kernel: PCIe disabled in the mainline DTS, so no PCI at all (README)
    "coral-devboard-mainline": {
        "labels": {"system-os_release.ID": "debian", "system-os_release.VERSION_ID": "12",
                   "kernel-version.full": "6.1.0-18-arm64", "cpu-model.vendor_id": "ARM",
                   "cpu-model.family": "15", "cpu-model.id": "53300", "cpu-cpuid.AES": "true",
                   "cpu-cpuid.CPUID": "true", "cpu-hardware_multithreading": "false",
                   "beta.devicetree.org/google-imx8mq-phanbell": "1", "beta.devicetree.org/fsl-imx8mq": "1"},
        "absent": ["beta.devicetree.org/fsl-imx8mq-phanbell", "pci-0880_1ac1.present", "memory-numa"],
        "no_label_prefix": ["pci-", "usb-"],
        "attributes": {"devicetree.model": {"model": "Google i.MX8MQ Phanbell"}},
        "mentions": {"devicetree": ["google,imx8mq-phanbell", "fsl,imx8mq"]},
    },
    # a real Mendel board's device tree and PCI devices (README): no pci- label (NFD's whitelist)
    "coral-devboard-vendor-recorded": {
        "labels": {"kernel-version.full": "4.14.98-imx", "kernel-version.major": "4", "kernel-version.minor": "14",
                   "kernel-version.revision": "98", "beta.devicetree.org/fsl-imx8mq-phanbell": "1",
                   "beta.devicetree.org/fsl-imx8mq": "1", "system-os_release.ID": "mendel"},
        "absent": ["beta.devicetree.org/google-imx8mq-phanbell", "pci-0880_1ac1.present", "pci-0280_168c.present",
                   "system-os_release.VERSION_ID"],
        "no_label_prefix": ["pci-", "usb-", "cpu-"],
        "instances": {"pci.device": [{"address": "0001:01:00.0", "class": "0880", "vendor": "1ac1", "device": "089a",
                                      "driver": "apex", "revision": "00"},
                                     {"address": "0000:01:00.0", "class": "0280", "vendor": "168c", "device": "003e",
                                      "driver": "hif_pci", "revision": "32"},
                                     {"address": "0000:00:00.0", "class": "0604", "vendor": "16c3", "device": "abcd"},
                                     {"address": "0001:00:00.0", "class": "0604", "vendor": "16c3", "device": "abcd"}]},
        "instance_counts": {"pci.device": 4},
        "attributes": {"devicetree.model": {"model": "Freescale i.MX8MQ Phanbell"}},
        "mentions": {"devicetree": ["fsl,imx8mq-phanbell", "fsl,imx8mq"]},
    },
    # L4T's root node, recorded twice (README); the "+" string is kept as a feature, not labelled
    "jetson-nano-l4t-recorded": {
        "labels": {"beta.devicetree.org/nvidia-jetson-nano": "1", "beta.devicetree.org/nvidia-tegra210": "1"},
        "absent": ["beta.devicetree.org/nvidia-p3450-0000"],
        "no_label_prefix": ["cpu-", "kernel-version", "pci-"],
        "attributes": {"devicetree.model": {"model": "NVIDIA Jetson Nano Developer Kit"}},
        "mentions": {"devicetree": ["nvidia,p3449-0000-b00+p3448-0000-b00", "nvidia,jetson-nano", "nvidia,tegra210"]},
    },
    "raspberry-pi-4-recorded": {
        "labels": {"beta.devicetree.org/raspberrypi-4-model-b": "1", "beta.devicetree.org/brcm-bcm2711": "1",
                   "cpu-model.vendor_id": "ARM", "cpu-model.family": "15", "cpu-model.id": "53379",
                   "cpu-cpuid.CRC32": "true", "cpu-cpuid.CPUID": "true", "cpu-hardware_multithreading": "false",
                   "kernel-version.full": "6.12.47_rpt-rpi-v8"},
        # NFD's version regexp fails on the sanitised "_rpt-rpi-v8" suffix: no components (README)
        "absent": ["kernel-version.major", "kernel-version.minor", "kernel-version.revision", "cpu-cpuid.AES"],
        "attributes": {"devicetree.model": {"model": "Raspberry Pi 4 Model B Rev 1.1"}},
    },
    "jetson-nano-mainline": {
        "labels": {"beta.devicetree.org/nvidia-p3450-0000": "1", "beta.devicetree.org/nvidia-tegra210": "1"},
        "absent": ["beta.devicetree.org/nvidia-jetson-nano"],
        "no_label_prefix": ["cpu-", "kernel-version"],
        "attributes": {"devicetree.model": {"model": "NVIDIA Jetson Nano Developer Kit"}},
    },
    "raspberry-pi-4": {
        "labels": {"kernel-version.full": "6.6.31_rpt-rpi-v8", "memory-swap": "true", "system-os_release.ID": "debian",
                   "storage-nonrotationaldisk": "true", "kernel-config.PREEMPT": "true"},
        "absent": ["memory-numa"],
        "instances": {"pci.device": [{"class": "0c03", "vendor": "1106", "device": "3483"}]},
        "mentions": {"devicetree": ["raspberrypi,4-model-b", "brcm,bcm2711"]},
    },
    "jetson-nano": {
        "labels": {"kernel-config.PREEMPT": "true", "system-os_release.VERSION_ID": "18.04", "memory-swap": "true",
                   "beta.devicetree.org/nvidia-jetson-nano": "1", "beta.devicetree.org/nvidia-tegra210": "1"},
        "absent": ["beta.devicetree.org/nvidia-p3450-0000"],   # mainline's string, not L4T's (README)
        "mentions": {"devicetree": ["nvidia,jetson-nano", "nvidia,tegra210", "nvidia,p3449-0000-b00+p3448-0000-b00"]},
    },
    "intel-server": {
        "labels": {"pci-0b40_8086.present": "true", "pci-0b40_8086.sriov.capable": "true",
                   "pci-0380_8086.present": "true", "pci-0300_1a03.present": "true",
                   "cpu-security.sgx.enabled": "true", "memory-numa": "true", "network-sriov.capable": "true",
                   "storage-nonrotationaldisk": "true", "kernel-config.NO_HZ_FULL": "true"},
        "absent": ["network-sriov.configured", "pci-0880_8086.present", "kernel-config.PREEMPT", "memory-swap"],
        "instances": {"pci.device": [{"class": "0b40", "vendor": "8086", "device": "4940", "sriov_totalvfs": "16"},
                                     {"class": "0880", "vendor": "8086", "device": "0b25"},
                                     {"class": "0880", "vendor": "8086", "device": "0cfe"},
                                     {"class": "0380", "vendor": "8086", "device": "56c0"},
                                     {"class": "0b40", "vendor": "8086", "device": "4941"}]},
        "flags": {"kernel.loadedmodule": ["intel_qat", "vfio_pci", "idxd", "i915"]},
        "attributes": {"kernel.config": {"X86_SGX": "y"}},
    },
    "amd-gpu": {
        "labels": {"pci-0380_1002.present": "true", "kernel-selinux.enabled": "true", "memory-swap": "true",
                   "cpu-security.sev.enabled": "true", "system-os_release.ID": "rhel",
                   "system-os_release.VERSION_ID.major": "9", "system-os_release.VERSION_ID.minor": "3",
                   "network-sriov.capable": "true"},
        "absent": ["memory-numa", "network-sriov.configured", "cpu-security.sev.es.enabled"],
        "instances": {"pci.device": [{"class": "0380", "vendor": "1002", "device": "740f"}]},
    },
    "minimal": {
        "labels": {"system-os_release.ID": "alpine", "system-os_release.VERSION_ID": "3.19.1",
                   "kernel-version.full": "6.1.0-18-cloud-amd64"},
        "absent": ["memory-swap", "memory-numa", "storage-nonrotationaldisk", "network-sriov.capable"],
        "no_label_prefix": ["pci-", "usb-"],
    },
    "dgx-usb-lab": {
        # hand count from fixtures/hosts_lab.py: 2 root hubs + 16 hubs (class 09), the BMC's 2 HID
        # interfaces, 104 rack devices of which the class-00 ones expand per interface
        # (15 x 18d1:9302, 15 x 1a6e:089a, 15 x FTDI, 15 x CP2102, 14 YubiKeys x 3), 15 Arduinos
        # (class 02) and 15 C920s (class ef) one instance each: 18 + 2 + 60 + 42 + 30 = 152
        "labels": {"usb-ff_18d1_9302.present": "true", "usb-fe_1a6e_089a.present": "true",
                   "usb-ff_0403_6001.present": "true", "usb-ff_10c4_ea60.present": "true",
                   "usb-ef_046d_082d.present": "true", "pci-0302_10de.present": "true",
                   "network-sriov.configured": "true"},
        "absent": ["usb-02_2341_0043.present", "usb-09_1a40_0201.present", "usb-03_1050_0407.present",
                   "usb-0b_1050_0407.present", "usb-ff_1050_0407.present"],
        "instances": {"usb.device": [{"class": "ff", "vendor": "0403", "device": "6001", "serial": "A10K0002",
                                     "sysfs_name": "1-2.3", "driver": "ftdi_sio", "interface": "1-2.3:1.0"},
                                    {"class": "0b", "vendor": "1050", "device": "0407", "interface": "1-2.7.1:1.2"},
                                    {"class": "ef", "vendor": "046d", "device": "082d", "driver": "uvcvideo"},
                                    {"class": "09", "vendor": "1a40", "device": "0201", "sysfs_name": "1-9.7"}]},
        "instance_counts": {"pci.device": 400, "usb.device": 152},
    },
    "nvidia-8gpu": {
        "labels": {"pci-0302_10de.present": "true", "pci-0300_1a03.present": "true",
                   "network-sriov.capable": "true", "network-sriov.configured": "true", "memory-numa": "true",
                   "storage-nonrotationaldisk": "true"},
        "absent": ["pci-0302_10de.sriov.capable", "memory-swap", "pci-0207_15b3.present"],
        "instances": {"pci.device": [{"class": "0302", "vendor": "10de", "device": "20b0"},
                                     {"class": "0680", "vendor": "10de", "device": "1af1"},
                                     {"class": "0207", "vendor": "15b3", "device": "101b", "sriov_totalvfs": "16"},
                                     {"class": "0207", "vendor": "15b3", "device": "101c"},
                                     {"class": "0200", "vendor": "15b3", "device": "101e"}]},
        "instance_counts": {"pci.device": 400, "network.device": 12},
        "flags": {"kernel.loadedmodule": ["nvidia", "mlx5_core", "ib_uverbs", "rdma_ucm"]},
    },
}


# -- running discovery exactly as the CLI does ---------------------------------------------------
def run_discover(case: str) -> dict:
    root = FIXTURES / case
    args = build_parser().parse_args(
        ["discover", "--host-root", str(root), "--format", "json", "--node-name", NODE_NAME]
    )
    result = discover(HostFS(args.host_root), discovery_config(args), selected_sources(args))
    # round-trip through JSON text, with the fixture's real location masked, as the CLI prints it
    text = json.dumps(result.to_json()).replace(str(root), "<host-root>")
    return json.loads(text)


_CACHE: dict[str, dict] = {}


def discovered(case: str) -> dict:
    if case not in _CACHE:
        _CACHE[case] = run_discover(case)
    return _CACHE[case]


def test_every_source_module_is_in_this_checkout():
    """A missing or broken source module fails here and in every golden test, never skips."""
    from agent.sources import SOURCE_NAMES

    missing = [n for n in SOURCE_NAMES if not (REPO / "agent" / "sources" / f"{n}.py").is_file()]
    assert not missing, f"discovery sources missing from this checkout: {missing}"


@pytest.fixture(autouse=True)
def _no_node_name(monkeypatch):
    monkeypatch.delenv("NODE_NAME", raising=False)
    monkeypatch.delenv("HOST_ROOT", raising=False)


# -- diffs a person can read ---------------------------------------------------------------------
def describe_difference(expected: dict, actual: dict) -> str:
    lines: list[str] = []
    exp_labels, act_labels = expected.get("labels", {}), actual.get("labels", {})
    for key in sorted(set(exp_labels) | set(act_labels)):
        if key not in act_labels:
            lines.append(f"label missing:    {key}={exp_labels[key]}")
        elif key not in exp_labels:
            lines.append(f"label unexpected: {key}={act_labels[key]}")
        elif exp_labels[key] != act_labels[key]:
            lines.append(f"label changed:    {key}: {exp_labels[key]!r} -> {act_labels[key]!r}")
    exp_feats, act_feats = expected.get("features", {}), actual.get("features", {})
    for name in sorted(set(exp_feats) | set(act_feats)):
        if exp_feats.get(name) == act_feats.get(name):
            continue
        before = json.dumps(exp_feats.get(name), indent=1, sort_keys=True).splitlines()
        after = json.dumps(act_feats.get(name), indent=1, sort_keys=True).splitlines()
        diff = list(difflib.unified_diff(before, after, f"expected {name}", f"actual {name}", lineterm="", n=1))
        lines.append(f"feature {name} differs:")
        lines += diff[:60] + ([f"  ... ({len(diff) - 60} more diff lines)"] if len(diff) > 60 else [])
    if expected.get("errors") != actual.get("errors"):
        before = json.dumps(expected.get("errors"), indent=1).splitlines()
        after = json.dumps(actual.get("errors"), indent=1).splitlines()
        lines.append("errors differ:")
        lines += list(difflib.unified_diff(before, after, "expected errors", "actual errors", lineterm="", n=1))[:60]
    return "\n".join(lines)


# -- the tests -----------------------------------------------------------------------------------
def test_required_cases_exist():
    assert set(CASES) >= REQUIRED_CASES, f"missing fixture dirs: {sorted(REQUIRED_CASES - set(CASES))}"


@pytest.mark.parametrize("case", CASES)
def test_fixture_has_readme(case):
    readme = FIXTURES / case / "README.md"
    assert readme.is_file(), f"{case}: every fixture needs a README.md saying which machine it is"
    assert len(readme.read_text().split()) > 40, f"{case}: README.md too thin to say where the facts come from"


@pytest.mark.parametrize("case", CASES)
def test_golden(case):
    if case in KNOWN_WRONG and not UPDATE:
        pytest.xfail(KNOWN_WRONG[case])
    golden = FIXTURES / case / "expected.json"
    actual = discovered(case)
    if UPDATE:
        golden.write_text(json.dumps(actual, indent=2, sort_keys=False) + "\n")
        pytest.skip(f"golden rewritten: {golden.relative_to(REPO)} (review it against the README)")
    assert golden.is_file(), f"{case}: no expected.json; create it with UPDATE_GOLDENS=1 and check it by hand"
    expected = json.loads(golden.read_text())
    assert actual == expected, f"{case}: discovery differs from expected.json\n" + describe_difference(expected, actual)


def _instances(result: dict, feature: str) -> list[dict]:
    return result["features"].get(feature, {}).get("instances", [])


@pytest.mark.parametrize("case", sorted(EXPECTATIONS))
def test_hand_checked_facts(case):
    """What the README promises, asserted directly on the discovery output."""
    facts = EXPECTATIONS[case]
    result = discovered(case)
    labels = result["labels"]
    problems = []
    for key, value in facts.get("labels", {}).items():
        if _n(key) not in labels:
            problems.append(f"missing label {_n(key)}")
        elif value is not None and labels[_n(key)] != value:
            problems.append(f"label {_n(key)}={labels[_n(key)]!r}, expected {value!r}")
    for key in facts.get("absent", []):
        if _n(key) in labels:
            problems.append(f"label {_n(key)} must not be present")
    for prefix in facts.get("no_label_prefix", []):
        problems += [f"unexpected label {k}" for k in labels if k.startswith(NFD_PREFIX + prefix)]
    for feature, wanted in facts.get("instances", {}).items():
        have = _instances(result, feature)
        for subset in wanted:
            if not any(all(inst.get(k) == v for k, v in subset.items()) for inst in have):
                problems.append(f"{feature}: no instance with {subset}")
    for feature, count in facts.get("instance_counts", {}).items():
        if len(_instances(result, feature)) != count:
            problems.append(f"{feature}: {len(_instances(result, feature))} instances, expected {count}")
    for feature, flags in facts.get("flags", {}).items():
        have = set(result["features"].get(feature, {}).get("flags", []))
        problems += [f"{feature}: flag {f} missing" for f in flags if f not in have]
    for feature, attrs in facts.get("attributes", {}).items():
        have = result["features"].get(feature, {}).get("attributes", {})
        problems += [f"{feature}: {k}={have.get(k)!r}, expected {v!r}" for k, v in attrs.items() if have.get(k) != v]
    for source, strings in facts.get("mentions", {}).items():
        text = json.dumps({k: v for k, v in result["features"].items() if k.startswith(source + ".")})
        text += json.dumps({k: v for k, v in labels.items() if "devicetree" in k or source in k})
        problems += [f"{source}: {s!r} appears in no feature" for s in strings if s not in text]
    assert not problems, f"{case}:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("case", CASES)
def test_links_are_relative_like_a_real_host(case):
    """Bus/class entries are relative symlinks into /sys/devices that resolve inside the tree,
    and no link anywhere is absolute except /proc/device-tree (absolute on real hosts too)."""
    root = FIXTURES / case
    problems = []
    for listing, must_contain in (("sys/bus/pci/devices", "vendor"), ("sys/bus/usb/devices", None),
                                  ("sys/class/net", "operstate"), ("sys/block", "size"),
                                  ("sys/bus/node/devices", "cpulist"), ("sys/bus/cpu/devices", "topology")):
        directory = root / listing
        if not directory.is_dir():
            continue
        for entry in sorted(directory.iterdir()):
            if listing == "sys/class/net" and entry.name == "bonding_masters":
                continue
            if not entry.is_symlink():
                problems.append(f"{listing}/{entry.name} is not a symlink")
                continue
            target = os.readlink(entry)
            if target.startswith("/") or "devices/" not in target:
                problems.append(f"{listing}/{entry.name} -> {target} (want ../../devices/...)")
            resolved = entry.resolve()
            if root.resolve() not in resolved.parents or not resolved.is_dir():
                problems.append(f"{listing}/{entry.name} does not resolve to a directory inside the fixture")
            elif must_contain and not (resolved / must_contain).exists():
                problems.append(f"{listing}/{entry.name}: no {must_contain}")
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            if path.is_symlink():
                target = os.readlink(path)
                rel = path.relative_to(root).as_posix()
                if target.startswith("/") and rel != "proc/device-tree":
                    problems.append(f"absolute link {rel} -> {target}")
                elif not target.startswith("/") and not os.path.lexists(path.parent / target):
                    problems.append(f"dangling link {rel} -> {target}")
    assert not problems, f"{case}:\n  " + "\n  ".join(problems[:40])


WITH_PCI = [case for case in CASES if (FIXTURES / case / "sys/bus/pci/devices").is_dir()]


@pytest.mark.parametrize("case", WITH_PCI)
def test_sriov_links_pair_up(case):
    """Every virtfnN has a physfn pointing back, as the kernel creates them (hosts with a PCI bus)."""
    devices = FIXTURES / case / "sys/bus/pci/devices"
    for pf in devices.iterdir():
        pf_dir = pf.resolve()
        vfs = sorted(p for p in pf_dir.iterdir() if p.name.startswith("virtfn"))
        if vfs:
            assert (pf_dir / "sriov_numvfs").read_text().strip() == str(len(vfs))
        for vf in vfs:
            assert (vf.resolve() / "physfn").resolve() == pf_dir, f"{vf} has no physfn back to {pf.name}"


def _tree_listing(root: Path) -> dict[str, str]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = path.relative_to(root).as_posix()
            if rel in ("README.md", "expected.json"):
                continue
            if path.is_symlink():
                out[rel] = "-> " + os.readlink(path)
            elif path.is_file():
                out[rel] = hashlib.sha1(path.read_bytes()).hexdigest()
    return out


def _generator():
    sys.path.insert(0, str(REPO / "fixtures"))
    try:
        import generate
    finally:
        sys.path.remove(str(REPO / "fixtures"))
    return generate


# recorded fixtures (fixtures/recorded/) are not generated: only the generated ones are checked
GENERATED = [case for case in CASES if case in _generator().CASES]


def test_the_generator_check_covers_every_generated_fixture():
    assert GENERATED and set(_generator().CASES) <= set(CASES)


@pytest.mark.parametrize("case", GENERATED)
def test_committed_tree_matches_generator(case, tmp_path):
    """The committed tree is exactly what fixtures/generate.py writes (nobody hand-edited it)."""
    generate = _generator()
    generate.build(case, tmp_path / case)
    committed, fresh = _tree_listing(FIXTURES / case), _tree_listing(tmp_path / case)
    only_committed = sorted(set(committed) - set(fresh))[:10]
    only_fresh = sorted(set(fresh) - set(committed))[:10]
    changed = sorted(k for k in set(committed) & set(fresh) if committed[k] != fresh[k])[:10]
    assert not (only_committed or only_fresh or changed), (
        f"{case}: run `python fixtures/generate.py {case}`\n only committed: {only_committed}\n"
        f" only generated: {only_fresh}\n changed: {changed}"
    )


_PCI_FORMATS = {"vendor": r"0x[0-9a-f]{4}\n", "device": r"0x[0-9a-f]{4}\n", "class": r"0x[0-9a-f]{6}\n",
                "subsystem_vendor": r"0x[0-9a-f]{4}\n", "subsystem_device": r"0x[0-9a-f]{4}\n"}
_USB_FORMATS = {"idVendor": r"[0-9a-f]{4}\n", "idProduct": r"[0-9a-f]{4}\n", "bDeviceClass": r"[0-9a-f]{2}\n"}


@pytest.mark.parametrize("case", CASES)
def test_attribute_formats_are_the_kernels(case):
    """PCI ids as ``0x10de\\n``, USB ids as ``1a6e\\n``, DT string lists NUL-terminated."""
    import re

    root = FIXTURES / case
    problems = []
    for bus, formats in (("pci", _PCI_FORMATS), ("usb", _USB_FORMATS)):
        devices = root / "sys/bus" / bus / "devices"
        for entry in sorted(devices.iterdir()) if devices.is_dir() else []:
            if bus == "usb" and ":" in entry.name:
                iface = (entry / "bInterfaceClass").read_text()
                if not re.fullmatch(r"[0-9a-f]{2}\n", iface):
                    problems.append(f"{entry.name}/bInterfaceClass {iface!r}")
                continue
            for attr, pattern in formats.items():
                text = (entry / attr).read_text()
                if not re.fullmatch(pattern, text):
                    problems.append(f"{bus} {entry.name}/{attr} {text!r}")
    dt = root / "sys/firmware/devicetree/base"
    for prop in ("compatible", "model"):
        if (dt / prop).exists():
            data = (dt / prop).read_bytes()
            if not data.endswith(b"\0") or b"\0\0" in data:
                problems.append(f"devicetree {prop} {data!r} is not a NUL-terminated string list")
    assert not problems, f"{case}:\n  " + "\n  ".join(problems[:40])


def _dt_board_writer():
    return recorded_tool("make_dt_boards")


DT_BOARDS = sorted(_dt_board_writer().CASES)


@pytest.mark.parametrize("case", DT_BOARDS)
def test_committed_dt_board_tree_matches_its_writer(case, tmp_path):
    """Device-tree board fixtures are exactly what fixtures/recorded/make_dt_boards.py writes
    from the mainline DTS values it names (nobody hand-edited them)."""
    writer = _dt_board_writer()
    assert case in CASES and case not in GENERATED
    writer.build(case, tmp_path / case)
    assert _tree_listing(FIXTURES / case) == _tree_listing(tmp_path / case), (
        f"{case}: run `python fixtures/recorded/make_dt_boards.py {case}`")


def test_recorded_dev_board_keeps_the_recorded_sysfs_shapes():
    """What the Mendel board's owners recorded (coral-devboard-vendor-recorded/README.md): the TPU's
    ``driver`` link as ``ls -l`` printed it, its ``apex`` child, and the vendor tree's PCIe node names."""
    root = FIXTURES / "coral-devboard-vendor-recorded"
    tpu = root / "sys/bus/pci/devices/0001:01:00.0"
    assert os.readlink(tpu / "driver") == "../../../../../../bus/pci/drivers/apex"
    assert (tpu / "apex").is_dir() and (tpu / "class").read_text() == "0x0880ff\n"
    base = root / "sys/firmware/devicetree/base"
    assert (base / "pcie@0x33c00000/compatible").read_bytes() == b"fsl,imx8mq-pcie\0snps,dw-pcie\0"
    assert (base / "pcie@0x33c00000/status").read_bytes() == b"okay\0"
    assert (base / "compatible").read_bytes() == b"fsl,imx8mq-phanbell\0fsl,imx8mq\0"


def test_recorded_pi4_cpuinfo_is_the_published_text():
    """The fixture's cpuinfo and the cpu test vector are the same recording (one source, two uses)."""
    from tests.sources.test_cpu_recordings import RASPBERRY_PI_4

    assert (FIXTURES / "raspberry-pi-4-recorded/proc/cpuinfo").read_text() == RASPBERRY_PI_4


def _dts_text():
    return recorded_tool("dts_text")


def test_dts_text_reads_dtc_output_into_the_kernels_bytes():
    """The values the recorded boards' trees are written from: strings NUL-terminated (dtc's
    ``\\0`` inside one string is the same list), cells big-endian, bytes raw, empty properties empty."""
    dts = _dts_text()
    text = ('junk prompt$ cat x.dts\n/dts-v1/;\n/memreserve/\t0x80000000 0x20000;\n/ {\n'
            '\tcompatible = "fsl,imx8mq-phanbell\\0fsl,imx8mq";\n\tmodel = "A \\"quoted\\" board";\n'
            '\t#size-cells = < 0x02 >;\n\tmac = [ 00 0a f5 ];\n\tlocal-timer-stop;\n'
            '\tnames = "pcie", "pcie_bus";\n\n\tpcie@0x33800000 {\n\t\tstatus = "okay";\n\t};\n};\n')
    nodes = dts.with_kernel_names(dts.parse(text))
    assert nodes[""] == {"compatible": b"fsl,imx8mq-phanbell\0fsl,imx8mq\0", "model": b'A "quoted" board\0',
                         "#size-cells": b"\0\0\0\x02", "mac": b"\x00\x0a\xf5", "local-timer-stop": b"",
                         "names": b"pcie\0pcie_bus\0", "name": b"\0"}
    assert nodes["pcie@0x33800000"] == {"status": b"okay\0", "name": b"pcie\0"}


@pytest.mark.parametrize("text", [
    "/ { compatible = <&gic 1>; };",          # a reference: dtc -O dts never prints one
    "/ { a = \"x\" \"y\"; };",                 # no comma between values
    "/ { node { a = <1>; };",                  # unbalanced
    "/ { a = \"bad \\q escape\"; };",
], ids=["reference", "no-comma", "unbalanced", "escape"])
def test_dts_text_refuses_what_dtc_does_not_print(text):
    with pytest.raises(ValueError):
        _dts_text().parse("/dts-v1/;\n" + text)


def test_dts_text_unwrap_joins_terminal_cut_lines():
    dts = _dts_text()
    assert dts.unwrap("abcd\nef\nxy\n", 4) == "abcdef\nxy\n"
    recording = (REPO / "fixtures/recorded/dts/coral-devboard-mendel-fsl-imx8mq-phanbell.dts").read_text()
    with pytest.raises(ValueError):
        dts.parse(recording)          # as published, a wrapped cell list does not parse ("0007")
    nodes = dts.parse(dts.unwrap(recording, 254))
    assert len(nodes) == 241 and nodes["tmu@30260000"]["fsl,tmu-calibration"][120:128] == bytes.fromhex("0001000300000033")
