"""Matched device instances + the host's sysfs -> the devices a plugin advertises.

Reads go through ``HostFS`` (rooted at ``--host-root``), so a fixture tree replays a host:

- ``usb``: ``/dev/bus/usb/BBB/DDD`` from the instance's ``busnum``/``devnum`` (the kernel's
  ``usb_devnode``: ``bus/usb/%03d/%03d``);
- ``class: NAME``: the driver's char devices of sysfs class NAME for this device — class
  devices under the device's own directory (``<pci dev>/apex/apex_0``, as gasket creates
  them), or, for drivers that create them without a parent (hailo_pci:
  ``/sys/devices/virtual/hailo_chardev/hailo0``), ``/sys/class/NAME/*`` whose ``device_id``
  names the PCI address or whose ``device`` link leads to the device. The ``/dev`` name is
  the class device's ``uevent`` ``DEVNAME`` (what udev creates), else its directory name;
- ``path``: a fixed node.

A device for which no node is found (driver not bound yet) or that matches a ``notReady``
entry is advertised Unhealthy with the reason, so kubelet counts it but never allocates it.
IDs come from where the device sits: ``pci-<address>``, ``usb-<controller>-<port path>``.
"""

from __future__ import annotations

import hashlib
import posixpath
import re
from collections.abc import Mapping

from agent.device_claims import DeviceClaim, MatchedDevice, NodeSpec
from agent.deviceplugin.model import (
    DEVICE_ATTRIBUTES,
    MAX_DEVICE_ID,
    DeviceNode,
    HostMount,
    PluginDevice,
    ResourceDevices,
)
from agent.hostfs import HostFileError, HostFS

_ROOT_HUB = re.compile(r"usb\d+")
_PCI_ROOT = re.compile(r"pci[0-9a-f]{4,}:[0-9a-f]{2}")
_DEVNAME = re.compile(r"[A-Za-z0-9_.:/+-]+")


def device_id(device: MatchedDevice) -> str:
    """Stable across restarts and enumeration order: the PCI address, or the USB controller
    and port chain (``usb-0000:00:14.0-2-2``); hashed down to 63 characters if longer."""
    attrs = device.attributes
    if attrs.get("address"):
        text = f"pci-{attrs['address']}"
    elif attrs.get("sysfs_name"):
        parts = device.origin.split("/")
        hubs = [i for i, p in enumerate(parts) if _ROOT_HUB.fullmatch(p)]
        controller = parts[hubs[0] - 1] if hubs and hubs[0] > 0 else ""
        text = f"usb-{controller}-{attrs['sysfs_name']}" if controller else f"usb-{attrs['sysfs_name']}"
    else:
        text = "dev-" + device.origin.strip("/").replace("/", "-")
    if len(text) > MAX_DEVICE_ID:
        digest = hashlib.sha256(text.encode()).hexdigest()[:12]
        text = text[:MAX_DEVICE_ID - 13] + "-" + digest
    return text


def usb_node(device: MatchedDevice) -> str | None:
    bus, dev = device.attributes.get("busnum", ""), device.attributes.get("devnum", "")
    if not (bus.isdigit() and dev.isdigit()) or not (0 < int(bus) < 1000 and 0 < int(dev) < 1000):
        return None
    return f"/dev/bus/usb/{int(bus):03d}/{int(dev):03d}"


def _devname(host: HostFS, class_dev: str) -> str | None:
    """``DEVNAME`` from the class device's uevent, else its name; None if it has no ``dev``."""
    try:
        if host.read_attr(f"{class_dev}/dev") is None:
            return None
        uevent = host.read_text(f"{class_dev}/uevent") if host.exists(f"{class_dev}/uevent") else ""
    except HostFileError:
        return None
    for line in uevent.splitlines():
        if line.startswith("DEVNAME="):
            name = line[len("DEVNAME="):].strip()
            if _DEVNAME.fullmatch(name) and ".." not in name.split("/"):
                return name
    return posixpath.basename(class_dev)


