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
- memory of ``node-feature-agent run`` (this venv) on the edge-ai host serving nothing to
  kubelet, as a device plugin and in DRA mode (``MODES``), ``--settle`` s after it serves, one
  sample a second for ``--window`` s, ``--rounds`` runs of each mode interleaved, medians: RSS
  and its anonymous and file-backed parts, private and anonymous pages (``smaps_rollup``) and
  the resident pages of grpcio's and protobuf's shared objects; then, in one process, what
  importing grpcio and the plugin adds to the run loop. The measured processes read compiled
  bytecode, as the image's (a first, uncounted round writes it to a cache of their own).

Prints numbers, asserts nothing.

    .venv/bin/python bench/dra.py --runs 200 --cycles 20 --passes 50
    .venv/bin/python bench/dra.py --only memory --rounds 3    # a part of it
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

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


MODES = ("off", "device-plugin", "dra")
"""``run`` with nothing served to kubelet; with ``--device-plugin=on`` (registered with the
device plugin's kubelet stand-in); with ``--dra=on`` (slices written, the kubelet plugin
registered with the DRA kubelet stand-in and one claim prepared and unprepared). DRA mode has
no setting without its kubelet plugin, so there is no "slices only" figure."""


def footprint(pid: int) -> dict[str, float]:
    """MiB: VmRSS and its anonymous and file-backed parts (/proc/PID/status); private pages
    (Private_Clean + Private_Dirty) and anonymous pages (/proc/PID/smaps_rollup); the resident
    pages of grpcio's and protobuf's shared objects (file-backed text and data, /proc/PID/smaps)."""
    def fields(path: str) -> dict[str, int]:
        out = {}
        for line in Path(path).read_text().splitlines():
            key, _, value = line.partition(":")
            parts = value.split()
            if len(parts) == 2 and parts[1] == "kB":
                out[key] = int(parts[0])
        return out

    status, rollup = fields(f"/proc/{pid}/status"), fields(f"/proc/{pid}/smaps_rollup")
    shared_objects, current = 0, ""
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        head = line.split()
        if head and "-" in head[0] and ":" not in head[0]:
            current = head[5] if len(head) > 5 else ""
        elif head and head[0] == "Rss:" and current.endswith(".so") and ("/grpc/" in current or "/google/" in current):
            shared_objects += int(head[1])
    mib = {"rss": status["VmRSS"], "anon_rss": status["RssAnon"], "file_rss": status["RssFile"],
           "private": rollup["Private_Clean"] + rollup["Private_Dirty"], "anonymous": rollup["Anonymous"],
           "grpc_so": shared_objects}
    return {k: v / 1024 for k, v in mib.items()}


def compiled_env() -> dict[str, str]:
    """The environment of the measured processes: Python may write and read bytecode, in a
    cache of its own, as the image's ``pip install`` compiled it. Compiling a module at import
    leaves its compiler's memory in the heap, which would count as the module's cost."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = os.path.join(tempfile.gettempdir(), "nfa-bench-pycache")
    return env


def run_footprint(mode: str, settle: float, window: float, tmp: Path) -> list[dict[str, float]]:
    """Samples (one a second for ``window`` s, ``settle`` s after the mode is serving) of one
    ``node-feature-agent run`` on edge-ai in ``mode``."""
    from tests.deviceplugin.kubelet_standin import KubeletStandIn
    from tests.support.kubelet_dra import KubeletDra

    agent_bin = Path(sys.executable).parent / "node-feature-agent"
    root = Path(tempfile.mkdtemp(prefix="m-", dir="/tmp"))  # short: unix socket paths < 108 bytes
    kubelet: Any = None
    with FakeApiServer() as server:
        server.add_node(NODE)
        kubeconfig = server.kubeconfig(tmp / "kubeconfig")
        cmd = [str(agent_bin), "--log-level", "warning", "run", f"--host-root={REPO / 'fixtures/sysfs/edge-ai'}",
               f"--rules={REPO / 'labels'}", f"--node-name={NODE}", f"--kubeconfig={kubeconfig}",
               "--metrics-port=0", "--metrics-address=127.0.0.1", "--udev-mode=kernel", "--startup-jitter=0"]
        if mode == "device-plugin":
            (root / "dp").mkdir()
            kubelet = KubeletStandIn(str(root / "dp")).start()
            cmd += ["--device-plugin=on", f"--device-plugin-dir={root / 'dp'}"]
        elif mode == "dra":
            cmd += ["--dra=on", f"--dra-plugin-dir={root / 'p'}", f"--dra-registry-dir={root / 'r'}",
                    f"--cdi-dir={root / 'cdi'}"]
            kubelet = KubeletDra(str(root / "r"), client.ApiClient(server.client_configuration())).start()
        proc = subprocess.Popen(cmd, cwd=tempfile.gettempdir(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                env=compiled_env())
        try:
            wait_for(lambda: EDGETPU_LABEL in (server.node(NODE)["metadata"].get("labels") or {}), timeout=120,
                     what="labelled")
            if mode == "device-plugin":
                kubelet.wait_for(lambda: TPU in kubelet.registered(), timeout=60)
            elif mode == "dra":
                wait_for(lambda: slice_devices(server) == 3, timeout=60, what="slices")
                kubelet.wait_registered(timeout=60)
                device = server.store.list(SLICES)[0][0]["spec"]["devices"][0]["name"]
                uid = kubelet.create_claim("default", "tpu", ["tpu"])["metadata"]["uid"]
                kubelet.allocate("default", "tpu", [{"request": "tpu", "driver": "node-feature-agent.io",
                                                     "pool": NODE, "device": device}])
                answer = kubelet.prepare(("default", "tpu", uid)).claims[uid]
                assert answer.error == "", answer.error
                kubelet.unprepare(("default", "tpu", uid))
            time.sleep(settle)
            samples = []
            for _ in range(max(1, int(window))):
                samples.append(footprint(proc.pid))
                time.sleep(1.0)
            return samples
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
            if kubelet is not None:
                kubelet.stop()
            shutil.rmtree(root, ignore_errors=True)


IMPORT_PROBE = r"""
def step(name):
    kb = {}
    for path in ("/proc/self/status", "/proc/self/smaps_rollup"):
        for line in open(path):
            key, _, value = line.partition(":")
            if key in ("VmRSS", "Anonymous"):
                kb[key] = int(value.split()[0])
    print(name, kb["VmRSS"] / 1024, kb["Anonymous"] / 1024)
