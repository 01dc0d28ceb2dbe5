"""NFD's ``cpu.model`` attributes (``vendor_id``, ``family``, ``id``, ``hypervisor``) per architecture.

NFD takes them from klauspost/cpuid (``getCPUModel`` in ``source/cpu/cpu.go``), whose values
depend on the architecture it was built for:

* x86: the CPUID vendor, family and model (Linux prints the same numbers in cpuinfo);
  the hypervisor vendor from CPUID leaf 0x40000000 (no file holds it; see ``hypervisor``).
* arm64: the MIDR of the CPU the call ran on, read only when the kernel offers the ``cpuid``
  hwcap (MRS emulation); without it ``VendorUnknown``/``0``/``0``.  On a big.LITTLE host the
  MIDR depends on which core NFD happened to run; we report the first processor's.
* arm (32-bit), ppc64le, riscv64, loongarch64: klauspost reads nothing there
  (``detect_ref.go``): ``VendorUnknown``/``0``/``0``.
* s390x: NFD overrides from ``/proc/cpuinfo`` (``vendor_id`` sanitised, ``machine`` as id,
  the first ``identification`` as family; ``0`` stays klauspost's ``0``) and takes the
  hypervisor from the first ``Control Program:`` line of ``/proc/sysinfo``.
* ``hypervisor`` is ``none`` wherever klauspost's ``VM()`` is false: every non-x86 host but s390x.
"""

from __future__ import annotations

import re

from agent.features import nfd_label
from agent.hostfs import HostFileError, IncompleteFile
from agent.sources._sysfs import AttributeReader, whole_lines
from agent.sources.cpu_cpuinfo import CpuInfoBlock
from agent.sources.cpu_flags import UNKNOWN_VENDOR, arm_model, x86_vendor
from agent.sources.cpu_ownproc import SYSINFO, kernel_file

#: DMI ``sys_vendor`` prefix -> lowercased klauspost hypervisor vendor, for a guest whose
#: clocksource does not already say.  KVM-based clouds report KVM in CPUID leaf 0x40000000.
DMI_HYPERVISORS = (("Microsoft Corporation", "msvm"), ("VMware", "vmware"), ("Xen", "xenhvm"),
                   ("BHYVE", "bhyve"), ("Amazon EC2", "kvm"), ("Google", "kvm"), ("OpenStack", "kvm"),
                   ("Red Hat", "kvm"), ("Nutanix", "kvm"), ("DigitalOcean", "kvm"), ("Hetzner", "kvm"),
                   ("Scaleway", "kvm"), ("Apple Inc.", "apple"))
_UNSAFE = re.compile(r"[^-A-Za-z0-9_.]+")  # NFD's sanitiser for s390x values
_SYSINFO_LIMIT = 64 * 1024
_NOTHING_READ = {"vendor_id": UNKNOWN_VENDOR, "family": "0", "id": "0"}


def model_attributes(probe: AttributeReader, block: CpuInfoBlock, origin: str,
                     flags: frozenset[str]) -> tuple[str, dict[str, str]]:
    """(vendor for the flag translation, ``cpu.model`` attributes); ``{}`` for an unknown layout."""
    arch = block.arch
    if arch == "x86":
        vendor, attrs = _x86(probe, block, origin)
    elif arch == "arm64" and "cpuid" in block.raw_flags:
        vendor, attrs = _arm64(probe, block, origin)
    elif arch == "s390x":
        vendor, attrs = _s390x(block)
    elif arch:
        vendor, attrs = UNKNOWN_VENDOR, dict(_NOTHING_READ)
    else:
        return "", {}
    if attrs:
        hypervisor = _s390x_hypervisor(probe) if arch == "s390x" else _x86_hypervisor(probe, arch, flags)
        if hypervisor is not None:
            attrs["hypervisor"] = hypervisor
    return vendor, attrs


def _x86(probe: AttributeReader, block: CpuInfoBlock, origin: str) -> tuple[str, dict[str, str]]:
    fields = block.fields
    vendor = x86_vendor(fields.get("vendor_id", ""))
    attrs = {"vendor_id": vendor}
    for key, attr in (("cpu family", "family"), ("model", "id")):
        text = fields.get(key, "")
        if text.isascii() and text.isdigit() and len(text) < 10:
            attrs[attr] = str(int(text))
        else:
            probe.error(origin, f"{key!r} is not a number: {text[:40]!r}")
    return vendor, attrs


def _arm64(probe: AttributeReader, block: CpuInfoBlock, origin: str) -> tuple[str, dict[str, str]]:
    try:
        vendor, family, model = arm_model(block.fields)
    except (KeyError, ValueError) as exc:
        probe.error(origin, f"CPU implementer/part unusable: {exc}")
        return "", {}
    return vendor, {"vendor_id": vendor, "family": str(family), "id": str(model)}


def _s390x(block: CpuInfoBlock) -> tuple[str, dict[str, str]]:
    """``getS390xAttributes``: every line of the file, last ``vendor_id``/``machine``, first ``identification``."""
    attrs = dict(_NOTHING_READ)
    vendor, family, machine = "", "0", "0"
    for key, value in block.lines:
        if key == "vendor_id":
            vendor = _UNSAFE.sub("_", value)
        elif key == "machine":
            machine = value
        elif key == "identification" and family == "0":
            family = value
    if vendor:
        attrs["vendor_id"] = vendor
    if family not in ("", "0"):
        attrs["family"] = family
    if machine not in ("", "0"):
        attrs["id"] = machine
    return attrs["vendor_id"], attrs


def _s390x_hypervisor(probe: AttributeReader) -> str | None:
    """``getHypervisorFromProcSysinfo``; ``None`` (no attribute, an error) when unreadable,
    or read but not whole (arch/s390/kernel/sysinfo.c writes lines, each ending in a
    newline): then ``cpu.model`` is undetermined, since the ``Control Program:`` line may be
    the part not read."""
    try:
        data, _where = kernel_file(probe.host, SYSINFO, _SYSINFO_LIMIT)
        text = whole_lines(SYSINFO, data.decode("utf-8", "replace")) if data is not None else None
    except HostFileError as exc:
        probe.failure(exc, f"{exc.reason if isinstance(exc, IncompleteFile) else f'unreadable: {exc.reason}'}; "
                      "cpu-model.hypervisor not reported", SYSINFO)
        if exc.unreadable:
            probe.undetermined["model"] = (nfd_label("cpu", "model.*"),)
        return None
    if text is None:
        probe.error(SYSINFO, "missing; cpu-model.hypervisor not reported")
        return None
    for line in text.split("\n"):
        if "Control Program:" in line:
            value = line.split(":", 1)[1].strip()
            return _UNSAFE.sub("_", value) if value else "none"
    return "none"


def _x86_hypervisor(probe: AttributeReader, arch: str, flags: frozenset[str]) -> str:
    """``none`` on bare metal (and always off x86, as NFD), else klauspost's lowercased vendor.

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
