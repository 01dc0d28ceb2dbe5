"""pci source: NFD's ``pci.device`` instances and ``pci-<devlabel>.*`` labels.

Reads ``/sys/bus/pci/devices/*`` exactly as NFD does (``source/pci/pci.go``): the five
mandatory ID files, then the optional ``sriov_totalvfs``, ``iommu_group/type`` and
``iommu/intel-iommu/version``.  On top of NFD's attributes every instance carries what
device counting and our rules need and NFD leaves out: ``address``, ``driver``,
``numa_node``, ``iommu_group``, ``revision``, ``sriov_numvfs`` and, for a virtual function,
``physfn`` (its parent's address).  NodeFeatureRules written for NFD never name those, so
they still evaluate unchanged.

A device whose mandatory files are missing or malformed is skipped with an error; nothing
a device directory holds can stop the scan.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Container, Mapping, NamedTuple

from agent.features import ElementNames, Feature, Instance, SourceResult, nfd_label
from agent.hostfs import DirectoryRead, HostFileError, HostFS
from agent.sources._config import nfd_option
from agent.sources._sysfs import (
    _HEX_CHARS,
    AttributeReader,
    MalformedId,
    canonical_label_fields,
    hex_digits,
    is_decimal,
)

NAME = "pci"
FEATURES: Mapping[str, ElementNames] = {
    "device": frozenset({"class", "vendor", "device", "subsystem_vendor", "subsystem_device", "sriov_totalvfs",
                         "iommu_group/type", "iommu/intel-iommu/version",  # NFD's
                         "address", "driver", "iommu_group", "numa_node", "physfn", "revision", "sriov_numvfs"}),
}
"""The features this source can produce and their element names (``agent.features.ElementNames``)."""

DEVICES = "/sys/bus/pci/devices"
IOMMU_GROUPS = "/sys/kernel/iommu_groups"
LABEL_FIELDS = ("class", "vendor", "device", "subsystem_vendor", "subsystem_device")
"""Valid ``deviceLabelFields``, in NFD's canonical label order."""
DEFAULT_LABEL_FIELDS = ("class", "vendor")



@dataclass(frozen=True)
class Config:
    """``sources.pci`` of nfd-worker.conf, with NFD's defaults (``source/pci`` ``newDefaultConfig``)."""

    device_class_whitelist: tuple[str, ...] = nfd_option("deviceClassWhitelist", ("03", "0b40", "12"))
    device_label_fields: tuple[str, ...] = nfd_option("deviceLabelFields", DEFAULT_LABEL_FIELDS)


#: mandatory file -> number of hex digits the kernel writes after ``0x``
_MANDATORY = (("class", 6), ("vendor", 4), ("device", 4), ("subsystem_vendor", 4), ("subsystem_device", 4))
_MANDATORY_NAMES = tuple(name for name, _ in _MANDATORY)
#: ``(file, digits, length with the 0x)`` for the file-by-file check
_MANDATORY_WIDTHS = tuple((name, digits, digits + 2) for name, digits in _MANDATORY)
#: the five mandatory files in the kernel's own form (``0x`` + exactly the digits, see
#: :func:`hex_digits`), joined by newlines in ``_MANDATORY`` order: the common case checked by one
#: C-level match instead of five rounds of Python checks (an absent file joins as ``None`` and
#: cannot match; five values make exactly five lines only when none holds a newline of its own)
_KERNEL_IDS = re.compile("\n".join(f"0x[0-9a-fA-F]{{{digits}}}" for _, digits in _MANDATORY))
#: the five ID files as read (joined by newlines) -> the attributes they give, for IDs in the
#: kernel's form: a big host's hundreds of functions share a few dozen (every VF of a NIC, eight
#: GPUs), so most functions copy an answer instead of matching and slicing again.  Bounded (a
#: hostile tree of distinct IDs holds at most 256, ~0.1 MiB).
_KERNEL_ID_ATTRS: dict[str, dict[str, str]] = {}
_KERNEL_ID_ATTRS_MAX = 256
#: optional files read with the mandatory ones when the device directory lists them
_OPTIONAL = ("sriov_totalvfs", "numa_node", "revision", "sriov_numvfs")
#: links of a device directory the source reads the target names of
_LINKS = ("iommu_group", "iommu", "driver", "physfn")
#: functions whose directories are read before they are built (see :func:`discover`)
_BATCH = 64
#: IOMMU group number -> its ``type`` file as read (``HostFS.read_children``: values, failures, links)
GroupTypes = Mapping[str, tuple[Mapping[str, str | None], Mapping[str, HostFileError], Mapping[str, str | None]]]


