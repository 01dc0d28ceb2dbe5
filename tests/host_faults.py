"""Reads of chosen host files fail as the kernel fails them (``EIO``, ``EINVAL``...), for every
seam on the tree: ``agent.hostfs``'s read primitive is wrapped, so each read path of the seam
meets the error at the same point a real one would, after the file was found and opened."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import pytest

import agent.hostfs as hostfs_module
from agent.hostfs import HostFS


def fail_reads(monkeypatch: pytest.MonkeyPatch, root: Path, failing: Mapping[str, int]) -> None:
    """Every read of a host path in ``failing`` (links in it followed inside ``root``) raises
    ``OSError(errno)`` from here on."""
    real_root = os.path.realpath(root)
    plain = HostFS(root)
    errors = {real_root + plain.resolve(path): code for path, code in failing.items()}
    read = hostfs_module._read

    def failing_read(dirfd: int, name: str, limit: int = hostfs_module.MAX_ATTR_BYTES) -> bytes:
        code = errors.get(os.readlink(f"/proc/self/fd/{dirfd}") + "/" + name)
        if code is not None:
            raise OSError(code, os.strerror(code))
        return read(dirfd, name, limit)

    monkeypatch.setattr(hostfs_module, "_read", failing_read)
