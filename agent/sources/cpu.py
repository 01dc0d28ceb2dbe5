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
from agent.hostfs import HostFileError, HostFS
from agent.sources.cpu_arm32 import arm32_attributes
from agent.sources.cpu_config import Config
from agent.sources.cpu_cpuinfo import CpuInfoBlock, parse_cpuinfo
from agent.sources.cpu_flags import nfd_flags, ppc_flags, x86_vendor
from agent.sources.cpu_live import LIVE_FACTS_PATH, LiveFactsError, facts_as_block, facts_for, live_cpu_facts
from agent.sources.cpu_model import model_attributes
from agent.sources.cpu_ownproc import AT_HWCAP, AT_HWCAP2, AUXV, AuxvError, kernel_file, parse_auxv
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


_DEFAULT_CONFIG = Config()


def discover(host: HostFS, config: Config = _DEFAULT_CONFIG) -> SourceResult:
    probe = CpuProbe(host)
    block, origin = _cpuinfo_block(probe)
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


def _cpuinfo_block(probe: CpuProbe) -> tuple[CpuInfoBlock, str]:
    """The parsed /proc/cpuinfo or, failing that, recorded/live facts."""
    block = CpuInfoBlock()
    try:
        block = _parse_cpuinfo(probe, probe.host.read_bytes(CPUINFO, _CPUINFO_READ_LIMIT))
    except HostFileError as exc:
        if exc.missing:
            probe.error(CPUINFO, "missing")
        else:
            probe.failure(exc)
            probe.undetermined.update({"cpuid": (nfd_label(NAME, "cpuid.*"),), "model": (nfd_label(NAME, "model.*"),)})
    if block.arch and (block.raw_flags or block.arch in _NO_FLAG_LINE):
        return block, CPUINFO
    try:
        facts, where = facts_for(probe.host)
    except (HostFileError, LiveFactsError) as exc:
        probe.error(LIVE_FACTS_PATH, f"recorded CPU facts unusable: {exc}")
        return block, CPUINFO
    if facts:
        stand_in = facts_as_block(facts)
        if not stand_in.arch:
            probe.error(where, f"CPU facts for architecture {str(facts.get('arch', ''))[:20]!r} not used")
        return stand_in, where
    if where == "py-cpuinfo":
        probe.error(CPUINFO, "py-cpuinfo gave no CPU facts either")
    return block, CPUINFO


def _parse_cpuinfo(probe: CpuProbe, data: bytes) -> CpuInfoBlock:
    """cpuinfo's bytes as read; on a huge host the complete blocks read (an empty block and an
    error when the text is not cpuinfo)."""
    truncated = len(data) >= _CPUINFO_READ_LIMIT
    end = len(data)
    if truncated:  # a huge host: keep the complete blocks read
        end = data.rfind(b"\n\n") if b"\n\n" in data.lstrip(b"\n") else 0
    try:
        if truncated and not end:
            raise ValueError("first processor block is truncated or absurdly long")
        if data.find(b"\x00", 0, end) >= 0:
            raise ValueError("binary content (NUL byte)")
        block = parse_cpuinfo(data[:end].decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        probe.error(CPUINFO, f"not a cpuinfo text: {exc}")
        return CpuInfoBlock()
    if not block.arch:
        probe.error(CPUINFO, "no flags/Features line: unknown cpuinfo layout")
    return block


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
    except AuxvError as exc:
        probe.error(AUXV, f"{exc}; no cpu-cpuid flags")
        return frozenset(), AUXV
    return ppc_flags(vector.get(AT_HWCAP, 0), vector.get(AT_HWCAP2, 0)), where
