"""storage source: NFD's ``storage.block`` instances and ``storage-nonrotationaldisk``.

Reads ``/sys/block/*/queue/{dax,rotational,nr_zones,zoned}`` as ``source/storage/storage.go``
does.  Like NFD, any block device counts for the label, virtual ones (zram, loop) included.
Older kernels lack ``dax``/``nr_zones``; a missing queue attribute is simply absent, an
unreadable one is reported.  A file that could not be read (or a device not resolved) leaves
``block`` undetermined (``SourceResult.undetermined``), and the label too unless another
device already showed a non-rotational disk: a failed read is no evidence that the SSD is
gone. So does a ``rotational`` that is neither ``0`` nor ``1``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from agent.features import ElementNames, Feature, Instance, SourceResult, nfd_label
from agent.hostfs import HostFS
from agent.sources._sysfs import AttributeReader

NAME = "storage"
FEATURES: Mapping[str, ElementNames] = {
    "block": frozenset({"name", "dax", "rotational", "nr_zones", "zoned"}),
}
"""The features this source can produce and their element names (``agent.features.ElementNames``)."""

BLOCK = "/sys/block"
QUEUE_ATTRIBUTES = ("dax", "rotational", "nr_zones", "zoned")
NONROTATIONAL_LABEL = nfd_label(NAME, "nonrotationaldisk")


@dataclass(frozen=True)
class Config:
    """NFD's storage source has no configuration section."""


def discover(host: HostFS, config: Config = Config()) -> SourceResult:
    reader = AttributeReader(host, NAME)
    instances: list[Instance] = []
    labels: dict[str, str] = {}
    origins: dict[str, str] = {}
    unsure = False  # a device whose rotational could not be read (or made sense of)
    if not reader.is_dir(BLOCK):
        return SourceResult(NAME, errors=reader.errors, undetermined={"block": (NONROTATIONAL_LABEL,)} if reader.unread else {})
    for name in reader.listdir(BLOCK):
        entry = f"{BLOCK}/{name}"
        looked = reader.unread
        origin = reader.resolve(entry)
        if origin is None:
            unsure = True
            continue
        if not reader.is_dir(origin):  # the resolved directory: one stat, not the link resolved again
            if reader.unread == looked:  # not there, rather than not looked at
                reader.error(origin, f"block device {name} vanished during scan")
            continue
        attrs, sure = read_disk(reader, name, entry, origin)
        unsure = unsure or not sure
        if attrs.get("rotational") == "0" and NONROTATIONAL_LABEL not in labels:
            labels[NONROTATIONAL_LABEL] = "true"
            origins[NONROTATIONAL_LABEL] = f"{origin}/queue/rotational"
        instances.append(Instance(attrs, origin))
    features = {"block": Feature(instances=instances, origin=BLOCK)}
    undetermined: dict[str, tuple[str, ...]] = {}
    if reader.unread or (unsure and NONROTATIONAL_LABEL not in labels):
        undetermined["block"] = (NONROTATIONAL_LABEL,) if NONROTATIONAL_LABEL not in labels else ()
    return SourceResult(NAME, features, labels, reader.errors, origins, undetermined)


def read_disk(reader: AttributeReader, name: str, entry: str, origin: str) -> tuple[dict[str, str], bool]:
    """The disk's attributes, and whether its ``rotational`` was read and is 0 or 1. The queue's
    files are read below the resolved device directory (not through the /sys/block link
    again); each failure is reported as reading it alone would (same path, words, order)."""
    attrs = {"name": name}
    sure = True
    values, failures = reader.attrs(f"{origin}/queue", QUEUE_ATTRIBUTES)
    for attr in QUEUE_ATTRIBUTES:
        failure = failures.get(attr)
        if failure is not None:
            reader.failure(failure, path=f"{entry}/queue/{attr}")
            sure = sure and attr != "rotational"
            continue
        value = values.get(attr)
        if value is not None:
            attrs[attr] = value
    rotational = attrs.get("rotational")
    if rotational is not None and rotational not in ("0", "1"):
        reader.error(f"{entry}/queue/rotational", f"not 0 or 1: {rotational[:40]!r}")
        sure = False
    return attrs, sure
