"""Which discovery sources a device event can change, and what the poller fingerprints.

A hotplug only ever touches a few sources, so the loop rediscovers those and keeps the cached
results of the rest (a USB plug costs the usb, network and storage sources, not a full pass
with CPUID and kernel config). The map is deliberately generous: a USB or PCI device can be
a NIC or a disk, so those bring ``network`` and ``storage`` along; a driver module loading
after a PCI card appears (apex/gasket for a Coral) changes ``kernel``.

Subsystems outside the map are not subscribed to (pyudev) or are dropped (injection socket),
so a busy host's ``input`` events cost nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

SUBSYSTEM_SOURCES: dict[str, tuple[str, ...]] = {
    "pci": ("pci", "network", "storage"),
    "usb": ("usb", "network", "storage"),
    "net": ("network",),
    "block": ("storage",),
    "nvme": ("storage",),
    "module": ("kernel",),
    "cpu": ("cpu",),
    "memory": ("memory",),
    "nd": ("memory",),
    "platform": ("devicetree",),
    # the nodes of a USB serial adapter, a webcam or a sound card come and go with their own
    # events (after the USB device's): a pass re-reads the USB devices and resolves /dev again
    "tty": ("usb",),
    "video4linux": ("usb",),
    "sound": ("usb",),
}
"""uevent SUBSYSTEM -> discovery sources it can change."""

MONITORED_SUBSYSTEMS: tuple[str, ...] = tuple(sorted(SUBSYSTEM_SOURCES))

KNOWN_ACTIONS = frozenset({"add", "remove", "change", "move", "online", "offline", "bind", "unbind", "poll"})
"""Metric label values for ``action``; anything else is counted as ``other`` (bounded cardinality)."""

POLL_LISTINGS: dict[str, tuple[str, ...]] = {
    "pci": ("/sys/bus/pci/devices",),
    "usb": ("/sys/bus/usb/devices",),
    "net": ("/sys/class/net",),
    "block": ("/sys/block",),
    "platform": ("/proc/device-tree", "/sys/firmware/devicetree/base"),
    "tty": ("/sys/class/tty",),
    "video4linux": ("/sys/class/video4linux",),
    "sound": ("/sys/class/sound",),
}
"""Cheap directory listings the poller compares, per subsystem (no file contents)."""

POLL_FILES: dict[str, tuple[str, ...]] = {"module": ("/proc/modules",)}
"""Small files the poller compares by their first column (loaded module names)."""


def sources_for(subsystem: str, enabled: Iterable[str] | None = None) -> frozenset[str]:
    """Sources to rediscover after an event on ``subsystem`` (limited to ``enabled``)."""
    wanted = frozenset(SUBSYSTEM_SOURCES.get(subsystem, ()))
    return wanted if enabled is None else wanted & frozenset(enabled)


def ends_burst(subsystem: str, action: str, properties: Mapping[str, str]) -> bool:
    """Whether this event is the last of its device's burst, so the pass need not wait out the
    quiet gap. The kernel announces a USB device first (``add`` of the ``usb_device``), then
    its interfaces (``add``, ``bind`` of their drivers), and binds the device itself last
    (``usb_generic_driver_probe`` returns after the interfaces are registered); on unplug the
    interfaces go first and the device's ``remove`` is the last event. A network interface is
    complete in sysfs when its ``add`` is sent (its ``queues`` objects follow, which no source
    reads). Anything else waits for the quiet gap."""
    if subsystem == "usb":
        return properties.get("DEVTYPE") == "usb_device" and action in ("bind", "remove")
    return subsystem == "net" and action in ("add", "remove", "move")


def metric_labels(subsystem: str, action: str) -> tuple[str, str]:
    """Bounded label values for ``nfa_hotplug_events_total`` (event fields are hostile input)."""
    return (subsystem if subsystem in SUBSYSTEM_SOURCES else "other",
            action if action in KNOWN_ACTIONS else "other")
