"""network source: NFD's ``network.device`` / ``network.virtual`` and ``network-sriov.*`` labels.

Reads ``/sys/class/net/*`` as ``source/network/network.go`` does (``bonding_masters`` is a
control file, not an interface): an interface with a ``device`` link is physical and gets
``operstate``, ``speed``, ``sriov_numvfs``, ``sriov_totalvfs`` (from ``device/``) and
``mtu``; one without is virtual and gets ``operstate``, ``speed``, ``mtu``.  Physical
interfaces also carry ``driver`` and, when the device is a PCI function, ``pci_address``
so rules can tie a NIC to its ``pci.device`` instance.

``speed`` of a link that is down (and of most virtual interfaces) fails with EINVAL by
kernel design; that means "no speed", not an error. Any other file that could not be read
leaves both features undetermined this pass (and the SR-IOV labels no other NIC decided): the
caller keeps its earlier answer.
"""

from __future__ import annotations

import errno
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass

from agent.features import ElementNames, Feature, Instance, SourceResult, nfd_label
from agent.hostfs import HostFS
from agent.sources._sysfs import PCI_ADDRESS_RE, AttributeReader, is_decimal

NAME = "network"
FEATURES: Mapping[str, ElementNames] = {
    "device": frozenset({"name", "operstate", "speed", "sriov_numvfs", "sriov_totalvfs", "mtu", "driver", "pci_address"}),
    "virtual": frozenset({"name", "operstate", "speed", "mtu"}),
}
"""The features this source can produce and their element names (``agent.features.ElementNames``)."""

CLASS_NET = "/sys/class/net"
_NOT_INTERFACES = frozenset({"bonding_masters"})
#: attribute name -> file, relative to the interface directory
_PHYSICAL_FILES = (("operstate", "operstate"), ("speed", "speed"), ("sriov_numvfs", "device/sriov_numvfs"),
                   ("sriov_totalvfs", "device/sriov_totalvfs"), ("mtu", "mtu"))
_VIRTUAL_FILES = (("operstate", "operstate"), ("speed", "speed"), ("mtu", "mtu"))
#: errors that mean "this attribute has no value right now" (down link, no ethtool ops)
_NO_VALUE_ERRNOS = (errno.EINVAL, errno.EOPNOTSUPP)


@dataclass(frozen=True)
class Config:
    """NFD's network source has no configuration section."""


def discover(host: HostFS, config: Config = Config()) -> SourceResult:
    reader = AttributeReader(host, NAME)
    if not reader.is_dir(CLASS_NET):
        return SourceResult(NAME, errors=reader.errors, undetermined=_undetermined(reader.unread > 0, set(), {}))
    physical: list[tuple[dict[str, str], str]] = []  # raw attributes: VF counts are judged before cleaning
    virtual: list[Instance] = []
    for name in reader.listdir(CLASS_NET):
        if name in _NOT_INTERFACES:
            continue
        entry = f"{CLASS_NET}/{name}"
        origin = reader.resolve(entry)
        if origin is None:
            continue
        # asked of the resolved directory: the class link is not walked again
        looked = reader.unread
        if not reader.is_dir(origin):
            if reader.unread == looked:  # not there, rather than not looked at
                reader.error(origin, f"interface {name} vanished during scan")
            continue
        if reader.exists(f"{origin}/device"):
            physical.append((read_physical(reader, entry, name), origin))
        else:
            virtual.append(Instance(read_attributes(reader, entry, name, _VIRTUAL_FILES), origin))
    labels, origins, damaged = sriov_labels(reader, physical)
    features = {"device": Feature(instances=[Instance(attrs, origin) for attrs, origin in physical], origin=CLASS_NET),
                "virtual": Feature(instances=virtual, origin=CLASS_NET)}
    return SourceResult(NAME, features, labels, reader.errors, origins,
                        _undetermined(reader.unread > 0, damaged, labels))


def _undetermined(failed: bool, damaged: set[str], labels: dict[str, str]) -> dict[str, tuple[str, ...]]:
    """A read that failed leaves both features undetermined, with the SR-IOV labels no other NIC
    decided this pass (a failed read is no evidence that a NIC or its VFs are gone); a damaged
    VF count leaves its label undetermined the same way (no evidence of "not capable")."""
    unsure = tuple(label for attr, key in _SRIOV
                   if (failed or attr in damaged) and (label := nfd_label(NAME, key)) not in labels)
    undetermined: dict[str, tuple[str, ...]] = {"device": unsure} if failed or unsure else {}
    if failed:
        undetermined["virtual"] = ()
    return undetermined


#: VF-count file -> the label a count above zero gives
_SRIOV = (("sriov_totalvfs", "sriov.capable"), ("sriov_numvfs", "sriov.configured"))


def read_attributes(reader: AttributeReader, entry: str, name: str,
                    files: tuple[tuple[str, str], ...]) -> dict[str, str]:
    """The interface's attributes (``files``: attribute -> file below the interface); each
    file that could not be read reported, but ``speed``'s EINVAL of a down link."""
    attrs = {"name": name}
    for attr, file in files:
        value = reader.attr(f"{entry}/{file}", absent_errnos=_NO_VALUE_ERRNOS if attr == "speed" else ())
        if value is not None:
            attrs[attr] = value
    return attrs


def read_physical(reader: AttributeReader, entry: str, name: str) -> dict[str, str]:
    attrs = read_attributes(reader, entry, name, _PHYSICAL_FILES)
    driver = reader.link_name(f"{entry}/device/driver")
    if driver:
        attrs["driver"] = driver
    device = posixpath.basename(reader.resolve(f"{entry}/device") or "")
    if PCI_ADDRESS_RE.match(device):
        attrs["pci_address"] = device
    return attrs


def sriov_labels(reader: AttributeReader, physical: list[tuple[dict[str, str], str]]
                 ) -> tuple[dict[str, str], dict[str, str], set[str]]:
    """``network-sriov.capable`` / ``.configured`` when some physical NIC has VFs possible / made,
    and the VF-count files found damaged.

    Judged on the file's raw text, not on the cleaned instance attribute: a count with a
    control character in it (``"\\x011"``) is a damaged file, not the count ``1`` that
    removing the character would make of it."""
    labels: dict[str, str] = {}
    origins: dict[str, str] = {}
    damaged: set[str] = set()
    for attrs, origin in physical:
        for attr, key in _SRIOV:
            value = attrs.get(attr)
            if value is None:
                continue
            if not is_decimal(value):
                reader.error(f"{origin}/device/{attr}", f"not a VF count: {value[:40]!r}")
                damaged.add(attr)
                continue
            if int(value) > 0:
                labels[nfd_label(NAME, key)] = "true"
                origins.setdefault(nfd_label(NAME, key), f"{origin}/device/{attr}")
    return labels, origins, damaged
