"""The one seam through which every host file is read.

Discovery never touches a host path directly: it asks a :class:`HostFS` rooted at the
configured host root (``/`` on a bare host, ``/host`` in the DaemonSet, a fixture tree in
tests).  Paths given to the seam are *host-absolute* (``/sys/bus/pci/devices``); the seam maps
them under the root, re-roots absolute symlink targets so a recorded tree replays exactly like
the live host, and refuses any path that would escape the root.

An optional ``recorder`` callback sees every host path that was read or listed; ``snapshot``
uses it to copy exactly the files the sources looked at.
"""

from __future__ import annotations

import errno
import fnmatch
import os
import posixpath
from pathlib import Path
from typing import Callable

MAX_ATTR_BYTES = 64 * 1024
"""Largest file the seam reads in one go; sysfs attributes are at most a page."""

_MAX_LINK_HOPS = 40

#: errno values that mean "this attribute is not there (any more)" on sysfs/procfs:
#: the file is missing, or the device went away between listing and reading it.
_GONE_ERRNOS = frozenset({errno.ENOENT, errno.ENODEV, errno.ENXIO, errno.ENOTDIR})


class HostFileError(OSError):
    """A host file exists but could not be read as expected (permissions, I/O, not text)."""

    def __init__(self, host_path: str, reason: str, *, missing: bool = False):
        super().__init__(f"{host_path}: {reason}")
        self.host_path = host_path
        self.reason = reason
        self.missing = missing


