"""cpu source against small host trees built from real /proc/cpuinfo excerpts."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import cpuinfo
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.discovery import DiscoveryConfig, run_source
from agent.features import NFD_PREFIX
from agent.hostfs import HostFS
from agent.k8s_validation import label_value_errors, qualified_name_errors
from agent.sources import cpu, cpu_live
from tests.support.hostfiles import put

P = NFD_PREFIX + "cpu-"

# Intel Xeon Gold 6438Y+ (Sapphire Rapids), bare metal: first block of /proc/cpuinfo.
SPR_FLAGS = (
    "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush dts acpi mmx fxsr sse sse2 ss "
    "ht tm pbe syscall nx pdpe1gb rdtscp lm constant_tsc art arch_perfmon pebs bts rep_good nopl xtopology "
    "nonstop_tsc cpuid aperfmperf tsc_known_freq pni pclmulqdq dtes64 monitor ds_cpl vmx smx est tm2 ssse3 sdbg fma "
    "cx16 xtpr pdcm pcid dca sse4_1 sse4_2 x2apic movbe popcnt tsc_deadline_timer aes xsave avx f16c rdrand lahf_lm "
    "abm 3dnowprefetch cpuid_fault epb cat_l3 cat_l2 cdp_l3 invpcid_single intel_ppin cdp_l2 ssbd mba ibrs ibpb stibp "
    "ibrs_enhanced tpr_shadow flexpriority ept vpid ept_ad fsgsbase tsc_adjust sgx bmi1 avx2 smep bmi2 erms invpcid "
    "cqm rdt_a avx512f avx512dq rdseed adx smap avx512ifma clflushopt clwb intel_pt avx512cd sha_ni avx512bw avx512vl "
    "xsaveopt xsavec xgetbv1 xsaves cqm_llc cqm_occup_llc cqm_mbm_total cqm_mbm_local split_lock_detect avx_vnni "
    "avx512_bf16 wbnoinvd dtherm ida arat pln pts hfi vnmi avx512vbmi umip pku ospke waitpkg avx512_vbmi2 gfni vaes "
    "vpclmulqdq avx512_vnni avx512_bitalg tme avx512_vpopcntdq la57 rdpid bus_lock_detect cldemote movdiri movdir64b "
    "enqcmd sgx_lc fsrm md_clear serialize tsxldtrk pconfig arch_lbr ibt amx_bf16 avx512_fp16 amx_tile amx_int8 "
    "flush_l1d arch_capabilities"
)
SPR_CPUINFO = f"""processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 143
model name\t: Intel(R) Xeon(R) Gold 6438Y+
stepping\t: 8
microcode\t: 0x2b0004b1
cpu MHz\t\t: 2000.000
cache size\t: 61440 KB
physical id\t: 0
siblings\t: 64
core id\t\t: 0
cpu cores\t: 32
apicid\t\t: 0
initial apicid\t: 0
fpu\t\t: yes
fpu_exception\t: yes
cpuid level\t: 32
wp\t\t: yes
flags\t\t: {SPR_FLAGS}
vmx flags\t: vnmi preemption_timer posted_intr invvpid ept_x_only ept_ad ept_1gb flexpriority apicv tsc_offset
bugs\t\t: spectre_v1 spectre_v2 spec_store_bypass swapgs eibrs_pbrsb
bogomips\t: 4000.00
clflush size\t: 64
cache_alignment\t: 64
address sizes\t: 46 bits physical, 57 bits virtual
power management:

processor\t: 1
vendor_id\t: GenuineIntel
"""
SPR_LABELLED = {
    "ADX", "AESNI", "AMXBF16", "AMXINT8", "AMXTILE", "AVX", "AVX2", "AVX512BF16", "AVX512BITALG", "AVX512BW",
    "AVX512CD", "AVX512DQ", "AVX512F", "AVX512FP16", "AVX512IFMA", "AVX512VBMI", "AVX512VBMI2", "AVX512VL",
    "AVX512VNNI", "AVX512VPOPCNTDQ", "AVXVNNI", "CETIBT", "CLDEMOTE", "CMPXCHG8", "ENQCMD", "FLUSH_L1D", "FMA3",
    "FSRM", "FXSR", "FXSROPT", "GFNI", "IA32_ARCH_CAP", "IBPB", "LAHF", "MD_CLEAR", "MOVBE", "MOVDIR64B", "MOVDIRI",
    "OSXSAVE", "PCONFIG", "SERIALIZE", "SHA", "SPEC_CTRL_SSBD", "STIBP", "SYSCALL", "SYSEE", "TME", "TSXLDTRK",
    "VAES", "VMX", "VPCLMULQDQ", "WAITPKG", "WBNOINVD", "X86_64_V1", "X86_64_V2", "X86_64_V3", "X86_64_V4", "X87",
    "XGETBV1", "XSAVE", "XSAVEC", "XSAVEOPT", "XSAVES",
}
# Flags present but on NFD's default blacklist.
SPR_BLACKLISTED = {"BMI1", "BMI2", "CLMUL", "CMOV", "CX16", "ERMS", "F16C", "HTT", "LZCNT", "MMX", "NX", "POPCNT",
                   "RDRAND", "RDSEED", "RDTSCP", "SGX", "SGXLC", "SSE", "SSE2", "SSE3", "SSE4", "SSE42", "SSSE3"}

# AMD EPYC (Zen 3, family 25 model 1) as a Firecracker/KVM guest sees it.
EPYC_GUEST_CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 1
model name\t: AMD EPYC
stepping\t: 1
microcode\t: 0x1000065
cpu MHz\t\t: 2445.406
cache size\t: 512 KB
physical id\t: 0
siblings\t: 2
core id\t\t: 0
cpu cores\t: 2
apicid\t\t: 0
initial apicid\t: 0
fpu\t\t: yes
fpu_exception\t: yes
cpuid level\t: 16
wp\t\t: yes
flags\t\t: fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 ht syscall nx mmxext fxsr_opt pdpe1gb rdtscp lm constant_tsc rep_good nopl xtopology nonstop_tsc cpuid extd_apicid tsc_known_freq pni pclmulqdq ssse3 fma cx16 pcid sse4_1 sse4_2 x2apic movbe popcnt tsc_deadline_timer aes xsave avx f16c rdrand hypervisor lahf_lm cmp_legacy cr8_legacy abm sse4a misalignsse 3dnowprefetch osvw topoext ssbd ibrs ibpb stibp vmmcall fsgsbase tsc_adjust bmi1 avx2 smep bmi2 erms invpcid rdseed adx smap clflushopt clwb sha_ni xsaveopt xsavec xgetbv1 xsaves clzero xsaveerptr wbnoinvd arat umip pku ospke vaes vpclmulqdq rdpid fsrm
bugs\t\t: sysret_ss_attrs spectre_v1 spectre_v2 spec_store_bypass srso ibpb_no_ret spectre_v2_user
bogomips\t: 4890.81
TLB size\t: 2560 4K pages
clflush size\t: 64
cache_alignment\t: 64
address sizes\t: 48 bits physical, 48 bits virtual
power management:

"""

