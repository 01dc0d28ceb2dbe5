"""What the catalogue says a counted device needs in a container, and which devices a pass matched.

The contract between rule evaluation (``agent.rules`` builds ``DeviceClaim``s from a rule's
``devices:`` section, ``labels/README.md``) and the device plugin (``agent.deviceplugin``
turns them into devices with ``/dev`` nodes). Pure data, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType


@dataclass(frozen=True)
class NodeSpec:
    """Where a device's /dev nodes come from.

    Per matched instance: ``usb``: /dev/bus/usb/BBB/DDD from the USB device's busnum/devnum;
    ``class``: the char devices a driver created for the matched device in that sysfs class
    (``apex`` -> /dev/apex_0, ``hailo_chardev`` -> /dev/hailo0, ``tty`` -> the /dev/ttyACM0 of a
    USB modem). From /dev itself: ``path``: one fixed node; ``glob``: a pattern whose every
    match is a device of its own, or with ``group`` one set of nodes. ``path`` and ``group``
    nodes belong to every device of the declaration (alone, they are its one device).

    ``container_path``: where the node appears in the container (default: its host name);
    ``optional``: a node that is not there is left out instead of making the device unhealthy."""

    kind: str  # "usb", "class", "path" or "glob"
    value: str = ""  # the class name, the fixed path or the pattern
    container_path: str = ""
    optional: bool = False
    group: bool = False

    @property
    def per_instance(self) -> bool:
        return self.kind in ("usb", "class")

    @property
    def per_match(self) -> bool:
        """A glob each of whose matches is a device of its own."""
        return self.kind == "glob" and not self.group


@dataclass(frozen=True)
class NotReadySpec:
    """Matched devices whose attributes equal all of ``attributes`` are advertised Unhealthy."""

    attributes: Mapping[str, str]
    reason: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "attributes", MappingProxyType(dict(self.attributes)))

    def matches(self, attributes: Mapping[str, str]) -> bool:
        return all(attributes.get(k) == v for k, v in self.attributes.items())


@dataclass(frozen=True)
class MountSpec:
    host_path: str
    container_path: str
    read_only: bool = True


@dataclass(frozen=True)
class DeviceDeclaration:
    """One resource's ``devices:`` entry in a rule."""

    resource: str
    nodes: tuple[NodeSpec, ...]
    permissions: str = "rw"
    env: Mapping[str, str] = field(default_factory=dict)
    mounts: tuple[MountSpec, ...] = ()
    not_ready: tuple[NotReadySpec, ...] = ()
    origin: str = ""  # file:line
    shares: int = 1  # how many containers may hold one device at once

    def __post_init__(self) -> None:
        object.__setattr__(self, "env", MappingProxyType(dict(self.env)))


@dataclass(frozen=True)
class MatchedDevice:
    """A device instance a rule matched: its attributes and the sysfs path it was read from."""

    feature: str  # "pci.device", "usb.device"
    attributes: Mapping[str, str]
    origin: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "attributes", MappingProxyType(dict(self.attributes)))


@dataclass(frozen=True)
class DeviceClaim:
    """A declared resource and the devices this pass matched for it."""

    declaration: DeviceDeclaration
    devices: tuple[MatchedDevice, ...] = ()
    matched: bool = True  # the rule matched this pass (its /dev patterns are looked at only then)

    @property
    def resource(self) -> str:
        return self.declaration.resource
