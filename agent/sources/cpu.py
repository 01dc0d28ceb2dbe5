"""cpu source: NFD's ``cpu.*`` features and ``cpu-*`` labels, derived from files.

NFD executes CPUID (x86) or reads its own ELF hwcaps (arm, arm64, ppc64le, s390x); we read
the kernel's account of the same bits through the host seam, so a recorded tree replays
exactly: ``/proc/cpuinfo`` in every architecture's layout (:mod:`agent.sources.cpu_cpuinfo`),
the auxiliary vector on ppc64le and ``/proc/sysinfo`` on s390x (:mod:`agent.sources.cpu_ownproc`).
Names are translated in :mod:`agent.sources.cpu_flags`, ``cpu.model`` is built in
:mod:`agent.sources.cpu_model`; py-cpuinfo is only a live-host fallback
(:mod:`agent.sources.cpu_live`).  Not derivable from files, hence absent: ``AVX10_VERSION``,
``cpu.sst`` (needs CPUID leaf 0x16), ``RDTL3CA_NUM_CLOSID`` (needs resctrl mounted) and
the x86 flags of CPUID bits Linux does not print (``fixtures/recorded/README.md`` lists them).
riscv64 and loongarch64 get the model NFD's code gives where nothing is read
(``VendorUnknown``) and no cpuid flags: NFD's cpu source does not build for them.
"""

from __future__ import annotations

import logging

from agent.discovery import DiscoveryConfig
from agent.features import Feature, SourceError, SourceResult, nfd_label
from agent.hostfs import HostFileError, HostFS
from agent.sources._sysfs import AttributeReader
from agent.sources.cpu_cpuinfo import CpuInfoBlock, parse_cpuinfo
from agent.sources.cpu_flags import nfd_flags, ppc_flags, x86_vendor
from agent.sources.cpu_model import model_attributes
from agent.sources.cpu_ownproc import AT_HWCAP, AT_HWCAP2, AUXV, AuxvError, kernel_file, parse_auxv
from agent.sources.cpu_live import LIVE_FACTS_PATH, LiveFactsError, facts_as_block, facts_for, live_cpu_facts

NAME = "cpu"
__all__ = ["NAME", "discover", "LIVE_FACTS_PATH", "live_cpu_facts"]

log = logging.getLogger(__name__)

CPUINFO = "/proc/cpuinfo"
CPU_SYSFS = "/sys/devices/system/cpu"
#: security counters NFD keeps for extended resources and never labels (source/cpu/cpu.go)
UNLABELLED_SECURITY = frozenset({"tdx.total_keys", "sgx.epc", "sev.encrypted_state_ids", "sev.asids"})
#: Linux flag -> NFD ``cpu.rdt`` attribute (CPUID leaves 0x7/0xF/0x10 as the kernel reports them)
RDT_FLAGS = {"cqm": "RDTMON", "cqm_occup_llc": "RDTCMT", "cqm_mbm_total": "RDTMBM", "cqm_mbm_local": "RDTMBM",
             "cat_l3": "RDTL3CA", "cat_l2": "RDTL2CA", "mba": "RDTMBA"}
_CPUINFO_READ_LIMIT = 256 * 1024  # a processor block is a few KiB even with every flag
#: layouts without a feature line: ppc64 (flags from auxv), riscv64 and loongarch64 (none in NFD)
_NO_FLAG_LINE = ("ppc64", "riscv64", "loongarch64")
#: Secure Execution host capability on s390x (security_s390x.go); exactly "1\n" means enabled
PROT_VIRT_HOST = "/sys/firmware/uv/prot_virt_host"
#: POWER9+ on-chip GZIP accelerator (coprocessor_ppc64le.go): present means ``nx_gzip``
NX_GZIP_CAPS = "/sys/devices/vio/ibm,compression-v1/nx_gzip_caps"


class _Probe(AttributeReader):
    """Reads through the seam, turning every failure into a ``SourceError`` (never raising);
    adds whole-number attributes to the shared sysfs reader."""

    def __init__(self, host: HostFS):
        super().__init__(host, NAME)

    def integer(self, path: str) -> int | None:
        value = self.attr(path)
        if value is None:
            return None
        try:
            return int(value)
        except ValueError:
            self.error(path, f"not an integer: {value[:40]!r}")
            return None


