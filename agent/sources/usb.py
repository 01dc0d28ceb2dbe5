"""usb source: NFD's ``usb.device`` instances and ``usb-<devlabel>.present`` labels.

Follows ``source/usb/{usb,utils}.go``: every ``/sys/bus/usb/devices/*`` entry with an
``idProduct`` is a device (root hubs included, interfaces have no ``idProduct``); its
``bDeviceClass``, ``idVendor``, ``idProduct`` and ``serial`` become ``class``, ``vendor``,
``device`` and ``serial``, raw sysfs hex without ``0x``.  A device whose class is ``00``
("defined per interface", e.g. the Coral USB Accelerator before its firmware is loaded)
yields one instance per ``<devdir>/*/bInterfaceClass`` with ``class`` replaced, duplicates
kept, exactly as NFD does.

Extra attributes NFD lacks: ``sysfs_name`` (``2-1``), ``busnum``, ``devnum``, ``devpath``,
``speed``, ``manufacturer``, ``product``; per-interface instances also carry ``interface``
(``2-1:1.0``) and that interface's bound ``driver``.  A device-level instance carries the
driver of its first bound interface (the device itself is always bound to ``usb``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Collection, Mapping

from agent.features import ElementNames, Feature, Instance, SourceResult, nfd_label
from agent.hostfs import DirectoryRead, HostFileError, HostFS
from agent.sources._config import nfd_option
from agent.sources._sysfs import (
    _HEX_CHARS,
    AttributeReader,
    MalformedId,
    PrefetchedAttrs,
    canonical_label_fields,
    device_label,
    hex_digits,
)

NAME = "usb"
FEATURES: Mapping[str, ElementNames] = {
    "device": frozenset({"class", "vendor", "device", "serial",  # NFD's
                         "busnum", "devnum", "devpath", "speed", "manufacturer", "product", "sysfs_name", "driver",
                         "interface"}),
}
"""The features this source can produce and their element names (``agent.features.ElementNames``)."""

DEVICES = "/sys/bus/usb/devices"
LABEL_FIELDS = ("class", "vendor", "device", "serial")
"""Valid ``deviceLabelFields``, in NFD's canonical label order."""
DEFAULT_LABEL_FIELDS = ("class", "vendor", "device")


@dataclass(frozen=True)
class Config:
    """``sources.usb`` of nfd-worker.conf, with NFD's defaults (``source/usb`` ``newDefaultConfig``)."""

    device_class_whitelist: tuple[str, ...] = nfd_option("deviceClassWhitelist", ("0e", "ef", "fe", "ff"))
    device_label_fields: tuple[str, ...] = nfd_option("deviceLabelFields", DEFAULT_LABEL_FIELDS)
_EXTRA_FILES = ("busnum", "devnum", "devpath", "speed", "manufacturer", "product")
#: optional files of a device directory, read only when its listing shows them
_OPTIONAL_FILES = ("bDeviceClass", "serial", *_EXTRA_FILES)
#: every file of a device directory the source reads, in reading order, each where listed
_DEVICE_FILES = ("idVendor", "idProduct", *_OPTIONAL_FILES)


def discover(host: HostFS, config: Config = Config()) -> SourceResult:
    reader = AttributeReader(host, NAME)
    if not host.is_dir(DEVICES):
        return SourceResult(NAME)
    instances: list[Instance] = []
    # interfaces (<device>:<config>.<interface>) are never device names; each device directory
    # is read in one go (HostFS.read_directories): one listing says which optional files to read
    # and names its interface directories, instead of a failed open per absent file
    devices = [name for name in reader.listdir(DEVICES) if ":" not in name]
    for name, found in host.read_directories(DEVICES, devices, optional=_DEVICE_FILES, through_link=True):
        entry = f"{DEVICES}/{name}"
        if isinstance(found, HostFileError):
            reader.error(entry, f"unlistable: {found.reason}")
            continue
        if found.listing_error is not None:
            reader.error(entry, f"unlistable: {found.listing_error.reason}")
            continue
        if "idProduct" not in found.names:
            continue  # an interface, or a device that vanished before we looked
        instances.extend(read_device(reader, name, found))
    labels, origins = device_labels(reader, instances, config)
    features = {"device": Feature(instances=instances, origin=DEVICES)}
    return SourceResult(NAME, features, labels, reader.errors, origins)


