"""Translate what Linux prints in ``/proc/cpuinfo`` into the names NFD labels CPUs with.

NFD reads CPUID itself (x86, through ``klauspost/cpuid`` ``FeatureSet()``) or the ELF hwcaps
(ARM).  We read the kernel's rendering of the same bits, so this module holds the one
translation table from Linux flag names (``arch/x86/include/asm/cpufeatures.h``) to
klauspost's ``FeatureID`` names, the hwcap names NFD uses on ARM, the psABI levels NFD adds as
``X86_64_V1..V4``, and klauspost's vendor names.  Pure functions, no I/O.

Flags whose klauspost bit Linux does not expose (``OSXSAVE`` is hidden from cpuinfo, for
example) are derived from the flag the kernel only shows when the bit is usable.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import chain

#: Linux x86 flag -> klauspost FeatureID name(s).  Only bits whose meaning is the same CPUID
#: bit (or one Linux sets only when that bit is set) are listed; unknown flags are ignored.
X86_FLAGS: Mapping[str, tuple[str, ...]] = {
    # CPUID 1 EDX / ECX
    "fpu": ("X87",), "cx8": ("CMPXCHG8",), "sep": ("SYSEE",), "cmov": ("CMOV",), "mmx": ("MMX",),
    "fxsr": ("FXSR",), "sse": ("SSE", "FXSROPT"),  # klauspost sets FXSROPT from the SSE bit too
    "sse2": ("SSE2",), "pni": ("SSE3",), "vmx": ("VMX",), "ssse3": ("SSSE3",), "sse4_1": ("SSE4",),
    "sse4_2": ("SSE42",), "aes": ("AESNI",), "pclmulqdq": ("CLMUL",), "movbe": ("MOVBE",),
    "popcnt": ("POPCNT",), "rdrand": ("RDRAND",), "hypervisor": ("HYPERVISOR",), "f16c": ("F16C",),
    "cx16": ("CX16",), "xsave": ("XSAVE", "OSXSAVE"),  # Linux hides osxsave; it shows xsave only when enabled
    "avx": ("AVX",), "fma": ("FMA3",),
    # CPUID 7.0 EBX / ECX / EDX
    "avx2": ("AVX2",), "bmi1": ("BMI1",), "bmi2": ("BMI2",), "sgx": ("SGX",), "hle": ("HLE",),
    "erms": ("ERMS",), "rtm": ("RTM",), "mpx": ("MPX",), "rdseed": ("RDSEED",), "adx": ("ADX",),
    "sha_ni": ("SHA",), "avx512f": ("AVX512F",), "avx512dq": ("AVX512DQ",), "avx512ifma": ("AVX512IFMA",),
    "avx512pf": ("AVX512PF",), "avx512er": ("AVX512ER",), "avx512cd": ("AVX512CD",), "avx512bw": ("AVX512BW",),
    "avx512vl": ("AVX512VL",), "avx512vbmi": ("AVX512VBMI",), "avx512_vbmi2": ("AVX512VBMI2",),
    "avx512_vnni": ("AVX512VNNI",), "avx512_bitalg": ("AVX512BITALG",),
    "avx512_vpopcntdq": ("AVX512VPOPCNTDQ",), "avx512_vp2intersect": ("AVX512VP2INTERSECT",),
    "avx512_fp16": ("AVX512FP16",), "avx512_bf16": ("AVX512BF16",), "waitpkg": ("WAITPKG",),
    "user_shstk": ("CETSS",), "shstk": ("CETSS",), "ibt": ("CETIBT",), "gfni": ("GFNI",), "vaes": ("VAES",),
    "vpclmulqdq": ("VPCLMULQDQ",), "tme": ("TME",), "cldemote": ("CLDEMOTE",), "movdiri": ("MOVDIRI",),
    "movdir64b": ("MOVDIR64B",), "enqcmd": ("ENQCMD",), "sgx_lc": ("SGXLC",), "fsrm": ("FSRM",),
    "srbds_ctrl": ("SRBDS_CTRL",), "md_clear": ("MD_CLEAR",), "rtm_always_abort": ("RTM_ALWAYS_ABORT",),
    "serialize": ("SERIALIZE",), "hybrid_cpu": ("HYBRID_CPU",), "tsxldtrk": ("TSXLDTRK",),
    "pconfig": ("PCONFIG",), "amx_bf16": ("AMXBF16",), "amx_tile": ("AMXTILE",), "amx_int8": ("AMXINT8",),
    "amx_fp16": ("AMXFP16",), "flush_l1d": ("FLUSH_L1D",), "arch_capabilities": ("IA32_ARCH_CAP",),
    "ibpb": ("IBPB",), "stibp": ("STIBP",),  # "ssbd": see x86_derived_flags
    # CPUID 7.1
    "avx_vnni": ("AVXVNNI",), "avx_ifma": ("AVXIFMA",), "cmpccxadd": ("CMPCCXADD",), "fzrm": ("MOVSB_ZL",),
    "fsrs": ("STOSB_SHORT",), "fsrc": ("CMPSB_SCADBS_SHORT",), "lam": ("LAM",), "wrmsrns": ("WRMSRNS",),
    "sm3": ("SM3_X86",), "sm4": ("SM4_X86",),  # 7.1 EAX[1,2]; Linux's x86 names (the ARM ones are another table)
    # CPUID 0xD.1
    "xsaveopt": ("XSAVEOPT",), "xsavec": ("XSAVEC",), "xgetbv1": ("XGETBV1",), "xsaves": ("XSAVES",),
    # CPUID 0x8000_0001 ECX / EDX
    "abm": ("LZCNT", "POPCNT"), "lahf_lm": ("LAHF",), "svm": ("SVM",), "sse4a": ("SSE4A",), "ibs": ("IBS",),
    "topoext": ("TOPEXT",), "xop": ("XOP",), "fma4": ("FMA4",), "tbm": ("TBM",), "syscall": ("SYSCALL",),
    "nx": ("NX",), "mmxext": ("MMXEXT",), "fxsr_opt": ("FXSROPT",), "rdtscp": ("RDTSCP",),
    "3dnowext": ("AMD3DNOWEXT",), "3dnow": ("AMD3DNOW",),
    # CPUID 0x8000_0007 / 0x8000_0008 / 0x8000_000A / 0x8000_001F (AMD)
    "overflow_recov": ("MCAOVERFLOW",), "succor": ("SUCCOR",), "cpb": ("CPBOOST",), "cppc": ("CPPC",),
    "amd_ppin": ("PPIN",), "psfd": ("PSFD",), "wbnoinvd": ("WBNOINVD",), "mcommit": ("MCOMMIT",), "rdpru": ("RDPRU",),
    "invlpgb": ("INVLPGB",), "clzero": ("CLZERO",), "npt": ("SVMNP",), "lbrv": ("LBRVIRT",),
    "svm_lock": ("SVML",), "nrip_save": ("NRIPS",), "tsc_scale": ("TSCRATEMSR",), "vmcb_clean": ("VMCBCLEAN",),
    "flushbyasid": ("SVMFBASID",), "decodeassists": ("SVMDA",), "pausefilter": ("SVMPF",),
    "pfthreshold": ("SVMPFT",), "sme": ("SME",), "sev": ("SEV",), "sev_es": ("SEV_ES",), "sev_snp": ("SEV_SNP",),
    "vm_page_flush": ("MSR_PAGEFLUSH",), "debug_swap": ("SEV_DEBUGSWAP",),
    # synthetic
    "tdx_guest": ("TDX_GUEST",),
    # py-cpuinfo's own spellings of the same bits (used only on the live fallback path)
    "osxsave": ("OSXSAVE",), "sha": ("SHA",), "rdrnd": ("RDRAND",),
}

#: klauspost only reports IBRS from AMD's 0x8000_0008 leaf; Linux sets ``ibrs`` on Intel too.
AMD_ONLY_FLAGS: Mapping[str, tuple[str, ...]] = {"ibrs": ("IBRS",)}

#: what :func:`nfd_flags` looks x86 flags up in on AMD and Hygon (X86_FLAGS wins where both name one)
_X86_AMD_FLAGS: Mapping[str, tuple[str, ...]] = {**AMD_ONLY_FLAGS, **X86_FLAGS}

#: psABI micro-architecture levels exactly as klauspost ``X64Level`` checks them (cumulative).
_LEVEL1 = frozenset({"CMOV", "CMPXCHG8", "X87", "FXSR", "MMX", "SSE", "SSE2"})
_LEVEL2 = _LEVEL1 | {"CX16", "LAHF", "POPCNT", "SSE3", "SSE4", "SSE42", "SSSE3"}
_LEVEL3 = _LEVEL2 | {"AVX", "AVX2", "BMI1", "BMI2", "F16C", "FMA3", "LZCNT", "MOVBE", "OSXSAVE"}
_LEVEL4 = _LEVEL3 | {"AVX512F", "AVX512BW", "AVX512CD", "AVX512DQ", "AVX512VL"}
X86_LEVELS = (_LEVEL1, _LEVEL2, _LEVEL3, _LEVEL4)

#: arm64 hwcap names as Linux prints them -> NFD's names (``source/cpu/cpuid_linux_arm64.go``).
ARM64_HWCAPS: Mapping[str, str] = {
    name: name.upper()
    for name in ["fp", "asimd", "evtstrm", "aes", "pmull", "sha1", "sha2", "crc32", "atomics", "fphp", "asimdhp", "cpuid", "asimdrdm", "jscvt", "fcma", "lrcpc", "dcpop", "sha3", "sm3", "sm4", "asimddp", "sha512", "sve", "asimdfhm", "dit", "uscat", "ilrcpc", "flagm", "ssbs", "sb", "paca", "pacg", "dcpodp", "sve2", "sveaes", "svepmull", "svebitperm", "svesha3", "svesm4", "flagm2", "frint", "svei8mm", "svef32mm", "svef64mm", "svebf16", "i8mm", "bf16", "dgh", "rng", "bti", "mte", "ecv", "afp", "rpres", "mte3", "sme", "smei16i64", "smef64f64", "smei8i32", "smef16f32", "smeb16f32", "smef32f32", "smefa64", "wfxt", "ebf16", "sveebf16"]
}

#: 32-bit ARM hwcap names (``cpuid_linux_arm.go``); note Linux's ``fastmult`` is NFD's FASTMUL.
ARM32_HWCAPS: Mapping[str, str] = {
    **{n: n.upper() for n in ["swp", "half", "thumb", "26bit", "fpa", "vfp", "edsp", "java", "iwmmxt", "crunch", "thumbee", "neon", "tls", "idiva", "idivt", "vfpd32", "lpae", "evtstrm", "aes", "pmull", "sha1", "sha2", "crc32"]},
    "fastmult": "FASTMUL", "vfpv3": "VFPv3", "vfpv3d16": "VFPv3D16", "vfpv4": "VFPv4",
}

#: s390x hwcaps as Linux prints them (``hwcap_str`` in arch/s390/kernel/processor.c) -> NFD's
#: names (``cpuid_linux_s390x.go``); NFD names the kernel's HWCAP_S390_HPAGE bit "EDAT" as Linux does.
S390_HWCAPS: Mapping[str, str] = {
    n: n.upper() for n in ["esan3", "zarch", "stfle", "msa", "ldisp", "eimm", "dfp", "edat", "etf3eh", "highgprs", "te", "vx", "vxd", "vxe", "gs", "vxe2", "vxp", "sort", "dflt", "vxp2", "nnpa", "pcimio", "sie"]
}

#: ppc64 AT_HWCAP / AT_HWCAP2 bits -> NFD's names (``cpuid_linux_ppc64le.go``, bit values from
#: the kernel's arch/powerpc/include/uapi/asm/cputable.h).  ppc cpuinfo prints no feature list;
#: these come from the auxiliary vector (agent.sources.cpu_ownproc).
PPC_HWCAP: Mapping[int, str] = {
    0x80000000: "PPC32", 0x40000000: "PPC64", 0x20000000: "PPC601", 0x10000000: "ALTIVEC", 0x08000000: "FPU",
    0x04000000: "MMU", 0x02000000: "4xxMAC", 0x01000000: "UCACHE", 0x00800000: "SPE", 0x00400000: "EFPFLOAT",
    0x00200000: "EFPDOUBLE", 0x00100000: "NOTB", 0x00080000: "POWER4", 0x00040000: "POWER5",
    0x00020000: "POWER5+", 0x00010000: "CELLBE", 0x00008000: "BOOKE", 0x00004000: "SMT", 0x00002000: "IC_SNOOP",
    0x00001000: "ARCH_2_05", 0x00000800: "PA6T", 0x00000400: "DFP", 0x00000200: "POWER6X", 0x00000100: "ARCH_2_06",
    0x00000080: "VSX", 0x00000040: "ARCHPMU", 0x00000002: "TRUE_LE", 0x00000001: "PPCLE",
}
PPC_HWCAP2: Mapping[int, str] = {
    0x80000000: "ARCH_2_07", 0x40000000: "HTM", 0x20000000: "DSCR", 0x10000000: "EBB", 0x08000000: "ISEL",
    0x04000000: "TAR", 0x02000000: "VCRYPTO", 0x01000000: "HTM-NOSC", 0x00800000: "ARCH_3_00",
    0x00400000: "IEEE128", 0x00200000: "DARN", 0x00100000: "SCV", 0x00080000: "HTM-NO-SUSPEND",
    0x00040000: "ARCH_3_1", 0x00020000: "MMA",
}

#: CPUID vendor string -> klauspost ``Vendor`` name (``vendorMapping`` in cpuid.go).
X86_VENDORS: Mapping[str, str] = {
    "AMDisbetter!": "AMD", "AuthenticAMD": "AMD", "CentaurHauls": "VIA", "GenuineIntel": "Intel",
    "TransmetaCPU": "Transmeta", "GenuineTMx86": "Transmeta", "Geode by NSC": "NSC", "VIA VIA VIA": "VIA",
    "HygonGenuine": "Hygon", "Vortex86 SoC": "SiS", "SiS SiS SiS": "SiS", "RiseRiseRise": "SiS",
    "Genuine  RDC": "RDC",  # Zhaoxin's "  Shanghai  " is not in klauspost's map: VendorUnknown
}
"""Keys without the padding spaces the 12-byte CPUID string may carry (cpuinfo shows them trimmed)."""

#: MIDR implementer byte -> klauspost ``Vendor`` name (os_linux_arm64.go).
ARM_IMPLEMENTERS: Mapping[int, str] = {
    0xC0: "Ampere", 0x41: "ARM", 0x42: "Broadcom", 0x43: "Cavium", 0x44: "DEC", 0x46: "Fujitsu",
    0x49: "Infineon", 0x4D: "Motorola", 0x4E: "NVIDIA", 0x50: "AMCC", 0x51: "Qualcomm", 0x56: "Marvell",
    0x69: "Intel",
}

UNKNOWN_VENDOR = "VendorUnknown"
"""What klauspost's ``Vendor.String()`` prints for a vendor it does not know (NFD labels it)."""