# Coral Dev Board (NXP i.MX8MQ, 4x Cortex-A53 r0p4), Mendel Linux 4.14 kernel.
CORAL_CPUINFO = """processor\t: 0
BogoMIPS\t: 16.66
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 cpuid
CPU implementer\t: 0x41
CPU architecture: 8
CPU variant\t: 0x0
CPU part\t: 0xd03
CPU revision\t: 4

processor\t: 1
BogoMIPS\t: 16.66
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 cpuid
CPU implementer\t: 0x41
CPU architecture: 8
CPU variant\t: 0x0
CPU part\t: 0xd03
CPU revision\t: 4

"""

# Raspberry Pi 4 Model B (BCM2711, Cortex-A72 r0p3), 64-bit Raspberry Pi OS.
RPI4_CPUINFO = """processor\t: 0
BogoMIPS\t: 108.00
Features\t: fp asimd evtstrm crc32 cpuid
CPU implementer\t: 0x41
CPU architecture: 8
CPU variant\t: 0x0
CPU part\t: 0xd08
CPU revision\t: 3

Hardware\t: BCM2835
Revision\t: d03114
Serial\t\t: 10000000a1b2c3d4
Model\t\t: Raspberry Pi 4 Model B Rev 1.4
"""


def add_cpus(root: Path, count: int, threads: int = 1, sockets: int = 1) -> None:
    """``/sys/bus/cpu/devices/cpuN -> ../../../devices/system/cpu/cpuN`` with topology files."""
    per_socket = count // sockets
    cores = count // threads
    for n in range(count):
        core = n % cores
        siblings = ",".join(str(core + t * cores) for t in range(threads)) if threads > 1 else str(n)
        base = f"/sys/devices/system/cpu/cpu{n}/topology"
        put(root, f"{base}/thread_siblings_list", siblings + "\n")
        put(root, f"{base}/physical_package_id", f"{core // (per_socket // threads)}\n")
        link = root / f"sys/bus/cpu/devices/cpu{n}"
        link.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(f"../../../devices/system/cpu/cpu{n}", link)


def run(root: Path, config: cpu.Config | None = None):
    return cpu.discover(HostFS(root), config or cpu.Config())


def cpuid_labels(result) -> set[str]:
    return {k[len(P + "cpuid."):] for k in result.labels if k.startswith(P + "cpuid.")}


def other_labels(result) -> dict[str, str]:
    return {k[len(P):]: v for k, v in result.labels.items() if not k.startswith(P + "cpuid.")}


@pytest.fixture(autouse=True)
def no_py_cpuinfo(monkeypatch):
    """No test tree is live: py-cpuinfo must never run unless a test says so."""
    def refuse(*args, **kwargs):
        raise AssertionError("py-cpuinfo called during a fixture replay")
    monkeypatch.setattr(cpuinfo, "get_cpu_info", refuse)
    monkeypatch.setattr(cpu_live, "_cached", None)