def read_device(reader: AttributeReader, name: str, found: DirectoryRead | None = None) -> list[Instance]:
    """The instances one USB device yields (none, with an error, if its IDs are bad).

    ``found`` is the device directory already read (:meth:`HostFS.read_directory` through
    ``/sys/bus/usb/devices/<name>``); without it the directory is read here."""
    entry = f"{DEVICES}/{name}"
    if found is None:
        try:
            found = reader.host.read_directory(entry, optional=_DEVICE_FILES, through_link=True)
        except HostFileError as exc:
            reader.error(entry, f"cannot resolve: {exc.reason}")
            return []
    device_dir = found.path
    present = found.names or frozenset()
    values = found.values
    klass, vendor, product = values.get("bDeviceClass"), values.get("idVendor"), values.get("idProduct")
    # the common case checked in one go: every file read, the IDs in the kernel's form (exactly
    # 4 hex digits, the class 2 or absent); anything else takes the checks below, which say why
    if (not found.failures and vendor and product and len(vendor) == 4 and len(product) == 4
            and (not klass or len(klass) == 2) and not (vendor + product + (klass or "")).strip(_HEX_CHARS)):
        attrs = {"class": klass.lower()} if klass else {}
        attrs["vendor"] = vendor.lower()
        attrs["device"] = product.lower()
        serial = values.get("serial")
        if serial:
            attrs["serial"] = serial
        attrs["sysfs_name"] = name
        for file in _EXTRA_FILES:
            value = values.get(file)
            if value:
                attrs[file] = value
    else:
        checked = _checked_attributes(reader, name, entry, found)
        if checked is None:
            return []
        attrs = checked
    return _instances(reader, entry, present, device_dir, attrs)


def _checked_attributes(reader: AttributeReader, name: str, entry: str, found: DirectoryRead) -> dict[str, str] | None:
    """A device's attributes checked file by file, each failure reported in reading order;
    ``None`` (after the error) when its IDs are missing or malformed."""
    files = PrefetchedAttrs(reader, found.values, found.failures)
    attrs: dict[str, str] = {}
    for attr, file, digits in (("class", "bDeviceClass", 2), ("vendor", "idVendor", 4), ("device", "idProduct", 4)):
        if attr == "class":
            raw = files.attr(file)
            if not raw:
                continue  # NFD: no class attribute, so no class-00 expansion and no label
        else:
            raw = reader.required_value(f"{entry}/{file}", files.values.get(file), files.failures.get(file),
                                        f"USB device {name} skipped")
            if raw is None:
                return None
        try:
            attrs[attr] = hex_digits(raw, digits, prefixed=False)
        except MalformedId as exc:
            reader.error(f"{entry}/{file}", f"{exc}; USB device {name} skipped")
            return None
    serial = files.attr("serial")
    if serial:
        attrs["serial"] = serial
    attrs["sysfs_name"] = name
    values = found.values
    for file in _EXTRA_FILES:
        value = files.attr(file) if found.failures else values.get(file)  # (attr reports a failure)
        if value:
            attrs[file] = value
    return attrs


