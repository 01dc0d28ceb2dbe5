#!/usr/bin/env python3
"""Discovery time against the I/O floor of the very operations discovery performs.

    python bench/discovery.py [--case dgx-usb-lab] [--runs 20] [--cli-runs 5]

How the baseline (the floor) is built, printed with the figures too:

1. One discovery pass runs on a seam whose recorder (``HostFS(root, recorder=...)``) logs every
   operation as the seam performs it: *read* this file, *list* this directory, *read this
   link* (a source's, or one the seam's walk follows), *stat* this path.
2. The floor replays exactly that list with the cheapest syscalls that do each job, the kernel
   resolving every path itself (no containment, no file-type check, no parsing): each distinct
   parent directory opened once (``O_PATH``) and every leaf looked up relative to it, then
   ``open``+one ``read``+``close`` per file read (failed opens included where discovery asked
   for a missing file), ``open``+``getdents`` per listing, ``readlinkat``, ``fstatat``.
3. Discovery and the floor run alternately in this process, ``--runs`` times each, and the
   same again per source (each source's own operation list), so both see the same cache and
   machine state; every other run the floor goes first, so neither always finds the other's
   warm caches.  The process holds what the agent's holds (the modules ``run`` imports), so a
   pass pays the agent's garbage collections.  ``discover / floor`` is the price of our Python
   on top of the I/O the sources chose to do (target: <= 2.5x and <= 60 ms a pass on
   dgx-usb-lab).

Alongside: the syscalls discovery really issued for that pass (counted by wrapping the ``os``
calls of ``agent.hostfs``), so redundant work (a second read per file, a stat before every
open, failed opens) shows up even though the floor does not pay for it; and the whole-process
CLI time (``python -m agent discover`` on the same root) next to the bare interpreter
start-up.  Prints numbers; never asserts (timings on shared machines are noisy).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import kubernetes.client  # noqa: E402,F401

import agent.cli  # noqa: E402  (what `node-feature-agent run` imports, so a pass pays the agent's collections)
import agent.commands.run  # noqa: E402
import agent.hostfs as hostfs_module  # noqa: E402
import agent.runtime.agent  # noqa: E402,F401
from agent.discovery import DiscoveryConfig, discover  # noqa: E402
from agent.hostfs import MAX_ATTR_BYTES, HostFS  # noqa: E402
from agent.sources import SOURCE_NAMES  # noqa: E402

#: seam operation (the recorder's) -> the floor operation it asks for
_FLOOR = {"read": "read", "list": "list", "readlink": "readlink", "stat": "stat"}


def record(root: Path, config: DiscoveryConfig, sources: list[str] | None = None) -> list[tuple[str, str, int]]:
    """``(floor operation, host path, max bytes)`` for every operation one pass performed, as
    the seam's recorder sees them (each link its walk read included)."""
    ops: list[tuple[str, str, int]] = []

    def trace(operation: str, host_path: str, outcome: object) -> None:
        ops.append((_FLOOR[operation], host_path, MAX_ATTR_BYTES if operation == "read" else 0))

    discover(HostFS(root, recorder=trace), config, sources)
    return ops


def floor_plan(root: Path, ops: list[tuple[str, str, int]]) -> list[tuple[str, str, str, int]]:
    """``(kind, real parent directory, leaf, max bytes)`` per operation."""
    prefix = "" if str(root) == "/" else str(root)
    plan = []
    for kind, path, size in ops:
        real = prefix + "/" + path.strip("/")
        parent, _, leaf = real.rpartition("/")
        plan.append((kind, parent or "/", leaf or ".", size))
    return plan


_READ = os.O_RDONLY | os.O_CLOEXEC
_O_PATH = getattr(os, "O_PATH", os.O_RDONLY) | os.O_CLOEXEC
_DIR = _O_PATH | os.O_DIRECTORY