def class_nodes(host: HostFS, device: MatchedDevice, class_name: str) -> list[str]:
    """``/dev/<name>`` of every char device of ``class_name`` that belongs to ``device``."""
    device_dir = host.resolve(device.origin) if device.origin else ""
    found: list[str] = []
    for child in host.listdir(f"{device_dir}/{class_name}") if device_dir else []:
        name = _devname(host, f"{device_dir}/{class_name}/{child}")
        if name:
            found.append(name)
    if not found:
        address = device.attributes.get("address", "")
        for child in host.listdir(f"/sys/class/{class_name}"):
            entry = f"/sys/class/{class_name}/{child}"
            try:
                owner = host.read_attr(f"{entry}/device_id")
            except HostFileError:
                owner = None
            linked = host.resolve(f"{entry}/device") if host.is_link(f"{entry}/device") else ""
            if (address and owner == address) or (device_dir and linked == device_dir):
                name = _devname(host, entry)
                if name:
                    found.append(name)
    return sorted(f"/dev/{n}" for n in dict.fromkeys(found))


def _nodes(host: HostFS, device: MatchedDevice, specs: tuple[NodeSpec, ...]) -> list[str]:
    paths: list[str] = []
    for spec in specs:
        if spec.kind == "usb":
            node = usb_node(device)
            paths += [node] if node else []
        elif spec.kind == "class":
            paths += class_nodes(host, device, spec.value)
        elif spec.kind == "path":
            paths.append(spec.value)
    return list(dict.fromkeys(paths))


def _numa(device: MatchedDevice) -> int | None:
    value = device.attributes.get("numa_node", "")
    return int(value) if value.isdigit() else None


def _pcie_root(host: HostFS, device: MatchedDevice) -> str:
    """``pci<domain>:<bus>``: the root bus directory the device's resolved sysfs path hangs
    under (``/sys/devices/pci0000:00/...``), as k8s.io/dynamic-resource-allocation
    ``deviceattribute`` derives ``resource.kubernetes.io/pcieRoot``; "" when not a PCI path."""
    try:
        path = host.resolve(device.origin) if device.origin else ""
    except HostFileError:
        return ""
    parts = path.split("/")
    if len(parts) > 3 and parts[1:3] == ["sys", "devices"] and _PCI_ROOT.fullmatch(parts[3]):
        return parts[3]
    return ""


def _host_attributes(host: HostFS, device: MatchedDevice) -> tuple[tuple[str, str], ...]:
    attrs = {k: v for k, v in device.attributes.items() if k in DEVICE_ATTRIBUTES and v}
    attrs["bus"] = device.feature.split(".", 1)[0]
    if "address" in attrs:
        root = _pcie_root(host, device)
        if root:
            attrs["pcie_root"] = root
    return tuple(sorted(attrs.items()))


def resolve_claim(host: HostFS, claim: DeviceClaim) -> ResourceDevices:
    declaration = claim.declaration
    devices: dict[str, PluginDevice] = {}
    for matched in claim.devices:
        ident = device_id(matched)
        try:
            paths = _nodes(host, matched, declaration.nodes)
        except HostFileError as err:
            paths, problem = [], f"cannot read its sysfs entries ({err})"
        else:
            problem = ""
        nodes = tuple(DeviceNode(p, p, declaration.permissions) for p in paths)
        why = next((spec.reason for spec in declaration.not_ready if spec.matches(matched.attributes)), "")
        if not why and not paths:
            kinds = ", ".join(s.kind if s.kind == "usb" else f"{s.kind} {s.value}" for s in declaration.nodes)
            why = problem or f"no device node found ({kinds}); is its driver bound?"
        devices[ident] = PluginDevice(ident, nodes, why, _numa(matched), matched.origin,
                                      _host_attributes(host, matched))
    mounts = tuple(HostMount(m.host_path, m.container_path, m.read_only) for m in declaration.mounts)
    return ResourceDevices(declaration.resource, tuple(devices.values()), declaration.env, mounts, declaration.origin)


def resolve_claims(host: HostFS, claims: Mapping[str, DeviceClaim]) -> dict[str, ResourceDevices]:
    """Every declared resource's devices as the host shows them now."""
    host.clear_cache()
    return {name: resolve_claim(host, claim) for name, claim in claims.items()}