# -- realistic hosts ---------------------------------------------------------------------------
def test_sapphire_rapids_bare_metal(tmp_path):
    put(tmp_path, "/proc/cpuinfo", SPR_CPUINFO)
    add_cpus(tmp_path, 8, threads=2, sockets=2)
    for node in (0, 1):
        put(tmp_path, f"/sys/devices/system/node/node{node}/x86/sgx_total_bytes", "68585259008\n")
    put(tmp_path, "/sys/devices/system/cpu/intel_pstate/status", "active\n")
    put(tmp_path, "/sys/devices/system/cpu/intel_pstate/no_turbo", "0\n")
    for policy in range(2):
        put(tmp_path, f"/sys/devices/system/cpu/cpufreq/policy{policy}/affected_cpus", f"{policy}\n")
        put(tmp_path, f"/sys/devices/system/cpu/cpufreq/policy{policy}/scaling_governor", "performance\n")
    put(tmp_path, "/sys/devices/system/cpu/cpuidle/current_driver", "intel_idle\n")
    put(tmp_path, "/sys/module/intel_idle/parameters/max_cstate", "9\n")
    put(tmp_path, "/sys/module/kvm_intel/parameters/tdx", "Y\n")

    result = run(tmp_path)

    assert result.errors == ()
    assert cpuid_labels(result) == SPR_LABELLED
    assert result.features["cpuid"].flags == SPR_LABELLED | SPR_BLACKLISTED
    assert other_labels(result) == {
        "model.vendor_id": "Intel", "model.family": "6", "model.id": "143", "model.hypervisor": "none",
        "hardware_multithreading": "true", "pstate.status": "active", "pstate.turbo": "true",
        "pstate.scaling_governor": "performance", "cstate.enabled": "true", "security.sgx.enabled": "true",
        "security.tdx.enabled": "true",
    }
    assert dict(result.features["security"].attributes) == {
        "sgx.enabled": "true", "sgx.epc": "137170518016", "tdx.enabled": "true"}
    assert dict(result.features["topology"].attributes) == {"hardware_multithreading": "true", "socket_count": "2"}
    assert dict(result.features["rdt"].attributes) == {
        "RDTMON": "true", "RDTCMT": "true", "RDTMBM": "true", "RDTL3CA": "true", "RDTL2CA": "true", "RDTMBA": "true"}


def test_epyc_kvm_guest_with_sev_host_params(tmp_path):
    put(tmp_path, "/proc/cpuinfo", EPYC_GUEST_CPUINFO)
    add_cpus(tmp_path, 2)
    put(tmp_path, "/sys/devices/system/clocksource/clocksource0/available_clocksource", "tsc kvm-clock \n")
    put(tmp_path, "/sys/module/kvm_amd/parameters/sev", "Y\n")
    put(tmp_path, "/sys/module/kvm_amd/parameters/sev_es", "N\n")
    put(tmp_path, "/sys/module/kvm_amd/parameters/sev_snp", "1\n")
    put(tmp_path, "/sys/fs/cgroup/misc.capacity", "sev_es 0\nsev 509\n")

    result = run(tmp_path)

    assert result.errors == ()
    labels = cpuid_labels(result)
    assert {"X86_64_V1", "X86_64_V2", "X86_64_V3", "HYPERVISOR", "SVM"} - {"SVM"} <= labels
    assert "X86_64_V4" not in labels and "AVX512F" not in labels
    assert {"IBRS", "CLZERO", "SSE4A", "AMD3DNOWEXT"} - {"AMD3DNOWEXT"} <= labels
    assert "HTT" not in result.features["cpuid"].flags  # 2 siblings on 2 cores: no SMT
    assert other_labels(result) == {
        "model.vendor_id": "AMD", "model.family": "25", "model.id": "1", "model.hypervisor": "kvm",
        "hardware_multithreading": "false", "security.sev.enabled": "true", "security.sev.snp.enabled": "true",
    }
    assert dict(result.features["security"].attributes) == {
        "sev.enabled": "true", "sev.asids": "509", "sev.snp.enabled": "true"}


def test_coral_dev_board_cortex_a53(tmp_path):
    put(tmp_path, "/proc/cpuinfo", CORAL_CPUINFO)
    add_cpus(tmp_path, 4)
    put(tmp_path, "/sys/devices/system/cpu/cpuidle/current_driver", "psci_idle\n")

    result = run(tmp_path)

    assert result.errors == ()
    assert result.labels == {
        P + "cpuid.FP": "true", P + "cpuid.ASIMD": "true", P + "cpuid.EVTSTRM": "true", P + "cpuid.AES": "true",
        P + "cpuid.PMULL": "true", P + "cpuid.SHA1": "true", P + "cpuid.SHA2": "true", P + "cpuid.CRC32": "true",
        P + "cpuid.CPUID": "true",
        # MIDR 0x410fd034: family = variant<<4 | 0xf, id = part<<4 | revision (klauspost)
        P + "model.vendor_id": "ARM", P + "model.family": "15", P + "model.id": str(0xD034),
        P + "model.hypervisor": "none", P + "hardware_multithreading": "false",
    }
    assert set(result.features) == {"cpuid", "model", "topology"}


def test_raspberry_pi_4_cortex_a72(tmp_path):
    put(tmp_path, "/proc/cpuinfo", RPI4_CPUINFO)

    result = run(tmp_path)

    assert result.errors == ()
    assert cpuid_labels(result) == {"FP", "ASIMD", "EVTSTRM", "CRC32", "CPUID"}
    assert other_labels(result) == {"model.vendor_id": "ARM", "model.family": "15", "model.id": str(0xD083),
                                    "model.hypervisor": "none"}