def run_floor(plan: list[tuple[str, str, str, int]]) -> None:
    """The plan's operations with nothing but the syscalls (errors cost what they cost).

    Each distinct parent directory is opened once (``O_PATH``, the kernel following links) and
    every leaf is looked up relative to it, so the floor never pays a full path walk per file:
    whatever descriptor reuse discovery does, the floor does too."""
    dirfds: dict[str, int] = {}
    try:
        for kind, parent, leaf, size in plan:
            try:
                dirfd = dirfds.get(parent)
                if dirfd is None:
                    dirfd = dirfds[parent] = os.open(parent, _DIR)
                if kind == "read":
                    fd = os.open(leaf, _READ, dir_fd=dirfd)
                    try:
                        os.read(fd, size)
                    finally:
                        os.close(fd)
                elif kind == "list" or kind == "scan":
                    fd = os.open(leaf, _READ | os.O_DIRECTORY, dir_fd=dirfd)
                    try:
                        if kind == "list":
                            os.listdir(fd)
                        else:
                            with os.scandir(fd) as entries:
                                for _ in entries:
                                    pass
                    finally:
                        os.close(fd)
                elif kind == "readlink":
                    os.readlink(leaf, dir_fd=dirfd)
                elif kind == "lstat":
                    os.stat(leaf, dir_fd=dirfd, follow_symlinks=False)
                elif kind == "stat":
                    os.stat(leaf, dir_fd=dirfd)
                else:  # resolve: the leaf's link read relative to its (kernel-resolved) parent
                    os.readlink(leaf, dir_fd=dirfd)
            except OSError:
                pass
    finally:
        for fd in dirfds.values():
            os.close(fd)


class _CountingOs:
    """Stands in for ``os`` inside ``agent.hostfs`` for one pass, counting the syscalls made."""

    CALLS = frozenset({"open", "read", "close", "fstat", "stat", "lstat", "listdir", "scandir", "readlink"})
    PATH_CALLS = frozenset({"islink", "isdir", "isfile", "exists", "lexists"})  # one stat/lstat each

    def __init__(self, real_os, counts: Counter):
        self._os = real_os
        self._counts = counts
        self.path = _CountingPath(real_os.path, counts, self.PATH_CALLS)

    def __getattr__(self, name):
        value = getattr(self._os, name)
        if name in self.CALLS:
            counts = self._counts

            def counted(*args, **kwargs):
                counts[name] += 1
                return value(*args, **kwargs)

            return counted
        return value


class _CountingPath:
    def __init__(self, real_path, counts: Counter, names: set[str]):
        self._path = real_path
        self._counts = counts
        self._names = names

    def __getattr__(self, name):
        value = getattr(self._path, name)
        if name in self._names:
            counts = self._counts

            def counted(*args, **kwargs):
                counts[f"path.{name}"] += 1
                return value(*args, **kwargs)

            return counted
        return value


def count_syscalls(root: Path, config: DiscoveryConfig) -> Counter:
    counts: Counter = Counter()
    real_os = hostfs_module.os
    hostfs_module.os = _CountingOs(real_os, counts)
    try:
        discover(HostFS(root), config)
    finally:
        hostfs_module.os = real_os
    return counts


def cli_seconds(root: Path, runs: int) -> tuple[float, float]:
    """Median wall time of ``python -m agent discover`` on ``root`` and of a bare interpreter."""
    command = [sys.executable, "-m", "agent", "discover", "--host-root", str(root), "--format", "json",
               "--node-name", "bench-node"]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    whole, bare = [], []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, cwd=REPO, env=env)
        whole.append(time.perf_counter() - started)
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        bare.append(time.perf_counter() - started)
    return statistics.median(whole), statistics.median(bare)


def summary(samples: list[float]) -> tuple[float, float]:
    median = statistics.median(samples)
    p90 = statistics.quantiles(samples, n=10)[-1] if len(samples) >= 10 else max(samples)
    return median, p90


