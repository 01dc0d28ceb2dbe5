"""network source: NFD's ``network.device`` / ``network.virtual`` and ``network-sriov.*`` labels.

Reads ``/sys/class/net/*`` as ``source/network/network.go`` does (``bonding_masters`` is a
control file, not an interface): an interface with a ``device`` link is physical and gets
``operstate``, ``speed``, ``sriov_numvfs``, ``sriov_totalvfs`` (from ``device/``) and
``mtu``; one without is virtual and gets ``operstate``, ``speed``, ``mtu``.  Physical
interfaces also carry ``driver`` and, when the device is a PCI function, ``pci_address``
so rules can tie a NIC to its ``pci.device`` instance.

``speed`` of a link that is down (and of most virtual interfaces) fails with EINVAL by
kernel design; that means "no speed", not an error.
"""

from __future__ import annotations

import errno
import posixpath

from dataclasses import dataclass

from typing import Mapping

from agent.features import ElementNames, Feature, Instance, SourceResult, nfd_label
from agent.hostfs import HostFS
from agent.sources._sysfs import PCI_ADDRESS_RE, AttributeReader, is_decimal, oserror_errno

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
    if not host.is_dir(CLASS_NET):
        return SourceResult(NAME)
    physical: list[tuple[dict[str, str], str]] = []  # raw attributes: VF counts are judged before cleaning
    virtual: list[Instance] = []
    unread: set[str] = set()  # VF-count files of some NIC that could not be read (or a NIC not resolved)
    for name in reader.listdir(CLASS_NET):
        if name in _NOT_INTERFACES:
            continue
        entry = f"{CLASS_NET}/{name}"
        origin = reader.resolve(entry)
        if origin is None:
            unread.update(attr for attr, _key in _SRIOV)
            continue
        # asked of the resolved directory, whose parent the resolution left open: one stat each,
        # where asking through the class link resolved the link again (openat2 + fstat for is_dir)
        if not host.is_dir(origin):
            reader.error(origin, f"interface {name} vanished during scan")
            continue
        if host.exists(f"{origin}/device"):
            physical.append((read_physical(reader, entry, name, unread), origin))
        else:
            virtual.append(Instance(read_attributes(reader, entry, name, _VIRTUAL_FILES), origin))
    labels, origins = sriov_labels(reader, physical, unread)
    features = {"device": Feature(instances=[Instance(attrs, origin) for attrs, origin in physical], origin=CLASS_NET),
                "virtual": Feature(instances=virtual, origin=CLASS_NET)}
    # a VF count that could not be read is no evidence the NIC lost SR-IOV: unless another NIC
    # already decided the label, the physical devices and that label are undetermined this pass
    unsure = tuple(nfd_label(NAME, key) for attr, key in _SRIOV if attr in unread and nfd_label(NAME, key) not in labels)
    undetermined = {"device": unsure} if unsure else {}
    return SourceResult(NAME, features, labels, reader.errors, origins, undetermined)


#: VF-count file -> the label a count above zero gives
_SRIOV = (("sriov_totalvfs", "sriov.capable"), ("sriov_numvfs", "sriov.configured"))


def _read_plan(files) -> tuple[tuple[str, ...], tuple[tuple[str, tuple[str, ...]], ...]]:
    """``files`` as :func:`read_attributes` reads them: the interface directory's own, then per
    subdirectory (``device``) its leaves, in the order listed."""
    below: dict[str, list[str]] = {}
    for _, file in files:
        if "/" in file:
            subdirectory, _, leaf = file.rpartition("/")
            below.setdefault(subdirectory, []).append(leaf)
    return (tuple(file for _, file in files if "/" not in file),
            tuple((subdirectory, tuple(leaves)) for subdirectory, leaves in below.items()))


#: the plans of the two lists every interface is read with, made once
_READ_PLANS = {files: _read_plan(files) for files in (_PHYSICAL_FILES, _VIRTUAL_FILES)}


def read_attributes(reader: AttributeReader, entry: str, name: str, files,
                    unread: set[str] | None = None) -> dict[str, str]:
    """The interface's attributes; the name of each whose read failed goes into ``unread``."""
    attrs = {"name": name}
    # the interface's own files through one directory lookup, its ``device/...`` ones through
    # one lookup of ``device`` (not a walk of both links per file); keyed by ``file`` as listed
    host = reader.host
    own, below = _READ_PLANS.get(files) or _read_plan(files)
    values, failures = host.read_attrs(entry, own)
    for subdirectory, leaves in below:
        sub_values, sub_failures = host.read_attrs(f"{entry}/{subdirectory}", leaves)
        for leaf, value in sub_values.items():
            values[f"{subdirectory}/{leaf}"] = value
        for leaf, failure in sub_failures.items():
            failures[f"{subdirectory}/{leaf}"] = failure
    for attr, file in files:
        failure = failures.get(file)
        if failure is not None:
            # ``speed`` of a down link fails with EINVAL by design: no value, not an error
            if attr != "speed" or oserror_errno(failure) not in _NO_VALUE_ERRNOS:
                reader.error(f"{entry}/{file}", f"unreadable: {failure.reason}")
                if unread is not None:
                    unread.add(attr)
            continue
        value = values.get(file)
        if value is not None:
            attrs[attr] = value
    return attrs


def read_physical(reader: AttributeReader, entry: str, name: str, unread: set[str] | None = None) -> dict[str, str]:
    attrs = read_attributes(reader, entry, name, _PHYSICAL_FILES, unread)
    driver = reader.link_name(f"{entry}/device/driver")
    if driver:
        attrs["driver"] = driver
    device = posixpath.basename(reader.resolve(f"{entry}/device") or "")
    if PCI_ADDRESS_RE.match(device):
        attrs["pci_address"] = device
    return attrs


def sriov_labels(reader: AttributeReader, physical: list[tuple[dict[str, str], str]],
                 unread: set[str] | None = None) -> tuple[dict[str, str], dict[str, str]]:
    """``network-sriov.capable`` / ``.configured`` when some physical NIC has VFs possible / made.

    Judged on the file's raw text, not on the cleaned instance attribute: a count with a
    control character in it (``"\\x011"``) is a damaged file, not the count ``1`` that
    removing the character would make of it."""
    labels: dict[str, str] = {}
    origins: dict[str, str] = {}
    for attrs, origin in physical:
        for attr, key in _SRIOV:
            value = attrs.get(attr)
            if value is None:
                continue
            if not is_decimal(value):
                reader.error(f"{origin}/device/{attr}", f"not a VF count: {value[:40]!r}")
                if unread is not None:
                    unread.add(attr)
                continue
            if int(value) > 0:
                labels[nfd_label(NAME, key)] = "true"
                origins.setdefault(nfd_label(NAME, key), f"{origin}/device/{attr}")
    return labels, origins