class PciFunction(NamedTuple):
    """One readable PCI function: its instance, and whether ``sriov_totalvfs`` exists (NFD's
    ``sriov.capable`` test, which must hold even when the file's value is unusable)."""

    instance: Instance
    has_sriov_file: bool


def discover(host: HostFS, config: Config = Config()) -> SourceResult:
    reader = AttributeReader(host, NAME)
    if not host.is_dir(DEVICES):
        return SourceResult(NAME)
    # a batch of device directories first, then their IOMMU groups' ``type`` files through one
    # lookup of /sys/kernel/iommu_groups (HostFS.read_children), then each function built and
    # checked in order, so its errors come out as they did when each function read its own
    # group.  Batches, not the whole bus at once: 400 directory reads held together raised the
    # agent's resident memory by 1 MiB for good (bench/memory.py), a batch of 64 does not.
    addresses = reader.listdir(DEVICES)
    functions: list[PciFunction] = []
    for start in range(0, len(addresses), _BATCH):
        reads = list(host.read_directories(DEVICES, addresses[start:start + _BATCH], _MANDATORY_NAMES,
                                           optional=_OPTIONAL, links=_LINKS))
        groups = sorted({group for _, found in reads if isinstance(found, DirectoryRead) and found.names
                         and (group := found.links.get("iommu_group")) and group.isdigit()})
        group_types = host.read_children(IOMMU_GROUPS, groups, ("type",)) if groups else {}
        for address, found in reads:
            function = read_function(reader, address, found, group_types)
            if function is not None:
                functions.append(function)
        del reads, group_types
    labels, origins = device_labels(reader, functions, config)
    features = {"device": Feature(instances=[f.instance for f in functions], origin=DEVICES)}
    return SourceResult(NAME, features, labels, reader.errors, origins)


def read_device_directory(host: HostFS, address: str) -> DirectoryRead | HostFileError:
    """A function's directory read in one go (:meth:`HostFS.read_directory`), or the error
    that says why its path could not be resolved (reported by :func:`read_function`)."""
    try:
        return host.read_directory(f"{DEVICES}/{address}", _MANDATORY_NAMES, optional=_OPTIONAL, links=_LINKS)
    except HostFileError as exc:
        return exc