def timed(function, *args) -> float:
    started = time.perf_counter()
    function(*args)
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", default="dgx-usb-lab", help="fixture under fixtures/sysfs/ (or --root)")
    parser.add_argument("--root", help="any host root instead of a fixture ('/' = this machine)")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--cli-runs", type=int, default=5, help="0 skips the whole-process timing")
    args = parser.parse_args(argv)
    root = Path(args.root) if args.root else REPO / "fixtures" / "sysfs" / args.case
    config = DiscoveryConfig(node_name="bench-node")

    ops = record(root, config)  # also warms imports and the page cache
    plan = floor_plan(root, ops)
    per_source_plan = {name: floor_plan(root, record(root, config, [name])) for name in SOURCE_NAMES}
    syscalls = count_syscalls(root, config)

    discover_s, floor_s = [], []
    source_s: dict[str, list[float]] = defaultdict(list)
    source_floor_s: dict[str, list[float]] = defaultdict(list)
    result = None
    for run in range(args.runs):
        # counterbalanced: every other run the floor goes first, so neither side always runs right
        # after the other has just touched the same files (warm dentries and caches for the second)
        floor_first = run % 2 == 1
        if floor_first:
            floor_s.append(timed(run_floor, plan))
        started = time.perf_counter()
        result = discover(HostFS(root), config)
        discover_s.append(time.perf_counter() - started)
        if not floor_first:
            floor_s.append(timed(run_floor, plan))
        for name in SOURCE_NAMES:
            if floor_first:
                source_floor_s[name].append(timed(run_floor, per_source_plan[name]))
            source_s[name].append(timed(discover, HostFS(root), config, [name]))
            if not floor_first:
                source_floor_s[name].append(timed(run_floor, per_source_plan[name]))

    d_med, d_p90 = summary(discover_s)
    f_med, f_p90 = summary(floor_s)
    kinds = Counter(kind for kind, _, _ in ops)
    print(f"case: {root if args.root else args.case}   runs: {args.runs}   python: {sys.version.split()[0]}")
    print("baseline: the seam operations one discovery pass performed (as the seam's recorder sees them, each "
          "link its walk follows included), replayed as bare syscalls, the kernel resolving each path, every "
          "distinct parent directory opened once and leaves looked up relative to it (open+read+close, "
          "open+getdents, readlinkat, fstatat), interleaved with discovery in this process (every other run the "
          "floor goes first)")
    print("process: as the agent's (what `run` imports, the kubernetes client included), so a pass's garbage "
          "collections are the agent's")
    print(f"operations per pass: {len(ops)} ({len({(k, p) for k, p, _ in ops})} distinct): "
          + ", ".join(f"{kind} {n}" for kind, n in sorted(kinds.items())))
    print(f"syscalls discovery issued for them: {sum(syscalls.values())}: "
          + ", ".join(f"{name} {n}" for name, n in sorted(syscalls.items())))
    if result is not None:
        features = result.features
        counts = {name: len(features[name].instances) for name in ("pci.device", "usb.device") if name in features}
        print(f"labels: {len(result.labels)}   "
              + "   ".join(f"{name} instances: {n}" for name, n in counts.items())
              + f"   errors: {len(result.errors)}")
    print(f"discover (all sources): median {d_med * 1000:.1f} ms   p90 {d_p90 * 1000:.1f} ms")
    print(f"floor (same operations): median {f_med * 1000:.1f} ms   p90 {f_p90 * 1000:.1f} ms")
    print(f"ratio discover/floor (medians): {d_med / f_med:.2f}x   (target: <= 2.5x and <= 60 ms on dgx-usb-lab)")
    pairs = sorted(d / f for d, f in zip(discover_s, floor_s, strict=True))
    quartiles = statistics.quantiles(pairs, n=4) if len(pairs) >= 4 else [pairs[0], 0, pairs[-1]]
    print(f"  per pair (each pass / the floor run next to it): median {statistics.median(pairs):.2f}x, "
          f"quartiles {quartiles[0]:.2f}-{quartiles[2]:.2f}x, {sum(r <= 2.5 for r in pairs)} of {len(pairs)} "
          "pairs <= 2.5x (a pair shares the machine's state of that moment)")
    print("per source: discover ms / floor ms / ratio / operations")
    for name in SOURCE_NAMES:
        s_med = statistics.median(source_s[name])
        sf_med = statistics.median(source_floor_s[name])
        ratio = f"{s_med / sf_med:.2f}x" if sf_med > 0 else "-"
        print(f"  {name:<10} {s_med * 1000:7.2f} {sf_med * 1000:7.2f} {ratio:>7} {len(per_source_plan[name]):6d}")
    if args.cli_runs > 0:
        whole, bare = cli_seconds(root, args.cli_runs)
        print(f"whole process `python -m agent discover --format json` (median of {args.cli_runs}): "
              f"{whole * 1000:.0f} ms; bare interpreter start-up: {bare * 1000:.0f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
