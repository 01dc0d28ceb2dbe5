"""The one seam through which every host file is read.

Discovery never touches a host path directly: it asks a :class:`HostFS` rooted at the
configured host root (``/`` on a bare host, ``/host`` in the DaemonSet, a fixture tree in
tests). Paths given to it are host-absolute (``/sys/bus/pci/devices``). Its contract, on every
path of every method:

1. **Contained.** No path resolves outside the host root. The seam walks every path itself,
   one component at a time from an open directory with ``O_NOFOLLOW``, so the kernel never
   follows a link for it: a link is read and its target walked the same way, an absolute
   target from the root, ``..`` stepping up from the link's real directory and never above the
   root (what ``openat2`` calls ``RESOLVE_IN_ROOT``). A recorded tree replays as the live host.
2. **Only regular files are read.** A file is opened ``O_NONBLOCK | O_NOFOLLOW`` and
   ``fstat``-ed before anything is read: a FIFO, socket, device node or directory is refused,
   and a FIFO's open never blocks.
3. **Absent is not failed.** A path that is not there (``ENOENT``; ``ENOTDIR``: below a file;
   ``ENODEV``/``ENXIO``: a device gone mid-scan) is absent: ``None``, ``[]``, ``False``. Every
   other error (``EACCES``, ``EIO``, ``EMFILE``, a link loop, a file that is no regular file)
   raises :class:`HostFileError` (``unreadable``): what could not be read is undetermined,
   never absent. Content that is not text is a :class:`HostFileError` told apart by ``content``.
4. **One hook.** An optional ``recorder(operation, host_path, outcome)`` sees every operation
   once, at one choke point (:meth:`HostFS._leaf`): ``"read"`` with the bytes, ``"list"`` with
   the names, ``"stat"`` or ``"readlink"`` with ``None``, ``None`` for an absent path, or the
   :class:`HostFileError` raised; the walk reports each link it follows as ``"readlink"``.
   ``snapshot`` records a host with it, ``bench/discovery.py`` traces a pass.

Directories are kept open as ``O_PATH`` descriptors keyed by their real path, so a device's
twenty files cost one short lookup each: a bounded cache (least recently used closed first)
that only the seam opens and closes, under one lock, dropped by :meth:`clear_cache` between
passes. Built on ``os`` alone: no library confines paths under a root.
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import itertools
import os
import posixpath
import stat
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeAlias, TypeVar

MAX_ATTR_BYTES = 64 * 1024
"""Largest file the seam reads in one go; sysfs attributes are at most a page."""

MAX_OPEN_DIRECTORIES = 128
"""Directory descriptors kept open: a source reads one directory's files together, so a small
cache keeps nearly every hit while staying far below any ``RLIMIT_NOFILE``."""

_MAX_LINKS = 40  # as the kernel's MAXSYMLINKS
_PAGE = 4096
_GONE = frozenset({errno.ENOENT, errno.ENOTDIR, errno.ENODEV, errno.ENXIO})
_O_PATH = getattr(os, "O_PATH", os.O_RDONLY)
_DIR = _O_PATH | os.O_DIRECTORY | os.O_CLOEXEC | os.O_NOFOLLOW
_FILE = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOFOLLOW
_LIST = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | os.O_NOFOLLOW
NOT_REGULAR = "not a regular file (FIFO, socket or device node)"

T = TypeVar("T")


class HostFileError(OSError):
    """A host file exists but could not be read as expected (permissions, I/O, not text).

    ``missing``: it is not there after all (a read's ``None``); ``content``: it was read, but
    its content is not text. Neither: it could not be read, so what it says is unknown."""

    def __init__(self, host_path: str, reason: str, *, missing: bool = False, content: bool = False) -> None:
        super().__init__(f"{host_path}: {reason}")
        self.host_path = host_path
        self.reason = reason
        self.missing = missing
        self.content = content

    @property
    def unreadable(self) -> bool:
        """The file is there and could not be read: its value is undetermined, not absent."""
        return not self.missing and not self.content


class IncompleteFile(HostFileError):
    """A host file read, but not whole: empty where its writer never leaves it empty, cut
    mid-line, or saying less than the rest of the host shows it must (fewer processors than
    are online). Raised by the source that knows the file's format; ``unreadable`` like any
    failed read: what it says is undetermined, never absent."""

    def __init__(self, host_path: str, reason: str) -> None:
        super().__init__(host_path, f"incomplete: {reason}")


Outcome: TypeAlias = "bytes | list[str] | HostFileError | None"
Recorder: TypeAlias = Callable[[str, str, Outcome], None]
"""``recorder(operation, host_path, outcome)``: see the module's contract, point 4."""


class _Refused(OSError):
    """A leaf the operation does not take (a FIFO to read, a file to list); never absent."""


class _Missing(OSError):
    """A component of a walked path is not there; ``path`` is where it would be."""

    def __init__(self, code: int, path: str) -> None:
        super().__init__(code, os.strerror(code))
        self.path = path


def _error(host_path: str, exc: OSError) -> HostFileError:
    """What the seam raises for ``exc`` met on ``host_path`` (its cause kept)."""
    if isinstance(exc, HostFileError):
        return exc
    missing = exc.errno in _GONE and not isinstance(exc, _Refused)
    reason = "missing" if missing else (exc.strerror or str(exc) or type(exc).__name__)
    error = HostFileError(host_path, reason, missing=missing)
    error.__cause__ = exc
    return error


def _normalise(host_path: str) -> str:
    """A query, lexically: one leading ``/``, no ``.``, ``..`` or empty component. (A link's
    target is never normalised: the walk follows it as the kernel does.)"""
    if "\x00" in host_path:
        raise OSError(errno.ENOENT, "NUL byte in path")
    if host_path[:1] == "/" and "//" not in host_path and "/." not in host_path and host_path[-1:] != "/":
        return host_path
    return posixpath.normpath("/" + host_path.lstrip("/"))


def _plain(name: str) -> bool:
    """One directory entry: not empty, no ``/`` or NUL, not ``.``/``..``."""
    return bool(name) and "/" not in name and "\x00" not in name and name not in (".", "..")


def _join(directory: str, name: str) -> str:
    return f"{directory}/{name}" if directory != "/" else f"/{name}"


def _read(dirfd: int, name: str, limit: int = MAX_ATTR_BYTES) -> bytes:
    """The content of a regular file ``name`` in ``dirfd``, at most ``limit`` bytes.

    The one end-of-file rule: a file that states its size is complete at a read that is not a
    whole number of pages (a regular file returns less only at its end; sysfs returns a text
    attribute in one read and a binary one a page at a time); a file of size 0 (procfs,
    generated as it is read) is read until a read returns nothing."""
    fd = os.open(name, _FILE, dir_fd=dirfd)
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            if stat.S_ISDIR(status.st_mode):
                raise _Refused(errno.EISDIR, os.strerror(errno.EISDIR))
            raise _Refused(errno.EINVAL, NOT_REGULAR)
        chunks, size = [], 0
        while size < limit and (chunk := os.read(fd, limit - size)):
            chunks.append(chunk)
            size += len(chunk)
            if status.st_size and len(chunk) % _PAGE:
                break
        return b"".join(chunks)  # one chunk: that very object
    finally:
        os.close(fd)


def _list(dirfd: int, name: str) -> list[str]:
    fd = os.open(name, _LIST, dir_fd=dirfd)
    try:
        return sorted(os.listdir(fd))
    finally:
        os.close(fd)


def _lstat(dirfd: int, name: str) -> os.stat_result:
    return os.stat(name, dir_fd=dirfd, follow_symlinks=False)


def _stat(dirfd: int, name: str) -> os.stat_result:
    status = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
    if stat.S_ISLNK(status.st_mode):
        raise OSError(errno.ELOOP, "a link: followed inside the root")
    return status


def _readlink(dirfd: int, name: str) -> str | None:
    try:
        return os.readlink(name, dir_fd=dirfd)
    except OSError as exc:
        if exc.errno == errno.EINVAL:  # no link
            return None
        raise


def _text(host_path: str, data: bytes) -> str:
    """A file's bytes as UTF-8 text; NUL bytes or invalid UTF-8 are a content error."""
    if b"\x00" in data:
        raise HostFileError(host_path, "binary content (NUL byte) in a text file", content=True)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HostFileError(host_path, f"not UTF-8 text ({exc.reason} at byte {exc.start})", content=True) from exc


class HostFS:
    """Read-only view of the host's files under ``root``."""

    def __init__(self, root: str | os.PathLike[str] = "/", recorder: Recorder | None = None) -> None:
        self.root = Path(os.path.abspath(os.fspath(root)))
        self._recorder = recorder
        self._lock = threading.RLock()
        self._rootfd = -1
        #: real host directory (no link in it) -> its O_PATH descriptor, least recently used first
        self._dirs: dict[str, int] = {}
        #: host directory as asked -> its real path, for the current pass
        self._real: dict[str, str] = {}

    @property
    def is_live(self) -> bool:  # the real host "/": live-only probes are allowed
        return str(self.root) == "/"

    def __repr__(self) -> str:
        return f"HostFS({str(self.root)!r})"

    # -- descriptors ------------------------------------------------------------------
    def clear_cache(self) -> None:
        """Forget resolved paths, close open directories: before each pass (devices come and go)."""
        with self._lock:
            self._real.clear()
            fds, self._dirs = list(self._dirs.values()), {}
            for fd in fds:
                os.close(fd)

    def close(self) -> None:
        """Release every descriptor the seam holds (it reopens what it needs on next use)."""
        with self._lock:
            self.clear_cache()
            if self._rootfd >= 0:
                fd, self._rootfd = self._rootfd, -1
                os.close(fd)

    def __del__(self) -> None:
        with contextlib.suppress(OSError, AttributeError, TypeError):  # interpreter shutdown: os may be gone
            self.close()

    def _dirfd(self, real: str) -> int:
        """The descriptor of a real directory, from the cache or opened down from its nearest
        open ancestor (each component ``O_NOFOLLOW``: a link there now fails, never leads out)."""
        if real == "/":
            if self._rootfd < 0:
                self._rootfd = os.open(self.root, _O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            return self._rootfd
        fd = self._dirs.pop(real, None)
        if fd is not None:
            self._dirs[real] = fd  # the most recently used goes last
            return fd
        names: list[str] = []
        ancestor = real
        while True:
            ancestor, _, name = ancestor.rpartition("/")
            ancestor = ancestor or "/"
            names.append(name)
            if ancestor == "/" or ancestor in self._dirs:
                break
        fd = self._dirfd(ancestor)
        for name in reversed(names):
            ancestor = _join(ancestor, name)
            fd = os.open(name, _DIR, dir_fd=fd)
            self._keep(ancestor, fd)
        return fd

    def _keep(self, real: str, fd: int) -> None:
        if len(self._dirs) >= MAX_OPEN_DIRECTORIES:
            os.close(self._dirs.pop(next(iter(self._dirs))))
        self._dirs[real] = fd

    # -- the walk ---------------------------------------------------------------------
    def _locate(self, path: str, start: str, hops: list[int]) -> tuple[str, str]:
        """Walk ``path`` (relative to the real directory ``start``, or from the root when
        absolute): the real directory holding its last component, and that component (``.``
        when the path names a directory itself). Every component before the last is entered as
        a directory (:meth:`_enter`). ``OSError`` when a component is not there, not a
        directory or cannot be read, or links loop."""
        pending = path.split("/")[::-1]  # pop() takes the next component
        current = "/" if path.startswith("/") else start
        while pending:
            name = pending.pop()
            if name in ("", ".", ".."):
                if name == "..":  # the lexical parent of a real path is its real parent
                    current = current.rpartition("/")[0] or "/"
                if not pending:
                    return current, "."
            elif not pending:
                return current, name
            else:
                current = self._enter(current, name, pending, hops)
        return current, "."

    def _enter(self, current: str, name: str, pending: list[str], hops: list[int]) -> str:
        """Where the walk goes on after the entry ``name`` of ``current``: the entry (opened, kept),
        or for a link ``current`` (the root: absolute) with its target pushed onto ``pending``."""
        child = _join(current, name)
        if child in self._dirs:
            return child
        known = self._real.get(child)  # a link this pass followed to a directory
        if known is not None:
            return known
        parent = self._dirfd(current)
        try:
            self._keep(child, os.open(name, _DIR, dir_fd=parent))
            return child
        except OSError as exc:
            target = self._follow(parent, current, name, hops) if exc.errno in (errno.ENOTDIR, errno.ELOOP) else None
            if target is None:
                if exc.errno in _GONE:  # not there, or a file where a directory was needed
                    rest = [p for p in itertools.takewhile(lambda p: p != "..", reversed(pending)) if p not in ("", ".")]
                    raise _Missing(exc.errno, posixpath.join(child, *rest)) from exc
                raise
        pending.extend(target.split("/")[::-1])
        return "/" if target.startswith("/") else current

    def _follow(self, dirfd: int, directory: str, name: str, hops: list[int]) -> str | None:
        """The target of the link ``name`` in ``directory`` (``None``: no link), counted
        against the loop limit and reported to the recorder."""
        target = _readlink(dirfd, name)
        if target is not None:
            hops[0] += 1
            if hops[0] > _MAX_LINKS or "\x00" in target:
                raise OSError(errno.ELOOP, "too many levels of symbolic links")
            self._note("readlink", _join(directory, name), None)
        return target

    def _directory(self, norm: str) -> str:
        """The real path of the directory ``norm`` (every link followed), cached for the pass:
        its parent's (so each directory is walked once), then its last component entered."""
        real = self._real.get(norm) or (norm if norm in self._dirs or norm == "/" else None)
        if real is None:
            parent, _, name = norm.rpartition("/")
            real = self._locate(name + "/.", self._directory(parent or "/"), [0])[0]
            self._real[norm] = real
        return real

    def _leaf(self, operation: str, host_path: str, where: tuple[str, str] | None,
              act: Callable[[int, str], T], follow: bool = True) -> T | None:
        """The choke point of every operation: ``act(dirfd, name)`` on the entry ``name`` of
        the real directory (``where``, else the one holding ``host_path``); on a link, and
        ``follow``, on its target instead. ``None`` for a path that is not there, any other
        error raised as :class:`HostFileError`; the recorder told the outcome once."""
        hops, result = [0], None
        try:
            directory, name = where or self._split(host_path)
            while True:
                dirfd = self._dirfd(directory)
                try:
                    result = act(dirfd, name)
                    break
                except OSError as exc:
                    if not follow or exc.errno not in (errno.ELOOP, errno.ENOTDIR) or isinstance(exc, _Refused):
                        raise
                    target = self._follow(dirfd, directory, name, hops)
                    if target is None:  # no link: the entry is there but not what was asked for
                        raise _Refused(exc.errno, exc.strerror) from exc
                    directory, name = self._locate(target, directory, hops)
        except (OSError, ValueError) as exc:  # ValueError: a NUL byte os.open refuses
            if isinstance(exc, OSError) and (exc.errno not in _GONE or isinstance(exc, _Refused)):
                raise self._failed(operation, host_path, exc) from exc
            result = None
        if self._recorder is not None:
            self._recorder(operation, host_path, result if isinstance(result, (bytes, list)) else None)
        return result

    def _failed(self, operation: str, host_path: str, exc: OSError) -> HostFileError:
        # apart from _leaf, so that no frame of the raised error's traceback holds the error
        # itself: a reference cycle per failed read would be left to the collector
        error = _error(host_path, exc)
        self._note(operation, host_path, error)
        return error

    def _split(self, host_path: str) -> tuple[str, str]:
        """The real directory holding ``host_path`` (cached for the pass) and its last name."""
        parent, _, name = _normalise(host_path).rpartition("/")
        return self._directory(parent or "/"), name or "."

    def _at(self, operation: str, host_path: str, act: Callable[[int, str], T], follow: bool = True) -> T | None:
        with self._lock:
            return self._leaf(operation, host_path, None, act, follow)

    def _note(self, operation: str, host_path: str, outcome: Outcome) -> None:
        if self._recorder is not None:
            self._recorder(operation, host_path, outcome)

    # -- the public face --------------------------------------------------------------
    def resolve(self, host_path: str) -> str:
        """``host_path`` with every link followed inside the root; where a component is missing,
        the rest appended as it stands up to its first ``..`` (a dangling link resolves to its
        missing target). :class:`HostFileError` when a link loops or cannot be read."""
        with self._lock:
            hops = [0]
            try:
                if (known := self._real.get(_normalise(host_path))) is not None:  # walked this pass
                    return known
                try:
                    directory, name = self._split(host_path)
                except _Missing:  # walked whole, so that the missing path says all of the rest
                    directory, name = self._locate(_normalise(host_path), "/", hops)
                if name == ".":
                    return directory
                try:
                    target = self._follow(self._dirfd(directory), directory, name, hops)
                except OSError as exc:
                    if exc.errno not in _GONE:
                        raise
                    target = None
                if target is None:
                    return _join(directory, name)
                # the target entered as a directory (a device's, as a rule: kept for the reads that
                # follow); a walk that ends at a file or at nothing raises _Missing, saying where
                return self._locate(target + "/.", directory, hops)[0]
            except _Missing as exc:
                return exc.path
            except OSError as exc:
                error = _error(host_path, exc)
                if error.missing:  # a component went between two steps of the walk
                    return _normalise(host_path)
                raise error from exc

    def read_bytes(self, host_path: str, max_bytes: int = MAX_ATTR_BYTES) -> bytes:
        """Raw content (at most ``max_bytes``); :class:`HostFileError`, ``missing`` when absent."""
        data = self._at("read", host_path, lambda fd, name: _read(fd, name, max_bytes))
        if data is None:
            raise HostFileError(host_path, "missing", missing=True)
        return data

    def read_text(self, host_path: str, max_bytes: int = MAX_ATTR_BYTES) -> str:
        """UTF-8 content; binary junk (NUL bytes, invalid UTF-8) is a ``content`` error."""
        return _text(host_path, self.read_bytes(host_path, max_bytes))

    def read_attr(self, host_path: str) -> str | None:
        """A sysfs-style one-value attribute, whitespace-stripped; ``None`` when it is absent."""
        data = self._at("read", host_path, _read)
        return None if data is None else _text(host_path, data).strip()

    def read_attrs(self, directory: str, names: Iterable[str]
                   ) -> tuple[dict[str, str | None], dict[str, HostFileError]]:
        """Several attributes of one directory, each as :meth:`read_attr` reads it: ``(values,
        failures)``, name -> stripped text (``None`` when absent) and name -> the error of each
        file that could not be read (one bad file never hides the others). The directory is
        resolved once."""
        values: dict[str, str | None] = {}
        failures: dict[str, HostFileError] = {}
        base = directory.rstrip("/")
        with self._lock:
            try:
                real: str | None = self._directory(_normalise(directory))
            except OSError:
                real = None  # each file says what is wrong, file by file
            for name in names:
                path = f"{base}/{name}"
                try:
                    if real is not None and _plain(name):
                        data = self._leaf("read", path, (real, name), _read)
                    else:
                        data = self._at("read", path, _read)
                    values[name] = None if data is None else _text(path, data).strip()
                except HostFileError as exc:
                    failures[name] = exc
        return values, failures

    def listdir(self, host_path: str) -> list[str]:
        """Sorted entry names; ``[]`` when the directory does not exist."""
        return self._at("list", host_path, _list) or []

    def glob(self, host_pattern: str) -> list[str]:
        """Host paths matching a pattern whose wildcards are only in the last component."""
        directory, pattern = posixpath.split(_normalise(host_pattern))
        return [posixpath.join(directory, n) for n in self.listdir(directory) if fnmatch.fnmatchcase(n, pattern)]

    def stat(self, host_path: str, *, follow: bool = True) -> os.stat_result | None:
        """The path's status, a link followed inside the root (``follow``) or not; ``None``
        when it does not exist (a dangling link followed: its target does not)."""
        return self._at("stat", host_path, _stat if follow else _lstat, follow)

    def exists(self, host_path: str) -> bool:
        """Whether the path exists (a dangling link at it does). Raises where it cannot tell."""
        return self.stat(host_path, follow=False) is not None

    def is_dir(self, host_path: str) -> bool:
        status = self.stat(host_path)
        return status is not None and stat.S_ISDIR(status.st_mode)

    def is_file(self, host_path: str) -> bool:
        status = self.stat(host_path)
        return status is not None and stat.S_ISREG(status.st_mode)

    def is_link(self, host_path: str) -> bool:
        """Whether the leaf itself is a symlink (its parent directories are followed)."""
        status = self.stat(host_path, follow=False)
        return status is not None and stat.S_ISLNK(status.st_mode)

    def readlink(self, host_path: str) -> str | None:
        """The raw target of a symlink; ``None`` when the path is no link or not there."""
        return self._at("readlink", host_path, _readlink, follow=False)

    def link_name(self, host_path: str) -> str | None:
        """Basename of a symlink's target: how sysfs names a ``driver`` or ``iommu_group``."""
        target = self.readlink(host_path)
        return posixpath.basename(target.rstrip("/")) if target else None

