"""The cpu source on real recorded hosts, against labels derived by hand from NFD's code.

Each case under ``fixtures/sysfs/lscpu-*`` is a util-linux lscpu dump (see
``fixtures/recorded/README.md``); ``PYCPUINFO`` cases are py-cpuinfo's recorded cpuinfo texts.
The expected label sets below were written from the recorded files and NFD's rules, not from
this code's output: for x86 each Linux flag was looked up in klauspost/cpuid ``support()``
(the CPUID bit it reads, and what it derives), then NFD's default cpuid blacklist
(``source/cpu/cpu.go: newDefaultConfig``) was removed; on arm/arm64/s390x the hwcap names are
NFD's tables (``cpuid_linux_*.go``); the model labels follow ``getCPUModel`` (see
``agent/sources/cpu_model.py`` for the per-architecture rules and fixtures/recorded/README.md
for each case's derivation).
"""

from __future__ import annotations

import pytest

from agent.features import NFD_PREFIX
from agent.hostfs import HostFS
from agent.sources import cpu
from tests.conftest import FIXTURES

P = NFD_PREFIX + "cpu-"


def _model(vendor: str, family: str, ident: str, hypervisor: str) -> dict[str, str]:
    return {"model.vendor_id": vendor, "model.family": family, "model.id": ident, "model.hypervisor": hypervisor}


def _flags(names: str) -> dict[str, str]:
    return {f"cpuid.{n}": "true" for n in names.split()}


NOTHING_READ = _model("VendorUnknown", "0", "0", "none")

