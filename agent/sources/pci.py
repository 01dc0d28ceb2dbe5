"""pci source: NFD's ``pci.device`` instances and ``pci-<devlabel>.*`` labels.

Reads ``/sys/bus/pci/devices/*`` as NFD does (``source/pci/pci.go``, ``utils.go``): the five
mandatory ID files, then the optional ``sriov_totalvfs``, ``iommu_group/type`` and
``iommu/intel-iommu/version``.  On top of NFD's attributes every instance carries what device
counting and our rules need and NFD leaves out: ``address``, ``driver``, ``numa_node``,
``iommu_group``, ``revision``, ``sriov_numvfs`` and, for a virtual function, ``physfn`` (its
parent's address).  NodeFeatureRules written for NFD never name those, so they still evaluate
unchanged.

A device whose mandatory files are missing or malformed is skipped with an error: the device
said what it is, and it is not a usable one.  A device with a file that could not be read
(permissions, I/O, a FIFO or directory where the file should be, no descriptor left) says
nothing: ``pci.device`` and every ``pci-*`` label are undetermined this pass, so the caller
keeps its earlier answer rather than removing the device.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

from agent.features import ElementNames, Feature, Instance, SourceResult, nfd_label
from agent.hostfs import HostFileError, HostFS
from agent.sources._config import nfd_option
from agent.sources._sysfs import AttributeReader, MalformedId, canonical_label_fields, hex_digits, is_decimal

NAME = "pci"
FEATURES: Mapping[str, ElementNames] = {
    "device": frozenset({"class", "vendor", "device", "subsystem_vendor", "subsystem_device", "sriov_totalvfs",
                         "iommu_group/type", "iommu/intel-iommu/version",  # NFD's
                         "address", "driver", "iommu_group", "numa_node", "physfn", "revision", "sriov_numvfs"}),
}
"""The features this source can produce and their element names (``agent.features.ElementNames``)."""

DEVICES = "/sys/bus/pci/devices"
LABEL_FIELDS = ("class", "vendor", "device", "subsystem_vendor", "subsystem_device")
"""Valid ``deviceLabelFields``, in NFD's canonical label order."""
DEFAULT_LABEL_FIELDS = ("class", "vendor")
UNDETERMINED_LABELS = nfd_label(NAME, "*")
"""What an unreadable device decides: any ``pci-*`` label (its own cannot be named)."""


@dataclass(frozen=True)
class Config:
    """``sources.pci`` of nfd-worker.conf, with NFD's defaults (``source/pci`` ``newDefaultConfig``)."""

    device_class_whitelist: tuple[str, ...] = nfd_option("deviceClassWhitelist", ("03", "0b40", "12"))
    device_label_fields: tuple[str, ...] = nfd_option("deviceLabelFields", DEFAULT_LABEL_FIELDS)


#: mandatory file -> number of hex digits the kernel writes after ``0x``
_MANDATORY = (("class", 6), ("vendor", 4), ("device", 4), ("subsystem_vendor", 4), ("subsystem_device", 4))
_MANDATORY_FILES = tuple(name for name, _ in _MANDATORY)
#: every file of a device directory the source reads, mandatory ones first; the others where listed
_FILES = (*_MANDATORY_FILES, "sriov_totalvfs", "numa_node", "revision", "sriov_numvfs")
#: links of a device directory whose target names the source reads
_LINKS = ("driver", "physfn")


class PciFunction(NamedTuple):
    """One readable PCI function: its instance, and whether ``sriov_totalvfs`` exists (NFD's
    ``sriov.capable`` test, which must hold even when the file's value is unusable)."""

    instance: Instance
    has_sriov_file: bool


def discover(host: HostFS, config: Config = Config()) -> SourceResult:
    reader = AttributeReader(host, NAME)
    functions: list[PciFunction] = []
    features: dict[str, Feature] = {}
    with reader.deciding("device", UNDETERMINED_LABELS):
        if reader.is_dir(DEVICES):
            for address in reader.listdir(DEVICES):
                function = read_function(reader, address)
                if function is not None:
                    functions.append(function)
            features["device"] = Feature(instances=[f.instance for f in functions], origin=DEVICES)
    labels, origins = device_labels(reader, functions, config)
    return SourceResult(NAME, features, labels, reader.errors, origins, reader.undetermined)


def read_function(reader: AttributeReader, address: str) -> PciFunction | None:
    """One PCI function, or ``None`` (with an error) if it cannot be trusted.

    Files are read in the resolved ``/sys/devices/...`` directory: it is the path the kernel
    really exposes, and the one errors name."""
    entry = f"{DEVICES}/{address}"
    device_dir = reader.resolve(entry)
    if device_dir is None:
        return None
    # one listing says which optional files and links are there: an absent one costs nothing
    present = reader.listdir(device_dir)
    values, failures = reader.attrs(device_dir, [f for f in _FILES if f in present or f in _MANDATORY_FILES])
    if not present and not reader.is_dir(device_dir):
        if reader.is_link(entry):
            reader.error(device_dir, f"device {address} vanished during scan (link target is gone)")
        else:
            reader.error(entry, f"{address} is not a device directory; skipped")
        return None
    attrs = _ids(reader, address, device_dir, values, failures)
    if attrs is None:
        return None
    totalvfs = _optional(reader, device_dir, "sriov_totalvfs", values, failures)
    has_sriov_file = totalvfs is not None or "sriov_totalvfs" in failures
    if totalvfs:
        if is_decimal(totalvfs):
            attrs["sriov_totalvfs"] = totalvfs
        else:
            reader.error(f"{device_dir}/sriov_totalvfs", f"not a VF count: {totalvfs[:40]!r}")
    links = {name: reader.link_name(f"{device_dir}/{name}") for name in _LINKS if name in present}
    _add_iommu_attributes(attrs, reader, device_dir, present)
    _add_extra_attributes(attrs, reader, device_dir, address, values, failures, links)
    return PciFunction(Instance(attrs, device_dir), has_sriov_file)


