"""Matched device instances + the host's sysfs -> the devices a plugin advertises.

Reads go through ``HostFS`` (rooted at ``--host-root``), so a fixture tree replays a host:

- ``usb``: ``/dev/bus/usb/BBB/DDD`` from the instance's ``busnum``/``devnum`` (the kernel's
  ``usb_devnode``: ``bus/usb/%03d/%03d``);
- ``class: NAME``: the driver's char devices of sysfs class NAME for this device — class
  devices under the device's own directory (``<pci dev>/apex/apex_0``, as gasket creates
  them), or, for drivers that create them without a parent (hailo_pci:
  ``/sys/devices/virtual/hailo_chardev/hailo0``), ``/sys/class/NAME/*`` whose ``device_id``
  names the PCI address or whose ``device`` link leads to the device (for a USB device: to
  it or one of its interfaces, where a tty, video4linux or sound device hangs). The ``/dev``
  name is the class device's ``uevent`` ``DEVNAME`` (what udev creates), else its directory
  name;
- ``path`` and ``glob``: nodes found in /dev itself (``agent.deviceplugin.devnodes``: only
  nodes under /dev, bounded, IDs from udev's stable links or the USB port).

A device for which no node is found (driver not bound yet) or that matches a ``notReady``
entry is advertised Unhealthy with the reason, so kubelet counts it but never allocates it.
Instance IDs come from where the device sits: ``pci-<address>``, ``usb-<controller>-<port
path>``; each device says in ``id_basis`` what its ID is built from.
"""

from __future__ import annotations

import hashlib
import posixpath
import re
from collections.abc import Mapping

from agent.device_claims import DeviceClaim, DeviceDeclaration, MatchedDevice, NodeSpec
from agent.deviceplugin.devnodes import Scan, group_id
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
        found = [n for n in (_devname(host, e) for e in _class_entries_of(host, device, class_name, device_dir)) if n]
    return sorted(f"/dev/{n}" for n in dict.fromkeys(found))


def _class_entries_of(host: HostFS, device: MatchedDevice, class_name: str, device_dir: str) -> list[str]:
    """``/sys/class/<class_name>/*`` entries whose ``device_id`` names the device's PCI address
    or whose ``device`` link leads to the device (for a USB device: to it or one of its
    interfaces, where tty, video4linux and sound devices hang: ``1-2:1.0/tty/ttyACM0``)."""
    address = device.attributes.get("address", "")
    nested = device.feature == "usb.device"
    out = []
    for child in host.listdir(f"/sys/class/{class_name}"):
        entry = f"/sys/class/{class_name}/{child}"
        try:
            owner = host.read_attr(f"{entry}/device_id")
        except HostFileError:
            owner = None
        linked = host.resolve(f"{entry}/device") if host.is_link(f"{entry}/device") else ""
        mine = bool(device_dir) and (linked == device_dir or (nested and linked.startswith(device_dir + "/")))
        if (address and owner == address) or mine:
            out.append(entry)
    return out


def _instance_nodes(host: HostFS, device: MatchedDevice, spec: NodeSpec) -> list[str]:
    if spec.kind == "usb":
        node = usb_node(device)
        return [node] if node else []
    return class_nodes(host, device, spec.value)


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


def _with_container_path(nodes: list[str], spec: NodeSpec, permissions: str) -> tuple[list[DeviceNode], str]:
    """``nodes`` as DeviceNodes at ``spec.container_path`` when one is given; a problem when
    that would put several host nodes at one container path."""
    if spec.container_path and len(nodes) > 1:
        return [], (f"containerPath {spec.container_path} given, but {spec.kind} {spec.value} yields "
                    f"{len(nodes)} nodes ({' '.join(nodes)})")
    target = spec.container_path
    return [DeviceNode(n, target or n, permissions) for n in nodes], ""


