"""Architecture-aware placement at scale: 1,000 gated pods, 50 distinct images, a real registry.

What runs: Debian's ``docker-registry`` on 127.0.0.1 holding 50 images written offline
(40 two-platform OCI indexes, 10 single-platform manifests whose platform is in the config
blob) and pushed with skopeo; the in-repo API server; 1,000 pods created through the
placement admission policy (1-3 images each, 2,000 image uses); then
``node-feature-agent placement --leader-elect off`` as a process. Reported:

* **drain**: from the controller's start until no pod carries the gate; the floor is the same
  1,000 conditional merge PATCHes sent by one client thread with nothing to resolve;
* **affinity**: every pod checked with the scheduler's NodeAffinity filter against a node of
  each platform; **registry requests** from the registry's own access log: GETs against the
  distinct digests the pods need (an index: itself; a single manifest: itself + its config);
* **RSS** of the controller (peak while draining, and after), against the floor of an idle
  interpreter with the official client's ``ApiClient`` imported;
* **restart**: the controller killed (SIGKILL) with 50 new gated pods waiting, started again
  under the same identity: seconds until all 50 are released (the issue's bound is 5 s);
* **webhook**: AdmissionReview round trips over TLS (one kept-alive connection) with the
  registry stopped: p50/p99.

    .venv/bin/python bench/placement.py            # the figures of bench/README.md
    .venv/bin/python bench/placement.py --pods 200 --images 20
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from kubernetes.client.api_client import ApiClient  # noqa: E402

from agent.placement import podspec  # noqa: E402
from agent.placement.kube import PlacementApi  # noqa: E402
from agent.placement.webhook import WebhookServer  # noqa: E402
from tests.images.layouts import AMD64, ARM64, Layout  # noqa: E402
from tests.images.registries import RegistryProcess, free_port, make_ca, push  # noqa: E402
from tests.placement.harness import gated_pod, node, start_command, write_layout  # noqa: E402
from tests.support.apiserver import FakeApiServer  # noqa: E402
from tests.support.scheduling import feasible_nodes  # noqa: E402

NODES = [node("amd64", "amd64"), node("arm64", "arm64")]


def images(layout: Layout, count: int) -> tuple[dict[str, dict[str, object]], dict[str, tuple[str, ...]], int]:
    """``count`` images: refs, the nodes each may run on, and the distinct digests to fetch."""
    refs: dict[str, dict[str, object]] = {}
    runs_on: dict[str, tuple[str, ...]] = {}
    digests = 0
    for i in range(count):
        name = f"bench{i:02d}"
        if i % 5 == 4:  # single platform: manifest + config blob
            refs[name] = {k: v for k, v in layout.entry(ARM64, name).items() if k != "platform"}
            runs_on[name], digests = ("arm64",), digests + 2
        else:
            refs[name] = layout.index([layout.entry(AMD64, name), layout.entry(ARM64, name)])
            runs_on[name], digests = ("amd64", "arm64"), digests + 1
    return refs, runs_on, digests


def rss_floor() -> float:
    """An idle interpreter with the official client's ApiClient imported, measured as the
    controller is (resident set, psutil)."""
    idle = subprocess.Popen([sys.executable, "-c", "import kubernetes.client.api_client, sys; sys.stdin.read()"],
                            stdin=subprocess.PIPE)
    try:
        time.sleep(3)
        return float(psutil.Process(idle.pid).memory_info().rss / 2**20)
    finally:
        idle.communicate(b"")


def gated_left(server: FakeApiServer, names: list[str]) -> int:
    with server.store.lock:  # read in place: copying 1,000 pods per poll would slow the server under test
        pods = server.store.objects.get("pods", {})
        return sum(1 for n in names if podspec.has_gate(pods[("apps", n)]))


READY: dict[int, float] = {}


def ready_at(port: int) -> float:
    """When the controller's /readyz first answered 200 (polled by ``drain``'s loop)."""
    return READY[port]


def poll_ready(port: int) -> None:
    import urllib.request

    while port not in READY:
        try:
            if urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2).status == 200:
                READY[port] = time.monotonic()
        except OSError:
            time.sleep(0.02)


def drain(server: FakeApiServer, names: list[str], process: psutil.Process | None) -> tuple[float, float]:
    started, peak = time.monotonic(), 0.0
    while gated_left(server, names):
        if process is not None:
            peak = max(peak, process.memory_info().rss / 2**20)
        time.sleep(0.1)
    return time.monotonic() - started, peak


def api_floor(server: FakeApiServer, count: int) -> float:
    """``count`` conditional merge PATCHes of gated pods from one thread: the API's share."""
    api = PlacementApi(ApiClient(server.client_configuration()))
    for i in range(count):
        server.create_pod("apps", {"metadata": {"name": f"floor{i}"}, "spec": {
            "containers": [{"name": "c", "image": "x"}], "schedulingGates": [{"name": podspec.GATE}]}})
    started = time.monotonic()
    for i in range(count):
        pod = api.get_pod("apps", f"floor{i}")
        api.patch_pod("apps", f"floor{i}", podspec.ungate_patch(pod))
    return time.monotonic() - started


