"""cpu source: NFD's ``cpu.*`` features and ``cpu-*`` labels, derived from files.

NFD executes CPUID; we read the kernel's account of it (``/proc/cpuinfo``) through the host
seam, so a recorded tree replays exactly.  Flag names are translated in
:mod:`agent.sources.cpu_flags`; py-cpuinfo is only a live-host fallback
(:mod:`agent.sources.cpu_live`).  Not derivable from files, hence absent: ``AVX10_VERSION``,
``cpu.sst`` (needs CPUID leaf 0x16) and ``RDTL3CA_NUM_CLOSID`` (needs resctrl mounted).
"""

from __future__ import annotations

import logging

from agent.discovery import DiscoveryConfig
from agent.features import Feature, SourceError, SourceResult, nfd_label
from agent.hostfs import HostFileError, HostFS
from agent.sources._sysfs import AttributeReader
from agent.sources.cpu_flags import CpuInfoBlock, arm_model, nfd_flags, parse_first_block, x86_vendor
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
#: DMI ``sys_vendor`` prefix -> lowercased klauspost hypervisor vendor, for a guest whose
#: clocksource does not already say.  KVM-based clouds report KVM in CPUID leaf 0x40000000.
DMI_HYPERVISORS = (("Microsoft Corporation", "msvm"), ("VMware", "vmware"), ("Xen", "xenhvm"),
                   ("BHYVE", "bhyve"), ("Amazon EC2", "kvm"), ("Google", "kvm"), ("OpenStack", "kvm"),
                   ("Red Hat", "kvm"), ("Nutanix", "kvm"), ("DigitalOcean", "kvm"), ("Hetzner", "kvm"),
                   ("Scaleway", "kvm"), ("Apple Inc.", "apple"))
_CPUINFO_READ_LIMIT = 256 * 1024  # the first processor block is a few KiB even with every flag


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
    vendor, model_attrs = _model(probe, block, origin)
    flags, unmapped = nfd_flags(arch, block.raw_flags, vendor, block.fields)
    if block.fields and arch and not flags:
        probe.error(origin, "no CPU flags found")
    if unmapped:
        log.debug("cpuinfo flags without an NFD name: %s", " ".join(unmapped))
    if flags:
        features["cpuid"] = Feature(flags=flags, origin=origin)
        for flag in sorted(flags):
            if _labelled_flag(flag, config):
                _put(labels, origins, f"cpuid.{flag}", "true", origin)
    if model_attrs:
        model_attrs["hypervisor"] = _hypervisor(probe, arch, flags)
        features["model"] = Feature(attributes=model_attrs, origin=origin)
        for key, value in model_attrs.items():
            _put(labels, origins, f"model.{key}", value, origin)

    for name, attrs, path in (("cstate", _cstate(probe), f"{CPU_SYSFS}/cpuidle"),
                              ("pstate", _pstate(probe), f"{CPU_SYSFS}/intel_pstate"),
                              ("security", _security(probe, flags), "/sys/module"),
                              ("topology", _topology(probe), "/sys/bus/cpu/devices"),
                              ("rdt", _rdt(arch, block.raw_flags), origin)):
        if not attrs:
            continue
        features[name] = Feature(attributes=attrs, origin=path)
        for key, value in attrs.items():
            if name == "topology":
                if key == "hardware_multithreading":
                    _put(labels, origins, key, value, path)
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
    """The first processor block, from /proc/cpuinfo or, failing that, recorded/live facts."""
    block = CpuInfoBlock()
    try:
        data = probe.host.read_bytes(CPUINFO, _CPUINFO_READ_LIMIT)
    except HostFileError as exc:
        data = None
        probe.error(CPUINFO, "missing" if exc.missing else f"unreadable: {exc.reason}")
    if data is not None:
        head = data.lstrip(b"\n").split(b"\n\n", 1)[0]
        try:
            if b"\x00" in head:
                raise ValueError("binary content (NUL byte)")
            block = parse_first_block(head.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            probe.error(CPUINFO, f"not a cpuinfo text: {exc}")
        else:
            if len(data) >= _CPUINFO_READ_LIMIT and b"\n\n" not in data:
                probe.error(CPUINFO, "first processor block is truncated or absurdly long")
                block = CpuInfoBlock()
            elif not block.arch:
                probe.error(CPUINFO, "no flags/Features line: unknown cpuinfo layout")
    if block.arch and block.raw_flags:
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


def _model(probe: _Probe, block: CpuInfoBlock, origin: str) -> tuple[str, dict[str, str]]:
    """(vendor, ``cpu.model`` attributes without hypervisor) as klauspost reports them."""
    fields = block.fields
    if block.arch == "x86":
        vendor = x86_vendor(fields.get("vendor_id", ""))
        attrs = {"vendor_id": vendor}
        for key, attr in (("cpu family", "family"), ("model", "id")):
            text = fields.get(key, "")
            if text.isascii() and text.isdigit() and len(text) < 10:
                attrs[attr] = str(int(text))
            else:
                probe.error(origin, f"{key!r} is not a number: {text[:40]!r}")
        return vendor, attrs
    if block.arch in ("arm64", "arm"):
        try:
            vendor, family, model = arm_model(fields)
        except (KeyError, ValueError) as exc:
            probe.error(origin, f"CPU implementer/part unusable: {exc}")
            return "", {}
        return vendor, {"vendor_id": vendor, "family": str(family), "id": str(model)}
    return "", {}


def _hypervisor(probe: _Probe, arch: str, flags: frozenset[str]) -> str:
    """``none`` on bare metal (and always on ARM, as NFD), else klauspost's lowercased vendor.

    The vendor lives in CPUID leaf 0x40000000; files give it away through the paravirtual
    clocksource (kvm-clock, hyperv), ``/sys/hypervisor/type`` (Xen) or the DMI vendor.
    """
    if arch != "x86" or "HYPERVISOR" not in flags:
        return "none"
    if probe.attr("/sys/hypervisor/type") == "xen":
        return "xenhvm"
    clocks = (probe.attr("/sys/devices/system/clocksource/clocksource0/available_clocksource") or "").split()
    if "kvm-clock" in clocks:
        return "kvm"
    if any(c.startswith("hyperv_clocksource") for c in clocks):
        return "msvm"
    if "xen" in clocks:
        return "xenhvm"
    dmi_vendor = probe.attr("/sys/devices/virtual/dmi/id/sys_vendor") or ""
    if dmi_vendor == "QEMU":
        return "qemu"  # QEMU without KVM (no kvm-clock): CPUID says TCGTCGTCGTCG
    for prefix, name in DMI_HYPERVISORS:
        if dmi_vendor.startswith(prefix):
            return name
    return "unknown"


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


def _security(probe: _Probe, flags: frozenset[str]) -> dict[str, str]:
    """SGX (EPC > 0), TDX and SEV state as security_amd64.go reports them; true-only."""
    attrs: dict[str, str] = {}
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

