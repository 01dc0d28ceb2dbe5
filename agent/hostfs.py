"""The one seam through which every host file is read.

Discovery never touches a host path directly: it asks a :class:`HostFS` rooted at the
configured host root (``/`` on a bare host, ``/host`` in the DaemonSet, a fixture tree in
tests).  Paths given to the seam are *host-absolute* (``/sys/bus/pci/devices``); the seam maps
them under the root, re-roots absolute symlink targets so a recorded tree replays exactly like
the live host, and refuses any path that would escape the root.

An optional ``recorder`` callback sees every host path that was read or listed; ``snapshot``
uses it to copy exactly the files the sources looked at.

How a path is opened (the hot loop of discovery, see ``bench/discovery.py``): a path's *parent
directory* is resolved once per pass and kept open as an ``O_PATH`` descriptor; the leaf is then
opened relative to it with ``O_NOFOLLOW``, so reading the thirty attributes of one device costs
one short lookup each.  A directory is resolved inside the root by the kernel itself where it can
(``openat2`` with ``RESOLVE_IN_ROOT``, Linux >= 5.6, through ``ctypes``: absolute links and ``..``
stay under the root, race-free), otherwise by :meth:`HostFS.resolve`'s walk in Python (the
fallback, also used when seccomp refuses ``openat2``).  A leaf that is itself a symlink fails
``O_NOFOLLOW`` with ``ELOOP`` and is then resolved the same way.  On the live host (root ``/``)
there is nothing to confine and the kernel follows links as usual.
"""

from __future__ import annotations

import errno
import fnmatch
import os
import posixpath
import stat
import sys
import threading
from threading import get_ident as _get_ident
from pathlib import Path
from typing import AbstractSet, Callable, Iterable, Iterator, NamedTuple, TypeVar

MAX_ATTR_BYTES = 64 * 1024
"""Largest file the seam reads in one go; sysfs attributes are at most a page."""

_MAX_LINK_HOPS = 40

#: errno values that mean "this attribute is not there (any more)" on sysfs/procfs:
#: the file is missing, or the device went away between listing and reading it.
_GONE_ERRNOS = frozenset({errno.ENOENT, errno.ENODEV, errno.ENXIO, errno.ENOTDIR})


#: read-only, close-on-exec, and non-blocking so a FIFO with no writer cannot hang discovery
#: (no effect on regular files)
_READ_FLAGS = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK
_O_PATH = getattr(os, "O_PATH", 0)
_S_IFMT, _S_IFREG, _S_IFDIR = 0o170000, stat.S_IFREG, stat.S_IFDIR
_DIR_FLAGS = _O_PATH | os.O_DIRECTORY | os.O_CLOEXEC
_LIST_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC

#: the methods :meth:`HostFS.read_directory` stands for; a subclass overriding one gets them called
_COMPOSED = ("resolve", "listdir", "entries", "read_attrs", "link_names", "read_attr", "read_text", "read_bytes",
             "readlink", "link_name")
T = TypeVar("T")  # what a directory listing is read into (HostFS._list)
#: open directory descriptors kept per pass; sources read one directory's files together, so a
#: small FIFO keeps nearly every hit while staying far below any RLIMIT_NOFILE
_MAX_DIR_FDS = 128

_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_IN_ROOT = 0x10
_SYS_OPENAT2 = 437  # the same number on every architecture since 5.6 (asm-generic table)
_OPENAT2_ARCHES = {"x86_64", "aarch64", "arm64", "armv7l", "armv8l", "riscv64", "ppc64le", "s390x", "i686", "i386"}

#: ``syscall`` from libc, set up by :func:`_openat2_available`; module level so a bench can wrap it
_SYSCALL = None
_OPEN_HOW = None
_openat2_state: bool | None = None


def _openat2_available() -> bool:
    """Whether this kernel (and its seccomp filter) lets us call ``openat2``; probed once."""
    global _SYSCALL, _OPEN_HOW, _NR_OPENAT2, _openat2_state
    if _openat2_state is not None:
        return _openat2_state
    _openat2_state = False
    if not sys.platform.startswith("linux") or os.uname().machine not in _OPENAT2_ARCHES or not _O_PATH:
        return False
    try:
        import ctypes  # only under a host root other than "/": the live host never needs it

        libc = ctypes.CDLL(None, use_errno=True)
        syscall = libc.syscall
        syscall.restype = ctypes.c_long
        # no argtypes: converting five arguments through them on every call was a third of an
        # openat2's cost; the number and the size go in as ready-made c_long / c_size_t (their
        # C widths), the path as bytes (char *), open_how by reference, dirfd as a Python int
        # (an int in a register, which the kernel's openat2 takes as int)

        class OpenHow(ctypes.Structure):
            _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]

        _SYSCALL, _OPEN_HOW = syscall, OpenHow
        _NR_OPENAT2 = ctypes.c_long(_SYS_OPENAT2)
        probe = _openat2(-100, "/", _DIR_FLAGS)  # AT_FDCWD
        os.close(probe)
        _openat2_state = True
    except (OSError, AttributeError, ImportError):
        _SYSCALL = _OPEN_HOW = None
    return _openat2_state


#: flags -> (open_how struct, pointer to it, its size as c_size_t): built once per set of flags
_HOWS: dict[int, tuple] = {}
#: the syscall number as the C long ``syscall(2)`` takes (set up with ``_SYSCALL``)
_NR_OPENAT2 = None


def _openat2_how(flags: int) -> tuple:
    """``(open_how, pointer to it, its size)`` for ``flags`` with ``RESOLVE_IN_ROOT |
    RESOLVE_NO_MAGICLINKS``: the last two are what ``_SYSCALL`` takes after the path."""
    how = _HOWS.get(flags)
    if how is None:
        import ctypes

        struct = _OPEN_HOW(flags, 0, _RESOLVE_IN_ROOT | _RESOLVE_NO_MAGICLINKS)
        how = _HOWS[flags] = (struct, ctypes.byref(struct), ctypes.c_size_t(ctypes.sizeof(struct)))
    return how


def _openat2(dirfd: int, path: str, flags: int) -> int:
    """``openat2(dirfd, path, {flags, RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS})`` or OSError."""
    if "\x00" in path:
        raise OSError(errno.ENOENT, "NUL byte in path", path)
    how = _HOWS.get(flags) or _openat2_how(flags)
    encoded = path.encode("utf-8", "surrogateescape")
    for _attempt in range(_EAGAIN_TRIES):
        fd = _SYSCALL(_NR_OPENAT2, dirfd, encoded, how[1], how[2])
        if fd >= 0:
            return fd
        import ctypes

        code = ctypes.get_errno()
        if code != errno.EAGAIN:
            break
    raise OSError(code, os.strerror(code), path)


_EAGAIN_TRIES = 64
"""openat2(2): with ``RESOLVE_IN_ROOT`` a lookup that steps through ``..`` fails with EAGAIN
when a rename or mount anywhere on the system raced it ("the caller may choose to retry").
sysfs links are full of ``..`` and a node renames files all the time (kubelet, runtimes, log
rotation): without the retry one CPU's topology read as missing under load and the cpu
source dropped ``cpu-hardware_multithreading`` until the next pass (bench/fleet.py's idle
sample showed the label flapping). A retry is one syscall; 64 outlast a rename loop."""


#: leaf names already checked by :func:`_plain_name` (sources ask for the same few dozen)
_PLAIN_NAMES: set[str] = set()