def nfd_flags(arch: str, raw_flags: list[str], vendor: str = "",
              fields: Mapping[str, str] | None = None) -> tuple[frozenset[str], list[str]]:
    """NFD's ``cpu.cpuid`` flags for the kernel's feature names, and the names NFD has no flag for.

    ``fields`` (the cpuinfo block) gives x86 family/model and thread counts for the flags
    klauspost derives rather than reads.  ppc64 flags come from hwcap bits instead
    (:func:`ppc_flags`); riscv64 and loongarch64 have none in NFD (its cpu source does not
    build for them, ``cpuid_stub.go``).
    """
    out: set[str] = set()
    unmapped: list[str] = []
    if arch == "x86":
        # X86_FLAGS first, AMD_ONLY_FLAGS for what it lacks on AMD and Hygon: looked up in C, one
        # table per vendor (a host prints some 130 flags)
        table = _X86_AMD_FLAGS if vendor in ("AMD", "Hygon") else X86_FLAGS
        names = list(map(table.get, raw_flags))
        out = set(chain.from_iterable(filter(None, names)))
        unmapped = [flag for flag, found in zip(raw_flags, names, strict=True)
                    if not found and flag not in ("ssbd", "virt_ssbd")]
        out = x86_derived_flags(out, set(raw_flags), vendor, fields or {})
    elif arch in ("arm64", "arm", "s390x"):
        hwcaps = {"arm64": ARM64_HWCAPS, "arm": ARM32_HWCAPS, "s390x": S390_HWCAPS}[arch]
        for flag in raw_flags:
            if flag in hwcaps:
                out.add(hwcaps[flag])
            else:
                unmapped.append(flag)
    return frozenset(out), unmapped