def test_arm32_kernel_names(tmp_path):
    put(tmp_path, "/proc/cpuinfo", RPI4_CPUINFO.replace(
        "fp asimd evtstrm crc32 cpuid", "half thumb fastmult vfp edsp neon vfpv3 tls vfpv4 idiva idivt vfpd32 lpae "
        "evtstrm crc32").replace("CPU architecture: 8", "CPU architecture: 7"))
    assert cpuid_labels(run(tmp_path)) == {"HALF", "THUMB", "FASTMUL", "VFP", "EDSP", "NEON", "VFPv3", "TLS",
                                          "VFPv4", "IDIVA", "IDIVT", "VFPD32", "LPAE", "EVTSTRM", "CRC32"}


def test_whitelist_replaces_blacklist(tmp_path):
    put(tmp_path, "/proc/cpuinfo", SPR_CPUINFO)
    result = run(tmp_path, cpu.Config(cpuid_attribute_whitelist=("AVX512F", "SGX", "NOT_A_FLAG")))
    assert cpuid_labels(result) == {"AVX512F", "SGX"}


def test_custom_blacklist_is_exact_names(tmp_path):
    put(tmp_path, "/proc/cpuinfo", SPR_CPUINFO)
    labels = cpuid_labels(run(tmp_path, cpu.Config(cpuid_attribute_blacklist=("AVX512",))))
    assert "AVX512F" in labels and "SSE42" in labels


def test_x86_flag_names_and_what_has_none():
    """The kernel's x86 names in klauspost's: a flag with two names gives both, ``ibrs`` counts
    on AMD and Hygon only (klauspost reads it from AMD's leaf), ``ssbd``/``virt_ssbd`` are
    derived, never "unmapped"; every other unknown name is reported once per occurrence, in
    order. (Names from ``arch/x86/include/asm/cpufeatures.h``; the mapping is cpu_flags'.)"""
    from agent.sources.cpu_flags import nfd_flags

    raw = ["fpu", "sse", "ibrs", "constant_tsc", "ssbd", "virt_ssbd", "abm", "nonstop_tsc", "constant_tsc", "xsave"]
    fields = {"cpu family": "6", "model": "143"}
    intel, intel_unmapped = nfd_flags("x86", raw, "Intel", fields)
    assert intel >= {"X87", "SSE", "FXSROPT", "LZCNT", "POPCNT", "XSAVE", "OSXSAVE"} and "IBRS" not in intel
    assert intel_unmapped == ["ibrs", "constant_tsc", "nonstop_tsc", "constant_tsc"]
    for vendor in ("AMD", "Hygon"):
        amd, amd_unmapped = nfd_flags("x86", raw, vendor, {"cpu family": "25", "model": "1"})
        assert "IBRS" in amd and amd_unmapped == ["constant_tsc", "nonstop_tsc", "constant_tsc"]
    assert nfd_flags("x86", [], "Intel", fields) == (frozenset(), [])


def test_labelled_cpuid_flags_keeps_what_nfds_key_filter_keeps():
    """The filter agrees with NFD's per-key ``keyFilter.unmask`` (kubernetes-sigs/
    node-feature-discovery 76e6cc8, ``source/cpu/cpu.go`` ``initCpuidFilter``: a non-empty
    whitelist replaces the blacklist; exact names) for the default blacklist, a custom one, a
    whitelist and names that only differ in case or by a prefix; order kept, duplicates kept."""
    def unmask(config, flag):
        if config.cpuid_attribute_whitelist:
            return flag in config.cpuid_attribute_whitelist
        return flag not in config.cpuid_attribute_blacklist

    flags = ["AVX", "AVX512", "AVX512F", "SSE42", "sse42", "HTT", "SGX", "AVX10", "AVX10_1", "", "AVX", "NX"]
    for config in (cpu.Config(), cpu.Config(cpuid_attribute_blacklist=("AVX512", "")),
                   cpu.Config(cpuid_attribute_whitelist=("AVX512F", "SGX", "NOT_A_FLAG", "AVX")),
                   cpu.Config(cpuid_attribute_blacklist=())):
        expected = [flag for flag in flags if unmask(config, flag)]
        assert config.labelled_cpuid_flags(flags) == expected
        assert config.labelled_cpuid_flags(iter(flags)) == expected
    assert cpu.Config().labelled_cpuid_flags(flags) == ["AVX", "AVX512", "AVX512F", "sse42", "AVX10_1", "", "AVX"]


# -- security and power details ------------------------------------------------------------------
def test_sgx_flag_without_epc_is_not_enabled(tmp_path):
    put(tmp_path, "/proc/cpuinfo", SPR_CPUINFO)
    put(tmp_path, "/sys/devices/system/node/node0/x86/sgx_total_bytes", "0\n")
    result = run(tmp_path)
    assert "security" not in result.features
    assert P + "security.sgx.enabled" not in result.labels


def test_sgx_epc_without_sgx_flag_is_not_enabled(tmp_path):
    put(tmp_path, "/proc/cpuinfo", SPR_CPUINFO.replace(" sgx ", " "))
    put(tmp_path, "/sys/devices/system/node/node0/x86/sgx_total_bytes", "68585259008\n")
    assert "security" not in run(tmp_path).features


@pytest.mark.parametrize("value", ["N\n", "0\n", "", "y\n"])
def test_tdx_needs_exactly_Y(tmp_path, value):
    put(tmp_path, "/proc/cpuinfo", SPR_CPUINFO)
    put(tmp_path, "/sys/module/kvm_intel/parameters/tdx", value)
    assert P + "security.tdx.enabled" not in run(tmp_path).labels


