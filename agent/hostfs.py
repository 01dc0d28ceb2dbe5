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
import stat
from pathlib import Path
from typing import Callable

MAX_ATTR_BYTES = 64 * 1024
"""Largest file the seam reads in one go; sysfs attributes are at most a page."""

_MAX_LINK_HOPS = 40

#: errno values that mean "this attribute is not there (any more)" on sysfs/procfs:
#: the file is missing, or the device went away between listing and reading it.
_GONE_ERRNOS = frozenset({errno.ENOENT, errno.ENODEV, errno.ENXIO, errno.ENOTDIR})


#: read-only, close-on-exec, and non-blocking so a FIFO with no writer cannot hang discovery
#: (no effect on regular files)
_READ_FLAGS = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK


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
        # Plain strings, not pathlib objects: discovery maps tens of thousands of paths per pass
        # and pathlib's parsing was most of its cost (bench/discovery.py).
        self._prefix = "" if str(self.root) == "/" else str(self.root)
        #: host path -> host path with every symlink followed; valid for one discovery pass
        self._resolved: dict[str, str] = {}

    # -- path mapping -----------------------------------------------------------------
    @property
    def is_live(self) -> bool:
        """True when the seam reads the real host ``/`` (live-only probes are allowed)."""
        return not self._prefix

    @staticmethod
    def _normalise(host_path: str) -> str:
        # normpath keeps exactly two leading slashes ("//x" stays "//x", POSIX lets them mean
        # something); resolving such a path recursed forever, so every path gets exactly one
        return posixpath.normpath("/" + host_path.lstrip("/"))

    def _under_root(self, norm: str) -> str:
        """Real path of a normalised host path, no symlinks followed."""
        if norm == "/":
            return self._prefix or "/"
        return self._prefix + norm

    def path(self, host_path: str) -> Path:
        """The real path of ``host_path`` under the root (no symlinks followed)."""
        return Path(self._under_root(self._normalise(host_path)))

    def clear_cache(self) -> None:
        """Forget resolved paths; call before each discovery pass (devices come and go)."""
        self._resolved.clear()

    def real_path(self, host_path: str) -> Path:
        """The real path to open for ``host_path``, every symlink followed *inside* the root."""
        return Path(self._real(self._normalise(host_path)))

    def _real(self, norm: str) -> str:
        """:meth:`real_path` on a normalised path, as a string.

        On the live host (root ``/``) the kernel follows links itself.  Under any other root the
        whole path is resolved by :meth:`resolve` (cached per prefix), so an absolute link never
        reaches out to the machine running the tests.
        """
        if not self._prefix:
            return norm
        return self._under_root(self._resolve_norm(norm, [0]))

    def resolve(self, host_path: str) -> str:
        """Host-absolute path of ``host_path`` with every symlink followed inside the root.

        Relative link targets resolve as on the host; absolute ones are taken relative to the
        root, so ``/sys/bus/pci/devices/X -> ../../../devices/pci0000:00/X`` works the same in a
        fixture as on the machine.  Dangling links resolve to their (missing) target.
        """
        return self._resolve_norm(self._normalise(host_path), [0])

    def _resolve_norm(self, norm: str, hops: list[int]) -> str:
        """Resolve a normalised path: its parent (cached), then its leaf if that is a link.

        ``..`` in a link target steps up from the *resolved* directory, as the kernel does;
        ``hops`` counts links followed across the whole walk to stop loops."""
        if norm == "/":
            return "/"
        cached = self._resolved.get(norm)
        if cached is not None:
            return cached
        parent, leaf = posixpath.split(norm)
        current = self._resolve_norm(parent, hops)
        candidate = (current if current != "/" else "") + "/" + leaf
        real = self._under_root(candidate)
        if os.path.islink(real):
            hops[0] += 1
            if hops[0] > _MAX_LINK_HOPS:
                raise HostFileError(norm, "too many levels of symbolic links")
            self._record(candidate)
            target = os.readlink(real)
            current = "/" if target.startswith("/") else current
            for part in target.split("/"):
                if not part or part == ".":
                    continue
                if part == "..":
                    current = posixpath.dirname(current)
                else:
                    current = self._resolve_norm((current if current != "/" else "") + "/" + part, hops)
        else:
            current = candidate
        self._resolved[norm] = current
        return current

    # -- reads --------------------------------------------------------------------------
    def _record(self, host_path: str) -> None:
        if self._recorder is not None:
            self._recorder(self._normalise(host_path))

    def read_bytes(self, host_path: str, max_bytes: int = MAX_ATTR_BYTES) -> bytes:
        """Raw content (at most ``max_bytes``); :class:`HostFileError` on any failure.

        Only regular files are read (sysfs and procfs attributes are regular files): a FIFO
        planted in the host tree would block a plain open, and discovery, forever, so files
        are opened non-blocking and anything but a regular file is refused.
        """
        self._record(host_path)
        try:
            # raw descriptors, not io objects: this is the hottest call of a discovery pass
            fd = os.open(self._real(self._normalise(host_path)), _READ_FLAGS)
            try:
                mode = os.fstat(fd).st_mode
                if stat.S_ISDIR(mode):  # os.open succeeds on a directory where open() would not
                    raise HostFileError(host_path, os.strerror(errno.EISDIR))
                if not stat.S_ISREG(mode):
                    raise HostFileError(host_path, "not a regular file (FIFO, socket or device node)")
                chunks = []
                left = max_bytes
                while left > 0:
                    chunk = os.read(fd, left)
                    if not chunk:
                        break
                    chunks.append(chunk)
                    left -= len(chunk)
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)
            finally:
                os.close(fd)
        except HostFileError:
            raise
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
            return sorted(os.listdir(self._real(self._normalise(host_path))))
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
            return os.path.lexists(self._real(self._normalise(host_path)))
        except HostFileError:
            return False

    def is_dir(self, host_path: str) -> bool:
        self._record(host_path)  # a kind test decides what discovery does: snapshot must keep it
        try:
            return os.path.isdir(self._real(self._normalise(host_path)))
        except HostFileError:
            return False

    def is_file(self, host_path: str) -> bool:
        self._record(host_path)
        try:
            return os.path.isfile(self._real(self._normalise(host_path)))
        except HostFileError:
            return False

    def is_link(self, host_path: str) -> bool:
        """Whether the leaf itself is a symlink (its parent directories are resolved)."""
        norm = self._normalise(host_path)
        self._record(norm)
        directory, leaf = posixpath.split(norm)
        try:
            return os.path.islink(self._real(directory).rstrip("/") + "/" + leaf)
        except HostFileError:
            return False

    def readlink(self, host_path: str) -> str | None:
        """The raw target of a symlink, or ``None`` when ``host_path`` is not a link."""
        self._record(host_path)
        directory, leaf = posixpath.split(self._normalise(host_path))
        try:
            return os.readlink(self._real(directory).rstrip("/") + "/" + leaf)
        except OSError:
            return None

    def link_name(self, host_path: str) -> str | None:
        """Basename of a symlink's target: how sysfs names a ``driver`` or ``iommu_group``."""
        target = self.readlink(host_path)
        return posixpath.basename(target.rstrip("/")) if target else None

    def __repr__(self) -> str:
        return f"HostFS({str(self.root)!r})"
