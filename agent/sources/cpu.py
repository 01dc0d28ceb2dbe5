"""cpu source: NFD's ``cpu.*`` features and ``cpu-*`` labels, derived from files.

NFD executes CPUID (x86) or reads its own ELF hwcaps (arm, arm64, ppc64le, s390x); we read
the kernel's account of the same bits through the host seam, so a recorded tree replays
exactly: ``/proc/cpuinfo`` in every architecture's layout (:mod:`agent.sources.cpu_cpuinfo`),
the auxiliary vector on ppc64le and ``/proc/sysinfo`` on s390x (:mod:`agent.sources.cpu_ownproc`).
Names are translated in :mod:`agent.sources.cpu_flags`, ``cpu.model`` is built in
:mod:`agent.sources.cpu_model`, the sysfs-based features in :mod:`agent.sources.cpu_sysfs`; py-cpuinfo is only a live-host fallback
(:mod:`agent.sources.cpu_live`).  Not derivable from files, hence absent: ``AVX10_VERSION``,
``cpu.sst`` (needs CPUID leaf 0x16), ``RDTL3CA_NUM_CLOSID`` (needs resctrl mounted) and
the x86 flags of CPUID bits Linux does not print (``fixtures/recorded/README.md`` lists them).
riscv64 and loongarch64 get the model NFD's code gives where nothing is read
(``VendorUnknown``) and no cpuid flags: NFD's cpu source does not build for them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from agent.features import ElementNames, Feature, SourceResult, nfd_label
from agent.hostfs import HostFileError, HostFS, IncompleteFile
from agent.sources.cpu_arm32 import arm32_attributes
from agent.sources.cpu_config import Config
from agent.sources.cpu_cpuinfo import CpuInfoBlock, cpulist_count, parse_cpuinfo, processor_count
from agent.sources.cpu_flags import nfd_flags, ppc_flags, x86_vendor
from agent.sources.cpu_live import LIVE_FACTS_PATH, LiveFactsError, facts_as_block, facts_for, live_cpu_facts
from agent.sources.cpu_model import model_attributes
from agent.sources.cpu_ownproc import AT_HWCAP, AT_HWCAP2, AUXV, AuxvCut, AuxvError, kernel_file, parse_auxv
from agent.sources.cpu_sysfs import (
    CPU_SYSFS,
    NX_GZIP_CAPS,
    CpuProbe,
    coprocessor,
    cstate,
    pstate,
    rdt,
    security,
    topology,
)

NAME = "cpu"
FEATURES: Mapping[str, ElementNames] = {
    "cpuid": None,  # CPUID flag names (and NFD's AVX10_VERSION attribute)
    "model": frozenset({"vendor_id", "family", "id", "hypervisor"}),
    "cstate": frozenset({"enabled"}),
    "pstate": frozenset({"status", "turbo", "scaling_governor"}),
    "rdt": frozenset({"RDTMON", "RDTCMT", "RDTMBM", "RDTL3CA", "RDTL2CA", "RDTMBA", "RDTL3CA_NUM_CLOSID"}),
    "security": frozenset({"sgx.enabled", "sgx.epc", "tdx.enabled", "tdx.total_keys", "tdx.protected",
                           "sev.enabled", "sev.asids", "sev.es.enabled", "sev.encrypted_state_ids",
                           "sev.snp.enabled", "se.enabled"}),
    "sst": frozenset({"bf.enabled"}),  # NFD's; never discovered here (see above), declared so its rules validate
    "topology": frozenset({"hardware_multithreading", "socket_count"}),
    "coprocessor": frozenset({"nx_gzip"}),
    "arm32": frozenset({"variant"}),  # ours: agent.sources.cpu_arm32
}
"""The features this source can produce and their element names (``agent.features.ElementNames``)."""
__all__ = ["FEATURES", "LIVE_FACTS_PATH", "NAME", "Config", "discover", "live_cpu_facts"]

log = logging.getLogger(__name__)

CPUINFO = "/proc/cpuinfo"
#: security counters NFD keeps for extended resources and never labels (source/cpu/cpu.go)
UNLABELLED_SECURITY = frozenset({"tdx.total_keys", "sgx.epc", "sev.encrypted_state_ids", "sev.asids"})
_CPUINFO_READ_LIMIT = 256 * 1024  # a processor block is a few KiB even with every flag
#: layouts without a feature line: ppc64 (flags from auxv), riscv64 and loongarch64 (none in NFD)
_NO_FLAG_LINE = ("ppc64", "riscv64", "loongarch64")
#: the CPUs whose processor lines /proc/cpuinfo prints: the online ones (x86 ``c_start`` steps
#: through ``cpu_online_mask``, arch/x86/kernel/cpu/proc.c; arm64 ``c_show`` loops
#: ``for_each_online_cpu``, arch/arm64/kernel/cpuinfo.c; s390 ``show_cpu_summary`` likewise,
#: arch/s390/kernel/processor.c), in the cpulist format of Documentation/ABI/testing/sysfs-devices-system-cpu
CPUS_ONLINE = "/sys/devices/system/cpu/online"
#: features computed from cpuinfo's text, and the label keys each gives: undetermined together
#: when cpuinfo could not be read whole
FROM_CPUINFO: Mapping[str, tuple[str, ...]] = {
    "cpuid": (nfd_label(NAME, "cpuid.*"),), "model": (nfd_label(NAME, "model.*"),), "rdt": (),
    "security": (nfd_label(NAME, "security.*"),), "coprocessor": (nfd_label(NAME, "coprocessor.*"),), "arm32": ()}


_DEFAULT_CONFIG = Config()


def discover(host: HostFS, config: Config = _DEFAULT_CONFIG) -> SourceResult:
    probe = CpuProbe(host)
    block, origin, unread = _cpuinfo_block(probe)
    if unread:  # every feature computed from cpuinfo's text is unknown this pass, not absent
        probe.undetermined.update(FROM_CPUINFO)
    features: dict[str, Feature] = {}
    labels: dict[str, str] = {}
    origins: dict[str, str] = {}

    arch = block.arch
    vendor = x86_vendor(block.fields.get("vendor_id", "")) if arch == "x86" else ""
    flags, unmapped = nfd_flags(arch, block.raw_flags, vendor, block.fields)
    if arch == "ppc64":
        flags, flags_origin = _ppc_hwcaps(probe)
    else:
        flags_origin = origin
        if block.fields and arch in ("x86", "arm64", "arm", "s390x") and not flags:
            probe.error(origin, "no CPU flags found")
    if unmapped:
        log.debug("cpuinfo flags without an NFD name: %s", " ".join(unmapped))
    if flags:
        features["cpuid"] = Feature(flags=flags, origin=flags_origin)
        prefix = nfd_label(NAME, "cpuid.")
        for flag in config.labelled_cpuid_flags(sorted(flags)):
            labels[prefix + flag] = "true"
            origins[prefix + flag] = flags_origin
    _, model_attrs = model_attributes(probe, block, origin, flags)
    if model_attrs:
        features["model"] = Feature(attributes=model_attrs, origin=origin)
        for key, value in model_attrs.items():
            _put(labels, origins, f"model.{key}", value, origin)

    _sysfs_features(probe, arch, flags, block, origin, features, labels, origins)
    arm32, arm32_origin = arm32_attributes(probe, block, origin)
    if arm32 is None:
        probe.undetermined["arm32"] = ()
    elif arm32:
        features["arm32"] = Feature(attributes=arm32, origin=arm32_origin)
    return SourceResult(NAME, features, labels, probe.errors, origins, probe.undetermined)


def _sysfs_features(probe: CpuProbe, arch: str, flags: frozenset[str], block: CpuInfoBlock, origin: str,
                    features: dict[str, Feature], labels: dict[str, str], origins: dict[str, str]) -> None:
    """NFD's sysfs-based cpu features into ``features`` and their labels; a feature whose read
    failed is undetermined (``probe.undetermined``), with the labels it gives."""
    collectors: tuple[tuple[str, Callable[[], dict[str, str] | None], str, str], ...] = (
        ("cstate", lambda: cstate(probe), f"{CPU_SYSFS}/cpuidle", "cstate.*"),
        ("pstate", lambda: pstate(probe), f"{CPU_SYSFS}/intel_pstate", "pstate.*"),
        ("security", lambda: security(probe, arch, flags), "/sys/module", "security.*"),
        ("topology", lambda: topology(probe), "/sys/bus/cpu/devices", "hardware_multithreading"),
        ("rdt", lambda: rdt(arch, block.raw_flags), origin, ""),
        ("coprocessor", lambda: coprocessor(probe, arch), NX_GZIP_CAPS, "coprocessor.*"))
    for name, collect, path, decides in collectors:
        with probe.deciding(name, nfd_label(NAME, decides)):
            attrs = collect()
        if attrs is None:  # topology, a read failed: unknown this pass, not absent (a caller keeps its last answer)
            probe.undetermined[name] = (nfd_label(NAME, decides),)
            continue
        if not attrs:
            continue
        features[name] = Feature(attributes=attrs, origin=path)
        for key, value in attrs.items():
            if name == "topology":
                if key == "hardware_multithreading":
                    _put(labels, origins, key, value, path)
            elif name == "coprocessor":
                _put(labels, origins, f"coprocessor.{key}", value, path)
            elif name == "rdt" or (name == "security" and key in UNLABELLED_SECURITY):
                continue
            else:
                _put(labels, origins, f"{name}.{key}", value, path)


def _put(labels: dict[str, str], origins: dict[str, str], key: str, value: str, origin: str) -> None:
    labels[nfd_label(NAME, key)] = value
    origins[nfd_label(NAME, key)] = origin


def _cpuinfo_block(probe: CpuProbe) -> tuple[CpuInfoBlock, str, bool]:
    """The parsed /proc/cpuinfo or, failing that, recorded/live facts; and whether cpuinfo is
    there but could not be read whole (unreadable, or incomplete: :func:`_parse_cpuinfo`)."""
    block, unread = CpuInfoBlock(), False
    try:
        block = _parse_cpuinfo(probe, probe.host.read_bytes(CPUINFO, _CPUINFO_READ_LIMIT))
    except HostFileError as exc:
        if exc.missing:
            probe.error(CPUINFO, "missing")
        else:
            probe.failure(exc)
            unread = True
    if block.arch and (block.raw_flags or block.arch in _NO_FLAG_LINE):
        return block, CPUINFO, unread
    try:
        facts, where = facts_for(probe.host)
    except (HostFileError, LiveFactsError) as exc:
        probe.error(LIVE_FACTS_PATH, f"recorded CPU facts unusable: {exc}")
        return block, CPUINFO, unread
    if facts:
        stand_in = facts_as_block(facts)
        if not stand_in.arch:
            probe.error(where, f"CPU facts for architecture {str(facts.get('arch', ''))[:20]!r} not used")
        return stand_in, where, unread
    if where == "py-cpuinfo":
        probe.error(CPUINFO, "py-cpuinfo gave no CPU facts either")
    return block, CPUINFO, unread


def _parse_cpuinfo(probe: CpuProbe, data: bytes) -> CpuInfoBlock:
    """cpuinfo's bytes as read; on a huge host the complete blocks read (an empty block and an
    error when the text is not cpuinfo: junk read is an answer).

    Raises :class:`~agent.hostfs.IncompleteFile` when the text is incomplete: empty, cut
    mid-line (the kernel ends every line with a newline), in no layout the kernel prints, an
    architecture's processor block without its feature line (x86 ``show_cpuinfo`` prints
    ``flags`` unconditionally, arm64 ``c_show`` ``Features``), or fewer processors than
    sysfs lists online. Not read whole is undetermined, never "no such CPU features"."""
    truncated = len(data) >= _CPUINFO_READ_LIMIT
    end = len(data)
    if truncated:  # a huge host: keep the complete blocks read (our bound, not a cut file)
        end = data.rfind(b"\n\n") if b"\n\n" in data.lstrip(b"\n") else 0
    try:
        if truncated and not end:
            raise ValueError("first processor block is truncated or absurdly long")
        if data.find(b"\x00", 0, end) >= 0:
            raise ValueError("binary content (NUL byte)")
        text = data[:end].decode("utf-8")
    except (UnicodeDecodeError, ValueError) as exc:
        probe.error(CPUINFO, f"not a cpuinfo text: {exc}")
        return CpuInfoBlock()
    if not text.strip():
        raise IncompleteFile(CPUINFO, "empty")
    if not truncated and not text.endswith("\n"):
        raise IncompleteFile(CPUINFO, "cut mid-line (no final newline)")
    block = parse_cpuinfo(text)
    if not block.arch:
        raise IncompleteFile(CPUINFO, "no flags/Features line, in no layout the kernel prints")
    if block.arch not in _NO_FLAG_LINE and not block.raw_flags:
        raise IncompleteFile(CPUINFO, f"{block.arch} layout without its feature line")
    if not truncated:
        _check_processors(probe, processor_count(text))
    return block


def _check_processors(probe: CpuProbe, listed: int) -> None:
    """Raise :class:`~agent.hostfs.IncompleteFile` when cpuinfo listed fewer processors than are
    online. sysfs is asked again on a mismatch: a CPU taken offline between the two reads
    is no cut file. No online list (an old kernel, a recording without it): nothing to check;
    one that cannot be read or parsed: cpuinfo cannot be known whole."""
    expected = 0
    for _ in range(2):
        try:
            online = probe.host.read_attr(CPUS_ONLINE)
        except HostFileError as exc:
            raise IncompleteFile(CPUINFO, f"cannot tell how many CPUs are online ({CPUS_ONLINE}: "
                                 f"{exc.reason})") from exc
        if online is None:
            return
        count = cpulist_count(online)
        if count is None:
            raise IncompleteFile(CPUINFO, f"cannot tell how many CPUs are online ({CPUS_ONLINE} "
                                 f"is no CPU list: {online[:40]!r})")
        expected = count
        if listed >= expected:
            return
    raise IncompleteFile(CPUINFO, f"{listed} processor(s) listed, {expected} online ({CPUS_ONLINE})")


def _ppc_hwcaps(probe: CpuProbe) -> tuple[frozenset[str], str]:
    """ppc64le flags from AT_HWCAP/AT_HWCAP2 of the auxiliary vector (cpuinfo has none)."""
    try:
        data, where = kernel_file(probe.host, AUXV, 4096)
    except HostFileError as exc:
        probe.failure(exc, f"unreadable: {exc.reason}; no cpu-cpuid flags", AUXV)
        probe.undetermined["cpuid"] = (nfd_label(NAME, "cpuid.*"),)
        return frozenset(), AUXV
    if data is None:
        probe.error(AUXV, "missing; ppc64 cpuinfo has no feature list, so no cpu-cpuid flags")
        return frozenset(), AUXV
    try:
        vector = parse_auxv(data)
    except AuxvCut as exc:
        probe.failure(IncompleteFile(AUXV, str(exc).removeprefix("incomplete: ")), f"{exc}; no cpu-cpuid flags", AUXV)
        probe.undetermined["cpuid"] = (nfd_label(NAME, "cpuid.*"),)
        return frozenset(), AUXV
    except AuxvError as exc:
        probe.error(AUXV, f"{exc}; no cpu-cpuid flags")
        return frozenset(), AUXV
    return ppc_flags(vector.get(AT_HWCAP, 0), vector.get(AT_HWCAP2, 0)), where
