"""Write a directory the way kubelet's AtomicWriter updates a mounted ConfigMap volume.

Layout: ``..<stamp>/`` holds the files, ``..data -> ..<stamp>`` and one top-level symlink per
first path component (``example.com -> ..data/example.com``). An update writes a new
``..<stamp>`` directory, points ``..data_tmp`` at it, renames ``..data_tmp`` over ``..data``
(atomic), then deletes the old directory.
"""

from __future__ import annotations

import itertools
import os
import shutil
from pathlib import Path

_stamps = itertools.count(1)


def write_configmap(directory: Path, files: dict[str, str]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    stamp = directory / f"..2024_01_01_00_00_{next(_stamps):02d}.{os.getpid()}"
    for rel, text in files.items():
        target = stamp / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    data = directory / "..data"
    old = os.readlink(data) if data.is_symlink() else None
    tmp = directory / "..data_tmp"
    if tmp.is_symlink():
        tmp.unlink()
    os.symlink(stamp.name, tmp)
    os.rename(tmp, data)
    tops = {rel.split("/", 1)[0] for rel in files}
    for top in tops:
        link = directory / top
        if not link.is_symlink():
            os.symlink(f"..data/{top}", link)
    for entry in directory.iterdir():
        if not entry.name.startswith("..") and entry.is_symlink() and entry.name not in tops:
            entry.unlink()
    if old:
        shutil.rmtree(directory / old)
