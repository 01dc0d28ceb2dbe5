"""What a device plugin advertises and what ``Allocate`` hands out: frozen data, no I/O.

A ``PluginDevice`` is one physical device (a PCI function, a USB device, a /dev node or a
group of them) under a stable ID derived from a stable host name (its PCI address, its USB
controller and port chain, a udev by-id/by-path link), never from enumeration order alone, so
kubelet's checkpoint still names the right device after the agent or the host restarts.
"""

from __future__ import annotations

import hashlib
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
    id_basis: str = ""  # which stable host name the ID is built from (explain, plan)

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
    #: why this list may be incomplete (a bound stopped reading, a read failed): the devices
    #: not read are undetermined, so the last published ones are held, not dropped ("" = whole)
    undetermined: str = ""
    #: /dev matches refused (outside /dev, a directory, an unusable name), one line each
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "devices", tuple(sorted(self.devices, key=lambda d: d.id)))
        object.__setattr__(self, "env", MappingProxyType(dict(self.env)))
        object.__setattr__(self, "mounts", tuple(self.mounts))
        object.__setattr__(self, "notes", tuple(self.notes))

    def by_id(self) -> dict[str, PluginDevice]:
        return {d.id: d for d in self.devices}

    def replicas(self) -> dict[str, PluginDevice]:
        """The IDs the device plugin advertises: ``shares`` per device (``replica_id``), each
        naming the device whose nodes ``Allocate`` hands out."""
        return {replica_id(d.id, k): d for d in self.devices for k in range(max(1, self.shares))}


def replica_id(device_id: str, replica: int) -> str:
    """Replica 0 is the device's own ID (a count of one advertises IDs as before); replica k
    appends ``::k`` (no stable ID holds ``::``: ``devnodes.stable_text`` folds it), shortened with a digest of the whole to stay within 63 characters."""
    if replica == 0:
        return device_id
    suffix = f"::{replica}"
    if len(device_id) + len(suffix) <= MAX_DEVICE_ID:
        return device_id + suffix
    digest = hashlib.sha256(device_id.encode()).hexdigest()[:12]
    return device_id[:MAX_DEVICE_ID - len(suffix) - 13] + "-" + digest + suffix


def endpoint_name(resource: str) -> str:
    """The socket file name for a resource, unique per resource and a plain file name:
    ``node-feature-agent.io/edgetpu`` -> ``node-feature-agent-io-edgetpu.sock``."""
    safe = "".join(c if c.isalnum() or c in "-_" else "-" for c in resource)
    return f"{safe}.sock"