def ppc_flags(hwcap: int, hwcap2: int) -> frozenset[str]:
    """NFD's ppc64le flags: the names of the set AT_HWCAP / AT_HWCAP2 bits it knows."""
    return frozenset([name for bit, name in PPC_HWCAP.items() if hwcap & bit]
                     + [name for bit, name in PPC_HWCAP2.items() if hwcap2 & bit])


def _avx_slow(vendor: str, family: int | None, model: int | None) -> bool:
    """Intel family 6 before Haswell, AMD before Zen 2 (unknown family or model: not slow)."""
    if family is None or model is None:
        return False
    if vendor == "Intel":
        return family == 6 and model < 60
    return vendor == "AMD" and (family < 23 or (family == 23 and model < 49))


def _has_ssbd_bit(vendor: str, family: int | None, model: int | None) -> bool:
    """Where Linux's ``ssbd`` means the CPUID bit: Intel's and others' always, never Hygon's,
    AMD's 0x80000008 EBX[24] on family 17h from model 30h (Zen 2) and every later family."""
    if vendor == "Hygon":
        return False
    if vendor != "AMD":
        return True
    return family is not None and model is not None and (family > 0x17 or (family == 0x17 and model >= 0x30))


def _tsa_no(vendor: str, family: int | None, model: int | None) -> bool:
    """AMD not affected by TSA: before family 19h, and family 1Ah models 00h-4Fh and 60h-7Fh."""
    if vendor != "AMD" or family is None or model is None:
        return False
    return family < 0x19 or (family == 0x1A and (model <= 0x4F or 0x60 <= model <= 0x7F))