#: case -> (every cpu-* label, exactly; the cpu source's error messages)
EXPECTED: dict[str, tuple[dict[str, str], list[str]]] = {
    # AMD EPYC 7451 (family 23 model 1, Zen 1), two sockets, SMT; no hypervisor flag.
    # ssbd is printed (LS_CFG), but CPUID 0x80000008 EBX[24] is clear before Zen 2: no
    # SPEC_CTRL_SSBD; AVX on AMD family 23 model < 49: AVXSLOW; AMD before family 19h: klauspost
    # sets TSA_L1_NO and TSA_SQ_NO without reading CPUID (cpuid.go support(), v2.3.0).
    "lscpu-x86_64-epyc_7451": ({
        **_flags("ADX AESNI AVX AVX2 AVXSLOW CLZERO CMPXCHG8 CPBOOST FMA3 FXSR FXSROPT IBPB LAHF LBRVIRT "
                 "MCAOVERFLOW MOVBE NRIPS OSXSAVE SHA SSE4A SUCCOR SVM SVMDA SVMFBASID SVML SVMNP SVMPF SVMPFT "
                 "SYSCALL SYSEE TOPEXT TSA_L1_NO TSA_SQ_NO TSCRATEMSR VMCBCLEAN X87 XGETBV1 XSAVE XSAVEC XSAVEOPT XSAVES "
                 "X86_64_V1 X86_64_V2 X86_64_V3"),
        **_model("AMD", "23", "1", "none"), "hardware_multithreading": "true"}, []),
    # Intel Core i5 M 560 (Westmere, family 6 model 37): no AVX, so no AVXSLOW; psABI v2.
    "lscpu-x86_64-dell_e4310": ({
        **_flags("AESNI CMPXCHG8 FXSR FXSROPT LAHF SYSCALL SYSEE VMX X87 X86_64_V1 X86_64_V2"),
        **_model("Intel", "6", "37", "none"), "hardware_multithreading": "true"}, []),
    # Intel Tiger Lake laptop on Linux 6.2: AVX-512, Intel's SSBD bit, no IBRS flag (AMD-only in klauspost).
    "lscpu-x86_64-64cpu-linux6.2": ({
        **_flags("ADX AESNI AVX AVX2 AVX512BITALG AVX512BW AVX512CD AVX512DQ AVX512F AVX512IFMA AVX512VBMI "
                 "AVX512VBMI2 AVX512VL AVX512VNNI AVX512VP2INTERSECT AVX512VPOPCNTDQ CETIBT CMPXCHG8 FLUSH_L1D FMA3 "
                 "FSRM FXSR FXSROPT GFNI IA32_ARCH_CAP IBPB LAHF MD_CLEAR MOVBE MOVDIR64B MOVDIRI OSXSAVE SHA "
                 "SPEC_CTRL_SSBD STIBP SYSCALL SYSEE VAES VMX VPCLMULQDQ X87 XGETBV1 XSAVE XSAVEC XSAVEOPT XSAVES "
                 "X86_64_V1 X86_64_V2 X86_64_V3 X86_64_V4"),
        **_model("Intel", "6", "140", "none"), "hardware_multithreading": "true"}, []),
    # AMD Opteron 6328 (family 21, Piledriver): AVXSLOW, XOP/FMA4 with AVX, TSA_*_NO, no SSBD bit.
    "lscpu-vmware_fpe": ({
        **_flags("AESNI AVX AVXSLOW CMPXCHG8 CPBOOST FMA3 FMA4 FXSR FXSROPT IBPB IBS LAHF LBRVIRT NRIPS OSXSAVE "
                 "SSE4A SVM SVMDA SVMFBASID SVML SVMNP SVMPF SVMPFT SYSCALL SYSEE TBM TOPEXT TSA_L1_NO TSA_SQ_NO "
                 "TSCRATEMSR VMCBCLEAN X87 XOP XSAVE X86_64_V1 X86_64_V2"),
        **_model("AMD", "21", "2", "none"), "hardware_multithreading": "true"}, []),
    # arm64 big.LITTLE with the cpuid hwcap: MIDR of cpu0 (Cortex-A510 r1p1): 0x411FD461.
    "lscpu-arm-A510-A710-A715-X3": ({
        **_flags("FP ASIMD EVTSTRM AES PMULL SHA1 SHA2 CRC32 ATOMICS FPHP ASIMDHP CPUID ASIMDRDM JSCVT FCMA "
                 "LRCPC DCPOP SHA3 SM3 SM4 ASIMDDP SHA512 ASIMDFHM DIT USCAT ILRCPC FLAGM SSBS SB PACA PACG "
                 "DCPODP FLAGM2 FRINT I8MM BF16 BTI"),
        **_model("ARM", str(0x1F), str(0xD461), "none"), "hardware_multithreading": "false"}, []),
    # 32-bit ARM, Exynos 5 (Cortex-A15), the old layout: Features after the processor lines.
    "lscpu-armv7": ({
        **_flags("SWP HALF THUMB FASTMUL VFP EDSP THUMBEE NEON VFPv3 TLS VFPv4 IDIVA IDIVT"),
        **NOTHING_READ, "hardware_multithreading": "false"}, []),
    # s390x: pre-4.7 cpuinfo (ids only in "processor N: ..." lines, so family/id stay 0).
    "lscpu-s390-zvm": ({
        **_flags("ESAN3 ZARCH STFLE MSA LDISP EIMM DFP ETF3EH HIGHGPRS"),
        **_model("IBM_S390", "0", "0", "z_VM_6.1.0"), "hardware_multithreading": "false"}, []),
    "lscpu-s390-kvm": ({
        **_flags("ESAN3 ZARCH STFLE MSA LDISP EIMM DFP EDAT ETF3EH HIGHGPRS"),
        **_model("IBM_S390", "0", "0", "KVM_Linux"), "hardware_multithreading": "false"}, []),
    "lscpu-s390-lpar": ({
        **_flags("ESAN3 ZARCH STFLE MSA LDISP EIMM DFP ETF3EH HIGHGPRS"),
        **_model("IBM_S390", "0", "0", "none"), "hardware_multithreading": "false"}, []),
    # Nested: the first "Control Program:" line of /proc/sysinfo (KVM under z/VM) wins.
    "lscpu-s390-nested-virt": ({
        **_flags("ESAN3 ZARCH STFLE MSA LDISP EIMM DFP EDAT ETF3EH HIGHGPRS TE VX"),
        **_model("IBM_S390", "0", "0", "KVM_Linux"), "hardware_multithreading": "false"}, []),
    # POWER7, SMT4: no auxv in the recording, so no flags (and one error saying so).
    "lscpu-ppc64-POWER7": ({**NOTHING_READ, "hardware_multithreading": "true"},
                           ["missing; ppc64 cpuinfo has no feature list, so no cpu-cpuid flags"]),
    # POWER8E LE guest: hwcaps from the recorded LD_SHOW_AUXV listing (fixture README).
    "ppc64le-power8": ({
        **_flags("TRUE_LE ARCHPMU VSX ARCH_2_06 DFP IC_SNOOP SMT MMU FPU ALTIVEC PPC64 PPC32 "
                 "HTM-NOSC VCRYPTO TAR ISEL EBB DSCR HTM ARCH_2_07"), **NOTHING_READ,
        "hardware_multithreading": "false"}, []),
    "lscpu-rv64-visionfive2": ({**NOTHING_READ, "hardware_multithreading": "false"}, []),
    "lscpu-loongarch-loongson_3a5000_hv": ({**NOTHING_READ, "hardware_multithreading": "false"}, []),
}


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_recorded_host_gets_nfds_cpu_labels(case):
    root = FIXTURES / case
    assert (root / "proc/cpuinfo").is_file(), f"{case}: recording missing"
    result = cpu.discover(HostFS(root))
    labels, errors = EXPECTED[case]
    assert {k[len(P):]: v for k, v in result.labels.items()} == labels
    assert [e.message for e in result.errors] == errors


