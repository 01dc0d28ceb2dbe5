#!/usr/bin/env python3
"""How close any Python pci source could come to the floor: the pci source against a hand-inlined pass.

    python bench/discovery_bound.py [--case dgx-usb-lab] [--runs 60]

Why: ``bench/discovery.py`` says how far discovery is above the I/O floor of its operations
(target <= 1.5x on the big host).  This bench says how much of that is Python that any source
must run and how much is our structure, so a decision about the target rests on a measurement.
Four things are timed alternately in one process (CPU time of this thread, the lower quartile
of ``--runs``), all over the same host root:

1. **floor**: the pci source's own operations replayed as bare syscalls (``bench/discovery.py``'s
   floor, unchanged).
2. **inline**: one loop per source (with a small walker both share) doing the syscalls the
   source issues (read each bus link, open the device directory relative to its open parent,
   list it, read the listed files, read the links, each IOMMU group's ``type``, each USB
   interface's class and driver) and building the same instances and labels, with nothing
   else: no bound on open descriptors, no check of a link's shape, no per-file type, NUL or
   page check, no error handling.  It must find exactly what the pci source finds (instances,
   origins, labels), or this bench says so and exits 1.
3. **inline + checks**: the same, plus the guarantees the seam keeps (at most 128 directories
   open, least recently used closed first; a bus link followed only in its ``../``-only shape;
   a file read without ``fstat`` only where the listing says it is a regular file; text with a
   NUL refused; a read of whole pages continued).
4. **pci source**: ``discover(HostFS(root), sources=["pci"])`` as the agent runs it.

Then the whole pass and its floor (``bench/discovery.py``'s), and, as arithmetic, the whole
ratio if the pci source cost what (2) or (3) costs with every other source as measured.
Prints numbers; never asserts timings.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import discovery as discovery_bench  # noqa: E402  (bench/discovery.py: the floor)
from agent.discovery import DiscoveryConfig, discover  # noqa: E402
from agent.features import Instance  # noqa: E402
from agent.hostfs import MAX_ATTR_BYTES, HostFS  # noqa: E402
from agent.sources import pci, usb  # noqa: E402
from agent.sources._sysfs import AttributeReader  # noqa: E402

_FILE = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOFOLLOW
_PATH = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC
_LIST = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_MAX_OPEN = 128  # agent.hostfs._MAX_DIR_FDS


class _InlineWalk:
    """What both inline passes do with the tree, written once: directories opened below the root
    (kept open; with ``checks`` at most 128, least recently used closed first), a bus device's
    link followed to its real directory and that directory listed, a directory's files read."""

    def __init__(self, root: str, checks: bool):
        self.checks = checks
        self.root_fd = os.open(root, _PATH)
        self.dirs: dict[str, int] = {}

    def directory(self, path: str) -> int:
        fd = self.dirs.get(path)
        if fd is None:
            fd = self.keep(path, os.open(path[1:], _PATH, dir_fd=self.root_fd))
        elif self.checks:
            self.dirs[path] = self.dirs.pop(path)  # most recently used last
        return fd

    def keep(self, path: str, fd: int) -> int:
        if self.checks and len(self.dirs) >= _MAX_OPEN:
            os.close(self.dirs.pop(next(iter(self.dirs))))
        self.dirs[path] = fd
        return fd

    def names(self, path: str) -> list[str]:
        fd = os.open(".", _LIST, dir_fd=self.directory(path))
        try:
            return sorted(os.listdir(fd))
        finally:
            os.close(fd)

    def device(self, bus: str, name: str) -> tuple[str, int, dict[str, bool]]:
        """The bus entry's real directory, its descriptor, and its listing (name -> regular file)."""
        target = os.readlink(name, dir_fd=self.directory(bus))
        rest = target.lstrip("./")
        ups = len(target) - len(rest)
        if self.checks and (not rest or ups % 3 or target[:ups] != "../" * (ups // 3) or rest[0] == "."
                            or "/." in rest or "//" in rest or rest[-1] == "/" or "\x00" in target):
            raise ValueError(f"{name}: link shape the inline pass does not follow: {target}")
        real = bus.rsplit("/", ups // 3)[0] + "/" + rest
        parent, _, leaf = real.rpartition("/")
        device = self.keep(real, os.open(leaf, _PATH | os.O_NOFOLLOW, dir_fd=self.directory(parent)))
        fd = os.open(".", _LIST, dir_fd=device)
        try:
            with os.scandir(fd) as listing:
                return real, device, {entry.name: entry.is_file(follow_symlinks=False) for entry in listing}
        finally:
            os.close(fd)

    def read_files(self, dir_fd: int, names, regular: dict[str, bool]) -> dict[str, str]:
        """Each file's stripped text; with ``checks``, ``fstat`` where ``regular`` does not say
        "regular file", whole-page reads continued, NUL refused."""
        open_, read, close, fstat, checks = os.open, os.read, os.close, os.fstat, self.checks
        values: dict[str, str] = {}
        for name in names:
            fd = open_(name, _FILE, dir_fd=dir_fd)
            try:
                if checks and not regular.get(name):
                    fstat(fd)
                data = read(fd, MAX_ATTR_BYTES)
                if checks and data and not len(data) & 4095:
                    data += read(fd, MAX_ATTR_BYTES)
            finally:
                close(fd)
            text = data.decode()
            if checks and "\x00" in text:
                raise ValueError(f"{name}: NUL")
            values[name] = text.strip()
        return values

    def close(self) -> None:
        for fd in self.dirs.values():
            os.close(fd)
        os.close(self.root_fd)


def inline_pci(root: str, checks: bool) -> tuple[list[Instance], dict[str, str]]:
    """The pci source's syscalls and result, written out as one loop (see the module docstring)."""
    walk = _InlineWalk(root, checks)
    functions: list[pci.PciFunction] = []
    try:
        for address in walk.names(pci.DEVICES):
            real, device, regular = walk.device(pci.DEVICES, address)
            values = walk.read_files(device, (*pci._MANDATORY_NAMES, *filter(regular.__contains__, pci._OPTIONAL)),
                                     regular)
            links = {name: os.readlink(name, dir_fd=device).rpartition("/")[2]
                     for name in filter(regular.__contains__, pci._LINKS)}
            get = values.get
            ids = "\n".join([get(name, "") for name in pci._MANDATORY_NAMES])
            if not pci._KERNEL_IDS.fullmatch(ids):
                raise ValueError(f"{real}: IDs not in the kernel's form")
            ids = ids.lower()
            attrs = {"class": ids[2:6], "vendor": ids[11:15], "device": ids[18:22],
                     "subsystem_vendor": ids[25:29], "subsystem_device": ids[32:36]}
            totalvfs = get("sriov_totalvfs")
            if totalvfs:
                attrs["sriov_totalvfs"] = totalvfs
            group = links.get("iommu_group")
            if group is not None:
                group_fd = os.open(group, _PATH | os.O_NOFOLLOW, dir_fd=walk.directory(pci.IOMMU_GROUPS))
                try:
                    group_type = walk.read_files(group_fd, ("type",), {})["type"]
                finally:
                    os.close(group_fd)
                if group_type:
                    attrs["iommu_group/type"] = group_type
                attrs["iommu_group"] = group
            attrs["address"] = address
            for name in ("driver", "physfn"):
                if links.get(name):
                    attrs[name] = links[name]
            numa = get("numa_node")
            if numa is not None and numa != "-1":
                attrs["numa_node"] = pci._decimal(numa)
            revision = get("revision")
            if revision is not None:
                attrs["revision"] = revision[2:].lower()
            numvfs = get("sriov_numvfs")
            if numvfs is not None:
                attrs["sriov_numvfs"] = pci._decimal(numvfs)
            functions.append(pci.PciFunction(Instance(attrs, real), totalvfs is not None))
    finally:
        walk.close()
    labels, _ = pci.device_labels(AttributeReader(HostFS(root), pci.NAME), functions, pci.Config())
    return [function.instance for function in functions], labels


def inline_usb(root: str, checks: bool) -> tuple[list[Instance], dict[str, str]]:
    """The usb source's syscalls and result, written out as one loop (see the module docstring)."""
    walk = _InlineWalk(root, checks)
    instances: list[Instance] = []
    try:
        for name in walk.names(usb.DEVICES):
            if ":" in name:
                continue
            real, device, regular = walk.device(usb.DEVICES, name)
            if "idProduct" not in regular:
                continue
            values = walk.read_files(device, filter(regular.__contains__, usb._DEVICE_FILES), regular)
            klass = values.get("bDeviceClass")
            attrs = {"class": klass.lower()} if klass else {}
            attrs["vendor"] = values["idVendor"].lower()
            attrs["device"] = values["idProduct"].lower()
            if values.get("serial"):
                attrs["serial"] = values["serial"]
            attrs["sysfs_name"] = name
            for file in usb._EXTRA_FILES:
                if values.get(file):
                    attrs[file] = values[file]
            prefixes = usb.interface_prefixes(name)
            interfaces = []
            for child in sorted([entry for entry in regular if ":" in entry and entry.startswith(prefixes)]):
                child_fd = os.open(child, _PATH | os.O_NOFOLLOW, dir_fd=device)
                try:
                    iface_class = walk.read_files(child_fd, ("bInterfaceClass",), {})["bInterfaceClass"].lower()
                    try:
                        driver = os.readlink("driver", dir_fd=child_fd).rpartition("/")[2]
                    except FileNotFoundError:
                        driver = None
                finally:
                    os.close(child_fd)
                interfaces.append((child, iface_class, driver))
            if attrs.get("class") != "00":
                for _, _, driver in interfaces:
                    if driver:
                        attrs["driver"] = driver
                        break
                instances.append(Instance(attrs, real))
                continue
            for child, iface_class, driver in interfaces:
                iface_attrs = dict(attrs, **{"class": iface_class, "interface": child})
                if driver:
                    iface_attrs["driver"] = driver
                instances.append(Instance(iface_attrs, f"{real}/{child}"))
    finally:
        walk.close()
    labels, _ = usb.device_labels(AttributeReader(HostFS(root), usb.NAME), instances, usb.Config())
    return instances, labels


def lower_quartile(samples: list[float]) -> float:
    return sorted(samples)[len(samples) // 4]


#: source -> its pass written out as one loop
INLINE = {"pci": inline_pci, "usb": inline_usb}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", default="dgx-usb-lab", help="fixture under fixtures/sysfs/")
    parser.add_argument("--runs", type=int, default=60)
    args = parser.parse_args(argv)
    root = REPO / "fixtures" / "sysfs" / args.case
    config = DiscoveryConfig(node_name="bench-node")

    steps = {}
    found_counts = {}
    for name, inline in INLINE.items():
        result = discover(HostFS(root), config, [name]).results[name]
        instances = result.features["device"].instances if "device" in result.features else ()
        expected = ([(i.origin, dict(i.attributes)) for i in instances], dict(result.labels))
        for checks in (False, True):
            got_instances, got_labels = inline(str(root), checks)
            if ([(i.origin, dict(i.attributes)) for i in got_instances], got_labels) != expected:
                print(f"{name}: the inline pass (checks={checks}) does not find what the source finds: no bound")
                return 1
        found_counts[name] = (len(expected[0]), len(expected[1]))
        plan = discovery_bench.floor_plan(root, discovery_bench.record(root, config, [name]))
        steps[(name, "floor")] = lambda plan=plan: discovery_bench.run_floor(plan)
        steps[(name, "inline")] = lambda inline=inline: inline(str(root), False)
        steps[(name, "inline + checks")] = lambda inline=inline: inline(str(root), True)
        steps[(name, "source")] = lambda name=name: discover(HostFS(root), config, [name])
    whole_plan = discovery_bench.floor_plan(root, discovery_bench.record(root, config))
    steps[("all", "whole pass")] = lambda: discover(HostFS(root), config)
    steps[("all", "floor")] = lambda: discovery_bench.run_floor(whole_plan)

    clock = time.thread_time
    runs: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.runs):
        for key, step in steps.items():
            started = clock()
            step()
            runs.setdefault(key, []).append(clock() - started)
    ms = {key: lower_quartile(samples) * 1000 for key, samples in runs.items()}

    print(f"case: {args.case}   runs: {args.runs}   python: {sys.version.split()[0]}   CPU time of this thread, "
          "lower quartile; floor = bench/discovery.py's replay of the source's own operations")
    for name in INLINE:
        floor = ms[(name, "floor")]
        instances, labels = found_counts[name]
        print(f"{name}: {instances} instances, {labels} labels (both inline passes found the same)")
        for step in ("floor", "inline", "inline + checks", "source"):
            print(f"  {step:<16} {ms[(name, step)]:7.2f} ms   {ms[(name, step)] / floor:5.2f}x floor")
    whole, whole_floor = ms[("all", "whole pass")], ms[("all", "floor")]
    print(f"whole pass {whole:.2f} ms against its floor {whole_floor:.2f} ms: {whole / whole_floor:.2f}x")
    for step in ("inline", "inline + checks"):
        projected = whole - sum(ms[(name, "source")] - ms[(name, step)] for name in INLINE)
        print(f"  arithmetic: with {' and '.join(INLINE)} at their '{step}' cost, the whole pass would be "
              f"{projected:.2f} ms, {projected / whole_floor:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
