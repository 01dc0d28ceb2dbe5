"""What the sources share: reading host files while recording every failure, and NFD's
device-label recipe.

Reading: :class:`AttributeReader` turns each failure into a :class:`SourceError` (nothing is
swallowed, one bad file never stops a scan) and keeps count of the reads that *failed* — the
file is there and could not be read (``HostFileError.unreadable``: permissions, I/O, a FIFO
where a file should be, ``EMFILE``) — as opposed to a file that is absent or holds junk.
A failed read is no evidence of anything, so what it decides is undetermined:
:meth:`AttributeReader.deciding` marks a feature so when a read inside it failed, and the
caller keeps its earlier answer (``SourceResult.undetermined``).

The device-label recipe (hex-ID checks, class whitelist prefix match, label fields in
canonical order) is the one the PCI and USB sources both follow (NFD ``source/pci/pci.go``,
``source/usb/usb.go``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager

from agent.features import SourceError
from agent.hostfs import HostFileError, HostFS, IncompleteFile

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
    if len(text) != digits or text.strip(_HEX_CHARS):
        shown = raw if len(raw) <= 40 else raw[:40] + "..."
        raise MalformedId(f"not a {digits}-digit hex ID: {shown!r}")
    return text.lower()


def is_decimal(text: str, *, allow_negative: bool = False) -> bool:
    body = text[1:] if allow_negative and text.startswith("-") else text
    return body.isascii() and body.isdigit() and len(body) <= 19


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


def whole_lines(path: str, text: str, *, may_be_empty: bool = False) -> str:
    """``text`` of a file whose writer ends every line with a newline (a kernel ``seq_file``,
    ``proc_dostring``, a generated config): returned as it is when whole. Cut mid-line (no
    final newline), or empty where the writer always writes a line (``may_be_empty``: a list
    that can have no entries), is :class:`~agent.hostfs.IncompleteFile`."""
    if not text.strip():
        if may_be_empty and not text:
            return text
        raise IncompleteFile(path, "empty")
    if not text.endswith("\n"):
        raise IncompleteFile(path, "cut mid-line (no final newline)")
    return text


class AttributeReader:
    """Reads host files for one source: each failure a ``SourceError``, each failed read
    counted (``unread``) so that what it decides can be marked undetermined."""

    def __init__(self, host: HostFS, source: str) -> None:
        self.host = host
        self.source = source
        self.errors: list[SourceError] = []
        self.unread = 0
        #: feature -> the label keys it decides, for each feature a failed read left undetermined
        self.undetermined: dict[str, tuple[str, ...]] = {}

    def error(self, path: str, message: str) -> None:
        self.errors.append(SourceError(self.source, path, message))

    def failure(self, exc: HostFileError, message: str = "", path: str = "") -> None:
        """Report ``exc`` (``message`` in place of ``unreadable: <reason>``); a read that
        failed, not one that found junk, is counted."""
        default = exc.reason if isinstance(exc, IncompleteFile) else f"unreadable: {exc.reason}"
        self.error(path or exc.host_path, message or default)
        if exc.unreadable:
            self.unread += 1

    @contextmanager
    def deciding(self, feature: str, *keys: str) -> Iterator[None]:
        """Reads that decide ``feature`` (and the label keys it gives; ``prefix*`` for keys no
        one can name, such as an unreadable device's): if one of them failed, the feature is
        undetermined this pass."""
        before = self.unread
        yield
        if self.unread > before:
            self.undetermined[feature] = tuple(dict.fromkeys((*self.undetermined.get(feature, ()), *keys)))

    def attr(self, path: str, *, absent_errnos: tuple[int, ...] = ()) -> str | None:
        """The stripped attribute, ``None`` when missing; unreadable -> error + ``None``.

        ``absent_errnos`` lists errors that mean "no value" for this attribute (``speed``
        of a down link fails with EINVAL by design) and are therefore not reported.
        """
        try:
            return self.host.read_attr(path)
        except HostFileError as exc:
            if oserror_errno(exc) not in absent_errnos:
                self.failure(exc, path=path)
            return None

    def lines(self, path: str, *, may_be_empty: bool = False) -> str | None:
        """A whole text file of lines (:func:`whole_lines`), ``None`` when missing; one that
        cannot be read, or not whole, is a failure (counted), one that is no text an error."""
        try:
            return whole_lines(path, self.host.read_text(path), may_be_empty=may_be_empty)
        except HostFileError as exc:
            if not exc.missing:
                self.failure(exc, path=path)
            return None

    def required_value(self, path: str, value: str | None, failure: HostFileError | None,
                       consequence: str) -> str | None:
        """A mandatory attribute already read (``failure``: its read error): its value, or
        ``None`` after one error ending in ``consequence``. Tells a device that vanished
        mid-scan (its directory is gone too) apart from one that lacks the file."""
        if failure is not None:
            self.failure(failure, f"unreadable ({failure.reason}); {consequence}", path)
            return None
        if value is None:
            gone = not self.is_dir(path.rpartition("/")[0] or "/")
            self.error(path, f"{'device vanished during scan' if gone else 'missing'}; {consequence}")
            return None
        if not value:
            self.error(path, f"empty; {consequence}")
            return None
        return value

    def attrs(self, directory: str, names: Iterable[str]) -> tuple[dict[str, str | None], dict[str, HostFileError]]:
        """Several files of one directory (``HostFS.read_attrs``); failures are the caller's
        to report, in its own order, through :meth:`failure`."""
        return self.host.read_attrs(directory, names)

    def listdir(self, path: str) -> list[str]:
        """Entries of a directory; ``[]`` when it is missing, error + ``[]`` when unlistable."""
        try:
            return self.host.listdir(path)
        except HostFileError as exc:
            self.failure(exc, f"unlistable: {exc.reason}", path)
            return []

    def glob(self, pattern: str) -> list[str]:
        """Host paths matching ``pattern``; error + ``[]`` when its directory is unlistable."""
        try:
            return self.host.glob(pattern)
        except HostFileError as exc:
            self.failure(exc, f"unlistable: {exc.reason}")
            return []

    def resolve(self, path: str) -> str | None:
        """Host path with links followed; ``None`` (and an error) on a loop or failed read."""
        try:
            return self.host.resolve(path)
        except HostFileError as exc:
            self.failure(exc, f"cannot resolve: {exc.reason}", path)
            return None

    def link_name(self, path: str) -> str | None:
        """Basename of a symlink's target (``driver`` -> ``nvidia``), ``None`` if not a link."""
        try:
            return self.host.link_name(path)
        except HostFileError as exc:
            self.failure(exc, path=path)
            return None

    def is_dir(self, path: str) -> bool:
        """Whether ``path`` is a directory; a failed look is reported and counted (``False``)."""
        try:
            return self.host.is_dir(path)
        except HostFileError as exc:
            self.failure(exc, path=path)
            return False

    def exists(self, path: str) -> bool:
        """Whether ``path`` exists; a failed look is reported and counted (``False``)."""
        try:
            return self.host.exists(path)
        except HostFileError as exc:
            self.failure(exc, path=path)
            return False

    def is_link(self, path: str) -> bool:
        """Whether ``path`` itself is a symlink; a failed look is reported and counted (``False``)."""
        try:
            return self.host.is_link(path)
        except HostFileError as exc:
            self.failure(exc, path=path)
            return False