def read_function(reader: AttributeReader, address: str, found: DirectoryRead | HostFileError | None = None,
                  group_types: GroupTypes | None = None) -> PciFunction | None:
    """One PCI function, or ``None`` (with an error) if it cannot be trusted.

    Files are read in the resolved ``/sys/devices/...`` directory: it is the path the
    kernel really exposes (and the one errors should name), and it has no links left to
    follow, which matters for replaying a recorded tree of hundreds of functions.

    This runs for each of a big host's hundreds of functions: the common case (every file
    there and well-formed) builds no path or message strings; each check that fails says
    exactly what it did before.

    ``found``: the directory as :func:`read_device_directory` read it (read here when not
    given); ``group_types``: the IOMMU groups' ``type`` files already read
    (:meth:`HostFS.read_children` of ``/sys/kernel/iommu_groups``; a group not in it is read here).
    """
    # one listing of the device directory says which optional files and links exist, so
    # absent ones cost nothing (a function has ~35 entries; most lack sriov_*, physfn, iommu);
    # the directory is resolved, listed and read through one descriptor
    if found is None:
        found = read_device_directory(reader.host, address)
    if isinstance(found, HostFileError):
        reader.error(f"{DEVICES}/{address}", f"cannot resolve: {found.reason}")
        return None
    device_dir, present, _, values, failures, links = found
    if not present:
        host = reader.host
        if not host.is_dir(device_dir):
            entry = f"{DEVICES}/{address}"
            if host.is_link(entry):
                reader.error(device_dir, f"device {address} vanished during scan (link target is gone)")
            else:
                reader.error(entry, f"{address} is not a device directory; skipped")
            return None
        # a directory that could not be listed: its mandatory files say what is wrong
        present = frozenset()
        values, failures = host.read_attrs(device_dir, _MANDATORY_NAMES)
        links = {}

    get = values.get
    ids = f"{get('class')}\n{get('vendor')}\n{get('device')}\n{get('subsystem_vendor')}\n{get('subsystem_device')}"
    known = _KERNEL_ID_ATTRS.get(ids)
    if known is not None:
        attrs = known.copy()
    elif _KERNEL_IDS.fullmatch(ids):
        lower = ids.lower()  # "0xCCCCcc\n0xVVVV\n0xDDDD\n0xSSSS\n0xTTTT": the class is its first 4 digits
        attrs = {"class": lower[2:6], "vendor": lower[11:15], "device": lower[18:22],
                 "subsystem_vendor": lower[25:29], "subsystem_device": lower[32:36]}
        if len(_KERNEL_ID_ATTRS) < _KERNEL_ID_ATTRS_MAX:
            _KERNEL_ID_ATTRS[ids] = attrs.copy()
    else:
        checked = _checked_ids(reader, address, device_dir, values, failures)
        if checked is None:
            return None
        attrs = checked

    has_sriov_file = False
    if "sriov_totalvfs" in present:
        failure = failures.get("sriov_totalvfs")
        if failure is not None:
            has_sriov_file = True
            reader.error(f"{device_dir}/sriov_totalvfs", f"unreadable: {failure.reason}")
        else:
            totalvfs = get("sriov_totalvfs")
            has_sriov_file = totalvfs is not None
            if totalvfs:
                if is_decimal(totalvfs):
                    attrs["sriov_totalvfs"] = totalvfs
                else:
                    reader.error(f"{device_dir}/sriov_totalvfs", f"not a VF count: {totalvfs[:40]!r}")
    # the common IOMMU case inline (a numbered group whose type was read, no ``iommu`` link):
    # exactly what add_iommu_attributes does for it; anything else goes there
    group = links.get("iommu_group")
    read = group_types.get(group) if group and group_types else None
    if read is not None and not read[1] and "iommu" not in present and group.isdigit():
        group_type = read[0].get("type")
        if group_type:
            attrs["iommu_group/type"] = group_type
        attrs["iommu_group"] = group
    else:
        add_iommu_attributes(attrs, reader, device_dir, present, links, group_types)
    add_extra_attributes(attrs, reader, device_dir, address, values, failures, links)
    return PciFunction(Instance(attrs, device_dir), has_sriov_file)


def _checked_ids(reader: AttributeReader, address: str, device_dir: str, values: Mapping[str, str | None],
                 failures: Mapping[str, HostFileError]) -> dict[str, str] | None:
    """The mandatory IDs checked file by file, the first failure reported (what it is: missing,
    empty, unreadable, malformed) and ``None`` returned; the path for all but the kernel's form."""
    attrs: dict[str, str] = {}
    for name, digits, width in _MANDATORY_WIDTHS:
        raw = values.get(name)
        if not raw:  # missing, empty or unreadable: say which, and skip the device
            reader.required_value(f"{device_dir}/{name}", raw, failures.get(name), f"device {address} skipped")
            return None
        if len(raw) == width and raw[:2] == "0x" and not raw[2:].strip(_HEX_CHARS):
            value = raw[2:].lower()
        else:
            try:
                value = hex_digits(raw, digits, prefixed=True)
            except MalformedId as exc:
                reader.error(f"{device_dir}/{name}", f"{exc}; device {address} skipped")
                return None
        attrs[name] = value[:4] if name == "class" else value
    return attrs


def add_iommu_attributes(attrs: dict[str, str], reader: AttributeReader, device_dir: str, present: Container[str],
                         links: Mapping[str, str | None], group_types: GroupTypes | None = None) -> None:
    """NFD's optional ``iommu_group/type`` and ``iommu/intel-iommu/version`` (plus our group
    number), added to ``attrs``.  On a real host both are links and are checked first, so the
    common no-IOMMU case costs no failed reads; when they are not links the files are read
    through the path as NFD does (``readSinglePciAttribute``), which covers a tree where they
    are plain directories, as in NFD's own ``testdata/source/pci``.  ``present``: the device
    directory's entries (absent entries are not tried); ``links``: its links' target names
    (:meth:`HostFS.read_directory`)."""
    has_group = "iommu_group" in present
    if not has_group and "iommu" not in present:
        return  # neither link: nothing to read (the common case without an IOMMU)
    group = links.get("iommu_group") if has_group else None
    if group and group.isdigit():
        # the link always targets /sys/kernel/iommu_groups/<n>; reading there directly
        # spares following the link through the whole device path again
        read = group_types.get(group) if group_types else None
        values, failures = read[:2] if read is not None else reader.host.read_attrs(f"{IOMMU_GROUPS}/{group}", ("type",))
        group_type = values.get("type")
        if "type" in failures:
            reader.error(failures["type"].host_path, f"unreadable: {failures['type'].reason}")
    else:
        group_type = None if group or not has_group else reader.attr(f"{device_dir}/iommu_group/type")
    if group_type:
        attrs["iommu_group/type"] = group_type
    if group:
        attrs["iommu_group"] = group
    # a device has an ``iommu`` only with an ``iommu_group``: no group, no second read
    if "iommu" not in present:
        return
    if links.get("iommu") or (group_type and not group):
        version = reader.attr(f"{device_dir}/iommu/intel-iommu/version")
        if version:
            attrs["iommu/intel-iommu/version"] = version


