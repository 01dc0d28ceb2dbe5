"""Helpers the bus sources (pci, usb, devicetree, network, storage) share.

Two jobs only: reading sysfs attributes while *recording* every failure as a
:class:`SourceError` (so nothing is swallowed and one bad file never stops a scan), and
NFD's device-label recipe (hex-ID checks, class whitelist prefix match, label fields in
canonical order) that the PCI and USB sources both follow (``source/pci/pci.go``,
``source/usb/usb.go``).
"""

from __future__ import annotations

import posixpath
import re
from typing import Iterable, Mapping

from agent.features import SourceError
from agent.hostfs import HostFileError, HostFS

_HEX_CHARS = "0123456789abcdefABCDEF"
PCI_ADDRESS_RE = re.compile(r"^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
"""A PCI function address as sysfs names it: ``0000:3b:00.0``."""


class MalformedId(ValueError):
    """A sysfs ID file holds something other than the kernel's hex format."""


def hex_digits(raw: str, digits: int, *, prefixed: bool) -> str:
    """``0x10DE`` -> ``10de``: validate a sysfs hex ID and return it lowercase, unprefixed.

    ``prefixed`` says whether the kernel writes a ``0x`` (PCI does, USB does not); the
    prefix is accepted but not required so a hand-made tree still reads, yet the length is
    exact because a wrong length means the file is not what we think it is.
    """
    text = raw[2:] if prefixed and raw[:2] in ("0x", "0X") else raw
    # all hex digits: nothing left once they are stripped (str.strip is one C loop; the
    # regex it replaced was a fifth of a PCI function's checks)
    if len(text) != digits or text.strip(_HEX_CHARS):
        shown = raw if len(raw) <= 40 else raw[:40] + "..."
        raise MalformedId(f"not a {digits}-digit hex ID: {shown!r}")
    return text.lower()


def is_decimal(text: str, *, allow_negative: bool = False) -> bool:
    body = text[1:] if allow_negative and text.startswith("-") else text
    return body.isascii() and body.isdigit() and len(body) <= 19


def first_whitelisted(device_class: str, whitelist: Iterable[str]) -> str | None:
    """The first whitelist entry that is a (lowercased) prefix of ``device_class``, as NFD matches."""
    if not device_class:
        return None
    for entry in whitelist:
        if device_class.startswith(str(entry).lower()):
            return entry
    return None


def canonical_label_fields(
    configured: Iterable[str], valid: tuple[str, ...], default: tuple[str, ...]
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(fields to use in canonical order, unknown fields ignored)``.

    NFD always emits fields in its canonical order whatever order the config lists them,
    ignores unknown ones, and falls back to ``default`` when nothing valid remains.
    """
    wanted = list(configured)
    unknown = tuple(f for f in wanted if f not in valid)
    chosen = tuple(f for f in valid if f in wanted)
    return (chosen or default), unknown


def device_label(attributes: Mapping[str, str], fields: Iterable[str]) -> str:
    """NFD's ``<devlabel>``: the chosen attribute values joined by ``_`` (missing -> empty)."""
    return "_".join(attributes.get(f, "") for f in fields)


def oserror_errno(exc: HostFileError) -> int | None:
    """The errno behind a :class:`HostFileError` (the seam keeps the OSError as its cause)."""
    cause = exc.__cause__
    return cause.errno if isinstance(cause, OSError) else None


class AttributeReader:
    """Reads sysfs attributes for one source, turning each failure into a ``SourceError``."""

    def __init__(self, host: HostFS, source: str):
        self.host = host
        self.source = source
        self.errors: list[SourceError] = []

    def error(self, path: str, message: str) -> None:
        self.errors.append(SourceError(self.source, path, message))

    def attr(self, path: str, *, absent_errnos: tuple[int, ...] = ()) -> str | None:
        """The stripped attribute, ``None`` when missing; unreadable -> error + ``None``.

        ``absent_errnos`` lists errors that mean "no value" for this attribute (``speed``
        of a down link fails with EINVAL by design) and are therefore not reported.
        """
        try:
            return self.host.read_attr(path)
        except HostFileError as exc:
            if oserror_errno(exc) in absent_errnos:
                return None
            self.error(path, f"unreadable: {exc.reason}")
            return None

    def required(self, path: str, consequence: str) -> str | None:
        """A mandatory attribute: its value, or ``None`` after one error ending in ``consequence``.

        Tells a device that vanished mid-scan (its directory is gone too) apart from one
        that simply lacks the file.
        """
        try:
            value = self.host.read_attr(path)
        except HostFileError as exc:
            return self.required_value(path, None, exc, consequence)
        return self.required_value(path, value, None, consequence)

    def required_value(self, path: str, value: str | None, failure: HostFileError | None,
                       consequence: str) -> str | None:
        """:meth:`required`'s checks on a value already read (by :meth:`HostFS.read_attrs`):
        ``failure`` is its read error, if any."""
        if failure is not None:
            self.error(path, f"unreadable ({failure.reason}); {consequence}")
            return None
        if value is None:
            gone = not self.host.is_dir(posixpath.dirname(path))
            self.error(path, f"{'device vanished during scan' if gone else 'missing'}; {consequence}")
            return None
        if not value:
            self.error(path, f"empty; {consequence}")
            return None
        return value

    def read_attrs(self, directory: str, names: Iterable[str]) -> "PrefetchedAttrs":
        """Several files of one directory read together (:meth:`HostFS.read_attrs`)."""
        values, failures = self.host.read_attrs(directory, names)
        return PrefetchedAttrs(self, values, failures)

    def link_name(self, path: str) -> str | None:
        """Basename of a symlink's target (``driver`` -> ``nvidia``), ``None`` if not a link."""
        return self.host.link_name(path)

    def resolve(self, path: str) -> str | None:
        """Host path with links followed; ``None`` (and an error) on a link loop."""
        try:
            return self.host.resolve(path)
        except HostFileError as exc:
            self.error(path, f"cannot resolve: {exc.reason}")
            return None

    def listdir(self, path: str) -> list[str]:
        """Entries of a directory; ``[]`` when it is missing, error + ``[]`` when unlistable."""
        try:
            return self.host.listdir(path)
        except HostFileError as exc:
            self.error(path, f"unlistable: {exc.reason}")
            return []

    def entries(self, path: str) -> dict[str, bool]:
        """Entry name -> is a link, from one listing; ``{}`` when missing, error + ``{}`` when
        unlistable (a directory the source then treats as empty)."""
        try:
            return self.host.entries(path)
        except HostFileError as exc:
            self.error(path, f"unlistable: {exc.reason}")
            return {}

    def glob(self, pattern: str) -> list[str]:
        """Host paths matching ``pattern``; error + ``[]`` when its directory is unlistable."""
        try:
            return self.host.glob(pattern)
        except HostFileError as exc:
            self.error(exc.host_path, f"unlistable: {exc.reason}")
            return []



class PrefetchedAttrs:
    """Files of one directory read in one go, handed out one by one as :meth:`AttributeReader.attr`
    would (a read failure becomes an error when the value is asked for, in the caller's order)."""

    def __init__(self, reader: AttributeReader, values: dict[str, str | None], failures: dict[str, HostFileError]):
        self.reader = reader
        self.values = values
        self.failures = failures

    def attr(self, name: str) -> str | None:
        failure = self.failures.get(name)
        if failure is not None:
            self.reader.error(failure.host_path, f"unreadable: {failure.reason}")
            return None
        return self.values.get(name)
