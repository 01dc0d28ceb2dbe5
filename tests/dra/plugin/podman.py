"""Debian's podman (4.3) as the CDI consumer of the DRA tests, with Debian's busybox-static as
the image (both installed by .ci/run). podman reads CDI specs from /etc/cdi and /var/run/cdi (podman 4.3
ignores containers.conf ``cdi_spec_dirs``), so a test's plugin writes to the real /var/run/cdi
under claim UIDs no one else uses and unprepares them at the end."""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
import tempfile

IMAGE = "localhost/nfa-busybox:1"
BUSYBOX = "/bin/busybox"  # Debian's busybox-static
RUNTIME_CDI_DIR = "/var/run/cdi"
ULIMITS = ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"]  # this sandbox's limits are lower


def image() -> str:
    """The busybox image, imported once from a rootfs of Debian's static busybox."""
    for tool in ("podman", BUSYBOX):
        if not shutil.which(tool):
            raise AssertionError(f"{tool} is missing: apt-get install podman busybox-static (.ci/run does)")
    if subprocess.run(["podman", "image", "exists", IMAGE], check=False).returncode == 0:
        return IMAGE
    with tempfile.TemporaryDirectory() as scratch:
        rootfs = os.path.join(scratch, "rootfs")
        os.makedirs(f"{rootfs}/bin")
        shutil.copy(BUSYBOX, f"{rootfs}/bin/busybox")
        for applet in ("sh", "ls", "env", "cat", "stat"):
            os.symlink("busybox", f"{rootfs}/bin/{applet}")
        with tarfile.open(f"{scratch}/rootfs.tar", "w") as tar:
            tar.add(rootfs, arcname=".")
        subprocess.run(["podman", "import", "-q", f"{scratch}/rootfs.tar", IMAGE], check=True, capture_output=True)
    return IMAGE


def run(cdi_ids: list[str], script: str) -> str:
    """``script`` in a container given ``cdi_ids``; its output (a failure raises with podman's)."""
    devices = [arg for cdi_id in cdi_ids for arg in ("--device", cdi_id)]
    done = subprocess.run(["podman", "run", "--rm", *ULIMITS, *devices, image(), "sh", "-c", script],
                          capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0:
        raise AssertionError(f"podman run failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout
