"""memory source: NUMA, swap, NVDIMM, hugepages, meminfo."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.discovery import DiscoveryConfig, run_source
from agent.features import NFD_PREFIX
from agent.hostfs import HostFS
from agent.sources import memory
from tests.support.hostfiles import link, put

P = NFD_PREFIX + "memory-"
SWAPS_HEADER = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n"
MEMINFO = "MemTotal:       527958944 kB\nMemFree:        512345600 kB\nHugePages_Total:    2048\n"


def numa_nodes(root: Path, count: int) -> None:
    for node in range(count):
        put(root, f"/sys/devices/system/node/node{node}/cpulist", f"{node * 8}-{node * 8 + 7}\n")
        link(root, f"/sys/bus/node/devices/node{node}", f"../../../devices/system/node/node{node}")


def run(root: Path):
    return memory.discover(HostFS(root))


def test_two_socket_server(tmp_path):
    numa_nodes(tmp_path, 2)
    put(tmp_path, "/proc/swaps", SWAPS_HEADER)
    for size, count in (("2048kB", 2048), ("1048576kB", 8)):
        put(tmp_path, f"/sys/kernel/mm/hugepages/hugepages-{size}/nr_hugepages", f"{count}\n")
        put(tmp_path, f"/sys/kernel/mm/hugepages/hugepages-{size}/free_hugepages", f"{count}\n")
    put(tmp_path, "/proc/meminfo", MEMINFO)

    result = run(tmp_path)

    assert result.errors == ()
    assert result.labels == {P + "numa": "true"}
    assert dict(result.features["numa"].attributes) == {"is_numa": "true", "node_count": "2"}
    assert dict(result.features["swap"].attributes) == {"enabled": "false"}
    assert dict(result.features["hugepages"].attributes) == {"enabled": "true", "hugepages-2Mi": "2048",
                                                            "hugepages-1Gi": "8"}
    assert dict(result.features["meminfo"].attributes) == {"MemTotal": str(527958944 * 1024)}
    assert "nv" not in result.features


def test_raspberry_pi_single_node_with_swap(tmp_path):
    put(tmp_path, "/proc/swaps", SWAPS_HEADER + "/var/swap                               file\t\t102396\t\t0\t\t-2\n")
    for size in ("64kB", "2048kB", "32768kB", "1048576kB"):
        put(tmp_path, f"/sys/kernel/mm/hugepages/hugepages-{size}/nr_hugepages", "0\n")

    result = run(tmp_path)

    assert result.labels == {P + "swap": "true"}
    assert "numa" not in result.features  # CONFIG_NUMA=n: no /sys/bus/node
    assert dict(result.features["hugepages"].attributes) == {
        "enabled": "false", "hugepages-64Ki": "0", "hugepages-2Mi": "0", "hugepages-32Mi": "0", "hugepages-1Gi": "0"}


def test_one_numa_node_is_not_numa(tmp_path):
    numa_nodes(tmp_path, 1)
    result = run(tmp_path)
    assert dict(result.features["numa"].attributes) == {"is_numa": "false", "node_count": "1"}
    assert not result.labels


def test_nvdimm_namespaces(tmp_path):
    put(tmp_path, "/sys/devices/LNXSYSTM:00/ndbus0/region0/namespace0.0/devtype", "nd_namespace_io\n")
    put(tmp_path, "/sys/devices/LNXSYSTM:00/ndbus0/region0/namespace0.0/mode", "fsdax\n")
    put(tmp_path, "/sys/devices/LNXSYSTM:00/ndbus0/region0/dax0.0/devtype", "nd_dax\n")
    link(tmp_path, "/sys/bus/nd/devices/namespace0.0", "../../../devices/LNXSYSTM:00/ndbus0/region0/namespace0.0")
    link(tmp_path, "/sys/bus/nd/devices/dax0.0", "../../../devices/LNXSYSTM:00/ndbus0/region0/dax0.0")

    result = run(tmp_path)

    assert result.labels == {P + "nv.present": "true", P + "nv.dax": "true"}
    assert [dict(i.attributes) for i in result.features["nv"].instances] == [
        {"name": "dax0.0", "devtype": "nd_dax"},
        {"name": "namespace0.0", "devtype": "nd_namespace_io", "mode": "fsdax"},
    ]


def test_nvdimm_without_dax(tmp_path):
    put(tmp_path, "/sys/devices/ndbus0/region0/devtype", "nd_pmem\n")
    link(tmp_path, "/sys/bus/nd/devices/region0", "../../../devices/ndbus0/region0")
    assert run(tmp_path).labels == {P + "nv.present": "true"}


@pytest.mark.parametrize("size_kb, name", [(64, "64Ki"), (2048, "2Mi"), (1536, "1536Ki"), (16777216, "16Gi")])
def test_quantity_names(size_kb, name):
    assert memory.quantity_name(size_kb) == name


# -- hostile input -------------------------------------------------------------------------------
def test_junk_nr_hugepages(tmp_path):
    put(tmp_path, "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages", "-3\n")
    put(tmp_path, "/sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages", "2\n")
    result = run(tmp_path)
    assert dict(result.features["hugepages"].attributes) == {"enabled": "true", "hugepages-1Gi": "2"}
    assert "not a page count" in result.errors[0].message


def test_odd_hugepage_dir_name(tmp_path):
    put(tmp_path, "/sys/kernel/mm/hugepages/hugepages-lotskB/nr_hugepages", "1\n")
    result = run(tmp_path)
    assert "hugepages" not in result.features or "hugepages-lots" not in str(result.features["hugepages"].attributes)
    assert "not a hugepages-<N>kB pool" in result.errors[0].message


def test_binary_swaps(tmp_path):
    put(tmp_path, "/proc/swaps", b"\x00\x00\x00")
    result = run(tmp_path)
    assert "swap" not in result.features and result.errors[0].path == "/proc/swaps"


@pytest.mark.parametrize(("path", "content", "why"), [
    ("/proc/swaps", "", "empty"),  # swap_show always prints its header line (mm/swapfile.c)
    ("/proc/swaps", SWAPS_HEADER + "/var/swap    file\t\t1023", "cut mid-line (no final newline)"),
    ("/proc/meminfo", "", "empty"),  # MemTotal is always printed first (fs/proc/meminfo.c)
    ("/proc/meminfo", "\n", "empty"),
    ("/proc/meminfo", "MemTotal:       5279", "cut mid-line (no final newline)"),
])
def test_a_file_read_but_not_whole_is_undetermined(tmp_path, path, content, why):
    put(tmp_path, "/proc/swaps", SWAPS_HEADER + "/var/swap    file\t\t102396\t\t0\t\t-2\n")
    put(tmp_path, "/proc/meminfo", MEMINFO)
    put(tmp_path, path, content)
    result = run(tmp_path)
    feature = {"/proc/swaps": "swap", "/proc/meminfo": "meminfo"}[path]
    assert [(e.path, e.message) for e in result.errors] == [(path, f"incomplete: {why}")]
    assert feature not in result.features and feature in result.undetermined
    assert result.undetermined[feature] == ((P + "swap",) if feature == "swap" else ())


def test_swaps_with_only_its_header_is_no_swap(tmp_path):
    put(tmp_path, "/proc/swaps", SWAPS_HEADER)
    result = run(tmp_path)
    assert dict(result.features["swap"].attributes) == {"enabled": "false"} and not result.undetermined


def test_unreadable_nd_devtype(tmp_path):
    (tmp_path / "sys/devices/ndbus0/region0/devtype").mkdir(parents=True)
    link(tmp_path, "/sys/bus/nd/devices/region0", "../../../devices/ndbus0/region0")
    result = run(tmp_path)
    assert [dict(i.attributes) for i in result.features["nv"].instances] == [{"name": "region0"}]
    assert result.errors[0].path == "/sys/bus/nd/devices/region0/devtype"


def test_meminfo_without_memtotal(tmp_path):
    put(tmp_path, "/proc/meminfo", "MemTotal: lots\n")
    result = run(tmp_path)
    assert "meminfo" not in result.features and "MemTotal" in result.errors[0].message


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(swaps=st.text(max_size=200), count=st.text(max_size=12), meminfo=st.text(max_size=100))
def test_any_memory_files_never_crash(tmp_path_factory, swaps, count, meminfo):
    root = tmp_path_factory.mktemp("memory")
    put(root, "/proc/swaps", swaps.encode("utf-8", "surrogatepass"))
    put(root, "/proc/meminfo", meminfo.encode("utf-8", "surrogatepass"))
    put(root, "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages", count.encode("utf-8", "surrogatepass"))
    result = run_source("memory", HostFS(root), DiscoveryConfig())
    assert not [e for e in result.errors if "source failed" in e.message or "dropped" in e.message]
    assert set(result.labels) <= {P + "swap"}
