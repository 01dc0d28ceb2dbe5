"""memory source: NFD's ``memory.*`` features and ``memory-*`` labels.

NUMA node count, swap, NVDIMM namespaces and hugepage pools, from the same files NFD reads
(``source/memory/memory.go``), plus one extra attribute feature ``memory.meminfo``
(``MemTotal`` in bytes) that NFD does not have but capacity rules find useful. A file that
could not be read (not absent: permissions, I/O) leaves the feature it decides, and its
labels, undetermined this pass: the caller keeps its earlier answer. So does one read but not
whole: ``/proc/swaps`` and ``/proc/meminfo`` empty or cut mid-line (the kernel ends every
line with a newline and always writes the first one: ``swap_show``'s header, mm/swapfile.c;
``MemTotal``, fs/proc/meminfo.c ``meminfo_proc_show``).
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import dataclass

from agent.features import ElementNames, Feature, Instance, SourceResult, nfd_label
from agent.hostfs import HostFS
from agent.sources._sysfs import AttributeReader

NAME = "memory"
FEATURES: Mapping[str, ElementNames] = {
    "numa": frozenset({"is_numa", "node_count"}),
    "swap": frozenset({"enabled"}),
    "nv": frozenset({"name", "devtype", "mode"}),
    "hugepages": None,  # "enabled" and one hugepages-<size> per page size
    "meminfo": frozenset({"MemTotal"}),
}
"""The features this source can produce and their element names (``agent.features.ElementNames``)."""

NODES = "/sys/bus/node/devices"
SWAPS = "/proc/swaps"
ND_DEVICES = "/sys/bus/nd/devices"
HUGEPAGES = "/sys/kernel/mm/hugepages"
MEMINFO = "/proc/meminfo"
_BINARY_SUFFIXES = (("Ei", 1 << 60), ("Pi", 1 << 50), ("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10))


def quantity_name(size_kb: int) -> str:
    """A page size in KiB as Kubernetes' canonical binary Quantity: 2048 -> ``2Mi``, 1048576 -> ``1Gi``."""
    size = size_kb * 1024
    for suffix, unit in _BINARY_SUFFIXES:
        if size % unit == 0:
            return f"{size // unit}{suffix}"
    return str(size)


def is_number(text: str) -> bool:
    """ASCII decimal digits only: ``str.isdigit`` also accepts superscripts (``²``), which ``int`` rejects."""
    return text.isascii() and text.isdigit()


def count_nonempty_lines(text: str) -> int:
    return sum(1 for line in text.splitlines() if line.strip())


def meminfo_total_bytes(text: str) -> int | None:
    """``MemTotal:  16318412 kB`` -> bytes; ``None`` if the line is absent or malformed."""
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key == "MemTotal":
            parts = rest.split()
            if len(parts) == 2 and is_number(parts[0]) and parts[1] == "kB" and len(parts[0]) < 16:
                return int(parts[0]) * 1024
            return None
    return None


@dataclass(frozen=True)
class Config:
    """NFD's memory source has no configuration section."""


def discover(host: HostFS, config: Config = Config()) -> SourceResult:
    reader = AttributeReader(host, NAME)
    features: dict[str, Feature] = {}
    labels: dict[str, str] = {}
    origins: dict[str, str] = {}

    def label(key: str, origin: str) -> None:
        labels[nfd_label(NAME, key)] = "true"
        origins[nfd_label(NAME, key)] = origin

    with reader.deciding("numa", nfd_label(NAME, "numa")):
        errors = len(reader.errors)
        nodes = reader.listdir(NODES)
        # a listing with entries is a directory; only an empty one (or none: [] when missing) needs asking
        numa = len(reader.errors) == errors and (bool(nodes) or reader.is_dir(NODES))
    if numa:
        is_numa = len(nodes) > 1
        features["numa"] = Feature(attributes={"is_numa": str(is_numa).lower(), "node_count": str(len(nodes))}, origin=NODES)
        if is_numa:
            label("numa", NODES)

    with reader.deciding("swap", nfd_label(NAME, "swap")):
        swaps = reader.lines(SWAPS)  # never empty: swap_show prints its header line first
    if swaps is not None:
        enabled = count_nonempty_lines(swaps) > 1
        features["swap"] = Feature(attributes={"enabled": str(enabled).lower()}, origin=SWAPS)
        if enabled:
            label("swap", SWAPS)

    with reader.deciding("nv", nfd_label(NAME, "nv.*")):
        instances = _nvdimms(reader)
    if instances:
        features["nv"] = Feature(instances=instances, origin=ND_DEVICES)
        label("nv.present", ND_DEVICES)
        if any(i.attributes.get("devtype") == "nd_dax" for i in instances):
            label("nv.dax", ND_DEVICES)

    with reader.deciding("hugepages"):
        hugepages = _hugepages(reader)
    if hugepages is not None:
        features["hugepages"] = Feature(attributes=hugepages, origin=HUGEPAGES)

    with reader.deciding("meminfo"):
        meminfo = reader.lines(MEMINFO)
    if meminfo is not None:
        total = meminfo_total_bytes(meminfo)
        if total is None:
            reader.error(MEMINFO, "no well-formed MemTotal line")
        else:
            features["meminfo"] = Feature(attributes={"MemTotal": str(total)}, origin=MEMINFO)
    return SourceResult(NAME, features, labels, reader.errors, origins, reader.undetermined)


def _nvdimms(reader: AttributeReader) -> list[Instance]:
    """One instance per ``/sys/bus/nd/devices`` entry: its name, ``devtype`` and ``mode``."""
    instances = []
    for name in reader.listdir(ND_DEVICES):
        attrs = {"name": name}
        for attr in ("devtype", "mode"):
            value = reader.attr(posixpath.join(ND_DEVICES, name, attr))
            if value is not None:
                attrs[attr] = value
        instances.append(Instance(attrs, posixpath.join(ND_DEVICES, name)))
    return instances


def _hugepages(reader: AttributeReader) -> dict[str, str] | None:
    """``enabled`` (any pool non-empty) and ``hugepages-<Quantity>`` = nr_hugepages per pool.

    As NFD's ``detectHugePages``: a kernel without hugepage support (no such directory) or
    with no pools still gives ``enabled=false``; only an unlistable directory gives nothing.
    """
    errors = len(reader.errors)
    pools = reader.glob(f"{HUGEPAGES}/hugepages-*kB")
    if len(reader.errors) > errors:
        return None
    attrs = {"enabled": "false"}
    for pool in pools:
        size = posixpath.basename(pool)[len("hugepages-"):-len("kB")]
        if not is_number(size) or int(size) <= 0:
            reader.error(pool, "not a hugepages-<N>kB pool")
            continue
        path = f"{pool}/nr_hugepages"
        count = reader.attr(path)
        if count is None:
            continue
        if not is_number(count):
            reader.error(path, f"not a page count: {count[:40]!r}")
            continue
        if int(count) > 0:
            attrs["enabled"] = "true"
        attrs[f"hugepages-{quantity_name(int(size))}"] = str(int(count))
    return attrs
