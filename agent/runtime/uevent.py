"""Kernel uevents: the record the run loop acts on, and the netlink wire format.

A kernel uevent datagram (``NETLINK_KOBJECT_UEVENT``, group 1) is ``action@devpath\\0``
followed by ``KEY=VALUE\\0`` pairs (``ACTION``, ``DEVPATH``, ``SUBSYSTEM``, ``SEQNUM``, ...).
``parse_kernel_uevent`` turns one datagram into a ``UEvent``, the same shape
``from_pyudev`` builds from a ``pyudev.Device``, so the injection socket used by tests and
the real pyudev monitor feed the loop identically.

Every datagram is hostile input: oversize, truncated, binary junk, libudev-framed (group 2)
messages and events without ``SUBSYSTEM`` are refused with ``UEventError`` (the caller logs
and drops them); nothing here raises anything else.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

MAX_DATAGRAM = 8192
"""The kernel's UEVENT_BUFFER_SIZE is 2048; anything far larger is not a kernel uevent."""
MAX_PROPERTIES = 128
_KEY = re.compile(r"[A-Z0-9_]{1,64}\Z")
_TOKEN = re.compile(r"[A-Za-z0-9_.:+-]{1,64}\Z")
_DEVPATH = re.compile(r"/[\x21-\x7e]{0,1023}\Z")
LIBUDEV_MAGIC = b"libudev\0"


class UEventError(ValueError):
    """The datagram is not a usable kernel uevent (the message says why)."""


@dataclass(frozen=True)
class UEvent:
    """One device event: what happened (``action``) to which device (``devpath``) of which
    ``subsystem``; ``properties`` holds every KEY=VALUE the event carried."""

    action: str
    subsystem: str
    devpath: str = ""
    properties: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "properties", MappingProxyType(dict(self.properties)))

    @property
    def attributes(self) -> Mapping[str, str]:
        """Alias of ``properties`` (the brief's name for them)."""
        return self.properties

    @property
    def seqnum(self) -> int | None:
        value = self.properties.get("SEQNUM", "")
        return int(value) if value.isdigit() else None


def _text(raw: bytes, what: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UEventError(f"{what} is not UTF-8") from exc


def parse_kernel_uevent(data: bytes) -> UEvent:
    """One kernel uevent datagram -> ``UEvent``; ``UEventError`` for anything else."""
    fields = _fields(data)
    header = _text(fields[0], "header")
    action_h, at, devpath_h = header.partition("@")
    if not at or not action_h or not devpath_h:
        raise UEventError(f"header {header[:80]!r} is not action@devpath")
    properties = _properties(fields[1:])
    action = properties.get("ACTION", action_h)
    devpath = properties.get("DEVPATH", devpath_h)
    subsystem = properties.get("SUBSYSTEM", "")
    if not subsystem:
        raise UEventError("no SUBSYSTEM (truncated datagram?)")
    if action != action_h or devpath != devpath_h:
        raise UEventError("header and ACTION/DEVPATH disagree")
    for name, value in (("action", action), ("subsystem", subsystem)):
        if not _TOKEN.match(value):
            raise UEventError(f"{name} {value[:40]!r} has characters no kernel sends")
    if not _DEVPATH.match(devpath):
        raise UEventError(f"devpath {devpath[:80]!r} is not an absolute printable path")
    return UEvent(action, subsystem, devpath, properties)


def _fields(data: object) -> list[bytes]:
    """The NUL-separated fields of a datagram that can be a kernel uevent at all."""
    if not isinstance(data, (bytes, bytearray)):
        raise UEventError("not bytes")
    data = bytes(data)
    if not data:
        raise UEventError("empty datagram")
    if len(data) > MAX_DATAGRAM:
        raise UEventError(f"datagram of {len(data)} bytes is larger than any kernel uevent")
    if data.startswith(LIBUDEV_MAGIC):
        raise UEventError("libudev-framed message (udev group), not a kernel uevent")
    if not data.endswith(b"\0"):
        raise UEventError("truncated datagram (the kernel ends every field with NUL)")
    return data.rstrip(b"\0").split(b"\0")


def _properties(fields: list[bytes]) -> dict[str, str]:
    properties: dict[str, str] = {}
    for raw in fields:
        if not raw:
            continue  # tolerate doubled NULs
        key, eq, value = _text(raw, "property").partition("=")
        if not eq or not _KEY.match(key):
            raise UEventError(f"property {raw[:40]!r} is not KEY=VALUE")
        if len(properties) >= MAX_PROPERTIES:
            raise UEventError("too many properties")
        properties[key] = value
    return properties


def encode_kernel_uevent(action: str, devpath: str, subsystem: str, seqnum: int | None = None,
                         **properties: str) -> bytes:
    """The wire form of a kernel uevent, as the kernel sends it (tests, bench, debugging)."""
    props = {"ACTION": action, "DEVPATH": devpath, "SUBSYSTEM": subsystem, **properties}
    if seqnum is not None:
        props["SEQNUM"] = str(seqnum)
    body = b"".join(f"{k}={v}".encode() + b"\0" for k, v in props.items())
    return f"{action}@{devpath}".encode() + b"\0" + body


def from_pyudev(device: Any) -> UEvent:
    """A ``pyudev.Device`` received from a monitor -> ``UEvent`` (same fields as the wire)."""
    properties = {str(k): str(v) for k, v in dict(device.properties).items()}
    return UEvent(str(device.action or properties.get("ACTION", "")), str(device.subsystem or ""),
                  str(device.device_path or properties.get("DEVPATH", "")), properties)