# py-cpuinfo's recorded /proc/cpuinfo texts (workhorsy/py-cpuinfo tests/, commit f3f0fec5)
RYZEN7_ZENPLUS_GUEST = (  # tests/test_linux_fedora_29_x86_64_ryzen_7.py: the lines the source reads
    "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 23\nmodel\t\t: 8\n"
    "model name\t: AMD Ryzen 7 2700X Eight-Core Processor\nsiblings\t: 8\ncpu cores\t: 8\n"
    "flags\t\t: fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse "
    "sse2 ht syscall nx mmxext fxsr_opt rdtscp lm constant_tsc rep_good nopl nonstop_tsc cpuid extd_apicid "
    "tsc_known_freq pni pclmulqdq ssse3 cx16 sse4_1 sse4_2 x2apic movbe popcnt aes xsave avx rdrand hypervisor "
    "lahf_lm cmp_legacy cr8_legacy abm sse4a misalignsse 3dnowprefetch cpb ssbd vmmcall fsgsbase avx2 rdseed "
    "clflushopt arat\n\n")
RASPBERRY_PI_MODEL_B = (  # tests/test_linux_raspberry_pi_model_b_arm.py (ARM1176, one block, no "processor")
    "Processor\t: ARMv6-compatible processor rev 7 (v6l)\nBogoMIPS\t: 697.95\n"
    "Features\t: swp half thumb fastmult vfp edsp java tls\nCPU implementer\t: 0x41\nCPU architecture: 7\n"
    "CPU variant\t: 0x0\nCPU part\t: 0xb76\nCPU revision\t: 7\n\nHardware\t: BCM2708\nRevision\t: 000d\n")


def test_zen_plus_guest_prints_ssbd_but_klauspost_would_not_set_spec_ctrl_ssbd(tmp_path):
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/cpuinfo").write_text(RYZEN7_ZENPLUS_GUEST)
    flags = cpu.discover(HostFS(tmp_path)).features["cpuid"].flags
    assert "SPEC_CTRL_SSBD" not in flags
    assert {"AVXSLOW", "AVX2", "HYPERVISOR", "X86_64_V2"} <= flags  # 23/8 < Zen 2; no bmi1/f16c/fma: not v3
    assert "X86_64_V3" not in flags


def test_raspberry_pi_model_b_single_block_arm(tmp_path):
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/cpuinfo").write_text(RASPBERRY_PI_MODEL_B)
    result = cpu.discover(HostFS(tmp_path))
    assert result.features["cpuid"].flags == {"SWP", "HALF", "THUMB", "FASTMUL", "VFP", "EDSP", "JAVA", "TLS"}
    assert {k[len(P):]: v for k, v in result.labels.items() if "model." in k} == NOTHING_READ


# -- layouts no recording above has -----------------------------------------------------------
def _auxv(order: str, word: int, entries: list[tuple[int, int]]) -> bytes:
    import struct

    fmt = f"{order}{'QQ' if word == 8 else 'II'}"
    return b"".join(struct.pack(fmt, k, v) for k, v in entries + [(0, 0)])


POWER9_HWCAP = 0xDC002000 | 0x00000080 | 0x00000100 | 0x00000400 | 0x00004000 | 0x00000040 | 0x00000002
"""PPC32 PPC64 ALTIVEC FPU MMU IC_SNOOP VSX ARCH_2_06 DFP SMT ARCHPMU TRUE_LE (bits of cputable.h)."""


