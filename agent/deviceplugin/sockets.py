"""The unix sockets a kubelet plugin serves on, without gRPC: the device plugin's servers and
the DRA kubelet plugin (``agent.dra.plugin``) both bind, recognise and clean up their sockets
with these, and importing this module loads neither grpcio nor any generated stub (the DRA
plugin must not pay for the device plugin's API)."""

from __future__ import annotations

import os
import tempfile
import time
from typing import Protocol

SOCKET_MODE = 0o600
"""Our sockets' mode, whatever the umask: only the owner (root in the DaemonSet) connects.
kubelet, the one client, runs as root; it keeps the directory at 0750 and binds its own
kubelet.sock plainly (kubernetes pkg/kubelet/cm/devicemanager/plugin/v1beta1/server.go:
``os.MkdirAll(s.socketDir, 0750)``, ``net.Listen("unix", ...)``), so nothing else needs in."""


STAGING_PREFIX = ".nfa-"
STALE_STAGING = 60.0
"""A staging directory older than this (seconds) was left by a process killed mid-bind."""


class Listener(Protocol):
    """What ``listen_private`` needs of a server: ``grpc.Server.add_insecure_port``."""

    def add_insecure_port(self, address: str) -> int: ...


def remove_stale_staging(directory: str) -> None:
    """Remove staging directories a killed process left (kubelet's start-up keeps directories:
    pkg/kubelet/cm/devicemanager/manager.go ``CleanupPluginDirectory``)."""
    try:
        names = os.listdir(directory)
    except OSError:
        return
    now = time.time()
    for name in names:
        path = os.path.join(directory, name)
        try:
            if name.startswith(STAGING_PREFIX) and now - os.lstat(path).st_mtime > STALE_STAGING:
                for entry in os.listdir(path):
                    os.unlink(os.path.join(path, entry))
                os.rmdir(path)
        except OSError:
            continue


def listen_private(server: Listener, path: str) -> None:
    """Have ``server`` listen on a unix socket at ``path`` with mode :data:`SOCKET_MODE`.

    The socket is bound in a fresh 0700 directory beside ``path``, set to 0600 there, and
    renamed into place: ``path`` never exists with the umask's mode (under umask 000 a plain
    bind makes it 0777, and gRPC listens as soon as it binds, before any chmod could run).
    The socket keeps working under its new name (a unix socket is found by its inode)."""
    private = tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=os.path.dirname(path) or ".")
    staged = os.path.join(private, "s")
    try:
        if server.add_insecure_port(f"unix://{staged}") == 0:
            raise OSError(f"cannot listen on {path}")
        os.chmod(staged, SOCKET_MODE)
        os.rename(staged, path)
    finally:
        try:
            os.unlink(staged)  # only when the rename did not happen
        except FileNotFoundError:
            pass
        os.rmdir(private)


def socket_identity(path: str) -> tuple[int, int, int] | None:
    """(device, inode, ctime in ns) of a socket file, None when it is gone: a socket recreated at
    the same path (a restarted kubelet, a wiped directory) is another socket, even when the
    filesystem hands it the inode just freed (ext4 does: kubelet removes its socket and listens
    again at once); the creation sets a new ctime."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_ctime_ns)