class HostFS:
    """Read-only view of the host's files under ``root``."""

    def __init__(self, root: str | os.PathLike[str] = "/", recorder: Callable[[str], None] | None = None):
        self.root = Path(os.path.abspath(os.fspath(root)))
        self._recorder = recorder
        self._dir_cache: dict[str, Path] = {}

    # -- path mapping -----------------------------------------------------------------
    @property
    def is_live(self) -> bool:
        """True when the seam reads the real host ``/`` (live-only probes are allowed)."""
        return str(self.root) == "/"

    @staticmethod
    def _normalise(host_path: str) -> str:
        if not host_path.startswith("/"):
            host_path = "/" + host_path
        return posixpath.normpath(host_path)

    def path(self, host_path: str) -> Path:
        """The real path of ``host_path`` under the root (no symlinks followed)."""
        norm = self._normalise(host_path)
        return self.root / norm.lstrip("/") if norm != "/" else self.root

    def clear_cache(self) -> None:
        """Forget resolved directories; call before each discovery pass (devices come and go)."""
        self._dir_cache.clear()

    def real_path(self, host_path: str) -> Path:
        """The real path to open for ``host_path``, every symlink followed *inside* the root.

        On the live host (root ``/``) this is the path itself.  Under any other root the parent
        directory is resolved once (cached until :meth:`clear_cache`) and a symlinked leaf is
        resolved too, so an absolute link never reaches out to the machine running the tests.
        """
        norm = self._normalise(host_path)
        if self.is_live:
            return Path(norm)
        directory, leaf = posixpath.split(norm)
        real_dir = self._dir_cache.get(directory)
        if real_dir is None:
            real_dir = self.path(self.resolve(directory))
            self._dir_cache[directory] = real_dir
        real = real_dir / leaf if leaf else real_dir
        if os.path.islink(real):
            real = self.path(self.resolve(norm))
        return real

    def resolve(self, host_path: str) -> str:
        """Host-absolute path of ``host_path`` with every symlink followed inside the root.

        Relative link targets resolve as on the host; absolute ones are taken relative to the
        root, so ``/sys/bus/pci/devices/X -> ../../../devices/pci0000:00/X`` works the same in a
        fixture as on the machine.  Dangling links resolve to their (missing) target.
        """
        parts = [p for p in self._normalise(host_path).split("/") if p]
        resolved: list[str] = []
        hops = 0
        while parts:
            part = parts.pop(0)
            if part == "..":
                if resolved:
                    resolved.pop()
                continue
            candidate = "/" + "/".join(resolved + [part])
            real = self.path(candidate)
            if os.path.islink(real):
                hops += 1
                if hops > _MAX_LINK_HOPS:
                    raise HostFileError(host_path, "too many levels of symbolic links")
                self._record(candidate)
                target = os.readlink(real)
                if target.startswith("/"):
                    resolved = []
                parts = [p for p in target.split("/") if p and p != "."] + parts
            else:
                resolved.append(part)
        return "/" + "/".join(resolved)

    # -- reads --------------------------------------------------------------------------
    def _record(self, host_path: str) -> None:
        if self._recorder is not None:
            self._recorder(self._normalise(host_path))

    def read_bytes(self, host_path: str, max_bytes: int = MAX_ATTR_BYTES) -> bytes:
        """Raw content (at most ``max_bytes``); :class:`HostFileError` on any failure."""
        self._record(host_path)
        try:
            with open(self.real_path(host_path), "rb") as handle:
                return handle.read(max_bytes)
        except OSError as exc:
            missing = exc.errno in _GONE_ERRNOS
            reason = "missing" if missing else (exc.strerror or type(exc).__name__)
            raise HostFileError(host_path, reason, missing=missing) from exc

    def read_text(self, host_path: str, max_bytes: int = MAX_ATTR_BYTES) -> str:
        """UTF-8 content; binary junk (NUL bytes, invalid UTF-8) is a :class:`HostFileError`."""
        data = self.read_bytes(host_path, max_bytes)
        if b"\x00" in data:
            raise HostFileError(host_path, "binary content (NUL byte) in a text file")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise HostFileError(host_path, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from exc

    def read_attr(self, host_path: str) -> str | None:
        """A sysfs-style one-value attribute, whitespace-stripped; ``None`` when it is absent.

        Absent includes a device that vanished mid-scan (ENOENT/ENODEV).  Other failures
        (EACCES, EIO, binary junk) raise :class:`HostFileError` so the caller can report them.
        """
        try:
            return self.read_text(host_path).strip()
        except HostFileError as exc:
            if exc.missing:
                return None
            raise

    def listdir(self, host_path: str) -> list[str]:
        """Sorted entry names; ``[]`` when the directory does not exist.

        Other errors (EACCES, not a directory) raise :class:`HostFileError`.
        """
        self._record(host_path)
        try:
            return sorted(os.listdir(self.real_path(host_path)))
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENODEV):
                return []
            raise HostFileError(host_path, exc.strerror or type(exc).__name__) from exc

    def glob(self, host_pattern: str) -> list[str]:
        """Host paths matching a pattern whose wildcards are only in the last component."""
        directory, pattern = posixpath.split(self._normalise(host_pattern))
        return [posixpath.join(directory, name) for name in self.listdir(directory) if fnmatch.fnmatchcase(name, pattern)]

    def exists(self, host_path: str) -> bool:
        """True when the path (or a dangling link at it) exists."""
        self._record(host_path)
        try:
            return os.path.lexists(self.real_path(host_path))
        except HostFileError:
            return False

    def is_dir(self, host_path: str) -> bool:
        self._record(host_path)  # a kind test decides what discovery does: snapshot must keep it
        try:
            return os.path.isdir(self.real_path(host_path))
        except HostFileError:
            return False

    def is_file(self, host_path: str) -> bool:
        self._record(host_path)
        try:
            return os.path.isfile(self.real_path(host_path))
        except HostFileError:
            return False

    def is_link(self, host_path: str) -> bool:
        """Whether the leaf itself is a symlink (its parent directories are resolved)."""
        norm = self._normalise(host_path)
        self._record(norm)
        directory, leaf = posixpath.split(norm)
        try:
            return os.path.islink(self.real_path(directory) / leaf)
        except HostFileError:
            return False

    def readlink(self, host_path: str) -> str | None:
        """The raw target of a symlink, or ``None`` when ``host_path`` is not a link."""
        self._record(host_path)
        directory, leaf = posixpath.split(self._normalise(host_path))
        try:
            return os.readlink(self.real_path(directory) / leaf)
        except OSError:
            return None

    def link_name(self, host_path: str) -> str | None:
        """Basename of a symlink's target: how sysfs names a ``driver`` or ``iommu_group``."""
        target = self.readlink(host_path)
        return posixpath.basename(target.rstrip("/")) if target else None

    def __repr__(self) -> str:
        return f"HostFS({str(self.root)!r})"