@pytest.mark.parametrize("order,word", [("<", 8), (">", 8), ("<", 4)])
def test_ppc64_flags_come_from_the_auxiliary_vector_in_any_native_layout(tmp_path, order, word):
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/cpuinfo").write_text("processor\t: 0\ncpu\t\t: POWER9 (raw), altivec supported\n"
                                           "revision\t: 2.2 (pvr 004e 1202)\n\ntimebase\t: 512000000\n")
    (tmp_path / "proc/self/auxv").write_bytes(_auxv(order, word, [(33, 1), (16, POWER9_HWCAP), (6, 65536),
                                                                   (26, 0x80000000 | 0x00800000 | 0x00200000)]))
    result = cpu.discover(HostFS(tmp_path))
    assert not result.errors
    assert result.features["cpuid"].flags == {
        "PPC32", "PPC64", "ALTIVEC", "FPU", "MMU", "IC_SNOOP", "VSX", "ARCH_2_06", "DFP", "SMT", "ARCHPMU", "TRUE_LE",
        "ARCH_2_07", "ARCH_3_00", "DARN"}
    assert result.features["cpuid"].origin == "/proc/self/auxv"


def test_garbage_auxv_is_an_error_not_flags(tmp_path):
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/cpuinfo").write_text("processor\t: 0\ncpu\t\t: POWER8\nrevision\t: 2.1 (pvr 004d 0201)\n")
    (tmp_path / "proc/self/auxv").write_bytes(b"\xff" * 64)
    result = cpu.discover(HostFS(tmp_path))
    assert "cpuid" not in result.features
    assert [e.message for e in result.errors] == ["not an auxiliary vector (64 bytes); no cpu-cpuid flags"]


def test_s390x_since_linux_4_7_takes_machine_and_first_identification(tmp_path):
    """The per-CPU lines of arch/s390/kernel/processor.c show_cpu_ids(); NFD keys on them."""
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/cpuinfo").write_text(
        "vendor_id       : IBM/S390\n# processors    : 2\nbogomips per cpu: 3033.00\nmax thread id   : 0\n"
        "features\t: esan3 zarch stfle msa ldisp eimm dfp edat etf3eh highgprs te vx vxd vxe gs vxe2 vxp sort "
        "dflt sie\nprocessor 0: version = FF,  identification = 0133E8,  machine = 3906\n\n"
        "cpu number      : 0\nversion         : FF\nidentification  : 0133E8\nmachine         : 3906\n\n"
        "cpu number      : 1\nversion         : FF\nidentification  : 2133E8\nmachine         : 3906\n")
    (tmp_path / "proc/sysinfo").write_text("Manufacturer:         IBM\nType:                 3906\n")
    (tmp_path / "sys/firmware/uv").mkdir(parents=True)
    (tmp_path / "sys/firmware/uv/prot_virt_host").write_text("1\n")
    result = cpu.discover(HostFS(tmp_path))
    labels = {k[len(P):]: v for k, v in result.labels.items()}
    assert {k: v for k, v in labels.items() if k.startswith("model.")} == _model("IBM_S390", "0133E8", "3906", "none")
    assert {"cpuid.VXE2", "cpuid.VXP", "cpuid.SORT", "cpuid.DFLT", "cpuid.SIE", "cpuid.GS", "cpuid.TE"} <= set(labels)
    assert labels["security.se.enabled"] == "true"


def test_s390x_without_sysinfo_reports_no_hypervisor_and_says_why(tmp_path):
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/cpuinfo").write_text("vendor_id       : IBM/S390\nfeatures\t: esan3 zarch\n")
    result = cpu.discover(HostFS(tmp_path))
    assert P + "model.hypervisor" not in result.labels
    assert [e.message for e in result.errors] == ["missing; cpu-model.hypervisor not reported"]


def test_a_recording_never_borrows_the_replaying_machines_own_proc(tmp_path):
    """A regular-file cpuinfo is a recording: the test machine's own auxv must not leak in."""
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/cpuinfo").write_text("processor\t: 0\ncpu\t\t: POWER8\nrevision\t: 2.1 (pvr 004d 0201)\n")
    result = cpu.discover(HostFS(tmp_path))
    assert "cpuid" not in result.features
    assert "missing" in result.errors[0].message


@pytest.mark.parametrize("family,model,ssbd", [(0x15, 0x02, False), (0x17, 0x18, False), (0x17, 0x31, True),
                                               (0x17, 0x71, True), (0x19, 0x01, True), (0x1A, 0x44, True)])
