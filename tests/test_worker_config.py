"""``--config``: NFD's worker configuration file, with NFD's own example file.

``tests/data/nfd-worker.conf.example`` is NFD's ``deployment/components/worker-config/nfd-worker.conf.example``
(kubernetes-sigs/node-feature-discovery @ 76e6cc8cc0d54b8bce037098b72611ffdf66ef5a), unchanged.
It ships fully commented out; "uncommented" below is that file with the first ``#`` of each
line removed, which is how NFD's docs tell users to enable it. The labels expected from it on
``fixtures/sysfs/intel-server`` are NFD's logic applied by hand to that host's README facts
(devices, kernel config, CPU flags), not our output.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agent.cli import main
from agent.discovery import discover
from agent.features import NFD_PREFIX
from agent.hostfs import HostFS
from agent.sources import SOURCE_NAMES, cpu, kernel, pci, usb
from agent.worker_config import WorkerConfigError, load_worker_config, parse_worker_config
from tests.conftest import FIXTURES, REPO

EXAMPLE = REPO / "tests" / "data" / "nfd-worker.conf.example"
SERVER = FIXTURES / "intel-server"
P = NFD_PREFIX


def uncommented(tmp_path: Path) -> Path:
    path = tmp_path / "nfd-worker.conf"
    path.write_text("".join(line[1:] if line.startswith("#") else line
                            for line in EXAMPLE.read_text().splitlines(keepends=True)))
    return path


def discover_with(path: Path | None, root: Path = SERVER):
    from agent.discovery import DiscoveryConfig

    if path is None:
        return discover(HostFS(root), DiscoveryConfig())
    loaded = load_worker_config(str(path))
    return discover(HostFS(root), loaded.discovery, loaded.feature_sources)


# -- NFD's example file ---------------------------------------------------------------------------
def test_the_example_as_shipped_is_nfds_defaults():
    loaded = load_worker_config(str(EXAMPLE))
    assert loaded.warnings == () and dict(loaded.discovery.sources) == {}
    assert loaded.feature_sources == SOURCE_NAMES and loaded.discovery.label_sources is None
    assert discover_with(EXAMPLE).labels == discover_with(None).labels


def test_the_uncommented_example_parses_into_each_sources_section(tmp_path):
    loaded = load_worker_config(str(uncommented(tmp_path)))
    sources = loaded.discovery.sources
    assert sources["pci"] == pci.Config(device_class_whitelist=("0200", "03", "12"), device_label_fields=(
        "class", "vendor", "device", "subsystem_vendor", "subsystem_device"))
    assert sources["usb"] == usb.Config()  # the example repeats NFD's defaults
    assert sources["kernel"] == kernel.Config(kconfig_file="/path/to/kconfig", config_opts=("NO_HZ", "X86", "DMI"))
    # the example's blacklist is NFD's default minus SGXLC
    assert "SGXLC" not in sources["cpu"].cpuid_attribute_blacklist and "SGX" in sources["cpu"].cpuid_attribute_blacklist
    assert sources["cpu"].cpuid_attribute_whitelist == ()
    # NFD-only options are accepted and explained, not silently dropped
    warned = {w.message.split(" ")[0] for w in loaded.warnings}
    assert {"core.noPublish", "core.sleepInterval", "core.klog", "core.ownerRefs", "sources.custom"} <= warned
    assert all(w.line > 0 for w in loaded.warnings)


def test_the_uncommented_example_changes_labels_as_nfd_would(tmp_path):
    before = discover_with(None).labels
    after = discover_with(uncommented(tmp_path)).labels
    gained = {k: v for k, v in after.items() if before.get(k) != v}
    lost = sorted(set(before) - set(after))
    assert gained == {
        # deviceLabelFields: all five, in NFD's order; deviceClassWhitelist 0200, 03, 12
        P + "pci-0300_1a03_2000_15d9_1c48.present": "true",       # ASPEED BMC VGA
        P + "pci-0380_8086_56c0_8086_4905.present": "true",       # Intel Flex 170
        P + "pci-0200_8086_159b_8086_0003.present": "true",       # E810, both ports
        P + "pci-0200_8086_159b_8086_0003.sriov.capable": "true",
        P + "cpu-cpuid.SGXLC": "true",                            # not in the example's blacklist
    }
    assert lost == sorted([P + "pci-0300_1a03.present", P + "pci-0380_8086.present", P + "pci-0b40_8086.present",
                           P + "pci-0b40_8086.sriov.capable",     # QAT 0b40: not whitelisted any more
                           P + "kernel-config.NO_HZ_FULL"])       # configOpts: NO_HZ, X86, DMI (X86/DMI unset here)
    assert after[P + "kernel-config.NO_HZ"] == "true"


def test_discover_command_reads_config(tmp_path, capsys):
    assert main(["discover", "--host-root", str(SERVER), "--config", str(uncommented(tmp_path)), "--format", "json"]) == 0
    assert '"feature.node.kubernetes.io/cpu-cpuid.SGXLC": "true"' in capsys.readouterr().out


# -- core ---------------------------------------------------------------------------------------------
def test_label_whitelist_matches_the_name_without_prefix(tmp_path):
    path = tmp_path / "c.conf"
    path.write_text('core:\n  labelWhiteList: "^(pci|kernel-version)"\n')
    labels = discover_with(path).labels
    assert labels and all(k[len(P):].startswith(("pci-", "kernel-version")) for k in labels)
    found = discover_with(path)
    assert "cpu.cpuid" in found.features  # features are never filtered


def test_feature_and_label_sources_in_nfds_order(tmp_path):
    path = tmp_path / "c.conf"
    path.write_text("core:\n  featureSources: [all, -usb, -cpu]\n  labelSources: [pci, kernel]\n")
    loaded = load_worker_config(str(path))
    assert "usb" not in loaded.feature_sources and "cpu" not in loaded.feature_sources
    found = discover_with(path)
    assert "usb.device" not in found.features and "memory.numa" in found.features
    assert {k[len(P):].split("-")[0] for k in found.labels} == {"pci", "kernel"}


def test_deprecated_core_sources_is_label_sources(tmp_path):
    loaded = parse_worker_config("core:\n  sources: [memory]\n")
    assert loaded.discovery.label_sources == frozenset({"memory"})
    assert "deprecated" in loaded.warnings[0].message


def test_sources_flag_overrides_feature_sources(tmp_path, capsys):
    path = tmp_path / "c.conf"
    path.write_text("core:\n  featureSources: [usb]\n")
    assert main(["discover", "--host-root", str(SERVER), "--config", str(path), "--sources", "kernel", "--format", "json"]) == 0
    out = capsys.readouterr().out
    assert "kernel-version.full" in out and "usb.device" not in out


def test_our_own_section(tmp_path):
    loaded = parse_worker_config("nodeFeatureAgent:\n  sources:\n    local:\n      featuresDir: /opt/f\n"
                                 "    devicetree:\n      extraNodes: [gpu]\n")
    assert loaded.discovery.sources["local"].features_dir == "/opt/f"
    assert loaded.discovery.sources["devicetree"].extra_nodes == ("gpu",)


def test_null_lists_are_empty_as_in_nfd():
    loaded = parse_worker_config("sources:\n  kernel:\n    configOpts:\n  cpu:\n    cpuid:\n      attributeBlacklist:\n")
    assert loaded.discovery.sources["kernel"].config_opts == ()
    assert loaded.discovery.sources["cpu"] == cpu.Config(cpuid_attribute_blacklist=())


# -- hostile files --------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, line, words", [
    ("core:\n  labelWhitelist: x\n", 2, "unknown key core.labelWhitelist"),
    ("sources:\n  pci:\n    deviceClassWhitelist:\n      - 0200\n", 4, "must be a string"),
    ("sources:\n  pci:\n    deviceClassWhiteList: [\"03\"]\n", 3, "unknown key sources.pci.deviceClassWhiteList"),
    ("core:\n  labelWhiteList: \"(\"\n", 2, "core.labelWhiteList: error parsing regexp"),
    ("core:\n  featureSources: [all, -gpu]\n", 2, "unknown source '-gpu'"),
    ("sources:\n  gpu: {}\n", 2, "sources.gpu: unknown source"),
    ("sources:\n  kernel:\n    kconfigFile: [a]\n", 3, "must be a string"),
    ("frobnicate: 1\n", 1, "unknown top-level key"),
    ("core: [1, 2]\n", 1, "core must be a mapping"),
    ("core:\n  labelWhiteList: x\n  labelWhiteList: y\n", 3, ""),
    ("core: {\n", 2, "not YAML"),
    ("a: 1\n---\nb: 2\n", 3, "more than one YAML document"),
])
def test_invalid_files_name_file_and_line(text, line, words):
    with pytest.raises(WorkerConfigError) as caught:
        parse_worker_config(text, "nfd-worker.conf")
    first = caught.value.problems[0]
    assert (first.path, first.line) == ("nfd-worker.conf", line), str(first)
    assert words in first.message


def test_cli_refuses_an_invalid_file_with_exit_2_and_file_line(tmp_path):
    path = tmp_path / "nfd-worker.conf"
    path.write_text("sources:\n  pci:\n    deviceClassWhitelist: [03]\n")
    done = subprocess.run([sys.executable, "-m", "agent", "discover", "--host-root", str(SERVER), "--config", str(path)],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 2 and done.stdout == ""
    assert f"{path}:3: sources.pci.deviceClassWhitelist[0] must be a string" in done.stderr


def test_cli_refuses_a_missing_file(tmp_path, capsys):
    assert main(["discover", "--host-root", str(SERVER), "--config", str(tmp_path / "nope.conf")]) == 2
    assert "--config" in capsys.readouterr().err
