"""CDI specs for prepared claims: one JSON file per claim in the CDI directory.

The container runtime reads the directory at any time, so a spec is written to a temporary
file in the same directory and renamed into place (never seen half-written), and removed at
unprepare. Spec facts (cncf-tags/container-device-interface ``SPEC.md``, ``schema/schema.json``):

- ``kind`` is ``<vendor>/<class>``: the vendor a DNS subdomain, the class at most 63
  characters of ``[A-Za-z0-9_.-]`` starting and ending alphanumeric; ours is
  ``node-feature-agent.io/device``;
- a device's fully qualified ID is ``<kind>=<name>``; the name starts and ends alphanumeric
  with ``[A-Za-z0-9_.:-]`` between. Ours is ``<claim UID>-<device name>``: one claim's spec
  never names a device another claim's spec names (the runtime refuses a name two files of one
  kind define), and the device name is a DNS label, so the ID is valid;
- ``cdiVersion`` 0.5.0: ``containerEdits`` with ``env``, ``deviceNodes`` (``path``,
  ``hostPath``, ``permissions``) and ``mounts`` are all older than 0.5.0, and Debian 12's
  podman 4.3 (the runtime the tests use) reads 0.5.0 specs.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from agent.deviceplugin.model import DeviceNode, HostMount
from agent.dra.names import DRIVER

CDI_VERSION = "0.5.0"
KIND = f"{DRIVER}/device"
SPEC_PREFIX = f"{DRIVER}-claim-"


@dataclass(frozen=True)
class CdiDevice:
    """One device's edits: its nodes, and the env and mounts its resource declares."""

    name: str
    nodes: tuple[DeviceNode, ...]
    env: Mapping[str, str]
    mounts: tuple[HostMount, ...]


def cdi_name(claim_uid: str, device: str) -> str:
    return f"{claim_uid}-{device}"


def qualified(name: str) -> str:
    return f"{KIND}={name}"


def spec_path(cdi_dir: str, claim_uid: str) -> str:
    return os.path.join(cdi_dir, f"{SPEC_PREFIX}{claim_uid}.json")


def spec(devices: Iterable[CdiDevice]) -> dict[str, Any]:
    out = []
    for device in devices:
        edits: dict[str, Any] = {}
        if device.env:
            edits["env"] = [f"{k}={v}" for k, v in sorted(device.env.items())]
        edits["deviceNodes"] = [{"path": n.container_path, "hostPath": n.host_path, "permissions": n.permissions}
                                for n in device.nodes]
        if device.mounts:
            edits["mounts"] = [{"hostPath": m.host_path, "containerPath": m.container_path,
                                "options": ["ro" if m.read_only else "rw", "nosuid", "nodev", "bind"]}
                               for m in device.mounts]
        out.append({"name": device.name, "containerEdits": edits})
    return {"cdiVersion": CDI_VERSION, "kind": KIND, "devices": out}


def write_atomic(path: str, data: bytes, mode: int = 0o644) -> None:
    """``data`` at ``path``, all or nothing: a temporary file in the same directory, flushed to
    disk, renamed over ``path``. Raises ``OSError`` (read-only, full, missing directory) with
    nothing left behind."""
    directory = os.path.dirname(path) or "."
    fd, temp = tempfile.mkstemp(prefix=".nfa-", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temp, mode)
        os.rename(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise


def remove_spec(cdi_dir: str, claim_uid: str) -> None:
    """Gone afterwards, whether or not it was there; other ``OSError``s are raised."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(spec_path(cdi_dir, claim_uid))


def claim_specs(cdi_dir: str) -> set[str]:
    """The claim UIDs of every spec of ours in ``cdi_dir`` (empty if it cannot be listed)."""
    try:
        names = os.listdir(cdi_dir)
    except OSError:
        return set()
    return {n[len(SPEC_PREFIX):-len(".json")] for n in names if n.startswith(SPEC_PREFIX) and n.endswith(".json")}
