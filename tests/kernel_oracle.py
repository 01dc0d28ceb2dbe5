"""The kernel's own answer for a host path under a root, to judge ``agent.hostfs`` by.

``openat2(2)`` with ``RESOLVE_IN_ROOT`` resolves a path as if the root were ``/``: absolute
link targets from the root, ``..`` never above it (Linux >= 5.6; called through ``ctypes``:
the Python standard library has no binding). Each answer is reduced to what the seam promises:
the bytes read, the names listed, the kind, the link target, ``missing``, or that the entry is
there but refused (not a regular file, not a directory) or could not be resolved (a loop).
The seam answers queries lexically normalised (``f/.`` is ``f``); so does this oracle.
"""

from __future__ import annotations

import ctypes
import errno
import os
import posixpath
import stat
from pathlib import Path

_SYS_OPENAT2 = 437  # the same number on every architecture (asm-generic unistd.h)
_RESOLVE_NO_MAGICLINKS, _RESOLVE_IN_ROOT = 0x02, 0x10
_GONE = (errno.ENOENT, errno.ENOTDIR)


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def openat2(dirfd: int, path: str, flags: int) -> int:
    """``openat2(dirfd, path, {flags, RESOLVE_IN_ROOT})``; a lookup through ``..`` that a rename
    raced answers EAGAIN, retried as openat2(2) advises."""
    how = _OpenHow(flags | os.O_CLOEXEC, 0, _RESOLVE_IN_ROOT | _RESOLVE_NO_MAGICLINKS)
    for _ in range(1000):
        fd = _libc.syscall(ctypes.c_long(_SYS_OPENAT2), dirfd, path.encode("utf-8", "surrogateescape"),
                           ctypes.byref(how), ctypes.c_size_t(ctypes.sizeof(how)))
        if fd >= 0:
            return int(fd)
        code = ctypes.get_errno()
        if code != errno.EAGAIN:
            raise OSError(code, os.strerror(code), path)
    raise OSError(errno.EAGAIN, os.strerror(errno.EAGAIN), path)


def available() -> bool:
    try:
        os.close(openat2(-100, "/", getattr(os, "O_PATH", 0)))  # AT_FDCWD
    except OSError:
        return False
    return True


class Kernel:
    """The kernel's answers under ``root`` (a directory descriptor held until :meth:`close`)."""

    def __init__(self, root: Path) -> None:
        self.rootfd = os.open(root, os.O_PATH | os.O_DIRECTORY)

    def close(self) -> None:
        os.close(self.rootfd)

    def _open(self, query: str, flags: int) -> int:
        relative = posixpath.normpath("/" + query.lstrip("/")).lstrip("/") or "."
        return openat2(self.rootfd, relative, flags)

    def _kind(self, query: str, follow: bool) -> str:
        try:
            fd = self._open(query, os.O_PATH | (0 if follow else os.O_NOFOLLOW))
        except OSError as exc:
            return "missing" if exc.errno in _GONE else "error"
        try:
            mode = os.fstat(fd).st_mode
        finally:
            os.close(fd)
        for kind, test in (("dir", stat.S_ISDIR), ("file", stat.S_ISREG), ("link", stat.S_ISLNK)):
            if test(mode):
                return kind
        return "other"

    def kind(self, query: str, *, follow: bool = True) -> str:
        """``dir``, ``file``, ``link`` (not followed), ``other``, ``missing`` or ``error``."""
        return self._kind(query, follow)

    def read(self, query: str, limit: int = 1 << 20) -> bytes | str:
        """The content, or ``missing`` / ``refused`` (no regular file) / ``error``."""
        kind = self._kind(query, True)
        if kind != "file":
            return kind if kind in ("missing", "error") else "refused"
        fd = self._open(query, os.O_RDONLY | os.O_NONBLOCK)
        try:
            chunks = []
            while sum(map(len, chunks)) < limit and (chunk := os.read(fd, limit - sum(map(len, chunks)))):
                chunks.append(chunk)
            return b"".join(chunks)
        finally:
            os.close(fd)

    def listdir(self, query: str) -> list[str] | str:
        """Sorted names, or ``missing`` / ``refused`` (no directory) / ``error``."""
        kind = self._kind(query, True)
        if kind != "dir":
            return kind if kind in ("missing", "error") else "refused"
        fd = self._open(query, os.O_RDONLY | os.O_DIRECTORY)
        try:
            return sorted(os.listdir(fd))
        finally:
            os.close(fd)

    def readlink(self, query: str) -> str | None:
        """The link's target; ``None`` for no link or nothing there (``error``: a loop before it)."""
        try:
            fd = self._open(query, os.O_PATH | os.O_NOFOLLOW)
        except OSError as exc:
            return None if exc.errno in _GONE else "error"
        try:
            return os.readlink("", dir_fd=fd)
        except OSError:
            return None
        finally:
            os.close(fd)
