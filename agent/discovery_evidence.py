"""When a source's empty answer is evidence of absence, and when it is a failure to read.

Why: removal needs positive evidence. ``usb`` finding no devices because ``/sys/bus/usb/devices``
was listed and is empty means "unplugged": remove the Coral's labels. ``usb`` finding nothing
because that directory is gone (a broken mount, a changed host root, sysfs unmounted under
the agent) means nothing at all, and acting on it would strip the Node. So each source names
the host path whose successful reading is its evidence; a source that had produced features
and now cannot read that path (or produced nothing but errors) *failed wholesale*, and the
caller keeps its previous contribution (``agent.runtime.discovery_cache``).

| source | evidence path (must be readable) | wholesale failure |
|---|---|---|
| cpu | /proc/cpuinfo | unreadable, or no features and errors |
| devicetree | /sys/firmware/devicetree/base or /proc/device-tree | gone after features were found |
| kernel | /proc/sys/kernel/osrelease | unreadable |
| memory | /proc/meminfo | unreadable |
| network | /sys/class/net | not listable |
| pci | /sys/bus/pci/devices | not listable after devices were found |
| storage | /sys/block | not listable |
| system | /etc/os-release or /usr/lib/os-release | neither readable |
| usb | /sys/bus/usb/devices | not listable after devices were found |
| local | (none) | an absent features.d is the documented way to have no local features |

Any source whose result has errors and no features at all, where it had features before, is
also a wholesale failure (a parse failure of the one file it needs).
"""

from __future__ import annotations

from typing import Mapping

from agent.features import SourceResult
from agent.hostfs import HostFS

#: source -> host paths, any one of which readable (a file) or listable (a directory) is evidence
EVIDENCE: Mapping[str, tuple[str, ...]] = {
    "cpu": ("/proc/cpuinfo",),
    "devicetree": ("/sys/firmware/devicetree/base", "/proc/device-tree"),
    "kernel": ("/proc/sys/kernel/osrelease",),
    "memory": ("/proc/meminfo",),
    "network": ("/sys/class/net",),
    "pci": ("/sys/bus/pci/devices",),
    "storage": ("/sys/block",),
    "system": ("/etc/os-release", "/usr/lib/os-release"),
    "usb": ("/sys/bus/usb/devices",),
}


def _readable(host: HostFS, path: str) -> bool:
    try:
        if host.is_dir(path):
            host.listdir(path)
            return True
        if host.is_file(path):
            host.read_bytes(path, 1)
            return True
    except OSError:
        return False
    return False


def wholesale_failure(host: HostFS, name: str, new: SourceResult, previous: SourceResult | None) -> str | None:
    """Why ``new`` must not replace ``previous`` (the source failed as a whole), or None."""
    if previous is None or not (previous.features or previous.labels):
        return None  # nothing to keep: an empty answer costs nothing
    paths = EVIDENCE.get(name, ())
    if paths and not any(_readable(host, p) for p in paths):
        return f"{' or '.join(paths)} cannot be read under the host root"
    if new.errors and not new.features and not new.labels:
        return f"only errors this time: {new.errors[0]}"
    return None
