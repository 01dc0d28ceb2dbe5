#!/usr/bin/env python3
"""DRA mode's costs (``run --dra``), against the in-repo API server through the real client.

- hotplug -> ResourceSlice updated: the agent in-process (the DaemonSet's debounce, 0.04 s /
  0.25 s) on a writable copy of the coral-usb host; the Accelerator is unplugged and plugged
  back (sysfs entries moved, the kernel's uevents sent), timed from the uevent to the stored
  slice holding the change. Floor, in the same run: the same unplug/plug to the Node's label
  changing (the pass without DRA's part), so the ratio says what publishing adds;
- publish -> slice written: ``SlicePublisher.publish`` of a changed device list until the API
  server stores it (one PUT: the slices are watched, not read); floor: one LIST of the node's
  slices (what each sync read before the watch);
- slice writes at steady state (the same devices published ``--runs`` times) and across a
  restart (a new publisher on the same slices): counted POST/PUT/DELETE requests, target 0;
- API requests at steady state: the agent in-process on the coral-usb host, ``--passes``
  resyncs (full rediscovery, the devices unchanged) after the first publish; every request the
  server logged, by method and path, per pass; per hour = per pass x the passes an hour brings
  (one resync every ``Settings.resync_interval``) + each watch's reconnects (one every
  ``timeoutSeconds``, 900 s);
- RSS of ``node-feature-agent run`` (this venv) on the edge-ai host with ``--dra=off`` and
  ``--dra=on``, ``--settle`` s after the Node is labelled (psutil, as bench/memory.py).

Prints numbers, asserts nothing.

    .venv/bin/python bench/dra.py --runs 200 --cycles 20 --passes 50
"""

from __future__ import annotations

import argparse
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import psutil  # noqa: E402
from kubernetes import client  # noqa: E402

from agent.deviceplugin.model import DeviceNode, PluginDevice, ResourceDevices  # noqa: E402
from agent.dra.publisher import SlicePublisher  # noqa: E402
from agent.dra.slices import Node  # noqa: E402
from agent.kube.light_core import LightCoreV1Api  # noqa: E402
from agent.reconcile.node_api import NodeApi  # noqa: E402
from agent.runtime.agent import Agent, Settings  # noqa: E402
from agent.runtime.event_sources import SocketSource  # noqa: E402
from agent.runtime.uevent import encode_kernel_uevent  # noqa: E402
from tests.runtime.helpers import CORAL_DEVPATH, EDGETPU_LABEL, CoralHost, wait_for  # noqa: E402
from tests.support.apiserver import FakeApiServer  # noqa: E402

NODE = "bench-node"
SLICES = "resourceslices.resource.k8s.io"
TPU = "node-feature-agent.io/edgetpu"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def fmt(values: list[float]) -> str:
    return f"median {statistics.median(values):6.2f} ms, p99 {pct(values, 0.99):6.2f} ms"


def slice_devices(server: FakeApiServer) -> int:
    return sum(len(s["spec"].get("devices") or []) for s in server.store.list(SLICES)[0])


def writes(server: FakeApiServer) -> int:
    return sum(1 for r in server.requests if "/resourceslices" in r.path and r.method in ("POST", "PUT", "DELETE"))


