"""Fuzz the cpu source: /proc/cpuinfo (x86, ARM, s390x, ppc64, riscv64 and loongarch layouts,
flags), the auxiliary vector and /proc/sysinfo, the recorded live-facts JSON, and the sysfs
files behind cstate, pstate, security, topology and hypervisor."""

from __future__ import annotations

import json
import struct

from hypothesis import given
from hypothesis import strategies as st

from agent.hostfs import HostFS
from agent.sources import cpu
from agent.sources.cpu_cpuinfo import ARCHES, cpulist_count, parse_cpuinfo, processor_count
from agent.sources.cpu_flags import ARM32_HWCAPS, ARM64_HWCAPS, S390_HWCAPS, X86_FLAGS
from agent.sources.cpu_live import LIVE_FACTS_PATH
from agent.sources.cpu_ownproc import AuxvError, parse_auxv
from tests.conftest import FIXTURES
from tests.fuzz.hosttree import JUNK_BYTES, ODD_DIGITS, fuzz, host_tree, huge, merge, slot, slots, value_bytes
from tests.fuzz.properties import check_source

FLAG_NAMES = (sorted(X86_FLAGS) + sorted(ARM64_HWCAPS) + sorted(ARM32_HWCAPS) + sorted(S390_HWCAPS)
              + ["ht", "ibrs", "cqm", "cat_l3", "mba", "ssbd", "virt_ssbd"])
KEYS = ["processor", "vendor_id", "cpu family", "model", "model name", "flags", "Features", "CPU implementer",
        "CPU architecture", "CPU variant", "CPU part", "CPU revision", "siblings", "cpu cores", "BogoMIPS"]
NUMBERS = ["0", "6", "25", "143", "0x41", "0xd08", "0x1", "8", "7", "-1", "0x100", "1e3", "", "99999999999", "0xzz"] + ODD_DIGITS
VENDORS = ["GenuineIntel", "AuthenticAMD", "HygonGenuine", "  GenuineIntel  ", "Martian", ""]

FLAG_LINE = st.lists(st.one_of(st.sampled_from(FLAG_NAMES), st.text(min_size=1, max_size=8)), max_size=40).map(" ".join)
VALUE = st.one_of(st.sampled_from(NUMBERS), st.sampled_from(VENDORS), st.text(max_size=20))
LINE = st.one_of(
    st.tuples(st.sampled_from(KEYS), st.sampled_from(["\t: ", ": ", ":", " : "]), VALUE).map("".join),
    st.tuples(st.sampled_from(["flags", "Features"]), st.just("\t: "), FLAG_LINE).map("".join),
    st.text(max_size=30),
    st.just(""),
)
X86_BLOCK = st.tuples(st.sampled_from(VENDORS), st.sampled_from(NUMBERS), st.sampled_from(NUMBERS), FLAG_LINE,
                      st.sampled_from(NUMBERS), st.sampled_from(NUMBERS)).map(
    lambda t: f"processor\t: 0\nvendor_id\t: {t[0]}\ncpu family\t: {t[1]}\nmodel\t\t: {t[2]}\n"
              f"siblings\t: {t[4]}\ncpu cores\t: {t[5]}\nflags\t\t: {t[3]}\n")
ARM_BLOCK = st.tuples(st.sampled_from(NUMBERS), st.sampled_from(NUMBERS), st.sampled_from(NUMBERS),
                      st.sampled_from(NUMBERS), st.sampled_from(["8", "7", "6", "5TEJ", "AArch64", ""]), FLAG_LINE).map(
    lambda t: f"processor\t: 0\nFeatures\t: {t[5]}\nCPU implementer\t: {t[0]}\nCPU architecture: {t[4]}\n"
              f"CPU variant\t: {t[1]}\nCPU part\t: {t[2]}\nCPU revision\t: {t[3]}\n")