def _plain_name(name: str) -> bool:
    """Whether ``name`` is one directory entry (not empty, no ``/``, no NUL, not ``.``/``..``),
    safe to open relative to its directory's descriptor; remembered when it is."""
    if not name or "/" in name or "\x00" in name or name == "." or name == "..":
        return False
    if len(_PLAIN_NAMES) < 4096:
        _PLAIN_NAMES.add(name)
    return True


def _is_real_dir(path: str) -> bool:
    """Whether ``path`` is a directory itself (never following a link)."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except (OSError, ValueError):
        return False


_new_tuple = tuple.__new__


class HostFileError(OSError):
    """A host file exists but could not be read as expected (permissions, I/O, not text)."""

    def __init__(self, host_path: str, reason: str, *, missing: bool = False):
        super().__init__(f"{host_path}: {reason}")
        self.host_path = host_path
        self.reason = reason
        self.missing = missing


class DirectoryRead(NamedTuple):
    """What :meth:`HostFS.read_directory` found in one directory."""

    path: str
    """The directory's real host path (every link followed inside the root)."""
    names: AbstractSet[str] | None
    """Its entries (a set: ``in``, iteration, ``==``); empty when it does not exist, ``None``
    when it could not be listed."""
    listing_error: HostFileError | None
    values: dict[str, str | None]
    """File name -> stripped text, ``None`` when absent (as :meth:`HostFS.read_attrs`)."""
    failures: dict[str, HostFileError]
    links: dict[str, str | None]
    """Link name -> basename of its target, ``None`` when the entry is no link."""


_NOT_REGULAR = "not a regular file (FIFO, socket or device node)"
#: file types refused without an open where a listing shows them (a socket cannot be opened)
_SPECIAL_KINDS = frozenset({stat.S_IFIFO, stat.S_IFCHR, stat.S_IFBLK})


def _special_file(dirfd: int, name: str) -> bool:
    """Whether ``name`` in the open directory ``dirfd`` is a FIFO or device node (``lstat``)."""
    try:
        return (os.stat(name, dir_fd=dirfd, follow_symlinks=False).st_mode & _S_IFMT) in _SPECIAL_KINDS
    except OSError:
        return False  # gone or unreadable: the open below says which


def _read_open(fd: int, host_path: str, max_bytes: int) -> bytes:
    """The content of an open descriptor, refused unless it is a regular file.

    Only regular files are read (sysfs and procfs attributes are regular files): a FIFO,
    socket or device node planted in the host tree is never read.  One ``read`` where the
    file states its size (a short read is its end); files of size 0 (procfs) are read until
    the kernel says end of file."""
    status = os.fstat(fd)
    kind = status.st_mode & _S_IFMT
    if kind != _S_IFREG:
        if kind == _S_IFDIR:  # os.open succeeds on a directory where open() would not
            raise HostFileError(host_path, os.strerror(errno.EISDIR))
        raise HostFileError(host_path, _NOT_REGULAR)
    data = os.read(fd, max_bytes)
    if status.st_size and len(data) < max_bytes or not data:
        return data
    return _read_to_end(fd, data, max_bytes)


def _read_to_end(fd: int, data: bytes, max_bytes: int) -> bytes:
    """``data`` (the first read of ``fd``) and what follows it, up to ``max_bytes`` in all."""
    chunks = [data]
    left = max_bytes - len(data)
    while left > 0:
        chunk = os.read(fd, left)
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _oserror(host_path: str, exc: OSError) -> HostFileError:
    """What the seam raises for an ``OSError`` met reading ``host_path`` (its cause kept)."""
    missing = exc.errno in _GONE_ERRNOS
    error = HostFileError(host_path, "missing" if missing else (exc.strerror or type(exc).__name__), missing=missing)
    error.__cause__ = exc
    return error


def _note_failed_read(values: dict, failures: dict, name: str, host_path: str, exc: OSError) -> None:
    """What the read loops record for a file whose read failed: a :class:`HostFileError` as it
    is, any other ``OSError`` as :func:`_oserror` words it (a file gone since it was listed or
    opened is absent: ``None``)."""
    if isinstance(exc, HostFileError):
        failures[name] = exc
        return
    error = _oserror(host_path, exc)
    if error.missing:
        values[name] = None
    else:
        failures[name] = error


