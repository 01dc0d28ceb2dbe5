"""What a device plugin advertises and what ``Allocate`` hands out: frozen data, no I/O.

A ``PluginDevice`` is one physical device (a PCI function, a USB device) under a stable ID
derived from where it sits (its PCI address, its USB controller and port chain), never from
enumeration order, so kubelet's checkpoint still names the right device after the agent or
the host restarts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

DEVICE_ATTRIBUTES = ("address", "vendor", "device", "class", "serial", "driver", "sysfs_name")
"""The matched device's attributes a ``PluginDevice`` keeps (PCI and USB sources' names)."""

MAX_DEVICE_ID = 63
"""``Device.ID``: "Max length of this field is 63 characters" (api.proto)."""


@dataclass(frozen=True)
class DeviceNode:
    """A host device node to create in the container (``DeviceSpec``)."""

    host_path: str
    container_path: str
    permissions: str = "rw"


@dataclass(frozen=True)
class HostMount:
    """A host path to bind into the container (``Mount``)."""

    host_path: str
    container_path: str
    read_only: bool = True


@dataclass(frozen=True)
class PluginDevice:
    """One allocatable device. ``why`` says why it is unhealthy ("" when healthy).

    ``attributes``: what the host tells of it, for DRA's ResourceSlices (``agent.dra.slices``),
    sorted (key, value) pairs from ``DEVICE_ATTRIBUTES`` of the matched device plus
    ``pcie_root`` (the PCI root bus its sysfs path hangs under) and ``bus`` (pci or usb)."""

    id: str
    nodes: tuple[DeviceNode, ...] = ()
    why: str = ""
    numa_node: int | None = None
    origin: str = ""  # sysfs path, for logs
    attributes: tuple[tuple[str, str], ...] = ()

    @property
    def healthy(self) -> bool:
        return not self.why


@dataclass(frozen=True)
class ResourceDevices:
    """Everything one resource's plugin serves: its devices and the per-container extras.

    ``shares``: how many containers may hold one device at once (the catalogue's sharing
    count); the device plugin advertises that many IDs per device, DRA that many devices
    (``agent.dra.names.device_name`` replicas)."""

    resource: str
    devices: tuple[PluginDevice, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    mounts: tuple[HostMount, ...] = ()
    origin: str = ""  # the rule's file:line
    shares: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "devices", tuple(sorted(self.devices, key=lambda d: d.id)))
        object.__setattr__(self, "env", MappingProxyType(dict(self.env)))
        object.__setattr__(self, "mounts", tuple(self.mounts))

    def by_id(self) -> dict[str, PluginDevice]:
        return {d.id: d for d in self.devices}


def endpoint_name(resource: str) -> str:
    """The socket file name for a resource, unique per resource and a plain file name:
    ``node-feature-agent.io/edgetpu`` -> ``node-feature-agent-io-edgetpu.sock``."""
    safe = "".join(c if c.isalnum() or c in "-_" else "-" for c in resource)
    return f"{safe}.sock"
