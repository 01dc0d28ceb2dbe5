"""``cpu.arm32`` and the ``node-feature-agent.io/arm32-variant`` label placement selects on.

Expected values: the util-linux armv7 recording (``fixtures/sysfs/lscpu-armv7``: its kernel
printed ``Processor : ARMv7 Processor rev 4 (v7l)``), the processor line Linux prints today
(``arch/arm/kernel/setup.c`` ``c_show``: ``"model name\\t: %s rev %d (%s)"`` with the ELF
platform), and, for arm64, the live-facts file a snapshot writes. The personality probe
itself runs here on the test machine's kernel: it cannot show an arm64 kernel's answer, but
it shows the probe leaves this process as it found it.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil

import pytest

from agent import rules
from agent.discovery import discover
from agent.hostfs import HostFS
from agent.rules.held import held_label_keys
from agent.sources import cpu
from agent.sources.cpu_arm32 import aarch32_el0
from agent.sources.cpu_live import LIVE_FACTS_PATH
from tests.conftest import FIXTURES, LABELS_DIR

LABEL = "node-feature-agent.io/arm32-variant"
CATALOGUE = rules.load_catalogue([str(LABELS_DIR)])


def _plan(root) -> dict[str, str]:
    found = discover(HostFS(root))
    return dict(rules.derive(found.features, found.labels, {}, CATALOGUE).state.labels)


def _copy(tmp_path, case: str):
    root = tmp_path / case
    shutil.copytree(FIXTURES / case, root, symlinks=True)
    return root


def test_the_armv7_recording_is_v7_and_labelled():
    result = cpu.discover(HostFS(FIXTURES / "lscpu-armv7"))
    assert dict(result.features["arm32"].attributes) == {"variant": "v7"}
    assert result.features["arm32"].origin == "/proc/cpuinfo"
    assert _plan(FIXTURES / "lscpu-armv7")[LABEL] == "v7"


@pytest.mark.parametrize("line,variant", [
    ("model name\t: ARMv6-compatible processor rev 7 (v6l)", "v6"),  # the platform, not "CPU architecture: 7"
    ("model name\t: ARMv7 Processor rev 5 (v7l)", "v7"),
    ("model name\t: ARM926EJ-S rev 5 (v5l)", "v5"),
    ("model name\t: ARMv7 Processor rev 3 (v7b)", "v7"),  # big-endian
])
def test_the_processor_line_as_the_kernel_prints_it(tmp_path, line, variant):
    root = _copy(tmp_path, "lscpu-armv7")
    cpuinfo = root / "proc/cpuinfo"
    text = cpuinfo.read_text().replace("Processor\t: ARMv7 Processor rev 4 (v7l)", line)
    cpuinfo.write_text(text)
    assert dict(cpu.discover(HostFS(root)).features["arm32"].attributes) == {"variant": variant}


def test_a_processor_line_without_a_platform_is_an_error_not_a_guess(tmp_path):
    root = _copy(tmp_path, "lscpu-armv7")
    cpuinfo = root / "proc/cpuinfo"
    cpuinfo.write_text(cpuinfo.read_text().replace("(v7l)", "(unknown)"))
    result = cpu.discover(HostFS(root))
    assert "arm32" not in result.features
    assert any("ELF platform" in e.message for e in result.errors)


@pytest.mark.parametrize("fact,expected", [(True, "v8"), (False, None)])
def test_arm64_from_the_recorded_probe(tmp_path, fact, expected):
    root = _copy(tmp_path, "raspberry-pi-4")
    facts = root / LIVE_FACTS_PATH.lstrip("/")
    facts.parent.mkdir(parents=True, exist_ok=True)
    facts.write_text(json.dumps({"aarch32_el0": fact}))
    assert _plan(root).get(LABEL) == expected


def test_an_arm64_recording_without_the_probe_says_nothing():
    result = cpu.discover(HostFS(FIXTURES / "raspberry-pi-4"))
    assert "arm32" not in result.features and "arm32" not in result.undetermined
    assert LABEL not in _plan(FIXTURES / "raspberry-pi-4")


def test_unusable_recorded_facts_leave_the_variant_undetermined_and_its_label_held(tmp_path):
    root = _copy(tmp_path, "raspberry-pi-4")
    facts = root / LIVE_FACTS_PATH.lstrip("/")
    facts.parent.mkdir(parents=True, exist_ok=True)
    facts.write_text(json.dumps({"aarch32_el0": "yes"}))
    result = cpu.discover(HostFS(root))
    assert "arm32" in result.undetermined and "arm32" not in result.features
    assert LABEL in held_label_keys(CATALOGUE, None, {"cpu.arm32": ()})


def test_no_arm32_feature_on_other_architectures():
    for case in ("coral-usb", "lscpu-ppc64-POWER7", "lscpu-s390-kvm"):
        assert "arm32" not in cpu.discover(HostFS(FIXTURES / case)).features


def test_the_probe_leaves_this_process_as_it_was():
    """On this kernel the probe really calls personality(2) (in a thread of its own); the
    process's persona and uname are unchanged after it."""
    personality = ctypes.CDLL(None, use_errno=True).personality
    personality.argtypes, personality.restype = [ctypes.c_ulong], ctypes.c_int
    before, machine = personality(0xFFFFFFFF), os.uname().machine
    supported, problem = aarch32_el0()
    assert problem == "" and isinstance(supported, bool)
    assert (personality(0xFFFFFFFF), os.uname().machine) == (before, machine)