def hotplug(cycles: int, dra: bool, tmp: Path) -> list[float]:
    """ms from each uevent to the change being stored (slice with DRA, else the label)."""
    with FakeApiServer() as server:
        server.add_node(NODE)
        host = CoralHost(tmp)
        sender, receiver = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        settings = Settings(node_name=NODE, rules_dirs=[str(REPO / "labels")], host_root=str(host.root),
                            metrics_port=None, watch_rules=False, startup_jitter=0, dra="v1" if dra else "")
        agent = Agent(settings, NodeApi.from_configuration(server.client_configuration()),
                      event_source=SocketSource(receiver)).start()

        def present() -> bool:
            if dra:
                return slice_devices(server) == 1
            return EDGETPU_LABEL in (server.node(NODE)["metadata"].get("labels") or {})

        try:
            wait_for(present, timeout=60, what="first publish")
            times = []
            for _ in range(cycles):
                for action, want in (("remove", False), ("add", True)):
                    (host.unplug if action == "remove" else host.plug)()
                    started = time.perf_counter()
                    if action == "remove":
                        sender.send(encode_kernel_uevent("remove", CORAL_DEVPATH + "/2-2:1.0", "usb"))
                    sender.send(encode_kernel_uevent(action, CORAL_DEVPATH, "usb"))
                    wait_for(lambda want=want: present() == want, timeout=30, interval=0.001, what=action)
                    times.append((time.perf_counter() - started) * 1000)
            return times
        finally:
            agent.stop(timeout=5)
            sender.close()
            shutil.rmtree(tmp, ignore_errors=True)


def steady_requests(passes: int, tmp: Path) -> None:
    """API requests the agent makes per resync pass with nothing changed, from the server's log."""
    with FakeApiServer() as server:
        server.add_node(NODE)
        host = CoralHost(tmp)
        sender, receiver = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        settings = Settings(node_name=NODE, rules_dirs=[str(REPO / "labels")], host_root=str(host.root),
                            metrics_port=None, watch_rules=False, startup_jitter=0, dra="v1")
        agent = Agent(settings, NodeApi.from_configuration(server.client_configuration()),
                      event_source=SocketSource(receiver)).start()
        try:
            wait_for(lambda: slice_devices(server) == 1 and agent.dra is not None and agent.dra.publisher is not None
                     and agent.dra.publisher.synced.is_set(), timeout=60, what="first publish")
            time.sleep(0.5)  # the first pass's echoes settle
            server.clear_requests()
            for _ in range(passes):
                before = agent.passes
                agent.resync()
                wait_for(lambda before=before: agent.passes > before, timeout=30, interval=0.005, what="pass")
                assert agent.dra is not None and agent.dra.publisher is not None
                wait_for(agent.dra.publisher.synced.is_set, timeout=30, interval=0.005, what="sync")
            logged = server.requests
        finally:
            agent.stop(timeout=5)
            sender.close()
            shutil.rmtree(tmp, ignore_errors=True)
    kinds: dict[str, int] = {}
    for r in logged:
        what = f"{r.method} {r.path}" + (" (watch)" if r.query.get("watch") in ("true", "1") else "")
        kinds[what] = kinds.get(what, 0) + 1
    per_pass = len(logged) / passes
    hourly = per_pass * 3600 / Settings.resync_interval

    print(f"API requests at steady state: {len(logged)} in {passes} resync passes ({per_pass:.2f} per pass): "
          + ", ".join(f"{k} x{v}" for k, v in sorted(kinds.items())))
    print(f"  per hour (a resync every {Settings.resync_interval:.0f} s): {hourly:.1f} from passes "
          f"+ watch reconnects (4 per watch per hour)")



def tpu(n: int) -> PluginDevice:
    return PluginDevice(f"pci-0000:0{n}:00.0", (DeviceNode(f"/dev/apex_{n}", f"/dev/apex_{n}"),), numa_node=0,
                        attributes=(("address", f"0000:0{n}:00.0"), ("bus", "pci"), ("vendor", "1ac1")))