def add_extra_attributes(attrs: dict[str, str], reader: AttributeReader, device_dir: str, address: str,
                         values: Mapping[str, str | None], failures: Mapping[str, HostFileError],
                         links: Mapping[str, str | None]) -> None:
    """Our additions, added to ``attrs``: what a device count or a driver-aware rule needs.
    ``values``/``failures``: the device's files as read (:meth:`HostFS.read_directory`); a file
    that could not be read is reported when its value is asked for, in this order."""
    attrs["address"] = address
    driver = links.get("driver")
    if driver:
        attrs["driver"] = driver
    physfn = links.get("physfn")
    if physfn:
        attrs["physfn"] = physfn

    if failures:
        def read(name: str) -> str | None:
            failure = failures.get(name)
            if failure is not None:
                reader.error(failure.host_path, f"unreadable: {failure.reason}")
                return None
            return values.get(name)
    else:  # the common case: every file read (no closure to make per function)
        read = values.get

    numa = read("numa_node")
    if numa is not None and numa != "-1":
        if is_decimal(numa):
            attrs["numa_node"] = _decimal(numa)
        else:
            reader.error(f"{device_dir}/numa_node", f"not a NUMA node number: {numa[:40]!r}")
    revision = read("revision")
    if revision is not None:
        if len(revision) == 4 and revision[:2] == "0x" and not revision[2:].strip(_HEX_CHARS):
            attrs["revision"] = revision[2:].lower()  # the kernel's form, as hex_digits returns it
        else:
            try:
                attrs["revision"] = hex_digits(revision, 2, prefixed=True)
            except MalformedId as exc:
                reader.error(f"{device_dir}/revision", str(exc))
    numvfs = read("sriov_numvfs")
    if numvfs is not None:
        if is_decimal(numvfs):
            attrs["sriov_numvfs"] = _decimal(numvfs)
        else:
            reader.error(f"{device_dir}/sriov_numvfs", f"not a VF count: {numvfs[:40]!r}")


def _decimal(digits: str) -> str:
    """ASCII decimal digits in canonical form (``007`` -> ``7``): ``str(int(...))`` only where a
    leading zero makes it differ (a single digit, the usual NUMA node or VF count, is its own)."""
    return digits if len(digits) == 1 or digits[0] != "0" else str(int(digits))


def device_labels(
    reader: AttributeReader, functions: list[PciFunction], config: Config
) -> tuple[dict[str, str], dict[str, str]]:
    """NFD's ``pci-<devlabel>.present`` / ``.sriov.capable`` for whitelisted classes."""
    fields, unknown = canonical_label_fields(config.device_label_fields, LABEL_FIELDS, DEFAULT_LABEL_FIELDS)
    for field in unknown:
        reader.error("", f"unknown pci label field {field!r} ignored (valid: {', '.join(LABEL_FIELDS)})")
    labels: dict[str, str] = {}
    origins: dict[str, str] = {}
    # the whitelist lowered once per pass, not once per function (first_whitelisted's match)
    whitelist = tuple(str(entry).lower() for entry in config.device_class_whitelist)
    for function in functions:
        instance = function.instance
        attrs = instance.attributes
        device_class = attrs["class"]
        if not device_class or not device_class.startswith(whitelist):
            continue
        devlabel = "_".join([attrs.get(f, "") for f in fields])  # device_label, inline
        key = nfd_label(NAME, f"{devlabel}.present")
        labels[key] = "true"
        origins.setdefault(key, instance.origin)
        # NFD: the file's existence is enough, its value is not checked
        if function.has_sriov_file:
            key = nfd_label(NAME, f"{devlabel}.sriov.capable")
            labels[key] = "true"
            origins.setdefault(key, instance.origin)
    return labels, origins