def x86_derived_flags(flags: set[str], raw: set[str], vendor: str, fields: Mapping[str, str]) -> set[str]:
    """Add and drop what klauspost ``support()`` derives instead of reading one CPUID bit.

    * ``AVXSLOW``: AVX on Intel family 6 before Haswell (model < 60) or AMD before Zen 2
      (family < 23, or 23 with model < 49).
    * ``SPEC_CTRL_SSBD``: klauspost reads Intel's CPUID 7.EDX[31] or AMD's 0x80000008
      EBX[24].  Linux prints the Intel bit as ``ssbd`` but hides AMD's, and also prints
      ``ssbd`` when it disables store bypass another way (the LS_CFG MSR on families
      15h-17h before Zen 2 and Hygon, or the VIRT_SSBD interface, shown as ``virt_ssbd``).
      So on AMD the bit is taken as set exactly where AMD's CPUs have it: family 17h from
      model 30h (Zen 2) and every later family, as the CPUID dumps in klauspost's own
      ``testdata/cpuid_data.zip`` show (none before, every one from there; no Hygon has it).
    * ``TSA_L1_NO``/``TSA_SQ_NO``: set outright on AMD before family 19h and on family 1Ah
      models 00h-4Fh and 60h-7Fh (AMD's TSA guidance); elsewhere they are CPUID 0x80000021
      ECX bits Linux does not print, so family 19h (Zen 3/4, affected) gets neither.
    * ``XOP``/``FMA4`` only with AVX; ``HTT`` only on Intel and AMD with more than one
      thread per core; the psABI levels ``X86_64_V1..V4``.
    """
    out = set(flags)
    family, model = _number(fields.get("cpu family", "")), _number(fields.get("model", ""))
    if "AVX" in out and _avx_slow(vendor, family, model):
        out.add("AVXSLOW")
    if "ssbd" in raw and "virt_ssbd" not in raw and _has_ssbd_bit(vendor, family, model):
        out.add("SPEC_CTRL_SSBD")
    if _tsa_no(vendor, family, model):
        out.update(("TSA_L1_NO", "TSA_SQ_NO"))
    if "AVX" not in out:
        out -= {"XOP", "FMA4"}
    if vendor in ("Intel", "AMD") and x86_htt(fields):
        out.add("HTT")
    out.update(x86_levels(out))
    return out