def publisher_figures(runs: int) -> None:
    with FakeApiServer() as server:
        uid = server.add_node(NODE)["metadata"]["uid"]
        api_client = client.ApiClient(server.client_configuration())
        publisher = SlicePublisher(api_client, Node(NODE, uid), "v1", taints=False).start()
        lister = LightCoreV1Api(api_client)
        one = {TPU: ResourceDevices(TPU, (tpu(1),))}
        two = {TPU: ResourceDevices(TPU, (tpu(1), tpu(2)))}
        try:
            publish, floor = [], []
            for i in range(runs):
                want = 2 if i % 2 == 0 else 1
                started = time.perf_counter()
                publisher.publish(two if want == 2 else one)
                publisher.synced.wait(10)
                publish.append((time.perf_counter() - started) * 1000)
                started = time.perf_counter()
                lister.list_collection("/apis/resource.k8s.io/v1/resourceslices",
                                       field_selector=f"spec.nodeName={NODE}", _preload_content=False).read()
                floor.append((time.perf_counter() - started) * 1000)
            server.clear_requests()
            for _ in range(runs):
                publisher.publish(one)
                publisher.synced.wait(10)
            steady = writes(server)
            requests_per_publish = len(server.requests) / runs
        finally:
            publisher.stop()
        server.clear_requests()
        again = SlicePublisher(api_client, Node(NODE, uid), "v1", taints=False).start()
        try:
            again.publish(one)
            again.synced.wait(10)
        finally:
            again.stop()
        restart = writes(server)
    print(f"publish -> slice written ({runs} changes): {fmt(publish)}; floor (one LIST): {fmt(floor)}; "
          f"ratio {statistics.median(publish) / statistics.median(floor):.2f}x")
    print(f"slice writes at steady state: {steady} in {runs} publishes ({requests_per_publish:.2f} requests each); "
          f"across a restart: {restart} (target 0)")


def rss(dra: str, settle: float, window: float, tmp: Path) -> float:
    agent_bin = Path(sys.executable).parent / "node-feature-agent"
    with FakeApiServer() as server:
        server.add_node(NODE)
        kubeconfig = server.kubeconfig(tmp / "kubeconfig")
        cmd = [str(agent_bin), "--log-level", "warning", "run", f"--host-root={REPO / 'fixtures/sysfs/edge-ai'}",
               f"--rules={REPO / 'labels'}", f"--node-name={NODE}", f"--kubeconfig={kubeconfig}",
               "--metrics-port=0", "--metrics-address=127.0.0.1", "--udev-mode=kernel", "--startup-jitter=0",
               f"--dra={dra}"]
        proc = subprocess.Popen(cmd, cwd=tempfile.gettempdir(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_for(lambda: EDGETPU_LABEL in (server.node(NODE)["metadata"].get("labels") or {}), timeout=120,
                     what="labelled")
            if dra == "on":
                wait_for(lambda: slice_devices(server) == 3, timeout=60, what="slices")
            time.sleep(settle)
            process = psutil.Process(proc.pid)
            samples = []
            for _ in range(max(1, int(window))):
                samples.append(process.memory_info().rss / 2**20)
                time.sleep(1.0)
            return statistics.median(samples)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--cycles", type=int, default=20, help="unplug/plug cycles of the hotplug figure")
    parser.add_argument("--passes", type=int, default=50, help="resync passes of the steady-state request count")
    parser.add_argument("--only", choices=("requests", "hotplug", "publisher", "rss"), action="append")
    parser.add_argument("--settle", type=float, default=10.0)
    parser.add_argument("--window", type=float, default=5.0)
    args = parser.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="nfa-dra-"))
    only = set(args.only or ("requests", "hotplug", "publisher", "rss"))
    try:
        if "requests" in only:
            steady_requests(args.passes, tmp / "steady")
        if "hotplug" in only:
            with_dra = hotplug(args.cycles, True, tmp / "dra")
            without = hotplug(args.cycles, False, tmp / "labels")
            print(f"hotplug -> ResourceSlice updated ({len(with_dra)} events): {fmt(with_dra)}; floor (hotplug -> "
                  f"label, same run): {fmt(without)}; ratio "
                  f"{statistics.median(with_dra) / statistics.median(without):.2f}x (target p99 <= 100 ms)")
        if "publisher" in only:
            publisher_figures(args.runs)
        if "rss" in only:
            off = rss("off", args.settle, args.window, tmp)
            on = rss("on", args.settle, args.window, tmp)
            print(f"RSS of run on edge-ai: --dra=off {off:.1f} MiB, --dra=on {on:.1f} MiB, +{on - off:.1f} MiB "
                  "(target within 5 MiB)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