def _attr_text(host_path: str, data: bytes) -> str:
    """A file's bytes as UTF-8 text; binary junk is a :class:`HostFileError`."""
    if b"\x00" in data:
        raise HostFileError(host_path, "binary content (NUL byte) in a text file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HostFileError(host_path, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from exc


class HostFS:
    """Read-only view of the host's files under ``root``."""

    #: whether this class reads files with HostFS's own read methods (a subclass that overrides
    #: one sees every file through it: :meth:`read_attrs` then reads one file at a time)
    _plain_reads = True
    _plain_links = True
    #: resolve directories by reading their links from real parents (:meth:`_canonical`) before
    #: the kernel's or the Python resolver; tests switch it off to keep both resolvers exercised
    _walk_links = True

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls._plain_reads = all(getattr(cls, name) is getattr(HostFS, name)
                               for name in ("read_bytes", "read_text", "read_attr"))
        cls._plain_links = all(getattr(cls, name) is getattr(HostFS, name) for name in ("readlink", "link_name"))

    def __init__(self, root: str | os.PathLike[str] = "/", recorder: Callable[[str], None] | None = None,
                 *, kernel_resolve: bool | None = None):
        """``kernel_resolve``: confine paths with ``openat2`` (``None``: where the kernel has it;
        ``False``: always the Python walk, which tests use to keep the fallback honest)."""
        self.root = Path(os.path.abspath(os.fspath(root)))
        self._recorder = recorder
        # Plain strings, not pathlib objects: discovery maps tens of thousands of paths per pass
        # and pathlib's parsing was most of its cost (bench/discovery.py).
        self._prefix = "" if str(self.root) == "/" else str(self.root)
        #: host path -> host path with every symlink followed; valid for one discovery pass
        self._resolved: dict[str, str] = {}
        #: host directory path -> open O_PATH descriptor of it (resolved inside the root); one pass,
        #: least recently used first (:meth:`_canonical` moves what it uses to the end)
        self._dirfds: dict[str, int] = {}
        #: keys of ``_dirfds`` that are the directory's real host path: opened from the root one
        #: component at a time, each relative to its parent with ``O_NOFOLLOW`` (no link on the way)
        self._canon: set[str] = set()
        #: real directories whose last child looked up by :meth:`_canonical` was a link
        self._link_parents: set[str] = set()
        self._rootfd = -1
        self._real_root: str | None = None
        #: the thread that owns the descriptor cache (the first to read); another thread reading
        #: through the same seam takes the uncached path, so a descriptor is never closed under it
        self._owner: int | None = None
        self._claim = threading.Lock()
        if kernel_resolve is None:
            kernel_resolve = bool(self._prefix) and _openat2_available()
        elif kernel_resolve and not _openat2_available():
            raise OSError(errno.ENOSYS, "openat2 is not available on this kernel")
        self._kernel_resolve = bool(self._prefix) and kernel_resolve
        #: no seam method a one-go read stands for is overridden (checked per instance: a bench
        #: or a test may replace methods on its subclass after the class was made)
        self._plain_seam = all(getattr(type(self), name) is getattr(HostFS, name) for name in _COMPOSED)
        #: :meth:`read_directory` may take its one-descriptor path (else it calls its parts)
        self._walks_directories = bool(self._prefix) and self._walk_links and recorder is None and self._plain_seam

    # -- path mapping -----------------------------------------------------------------
    @property
    def is_live(self) -> bool:
        """True when the seam reads the real host ``/`` (live-only probes are allowed)."""
        return not self._prefix

    @staticmethod
    def _normalise(host_path: str) -> str:
        # normpath keeps exactly two leading slashes ("//x" stays "//x", POSIX lets them mean
        # something); resolving such a path recursed forever, so every path gets exactly one.
        # Sources build clean absolute paths: those skip normpath (a quarter of a read's cost).
        # A *query* is normalised lexically on purpose ("f/." and "f/" read the file f, "b/.." is
        # "/" even with b missing); the kernel's rule that "x/." or "x/" requires a directory
        # applies to link *targets*, which the resolvers follow as the kernel does.
        if host_path[:1] == "/" and "//" not in host_path and "/." not in host_path and host_path[-1:] != "/":
            return host_path
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
        """Forget resolved paths and open directories; call before each discovery pass
        (devices come and go)."""
        self._resolved.clear()
        if self._owner in (None, threading.get_ident()):
            self._close_dirfds()

    def _owns_descriptors(self) -> bool:
        ident = threading.get_ident()
        if self._owner == ident:
            return True
        with self._claim:
            if self._owner is None:
                self._owner = ident
        return self._owner == ident

    def close(self) -> None:
        """Release every descriptor the seam holds (it reopens what it needs on next use)."""
        self._close_dirfds()
        if self._rootfd >= 0:
            fd, self._rootfd = self._rootfd, -1
            os.close(fd)

    def _close_dirfds(self) -> None:
        fds = list(self._dirfds.values())
        self._dirfds.clear()
        self._canon.clear()
        self._link_parents.clear()
        for fd in fds:
            os.close(fd)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: os may already be gone
            pass

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
        norm = self._normalise(host_path)
        if self._walk_links and self._prefix and norm != "/" and "\x00" not in norm and self._owns_descriptors():
            try:
                found = self._canonical(norm, [0], link_first=True)
            except OSError:
                found = None  # missing, dangling or a file: the resolvers below say what it is
            if found is not None:
                return found
        if self._kernel_resolve and norm != "/" and "\x00" not in norm and self._owns_descriptors():
            found = self._kernel_resolve_norm(norm)
            if found is not None:
                return found
        return self._resolve_norm(norm, [0])

    def _kernel_resolve_norm(self, norm: str) -> str | None:
        """:meth:`resolve` by the kernel: ``openat2`` inside the root, then the descriptor's
        own path from ``/proc/self/fd``; a directory's descriptor is kept for the reads that
        follow.  ``None`` where the Python walk must answer (dangling link, loop, no /proc)."""
        cached = self._resolved.get(norm)
        if cached is not None:
            return cached
        root = self._root_descriptor()
        try:
            fd, is_dir = _openat2(root, norm[1:], _DIR_FLAGS), True
        except OSError as exc:
            if exc.errno != errno.ENOTDIR:
                return None
            try:
                fd, is_dir = _openat2(root, norm[1:], _O_PATH | os.O_CLOEXEC), False
            except OSError:
                return None
        kept = False
        try:
            real = os.readlink(f"/proc/self/fd/{fd}")
            if self._real_root is None:
                self._real_root = os.path.realpath(self._prefix)
            if real == self._real_root:
                found = "/"
            elif real.startswith(self._real_root + "/"):
                found = real[len(self._real_root):]
            else:
                return None
            self._resolved[norm] = found
            if is_dir and found not in self._dirfds:
                self._keep_dirfd(found, fd)
                kept = True
            return found
        except OSError:
            return None
        finally:
            if not kept:
                os.close(fd)

    def _keep_dirfd(self, directory: str, fd: int, canonical: bool = False) -> None:
        if len(self._dirfds) >= _MAX_DIR_FDS:
            oldest = next(iter(self._dirfds))
            self._canon.discard(oldest)
            os.close(self._dirfds.pop(oldest))
        self._dirfds[directory] = fd
        if canonical:
            self._canon.add(directory)

    def _canonical(self, norm: str, hops: list[int], link_first: bool = False) -> str | None:
        """The real host path of the directory ``norm``, its descriptor open in the cache; links
        on the way followed inside the root by reading them, not by asking the kernel for a path.

        Why: resolving a device link (``/sys/bus/pci/devices/X -> ../../../devices/.../X``) with
        ``openat2`` and ``/proc/self/fd`` costs two syscalls through ``ctypes`` and a ``/proc``
        lookup; here it is one ``readlinkat`` and one ``openat`` of the target's last component.

        Why it stays inside the root: every directory is opened relative to an open directory
        whose key is its real path (the root, or a directory opened this way), with
        ``O_DIRECTORY | O_NOFOLLOW``, so no link is ever followed by the kernel.  A link is read
        (``readlinkat``) and its target walked component by component from the link's real
        parent (or from the root for an absolute target, as ``RESOLVE_IN_ROOT`` does): ``..``
        steps to the lexical parent of a real path (which is its real parent; at the root it
        stays there), every other component goes through this method again.  ``link_first``:
        ``norm`` is probably a link (``resolve``): read it before trying to open it.

        Raises ``OSError`` where the answer is certain (``ENOENT``: a component is not there;
        ``ENOTDIR``: a component is a file); ``None`` where the caller's resolver must decide
        (too many links, permission or other errors, a key already taken by another resolver)."""
        canon, dirfds = self._canon, self._dirfds
        if norm in canon:
            dirfds[norm] = dirfds.pop(norm)  # least recently used goes first
            return norm
        found = self._resolved.get(norm)
        if found is not None and found in canon:
            dirfds[found] = dirfds.pop(found)
            return found
        if norm in dirfds:
            return None  # opened by another resolver under this name: its real path is unknown
        if norm == "/":
            self._keep_dirfd("/", os.open(self._prefix, _DIR_FLAGS), canonical=True)
            return "/"
        parent, _, leaf = norm.rpartition("/")
        base = self._canonical(parent or "/", hops)
        if base is None:
            return None
        child = (base if base != "/" else "") + "/" + leaf
        if child != norm:  # norm's parent was a link: the entry's real path is below its target
            found = self._canonical(child, hops, link_first)
            if found is not None:
                self._resolved[norm] = found
            return found
        parent_fd = dirfds[base]
        target = None
        # a directory whose last child looked up was a link (/sys/bus/*/devices, /sys/class/*)
        # most likely holds links only: read first, open only if it is none
        link_first = link_first or base in self._link_parents
        if link_first:
            try:
                target = os.readlink(leaf, dir_fd=parent_fd)
            except OSError as exc:
                if exc.errno == errno.ENOENT:
                    raise
                if exc.errno != errno.EINVAL:
                    return None
        if target is None:
            try:
                fd = os.open(leaf, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=parent_fd)
            except OSError as exc:
                if exc.errno == errno.ENOENT:
                    raise
                if exc.errno != errno.ENOTDIR:
                    return None
                if link_first:
                    raise  # no link (readlink said so) and no directory: a file
                try:
                    target = os.readlink(leaf, dir_fd=parent_fd)
                except OSError as error:
                    if error.errno == errno.EINVAL:
                        raise exc from None  # a file
                    return None
            else:
                self._link_parents.discard(base)
                self._keep_dirfd(child, fd, canonical=True)
                return child
        self._link_parents.add(base)
        return self._follow_link(norm, base, target, hops)

    def _follow_link(self, norm: str, base: str, target: str, hops: list[int]) -> str | None:
        """:meth:`_canonical`'s second half: ``norm`` is a link in the open real directory ``base``
        whose target reads ``target``; the real path it leads to (``None``, ``OSError`` as there)."""
        hops[0] += 1
        if hops[0] > _MAX_LINK_HOPS or "\x00" in target:
            return None
        # ".." steps up from a real path (a canonical key); the names between are resolved as one
        # path by the recursion above (parent first), so a run of names costs one lookup when
        # its parent is already open
        current = "/" if target.startswith("/") else base
        names = target.lstrip("./")
        ups = target[:len(target) - len(names)]
        if (ups == "../" * (len(ups) // 3) and names and names[0] != "." and "/." not in names and "//" not in names
                and names[-1] != "/"):
            # the usual sysfs link, "../../../devices/pci0000:00/...": steps up, then names only
            for _ in range(len(ups) // 3):
                current = current.rpartition("/")[0] or "/"
            found = self._canonical((current if current != "/" else "") + "/" + names, hops)
            if found is not None:
                self._resolved[norm] = found
            return found
        pending: list[str] = []
        for part in target.split("/"):
            if not part or part == ".":
                continue
            if part != "..":
                pending.append(part)
                continue
            if pending:
                current = self._canonical((current if current != "/" else "") + "/" + "/".join(pending), hops)
                if current is None:
                    return None
                pending.clear()
            current = current.rpartition("/")[0] or "/"
        if pending:
            current = (current if current != "/" else "") + "/" + "/".join(pending)
        found = self._canonical(current, hops)  # its last names (or where its ".." ended)
        if found is not None:
            self._resolved[norm] = found
        return found

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
            after_name = False
            for part in target.split("/"):
                if not part or part == ".":
                    if after_name and not _is_real_dir(self._under_root(current)):
                        # "sys/." and "sys/" name a directory: on a file (or nothing) the kernel
                        # answers ENOTDIR (ENOENT), so the path stays broken as for ".." below
                        current = (current if current != "/" else "") + "/..."
                    after_name = False
                    continue
                after_name = part != ".."
                if part == "..":
                    if not _is_real_dir(self._under_root(current)):
                        # the kernel enters a component before ".." leaves it: a missing one (or a
                        # file) ends the walk there ("b/.." is not "."), so the path stays broken:
                        # "b/..." fails as "b/.." does (ENOENT, ENOTDIR) and, unlike "..", no
                        # lexical normalisation anywhere can turn it into a path that exists
                        current = (current if current != "/" else "") + "/..."
                        continue
                    current = posixpath.dirname(current)
                else:
                    current = self._resolve_norm((current if current != "/" else "") + "/" + part, hops)
        else:
            current = candidate
        self._resolved[norm] = current
        return current

    # -- descriptors --------------------------------------------------------------------
    def _root_descriptor(self) -> int:
        if self._rootfd < 0:
            self._rootfd = os.open(self._prefix, _DIR_FLAGS)
        return self._rootfd

    def _dirfd(self, directory: str) -> int:
        """An ``O_PATH`` descriptor of a normalised host directory, resolved inside the root.

        Raises ``OSError`` (ENOENT, ENOTDIR, ELOOP...) or :class:`HostFileError` (a link loop
        met by the Python walk)."""
        fd = self._dirfds.get(directory)
        if fd is not None:
            return fd
        real = self._resolved.get(directory)
        if real is not None and real in self._canon:  # a link this pass followed to an open directory
            return self._dirfds[real]
        parent, _, leaf = directory.rpartition("/")
        if parent in self._canon and self._walk_links and leaf and leaf != "." and leaf != "..":
            # the common case of the walk below, inline: a child of an open real directory
            try:
                fd = os.open(leaf, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=self._dirfds[parent])
            except OSError:
                pass  # a link, a file or not there: the walk says which
            else:
                self._keep_dirfd(directory, fd, canonical=True)
                return fd
        if not self._prefix:
            fd = os.open(directory, _DIR_FLAGS)
        elif self._walk_links and self._walk_first(directory) and (found := self._canonical(directory, [0])) is not None:
            return self._dirfds[found]
        elif directory == "/":
            fd = os.open(self._prefix, _DIR_FLAGS)
        elif self._kernel_resolve and (directory.rpartition("/")[0] or "/") not in self._dirfds:
            # parent not open either (cpuN/topology below the link cpuN): one confined openat2
            # for the whole path instead of opening, failing and resolving each level in turn
            fd = self._confined_open(directory, _DIR_FLAGS)
        else:
            fd = self._child_dirfd(directory)
            if fd >= 0:
                pass
            elif self._kernel_resolve:
                # a link (/sys/bus/usb/devices/1-2): resolve it once, keeping the directory
                # under both names for the reads and the resolve() that follow
                found = self._kernel_resolve_norm(directory)
                found_fd = self._dirfds.get(found) if found is not None else None
                if found_fd is not None and found == directory:
                    # no link by now (a device re-registered since the look above): the kernel's
                    # descriptor is already kept under this name; opening another would overwrite
                    # it in the cache and leak it
                    return found_fd
                if found_fd is not None:
                    fd = os.dup(found_fd)
                else:
                    fd = self._confined_open(directory, _DIR_FLAGS)
            else:
                # every link on the way already followed inside the root: nothing left to follow
                fd = os.open(self._under_root(self._resolve_norm(directory, [0])), _DIR_FLAGS | os.O_NOFOLLOW)
        self._keep_dirfd(directory, fd)
        return fd

    def _walk_first(self, directory: str) -> bool:
        """Whether :meth:`_canonical` should open ``directory`` before the kernel's resolver: always
        without ``openat2``; with it, unless the parent is no open real directory and is itself
        most likely a link (its own parent's children are): ``cpuN/topology`` below the link
        ``/sys/bus/cpu/devices/cpuN`` is one confined ``openat2`` for the whole path, where the
        walk would read the link and open ``cpuN`` and ``topology`` one after the other."""
        if not self._kernel_resolve:
            return True
        parent = directory.rpartition("/")[0] or "/"
        if parent in self._canon:
            return True
        alias = self._resolved.get(parent)
        if alias is not None and alias in self._canon:
            return True
        return (parent.rpartition("/")[0] or "/") not in self._link_parents

    def _child_dirfd(self, directory: str) -> int:
        """A directory opened relative to its (cached, or now opened) parent with
        ``O_DIRECTORY | O_NOFOLLOW``: one short lookup, contained because the parent is and the
        child is no link.  -1 when the child is a link (or not a directory): then the confined
        walk from the root decides.  ``OSError`` when it is not there."""
        parent, _, leaf = directory.rpartition("/")
        if leaf in ("", ".", ".."):
            return -1
        parent_fd = self._dirfd(parent or "/")
        try:
            # with O_DIRECTORY a link fails (ENOTDIR) instead of O_PATH opening the link itself
            return os.open(leaf, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=parent_fd)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENODEV):
                raise
            return -1

    def _open(self, norm: str, flags: int) -> int:
        """Open a normalised host path inside the root: parent descriptor + ``O_NOFOLLOW`` leaf;
        a leaf that is a link is resolved inside the root first.  Raises ``OSError``."""
        if norm == "/":
            return os.open(self._prefix or "/", flags)
        parent, _, leaf = norm.rpartition("/")
        if "\x00" in norm:
            raise OSError(errno.ENOENT, "NUL byte in path", norm)
        if not self._owns_descriptors():
            return os.open(self._real(norm), flags)
        dirfd = self._dirfd(parent or "/")
        if not self._prefix:
            return os.open(leaf, flags, dir_fd=dirfd)  # the live host: the kernel follows links
        try:
            return os.open(leaf, flags | os.O_NOFOLLOW, dir_fd=dirfd)
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise
        if self._kernel_resolve:
            return self._confined_open(norm, flags)
        return os.open(self._under_root(self._resolve_norm(norm, [0])), flags | os.O_NOFOLLOW)

    def _confined_open(self, norm: str, flags: int) -> int:
        """``openat2`` inside the root; where it still says EAGAIN after its retries (renames
        elsewhere on the system keep racing a ``..`` step), the Python walk opens the path
        instead, as on a kernel without ``openat2``: a race is never reported as a read error,
        and ``is_dir``/``exists`` never take it for an absent file."""
        try:
            return _openat2(self._root_descriptor(), norm[1:], flags)
        except OSError as exc:
            if exc.errno != errno.EAGAIN:
                raise
        return os.open(self._under_root(self._resolve_norm(norm, [0])), flags | os.O_NOFOLLOW)

    def _lstat(self, norm: str) -> os.stat_result:
        """``lstat`` of a normalised host path (parents resolved inside the root); OSError."""
        if norm == "/":
            return os.lstat(self._prefix or "/")
        if "\x00" in norm:
            raise OSError(errno.ENOENT, "NUL byte in path", norm)
        parent, _, leaf = norm.rpartition("/")
        if not self._owns_descriptors():
            return os.lstat(self._real(parent or "/").rstrip("/") + "/" + leaf)
        return os.stat(leaf, dir_fd=self._dirfd(parent or "/"), follow_symlinks=False)

    def _stat(self, norm: str) -> os.stat_result:
        """``stat`` of a normalised host path, links followed inside the root; OSError."""
        status = self._lstat(norm)
        if not stat.S_ISLNK(status.st_mode):
            return status
        if not self._prefix:
            return os.stat(norm)
        if self._kernel_resolve:
            fd = self._confined_open(norm, _O_PATH | os.O_CLOEXEC)
            try:
                return os.fstat(fd)
            finally:
                os.close(fd)
        # the walk follows every link inside the root; what is left can only be a dangling one
        return os.stat(self._under_root(self._resolve_norm(norm, [0])), follow_symlinks=False)

    # -- reads --------------------------------------------------------------------------
    def _record(self, host_path: str) -> None:
        if self._recorder is not None:
            self._recorder(self._normalise(host_path))

    def read_bytes(self, host_path: str, max_bytes: int = MAX_ATTR_BYTES) -> bytes:
        """Raw content (at most ``max_bytes``); :class:`HostFileError` on any failure.

        Only regular files are read (sysfs and procfs attributes are regular files): a FIFO
        planted in the host tree would block a plain open, and discovery, forever, so files
        are opened non-blocking and anything but a regular file is refused.

        One ``read`` per file where the file states its size (sysfs attributes, whose one
        ``show()`` fills the first read; device-tree properties; files on disk): a short read
        is its end.  Files that report size 0 (procfs) hand out a page per read and are read
        until the kernel says end of file.
        """
        if self._recorder is not None:
            self._record(host_path)
        norm = self._normalise(host_path)
        try:
            # raw descriptors, not io objects: this is the hottest call of a discovery pass;
            # the common case (parent directory open, leaf no link) inline, the rest in _open
            parent, _, leaf = norm.rpartition("/")
            dirfd = None
            if self._owner == _get_ident() and self._prefix:
                dirfd = self._dirfds.get(parent)
                if dirfd is None and parent in self._resolved:  # a link this pass followed: its directory
                    dirfd = self._dirfds.get(self._resolved[parent])
            if dirfd is None or "\x00" in leaf or not leaf:
                fd = self._open(norm, _READ_FLAGS)
            else:
                try:
                    fd = os.open(leaf, _READ_FLAGS | os.O_NOFOLLOW, dir_fd=dirfd)
                except OSError as exc:
                    if exc.errno != errno.ELOOP:
                        raise
                    fd = self._open(norm, _READ_FLAGS)
            try:
                return _read_open(fd, host_path, max_bytes)
            finally:
                os.close(fd)
        except HostFileError:
            raise
        except OSError as exc:
            raise _oserror(host_path, exc) from exc

    def read_text(self, host_path: str, max_bytes: int = MAX_ATTR_BYTES) -> str:
        """UTF-8 content; binary junk (NUL bytes, invalid UTF-8) is a :class:`HostFileError`."""
        return _attr_text(host_path, self.read_bytes(host_path, max_bytes))

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

    def read_attrs(self, directory: str, names: Iterable[str]) -> tuple[dict[str, str | None], dict[str, HostFileError]]:
        """Several attributes of one directory, as :meth:`read_attr` reads each: ``(values,
        failures)`` — name -> stripped text or ``None`` when absent, and name -> the
        :class:`HostFileError` of each file that could not be read (one bad file never hides
        the others).

        Why: a device's ten attributes are most of a discovery pass, and each :meth:`read_attr`
        pays its path handling again.  Here the directory's descriptor is looked up once and
        each leaf is opened relative to it with ``O_NOFOLLOW`` and the same regular-file check;
        a leaf that is a link, an odd name, another thread, a recorder or a subclass that
        overrides the read methods takes :meth:`read_attr` per file, so every guarantee holds."""
        values: dict[str, str | None] = {}
        failures: dict[str, HostFileError] = {}
        norm = self._normalise(directory)
        dirfd = None
        if (self._recorder is None and "\x00" not in norm and type(self)._plain_reads
                and self._owns_descriptors()):
            try:
                dirfd = self._dirfd(norm)
            except (OSError, HostFileError):
                dirfd = None  # read_attr per file says what is wrong, file by file
        self._read_leaves(dirfd, "" if norm == "/" else norm, names, values, failures)
        return values, failures

    def _read_leaves(self, dirfd: int | None, base: str, names: Iterable[str],
                     values: dict[str, str | None], failures: dict[str, HostFileError]) -> None:
        """:meth:`read_attrs`' loop: each name opened relative to ``dirfd`` (the open directory
        ``base``) with ``O_NOFOLLOW | O_NONBLOCK``, refused after ``fstat`` unless a regular file,
        or read through :meth:`read_attr` where that cannot be done safely (``dirfd`` None, an
        odd name, a leaf that is a link).  One turn per file: the common case (a sized regular
        file of plain text) runs on local names only.  (Files a listing already showed to be
        regular are read without the ``fstat`` by :meth:`read_directories`.)"""
        if dirfd is None:
            for name in names:
                self._read_one(base, name, values, failures)
            return
        flags = _READ_FLAGS | os.O_NOFOLLOW if self._prefix else _READ_FLAGS
        open_, fstat, read, close = os.open, os.fstat, os.read, os.close  # the loop's calls, bound once
        safe, limit = _PLAIN_NAMES, MAX_ATTR_BYTES
        for name in names:
            if name not in safe and not _plain_name(name):
                self._read_one(base, name, values, failures)
                continue
            try:
                fd = open_(name, flags, dir_fd=dirfd)
            except OSError as exc:
                if exc.errno == errno.ELOOP:  # a link: resolved inside the root by the one-file path
                    self._read_one(base, name, values, failures)
                elif exc.errno in _GONE_ERRNOS:
                    values[name] = None
                else:
                    failures[name] = _oserror(f"{base}/{name}", exc)
                continue
            try:
                # _read_open inline for the common case (a regular file that states its size, one
                # read); anything else takes it as it is, so every refusal reads the same
                status = fstat(fd)
                if status.st_mode & 0o170000 == 0o100000 and status.st_size:  # S_IFREG
                    data = read(fd, limit)
                    if len(data) >= limit:  # MAX_ATTR_BYTES or more: read as read_bytes does
                        os.lseek(fd, 0, os.SEEK_SET)
                        data = _read_open(fd, f"{base}/{name}", limit)
                else:
                    data = _read_open(fd, f"{base}/{name}", limit)
                # _attr_text inline for plain UTF-8 without NUL (the read loops' shared idiom);
                # anything else takes it, so it says which (binary content or not UTF-8)
                try:
                    text = data.decode()
                except UnicodeDecodeError:
                    text = "\x00"
                values[name] = (text if "\x00" not in text else _attr_text(f"{base}/{name}", data)).strip()
            except OSError as exc:  # a HostFileError too: a refusal, junk
                _note_failed_read(values, failures, name, f"{base}/{name}", exc)
            finally:
                close(fd)

    def _read_one(self, base: str, name: str, values: dict[str, str | None],
                  failures: dict[str, HostFileError]) -> None:
        try:
            values[name] = self.read_attr(f"{base}/{name}")
        except HostFileError as exc:
            failures[name] = exc

    def read_directory(self, host_path: str, files: Iterable[str] = (), *, optional: Iterable[str] = (),
                       links: Iterable[str] = (), through_link: bool = False) -> "DirectoryRead":
        """A device directory in one go: ``host_path`` resolved inside the root (a ``/sys/bus``
        link is followed), the directory listed once, ``files`` read (:meth:`read_attrs`), the
        ``optional`` files and the ``links`` (:meth:`link_names`) only where the listing shows
        them.  Nothing is read when the listing is empty or fails (``names`` empty or ``None``
        with ``listing_error``): the caller tells a vanished device from an unlistable one.

        Why: for the hundreds of PCI functions and USB devices of a big host, the four calls this
        stands for paid their path handling and descriptor lookups four times per device; here
        one descriptor serves the listing, the reads and the links.  It answers exactly as
        :meth:`resolve`, :meth:`listdir`, :meth:`read_attrs` and :meth:`link_names` called in
        that order (which is what it does for a subclass that overrides one of them, a recorder,
        another thread, the live host, or a path whose links need the resolvers).
        ``through_link``: list and read through ``host_path`` as given rather than through the
        resolved directory (the same files; errors and recorders name them by the caller's path).
        :class:`HostFileError` when the path cannot be resolved (a link loop)."""
        norm = self._normalise(host_path)
        if not (self._walks_directories and norm != "/" and "\x00" not in norm):
            return self._read_directory_by_parts(host_path, files, optional, links, through_link)
        parent, _, name = norm.rpartition("/")
        for _, found in self._read_directories(parent, (name,), tuple(files), tuple(optional), tuple(links),
                                               through_link, host_path):
            if isinstance(found, HostFileError):
                raise found
            return found
        raise AssertionError("one answer per name")  # pragma: no cover

    def read_directories(self, directory: str, names: Iterable[str], files: Iterable[str] = (), *,
                         optional: Iterable[str] = (), links: Iterable[str] = (), through_link: bool = False
                         ) -> Iterator[tuple[str, "DirectoryRead | HostFileError"]]:
        """:meth:`read_directory` of ``directory/name`` for each of ``names`` (a bus's devices),
        yielded in order as ``(name, DirectoryRead)``, or ``(name, HostFileError)`` where
        :meth:`read_directory` raises.

        Why: on a big host this is a pass's hottest path (400 PCI functions, 123 USB devices);
        reading the bus in one loop spares each device the entry of a call and keeps the
        listed-regular read (below) on local names.  Lazy: a caller may use the seam between two
        answers (nothing read here is kept across a yield but the seam's own caches)."""
        norm = self._normalise(directory)
        return self._read_directories("" if norm == "/" else norm, names, tuple(files), tuple(optional),
                                      tuple(links), through_link, None)

    def _read_directories(self, base_dir: str, names: Iterable[str], files: Iterable[str],
                          optional: Iterable[str], links: Iterable[str], through_link: bool,
                          host_path: str | None) -> Iterator[tuple[str, "DirectoryRead | HostFileError"]]:
        """The loop of :meth:`read_directories` (``base_dir`` normalised, ``""`` for the root);
        ``host_path``: the path as :meth:`read_directory` was given it (one name), which the
        resolvers' answer names where the one-descriptor path cannot serve.

        Each directory is resolved inside the root (:meth:`_device_link`, else :meth:`_canonical`),
        listed once with ``scandir`` (one ``getdents``: the names and each entry's type), and
        then: a file the listing shows as a regular file is opened ``O_NOFOLLOW | O_NONBLOCK``
        and read without the ``fstat`` that otherwise refuses FIFOs and device nodes (a third of
        a read's cost on a big host); one it shows as a FIFO or device node is refused without
        being opened (one ``lstat`` to tell: an open has effects: it completes a FIFO writer's
        open, arms a watchdog); any other name (not listed as a file, a failed open, ``/proc``,
        whose files state no size and may end off a page) is read by :meth:`_read_leaves`, with
        its ``fstat``.  Without the file size, a read that ends off a page boundary is the file's
        end (regular files end at a short read; sysfs returns an attribute whole and a binary
        attribute a page at a time, ``fs/kernfs/file.c``); a read of whole pages reads on.  An
        entry swapped for a FIFO or device node between the listing and the open would be read:
        on sysfs only the kernel makes entries, and on any other tree only a process able to
        create device nodes on the host could race it.  Where this cannot be done (another
        thread, a recorder or a subclass, an odd name, a path the walk cannot open) the answer is
        :meth:`resolve`, :meth:`listdir`, :meth:`read_attrs` and :meth:`link_names` in turn."""
        fast = self._walks_directories and "\x00" not in base_dir and self._owns_descriptors()
        open_, read, close, scandir = os.open, os.read, os.close, os.scandir
        flags, limit, plain = _READ_FLAGS | os.O_NOFOLLOW, MAX_ATTR_BYTES, _PLAIN_NAMES
        for name in names:
            path = f"{base_dir}/{name}"
            real = None
            if fast and (name in plain or _plain_name(name)):
                try:
                    real = self._device_link(path)
                    if real is None:
                        real = self._canonical(path, [0], link_first=True)
                except OSError:
                    real = None  # missing, dangling, a file: the resolvers say what it is
            if real is not None:
                dirfd = self._dirfds[real]
                try:
                    fd = open_(".", _LIST_FLAGS, dir_fd=dirfd)
                    try:
                        # no ``with``: the iterator closes itself at its end or error, and is_file
                        # (d_type, or an lstat whose error reads False) does not raise
                        regular = {entry.name: entry.is_file(follow_symlinks=False) for entry in scandir(fd)}
                    finally:
                        close(fd)
                except OSError:
                    real = None
            if real is None:
                try:
                    yield name, self._read_directory_by_parts(host_path or path, files, optional, links,
                                                              through_link)
                except HostFileError as exc:
                    yield name, exc
                continue
            listed = regular.keys()  # a set-like view: no copy of the names
            values: dict[str, str | None] = {}
            failures: dict[str, HostFileError] = {}
            found: dict[str, str | None] = {}
            if listed:
                named = path if through_link else real
                base = "" if named == "/" else named
                # filter with the listing's own __contains__: no comprehension frame per directory
                wanted = (*files, *filter(listed.__contains__, optional)) if optional else files
                if real == "/proc" or real.startswith("/proc/"):
                    self._read_leaves(dirfd, base, wanted, values, failures)
                    wanted = ()
                for file in wanted:
                    kind = regular.get(file)
                    if not kind:  # not listed as a regular file
                        if kind is False and _special_file(dirfd, file):
                            failures[file] = HostFileError(f"{base}/{file}", _NOT_REGULAR)
                        else:
                            self._read_leaves(dirfd, base, (file,), values, failures)
                        continue
                    try:
                        fd = open_(file, flags, dir_fd=dirfd)
                    except OSError:  # a link, gone, refused: _read_leaves says which
                        self._read_leaves(dirfd, base, (file,), values, failures)
                        continue
                    try:
                        data = read(fd, limit)
                        if data and not len(data) & 4095:  # whole pages: there may be more
                            data = _read_to_end(fd, data, limit)
                        # _attr_text inline for plain UTF-8 without NUL (the read loops' shared
                        # idiom); anything else takes it, so it says which
                        try:
                            text = data.decode()
                        except UnicodeDecodeError:
                            text = "\x00"
                        values[file] = (text if "\x00" not in text else _attr_text(f"{base}/{file}", data)).strip()
                    except OSError as exc:  # a HostFileError too: junk
                        _note_failed_read(values, failures, file, f"{base}/{file}", exc)
                    finally:
                        close(fd)
                if links:
                    self._read_link_names(dirfd, base, filter(listed.__contains__, links), found)
            yield name, _new_tuple(DirectoryRead, (real, listed, None, values, failures, found))

    def _device_link(self, norm: str) -> str | None:
        """:meth:`_canonical` (``link_first``) for its common case, inline: ``norm`` is a link in
        an open real directory of links (``/sys/bus/pci/devices/X``) whose target is the usual
        ``../../../devices/.../X`` and whose target's parent is open too (a bus, a bridge, a hub
        read before): one ``readlinkat`` and one ``openat`` of the target's last name, the same
        syscalls and the same cache state as the recursion, without its four calls per device.
        ``None`` where :meth:`_canonical` must answer (it then repeats at most the readlink)."""
        canon, dirfds = self._canon, self._dirfds
        if norm in canon:
            dirfds[norm] = dirfds.pop(norm)  # least recently used goes first
            return norm
        parent, _, leaf = norm.rpartition("/")
        if (parent not in canon or parent not in self._link_parents or norm in dirfds
                or norm in self._resolved):
            return None
        dirfds[parent] = dirfds.pop(parent)
        try:
            target = os.readlink(leaf, dir_fd=dirfds[parent])
        except OSError:
            return None
        names = target.lstrip("./")
        ups = len(target) - len(names)
        if (not names or ups % 3 or target[:ups] != "../" * (ups // 3) or names[0] == "." or "/." in names
                or "//" in names or names[-1] == "/" or "\x00" in target):
            return self._follow_link(norm, parent, target, [0])
        real = parent.rsplit("/", ups // 3)[0] + "/" + names  # each "../" one name up; at the root it stays
        real_parent, _, real_leaf = real.rpartition("/")
        real_parent = real_parent or "/"
        if (real_parent not in canon or real_parent in self._link_parents or real in dirfds
                or real in self._resolved):
            found = self._canonical(real, [1])
        else:
            dirfds[real_parent] = dirfds.pop(real_parent)
            try:
                fd = os.open(real_leaf, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=dirfds[real_parent])
            except OSError:
                found = self._canonical(real, [1])  # a link, a file, gone: it says which
            else:
                self._keep_dirfd(real, fd, canonical=True)
                found = real
        if found is not None:
            self._resolved[norm] = found
        return found

    def _read_directory_by_parts(self, host_path: str, files: Iterable[str], optional: Iterable[str],
                                 links: Iterable[str], through_link: bool) -> "DirectoryRead":
        real = self.resolve(host_path)
        named = host_path if through_link else real
        try:
            names: frozenset[str] | None = frozenset(self.listdir(named))
            listing_error = None
        except HostFileError as exc:
            names, listing_error = None, exc
        values: dict[str, str | None] = {}
        failures: dict[str, HostFileError] = {}
        found: dict[str, str | None] = {}
        if names:
            values, failures = self.read_attrs(named, [*files, *(name for name in optional if name in names)])
            found = self.link_names(named, [name for name in links if name in names])
        return DirectoryRead(real, names, listing_error, values, failures, found)

    def link_names(self, directory: str, names: Iterable[str]) -> dict[str, str | None]:
        """:meth:`link_name` of several entries of one directory (``driver``, ``iommu_group``...):
        name -> basename of the link's target, ``None`` when the entry is no link or absent.
        One directory lookup for all; ``readlinkat`` never follows the leaf it reads."""
        norm = self._normalise(directory)
        base = "" if norm == "/" else norm
        dirfd = None
        if self._recorder is None and "\x00" not in norm and type(self)._plain_links and self._owns_descriptors():
            try:
                dirfd = self._dirfd(norm)
            except (OSError, HostFileError):
                dirfd = None
        found: dict[str, str | None] = {}
        self._read_link_names(dirfd, base, names, found)
        return found

    def _read_link_names(self, dirfd: int | None, base: str, names: Iterable[str],
                         found: dict[str, str | None]) -> None:
        """Into ``found``: each name's link target basename, read with ``readlinkat`` relative to
        the open directory ``dirfd`` (``None`` when the entry is no link or absent); an odd name,
        or no descriptor, through :meth:`link_name`.  The one readlink loop of
        :meth:`read_directories`, :meth:`read_children` and :meth:`link_names`."""
        readlink = os.readlink
        for name in names:
            if dirfd is None or (name not in _PLAIN_NAMES and not _plain_name(name)):
                found[name] = self.link_name(f"{base}/{name}")
                continue
            try:
                target = readlink(name, dir_fd=dirfd)
            except OSError:
                found[name] = None
                continue
            found[name] = target.rstrip("/").rpartition("/")[2] if target else None

    def read_children(self, directory: str, children: Iterable[str], files: Iterable[str] = (),
                      links: Iterable[str] = ()) -> dict[str, tuple[dict[str, str | None], dict[str, HostFileError],
                                                                 dict[str, str | None]]]:
        """The same files and links of several subdirectories of ``directory`` (a USB device's
        interfaces): child -> ``(values, failures, links)``, exactly what :meth:`read_attrs` and
        :meth:`link_names` of ``directory/child`` answer.

        Why: a big host's two hundred USB interfaces paid two seam calls each (their path handling,
        a descriptor kept and later evicted); here ``directory`` is looked up once and each child
        is opened relative to it with ``O_DIRECTORY | O_NOFOLLOW`` (contained: the parent is, and
        the child is no link), read and closed.  A child that cannot be opened that way (a link, a
        file, gone, an odd name), another thread, a recorder or a subclass that overrides a seam
        method gets :meth:`read_attrs` and :meth:`link_names` called, so every guarantee holds.
        A ``directory`` the seam holds open under that very name (the device the caller just read,
        named by its real path) is taken from the cache as :meth:`_dirfd` would first do, without
        its normalising and ownership calls: ~1 us a device, 0.1 ms of usb's pass on a big host."""
        files, links = tuple(files), tuple(links)
        fast = self._plain_seam and self._recorder is None
        # (a cache key is a normalised path that was opened: no NUL in it)
        dirfd = self._dirfds.get(directory) if fast and self._owner == _get_ident() else None
        norm = directory if dirfd is not None else self._normalise(directory)
        base = "" if norm == "/" else norm
        if dirfd is None and fast and "\x00" not in norm and self._owns_descriptors():
            try:
                dirfd = self._dirfd(norm)
            except (OSError, HostFileError):
                dirfd = None  # read_attrs per child says what is wrong
        out: dict[str, tuple[dict[str, str | None], dict[str, HostFileError], dict[str, str | None]]] = {}
        for child in children:
            path = f"{base}/{child}"
            fd = -1
            if dirfd is not None and (child in _PLAIN_NAMES or _plain_name(child)):
                try:
                    fd = os.open(child, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=dirfd)
                except OSError:
                    fd = -1
            if fd < 0:
                values, failures = self.read_attrs(path, files)
                out[child] = (values, failures, self.link_names(path, links))
                continue
            values, failures, found = {}, {}, {}
            try:
                self._read_leaves(fd, path, files, values, failures)
                self._read_link_names(fd, path, links, found)
            finally:
                os.close(fd)
            out[child] = (values, failures, found)
        return out

    def read_linked_children(self, directory: str, children: Iterable[str], within: str,
                             files: Iterable[str]) -> dict[str, tuple[dict[str, str | None], dict[str, HostFileError]]]:
        """:meth:`read_attrs` of ``directory/child/within`` for each child: child -> ``(values,
        failures)``, exactly what that call answers.  For children that are links into the
        tree (``/sys/bus/cpu/devices/cpuN`` -> ``../../../devices/system/cpu/cpuN``, read as
        ``.../cpuN/topology``).

        Why: :meth:`read_attrs` of each such path resolves it with one confined ``openat2``
        anyway, but goes there through the descriptor cache's lookups and keeps a descriptor
        it evicts again a few CPUs later; on a host of 256 CPUs that bookkeeping was most of the
        cpu source's cost above its I/O.  Here each path is opened with ``openat2``
        (``RESOLVE_IN_ROOT``: every link followed inside the root by the kernel, ``openat2``
        called directly), its files are read by :meth:`read_attrs`' own loop
        (:meth:`_read_leaves`: ``O_NOFOLLOW | O_NONBLOCK``, refused after ``fstat`` unless a
        regular file) and the descriptor is closed.  A child the kernel finds absent inside the root
        (``ENOENT``, ``ENOTDIR``: an offline CPU has no ``topology/``) has every file absent,
        which is what :meth:`read_attrs` finds.  Without ``openat2``, for an odd name, another
        thread, a recorder, a subclass that overrides a seam method, or a path the kernel
        refuses otherwise (a loop, a permission), :meth:`read_attrs` answers."""
        norm = self._normalise(directory)
        base = "" if norm == "/" else norm
        files = tuple(files)
        out: dict[str, tuple[dict[str, str | None], dict[str, HostFileError]]] = {}
        if not (self._kernel_resolve and self._plain_seam and self._recorder is None and "\x00" not in norm
                and _plain_name(within) and all([_plain_name(name) for name in files]) and self._owns_descriptors()):
            for child in children:
                out[child] = self.read_attrs(f"{base}/{child}/{within}", files)
            return out
        root = self._root_descriptor()
        syscall, number, (_, how, how_size) = _SYSCALL, _NR_OPENAT2, _openat2_how(_DIR_FLAGS)
        plain, close = _PLAIN_NAMES, os.close
        for child in children:
            path = f"{base}/{child}/{within}"
            fd = -1
            if child in plain or _plain_name(child):
                fd = syscall(number, root, path[1:].encode("utf-8", "surrogateescape"), how, how_size)
                if fd < 0:
                    import ctypes

                    code = ctypes.get_errno()
                    if code == errno.EAGAIN:  # a rename raced the lookup: _openat2 retries it
                        try:
                            fd = _openat2(root, path[1:], _DIR_FLAGS)
                        except OSError as exc:
                            code = exc.errno
                    if fd < 0 and code in (errno.ENOENT, errno.ENOTDIR):
                        # not there inside the root (the kernel resolved every link in it, as the
                        # seam does): every file absent, what read_attrs finds file by file at
                        # ~10 us a CPU (an offline CPU has no topology/: half of a nosmt host)
                        out[child] = (dict.fromkeys(files), {})
                        continue
            if fd < 0:  # refused, a loop, an odd name: read_attrs says what, file by file
                out[child] = self.read_attrs(path, files)
                continue
            values: dict[str, str | None] = {}
            failures: dict[str, HostFileError] = {}
            try:
                self._read_leaves(fd, path, files, values, failures)
            finally:
                close(fd)
            out[child] = (values, failures)
        return out

    def _listing_fd(self, host_path: str) -> int:
        norm = self._normalise(host_path)
        if "\x00" in norm:
            raise OSError(errno.ENOENT, "NUL byte in path", norm)
        if not self._owns_descriptors():
            return os.open(self._real(norm), _LIST_FLAGS)
        return os.open(".", _LIST_FLAGS, dir_fd=self._dirfd(norm))

    def listdir(self, host_path: str) -> list[str]:
        """Sorted entry names; ``[]`` when the directory does not exist.

        Other errors (EACCES, not a directory) raise :class:`HostFileError`.
        """
        return self._list(host_path, lambda fd: sorted(os.listdir(fd)), [])

    def entries(self, host_path: str) -> dict[str, bool]:
        """Entry name -> whether it is a symlink, from one listing (``d_type``, no stat per entry);
        ``{}`` when the directory does not exist.  Lets a source decide which optional files to
        read from what is there instead of paying a failed open for each absent one."""
        def scan(fd: int) -> dict[str, bool]:
            with os.scandir(fd) as found:
                return {entry.name: entry.is_symlink() for entry in found}

        return self._list(host_path, scan, {})

    def _list(self, host_path: str, read: Callable[[int], T], absent: T) -> T:
        """``read`` the open directory ``host_path``; ``absent`` when it does not exist, any
        other failure a :class:`HostFileError` (the one error policy of listdir and entries)."""
        self._record(host_path)
        try:
            fd = self._listing_fd(host_path)
            try:
                return read(fd)
            finally:
                os.close(fd)
        except HostFileError:
            raise
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENODEV):
                return absent
            raise HostFileError(host_path, exc.strerror or type(exc).__name__) from exc

    def glob(self, host_pattern: str) -> list[str]:
        """Host paths matching a pattern whose wildcards are only in the last component."""
        directory, pattern = posixpath.split(self._normalise(host_pattern))
        return [posixpath.join(directory, name) for name in self.listdir(directory) if fnmatch.fnmatchcase(name, pattern)]

    def exists(self, host_path: str) -> bool:
        """True when the path (or a dangling link at it) exists."""
        self._record(host_path)
        try:
            self._lstat(self._normalise(host_path))
            return True
        except OSError:
            return False

    def is_dir(self, host_path: str) -> bool:
        self._record(host_path)  # a kind test decides what discovery does: snapshot must keep it
        try:
            return stat.S_ISDIR(self._stat(self._normalise(host_path)).st_mode)
        except OSError:
            return False

    def is_file(self, host_path: str) -> bool:
        self._record(host_path)
        try:
            return stat.S_ISREG(self._stat(self._normalise(host_path)).st_mode)
        except OSError:
            return False

    def is_link(self, host_path: str) -> bool:
        """Whether the leaf itself is a symlink (its parent directories are resolved)."""
        norm = self._normalise(host_path)
        self._record(norm)
        try:
            return stat.S_ISLNK(self._lstat(norm).st_mode)
        except OSError:
            return False

    def readlink(self, host_path: str) -> str | None:
        """The raw target of a symlink, or ``None`` when ``host_path`` is not a link."""
        self._record(host_path)
        norm = self._normalise(host_path)
        if norm == "/" or "\x00" in norm:
            return None
        parent, _, leaf = norm.rpartition("/")
        try:
            if not self._owns_descriptors():
                return os.readlink(self._real(parent or "/").rstrip("/") + "/" + leaf)
            return os.readlink(leaf, dir_fd=self._dirfd(parent or "/"))
        except OSError:
            return None

    def link_name(self, host_path: str) -> str | None:
        """Basename of a symlink's target: how sysfs names a ``driver`` or ``iommu_group``."""
        target = self.readlink(host_path)
        return posixpath.basename(target.rstrip("/")) if target else None

    def __repr__(self) -> str:
        return f"HostFS({str(self.root)!r})"