def _instances(reader: AttributeReader, entry: str, present: Collection[str], device_dir: str,
               attrs: dict[str, str]) -> list[Instance]:
    """The device's instance, or one per interface for class ``00`` (NFD's expansion)."""
    interfaces = read_interfaces(reader, entry, present, device_dir)
    if attrs.get("class") != "00":
        for _, _, driver in interfaces:
            if driver:
                attrs["driver"] = driver
                break
        return [Instance(attrs, device_dir)]
    expanded = []
    for iface_name, iface_class, driver in interfaces:
        if iface_class is None:
            continue
        iface_attrs = {**attrs, "class": iface_class, "interface": iface_name}  # "class" keeps its place
        if driver:
            iface_attrs["driver"] = driver
        expanded.append(Instance(iface_attrs, f"{device_dir}/{iface_name}"))
    return expanded


def interface_prefixes(name: str) -> tuple[str, ...]:
    """How the kernel names a device's interface directories: ``1-2`` -> ``1-2:`` (``1-2:1.0``);
    a root hub ``usb3`` -> ``3-0:`` (``3-0:1.0``; ``usb3:`` is accepted too)."""
    if name.startswith("usb") and name[3:].isdigit():
        return f"{name[3:]}-0:", f"{name}:"
    return (f"{name}:",)


def read_interfaces(reader: AttributeReader, entry: str, present: Collection[str] | None = None,
                    device_dir: str | None = None) -> list[tuple[str, str | None, str | None]]:
    """``(name, bInterfaceClass or None if bad, bound driver)`` per ``<devdir>/*/bInterfaceClass``.

    Only the children named as interfaces (``<device>:<config>.<interface>``) are looked at:
    a device directory holds some thirty other entries, none of which has ``bInterfaceClass``.
    ``device_dir``: where ``entry`` resolves to, when the caller knows; the interfaces are read
    there (errors still name them below ``entry``)."""
    if present is None:
        present = reader.entries(entry)
    prefixes = interface_prefixes(entry.rpartition("/")[2])
    children = sorted([name for name in present if ":" in name and name.startswith(prefixes)])
    if not children:
        return []
    # one lookup of the device directory for all its interfaces (HostFS.read_children)
    read = reader.host.read_children(device_dir or entry, children, ("bInterfaceClass",), ("driver",))
    found = []
    for child in children:
        values, failures, links = read[child]
        raw = values.get("bInterfaceClass")
        # the common case: read, in the kernel's form (2 hex digits, as hex_digits returns it)
        if not failures and raw is not None and len(raw) == 2 and not raw.strip(_HEX_CHARS):
            found.append((child, raw.lower(), links["driver"]))
            continue
        failure = failures.get("bInterfaceClass")
        path = f"{entry}/{child}/bInterfaceClass"
        if failure is not None:
            reader.error(path, f"unreadable: {failure.reason}")
            raw = None
        elif raw is None:
            continue  # no bInterfaceClass: not an interface after all, or gone
        iface_class = None
        if raw is not None:
            try:
                iface_class = hex_digits(raw, 2, prefixed=False)
            except MalformedId as exc:
                reader.error(path, f"{exc}; interface skipped")
        found.append((child, iface_class, links["driver"]))
    return found


def device_labels(
    reader: AttributeReader, instances: list[Instance], config: Config
) -> tuple[dict[str, str], dict[str, str]]:
    """NFD's ``usb-<devlabel>.present`` for instances whose class is whitelisted."""
    fields, unknown = canonical_label_fields(config.device_label_fields, LABEL_FIELDS, DEFAULT_LABEL_FIELDS)
    for field in unknown:
        reader.error("", f"unknown usb label field {field!r} ignored (valid: {', '.join(LABEL_FIELDS)})")
    labels: dict[str, str] = {}
    origins: dict[str, str] = {}
    # first_whitelisted's prefix match with the whitelist lowered once per pass, not per instance
    whitelist = tuple(str(entry).lower() for entry in config.device_class_whitelist)
    for instance in instances:
        attrs = instance.attributes
        device_class = attrs.get("class", "")
        if not device_class or not device_class.startswith(whitelist):
            continue
        key = nfd_label(NAME, f"{device_label(attrs, fields)}.present")
        labels[key] = "true"
        origins.setdefault(key, instance.origin)
    return labels, origins
