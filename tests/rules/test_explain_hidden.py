"""``explain`` on a raw NFD label discovery found but NFD's cpuid label filter hides: it says so,
and by which setting. NFD's default ``attributeBlacklist`` (``source/cpu/cpu.go``
``newDefaultConfig``) lists BMI1; a non-empty ``attributeWhitelist`` replaces it
(``initCpuidFilter``). The recorded Intel server's CPU has BMI1 and AVX2."""

from __future__ import annotations

from agent.cli import main
from tests.conftest import FIXTURES, LABELS_DIR

HOST = f"--host-root={FIXTURES / 'intel-server'}"


def test_a_blacklisted_cpuid_flag_is_discovered_and_hidden(capsys):
    assert main(["explain", "feature.node.kubernetes.io/cpu-cpuid.BMI1", HOST, f"--rules={LABELS_DIR}"]) == 0
    out = capsys.readouterr().out
    assert "discovered, and hidden by sources.cpu.cpuid.attributeBlacklist (NFD's default), which lists BMI1" in out


def test_a_flag_outside_a_whitelist_names_the_whitelist(capsys, tmp_path):
    config = tmp_path / "nfd-worker.conf"
    config.write_text("sources:\n  cpu:\n    cpuid:\n      attributeWhitelist: [AVX2]\n")
    args = [HOST, f"--rules={LABELS_DIR}", f"--config={config}"]
    assert main(["explain", "feature.node.kubernetes.io/cpu-cpuid.BMI1", *args]) == 0
    assert "hidden by sources.cpu.cpuid.attributeWhitelist, which does not list BMI1" in capsys.readouterr().out
    assert main(["explain", "feature.node.kubernetes.io/cpu-cpuid.AVX2", *args]) == 0
    assert "cpu-cpuid.AVX2: label = true" in capsys.readouterr().out


def test_a_flag_the_cpu_does_not_have_is_not_called_hidden(capsys):
    assert main(["explain", "feature.node.kubernetes.io/cpu-cpuid.SM4", HOST, f"--rules={LABELS_DIR}"]) == 1
    assert "hidden" not in capsys.readouterr().out