def test_amd_spec_ctrl_ssbd_follows_the_cpus_that_have_cpuid_bit(tmp_path, family, model, ssbd):
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/cpuinfo").write_text(f"processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: {family}\n"
                                           f"model\t\t: {model}\nflags\t\t: fpu syscall sse sse2 avx ssbd\n\n")
    flags = cpu.discover(HostFS(tmp_path)).features["cpuid"].flags
    assert ("SPEC_CTRL_SSBD" in flags) is ssbd
    assert ("AVXSLOW" in flags) is (family < 23 or (family == 23 and model < 49))
    assert ("TSA_SQ_NO" in flags) is (family < 0x19 or family == 0x1A)  # 1Ah model 44h: not affected


@pytest.mark.parametrize("vendor,flags,expected", [("GenuineIntel", "ssbd", True), ("HygonGenuine", "ssbd", False),
                                                   ("AuthenticAMD", "ssbd virt_ssbd", False)])
def test_ssbd_by_vendor(tmp_path, vendor, flags, expected):
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/cpuinfo").write_text(f"processor\t: 0\nvendor_id\t: {vendor}\ncpu family\t: 25\n"
                                           f"model\t\t: 1\nflags\t\t: fpu syscall {flags}\n\n")
    assert ("SPEC_CTRL_SSBD" in cpu.discover(HostFS(tmp_path)).features["cpuid"].flags) is expected


# -- real boards (recordings published by their owners) ---------------------------------------
def _arm64_blocks(cpus: list[int], bogomips: str, features: str, variant: str, part: str, revision: str,
                  head: str = "") -> str:
    """The recorded blocks, which repeat verbatim but for the processor number."""
    return "".join(f"processor\t: {n}\n{head}BogoMIPS\t: {bogomips}\nFeatures\t: {features}\nCPU implementer\t: 0x41\n"
                   f"CPU architecture: 8\nCPU variant\t: {variant}\nCPU part\t: {part}\nCPU revision\t: {revision}\n\n"
                   for n in cpus)


#: Raspberry Pi 4 Model B Rev 1.1, Raspberry Pi OS kernel 6.12.47+rpt-rpi-v8 (aarch64):
#: wklteam64/wklteam64.github.io _posts/2025-09-30-Rpi4_qlcplus.md (commit 3e97de9f), `cat /proc/cpuinfo`
RASPBERRY_PI_4 = (_arm64_blocks([0, 1, 2, 3], "108.00", "fp asimd evtstrm crc32 cpuid", "0x0", "0xd08", "3")
                  + "Revision\t: c03111\nSerial\t\t: 10000000a43957f6\nModel\t\t: Raspberry Pi 4 Model B Rev 1.1\n")
#: NVIDIA Jetson TX2, L4T (kernel 4.4, before the arm64 cpuid hwcap), the Denver cores 1-2 offline:
#: kozyilmaz/nvidia-jetson-rt docs/README.05.results.md (commit 134fbc8d), `cat /proc/cpuinfo`
JETSON_TX2 = _arm64_blocks([0, 3, 4, 5], "62.50", "fp asimd evtstrm aes pmull sha1 sha2 crc32", "0x1", "0xd07", "3",
                           head="model name\t: ARMv8 Processor rev 3 (v8l)\n")


@pytest.mark.parametrize("text,flags,model", [
    # cpuid hwcap present: MIDR 0x410FD083 (Cortex-A72 r0p3) -> family 0x0F, id 0xD083
    (RASPBERRY_PI_4, "FP ASIMD EVTSTRM CRC32 CPUID", _model("ARM", "15", str(0xD083), "none")),
    # no cpuid hwcap: klauspost never reads MIDR (detect_arm64.go returns early)
    (JETSON_TX2, "FP ASIMD EVTSTRM AES PMULL SHA1 SHA2 CRC32", NOTHING_READ),
], ids=["raspberry-pi-4", "jetson-tx2"])
def test_real_arm64_boards(tmp_path, text, flags, model):
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/cpuinfo").write_text(text)
    result = cpu.discover(HostFS(tmp_path))
    labels = {k[len(P):]: v for k, v in result.labels.items()}
    assert labels == {**_flags(flags), **model}
    assert not result.errors


