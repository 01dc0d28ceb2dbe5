#!/usr/bin/env python3
"""Discovery time on the largest recorded host, against a bare loop reading the same files.

    python bench/discovery.py [--case nvidia-8gpu] [--runs 40]

The file list is what the sources really touch: a ``HostFS`` recorder collects every host path
read, listed, checked or followed during one discovery pass.  The bare loop then does the
minimum I/O for that list (``listdir`` a directory, ``open``+``read`` a file, ``readlink`` a
link) with no parsing, so ``discover / bare`` is the cost of our Python on top of the I/O
(target: <= 1.5x).  Prints numbers; never asserts (timings on shared CI machines are noisy).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from agent.discovery import DiscoveryConfig, discover  # noqa: E402
from agent.hostfs import HostFS  # noqa: E402


def record_paths(root: Path, config: DiscoveryConfig) -> list[str]:
    paths: list[str] = []
    discover(HostFS(root, recorder=paths.append), config)
    return paths


def bare_plan(root: Path, host_paths: list[str]) -> list[tuple[str, str]]:
    """(operation, real path) per recorded access; missing paths become a failed stat, as the
    sources pay for them too."""
    plan = []
    for host_path in host_paths:
        real = str(root / host_path.lstrip("/"))
        if os.path.islink(real) and not os.path.exists(real):
            plan.append(("readlink", real))
        elif os.path.isdir(real):
            plan.append(("listdir", real))
        elif os.path.isfile(real):
            plan.append(("read", real))
        else:
            plan.append(("stat", real))
    return plan


def run_bare(plan: list[tuple[str, str]]) -> None:
    for operation, real in plan:
        if operation == "read":
            with open(real, "rb") as handle:
                handle.read(65536)
        elif operation == "listdir":
            os.listdir(real)
        elif operation == "readlink":
            os.readlink(real)
        else:
            os.path.lexists(real)


def summary(samples: list[float]) -> tuple[float, float]:
    median = statistics.median(samples)
    p90 = statistics.quantiles(samples, n=10)[-1] if len(samples) >= 10 else max(samples)
    return median, p90


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", default="nvidia-8gpu", help="fixture under fixtures/sysfs/")
    parser.add_argument("--runs", type=int, default=40)
    args = parser.parse_args(argv)
    root = REPO / "fixtures" / "sysfs" / args.case
    config = DiscoveryConfig(node_name="bench-node")

    paths = record_paths(root, config)  # also warms imports and the page cache
    plan = bare_plan(root, paths)
    counts = defaultdict(int)
    for operation, _ in plan:
        counts[operation] += 1

    discover_s, bare_s = [], []
    per_source: dict[str, list[float]] = defaultdict(list)
    result = None
    for _ in range(args.runs):
        started = time.perf_counter()
        result = discover(HostFS(root), config)
        discover_s.append(time.perf_counter() - started)
        for name, seconds in result.durations.items():
            per_source[name].append(seconds)
        started = time.perf_counter()
        run_bare(plan)
        bare_s.append(time.perf_counter() - started)

    d_med, d_p90 = summary(discover_s)
    b_med, b_p90 = summary(bare_s)
    print(f"case: {args.case}   runs: {args.runs}   python: {sys.version.split()[0]}")
    print(f"host paths touched per pass: {len(paths)} ({len(set(paths))} distinct): "
          + ", ".join(f"{op} {n}" for op, n in sorted(counts.items())))
    if result is not None:
        pci = result.features.get("pci.device")
        print(f"labels: {len(result.labels)}   pci.device instances: {len(pci.instances) if pci else 0}   "
              f"errors: {len(result.errors)}")
    print(f"discover: median {d_med * 1000:.1f} ms   p90 {d_p90 * 1000:.1f} ms")
    print(f"bare I/O: median {b_med * 1000:.1f} ms   p90 {b_p90 * 1000:.1f} ms")
    print(f"ratio discover/bare (medians): {d_med / b_med:.2f}x   (target <= 1.5x)")
    print("per source (median ms): " + ", ".join(
        f"{name} {statistics.median(v) * 1000:.1f}" for name, v in sorted(per_source.items())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
