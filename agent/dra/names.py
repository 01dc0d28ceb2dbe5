"""The names DRA gives the catalogue's devices: one contract for the slice writer and the
kubelet plugin, so a device published under a name is the device prepared under it.

- the driver is ``node-feature-agent.io``; the pool of a node is the node's name;
- a device's name is a DNS label (``ResourceSlice.spec.devices[].name``: "It must be a DNS
  label", k8s.io/api resource/v1 types.go), built from the resource's last path segment and
  the device plugin's stable ID (``agent.deviceplugin.resolve.device_id``), so it is stable
  across restarts exactly as the device plugin's IDs are; a name that would exceed 63
  characters keeps a readable head and ends in a digest of the whole;
- a device shared by N pods at once and published as N devices has replicas 0..N-1; replica
  0 keeps the plain name and replica k > 0 ends in ``-r<k>`` (a port chain or address never
  holds an ``r``), so a count of 1 names devices as before.
"""

from __future__ import annotations

import hashlib
import re

DRIVER = "node-feature-agent.io"
MAX_NAME = 63  # a DNS label (RFC 1123), apimachinery validation.DNS1123LabelMaxLength

_NOT_LABEL = re.compile(r"[^a-z0-9-]+")


def device_name(resource: str, device_id: str, replica: int = 0) -> str:
    """``node-feature-agent.io/edgetpu`` + ``pci-0000:01:00.0`` -> ``edgetpu-pci-0000-01-00-0``.

    Folding to a label maps ``:`` ``.`` ``_`` and case to ``-``/lower case; the stable IDs of
    one host differ in more than that (addresses, port chains), so folding keeps them apart."""
    if replica < 0:
        raise ValueError(f"replica must be >= 0, not {replica}")
    kind = resource.rsplit("/", 1)[-1]
    text = f"{kind}-{device_id}" + (f"-r{replica}" if replica else "")
    name = re.sub(r"-{2,}", "-", _NOT_LABEL.sub("-", text.lower())).strip("-") or "device"
    if len(name) > MAX_NAME:
        digest = hashlib.sha256(text.encode()).hexdigest()[:10]
        name = name[:MAX_NAME - 11].rstrip("-") + "-" + digest
    return name
