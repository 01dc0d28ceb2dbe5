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

An evidence path counts only where it was readable when the previous result was taken: a host
that never had it (the ``lscpu-*`` recordings have no ``/proc/meminfo``; a minimal container
root has no ``/etc/os-release``) answers the same every pass and is not a failure, so no
Warning is posted on every agent's second pass.

Below the whole source, one feature can be undetermined: ``cpu.topology`` when one CPU's
``topology/`` file cannot be read (NFD then reports no topology at all), ``storage.block`` when
one disk's ``queue/rotational`` cannot be read and no other disk showed a non-rotational one,
``network.device`` when a NIC's VF count cannot be read and no other NIC gave the SR-IOV label.
That is an error, not evidence that the CPUs lost their threads or the SSD or the VFs are gone:
:func:`carry_undetermined` keeps the previous pass's feature and label until a pass reads it
again. With no previous pass (a fresh agent) there is nothing to carry: the desired state then
keeps the labels the feature decides as the Node has them (``agent.rules.held``,
``DesiredNodeState.held_labels``).
"""

from __future__ import annotations

from collections.abc import Mapping

from agent.features import SourceResult, undetermined_key
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


def evidence_readable(host: HostFS, name: str) -> bool:
    """Whether the source's evidence path reads now (True for a source that has none)."""
    paths = EVIDENCE.get(name, ())
    return not paths or any(_readable(host, p) for p in paths)


def wholesale_failure(host: HostFS, name: str, new: SourceResult, previous: SourceResult | None, *,
                      had_evidence: bool = True, readable: bool | None = None) -> str | None:
    """Why ``new`` must not replace ``previous`` (the source failed as a whole), or None.
    ``had_evidence``: the evidence path was readable when ``previous`` was taken (an evidence
    path the host never had is no failure when it is still not there); ``readable``: what
    :func:`evidence_readable` says now, when the caller already asked."""
    if previous is None or not (previous.features or previous.labels):
        return None  # nothing to keep: an empty answer costs nothing
    paths = EVIDENCE.get(name, ())
    if paths and had_evidence and not (evidence_readable(host, name) if readable is None else readable):
        return f"{' or '.join(paths)} cannot be read under the host root"
    if new.errors and not new.features and not new.labels:
        return f"only errors this time: {new.errors[0]}"
    return None


def carry_undetermined(new: SourceResult, previous: SourceResult | None) -> SourceResult:
    """``new`` with each undetermined feature answered as ``previous`` answered it: the feature
    (in place of what this pass read of it: all of it, or a part such as ``storage.block``
    without one disk) and the labels it gives (only keys ``new`` names for it, so nothing else
    comes back; a ``*`` pattern's keys all as ``previous`` had them); ``new``'s errors stay, so
    the failed read is still reported. No previous answer: ``new`` as it is."""
    if not new.undetermined or previous is None:
        return new
    features, labels, origins = dict(new.features), dict(new.labels), dict(new.label_origins)
    for feature, keys in new.undetermined.items():
        if feature in previous.features:
            features[feature] = previous.features[feature]
        patterns = [k for k in keys if k.endswith("*")]
        for key in [k for k in labels if undetermined_key(patterns, k)]:
            del labels[key]
            origins.pop(key, None)
        for key, value in previous.labels.items():
            if key in keys or undetermined_key(patterns, key):
                labels[key] = value
                if key in previous.label_origins:
                    origins[key] = previous.label_origins[key]
    return SourceResult(new.source, features, labels, new.errors, origins, new.undetermined)