import agent.runtime.agent, agent.commands.run
step("run-loop")
import asyncio
step("asyncio")
import grpc
step("grpc")
import google.protobuf.descriptor_pool, google.protobuf.internal.builder
step("protobuf")
import agent.dra.plugin, agent.dra.claims
step("plugin")
"""


def memory_figures(rounds: int, settle: float, window: float, tmp: Path) -> None:
    """Each mode ``rounds`` times, interleaved, after a round that is not counted (it fills the
    bytecode cache); medians over every sample of a mode."""
    samples: dict[str, list[dict[str, float]]] = {m: [] for m in MODES}
    for mode in MODES:
        run_footprint(mode, 0, 1, tmp)
    for _ in range(rounds):
        for mode in MODES:
            samples[mode] += run_footprint(mode, settle, window, tmp)
    median = {m: {k: statistics.median(s[k] for s in samples[m]) for k in samples[m][0]} for m in MODES}
    print(f"memory of run on edge-ai, median of {rounds} x {int(window)} samples per mode, {settle:.0f} s after serving "
          "(MiB; private = Private_Clean + Private_Dirty, anonymous = Anonymous, smaps_rollup; grpc .so = resident "
          "pages of grpcio's and protobuf's shared objects):")
    print(f"{'mode':14s} {'RSS':>6s} {'anon':>6s} {'file':>6s} {'private':>8s} {'anonymous':>9s} {'grpc .so':>8s}"
          "   RSS range")
    for mode in MODES:
        f = median[mode]
        low, high = min(s["rss"] for s in samples[mode]), max(s["rss"] for s in samples[mode])
        print(f"{mode:14s} {f['rss']:6.1f} {f['anon_rss']:6.1f} {f['file_rss']:6.1f} {f['private']:8.1f} "
              f"{f['anonymous']:9.1f} {f['grpc_so']:8.1f}   {low:.1f}-{high:.1f}")
    for mode in MODES[1:]:
        d = {k: median[mode][k] - median["off"][k] for k in median["off"]}
        print(f"{mode} - off: RSS {d['rss']:+.1f}, private {d['private']:+.1f}, anonymous {d['anonymous']:+.1f}, "
              f"file-backed {d['file_rss']:+.1f}, of it grpc/protobuf .so {d['grpc_so']:+.1f} MiB (target: DRA within 5 MiB RSS)")
    d = {k: median["dra"][k] - median["device-plugin"][k] for k in median["off"]}
    print(f"dra - device-plugin: RSS {d['rss']:+.1f}, private {d['private']:+.1f}, anonymous {d['anonymous']:+.1f} MiB")
    for _ in range(2):  # the first fills the bytecode cache
        probe = subprocess.run([sys.executable, "-c", IMPORT_PROBE], capture_output=True, text=True, check=True,
                               cwd=REPO, env=compiled_env())
    steps = {name: (float(r), float(a)) for name, r, a in (line.split() for line in probe.stdout.split("\n") if line)}
    print(f"imports, one process: run loop {steps['run-loop'][0]:.1f} MiB RSS ({steps['run-loop'][1]:.1f} anonymous)")
    names = list(steps)
    for before, after in itertools.pairwise(names):
        what = {"asyncio": "asyncio (grpcio imports it)", "grpc": "the rest of grpcio",
                "protobuf": "protobuf's runtime", "plugin": "agent.dra.plugin and agent.dra.claims, with the "
                "generated registration and v1 messages"}[after]
        print(f"  + {what}: {steps[after][0] - steps[before][0]:+.2f} RSS "
              f"({steps[after][1] - steps[before][1]:+.2f} anonymous)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--cycles", type=int, default=20, help="unplug/plug cycles of the hotplug figure")
    parser.add_argument("--passes", type=int, default=50, help="resync passes of the steady-state request count")
    parser.add_argument("--only", choices=("requests", "hotplug", "publisher", "memory"), action="append")
    parser.add_argument("--settle", type=float, default=10.0)
    parser.add_argument("--window", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3, help="runs of each memory mode")
    args = parser.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="nfa-dra-"))
    only = set(args.only or ("requests", "hotplug", "publisher", "memory"))
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
        if "memory" in only:
            memory_figures(args.rounds, args.settle, args.window, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