def test_pstate_passive_has_no_governor(tmp_path):
    put(tmp_path, "/proc/cpuinfo", SPR_CPUINFO)
    put(tmp_path, "/sys/devices/system/cpu/intel_pstate/status", "passive\n")
    put(tmp_path, "/sys/devices/system/cpu/intel_pstate/no_turbo", "1\n")
    put(tmp_path, "/sys/devices/system/cpu/cpufreq/policy0/affected_cpus", "0\n")
    put(tmp_path, "/sys/devices/system/cpu/cpufreq/policy0/scaling_governor", "schedutil\n")
    assert dict(run(tmp_path).features["pstate"].attributes) == {"status": "passive", "turbo": "false"}


def test_pstate_governors_disagree(tmp_path):
    put(tmp_path, "/proc/cpuinfo", SPR_CPUINFO)
    put(tmp_path, "/sys/devices/system/cpu/intel_pstate/status", "active\n")
    for policy, governor in ((0, "performance"), (1, "powersave")):
        put(tmp_path, f"/sys/devices/system/cpu/cpufreq/policy{policy}/affected_cpus", f"{policy}\n")
        put(tmp_path, f"/sys/devices/system/cpu/cpufreq/policy{policy}/scaling_governor", f"{governor}\n")
    assert dict(run(tmp_path).features["pstate"].attributes) == {"status": "active"}


def test_pstate_off_reports_nothing(tmp_path):
    put(tmp_path, "/proc/cpuinfo", SPR_CPUINFO)
    put(tmp_path, "/sys/devices/system/cpu/intel_pstate/status", "off\n")
    assert "pstate" not in run(tmp_path).features


def test_cstate_disabled_by_max_cstate_zero(tmp_path):
    put(tmp_path, "/proc/cpuinfo", SPR_CPUINFO)
    put(tmp_path, "/sys/devices/system/cpu/cpuidle/current_driver", "intel_idle\n")
    put(tmp_path, "/sys/module/intel_idle/parameters/max_cstate", "0\n")
    assert run(tmp_path).labels[P + "cstate.enabled"] == "false"


# -- hypervisor ---------------------------------------------------------------------------------
GUEST = SPR_CPUINFO.replace(" lahf_lm ", " hypervisor lahf_lm ")


@pytest.mark.parametrize("files, expected", [
    ({}, "unknown"),
    ({"/sys/hypervisor/type": "xen\n"}, "xenhvm"),
    ({"/sys/devices/system/clocksource/clocksource0/available_clocksource": "hyperv_clocksource_tsc_page acpi_pm \n"},
     "msvm"),
    ({"/sys/devices/virtual/dmi/id/sys_vendor": "Microsoft Corporation\n"}, "msvm"),
    ({"/sys/devices/virtual/dmi/id/sys_vendor": "VMware, Inc.\n"}, "vmware"),
    ({"/sys/devices/virtual/dmi/id/sys_vendor": "QEMU\n"}, "qemu"),
    ({"/sys/devices/virtual/dmi/id/sys_vendor": "QEMU\n",
      "/sys/devices/system/clocksource/clocksource0/available_clocksource": "kvm-clock tsc acpi_pm \n"}, "kvm"),
    ({"/sys/devices/virtual/dmi/id/sys_vendor": "Amazon EC2\n"}, "kvm"),
])
def test_hypervisor_vendor(tmp_path, files, expected):
    put(tmp_path, "/proc/cpuinfo", GUEST)
    for path, content in files.items():
        put(tmp_path, path, content)
    result = run(tmp_path)
    assert result.labels[P + "model.hypervisor"] == expected
    assert "HYPERVISOR" in cpuid_labels(result)


# -- hostile input: one test per malformed case -------------------------------------------------
def test_missing_cpuinfo_non_live_is_an_error_not_py_cpuinfo(tmp_path):
    result = run(tmp_path)
    assert [e.path for e in result.errors] == ["/proc/cpuinfo"]
    assert "cpuid" not in result.features and "model" not in result.features


FROM_CPUINFO = {"cpuid": (P + "cpuid.*",), "model": (P + "model.*",), "rdt": (), "security": (P + "security.*",),
                "coprocessor": (P + "coprocessor.*",), "arm32": ()}


def assert_incomplete(result, why: str) -> None:
    """cpuinfo read but not whole: a read failure naming the file, and every feature computed
    from it undetermined (kept by the caller), not absent."""
    assert [(e.path, e.message) for e in result.errors if e.path == "/proc/cpuinfo"] == [
        ("/proc/cpuinfo", f"incomplete: {why}")]
    assert {k: v for k, v in result.undetermined.items() if k in FROM_CPUINFO} == FROM_CPUINFO


@pytest.mark.parametrize(("content", "why"), [
    ("", "empty"),
    ("\n\n", "empty"),
    (SPR_CPUINFO[: SPR_CPUINFO.index("avx512f") + 4], "cut mid-line (no final newline)"),
    ("hello: world\n", "no flags/Features line, in no layout the kernel prints"),
    (SPR_CPUINFO[: SPR_CPUINFO.index("flags")], "x86 layout without its feature line"),
])
def test_incomplete_cpuinfo_is_a_read_failure(tmp_path, content, why):
    put(tmp_path, "/proc/cpuinfo", content)
    assert_incomplete(run(tmp_path), why)


