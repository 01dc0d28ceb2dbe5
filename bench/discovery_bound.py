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
2. **inline**: one function doing the syscalls the pci source issues (read each bus link, open
   the device directory relative to its open parent, list it, read the listed files, read the
   links, each IOMMU group's ``type``) and building the same instances and labels, with nothing
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


def inline_pci(root: str, checks: bool) -> tuple[list[Instance], dict[str, str]]:
    """The pci source's syscalls and result, written out as one loop (see the module docstring)."""
    open_, read, close, readlink, fstat = os.open, os.read, os.close, os.readlink, os.fstat
    root_fd = open_(root, _PATH)
    dirs: dict[str, int] = {}

    def directory(path: str) -> int:
        fd = dirs.get(path)
        if fd is None:
            fd = keep(path, open_(path[1:], _PATH, dir_fd=root_fd))
        elif checks:
            dirs[path] = dirs.pop(path)  # most recently used last
        return fd

    def keep(path: str, fd: int) -> int:
        if checks and len(dirs) >= _MAX_OPEN:
            close(dirs.pop(next(iter(dirs))))
        dirs[path] = fd
        return fd

    functions: list[pci.PciFunction] = []
    try:
        bus = directory(pci.DEVICES)
        fd = open_(".", _LIST, dir_fd=bus)
        addresses = sorted(os.listdir(fd))
        close(fd)
        for address in addresses:
            target = readlink(address, dir_fd=directory(pci.DEVICES))
            names = target.lstrip("./")
            ups = len(target) - len(names)
            if checks and (not names or ups % 3 or target[:ups] != "../" * (ups // 3) or names[0] == "."
                           or "/." in names or "//" in names or names[-1] == "/" or "\x00" in target):
                raise ValueError(f"{address}: link shape the inline pass does not follow: {target}")
            real = pci.DEVICES.rsplit("/", ups // 3)[0] + "/" + names
            parent, _, leaf = real.rpartition("/")
            device = keep(real, open_(leaf, _PATH | os.O_NOFOLLOW, dir_fd=directory(parent)))
            fd = open_(".", _LIST, dir_fd=device)
            with os.scandir(fd) as listing:
                regular = {entry.name: entry.is_file(follow_symlinks=False) for entry in listing}
            close(fd)
            values: dict[str, str] = {}
            for name in (*pci._MANDATORY_NAMES, *filter(regular.__contains__, pci._OPTIONAL)):
                fd = open_(name, _FILE, dir_fd=device)
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
                    raise ValueError(f"{real}/{name}: NUL")
                values[name] = text.strip()
            links = {name: readlink(name, dir_fd=device).rpartition("/")[2]
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
                group_fd = open_(group, _PATH | os.O_NOFOLLOW, dir_fd=directory(pci.IOMMU_GROUPS))
                try:
                    fd = open_("type", _FILE, dir_fd=group_fd)
                    try:
                        fstat(fd)
                        group_type = read(fd, MAX_ATTR_BYTES).decode().strip()
                    finally:
                        close(fd)
                finally:
                    close(group_fd)
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
        for fd in dirs.values():
            close(fd)
        close(root_fd)
    labels, _ = pci.device_labels(AttributeReader(HostFS(root), pci.NAME), functions, pci.Config())
    return [function.instance for function in functions], labels


def inline_usb(root: str, checks: bool) -> tuple[list[Instance], dict[str, str]]:
    """The usb source's syscalls and result, written out as one loop (see the module docstring)."""
    open_, read, close, readlink, fstat = os.open, os.read, os.close, os.readlink, os.fstat
    root_fd = open_(root, _PATH)
    dirs: dict[str, int] = {}

    def directory(path: str) -> int:
        fd = dirs.get(path)
        if fd is None:
            fd = keep(path, open_(path[1:], _PATH, dir_fd=root_fd))
        elif checks:
            dirs[path] = dirs.pop(path)
        return fd

    def keep(path: str, fd: int) -> int:
        if checks and len(dirs) >= _MAX_OPEN:
            close(dirs.pop(next(iter(dirs))))
        dirs[path] = fd
        return fd

    def text(fd: int, listed_regular: bool) -> str:
        if checks and not listed_regular:
            fstat(fd)
        data = read(fd, MAX_ATTR_BYTES)
        if checks and data and not len(data) & 4095:
            data += read(fd, MAX_ATTR_BYTES)
        decoded = data.decode()
        if checks and "\x00" in decoded:
            raise ValueError("NUL")
        return decoded.strip()

    instances: list[Instance] = []
    try:
        bus = directory(usb.DEVICES)
        fd = open_(".", _LIST, dir_fd=bus)
        names = sorted(os.listdir(fd))
        close(fd)
        for name in names:
            if ":" in name:
                continue
            target = readlink(name, dir_fd=directory(usb.DEVICES))
            rest = target.lstrip("./")
            ups = len(target) - len(rest)
            if checks and (not rest or ups % 3 or target[:ups] != "../" * (ups // 3) or rest[0] == "."
                           or "/." in rest or "//" in rest or rest[-1] == "/" or "\x00" in target):
                raise ValueError(f"{name}: link shape the inline pass does not follow: {target}")
            real = usb.DEVICES.rsplit("/", ups // 3)[0] + "/" + rest
            parent, _, leaf = real.rpartition("/")
            device = keep(real, open_(leaf, _PATH | os.O_NOFOLLOW, dir_fd=directory(parent)))
            fd = open_(".", _LIST, dir_fd=device)
            with os.scandir(fd) as listing:
                regular = {entry.name: entry.is_file(follow_symlinks=False) for entry in listing}
            close(fd)
            if "idProduct" not in regular:
                continue
            values: dict[str, str] = {}
            for file in filter(regular.__contains__, usb._DEVICE_FILES):
                fd = open_(file, _FILE, dir_fd=device)
                try:
                    values[file] = text(fd, regular[file])
                finally:
                    close(fd)
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
                child_fd = open_(child, _PATH | os.O_NOFOLLOW, dir_fd=device)
                try:
                    fd = open_("bInterfaceClass", _FILE, dir_fd=child_fd)
                    try:
                        iface_class = text(fd, False).lower()
                    finally:
                        close(fd)
                    try:
                        driver = readlink("driver", dir_fd=child_fd).rpartition("/")[2]
                    except FileNotFoundError:
                        driver = None
                finally:
                    close(child_fd)
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
        for fd in dirs.values():
            close(fd)
        close(root_fd)
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