def _number(text: str) -> int | None:
    return int(text) if text.isascii() and text.isdigit() and len(text) < 10 else None


def x86_htt(fields: Mapping[str, str]) -> bool:
    """klauspost's HTT: the ``ht`` bit *and* more than one thread per core (vendor checked by the caller)."""
    if "ht" not in fields.get("flags", "").split():
        return False
    siblings, cores = fields.get("siblings", ""), fields.get("cpu cores", "")
    numbers = siblings.isascii() and siblings.isdigit() and cores.isascii() and cores.isdigit()  # not "²"
    return numbers and int(siblings) > int(cores)


def x86_levels(flags: set[str] | frozenset[str]) -> set[str]:
    """Cumulative ``X86_64_V1..V4`` as NFD adds them (requires SYSCALL or SYSENTER first)."""
    if not flags & {"SYSEE", "SYSCALL"}:
        return set()
    levels = set()
    for number, required in enumerate(X86_LEVELS, start=1):
        if not required <= flags:
            break
        levels.add(f"X86_64_V{number}")
    return levels


def x86_vendor(vendor_id: str) -> str:
    return X86_VENDORS.get(vendor_id.strip(), UNKNOWN_VENDOR)


def arm_model(fields: Mapping[str, str]) -> tuple[str, int, int]:
    """(vendor, family, id) as klauspost derives them from MIDR_EL1.

    ``Family = MIDR[23:16]`` (variant << 4 | architecture, which is 0xF on ARMv7+ CPUs that use
    the CPUID scheme) and ``Model = MIDR[15:0]`` (part << 4 | revision).  Raises ``ValueError``
    when a field is not a number.
    """
    implementer = int(fields["CPU implementer"], 0)
    variant = int(fields.get("CPU variant", "0"), 0)
    part = int(fields["CPU part"], 0)
    revision = int(fields.get("CPU revision", "0"), 0)
    if not (0 <= implementer <= 0xFF and 0 <= variant <= 0xF and 0 <= part <= 0xFFF and 0 <= revision <= 0xF):
        raise ValueError("MIDR field out of range")
    return ARM_IMPLEMENTERS.get(implementer, UNKNOWN_VENDOR), (variant << 4) | 0xF, (part << 4) | revision