def _ids(reader: AttributeReader, address: str, device_dir: str, values: Mapping[str, str | None],
         failures: Mapping[str, HostFileError]) -> dict[str, str] | None:
    """The mandatory IDs checked file by file, the first failure reported (missing, empty,
    unreadable, malformed) and ``None`` returned."""
    attrs: dict[str, str] = {}
    for name, digits in _MANDATORY:
        path = f"{device_dir}/{name}"
        raw = reader.required_value(path, values.get(name), failures.get(name), f"device {address} skipped")
        if raw is None:
            return None
        try:
            value = hex_digits(raw, digits, prefixed=True)
        except MalformedId as exc:
            reader.error(path, f"{exc}; device {address} skipped")
            return None
        attrs[name] = value[:4] if name == "class" else value
    return attrs


def _optional(reader: AttributeReader, device_dir: str, name: str, values: Mapping[str, str | None],
              failures: Mapping[str, HostFileError]) -> str | None:
    """An optional file's value as read, its failure reported (``None``)."""
    failure = failures.get(name)
    if failure is not None:
        reader.failure(failure, path=f"{device_dir}/{name}")
        return None
    return values.get(name)


def _add_iommu_attributes(attrs: dict[str, str], reader: AttributeReader, device_dir: str, present: list[str]) -> None:
    """NFD's optional ``iommu_group/type`` and ``iommu/intel-iommu/version``, read through the
    device path as NFD's ``readSinglePciAttribute`` does (so a tree where they are plain
    directories, as in NFD's own ``testdata/source/pci``, reads too), plus our group number:
    the name of the directory the ``iommu_group`` link leads to (the seam walked it for the
    read, so the link is read once)."""
    if "iommu_group" in present:
        group_link = f"{device_dir}/iommu_group"
        group_type = reader.attr(f"{group_link}/type")
        if group_type:
            attrs["iommu_group/type"] = group_type
        group_dir = reader.resolve(group_link)
        if group_dir is not None and group_dir != group_link:  # a link, as the kernel makes it
            attrs["iommu_group"] = group_dir.rpartition("/")[2]
    if "iommu" in present:
        version = reader.attr(f"{device_dir}/iommu/intel-iommu/version")
        if version:
            attrs["iommu/intel-iommu/version"] = version


def _add_extra_attributes(attrs: dict[str, str], reader: AttributeReader, device_dir: str, address: str,
                          values: Mapping[str, str | None], failures: Mapping[str, HostFileError],
                          links: Mapping[str, str | None]) -> None:
    """Our additions: what a device count or a driver-aware rule needs."""
    attrs["address"] = address
    for name in ("driver", "physfn"):
        target = links.get(name)
        if target:
            attrs[name] = target
    numa = _optional(reader, device_dir, "numa_node", values, failures)
    if numa is not None and numa != "-1":
        if is_decimal(numa):
            attrs["numa_node"] = str(int(numa))
        else:
            reader.error(f"{device_dir}/numa_node", f"not a NUMA node number: {numa[:40]!r}")
    revision = _optional(reader, device_dir, "revision", values, failures)
    if revision is not None:
        try:
            attrs["revision"] = hex_digits(revision, 2, prefixed=True)
        except MalformedId as exc:
            reader.error(f"{device_dir}/revision", str(exc))
    numvfs = _optional(reader, device_dir, "sriov_numvfs", values, failures)
    if numvfs is not None:
        if is_decimal(numvfs):
            attrs["sriov_numvfs"] = str(int(numvfs))
        else:
            reader.error(f"{device_dir}/sriov_numvfs", f"not a VF count: {numvfs[:40]!r}")


def device_labels(
    reader: AttributeReader, functions: list[PciFunction], config: Config
) -> tuple[dict[str, str], dict[str, str]]:
    """NFD's ``pci-<devlabel>.present`` / ``.sriov.capable`` for whitelisted classes."""
    fields, unknown = canonical_label_fields(config.device_label_fields, LABEL_FIELDS, DEFAULT_LABEL_FIELDS)
    for field in unknown:
        reader.error("", f"unknown pci label field {field!r} ignored (valid: {', '.join(LABEL_FIELDS)})")
    labels: dict[str, str] = {}
    origins: dict[str, str] = {}
    whitelist = tuple(str(entry).lower() for entry in config.device_class_whitelist)
    for function in functions:
        instance = function.instance
        attrs = instance.attributes
        if not attrs["class"].startswith(whitelist):
            continue
        devlabel = "_".join(attrs.get(f, "") for f in fields)
        key = nfd_label(NAME, f"{devlabel}.present")
        labels[key] = "true"
        origins.setdefault(key, instance.origin)
        # NFD: the file's existence is enough, its value is not checked
        if function.has_sriov_file:
            key = nfd_label(NAME, f"{devlabel}.sriov.capable")
            labels[key] = "true"
            origins.setdefault(key, instance.origin)
    return labels, origins