def discover(host: HostFS, config: DiscoveryConfig) -> SourceResult:
    probe = _Probe(host)
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
        for flag in sorted(flags):
            if _labelled_flag(flag, config):
                _put(labels, origins, f"cpuid.{flag}", "true", flags_origin)
    _, model_attrs = model_attributes(probe, block, origin, flags)
    if model_attrs:
        features["model"] = Feature(attributes=model_attrs, origin=origin)
        for key, value in model_attrs.items():
            _put(labels, origins, f"model.{key}", value, origin)

    for name, attrs, path in (("cstate", _cstate(probe), f"{CPU_SYSFS}/cpuidle"),
                              ("pstate", _pstate(probe), f"{CPU_SYSFS}/intel_pstate"),
                              ("security", _security(probe, arch, flags), "/sys/module"),
                              ("topology", _topology(probe), "/sys/bus/cpu/devices"),
                              ("rdt", _rdt(arch, block.raw_flags), origin),
                              ("coprocessor", _coprocessor(probe, arch), NX_GZIP_CAPS)):
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
    return SourceResult(NAME, features, labels, probe.errors, origins)


def _put(labels: dict[str, str], origins: dict[str, str], key: str, value: str, origin: str) -> None:
    labels[nfd_label(NAME, key)] = value
    origins[nfd_label(NAME, key)] = origin


def _labelled_flag(flag: str, config: DiscoveryConfig) -> bool:
    """NFD's key filter: a non-empty whitelist replaces the blacklist; exact names."""
    if config.cpuid_whitelist:
        return flag in config.cpuid_whitelist
    return flag not in config.cpuid_blacklist


