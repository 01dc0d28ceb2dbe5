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

A device whose IDs are missing or malformed is skipped with an error. A file of a device that
could not be read (not absent: permissions, I/O, a FIFO where the file should be, no
descriptor left) leaves ``usb.device`` and every ``usb-*`` label undetermined this pass, so
the caller keeps its earlier answer rather than removing the device.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from agent.features import ElementNames, Feature, Instance, SourceResult, nfd_label
from agent.hostfs import HostFileError, HostFS
from agent.sources._config import nfd_option
from agent.sources._sysfs import AttributeReader, MalformedId, canonical_label_fields, device_label, hex_digits

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
UNDETERMINED_LABELS = nfd_label(NAME, "*")
"""What an unreadable device decides: any ``usb-*`` label (its own cannot be named)."""


@dataclass(frozen=True)
class Config:
    """``sources.usb`` of nfd-worker.conf, with NFD's defaults (``source/usb`` ``newDefaultConfig``)."""

    device_class_whitelist: tuple[str, ...] = nfd_option("deviceClassWhitelist", ("0e", "ef", "fe", "ff"))
    device_label_fields: tuple[str, ...] = nfd_option("deviceLabelFields", DEFAULT_LABEL_FIELDS)


_EXTRA_FILES = ("busnum", "devnum", "devpath", "speed", "manufacturer", "product")
#: every file of a device directory the source reads, in reading order, each where listed
_DEVICE_FILES = ("idVendor", "idProduct", "bDeviceClass", "serial", *_EXTRA_FILES)


def discover(host: HostFS, config: Config = Config()) -> SourceResult:
    reader = AttributeReader(host, NAME)
    instances: list[Instance] = []
    features: dict[str, Feature] = {}
    with reader.deciding("device", UNDETERMINED_LABELS):
        if reader.is_dir(DEVICES):
            # interfaces (<device>:<config>.<interface>) are never device names
            for name in reader.listdir(DEVICES):
                if ":" not in name:
                    instances.extend(read_device(reader, name))
            features["device"] = Feature(instances=instances, origin=DEVICES)
    labels, origins = device_labels(reader, instances, config)
    return SourceResult(NAME, features, labels, reader.errors, origins, reader.undetermined)


def read_device(reader: AttributeReader, name: str) -> list[Instance]:
    """The instances one USB device yields (none, with an error, if its IDs are bad).

    The device directory is listed once: which optional files to read, and its interface
    directories. Files are read in the resolved directory (instances name it), errors name
    them below the bus link (``/sys/bus/usb/devices/..``), as NFD's glob finds them."""
    entry = f"{DEVICES}/{name}"
    device_dir = reader.resolve(entry)
    if device_dir is None:
        return []
    present = reader.listdir(device_dir)
    if "idProduct" not in present:
        return []  # an interface, or a device that vanished before we looked
    values, failures = reader.attrs(device_dir, [f for f in _DEVICE_FILES if f in present])
    attrs = _attributes(reader, name, entry, values, failures)
    if attrs is None:
        return []
    interfaces = read_interfaces(reader, entry, present, device_dir)
    if attrs.get("class") != "00":
        driver = next((driver for _, _, driver in interfaces if driver), None)
        if driver:
            attrs["driver"] = driver
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


def _attributes(reader: AttributeReader, name: str, entry: str, values: Mapping[str, str | None],
                failures: Mapping[str, HostFileError]) -> dict[str, str] | None:
    """A device's attributes checked file by file, each failure reported in reading order;
    ``None`` (after the error) when its IDs are missing or malformed."""
    def read(file: str) -> str | None:
        failure = failures.get(file)
        if failure is not None:
            reader.failure(failure, path=f"{entry}/{file}")
            return None
        return values.get(file)

    attrs: dict[str, str] = {}
    for attr, file, digits in (("class", "bDeviceClass", 2), ("vendor", "idVendor", 4), ("device", "idProduct", 4)):
        if attr == "class":
            raw = read(file)
            if not raw:
                continue  # NFD: no class attribute, so no class-00 expansion and no label
        else:
            raw = reader.required_value(f"{entry}/{file}", values.get(file), failures.get(file),
                                        f"USB device {name} skipped")
            if raw is None:
                return None
        try:
            attrs[attr] = hex_digits(raw, digits, prefixed=False)
        except MalformedId as exc:
            reader.error(f"{entry}/{file}", f"{exc}; USB device {name} skipped")
            return None
    serial = read("serial")
    if serial:
        attrs["serial"] = serial
    attrs["sysfs_name"] = name
    for file in _EXTRA_FILES:
        value = read(file)
        if value:
            attrs[file] = value
    return attrs


def interface_prefixes(name: str) -> tuple[str, ...]:
    """How the kernel names a device's interface directories: ``1-2`` -> ``1-2:`` (``1-2:1.0``);
    a root hub ``usb3`` -> ``3-0:`` (``3-0:1.0``; ``usb3:`` is accepted too)."""
    if name.startswith("usb") and name[3:].isdigit():
        return f"{name[3:]}-0:", f"{name}:"
    return (f"{name}:",)


def read_interfaces(reader: AttributeReader, entry: str, present: Collection[str],
                    device_dir: str) -> list[tuple[str, str | None, str | None]]:
    """``(name, bInterfaceClass or None if bad, bound driver)`` per ``<devdir>/*/bInterfaceClass``.

    Only the children named as interfaces (``<device>:<config>.<interface>``) are looked at:
    a device directory holds some thirty other entries, none of which has ``bInterfaceClass``.
    They are read in the resolved ``device_dir``; errors name them below ``entry``."""
    prefixes = interface_prefixes(entry.rpartition("/")[2])
    found = []
    for child in sorted(name for name in present if ":" in name and name.startswith(prefixes)):
        path = f"{entry}/{child}/bInterfaceClass"
        values, failures = reader.attrs(f"{device_dir}/{child}", ("bInterfaceClass",))
        failure = failures.get("bInterfaceClass")
        raw = values.get("bInterfaceClass")
        if failure is not None:
            reader.failure(failure, path=path)
        elif raw is None:
            continue  # no bInterfaceClass: not an interface after all, or gone
        iface_class = None
        if raw is not None:
            try:
                iface_class = hex_digits(raw, 2, prefixed=False)
            except MalformedId as exc:
                reader.error(path, f"{exc}; interface skipped")
        found.append((child, iface_class, reader.link_name(f"{device_dir}/{child}/driver")))
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
