"""NFD's sysfs-based cpu features: ``cstate``, ``pstate``, ``security``, ``topology``,
``rdt`` and ``coprocessor`` (``source/cpu/{cstate,pstate,security,rdt,coprocessor}_*.go`` and
``discoverTopology`` in ``cpu.go``).  Each collector returns the attributes NFD would, ``{}``
when it would have none; every unreadable file is a ``SourceError`` through :class:`CpuProbe`.
"""

from __future__ import annotations

from agent.hostfs import HostFileError, HostFS
from agent.sources._sysfs import AttributeReader

CPU_SYSFS = "/sys/devices/system/cpu"
#: Linux flag -> NFD ``cpu.rdt`` attribute (CPUID leaves 0x7/0xF/0x10 as the kernel reports them)
RDT_FLAGS = {"cqm": "RDTMON", "cqm_occup_llc": "RDTCMT", "cqm_mbm_total": "RDTMBM", "cqm_mbm_local": "RDTMBM",
             "cat_l3": "RDTL3CA", "cat_l2": "RDTL2CA", "mba": "RDTMBA"}
#: Secure Execution host capability on s390x (security_s390x.go); exactly "1\n" means enabled
PROT_VIRT_HOST = "/sys/firmware/uv/prot_virt_host"
#: POWER9+ on-chip GZIP accelerator (coprocessor_ppc64le.go): present means ``nx_gzip``
NX_GZIP_CAPS = "/sys/devices/vio/ibm,compression-v1/nx_gzip_caps"


class CpuProbe(AttributeReader):
    """Reads through the seam, turning every failure into a ``SourceError`` (never raising);
    adds whole-number attributes to the shared sysfs reader."""

    def __init__(self, host: HostFS):
        super().__init__(host, "cpu")

    def integer(self, path: str) -> int | None:
        value = self.attr(path)
        if value is None:
            return None
        try:
            return int(value)
        except ValueError:
            self.error(path, f"not an integer: {value[:40]!r}")
            return None


def _raw(probe: CpuProbe, path: str) -> bytes | None:
    """The exact bytes of a small file (NFD compares some with ``"1\\n"``); error + ``None``."""
    try:
        return probe.host.read_bytes(path, 64)
    except HostFileError as exc:
        probe.failure(exc, path=path)
        return None


def cstate(probe: CpuProbe) -> dict[str, str]:
    """``enabled`` only when intel_idle drives cpuidle (cstate_amd64.go)."""
    if probe.attr(f"{CPU_SYSFS}/cpuidle/current_driver") != "intel_idle":
        return {}
    path = "/sys/module/intel_idle/parameters/max_cstate"
    cstates = probe.integer(path)
    return {} if cstates is None else {"enabled": "true" if cstates > 0 else "false"}


def pstate(probe: CpuProbe) -> dict[str, str]:
    """intel_pstate status, turbo and the one scaling governor all policies agree on."""
    base = f"{CPU_SYSFS}/intel_pstate"
    if not probe.is_dir(base):
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


def security(probe: CpuProbe, arch: str, flags: frozenset[str]) -> dict[str, str]:
    """SGX (EPC > 0), TDX and SEV state as security_amd64.go reports them, Secure Execution on
    s390x as security_s390x.go; true-only."""
    attrs: dict[str, str] = {}
    if arch == "s390x":
        if probe.exists(PROT_VIRT_HOST) and _raw(probe, PROT_VIRT_HOST) == b"1\n":
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


def _misc_capacity(probe: CpuProbe, resource: str, key: str, attrs: dict[str, str]) -> None:
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


_TOPOLOGY_FILES = ("thread_siblings_list", "physical_package_id")


def topology(probe: CpuProbe) -> dict[str, str] | None:
    """SMT (any sibling list with ``,`` or ``-``) and socket count, as NFD's ``discoverTopology``:
    nothing when a CPU's file cannot be read.  ``None`` (and an error) in that case and when the
    CPU list cannot be read: the answer is unknown this pass, which is not evidence that the
    host has no topology (an absent ``/sys/bus/cpu/devices`` is, and gives ``{}``; so does an
    offline CPU, whose ``topology/`` the kernel removes: NFD gives no topology then either)."""
    errors_before = len(probe.errors)
    cpus = probe.listdir("/sys/bus/cpu/devices")
    if not cpus:
        return None if len(probe.errors) > errors_before else {}
    smt = False
    packages: set[str] = set()
    # a CPU whose read failed ends the loop (a failed file is None below), so no error is added
    # before the CPU that decides: counted once
    errors_at = len(probe.errors)
    for cpu in cpus:
        values, failures = probe.attrs(f"/sys/bus/cpu/devices/{cpu}/topology", _TOPOLOGY_FILES)
        siblings = values.get("thread_siblings_list")
        package = values.get("physical_package_id")
        if siblings is None or package is None:
            if _offline(probe, cpu):
                # the kernel removes an offline CPU's topology/ (drivers/base/topology.c,
                # CPUHP_TOPOLOGY_PREPARE): NFD's discoverTopology then gives no topology at
                # all.  A known state of the host, not a failed read: determined, no labels.
                del probe.errors[errors_at:]
                return {}
            for name in _TOPOLOGY_FILES:
                if name in failures:
                    probe.failure(failures[name])
            probe.error(f"/sys/bus/cpu/devices/{cpu}/topology",
                        "topology incomplete; hardware_multithreading not determined this pass")
            return None
        if not smt and ("," in siblings or "-" in siblings):
            smt = True
        packages.add(package)
    return {"hardware_multithreading": "true" if smt else "false", "socket_count": str(len(packages))}


def _offline(probe: CpuProbe, cpu: str) -> bool:
    """``cpuN/online`` reads ``0`` (SMT switched off, ``nosmt``, a CPU taken offline)."""
    try:
        return probe.host.read_attr(f"/sys/bus/cpu/devices/{cpu}/online") == "0"
    except HostFileError:
        return False


def rdt(arch: str, raw_flags: list[str]) -> dict[str, str]:
    """Intel RDT capabilities (feature only; NFD dropped the labels in v0.16)."""
    if arch != "x86":
        return {}
    return {RDT_FLAGS[f]: "true" for f in raw_flags if f in RDT_FLAGS}



def coprocessor(probe: CpuProbe, arch: str) -> dict[str, str]:
    """``nx_gzip`` on ppc64 when the NX GZIP capabilities file exists."""
    return {"nx_gzip": "true"} if arch == "ppc64" and probe.exists(NX_GZIP_CAPS) else {}