def webhook_latency(root: Path, rounds: int) -> tuple[float, float]:
    root.mkdir(parents=True, exist_ok=True)
    ca, cert, key = make_ca(root)
    server = WebhookServer(0, str(cert), str(key), "node-feature-agent", host="127.0.0.1").start()
    body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "operation": "CREATE", "namespace": "apps",
        "object": {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}})
    connection = http.client.HTTPSConnection("127.0.0.1", server.port, context=ssl.create_default_context(cafile=str(ca)))
    times = []
    try:
        for _ in range(rounds):
            started = time.perf_counter()
            connection.request("POST", "/mutate", body, {"Content-Type": "application/json"})
            answer = json.loads(connection.getresponse().read())
            times.append((time.perf_counter() - started) * 1000)
            assert "patch" in answer["response"]
    finally:
        connection.close()
        server.stop()
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.99) - 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--images", type=int, default=50)
    parser.add_argument("--registry-qps", default="10", help="the controller's per-registry request rate (its default: 10)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, FakeApiServer() as server:
        root = Path(tmp)
        layout = write_layout(root / "layout")
        refs, runs_on, distinct = images(layout, args.images)
        layout = write_layout(root / "layout", refs)
        registry = RegistryProcess(root, "registry").start()
        try:
            for name in refs:
                push(layout.root, name, f"{registry.host}/bench/{name}:1")
            names = list(refs)
            server.add_namespace("apps")
            server.kubeconfig(root / "kubeconfig")
            pods, uses = [], 0
            for i in range(args.pods):
                chosen = sorted({names[(i * k * 7) % len(names)] for k in range(1, 1 + i % 3 + 1)})
                uses += len(chosen)
                gated_pod(server, "apps", f"p{i:04d}", [f"{registry.host}/bench/{n}:1" for n in chosen])
                pods.append((f"p{i:04d}", chosen))
            before = len(registry.requests())
            log, port = root / "placement.log", free_port()
            threading.Thread(target=poll_ready, args=(port,), daemon=True).start()
            launched = time.monotonic()
            controller = start_command(root / "kubeconfig", registry.host, "--leader-elect", "off", "--identity", "bench",
                                       "--registry-qps", args.registry_qps, "--metrics-port", str(port), log=log)
            cpu_start = psutil.Process(controller.pid)
            seconds, peak = drain(server, [p for p, _ in pods], psutil.Process(controller.pid))
            cpu = sum(cpu_start.cpu_times()[:2])
            startup = ready_at(port) - launched
            seconds = launched + seconds - ready_at(port)
            after = psutil.Process(controller.pid).memory_info().rss / 2**20
            wrong = 0
            for name, chosen in pods:
                want = sorted(set.intersection(*(set(runs_on[c]) for c in chosen)))
                wrong += feasible_nodes(server.pod("apps", name), NODES) != want
            requests = [r for r in registry.requests()[before:] if r.agent == "node-feature-agent"]
            gets = sum(1 for r in requests if r.method == "GET")
            heads = sum(1 for r in requests if r.method == "HEAD")
            floor = api_floor(server, len(pods))
            controller.send_signal(signal.SIGKILL)
            controller.wait(30)
            restart = [f"r{i:02d}" for i in range(50)]  # five Deployments of ten replicas: five images
            for i, name in enumerate(restart):
                gated_pod(server, "apps", name, [f"{registry.host}/bench/{names[i % 5]}:1"])
            controller = start_command(root / "kubeconfig", registry.host, "--leader-elect", "off", "--identity", "bench",
                                       "--registry-qps", args.registry_qps, log=log)
            restart_seconds, _ = drain(server, restart, None)
            controller.send_signal(signal.SIGTERM)
            controller.wait(30)
        finally:
            registry.stop()
        webhook_p50, webhook_p99 = webhook_latency(root / "tls", 500)
    print(f"pods {len(pods)}, image uses {uses}, distinct images {len(names)}, distinct digests {distinct}")
    print(f"controller start to ready {startup:.2f} s")
    print(f"drain after ready {seconds:.2f} s (controller CPU {cpu:.1f} s); API floor (1 thread, {len(pods)} GET+PATCH) "
          f"{floor:.2f} s, ratio {seconds / floor:.2f}x; registry rate floor ({gets + heads} requests at "
          f"{args.registry_qps}/s after a burst of 20) {max(0.0, (gets + heads - 20) / float(args.registry_qps)):.1f} s")
    print(f"affinity wrong on {wrong} of {len(pods)} pods")
    print(f"registry: {gets} GET (distinct digests {distinct}), {heads} HEAD (tags {len(names)})")
    print(f"controller RSS peak {peak:.1f} MiB, after {after:.1f} MiB; floor (interpreter + ApiClient) {rss_floor():.1f} MiB")
    print(f"restart: 50 gated pods (5 images, cold cache) released {restart_seconds:.2f} s after the controller's "
          "process started")
    print(f"webhook, registry stopped: p50 {webhook_p50:.2f} ms, p99 {webhook_p99:.2f} ms (500 reviews, TLS, keep-alive)")
    print(f"load average {os.getloadavg()[0]:.1f}; threads here {threading.active_count()}")


if __name__ == "__main__":
    main()