def test_own_proc_is_read_only_when_the_host_root_is_this_kernel(tmp_path):
    """In the DaemonSet /host/proc/cpuinfo is the host's procfs file (size 0): the agent's own
    /proc then holds the same kernel-wide facts.  Proven with a real bind mount of procfs."""
    import os
    import shutil
    import subprocess

    from agent.sources.cpu_ownproc import AUXV, kernel_file

    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("needs root and mount(8) to bind-mount /proc/cpuinfo (environment, not our code)")
    (tmp_path / "proc").mkdir()
    target = tmp_path / "proc/cpuinfo"
    target.write_text("")
    if subprocess.run(["mount", "--bind", "/proc/cpuinfo", str(target)], capture_output=True).returncode != 0:
        pytest.skip("bind mounts are not permitted here (environment, not our code)")
    try:
        data, where = kernel_file(HostFS(tmp_path), AUXV, 4096)
        with open("/proc/self/auxv", "rb") as own:
            assert data == own.read(4096)
        assert where == "/proc/self/auxv (own /proc)"
    finally:
        subprocess.run(["umount", str(target)], check=True)
    target.write_text("processor\t: 0\n")  # a recording: never the replaying machine's /proc
    assert kernel_file(HostFS(tmp_path), AUXV, 4096) == (None, AUXV)


def test_recorded_live_facts_of_another_architecture_are_not_read_as_x86(tmp_path):
    import json

    (tmp_path / ".node-feature-agent").mkdir()
    (tmp_path / ".node-feature-agent/cpu-live.json").write_text(
        json.dumps({"arch": "ppc64le", "vendor_id": "", "flags": ["altivec", "vsx", "fpu"]}))
    result = cpu.discover(HostFS(tmp_path))
    assert not result.labels
    assert "CPU facts for architecture 'ppc64le' not used" in [e.message for e in result.errors]


@pytest.mark.parametrize("vendor_id,expected", [("CentaurHauls", "VIA"), ("  Shanghai  ", "VendorUnknown"),
                                                ("HygonGenuine", "Hygon"), ("VIA VIA VIA ", "VIA")])
def test_x86_vendor_names_are_klauspost_vendor_mapping(tmp_path, vendor_id, expected):
    """cpuid.go vendorMapping: Zhaoxin's "  Shanghai  " is absent there, so NFD says VendorUnknown."""
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/cpuinfo").write_text(f"processor\t: 0\nvendor_id\t: {vendor_id}\ncpu family\t: 7\n"
                                           f"model\t\t: 59\nflags\t\t: fpu sse sse2\n\n")
    assert cpu.discover(HostFS(tmp_path)).labels[P + "model.vendor_id"] == expected


@pytest.mark.parametrize(("sysinfo", "message"), [
    ("", "incomplete: empty; cpu-model.hypervisor not reported"),
    ("Manufacturer:         IBM\nType:  ", "incomplete: cut mid-line (no final newline); cpu-model.hypervisor not reported"),
])
def test_s390x_sysinfo_not_whole_leaves_the_model_undetermined(tmp_path, sysinfo, message):
    """The Control Program line may be the part not read: no hypervisor is guessed."""
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/cpuinfo").write_text("vendor_id       : IBM/S390\nfeatures\t: esan3 zarch\n")
    (tmp_path / "proc/sysinfo").write_text(sysinfo)
    result = cpu.discover(HostFS(tmp_path))
    assert P + "model.hypervisor" not in result.labels
    assert [(e.path, e.message) for e in result.errors] == [("/proc/sysinfo", message)]
    assert result.undetermined["model"] == (P + "model.*",)


def test_a_cut_auxiliary_vector_leaves_the_ppc64_flags_undetermined(tmp_path):
    """The kernel ends the vector with AT_NULL: entries without it are a vector cut short."""
    import struct

    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/cpuinfo").write_text("processor\t: 0\ncpu\t\t: POWER8\nrevision\t: 2.1 (pvr 004d 0201)\n")
    whole = struct.pack("<8Q", 6, 65536, 16, 0xDC0065C2, 26, 0xEE000000, 0, 0)  # AT_PAGESZ, AT_HWCAP(2), AT_NULL
    (tmp_path / "proc/self/auxv").write_bytes(whole)
    assert P + "cpuid.ALTIVEC" in cpu.discover(HostFS(tmp_path)).labels
    for cut in (whole[:-16], whole[:20], b""):
        (tmp_path / "proc/self/auxv").write_bytes(cut)
        result = cpu.discover(HostFS(tmp_path))
        assert [e.path for e in result.errors] == ["/proc/self/auxv"]
        assert result.errors[0].message.startswith("incomplete: no AT_NULL")
        assert result.undetermined["cpuid"] == (P + "cpuid.*",) and "cpuid" not in result.features
