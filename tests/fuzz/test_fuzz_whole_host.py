"""Fuzz ``discover`` over whole hosts: every path any source reads can be missing, a file of
junk, a directory, a FIFO, a dangling link, a link loop or a link to another such path.

This is where "a directory where a file belongs" (and the reverse) meets every source at
once; the merged result must still only hold valid, NFD-shaped labels, deterministically.
"""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from agent.discovery import discover
from agent.features import NFD_PREFIX
from agent.hostfs import HostFS
from agent.k8s_validation import label_value_errors, qualified_name_errors
from agent.sources import SOURCE_NAMES
from tests.fuzz.hosttree import JUNK_BYTES, fuzz, host_tree, text_bytes

PATHS = [
    "/proc/cpuinfo", "/proc/meminfo", "/proc/swaps", "/proc/modules", "/proc/config.gz", "/proc/sys/kernel/osrelease",
    "/proc/device-tree", "/etc/os-release", "/usr/lib/os-release", "/etc/kubernetes/node-feature-discovery/features.d",
    "/etc/kubernetes/node-feature-discovery/features.d/f", "/sys/bus/pci/devices", "/sys/bus/pci/devices/0000:00:02.0",
    "/sys/bus/usb/devices", "/sys/bus/usb/devices/1-1", "/sys/bus/usb/devices/1-1/idProduct", "/sys/class/net",
    "/sys/class/net/eth0", "/sys/class/net/eth0/device", "/sys/block", "/sys/block/sda", "/sys/block/sda/queue",
    "/sys/bus/node/devices", "/sys/bus/nd/devices", "/sys/kernel/mm/hugepages", "/sys/kernel/mm/hugepages/hugepages-2048kB",
    "/sys/firmware/devicetree/base", "/sys/firmware/devicetree/base/compatible", "/sys/firmware/devicetree/base/model",
    "/sys/bus/cpu/devices", "/sys/bus/cpu/devices/cpu0", "/sys/devices/system/cpu/cpufreq", "/sys/devices/system/node",
    "/sys/devices/system/cpu/intel_pstate", "/sys/devices/virtual/dmi/id", "/sys/devices/virtual/dmi/id/sys_vendor",
    "/sys/fs/selinux/enforce", "/sys/devices/virtual/misc/kvm", "/sys", "/proc", "/etc", "/.node-feature-agent/cpu-live.json",
]
CONTENT = st.one_of(JUNK_BYTES, text_bytes(30), st.binary(max_size=30),
                    st.sampled_from([b"gpu=true\n", b"fsl,imx8mq\0", b"ID=ubuntu\nVERSION_ID=22.04\n", b"0x10de\n", b"1\n"]))


@st.composite
def chaos_node(draw, path: str) -> tuple:
    kind = draw(st.sampled_from(["file", "file", "dir", "fifo", "dangling", "loop", "cross"]))
    if kind == "file":
        return ("file", draw(CONTENT))
    if kind in ("dir", "fifo"):
        return (kind,)
    if kind == "dangling":
        return ("link", "/nowhere/at/all")
    if kind == "loop":
        return ("link", path.rsplit("/", 1)[-1])
    return ("link", draw(st.sampled_from(PATHS)))      # absolute: re-rooted inside the host tree


@st.composite
def chaos_host(draw) -> dict:
    paths = draw(st.lists(st.sampled_from(PATHS), min_size=1, max_size=12, unique=True))
    return {path: draw(chaos_node(path)) for path in paths}


def run(root) -> dict:
    return discover(HostFS(root)).to_json()


@fuzz(400)
@given(spec=chaos_host())
def test_discover_survives_any_host(spec):
    with host_tree(spec) as root:
        first = run(root)
        assert run(root) == first, "same host, different discovery"
    json.dumps(first)
    failed = [e for e in first["errors"] if e["message"].startswith("source failed")]
    assert not failed, failed
    assert {e["source"] for e in first["errors"]} <= set(SOURCE_NAMES)
    for key, value in first["labels"].items():
        assert not qualified_name_errors(key) and not label_value_errors(value), (key, value)
        assert key.startswith(("beta.devicetree.org/", NFD_PREFIX)) or "/" in key, key