def test_fewer_processors_than_online_is_a_read_failure(tmp_path):
    """cpuinfo lists the online CPUs (x86 c_start walks cpu_online_mask): a file cut at a
    block boundary lists fewer."""
    put(tmp_path, "/proc/cpuinfo", SPR_CPUINFO)
    put(tmp_path, "/sys/devices/system/cpu/online", "0-1,4\n")
    assert_incomplete(run(tmp_path), "2 processor(s) listed, 3 online (/sys/devices/system/cpu/online)")
    block = SPR_CPUINFO.split("\n\n")[0] + "\n\n"
    put(tmp_path, "/proc/cpuinfo", "".join(block.replace("processor\t: 0", f"processor\t: {n}") for n in (0, 1, 4)))
    result = run(tmp_path)
    assert not result.errors and not result.undetermined and P + "cpuid.AVX512F" in result.labels


@pytest.mark.parametrize("online", ["", "0-", "zero\n", "3-1\n"])
def test_an_online_list_that_is_no_cpu_list_leaves_cpuinfo_unverified(tmp_path, online):
    put(tmp_path, "/proc/cpuinfo", SPR_CPUINFO)
    put(tmp_path, "/sys/devices/system/cpu/online", online)
    result = run(tmp_path)
    if online == "":  # the kernel's empty mask: nothing online to miss
        assert not result.errors and P + "cpuid.AVX512F" in result.labels
    else:
        assert_incomplete(result, f"cannot tell how many CPUs are online (/sys/devices/system/cpu/online is no "
                                  f"CPU list: {online.strip()!r})")


def test_an_unreadable_online_list_leaves_cpuinfo_unverified(tmp_path):
    put(tmp_path, "/proc/cpuinfo", SPR_CPUINFO)
    (tmp_path / "sys/devices/system/cpu/online").mkdir(parents=True)
    assert_incomplete(run(tmp_path), "cannot tell how many CPUs are online (/sys/devices/system/cpu/online: "
                                     "Is a directory)")


def test_a_cpu_taken_offline_between_the_reads_is_no_cut_file(tmp_path, monkeypatch):
    """The online list is read again on a mismatch: the second answer decides."""
    put(tmp_path, "/proc/cpuinfo", SPR_CPUINFO)
    put(tmp_path, "/sys/devices/system/cpu/online", "0-1\n")
    real = HostFS.read_attr
    answers = iter(["0-1", "0"])

    def read_attr(self, path):
        return next(answers) if path == cpu.CPUS_ONLINE else real(self, path)

    monkeypatch.setattr(HostFS, "read_attr", read_attr)
    result = run(tmp_path)
    assert not result.errors and P + "cpuid.AVX512F" in result.labels


@pytest.mark.parametrize(("text", "count"), [
    ("processor\t: 0\nprocessor\t: 1\n", 2),
    ("Processor\t: ARMv7 Processor rev 4 (v7l)\nprocessor\t: 0\n", 1),  # arm32's model line is none
    ("# processors    : 2\nprocessor 0: version = 00\nprocessor 1: version = 00\n", 2),  # s390x
    ("processors: 3\nprocessor_x: 1\nprocessor\n", 0),
])
def test_processor_count(text, count):
    from agent.sources.cpu_cpuinfo import processor_count
    assert processor_count(text) == count


@pytest.mark.parametrize(("text", "count"), [
    ("0\n", 1), ("0-3\n", 4), ("0-3,5,8-11\n", 9), ("\n", 0), ("1-5,8-19", 17),
    ("0-", None), ("a", None), ("3-1", None), ("0,,1", None), ("-1", None), ("0 - 1", None)])
def test_cpulist_count(text, count):
    from agent.sources.cpu_cpuinfo import cpulist_count
    assert cpulist_count(text) == count


def test_binary_cpuinfo(tmp_path):
    put(tmp_path, "/proc/cpuinfo", b"processor\t: 0\x00\x01\x02flags\t: avx\n")
    result = run(tmp_path)
    assert "NUL" in str(result.errors[0]) and not result.labels


def test_invalid_utf8_cpuinfo(tmp_path):
    put(tmp_path, "/proc/cpuinfo", SPR_CPUINFO.encode().replace(b"GenuineIntel", b"Genuine\xff\xfeIntel"))
    result = run(tmp_path)
    assert "not a cpuinfo text" in str(result.errors[0]) and not result.labels


def test_non_numeric_family(tmp_path):
    put(tmp_path, "/proc/cpuinfo", SPR_CPUINFO.replace("cpu family\t: 6", "cpu family\t: six"))
    result = run(tmp_path)
    assert "'cpu family' is not a number" in str(result.errors[0])
    assert P + "model.family" not in result.labels and result.labels[P + "model.id"] == "143"
    assert P + "cpuid.AVX512F" in result.labels


def test_unknown_vendor_string(tmp_path):
    put(tmp_path, "/proc/cpuinfo", SPR_CPUINFO.replace("GenuineIntel", "Zhaoxin!!!!!"))
    assert run(tmp_path).labels[P + "model.vendor_id"] == "VendorUnknown"


