#!/usr/bin/env python3
"""Hotplug -> Node-updated latency, idle API cost and steady memory of the real agent process.

    .venv/bin/python bench/latency.py                  # 200 events, 60 s idle windows
    .venv/bin/python bench/latency.py --events 400 --idle 120

What it does:

1. starts the in-repo API server (bookmarks every 60 s, like a real one; a simulated kubelet
   heartbeat edits the Node's status every 10 s, as kubelet does, which the agent must ignore);
2. starts ``node-feature-agent run`` as a subprocess on a copy of fixtures/sysfs/coral-usb with
   the DaemonSet's settings (debounce 0.15 s, resync 600 s), events through
   ``--udev-mode inject:<socket>`` (kernel uevent wire format, the pyudev path);
3. latency: unplugs / replugs the Coral USB Accelerator in the tree (sysfs entries moved out /
   back) and sends the uevent; the clock runs from the send until a Node watch (the official
   client, a separate connection) shows both the label and the extended resource in the
   expected state. Events are sequential (each waits for the previous to land);
4. idle, default settings: counts every request and write the agent sends during a window;
5. idle, compressed: a second agent with --resync-interval and the watch timeout shortened,
   to measure what each resync and each watch renewal costs; the per-hour figure at default
   settings is scaled from those per-cycle costs (a short window at default settings sees
   no renewal at all and would claim zero, which is not the truth);
6. steady RSS (psutil) and CPU time of the agent during the default-settings idle window.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import psutil  # noqa: E402

from agent.runtime.node_watch import NodeWatcher  # noqa: E402
from agent.runtime.uevent import encode_kernel_uevent  # noqa: E402
from tests.runtime.helpers import CORAL_DEVPATH, CoralHost, has_edgetpu  # noqa: E402
from tests.support.apiserver import FakeApiServer  # noqa: E402

NODE = "bench-node"
DEFAULT_WATCH_TIMEOUT = 900
DEFAULT_RESYNC = 600


class NodeObserver:
    """A watch on the Node from the benchmark side; remembers when each state was first seen."""

    def __init__(self, server: FakeApiServer) -> None:
        self.cond = threading.Condition()
        self.state: tuple[bool, bool] | None = None
        self.seen_at = 0.0
        self.watcher = NodeWatcher(server.core_api(), NODE, self._changed, timeout_seconds=3600)

    def _changed(self, node: dict) -> None:
        now = time.perf_counter()
        with self.cond:
            state = has_edgetpu(node)
            if state != self.state:
                self.state, self.seen_at = state, now
            self.cond.notify_all()

    def wait(self, wanted: tuple[bool, bool], timeout: float = 30.0) -> float | None:
        deadline = time.monotonic() + timeout
        with self.cond:
            while self.state != wanted:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.cond.wait(left)
            return self.seen_at


def start_agent(tmp: Path, server: FakeApiServer, host: CoralHost, sock: str, *extra: str,
                level: str = "warning") -> subprocess.Popen:
    kubeconfig = server.kubeconfig(tmp / "kubeconfig")
    cmd = [sys.executable, "-m", "agent", "--log-format", "json", "--log-level", level, "run",
           f"--host-root={host.root}", f"--rules={REPO / 'labels'}", f"--node-name={NODE}",
           f"--kubeconfig={kubeconfig}", "--metrics-port=0", "--metrics-address=127.0.0.1",
           f"--udev-mode=inject:{sock}", "--startup-jitter=0", "--startup-taint=node-feature-agent.io/not-ready:NoSchedule", *extra]
    log = open(tmp / f"agent-{len(list(tmp.glob('agent-*.log')))}.log", "w")
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=log)
    proc.log_path = Path(log.name)  # type: ignore[attr-defined]
    return proc


def resync_passes(proc: subprocess.Popen, since: float) -> int:
    """Reconcile passes whose trigger included a resync, logged after ``since`` (epoch s)."""
    count = 0
    for line in proc.log_path.read_text().splitlines():  # type: ignore[attr-defined]
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("event") == "reconcile" and "resync" in record.get("msg", ""):
            stamp = time.mktime(time.strptime(record["time"][:19], "%Y-%m-%dT%H:%M:%S")) - time.timezone
            count += stamp >= since - 1
    return count


def stop_agent(proc: subprocess.Popen) -> tuple[int, float]:
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(timeout=30)
    return code, time.monotonic() - started


def wait_file(path: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise SystemExit(f"agent did not create {path}")
        time.sleep(0.05)


def heartbeats(server: FakeApiServer, stop: threading.Event, every: float = 10.0) -> None:
    while not stop.wait(every):
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        try:
            server.edit_node(NODE, lambda n: n["status"]["conditions"][0].update(lastHeartbeatTime=stamp) and None)
        except Exception:
            pass


def agent_requests(server: FakeApiServer) -> list:
    """Requests the agent sent: all, minus the benchmark's own observer watch (timeoutSeconds=3600;
    the observer lists only at start, before the counters are cleared)."""
    return [r for r in server.requests if r.query.get("timeoutSeconds") != "3600"]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, int(round(q / 100 * (len(ordered) - 1)))))
    return ordered[index]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=200, help="plug/unplug events (>= 200 for the issue's figure)")
    parser.add_argument("--idle", type=float, default=60.0, help="seconds of each idle window")
    parser.add_argument("--json", action="store_true", help="also print the figures as JSON")
    args = parser.parse_args(argv)

    tmp = Path(tempfile.mkdtemp(prefix="nfa-bench-"))
    results: dict = {}
    try:
        with FakeApiServer(bookmark_interval=60.0) as server:
            server.add_node(NODE, register_taints=[{"key": "node-feature-agent.io/not-ready", "effect": "NoSchedule"}])
            host = CoralHost(tmp)
            sock = str(tmp / "uevents.sock")
            observer = NodeObserver(server)
            observer.watcher.start()
            proc = start_agent(tmp, server, host, sock)
            stop_beats = threading.Event()
            beats = threading.Thread(target=heartbeats, args=(server, stop_beats), daemon=True)
            beats.start()
            try:
                if observer.wait((True, True), timeout=60) is None:
                    raise SystemExit("agent never labelled the node")
                wait_file(sock)
                sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)

                # -- latency ------------------------------------------------------------------
                latencies = []
                misses = 0
                for i in range(args.events):
                    plug = not host.plugged
                    (host.plug if plug else host.unplug)()
                    sent = time.perf_counter()
                    sender.sendto(encode_kernel_uevent("add" if plug else "remove", CORAL_DEVPATH, "usb", seqnum=i), sock)
                    seen = observer.wait((plug, plug), timeout=30)
                    if seen is None:
                        misses += 1
                        continue
                    latencies.append(seen - sent)
                    time.sleep(0.02)
                sender.close()
                if not host.plugged:
                    host.plug()
                    sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                    sender.sendto(encode_kernel_uevent("add", CORAL_DEVPATH, "usb"), sock)
                    sender.close()
                    observer.wait((True, True), timeout=30)
                results["latency"] = {
                    "events": len(latencies), "missed": misses,
                    "p50_ms": round(statistics.median(latencies) * 1000, 1),
                    "p99_ms": round(percentile(latencies, 99) * 1000, 1),
                    "max_ms": round(max(latencies) * 1000, 1),
                    "debounce_ms": 150,
                }

                # -- idle, default settings ------------------------------------------------------
                time.sleep(2.0)
                agent = psutil.Process(proc.pid)
                server.clear_requests()
                cpu_before = sum(agent.cpu_times()[:2])
                time.sleep(args.idle)
                cpu_used = sum(agent.cpu_times()[:2]) - cpu_before
                sent_idle = agent_requests(server)
                writes = [r for r in sent_idle if r.method in ("PATCH", "PUT", "POST")]
                rss = agent.memory_info().rss
                results["idle_default"] = {
                    "window_s": args.idle, "requests": len(sent_idle), "writes": len(writes),
                    "requests_list": sorted({f"{r.method} {r.path}" for r in sent_idle}),
                    "heartbeats_ignored": int(args.idle // 10),
                    "cpu_s": round(cpu_used, 3), "cpu_s_per_hour": round(cpu_used * 3600 / args.idle, 1),
                }
                results["rss_mib"] = round(rss / 2**20, 1)
                code, took = stop_agent(proc)
                results["sigterm"] = {"exit_code": code, "seconds": round(took, 2)}
            finally:
                stop_beats.set()
                if proc.poll() is None:
                    proc.kill()

            # -- idle, compressed timescale ----------------------------------------------------
            resync, watch_timeout = 10, 15
            sock2 = str(tmp / "uevents2.sock")
            proc = start_agent(tmp, server, host, sock2, f"--resync-interval={resync}", f"--watch-timeout={watch_timeout}",
                               level="info")
            try:
                wait_file(sock2)
                time.sleep(3.0)
                server.clear_requests()
                window_start = time.time()
                time.sleep(args.idle)
                sent = agent_requests(server)
                passes = resync_passes(proc, window_start)
                watches = [r for r in sent if r.query.get("watch") in ("true", "1")]
                others = [r for r in sent if r not in watches]
                writes = [r for r in sent if r.method in ("PATCH", "PUT", "POST")]
                resyncs = max(1, passes)
                renewals = args.idle / watch_timeout
                per_resync = len(others) / resyncs
                per_renewal = len(watches) / renewals
                per_hour = per_resync * 3600 / DEFAULT_RESYNC + per_renewal * 3600 / DEFAULT_WATCH_TIMEOUT
                results["idle_compressed"] = {
                    "window_s": args.idle, "resync_s": resync, "watch_timeout_s": watch_timeout,
                    "resync_passes_logged": passes,
                    "watch_requests": len(watches), "other_requests": len(others), "writes": len(writes),
                    "requests_per_resync": round(per_resync, 2), "requests_per_watch_renewal": round(per_renewal, 2),
                    "projected_requests_per_idle_hour_at_defaults": round(per_hour, 1),
                }
                stop_agent(proc)
            finally:
                if proc.poll() is None:
                    proc.kill()
            observer.watcher.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    lat, idle, comp = results["latency"], results["idle_default"], results["idle_compressed"]
    print(f"hotplug -> Node updated (label + extended resource), {lat['events']} events "
          f"({lat['missed']} missed), debounce {lat['debounce_ms']} ms:")
    print(f"  p50 {lat['p50_ms']} ms   p99 {lat['p99_ms']} ms   max {lat['max_ms']} ms   (target p50 <= 500, p99 <= 2000)")
    print(f"idle at default settings, {idle['window_s']:.0f} s measured (kubelet heartbeat every 10 s):")
    print(f"  {idle['requests']} request(s), {idle['writes']} write(s) {idle['requests_list'] or ''}; "
          f"agent CPU {idle['cpu_s']} s ({idle['cpu_s_per_hour']} s/hour)")
    print(f"idle, compressed (resync {comp['resync_s']} s, watch renewal {comp['watch_timeout_s']} s, "
          f"{comp['window_s']:.0f} s): {comp['watch_requests']} watch + {comp['other_requests']} other request(s), "
          f"{comp['writes']} write(s)")
    print(f"  {comp['resync_passes_logged']} resync passes logged; per resync {comp['requests_per_resync']} requests, "
          f"per watch renewal {comp['requests_per_watch_renewal']}")
    print(f"  projected requests per idle hour at defaults (resync {DEFAULT_RESYNC} s, watch {DEFAULT_WATCH_TIMEOUT} s): "
          f"{comp['projected_requests_per_idle_hour_at_defaults']} (target <= 12, 0 writes)")
    print(f"steady RSS {results['rss_mib']} MiB (target <= 60)")
    print(f"SIGTERM: exit {results['sigterm']['exit_code']} after {results['sigterm']['seconds']} s")
    if args.json:
        print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