S390_IDS = st.one_of(st.sampled_from(["0", "279F25", "3906", "", "FF", "a/b c", "-x-"] + ODD_DIGITS), st.text(max_size=12))
S390_BLOCK = st.tuples(st.sampled_from(["IBM/S390", "", "IBM / S390 !"]), FLAG_LINE, S390_IDS, S390_IDS).map(
    lambda t: f"vendor_id       : {t[0]}\n# processors    : 2\nfeatures\t: {t[1]}\n"
              f"processor 0: version = FF,  identification = {t[2]},  machine = {t[3]}\n\n"
              f"cpu number      : 0\nidentification  : {t[2]}\nmachine         : {t[3]}\n")
OTHER_BLOCK = st.sampled_from([
    "processor\t: 0\ncpu\t\t: POWER9 (raw), altivec supported\nrevision\t: 2.2 (pvr 004e 1202)\n",
    "processor\t: 0\nhart\t\t: 1\nisa\t\t: rv64imafdc_zicsr\nmmu\t\t: sv39\n",
    ("system type\t\t: generic-loongson-machine\n\nprocessor\t\t: 0\nCPU Family\t\t: Loongson-64bit\n"
     "ISA\t\t\t: loongarch32 loongarch64\nFeatures\t\t: cpucfg lam ual fpu lsx lasx\n"),
    ("Processor\t: ARMv7 Processor rev 4 (v7l)\nprocessor\t: 0\nprocessor\t: 1\n\nFeatures\t: neon vfpv4 idiva\n"
     "CPU implementer\t: 0x41\nCPU architecture: 7\nCPU part\t: 0xc0f\n"),
])
RANDOM_BLOCK = st.lists(LINE, max_size=12).map("\n".join)
CPUINFO = st.one_of(
    st.tuples(st.sampled_from(["", "\n", "\n\n"]),
              st.lists(st.one_of(X86_BLOCK, ARM_BLOCK, S390_BLOCK, OTHER_BLOCK, RANDOM_BLOCK), min_size=1, max_size=3))
    .map(lambda t: (t[0] + "\n".join(t[1])).encode()),
    st.tuples(X86_BLOCK, JUNK_BYTES).map(lambda t: t[0].encode() + t[1]),         # junk after the first block
    st.tuples(JUNK_BYTES, X86_BLOCK).map(lambda t: t[0] + t[1].encode()),         # junk inside the first block
    st.binary(max_size=200),
    huge(b"flags\t: sse "),                                                      # one absurd block
    st.just(b"flags\t: " + b"avx2 " * 60000 + b"\n\n"),
)

JSON_VALUE = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                          lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
                          max_leaves=8)
FACTS = st.fixed_dictionaries({}, optional={
    "arch": st.sampled_from(["X86_64", "aarch64", "ARM_8", "armv7l", "riscv"]) | JSON_VALUE,
    "vendor_id": st.sampled_from(VENDORS) | JSON_VALUE,
    "family": st.integers(-5, 300) | JSON_VALUE, "model": st.integers(-5, 300) | JSON_VALUE,
    "flags": st.lists(st.sampled_from(FLAG_NAMES), max_size=20) | JSON_VALUE,
})
LIVE_FACTS = st.one_of(
    FACTS.map(lambda d: json.dumps(d).encode()),
    JSON_VALUE.map(lambda v: json.dumps(v).encode()),
    st.integers(1, 70000).map(lambda n: b"[" * n),                 # nesting bomb
    st.integers(1, 70000).map(lambda n: b'{"a":' * n),
    JUNK_BYTES, st.binary(max_size=40),
)