def test_absurdly_long_cpuinfo(tmp_path):
    put(tmp_path, "/proc/cpuinfo", "flags\t: " + "avx " * (10 * 1024 * 1024 // 4))
    result = run(tmp_path)
    assert "truncated or absurdly long" in str(result.errors[0]) and not result.labels


def test_arm_part_not_hex(tmp_path):
    put(tmp_path, "/proc/cpuinfo", CORAL_CPUINFO.replace("0xd03", "cortex"))
    result = run(tmp_path)
    assert "CPU implementer/part unusable" in str(result.errors[0])
    assert "model" not in result.features and P + "cpuid.ASIMD" in result.labels


def test_unreadable_topology_drops_multithreading(tmp_path):
    put(tmp_path, "/proc/cpuinfo", SPR_CPUINFO)
    add_cpus(tmp_path, 2)
    target = tmp_path / "sys/devices/system/cpu/cpu1/topology/thread_siblings_list"
    target.unlink()
    target.mkdir()  # EISDIR: what an unreadable attribute looks like to root
    result = run(tmp_path)
    assert "topology" not in result.features and P + "hardware_multithreading" not in result.labels
    assert any("thread_siblings_list" in e.path for e in result.errors)
    # unknown this pass, not absent: named so a caller can keep its last answer
    assert dict(result.undetermined) == {"topology": (P + "hardware_multithreading",)}


def test_a_missing_topology_file_is_undetermined_too(tmp_path):
    """NFD's discoverTopology gives no topology when a CPU's file is missing (os.ReadFile
    fails): the same here, and the feature is undetermined, not evidence of no SMT."""
    put(tmp_path, "/proc/cpuinfo", SPR_CPUINFO)
    add_cpus(tmp_path, 4, threads=2)
    (tmp_path / "sys/devices/system/cpu/cpu3/topology/physical_package_id").unlink()
    result = run(tmp_path)
    assert "topology" not in result.features and P + "hardware_multithreading" not in result.labels
    assert "topology" in result.undetermined


def test_an_offline_cpu_is_no_topology_as_nfd_and_not_undetermined(tmp_path):
    """The kernel removes an offline CPU's topology/ (drivers/base/topology.c registers it at
    CPUHP_TOPOLOGY_PREPARE and removes it when the CPU goes down; SMT switched off leaves the
    siblings offline).  NFD's discoverTopology then fails on that CPU and gives no topology:
    the same labels here, but as a determined answer with no error, so a running agent does
    not carry an old hardware_multithreading=true forever after SMT is switched off."""
    put(tmp_path, "/proc/cpuinfo", SPR_CPUINFO)
    add_cpus(tmp_path, 4, threads=2)
    assert run(tmp_path).labels[P + "hardware_multithreading"] == "true"
    shutil.rmtree(tmp_path / "sys/devices/system/cpu/cpu3/topology")
    put(tmp_path, "/sys/devices/system/cpu/cpu3/online", "0\n")
    result = run(tmp_path)
    assert "topology" not in result.features and P + "hardware_multithreading" not in result.labels
    assert not result.undetermined and not result.errors
    # an online CPU without its topology files is still a failed read, not an offline CPU
    put(tmp_path, "/sys/devices/system/cpu/cpu3/online", "1\n")
    result = run(tmp_path)
    assert "topology" in result.undetermined and result.errors


def test_an_offline_cpu_with_an_unreadable_topology_file_leaves_no_error(tmp_path):
    """A read failure of the CPU found offline is no error (its state explains it); the errors
    met before the topology (here: none) are kept, and an online CPU's failure still reports."""
    put(tmp_path, "/proc/cpuinfo", SPR_CPUINFO)
    add_cpus(tmp_path, 4, threads=2)
    target = tmp_path / "sys/devices/system/cpu/cpu2/topology/thread_siblings_list"
    target.unlink()
    target.mkdir()  # EISDIR: unreadable even for root
    put(tmp_path, "/sys/devices/system/cpu/cpu2/online", "0\n")
    result = run(tmp_path)
    assert "topology" not in result.features and not result.undetermined and not result.errors
    put(tmp_path, "/sys/devices/system/cpu/cpu2/online", "1\n")
    result = run(tmp_path)
    assert "topology" in result.undetermined
    assert [e.path.rsplit("/", 2)[-2:] for e in result.errors] == [["topology", "thread_siblings_list"],
                                                                    ["cpu2", "topology"]]


def test_no_cpu_list_is_absence_and_an_unlistable_one_is_undetermined(tmp_path):
    put(tmp_path, "/proc/cpuinfo", SPR_CPUINFO)
    result = run(tmp_path)  # no /sys/bus/cpu/devices at all: nothing to report, nothing unknown
    assert "topology" not in result.features and not result.undetermined and not result.errors
    put(tmp_path, "/sys/bus/cpu/devices", "not a directory\n")  # ENOTDIR: cannot be listed
    result = run(tmp_path)
    assert "topology" in result.undetermined and any("unlistable" in e.message for e in result.errors)
    add_cpus_ok = tmp_path / "ok"
    put(add_cpus_ok, "/proc/cpuinfo", SPR_CPUINFO)
    add_cpus(add_cpus_ok, 2)
    assert not run(add_cpus_ok).undetermined  # every file read: determined


def test_junk_max_cstate(tmp_path):
    put(tmp_path, "/proc/cpuinfo", SPR_CPUINFO)
    put(tmp_path, "/sys/devices/system/cpu/cpuidle/current_driver", "intel_idle\n")
    put(tmp_path, "/sys/module/intel_idle/parameters/max_cstate", "lots\n")
    result = run(tmp_path)
    assert "cstate" not in result.features and "not an integer" in str(result.errors[0])


def test_junk_sgx_epc_size(tmp_path):
    put(tmp_path, "/proc/cpuinfo", SPR_CPUINFO)
    put(tmp_path, "/sys/devices/system/node/node0/x86/sgx_total_bytes", "-5\n")
    put(tmp_path, "/sys/devices/system/node/node1/x86/sgx_total_bytes", b"\x00\x00")
    result = run(tmp_path)
    assert "security" not in result.features
    assert [e.path for e in result.errors] == ["/sys/devices/system/node/node1/x86/sgx_total_bytes"]


def test_junk_misc_capacity(tmp_path):
    put(tmp_path, "/proc/cpuinfo", EPYC_GUEST_CPUINFO)
    put(tmp_path, "/sys/module/kvm_amd/parameters/sev", "1\n")
    put(tmp_path, "/sys/fs/cgroup/misc.capacity", "sev many\n")
    result = run(tmp_path)
    assert dict(result.features["security"].attributes) == {"sev.enabled": "true"}
    assert "capacity not a number" in str(result.errors[0])


# -- live facts (py-cpuinfo) ----------------------------------------------------------------------
class LiveHost(HostFS):
    """A tree that claims to be the live host (files still come from the tree), to exercise
    the py-cpuinfo path without depending on the machine running the tests."""

    @property
    def is_live(self) -> bool:
        return True


FAKE_INFO = {"arch_string_raw": "x86_64", "vendor_id_raw": "AuthenticAMD", "family": 25, "model": 1,
             "flags": ["avx2", "sse4_2", "hypervisor", "fpu"], "brand_raw": "AMD EPYC"}


def test_live_host_without_cpuinfo_uses_py_cpuinfo_once(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(cpuinfo, "get_cpu_info", lambda: calls.append(1) or dict(FAKE_INFO))
    first = cpu.discover(LiveHost(tmp_path))
    second = cpu.discover(LiveHost(tmp_path))
    assert calls == [1]
    assert first.labels == second.labels
    assert first.labels[P + "model.vendor_id"] == "AMD" and first.labels[P + "cpuid.AVX2"] == "true"
    assert first.features["cpuid"].origin == "py-cpuinfo"
    assert cpu.live_cpu_facts() == {"arch": "x86_64", "vendor_id": "AuthenticAMD", "family": 25, "model": 1,
                                    "flags": ["avx2", "fpu", "hypervisor", "sse4_2"]}
    json.dumps(cpu.live_cpu_facts())


def test_live_host_with_full_cpuinfo_never_calls_py_cpuinfo(tmp_path):
    put(tmp_path, "/proc/cpuinfo", EPYC_GUEST_CPUINFO)
    assert cpu.discover(LiveHost(tmp_path)).labels[P + "model.family"] == "25"


def test_py_cpuinfo_failure_is_reported(tmp_path, monkeypatch):
    def broken():
        raise RuntimeError("cpuid helper crashed")
    monkeypatch.setattr(cpuinfo, "get_cpu_info", broken)
    result = cpu.discover(LiveHost(tmp_path))
    assert "py-cpuinfo gave no CPU facts" in str(result.errors[-1])


def test_recorded_live_facts_replay_without_py_cpuinfo(tmp_path):
    facts = {"arch": "x86_64", "vendor_id": "GenuineIntel", "family": 6, "model": 143,
             "flags": SPR_FLAGS.split()}
    put(tmp_path, cpu.LIVE_FACTS_PATH, json.dumps(facts))
    result = run(tmp_path)
    assert cpuid_labels(result) == SPR_LABELLED
    assert result.features["cpuid"].origin == cpu.LIVE_FACTS_PATH


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", '{"family": "six"}', '{"flags": [1]}', b"\xff\x00"])
def test_bad_recorded_live_facts(tmp_path, content):
    put(tmp_path, cpu.LIVE_FACTS_PATH, content)
    result = run(tmp_path)
    assert any(e.path == cpu.LIVE_FACTS_PATH for e in result.errors) and not result.labels


# -- property: any cpuinfo text, no crash, only valid labels --------------------------------------
cpuinfo_lines = st.lists(st.one_of(
    st.sampled_from(["processor\t: 0", "vendor_id\t: GenuineIntel", "vendor_id\t: AuthenticAMD", "cpu family\t: 6",
                     "model\t\t: 143", "CPU implementer\t: 0x41", "CPU part\t: 0xd08", "CPU architecture: 8", ""]),
    st.builds(lambda k, v: f"{k}\t: {v}", st.sampled_from(["flags", "Features", "cpu family", "model", "CPU part",
                                                           "CPU implementer", "CPU variant", "siblings", "cpu cores"]),
              st.text(max_size=60)),
    st.text(max_size=80),
), max_size=20)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=cpuinfo_lines)
def test_any_cpuinfo_never_crashes_and_labels_are_valid(tmp_path_factory, lines):
    root = tmp_path_factory.mktemp("cpuinfo")
    put(root, "/proc/cpuinfo", "\n".join(lines).encode("utf-8", "surrogatepass"))
    result = run_source("cpu", HostFS(root), DiscoveryConfig())
    assert not [e for e in result.errors if "source failed" in e.message]
    assert not [e for e in result.errors if "dropped" in e.message]
    for key, value in result.labels.items():
        assert not qualified_name_errors(key) and not label_value_errors(value)
