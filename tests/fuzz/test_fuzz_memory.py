"""Fuzz the memory source: NUMA nodes, /proc/swaps, NVDIMM namespaces, hugepage pools, meminfo."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from agent.sources.memory import meminfo_total_bytes, quantity_name
from tests.fuzz.hosttree import JUNK_BYTES, ODD_DIGITS, fuzz, host_tree, huge, merge, rebase, slot, slots, value_bytes
from tests.fuzz.properties import check_source

SWAPS_HEADER = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority"
SWAPS = st.one_of(
    st.lists(st.sampled_from(["/swap.img file 4194300 0 -2", "/dev/zram0 partition 1 0 100", "", "  "]), max_size=3)
    .map(lambda ls: "\n".join([SWAPS_HEADER] + ls).encode()),
    JUNK_BYTES, st.binary(max_size=40), huge(b"x"),
)
MEMINFO_LINE = st.one_of(
    st.tuples(st.sampled_from(["MemTotal", "MemFree", "HugePages_Total", "memtotal"]),
              st.sampled_from([":", ": ", ":\t"]),
              st.sampled_from(["16318412 kB", "0 kB", "16318412", "1 MB", "99999999999999999999 kB", "-5 kB", "kB", ""]
                              + [d + " kB" for d in ODD_DIGITS])).map("".join),
    st.text(max_size=20),
)
MEMINFO = st.one_of(st.lists(MEMINFO_LINE, max_size=6).map(lambda ls: "\n".join(ls).encode()), JUNK_BYTES, st.binary(max_size=40))
POOLS = ["hugepages-2048kB", "hugepages-1048576kB", "hugepages-64kB", "hugepages-3kB", "hugepages-0kB", "hugepages-kB",
         "hugepages-\u00b2kB", "hugepages-\u0661\u0662kB", "hugepages-99999999999999999999kB", "hugepages-x kB"]
COUNT = value_bytes(["0", "4", "512", "-1", "1.5", "", "007"])
POOL_FILES = slots({"nr_hugepages": COUNT})
ND_FILES = slots({"devtype": value_bytes(["nd_dax", "nd_namespace_io", "nd_pfn"]), "mode": value_bytes(["fsdax", "devdax", "raw"])})


@st.composite
def memory_tree(draw) -> dict:
    spec: dict = {}
    for node in draw(st.lists(st.sampled_from(["node0", "node1", "node2", "x"]), unique=True, max_size=3)):
        spec[f"/sys/bus/node/devices/{node}"] = draw(st.sampled_from([("dir",), ("link", f"../../../devices/system/node/{node}")]))
    for pool in draw(st.lists(st.sampled_from(POOLS), unique=True, max_size=3)):
        base = f"/sys/kernel/mm/hugepages/{pool}"
        spec.update((draw(st.sampled_from(["dir", "file"])) == "file" and {base: ("file", b"1")}) or rebase(draw(POOL_FILES), base))
    for region in draw(st.lists(st.sampled_from(["dax0.0", "namespace0.0", "pfn0.1"]), unique=True, max_size=2)):
        spec.update(rebase(draw(ND_FILES), f"/sys/bus/nd/devices/{region}"))
    spec = merge(spec, draw(slot("/proc/swaps", SWAPS)), draw(slot("/proc/meminfo", MEMINFO)))
    wrong = draw(st.lists(st.sampled_from(["/sys/bus/node/devices", "/sys/bus/nd/devices", "/sys/kernel/mm/hugepages"]),
                          unique=True, max_size=1))
    return merge(spec, dict.fromkeys(wrong, ("file", b"0\n")))


@fuzz(350)
@given(spec=memory_tree())
def test_memory_source_survives_any_tree(spec):
    with host_tree(spec) as root:
        result = check_source("memory", root)
    hugepages = result.features.get("hugepages")
    for key, value in (hugepages.attributes.items() if hugepages else ()):
        assert key == "enabled" or (key.startswith("hugepages-") and value.isascii() and value.isdigit()), (key, value)


@fuzz(200)
@given(text=st.text(max_size=200), size=st.integers(1, 1 << 50))
def test_memory_parsers_total(text, size):
    total = meminfo_total_bytes(text)
    assert total is None or (isinstance(total, int) and total >= 0)
    name = quantity_name(size)
    assert name[0].isdigit() and name.isascii()