def resolve_claim(host: HostFS, claim: DeviceClaim) -> ResourceDevices:
    """One declared resource: a device per matched instance (``usb``/``class`` entries), else
    per match of a ``glob`` without ``group``, else (only ``path``/``group`` entries) one
    device; ``path`` and ``group`` nodes go to every device. /dev is read only when the rule
    matched this pass."""
    declaration = claim.declaration
    scan = Scan(host)
    read_dev = claim.matched or bool(claim.devices)
    shared, missing = _shared_nodes(scan, declaration) if read_dev else ([], [])
    lacking = f"no node for {', '.join(missing)}" if missing else ""
    devices: dict[str, PluginDevice] = {}
    if any(spec.per_instance for spec in declaration.nodes):
        for matched in claim.devices:
            device = _instance_device(host, matched, declaration, shared, lacking)
            devices[device.id] = device
    elif any(spec.per_match for spec in declaration.nodes):
        devices = _match_devices(scan, declaration, shared, lacking) if read_dev else {}
    elif shared or missing:
        ident, basis = group_id(declaration.nodes)
        devices[ident] = PluginDevice(ident, tuple(shared), lacking, None, "", id_basis=basis)
    mounts = tuple(HostMount(m.host_path, m.container_path, m.read_only) for m in declaration.mounts)
    return ResourceDevices(declaration.resource, tuple(devices.values()), declaration.env, mounts, declaration.origin,
                           declaration.shares, scan.undetermined, tuple(scan.notes))


def _match_devices(scan: Scan, declaration: DeviceDeclaration, shared: list[DeviceNode],
                   lacking: str) -> dict[str, PluginDevice]:
    """A device per node the declaration's ``glob`` entries without ``group`` match."""
    devices: dict[str, PluginDevice] = {}
    for spec in declaration.nodes:
        for match in scan.each(spec) if spec.per_match else ():
            node = DeviceNode(match.node, match.container_path, declaration.permissions)
            devices.setdefault(match.ident, PluginDevice(match.ident, _unique([node, *shared]), lacking, None,
                                                         match.path, id_basis=match.basis))
    return devices


def _shared_nodes(scan: Scan, declaration: DeviceDeclaration) -> tuple[list[DeviceNode], list[str]]:
    """The ``path`` and ``group`` nodes every device gets, and the entries that found none and
    are not ``optional``."""
    nodes: list[DeviceNode] = []
    missing: list[str] = []
    for spec in declaration.nodes:
        if spec.kind == "path" or (spec.kind == "glob" and spec.group):
            found = scan.group(spec)
            if not found and not spec.optional:
                missing.append(f"{spec.kind} {spec.value}")
            nodes += [DeviceNode(m.node, m.container_path, declaration.permissions) for m in found]
    return nodes, missing


def _instance_device(host: HostFS, matched: MatchedDevice, declaration: DeviceDeclaration,
                     shared: list[DeviceNode], lacking: str) -> PluginDevice:
    ident = device_id(matched)
    nodes: list[DeviceNode] = []
    problems: list[str] = []
    try:
        for spec in declaration.nodes:
            if spec.per_instance:
                found, problem = _with_container_path(_instance_nodes(host, matched, spec), spec,
                                                      declaration.permissions)
                nodes += found
                problems += [problem] if problem else []
    except HostFileError as err:
        nodes, problems = [], [f"cannot read its sysfs entries ({err})"]
    why = next((spec.reason for spec in declaration.not_ready if spec.matches(matched.attributes)), "")
    if not why and problems:
        why = "; ".join(problems)
    if not why and not nodes:
        kinds = ", ".join(s.kind if s.kind == "usb" else f"{s.kind} {s.value}"
                          for s in declaration.nodes if s.per_instance)
        why = f"no device node found ({kinds}); is its driver bound?"
    return PluginDevice(ident, _unique(nodes + shared), why or lacking, _numa(matched), matched.origin,
                        _host_attributes(host, matched), _instance_basis(matched))


def _unique(nodes: list[DeviceNode]) -> tuple[DeviceNode, ...]:
    """Each host node once (the first entry that named it wins)."""
    first: dict[str, DeviceNode] = {}
    for node in nodes:
        first.setdefault(node.host_path, node)
    return tuple(first.values())


def _instance_basis(device: MatchedDevice) -> str:
    if device.attributes.get("address"):
        return "its PCI address"
    if device.attributes.get("sysfs_name"):
        return "its USB controller and port path"
    return "its sysfs path"


def resolve_claims(host: HostFS, claims: Mapping[str, DeviceClaim]) -> dict[str, ResourceDevices]:
    """Every declared resource's devices as the host shows them now."""
    host.clear_cache()
    return {name: resolve_claim(host, claim) for name, claim in claims.items()}