CPU = "/sys/devices/system/cpu"
SYSFS = slots({
    f"{CPU}/cpuidle/current_driver": value_bytes(["intel_idle", "acpi_idle", "none"]),
    "/sys/module/intel_idle/parameters/max_cstate": value_bytes(["0", "9", "-1", "x"]),
    f"{CPU}/intel_pstate/status": value_bytes(["active", "passive", "off", "weird value!", "a" * 70]),
    f"{CPU}/intel_pstate/no_turbo": value_bytes(["0", "1", ""]),
    f"{CPU}/cpufreq/policy0/affected_cpus": value_bytes(["0", "0 1", ""]),
    f"{CPU}/cpufreq/policy0/scaling_governor": value_bytes(["performance", "powersave", "bad gov"]),
    f"{CPU}/cpufreq/policy1/affected_cpus": value_bytes(["1", ""]),
    f"{CPU}/cpufreq/policy1/scaling_governor": value_bytes(["performance", "schedutil"]),
    "/sys/devices/system/node/node0/x86/sgx_total_bytes": value_bytes(["0", "4096", "-5", "1" * 30]),
    "/sys/module/kvm_intel/parameters/tdx": value_bytes(["Y", "N"]),
    "/sys/module/kvm_amd/parameters/sev": value_bytes(["1", "Y", "0", "N"]),
    "/sys/module/kvm_amd/parameters/sev_es": value_bytes(["1", "Y", "0"]),
    "/sys/module/kvm_amd/parameters/sev_snp": value_bytes(["1", "Y", "0"]),
    "/sys/fs/cgroup/misc.capacity": value_bytes(["sev 509\nsev_es 99\ntdx 31", "sev x", "tdx \u00b2", "sev"]),
    "/sys/hypervisor/type": value_bytes(["xen", "kvm"]),
    "/sys/devices/system/clocksource/clocksource0/available_clocksource":
        value_bytes(["tsc kvm-clock acpi_pm", "hyperv_clocksource_tsc_page", "xen", "tsc"]),
    "/sys/devices/virtual/dmi/id/sys_vendor": value_bytes(["QEMU", "VMware, Inc.", "Amazon EC2", "Dell Inc."]),
    "/sys/bus/cpu/devices/cpu0/topology/thread_siblings_list": value_bytes(["0", "0,4", "0-1"]),
    "/sys/bus/cpu/devices/cpu0/topology/physical_package_id": value_bytes(["0", "1"]),
    "/sys/bus/cpu/devices/cpu1/topology/thread_siblings_list": value_bytes(["1", "1,5"]),
    "/sys/bus/cpu/devices/cpu1/topology/physical_package_id": value_bytes(["0", "1"]),
})
WRONG_KIND = st.lists(st.sampled_from([
    "/sys/bus/cpu/devices", "/sys/devices/system/node", f"{CPU}/cpufreq", f"{CPU}/intel_pstate",
    "/sys/bus/cpu/devices/cpu0", "/sys/bus/cpu/devices/cpu0/topology", "/sys/devices/system/node/node0",
]), max_size=2, unique=True).map(lambda paths: dict.fromkeys(paths, ("file", b"0\n")))

AUXV = st.one_of(
    st.lists(st.tuples(st.integers(0, 70), st.integers(0, 2**64 - 1)), max_size=12).flatmap(
        lambda pairs: st.sampled_from(["<QQ", ">QQ", "<II", ">II"]).map(
            lambda fmt: b"".join(struct.pack(fmt, k, v % (2 ** (64 if "Q" in fmt else 32))) for k, v in pairs))),
    st.binary(max_size=64), JUNK_BYTES,
)
SYSINFO = value_bytes(["VM00 Control Program: z/VM    7.1.0", "VM00 Control Program: KVM/Linux",
                       "VM00 Control Program:", "Control Program: //", "LPAR Name: X"])
OWN_PROC = slots({"/proc/self/auxv": AUXV, "/proc/sysinfo": SYSINFO,
                  "/sys/firmware/uv/prot_virt_host": value_bytes(["1", "0"]),
                  "/sys/devices/vio/ibm,compression-v1/nx_gzip_caps": value_bytes(["x"])})

CONFIGS = st.builds(cpu.Config, cpuid_attribute_whitelist=st.sampled_from([(), ("AVX2", "SSE"), ("NOPE",)]))


@st.composite
def cpu_tree(draw) -> dict:
    spec = draw(slot("/proc/cpuinfo", CPUINFO, weight_file=12))
    if draw(st.booleans()):
        spec.update(draw(slot(LIVE_FACTS_PATH, LIVE_FACTS)))
    if draw(st.booleans()):
        spec.update(draw(SYSFS))
    if draw(st.booleans()):
        spec.update(draw(OWN_PROC))
    return merge(spec, draw(WRONG_KIND))


