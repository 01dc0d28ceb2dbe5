"""Device plugin costs, measured against the kubelet stand-in (tests/deviceplugin) over real unix sockets.

- publish -> ListAndWatch: from ``DevicePlugins.publish`` (what the agent's worker calls in a
  pass) until the stand-in's stream has the new list;
- Allocate: one kubelet ``Allocate`` round trip for one device;
- floor: a bare unary call on the same channel that does no work (``GetDevicePluginOptions``),
  i.e. gRPC's own round trip on this machine. The ratios say what our code adds to it;
- memory: RSS of a process that imported the agent's run loop, and after importing grpcio and
  serving two resources (the plugin mode's extra cost; off by default, nothing is imported).

Prints numbers, asserts nothing.

    .venv/bin/python bench/device_plugin.py --runs 300
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

RSS_PROBE = r"""
import resource, sys, tempfile
def rss():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmRSS:")) / 1024
import agent.runtime.agent, agent.commands.run
before = rss()
from agent.deviceplugin.model import DeviceNode, PluginDevice, ResourceDevices
from agent.deviceplugin.plugins import DevicePlugins
d = tempfile.mkdtemp(dir="/tmp")
dp = DevicePlugins(d, check_interval=0.1).start()
dp.publish({f"example.com/r{i}": ResourceDevices(f"example.com/r{i}", (PluginDevice("pci-0000:01:00.0", (DeviceNode("/dev/x", "/dev/x"),)),)) for i in range(2)})
import time; time.sleep(0.5)
after = rss()
dp.stop()
print(f"{before:.1f} {after:.1f}")
"""


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=300)
    args = parser.parse_args(argv)

    from agent.deviceplugin.model import DeviceNode, PluginDevice, ResourceDevices
    from agent.deviceplugin.plugins import DevicePlugins
    from agent.deviceplugin.v1beta1 import api_pb2
    from tests.deviceplugin.kubelet_standin import KubeletStandIn

    res = "node-feature-agent.io/edgetpu"
    socket_dir = tempfile.mkdtemp(prefix="dpb-", dir="/tmp")
    kubelet = KubeletStandIn(socket_dir).start()
    plugins = DevicePlugins(socket_dir, check_interval=0.1, vanished_grace=0).start()  # lists stay exact
    pcie = PluginDevice("pci-0000:01:00.0", (DeviceNode("/dev/apex_0", "/dev/apex_0"),))
    usb = PluginDevice("usb-0000:00:14.0-2-2", (DeviceNode("/dev/bus/usb/002/002", "/dev/bus/usb/002/002"),))
    try:
        plugins.publish({res: ResourceDevices(res, (pcie,))})
        kubelet.wait_list(res, [(pcie.id, "Healthy")])
        stub = kubelet.stub(res)
        publish, allocate, floor = [], [], []
        for i in range(args.runs):
            devices = (pcie, usb) if i % 2 == 0 else (pcie,)
            expected = sorted((d.id, "Healthy") for d in devices)
            start = time.perf_counter()
            plugins.publish({res: ResourceDevices(res, devices)})
            kubelet.wait_list(res, expected)
            publish.append(time.perf_counter() - start)
        for _ in range(args.runs):
            start = time.perf_counter()
            stub.GetDevicePluginOptions(api_pb2.Empty(), timeout=5)
            floor.append(time.perf_counter() - start)
            start = time.perf_counter()
            kubelet.allocate(res, [pcie.id])
            allocate.append(time.perf_counter() - start)
    finally:
        plugins.stop()
        kubelet.stop()
        shutil.rmtree(socket_dir, ignore_errors=True)

    def row(name, values):
        return f"| {name} | {statistics.median(values) * 1000:.2f} ms | {percentile(values, 0.99) * 1000:.2f} ms |"

    print(f"runs: {args.runs}")
    print("| | median | p99 |\n|---|---|---|")
    print(row("publish -> ListAndWatch received", publish))
    print(row("Allocate round trip (1 device)", allocate))
    print(row("floor: empty unary call, same channel", floor))
    print(f"ratios (median): publish/floor {statistics.median(publish) / statistics.median(floor):.2f}x, "
          f"Allocate/floor {statistics.median(allocate) / statistics.median(floor):.2f}x")
    out = subprocess.run([sys.executable, "-c", RSS_PROBE], capture_output=True, text=True,
                         cwd=str(Path(__file__).resolve().parent.parent), env={**os.environ, "PYTHONPATH": "."})
    if out.returncode == 0:
        before, after = (float(x) for x in out.stdout.split())
        print(f"RSS: run loop imported {before:.1f} MiB; + grpcio and two served resources {after:.1f} MiB "
              f"(+{after - before:.1f} MiB, only with --device-plugin=on)")
    else:
        print("RSS probe failed:", out.stderr.strip()[-500:])
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
