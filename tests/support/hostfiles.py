"""Files and links of a host tree built by hand in a test, under a root that stands for ``/``.

Paths are host-absolute (``/sys/bus/pci/devices/...``) as the sources read them through
``agent.hostfs.HostFS(root)``; parents are made as needed. (Generated trees for the fuzzers are
``tests/fuzz/hosttree.py``; recorded ones live under ``fixtures/``.)
"""

from __future__ import annotations

import os
import posixpath
from pathlib import Path


def put(root: Path, host_path: str, content: str | bytes) -> Path:
    """Write ``content`` (text as UTF-8) to ``host_path`` under ``root``; returns the real path."""
    path = root / host_path.lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return path


def link(root: Path, host_path: str, target: str) -> None:
    """A symlink at ``host_path`` to ``target``. A host-absolute target is written relative to the
    link's directory, as sysfs makes its links (so it resolves inside ``root``); a relative one
    is written as given."""
    path = root / host_path.lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    if target.startswith("/"):
        target = posixpath.relpath(target, posixpath.dirname(host_path))
    os.symlink(target, path)
