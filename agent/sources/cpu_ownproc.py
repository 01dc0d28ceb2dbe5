"""Kernel-wide facts NFD reads from its *own* ``/proc``: the ELF hwcaps and ``/proc/sysinfo``.

NFD calls ``getauxval(AT_HWCAP/AT_HWCAP2)`` on ppc64le (its cpuinfo has no feature line) and
reads ``/proc/sysinfo`` unprefixed on s390x.  Both are the same for every process on a
kernel, so a container reads the host's values in its own ``/proc``; the DaemonSet does not
mount them under the host root (``/proc/sysinfo`` exists only on s390x, and a hostPath file
that is missing keeps the pod from starting).

The order: the file under the host root first (a recorded tree, or a bare host), then the
agent's own ``/proc``, but only when the host root's ``/proc/cpuinfo`` is itself a live procfs
file (size 0), which proves the host root is the kernel the agent runs on.  A recording is
never mixed with the machine that replays it.
"""

from __future__ import annotations

import struct

from agent.hostfs import HostFileError, HostFS

SYSINFO = "/proc/sysinfo"
AUXV = "/proc/self/auxv"
OWN_PROC_FILES = (SYSINFO, AUXV)
"""Read from the agent's own /proc in a pod; never mounted from the host (tests/test_manifests.py)."""

AT_NULL, AT_PAGESZ, AT_HWCAP, AT_HWCAP2 = 0, 6, 16, 26
_MAX_AT_TYPE = 64  # every AT_* the kernel defines is below this (include/uapi/linux/auxvec.h)
_LAYOUTS = (("<", 8), (">", 8), ("<", 4), (">", 4))  # ppc64le first; s390x/ppc64 big-endian


class AuxvError(ValueError):
    """Bytes that are not an auxiliary vector in any native layout."""


class AuxvCut(AuxvError):
    """An auxiliary vector read but not whole: empty, or entries of known types with no
    ``AT_NULL`` after them (the kernel always ends the vector with it, ``create_elf_tables``
    in fs/binfmt_elf.c, and ``/proc/<pid>/auxv`` shows it up to that entry)."""


def kernel_file(host: HostFS, path: str, max_bytes: int) -> tuple[bytes | None, str]:
    """(content, where it was read) of a kernel-wide ``/proc`` file; ``(None, path)`` if absent.

    Raises ``HostFileError`` when the file is there but unreadable.
    """
    if host.exists(path):
        return host.read_bytes(path, max_bytes), path
    if not host.is_live and host_root_is_this_kernel(host):
        try:
            with open(path, "rb") as own:
                return own.read(max_bytes), f"{path} (own /proc)"
        except FileNotFoundError:
            return None, path
        except OSError as exc:
            raise HostFileError(path, f"own /proc: {exc.strerror or exc}") from exc
    return None, path


def host_root_is_this_kernel(host: HostFS) -> bool:
    """Whether the host root's ``/proc`` is the procfs of the kernel this process runs on."""
    try:
        status = host.stat("/proc/cpuinfo")
    except HostFileError:
        return False
    return status is not None and status.st_size == 0  # procfs files report 0


def parse_auxv(data: bytes) -> dict[int, int]:
    """``AT_* type -> value`` of an auxiliary vector (``/proc/<pid>/auxv``).

    The file is in the kernel's native word size and byte order, which a recording does not
    state: the layout is the one that ends in ``AT_NULL``, has only known ``AT_*`` types and
    a power-of-two ``AT_PAGESZ``.  Raises :class:`AuxvError` when no layout fits.
    """
    cut = not data
    for order, word in _LAYOUTS:
        entries = _entries(data, order, word)
        if isinstance(entries, dict):
            return entries
        cut = cut or entries
    if cut:
        raise AuxvCut(f"incomplete: no AT_NULL after {len(data)} bytes")
    raise AuxvError(f"not an auxiliary vector ({len(data)} bytes)")


def _entries(data: bytes, order: str, word: int) -> dict[int, int] | bool:
    """The vector in this layout; ``True``: known types up to the end and no ``AT_NULL`` (a
    cut vector); ``False``: not this layout."""
    pair = 2 * word
    fmt = f"{order}{'QQ' if word == 8 else 'II'}"
    entries: dict[int, int] = {}
    for offset in range(0, len(data) - pair + 1, pair):
        kind, value = struct.unpack_from(fmt, data, offset)
        if kind == AT_NULL:
            page = entries.get(AT_PAGESZ, 0)
            return entries if page > 0 and page & (page - 1) == 0 else False
        if kind >= _MAX_AT_TYPE:
            return False
        entries[kind] = value
    return bool(entries)