@fuzz(400)
@given(spec=cpu_tree(), config=CONFIGS)
def test_cpu_source_survives_any_tree(spec, config):
    with host_tree(spec) as root:
        # pstate status / scaling_governor are host text copied into values: discovery drops
        # the invalid ones with an error (checked), so the source itself is not strict
        result = check_source("cpu", root, config, strict=False)
    cpuinfo = spec.get("/proc/cpuinfo", ("missing",))
    s390 = cpuinfo[0] == "file" and parse_cpuinfo(cpuinfo[1].decode("utf-8", "replace")).arch == "s390x"
    for key, value in result.labels.items():  # s390x family/id are cpuinfo text, as NFD copies it
        if ".cpuid." in key or (key.endswith(("model.family", "model.id")) and not s390):
            assert value == "true" or value.isdigit(), (key, value)


@fuzz(300)
@given(text=st.text(max_size=400))
def test_parse_first_block_total(text):
    """Pure parser: any text gives a block whose fields come from the text's first block."""
    block = parse_cpuinfo(text)
    assert block.arch in ("",) + ARCHES
    for key, value in block.fields.items():
        assert key == key.strip() and value == value.strip()


@fuzz(300)
@given(data=st.one_of(AUXV, st.binary(max_size=300)))
def test_parse_auxv_total(data):
    """Any bytes: a dict of small AT_* types with AT_PAGESZ a power of two, or AuxvError."""
    try:
        vector = parse_auxv(data)
    except AuxvError:
        return
    assert all(0 < kind < 64 for kind in vector)
    page = vector[6]
    assert page > 0 and page & (page - 1) == 0


#: real cpuinfo files with the online list of the same host (x86 8 CPUs, arm64, s390x-free: its
#: recordings have no sysfs), for the cut property below
WHOLE_HOSTS = ("coral-usb", "raspberry-pi-4", "amd-gpu")


def _whole(name: str) -> tuple[bytes, bytes]:
    tree = FIXTURES / name
    return (tree / "proc/cpuinfo").read_bytes(), (tree / "sys/devices/system/cpu/online").read_bytes()


def _cpu_result(cpuinfo: bytes, online: bytes):
    with host_tree({"/proc/cpuinfo": ("file", cpuinfo), cpu.CPUS_ONLINE: ("file", online)}) as root:
        return cpu.discover(HostFS(root))


@fuzz(300)
@given(host=st.sampled_from(WHOLE_HOSTS), cut=st.floats(0, 1, exclude_max=True))
def test_a_cut_cpuinfo_never_decides_other_labels(host, cut):
    """Any prefix of a real cpuinfo (a copy or read cut short) either decides exactly what
    the whole file does or leaves every feature computed from it undetermined: a cut never
    removes a label as a decided answer."""
    text, online = _whole(host)
    whole = _cpu_result(text, online)
    assert not whole.errors and not whole.undetermined
    result = _cpu_result(text[:int(len(text) * cut)], online)
    if result.undetermined:
        assert {k: v for k, v in result.undetermined.items() if k in cpu.FROM_CPUINFO} == dict(cpu.FROM_CPUINFO)
        assert [e.path for e in result.errors] == ["/proc/cpuinfo"]
        assert result.errors[0].message.startswith("incomplete: ")
    else:
        assert result.labels == whole.labels and result.features == whole.features


@fuzz(300)
@given(ranges=st.lists(st.tuples(st.integers(0, 4096), st.integers(0, 64)), max_size=8))
def test_cpulist_count_counts_the_cpus_named(ranges):
    """A list in the kernel's format gives the number of CPUs it names; any other text is
    ``None`` or a count, never an exception."""
    text = ",".join(f"{a}-{a + n}" if n else str(a) for a, n in ranges)
    assert cpulist_count(text + "\n") == sum(n + 1 for _, n in ranges)


@fuzz(300)
@given(text=st.text(max_size=200))
def test_cpuinfo_counters_are_total(text):
    count = cpulist_count(text)
    assert count is None or count >= 0
    assert 0 <= processor_count(text) <= text.count("\n") + 1