def _cpuinfo_block(probe: _Probe) -> tuple[CpuInfoBlock, str]:
    """The parsed /proc/cpuinfo or, failing that, recorded/live facts."""
    block = CpuInfoBlock()
    try:
        data = probe.host.read_bytes(CPUINFO, _CPUINFO_READ_LIMIT)
    except HostFileError as exc:
        data = None
        probe.error(CPUINFO, "missing" if exc.missing else f"unreadable: {exc.reason}")
    if data is not None:
        truncated = len(data) >= _CPUINFO_READ_LIMIT
        if truncated:  # a huge host: keep the complete blocks read
            data = data[:data.rfind(b"\n\n")] if b"\n\n" in data.lstrip(b"\n") else b""
        try:
            if truncated and not data:
                raise ValueError("first processor block is truncated or absurdly long")
            if b"\x00" in data:
                raise ValueError("binary content (NUL byte)")
            block = parse_cpuinfo(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            probe.error(CPUINFO, f"not a cpuinfo text: {exc}")
        else:
            if not block.arch:
                probe.error(CPUINFO, "no flags/Features line: unknown cpuinfo layout")
    if block.arch and (block.raw_flags or block.arch in _NO_FLAG_LINE):
        return block, CPUINFO
    try:
        facts, where = facts_for(probe.host)
    except (HostFileError, LiveFactsError) as exc:
        probe.error(LIVE_FACTS_PATH, f"recorded CPU facts unusable: {exc}")
        return block, CPUINFO
    if facts:
        return facts_as_block(facts), where
    if where == "py-cpuinfo":
        probe.error(CPUINFO, "py-cpuinfo gave no CPU facts either")
    return block, CPUINFO


def _ppc_hwcaps(probe: _Probe) -> tuple[frozenset[str], str]:
    """ppc64le flags from AT_HWCAP/AT_HWCAP2 of the auxiliary vector (cpuinfo has none)."""
    try:
        data, where = kernel_file(probe.host, AUXV, 4096)
    except HostFileError as exc:
        probe.error(AUXV, f"unreadable: {exc.reason}; no cpu-cpuid flags")
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


def _raw(probe: _Probe, path: str) -> bytes | None:
    """The exact bytes of a small file (NFD compares some with ``"1\\n"``); error + ``None``."""
    try:
        return probe.host.read_bytes(path, 64)
    except HostFileError as exc:
        probe.error(path, f"unreadable: {exc.reason}")
        return None


def _cstate(probe: _Probe) -> dict[str, str]:
    """``enabled`` only when intel_idle drives cpuidle (cstate_amd64.go)."""
    if probe.attr(f"{CPU_SYSFS}/cpuidle/current_driver") != "intel_idle":
        return {}
    path = "/sys/module/intel_idle/parameters/max_cstate"
    cstates = probe.integer(path)
    return {} if cstates is None else {"enabled": "true" if cstates > 0 else "false"}


def _pstate(probe: _Probe) -> dict[str, str]:
    """intel_pstate status, turbo and the one scaling governor all policies agree on."""
    base = f"{CPU_SYSFS}/intel_pstate"
    if not probe.host.is_dir(base):
        return {}
    status = probe.attr(f"{base}/status")
    if not status or status == "off":
        return {}
    attrs = {"status": status}
    no_turbo = probe.attr(f"{base}/no_turbo")
    if no_turbo:
        attrs["turbo"] = "true" if no_turbo[0] == "0" else "false"
    if status != "active":
        return attrs
    governor = ""
    for policy in probe.glob(f"{CPU_SYSFS}/cpufreq/policy*"):
        if not probe.attr(f"{policy}/affected_cpus"):
            continue
        current = probe.attr(f"{policy}/scaling_governor")
        if current is None:
            continue
        if governor and current != governor:
            governor = ""
            break
        governor = current
    if governor:
        attrs["scaling_governor"] = governor
    return attrs


def _security(probe: _Probe, arch: str, flags: frozenset[str]) -> dict[str, str]:
    """SGX (EPC > 0), TDX and SEV state as security_amd64.go reports them, Secure Execution on
    s390x as security_s390x.go; true-only."""
    attrs: dict[str, str] = {}
    if arch == "s390x":
        if probe.host.exists(PROT_VIRT_HOST) and _raw(probe, PROT_VIRT_HOST) == b"1\n":
            attrs["se.enabled"] = "true"
        return attrs
    if "SGX" in flags:
        epc = 0
        for node in probe.glob("/sys/devices/system/node/node*"):
            size = probe.integer(f"{node}/x86/sgx_total_bytes")
            if size is not None and size > 0:
                epc += size
        if epc > 0:
            attrs.update({"sgx.enabled": "true", "sgx.epc": str(epc)})
    if probe.attr("/sys/module/kvm_intel/parameters/tdx") == "Y":
        attrs["tdx.enabled"] = "true"
        _misc_capacity(probe, "tdx", "tdx.total_keys", attrs)
    if "TDX_GUEST" in flags:
        attrs["tdx.protected"] = "true"
    for param, key, counter, counter_key in (("sev", "sev.enabled", "sev", "sev.asids"),
                                             ("sev_es", "sev.es.enabled", "sev_es", "sev.encrypted_state_ids"),
                                             ("sev_snp", "sev.snp.enabled", "", "")):
        value = probe.attr(f"/sys/module/kvm_amd/parameters/{param}")
        if value and value[0] in "1Y":
            attrs[key] = "true"
            if counter:
                _misc_capacity(probe, counter, counter_key, attrs)
    return attrs


def _misc_capacity(probe: _Probe, resource: str, key: str, attrs: dict[str, str]) -> None:
    """The misc cgroup's capacity line for ``resource`` (``sev 509``), when there is one."""
    for path in ("/sys/fs/cgroup/misc.capacity", "/sys/fs/cgroup/misc/misc.capacity"):
        text = probe.attr(path)
        if text is None:
            continue
        for line in text.splitlines():
            name, _, value = line.partition(" ")
            if name == resource:
                if value.strip().isascii() and value.strip().isdigit():  # not "²": int() rejects it
                    attrs[key] = str(int(value))
                else:
                    probe.error(path, f"{resource}: capacity not a number: {value[:40]!r}")
        return


def _topology(probe: _Probe) -> dict[str, str]:
    """SMT (any sibling list with ``,`` or ``-``) and socket count; nothing if a CPU is unreadable."""
    cpus = probe.listdir("/sys/bus/cpu/devices")
    if not cpus:
        return {}
    smt = False
    packages: set[str] = set()
    for cpu in cpus:
        base = f"/sys/bus/cpu/devices/{cpu}/topology"
        siblings = probe.attr(f"{base}/thread_siblings_list")
        package = probe.attr(f"{base}/physical_package_id")
        if siblings is None or package is None:
            probe.error(base, "topology incomplete; hardware_multithreading not reported")
            return {}
        smt = smt or "," in siblings or "-" in siblings
        packages.add(package)
    return {"hardware_multithreading": "true" if smt else "false", "socket_count": str(len(packages))}


def _rdt(arch: str, raw_flags: list[str]) -> dict[str, str]:
    """Intel RDT capabilities (feature only; NFD dropped the labels in v0.16)."""
    if arch != "x86":
        return {}
    return {RDT_FLAGS[f]: "true" for f in raw_flags if f in RDT_FLAGS}



def _coprocessor(probe: _Probe, arch: str) -> dict[str, str]:
    """``nx_gzip`` on ppc64 when the NX GZIP capabilities file exists."""
    return {"nx_gzip": "true"} if arch == "ppc64" and probe.host.exists(NX_GZIP_CAPS) else {}
