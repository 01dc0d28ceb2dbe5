"""Regression tests for crashes the fuzzers found, each as the minimal failing host tree.

Before the fixes each of these raised out of the source's ``discover`` (``run_source`` then
reported ``source failed`` and the source's other features were lost) or hung discovery.
"""

from __future__ import annotations

import json
import threading

from agent.discovery import DiscoveryConfig, run_source
from agent.hostfs import HostFS
from agent.sources import cpu, local, memory
from agent.sources.cpu_flags import x86_htt
from agent.sources.cpu_live import LIVE_FACTS_PATH
from tests.fuzz.hosttree import host_tree
from tests.fuzz.properties import check_source

X86 = b"processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 85\nflags\t\t: fpu sse sse2 syscall avx2\n\n"


def messages(result) -> list[str]:
    return [f"{e.path}: {e.message}" for e in result.errors]


def test_cpu_topology_directory_that_is_a_file():
    """``/sys/bus/cpu/devices`` as a file raised HostFileError (ENOTDIR) out of cpu.discover."""
    with host_tree({"/proc/cpuinfo": ("file", X86), "/sys/bus/cpu/devices": ("file", b"0\n")}) as root:
        result = cpu.discover(HostFS(root))
    assert "cpuid" in result.features and "topology" not in result.features
    assert "/sys/bus/cpu/devices: unlistable: Not a directory" in messages(result)


def test_cpu_pstate_and_sgx_globs_over_files():
    """The cpufreq policy and NUMA node globs raised the same way when their directory was a file."""
    spec = {
        "/proc/cpuinfo": ("file", X86.replace(b"avx2", b"avx2 sgx")),
        "/sys/devices/system/cpu/intel_pstate/status": ("file", b"active\n"),
        "/sys/devices/system/cpu/cpufreq": ("file", b""),
        "/sys/devices/system/node": ("file", b""),
    }
    with host_tree(spec) as root:
        result = check_source("cpu", root)
    assert result.features["pstate"].attributes == {"status": "active"}
    assert {"/sys/devices/system/cpu/cpufreq: unlistable: Not a directory",
            "/sys/devices/system/node: unlistable: Not a directory"} <= set(messages(result))


def test_cpu_live_facts_nesting_bomb():
    """A recorded cpu-live.json of 70 000 ``[`` raised RecursionError (not a ValueError)."""
    spec = {"/proc/cpuinfo": ("file", b"processor\t: 0\n"), LIVE_FACTS_PATH: ("file", b"[" * 70000)}
    with host_tree(spec) as root:
        result = cpu.discover(HostFS(root))
    assert any(e.path == LIVE_FACTS_PATH and "nested too deeply" in e.message for e in result.errors)


def test_cpu_misc_capacity_unicode_digit():
    """``tdx ²`` in misc.capacity passed ``str.isdigit`` and crashed ``int()``."""
    spec = {"/proc/cpuinfo": ("file", X86), "/sys/module/kvm_intel/parameters/tdx": ("file", b"Y\n"),
            "/sys/fs/cgroup/misc.capacity": ("file", "tdx \u00b2\n".encode())}
    with host_tree(spec) as root:
        result = check_source("cpu", root)
    assert result.features["security"].attributes == {"tdx.enabled": "true"}
    assert any("capacity not a number" in e.message for e in result.errors)


def test_cpu_htt_unicode_digit_siblings():
    assert x86_htt({"flags": "ht", "siblings": "\u00b2", "cpu cores": "1"}) is False
    assert x86_htt({"flags": "ht", "siblings": "2", "cpu cores": "1"}) is True


def test_memory_hugepages_unicode_digits():
    """``²`` as a page count, a pool size or MemTotal crashed ``int()`` after ``isdigit``."""
    spec = {
        "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages": ("file", "\u00b2\n".encode()),
        "/sys/kernel/mm/hugepages/hugepages-\u00b2kB/nr_hugepages": ("file", b"1\n"),
        "/sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages": ("file", b"2\n"),
        "/proc/meminfo": ("file", "MemTotal:  \u00b2 kB\n".encode()),
    }
    with host_tree(spec) as root:
        result = memory.discover(HostFS(root))
    assert result.features["hugepages"].attributes == {"enabled": "true", "hugepages-1Gi": "2"}
    assert "meminfo" not in result.features
    text = "\n".join(messages(result))
    assert "not a page count" in text and "not a hugepages-<N>kB pool" in text and "MemTotal" in text


def test_fifo_in_host_tree_does_not_hang():
    """A named pipe where os-release belongs blocked ``open()`` forever; now it is refused."""
    outcome: list = []
    with host_tree({"/etc/os-release": ("fifo",), "/usr/lib/os-release": ("file", b"ID=debian\n")}) as root:
        worker = threading.Thread(target=lambda: outcome.append(run_source("system", HostFS(root), DiscoveryConfig())),
                                  daemon=True)
        worker.start()
        worker.join(timeout=60)
        if worker.is_alive():  # unblock the stuck open() so the thread and the temp dir can go
            with open(root / "etc/os-release", "wb"):
                pass
            worker.join(timeout=10)
            raise AssertionError("reading a FIFO in the host tree hung discovery")
    [result] = outcome
    assert result.labels == {"feature.node.kubernetes.io/system-os_release.ID": "debian"}
    assert messages(result) == ["/etc/os-release: unreadable: not a regular file (FIFO, socket or device node)"]
    json.dumps([e.to_json() for e in result.errors])


def test_hostfs_double_leading_slash():
    """``posixpath.normpath`` keeps ``//``; resolving ``//x`` recursed until RecursionError
    (reachable from configured paths such as ``--kernel-config-file=//boot/config``)."""
    with host_tree({"/etc/os-release": ("file", b"ID=debian\n"),
                    "/etc/nfd/features.d/f": ("file", b"gpu=true\n")}) as root:
        host = HostFS(root)
        assert host.resolve("//") == "/" and host.resolve("//etc//os-release") == "/etc/os-release"
        assert host.read_bytes("//etc/os-release") == b"ID=debian\n"
        result = check_source("local", root, local.Config(features_dir="//etc/nfd/features.d"))
    assert result.labels == {"feature.node.kubernetes.io/gpu": "true"}
